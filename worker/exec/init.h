// Initial parameter values, a pure function of (seed, layer, param).
//
// Weights: uniform in [-limit, limit) from Philox4x32-10 keyed by the job
// seed, with stream ParamStream(layer index, param index) and counter =
// the element's flat row-major index:
//   GLOROT_UNIFORM (default): limit = float(sqrt(6.0 / (fan_in + fan_out)))
//   HE_UNIFORM:               limit = float(sqrt(6.0 / fan_in))
// (sqrt and the division in float64, IEEE, then one rounding to float32;
// each element is canonical::PhiloxUniform(seed, stream, i, -limit, limit)).
// Biases and PARAMETERs initialised with ZEROS are zero, LAYER_NORM /
// BATCH_NORM scales and PARAMETERs with ONES are one. Optimizer state
// starts at zero.
#ifndef LOCKSTEP_WORKER_EXEC_INIT_H_
#define LOCKSTEP_WORKER_EXEC_INIT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/tensor.h"
#include "lockstep/v1/model.pb.h"
#include "model/plan.h"

namespace lockstep::worker {

// High 32 bits of every parameter stream ("PARM"), keeping parameter
// streams apart from data and other Philox users.
inline constexpr uint64_t kParamStreamTag = 0x5041524dull << 32;

// The Philox stream of parameter `param_index` of layer `layer_index`:
// kParamStreamTag | layer_index << 8 | param_index.
inline uint64_t ParamStream(int layer_index, int param_index) {
  return kParamStreamTag | (static_cast<uint64_t>(layer_index) << 8) |
         static_cast<uint64_t>(param_index);
}

// Fills `out` (float32, shaped like param.shape) with the initial value of
// `param`. INVALID_ARGUMENT when fan-in/fan-out make the limit undefined
// (fan_in < 1 for a weight) or `out` does not fit.
absl::Status InitializeParam(uint64_t seed, int layer_index, int param_index,
                             const model::ParamPlan& param,
                             lockstep::v1::Initializer initializer,
                             kernels::Tensor& out);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_EXEC_INIT_H_
