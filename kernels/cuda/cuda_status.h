// CUDA runtime errors as absl::Status. Include only from .cu files (needs
// cuda_runtime.h).
//
//   LS_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
//
// returns from the enclosing function (which must return absl::Status or
// absl::StatusOr<T>) with a status naming the call, file and line and the
// CUDA error's name and text. Codes (see cuda_runtime.h): FAILED_PRECONDITION
// for a missing device or driver ("no usable CUDA device: ...") and for
// sticky errors that lose the context ("device unusable: ..."), INTERNAL
// otherwise.
#ifndef LOCKSTEP_KERNELS_CUDA_CUDA_STATUS_H_
#define LOCKSTEP_KERNELS_CUDA_CUDA_STATUS_H_

#include <cuda_runtime.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace lockstep::kernels::cuda {

// Errors after which the CUDA context is unusable: every later call in the
// process fails the same way.
inline bool IsStickyCudaError(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
    case cudaErrorContextIsDestroyed:
      return true;
    default:
      return false;
  }
}

inline bool IsNoDeviceCudaError(cudaError_t err) {
  return err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
         err == cudaErrorInitializationError ||
         err == cudaErrorDevicesUnavailable ||
         err == cudaErrorSystemDriverMismatch ||
         err == cudaErrorCompatNotSupportedOnDevice;
}

inline absl::Status CudaErrorToStatus(cudaError_t err, const char* call,
                                      const char* file, int line) {
  const std::string what =
      absl::StrFormat("%s failed at %s:%d: %s (%s)", call, file, line,
                      cudaGetErrorString(err), cudaGetErrorName(err));
  if (IsStickyCudaError(err)) {
    return absl::FailedPreconditionError("device unusable: " + what);
  }
  // Clear a non-sticky error so that it does not surface at a later call.
  cudaGetLastError();
  if (IsNoDeviceCudaError(err)) {
    return absl::FailedPreconditionError("no usable CUDA device: " + what);
  }
  return absl::InternalError("cuda: " + what);
}

}  // namespace lockstep::kernels::cuda

#define LS_CUDA_RETURN_IF_ERROR(expr)                      \
  do {                                                     \
    const cudaError_t ls_cuda_error_ = (expr);             \
    if (ls_cuda_error_ != cudaSuccess) {                   \
      return ::lockstep::kernels::cuda::CudaErrorToStatus( \
          ls_cuda_error_, #expr, __FILE__, __LINE__);      \
    }                                                      \
  } while (false)

#endif  // LOCKSTEP_KERNELS_CUDA_CUDA_STATUS_H_
