// cuBLAS and cuDNN errors as absl::Status (vendor_status.h): the library's
// error name and text, the failed call and its file:line, and whether the
// device itself is gone.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cudnn/vendor_status.h"

namespace lockstep::kernels::vendor {

absl::Status VendorErrorToStatus(const char* library,
                                 const std::string& error_name,
                                 const std::string& error_text,
                                 bool not_supported, const char* call,
                                 const char* file, int line) {
  std::string what = absl::StrFormat("%s failed at %s:%d: ", call, file, line);
  if (error_text.empty() || error_text == error_name) {
    what += error_name;
  } else {
    what += absl::StrFormat("%s (%s)", error_text, error_name);
  }
  const cudaError_t device = cudaDeviceSynchronize();
  if (device != cudaSuccess) {
    const std::string cuda_error =
        absl::StrFormat("; cudaDeviceSynchronize: %s (%s)",
                        cudaGetErrorString(device), cudaGetErrorName(device));
    if (cuda::IsStickyCudaError(device)) {
      return absl::FailedPreconditionError("device unusable: " + what +
                                           cuda_error);
    }
    cudaGetLastError();  // not sticky: clear it for later calls
    if (cuda::IsNoDeviceCudaError(device)) {
      return absl::FailedPreconditionError("no usable CUDA device: " + what +
                                           cuda_error);
    }
  }
  if (not_supported) {
    return absl::UnimplementedError(absl::StrFormat("%s: %s", library, what));
  }
  return absl::InternalError(absl::StrFormat("%s: %s", library, what));
}

absl::Status CublasErrorToStatus(int status, const char* call, const char* file,
                                 int line) {
  const auto s = static_cast<cublasStatus_t>(status);
  return VendorErrorToStatus(
      "cublas", cublasGetStatusName(s), cublasGetStatusString(s),
      s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_ARCH_MISMATCH,
      call, file, line);
}

absl::Status CudnnErrorToStatus(int status, const char* call, const char* file,
                                int line) {
  const auto s = static_cast<cudnnStatus_t>(status);
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  return VendorErrorToStatus(
      "cudnn", cudnnGetErrorString(s), detail,
      CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED, call, file,
      line);
}

}  // namespace lockstep::kernels::vendor
