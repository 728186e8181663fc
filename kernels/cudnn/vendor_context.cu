// The device context (vendor_context.h): per-device cuBLAS and cuDNN
// handles created on first use, and the argument checks and copy-out shared
// by the vendor runtime's kernel functions.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cudnn/vendor_context.h"
#include "kernels/cudnn/vendor_runtime.h"
#include "kernels/cudnn/vendor_status.h"

namespace lockstep::kernels::vendor::internal {

using ::lockstep::kernels::cuda::DeviceBuffer;

absl::StatusOr<DeviceContext*> CurrentContext() {
  int device = 0;
  LS_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  static std::mutex* const mu = new std::mutex;
  static auto* const contexts =
      new std::map<int, std::unique_ptr<DeviceContext>>;
  std::lock_guard<std::mutex> lock(*mu);
  std::unique_ptr<DeviceContext>& slot = (*contexts)[device];
  if (slot == nullptr) {
    int major = 0;
    LS_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(
        &major, cudaDevAttrComputeCapabilityMajor, device));
    auto ctx = std::make_unique<DeviceContext>();
    ctx->device = device;
    ctx->cc_major = major;
    slot = std::move(ctx);
  }
  return slot.get();
}

namespace {

absl::Status ConfigureCublas(DeviceContext* ctx, cublasHandle_t h,
                             bool deterministic) {
  // cublasSetStream resets the workspace to cuBLAS's pool: stream first.
  LS_CUBLAS_RETURN_IF_ERROR(cublasSetStream(h, nullptr));
  LS_CUBLAS_RETURN_IF_ERROR(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  if (!deterministic) {
    LS_CUBLAS_RETURN_IF_ERROR(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_ALLOWED));
    LS_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    return absl::OkStatus();
  }
  LS_CUBLAS_RETURN_IF_ERROR(
      cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED));
  LS_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
  if (ctx->cublas_workspace == nullptr) {
    LS_CUDA_RETURN_IF_ERROR(
        cudaMalloc(&ctx->cublas_workspace, kCublasWorkspaceBytes));
  }
  LS_CUBLAS_RETURN_IF_ERROR(
      cublasSetWorkspace(h, ctx->cublas_workspace, kCublasWorkspaceBytes));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<cublasHandle_t> CublasHandle(DeviceContext* ctx,
                                            bool deterministic) {
  cublasHandle_t& slot =
      deterministic ? ctx->cublas_deterministic : ctx->cublas_default;
  if (slot != nullptr) return slot;
  cublasHandle_t h = nullptr;
  LS_CUBLAS_RETURN_IF_ERROR(cublasCreate(&h));
  if (absl::Status s = ConfigureCublas(ctx, h, deterministic); !s.ok()) {
    cublasDestroy(h);
    return s;
  }
  slot = h;
  return slot;
}

absl::StatusOr<cudnnHandle_t> CudnnHandle(DeviceContext* ctx) {
  if (ctx->cudnn != nullptr) return ctx->cudnn;
  cudnnHandle_t h = nullptr;
  LS_CUDNN_RETURN_IF_ERROR(cudnnCreate(&h));
  if (const cudnnStatus_t e = cudnnSetStream(h, nullptr);
      e != CUDNN_STATUS_SUCCESS) {
    absl::Status s = CudnnErrorToStatus(
        static_cast<int>(e), "cudnnSetStream(h, nullptr)", __FILE__, __LINE__);
    cudnnDestroy(h);
    return s;
  }
  ctx->cudnn = h;
  return h;
}

absl::Status SyncAndCopyOut(const DeviceBuffer& device,
                            absl::Span<float> host) {
  LS_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  if (!host.empty()) {
    LS_CUDA_RETURN_IF_ERROR(cudaMemcpy(host.data(), device.get(),
                                       host.size() * sizeof(float),
                                       cudaMemcpyDeviceToHost));
  }
  return absl::OkStatus();
}

absl::Status CheckSize(const char* what, const char* name, size_t got,
                       int64_t want) {
  if (want < 0 || got != static_cast<size_t>(want)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s holds %d floats, the shape needs %d", what, name, got, want));
  }
  return absl::OkStatus();
}

absl::Status CheckMode(const char* what, Mode mode) {
  if (mode != Mode::kDeterministic && mode != Mode::kDefault) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: mode must be DETERMINISTIC or DEFAULT, got %s",
                        what, ModeName(mode)));
  }
  return absl::OkStatus();
}

}  // namespace lockstep::kernels::vendor::internal

namespace lockstep::kernels::vendor {

bool VendorBuiltWithCuda() { return true; }

}  // namespace lockstep::kernels::vendor
