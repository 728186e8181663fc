// Fault injection: flip one bit of one tensor of one step, to rehearse and
// test divergence detection exactly.
//
//   LS_ASSIGN_OR_RETURN(FaultSpec f, ParseFaultSpec(
//       "step=3,layer=conv1,role=GRAD_WEIGHT,bit=30,element=5"));
//
// The executor flips the bit in memory right after the kernel that produced
// the tensor, before the tensor is fingerprinted or read by anything
// downstream. Thread-safety: pure functions.
#ifndef LOCKSTEP_WORKER_EXEC_FAULT_H_
#define LOCKSTEP_WORKER_EXEC_FAULT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/tensor.h"
#include "lockstep/v1/fingerprint.pb.h"

namespace lockstep::worker {

struct FaultSpec {
  int step = 0;       // 0-based training step
  std::string layer;  // layer name; empty for the batch (INPUT, LABEL)
  lockstep::v1::TensorRole role = lockstep::v1::TENSOR_ROLE_UNSPECIFIED;
  // Entry slot ("input1", "sum", "m", ...). Unset: any slot.
  std::optional<std::string> slot;
  // Step-tensor index (model/manifest.h model::StepTensors) to pick one of
  // several matching entries, e.g. the bias's Adam "m" rather than the
  // weight's. Unset: the first matching entry in execution order.
  std::optional<int> index;
  int64_t element = 0;  // flat row-major element index
  int bit = 0;          // 0 = least significant bit of the element

  // "step=3,layer=conv1,role=GRAD_WEIGHT,bit=30" (+ ",element=E",
  // ",slot=X", ",index=I" when set): ParseFaultSpec's input form.
  std::string ToString() const;
};

// Parses "step=S,layer=L,role=R,bit=B[,element=E][,slot=X][,index=I]".
// Keys in any order, each at most once; role is a TensorRole name
// (case-insensitive, e.g. ACTIVATION, grad_weight); layer may be omitted
// for INPUT and LABEL. INVALID_ARGUMENT naming the key and its limit, e.g.
// "--inject_fault: bit: 40 is outside [0, 31]".
absl::StatusOr<FaultSpec> ParseFaultSpec(absl::string_view text);

// The step tensor the fault hits: the index into `step_tensors` (every
// tensor of a step in execution order). Checks the step against `steps` and
// element/bit against the entry's shape and dtype. INVALID_ARGUMENT naming
// the injection point when nothing matches, listing the layer's entries.
absl::StatusOr<int> ResolveFault(
    const FaultSpec& fault,
    const std::vector<lockstep::v1::ManifestEntry>& step_tensors, int steps);

// Flips bit `bit` of element `element` of `t` (any dtype), in place.
// INVALID_ARGUMENT when out of range.
absl::Status FlipBit(kernels::Tensor& t, int64_t element, int bit);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_EXEC_FAULT_H_
