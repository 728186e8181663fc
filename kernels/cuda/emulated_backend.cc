#include "kernels/cuda/emulated_backend.h"

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "kernels/backend.h"
#include "kernels/cuda/plan.h"

namespace lockstep::kernels::cuda {
namespace {

// Kernels are plain function pointers: one instantiation per position in
// CudaCanonicalOpNames(), up to kMaxOps.
constexpr size_t kMaxOps = 128;

const std::vector<std::string>& Ops() {
  static const std::vector<std::string>* ops =
      new std::vector<std::string>(CudaCanonicalOpNames());
  return *ops;
}

template <size_t kIndex>
absl::Status EmulatedKernel(absl::Span<const Tensor> inputs,
                            absl::Span<Tensor> outputs, const OpAttrs& attrs) {
  LS_ASSIGN_OR_RETURN(DeviceCall call,
                      PlanCanonicalOp(Ops()[kIndex], inputs, outputs, attrs));
  return RunEmulated(call, LaunchConfig{3, 64});
}

template <size_t... kIndex>
constexpr std::array<KernelFn, kMaxOps> MakeKernels(
    std::index_sequence<kIndex...>) {
  return {&EmulatedKernel<kIndex>...};
}

}  // namespace

absl::Status RegisterEmulatedCudaKernels(Registry* registry) {
  static constexpr std::array<KernelFn, kMaxOps> kKernels =
      MakeKernels(std::make_index_sequence<kMaxOps>());
  if (Ops().size() > kMaxOps) {
    return absl::InternalError(absl::StrFormat(
        "emulated cuda backend: %d ops, room for %d", Ops().size(), kMaxOps));
  }
  for (size_t i = 0; i < Ops().size(); ++i) {
    LS_RETURN_IF_ERROR(
        registry->Register(KernelKey{Ops()[i], Mode::kCanonical,
                                     kCanonicalAlgorithm, kCudaBackendName},
                           kKernels[i]));
  }
  return absl::OkStatus();
}

}  // namespace lockstep::kernels::cuda
