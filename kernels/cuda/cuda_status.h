// CUDA runtime errors as absl::Status. Include only from .cu files (needs
// cuda_runtime.h).
//
//   LS_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
//
// returns from the enclosing function (which must return absl::Status or
// absl::StatusOr<T>) with a status naming the call, file and line and the
// CUDA error's name and text. Codes (see cuda_runtime.h): FAILED_PRECONDITION
// for a missing device or driver ("no usable CUDA device: ..."; a driver
// older than this binary's CUDA says so and names both versions), for
// sticky errors that lose the context ("device unusable: ...") and for a
// device this binary cannot run on ("device unusable: CUDA device 0 (<name>,
// sm_XY) ..." for cudaErrorNoKernelImageForDevice and
// cudaErrorUnsupportedPtxVersion, saying what to do); INTERNAL otherwise.
#ifndef LOCKSTEP_KERNELS_CUDA_CUDA_STATUS_H_
#define LOCKSTEP_KERNELS_CUDA_CUDA_STATUS_H_

#include <cuda_runtime.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "kernels/cuda/cuda_version.h"

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

// "CUDA device 0 (NVIDIA H100 80GB HBM3, sm_90)", as far as the runtime
// can tell.
inline std::string CurrentCudaDeviceName() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return "the current CUDA device";
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return absl::StrFormat("CUDA device %d", device);
  }
  return absl::StrFormat("CUDA device %d (%s, sm_%d%d)", device, prop.name,
                         prop.major, prop.minor);
}

// What to tell the operator for the errors that mean this binary cannot use
// the device or the driver at all; "" for other errors.
inline std::string UnusableDeviceMessage(cudaError_t err) {
  switch (err) {
    case cudaErrorNoKernelImageForDevice:
      return "device unusable: " + CurrentCudaDeviceName() +
             " has no kernel image in this binary (it carries SASS and PTX "
             "only for the architectures it was built for, docs/gpu.md): "
             "rebuild Lockstep for this architecture or use another GPU";
    case cudaErrorUnsupportedPtxVersion:
      return "device unusable: the NVIDIA driver cannot compile this "
             "binary's PTX (CUDA " +
             CudaVersionString(CUDART_VERSION) + ") for " +
             CurrentCudaDeviceName() + ": upgrade the driver";
    case cudaErrorInsufficientDriver: {
      int driver = 0;
      if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
      const std::string problem = DriverVersionProblem(driver, CUDART_VERSION);
      return problem.empty() ? "" : "no usable CUDA device: " + problem;
    }
    default:
      return "";
  }
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
  if (const std::string unusable = UnusableDeviceMessage(err);
      !unusable.empty()) {
    return absl::FailedPreconditionError(unusable + "; " + what);
  }
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
