#include "kernels/backend.h"

#include <utility>

#include "absl/strings/str_format.h"

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
  return {op::kConv2dForward,
          op::kConv2dGradInput,
          op::kConv2dGradWeight,
          op::kMaxPool2dForward,
          op::kMaxPool2dGrad,
          op::kAvgPool2dForward,
          op::kAvgPool2dGrad,
          op::kGlobalAvgPoolForward,
          op::kGlobalAvgPoolGrad,
          op::kResizeBilinearForward,
          op::kResizeBilinearGrad,
          op::kConvTranspose2dForward,
          op::kConvTranspose2dGradInput,
          op::kConvTranspose2dGradWeight};
}

std::vector<std::string> NnOpNames() {
  return {op::kSigmoidForward,      op::kSigmoidGrad,
          op::kTanhForward,         op::kTanhGrad,
          op::kSiluForward,         op::kSiluGrad,
          op::kGeluForward,         op::kGeluGrad,
          op::kGeluTanhForward,     op::kGeluTanhGrad,
          op::kSoftmaxForward,      op::kSoftmaxGrad,
          op::kLayerNormForward,    op::kLayerNormGradInput,
          op::kLayerNormGradParams, op::kBatchNormForward,
          op::kBatchNormGradInput,  op::kBatchNormGradParams,
          op::kAdamWUpdate,         op::kGradNormSumSquares,
          op::kGradNormScale,       op::kEmbeddingForward,
          op::kEmbeddingGradWeight, op::kDropoutForward,
          op::kDropoutGrad};
}

std::vector<std::string> TransformerOpNames() {
  return {op::kMatMulForward, op::kMatMulGrad, op::kTranspose, op::kReshape};
}

std::vector<std::string> GraphElementwiseOpNames() {
  return {op::kBinaryForward, op::kBinaryGrad,    op::kUnaryForward,
          op::kUnaryGrad,     op::kCompare,       op::kWhereForward,
          op::kWhereGrad,     op::kReduceForward, op::kReduceGrad};
}

std::vector<std::string> AllOpNames() {
  std::vector<std::string> all = DenseFamilyOpNames();
  for (std::string& s : SpatialOpNames()) all.push_back(std::move(s));
  for (std::string& s : NnOpNames()) all.push_back(std::move(s));
  for (std::string& s : TransformerOpNames()) all.push_back(std::move(s));
  for (std::string& s : GraphElementwiseOpNames()) all.push_back(std::move(s));
  return all;
}

absl::Status CheckNoAlias(absl::string_view op, absl::Span<const Tensor> in,
                          absl::Span<Tensor> out) {
  for (size_t o = 0; o < out.size(); ++o) {
    for (size_t i = 0; i < in.size(); ++i) {
      if (out[o].SharesStorageWith(in[i])) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: output %d shares storage with input %d", op, o, i));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep::kernels
