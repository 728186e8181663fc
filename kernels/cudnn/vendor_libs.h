// cuBLAS and cuDNN, loaded at run time. The binaries that use them do not
// link them (no DT_NEEDED entry), so one binary starts on nodes without
// them: vendor_libs.cu defines every cuBLAS / cuDNN entry point Lockstep
// calls, each resolving the library's own symbol with dlopen/dlsym on first
// use (thread-safe) and, where the library or the symbol is missing,
// returning the library's "not initialized" status
// (CUBLAS_STATUS_NOT_INITIALIZED, CUDNN_STATUS_NOT_INITIALIZED; error-string
// functions return the load error).
//
// The libraries are looked up by soname (libcublas.so.<CUBLAS_VER_MAJOR>,
// libcudnn.so.<CUDNN_MAJOR>: libcublas.so.13, libcudnn.so.9) through the
// loader's usual search path and the toolkit's lib64 found at build time; or,
// where LOCKSTEP_VENDOR_LIBRARY_DIR is set, only in that directory.
// libcublasLt is loaded by libcublas (its own DT_NEEDED), cuDNN's
// sub-libraries by libcudnn.
//
// Built by nvcc where the CUDA toolkit was found; elsewhere the fallback
// reports "built without CUDA".
#ifndef LOCKSTEP_KERNELS_CUDNN_VENDOR_LIBS_H_
#define LOCKSTEP_KERNELS_CUDNN_VENDOR_LIBS_H_

#include "absl/status/status.h"

namespace lockstep::kernels::vendor {

// The variable that, when set, names the only directory the vendor
// libraries are loaded from.
inline constexpr char kVendorLibraryDirEnv[] = "LOCKSTEP_VENDOR_LIBRARY_DIR";

// OK when cuBLAS and cuDNN loaded and define every entry point Lockstep
// calls; otherwise FAILED_PRECONDITION with one line naming each library
// that did not load and why (the loader's message), e.g.
//   "cuBLAS not loaded: libcublas.so.13: cannot open shared object file: No
//   such file or directory"
// or "vendor libraries: built without CUDA". Loads the libraries on the
// first call; later calls return the same result. Creates no CUDA context.
absl::Status VendorLibrariesStatus();

}  // namespace lockstep::kernels::vendor

#endif  // LOCKSTEP_KERNELS_CUDNN_VENDOR_LIBS_H_
