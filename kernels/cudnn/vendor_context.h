// The per-device library state shared by the vendor runtime's nvcc
// translation units (cublas_gemm.cu, cudnn_conv.cu, atomic_kernels.cu,
// vendor_bench.cu): the device context with its cuBLAS and cuDNN handles,
// and the argument checks and copy-out every kernel function uses. CUDA
// code only (needs the CUDA, cuBLAS and cuDNN headers); not part of the
// library's interface (vendor_runtime.h).
//
// Thread-safety: CurrentContext is thread-safe; every other function
// REQUIRES the context's mu held, as stated on each.
#ifndef LOCKSTEP_KERNELS_CUDNN_VENDOR_CONTEXT_H_
#define LOCKSTEP_KERNELS_CUDNN_VENDOR_CONTEXT_H_

#include <cublas_v2.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "kernels/cuda/device_buffer.h"

namespace lockstep::kernels::vendor::internal {

// One device's library state, created on first use and never destroyed
// (handles outlive every caller; destroying them at exit races the CUDA
// runtime's own teardown).
struct DeviceContext {
  int device = 0;
  int cc_major = 0;
  // Serializes every vendor call on this device; guards the fields below.
  std::mutex mu;
  cublasHandle_t cublas_deterministic = nullptr;
  void* cublas_workspace = nullptr;  // the deterministic handle's
  cublasHandle_t cublas_default = nullptr;
  cudnnHandle_t cudnn = nullptr;
};

// The current device's (cudaGetDevice) context, created on first use.
absl::StatusOr<DeviceContext*> CurrentContext();

// The DETERMINISTIC (atomics not allowed, pedantic math, the fixed
// kCublasWorkspaceBytes workspace) or DEFAULT (atomics allowed, default
// math) cuBLAS handle, created on first use. REQUIRES ctx->mu held.
absl::StatusOr<cublasHandle_t> CublasHandle(DeviceContext* ctx,
                                            bool deterministic);

// The cuDNN handle, created on first use. REQUIRES ctx->mu held.
absl::StatusOr<cudnnHandle_t> CudnnHandle(DeviceContext* ctx);

// Waits for the device, then copies `device` into `host`: the only write to
// a caller's output, after everything else succeeded.
absl::Status SyncAndCopyOut(const cuda::DeviceBuffer& device,
                            absl::Span<float> host);

// INVALID_ARGUMENT "<what>: <name> holds N floats, the shape needs M"
// unless got == want.
absl::Status CheckSize(const char* what, const char* name, size_t got,
                       int64_t want);

// INVALID_ARGUMENT unless mode is DETERMINISTIC or DEFAULT.
absl::Status CheckMode(const char* what, Mode mode);

}  // namespace lockstep::kernels::vendor::internal

#endif  // LOCKSTEP_KERNELS_CUDNN_VENDOR_CONTEXT_H_
