#include "kernels/cuda/cuda_backend.h"

#include <array>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cuda/plan.h"
#include "kernels/graph_ops.h"

namespace lockstep::kernels {
namespace {

// The ops, in registration order; a kernel is CudaKernel<index>.
constexpr const char* kOps[] = {
    op::kDenseForward,
    op::kDenseGradInput,
    op::kDenseGradWeight,
    op::kBiasAddForward,
    op::kBiasAddGrad,
    op::kReluForward,
    op::kReluGrad,
    op::kFlatten,
    op::kAddForward,
    op::kAddGrad,
    op::kSoftmaxXentForward,
    op::kSoftmaxXentGrad,
    op::kSgdUpdate,
    op::kMomentumUpdate,
    op::kAdamUpdate,
    op::kConv2dForward,
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
    op::kConvTranspose2dGradWeight,
    op::kSigmoidForward,
    op::kSigmoidGrad,
    op::kTanhForward,
    op::kTanhGrad,
    op::kSiluForward,
    op::kSiluGrad,
    op::kGeluForward,
    op::kGeluGrad,
    op::kGeluTanhForward,
    op::kGeluTanhGrad,
    op::kSoftmaxForward,
    op::kSoftmaxGrad,
    op::kLayerNormForward,
    op::kLayerNormGradInput,
    op::kLayerNormGradParams,
    op::kBatchNormForward,
    op::kBatchNormGradInput,
    op::kBatchNormGradParams,
    op::kAdamWUpdate,
    op::kGradNormSumSquares,
    op::kGradNormScale,
    op::kEmbeddingForward,
    op::kEmbeddingGradWeight,
    op::kDropoutForward,
    op::kDropoutGrad,
    op::kMatMulForward,
    op::kMatMulGrad,
    op::kTranspose,
    op::kReshape,
    // Op set v3: GraphElementwiseOpNames() (in AllOpNames()) and
    // GraphDataOpNames().
    op::kBinaryForward,
    op::kBinaryGrad,
    op::kUnaryForward,
    op::kUnaryGrad,
    op::kCompare,
    op::kWhereForward,
    op::kWhereGrad,
    op::kReduceForward,
    op::kReduceGrad,
    op::kConstant,
    op::kParameterForward,
    op::kParameterGrad,
    op::kGatherForward,
    op::kGatherGrad,
    op::kSliceForward,
    op::kSliceGrad,
    op::kConcatForward,
    op::kConcatGrad,
};
constexpr size_t kNumOps = sizeof(kOps) / sizeof(kOps[0]);

template <size_t kIndex>
absl::Status CudaKernel(absl::Span<const Tensor> inputs,
                        absl::Span<Tensor> outputs, const OpAttrs& attrs) {
  LS_ASSIGN_OR_RETURN(cuda::DeviceCall call,
                      cuda::PlanCanonicalOp(kOps[kIndex], inputs, outputs,
                                            attrs, cuda::DevicePlanOptions()));
  return cuda::RunOnDevice(call, cuda::LaunchConfig{});
}

template <size_t... kIndex>
constexpr std::array<KernelFn, kNumOps> MakeKernels(
    std::index_sequence<kIndex...>) {
  return {&CudaKernel<kIndex>...};
}

}  // namespace

absl::Status RegisterCudaCanonicalKernels(Registry* registry) {
  if (!cuda::BuiltWithCuda()) {
    return absl::FailedPreconditionError("cuda backend: built without CUDA");
  }
  static constexpr std::array<KernelFn, kNumOps> kKernels =
      MakeKernels(std::make_index_sequence<kNumOps>());
  for (size_t i = 0; i < kNumOps; ++i) {
    LS_RETURN_IF_ERROR(
        registry->Register(KernelKey{kOps[i], Mode::kCanonical,
                                     kCanonicalAlgorithm, kCudaBackendName},
                           kKernels[i]));
  }
  return absl::OkStatus();
}

}  // namespace lockstep::kernels
