#include "worker/exec/init.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "kernels/random/philox.h"

namespace lockstep::worker {

namespace v1 = ::lockstep::v1;

absl::Status InitializeParam(uint64_t seed, int layer_index, int param_index,
                             const model::ParamPlan& param,
                             v1::Initializer initializer,
                             kernels::Tensor& out) {
  if (out.dtype() != kernels::DType::kFloat32 || out.shape() != param.shape) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "parameter \"%s\": tensor %s does not match its plan shape %s",
        param.name, out.DebugString(), kernels::ShapeString(param.shape)));
  }
  float* w = out.data<float>();
  const int64_t n = out.numel();
  if (param.role == v1::BIAS || param.init_zeros) {
    if (n > 0) std::memset(w, 0, n * sizeof(float));
    return absl::OkStatus();
  }
  if (param.init_ones) {
    for (int64_t i = 0; i < n; ++i) w[i] = 1.0f;
    return absl::OkStatus();
  }
  double denom = 0.0;
  if (initializer == v1::HE_UNIFORM) {
    denom = static_cast<double>(param.fan_in);
  } else {
    denom =
        static_cast<double>(param.fan_in) + static_cast<double>(param.fan_out);
  }
  if (param.fan_in < 1 || param.fan_out < 0 || !(denom >= 1.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "parameter \"%s\": fan_in %d / fan_out %d give no initialiser limit "
        "(fan_in must be >= 1)",
        param.name, param.fan_in, param.fan_out));
  }
  const float limit = static_cast<float>(std::sqrt(6.0 / denom));
  const uint64_t stream = ParamStream(layer_index, param_index);
  for (int64_t i = 0; i < n; ++i) {
    w[i] = canonical::PhiloxUniform(seed, stream, static_cast<uint64_t>(i),
                                    -limit, limit);
  }
  return absl::OkStatus();
}

}  // namespace lockstep::worker
