#include "kernels/backend.h"

namespace lockstep::kernels {

absl::string_view ModeName(Mode mode) {
  switch (mode) {
    case Mode::kCanonical:
      return "CANONICAL";
    case Mode::kDeterministic:
      return "DETERMINISTIC";
    case Mode::kDefault:
      return "DEFAULT";
  }
  return "UNKNOWN_MODE";
}

std::vector<std::string> DenseFamilyOpNames() {
  return {op::kDenseForward,       op::kDenseGradInput,
          op::kDenseGradWeight,    op::kBiasAddForward,
          op::kBiasAddGrad,        op::kReluForward,
          op::kReluGrad,           op::kFlatten,
          op::kAddForward,         op::kAddGrad,
          op::kSoftmaxXentForward, op::kSoftmaxXentGrad,
          op::kSgdUpdate,          op::kMomentumUpdate,
          op::kAdamUpdate};
}

std::vector<std::string> SpatialOpNames() {
  return {op::kConv2dForward,     op::kConv2dGradInput,
          op::kConv2dGradWeight,  op::kMaxPool2dForward,
          op::kMaxPool2dGrad,     op::kAvgPool2dForward,
          op::kAvgPool2dGrad,     op::kGlobalAvgPoolForward,
          op::kGlobalAvgPoolGrad, op::kResizeBilinearForward,
          op::kResizeBilinearGrad};
}

}  // namespace lockstep::kernels
