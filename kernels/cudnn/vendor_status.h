// cuBLAS and cuDNN errors as absl::Status, in the manner of
// LS_CUDA_RETURN_IF_ERROR (kernels/cuda/cuda_status.h).
//
//   LS_CUBLAS_RETURN_IF_ERROR(cublasSgemm(handle, ...));
//   LS_CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(handle, ...));
//
// return from the enclosing function (absl::Status or absl::StatusOr<T>)
// with a status naming the call, file and line and the library's error name
// and text. The macros expand only where cublas_v2.h / cudnn.h are
// included (the .cu files); this header itself needs no CUDA headers, and
// the functions below take the library status as an int, so host code and
// tests can call them.
//
// A library call that fails may do so because the device is gone, so the
// CUDA runtime is asked (cudaDeviceSynchronize) which:
//   sticky device error        FAILED_PRECONDITION "device unusable: ..."
//   no device / no driver      FAILED_PRECONDITION "no usable CUDA device: ..."
//   *_NOT_SUPPORTED*           UNIMPLEMENTED "cublas: ..." / "cudnn: ..."
//   anything else              INTERNAL "cublas: ..." / "cudnn: ..."
// In a build without CUDA the functions return FAILED_PRECONDITION
// "cudnn backend: built without CUDA".
#ifndef LOCKSTEP_KERNELS_CUDNN_VENDOR_STATUS_H_
#define LOCKSTEP_KERNELS_CUDNN_VENDOR_STATUS_H_

#include <string>

#include "absl/status/status.h"

namespace lockstep::kernels::vendor {

// The status of a failed library call. library: "cublas" or "cudnn";
// error_name / error_text: the library's name and description of its
// status (the text is left out when empty or equal to the name);
// not_supported: the library reported an unsupported configuration.
absl::Status VendorErrorToStatus(const char* library,
                                 const std::string& error_name,
                                 const std::string& error_text,
                                 bool not_supported, const char* call,
                                 const char* file, int line);

// `status` is a cublasStatus_t: name and text from cublasGetStatusName /
// cublasGetStatusString.
absl::Status CublasErrorToStatus(int status, const char* call, const char* file,
                                 int line);

// `status` is a cudnnStatus_t: name from cudnnGetErrorString, text from
// cudnnGetLastErrorString (the calling thread's last cuDNN error).
absl::Status CudnnErrorToStatus(int status, const char* call, const char* file,
                                int line);

}  // namespace lockstep::kernels::vendor

#define LS_CUBLAS_RETURN_IF_ERROR(expr)                                    \
  do {                                                                     \
    const cublasStatus_t ls_cublas_status_ = (expr);                       \
    if (ls_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                      \
      return ::lockstep::kernels::vendor::CublasErrorToStatus(             \
          static_cast<int>(ls_cublas_status_), #expr, __FILE__, __LINE__); \
    }                                                                      \
  } while (false)

#define LS_CUDNN_RETURN_IF_ERROR(expr)                                    \
  do {                                                                    \
    const cudnnStatus_t ls_cudnn_status_ = (expr);                        \
    if (ls_cudnn_status_ != CUDNN_STATUS_SUCCESS) {                       \
      return ::lockstep::kernels::vendor::CudnnErrorToStatus(             \
          static_cast<int>(ls_cudnn_status_), #expr, __FILE__, __LINE__); \
    }                                                                     \
  } while (false)

#endif  // LOCKSTEP_KERNELS_CUDNN_VENDOR_STATUS_H_
