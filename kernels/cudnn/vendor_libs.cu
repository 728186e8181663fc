// The cuBLAS / cuDNN entry points Lockstep calls, forwarded to the libraries
// loaded with dlopen on first use (vendor_libs.h).
//
// To call another entry point, add one line to LS_CUBLAS_ENTRY_POINTS or
// LS_CUDNN_ENTRY_POINTS: X(symbol, (parameters), (arguments)). The symbol is
// the one the library exports (cublasSgemm_v2, not the cublas_v2.h macro
// cublasSgemm); the declaration comes from the library's own header, so a
// parameter list that differs from it does not compile.
#include <cublas_api.h>
#include <cudnn.h>
#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/cudnn/vendor_libs.h"

// clang-format off
#define LS_CUBLAS_ENTRY_POINTS(X) \
  X(cublasCreate_v2, (cublasHandle_t* handle), (handle)) \
  X(cublasDestroy_v2, (cublasHandle_t handle), (handle)) \
  X(cublasGetVersion_v2, (cublasHandle_t handle, int* version), (handle, version)) \
  X(cublasGetProperty, (libraryPropertyType type, int* value), (type, value)) \
  X(cublasGetStatusName, (cublasStatus_t status), (status)) \
  X(cublasGetStatusString, (cublasStatus_t status), (status)) \
  X(cublasSetAtomicsMode, (cublasHandle_t handle, cublasAtomicsMode_t mode), (handle, mode)) \
  X(cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode), (handle, mode)) \
  X(cublasSetPointerMode_v2, (cublasHandle_t handle, cublasPointerMode_t mode), (handle, mode)) \
  X(cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t streamId), (handle, streamId)) \
  X(cublasSetWorkspace_v2, (cublasHandle_t handle, void* workspace, size_t workspaceSizeInBytes), (handle, workspace, workspaceSizeInBytes)) \
  X(cublasSgemm_v2, (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta, float* C, int ldc), (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)) \

#define LS_CUDNN_ENTRY_POINTS(X) \
  X(cudnnConvolutionBackwardData, (cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnTensorDescriptor_t dyDesc, const void *dy, const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdDataAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes, const void *beta, const cudnnTensorDescriptor_t dxDesc, void *dx), (handle, alpha, wDesc, w, dyDesc, dy, convDesc, algo, workSpace, workSpaceSizeInBytes, beta, dxDesc, dx)) \
  X(cudnnConvolutionBackwardFilter, (cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnTensorDescriptor_t dyDesc, const void *dy, const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdFilterAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes, const void *beta, const cudnnFilterDescriptor_t dwDesc, void *dw), (handle, alpha, xDesc, x, dyDesc, dy, convDesc, algo, workSpace, workSpaceSizeInBytes, beta, dwDesc, dw)) \
  X(cudnnConvolutionForward, (cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes, const void *beta, const cudnnTensorDescriptor_t yDesc, void *y), (handle, alpha, xDesc, x, wDesc, w, convDesc, algo, workSpace, workSpaceSizeInBytes, beta, yDesc, y)) \
  X(cudnnCreate, (cudnnHandle_t *handle), (handle)) \
  X(cudnnCreateConvolutionDescriptor, (cudnnConvolutionDescriptor_t *convDesc), (convDesc)) \
  X(cudnnCreateFilterDescriptor, (cudnnFilterDescriptor_t *filterDesc), (filterDesc)) \
  X(cudnnCreateTensorDescriptor, (cudnnTensorDescriptor_t *tensorDesc), (tensorDesc)) \
  X(cudnnDestroy, (cudnnHandle_t handle), (handle)) \
  X(cudnnDestroyConvolutionDescriptor, (cudnnConvolutionDescriptor_t convDesc), (convDesc)) \
  X(cudnnDestroyFilterDescriptor, (cudnnFilterDescriptor_t filterDesc), (filterDesc)) \
  X(cudnnDestroyTensorDescriptor, (cudnnTensorDescriptor_t tensorDesc), (tensorDesc)) \
  X(cudnnFindConvolutionBackwardDataAlgorithmEx, (cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnTensorDescriptor_t dyDesc, const void *dy, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc, void *dx, const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionBwdDataAlgoPerf_t *perfResults, void *workSpace, size_t workSpaceSizeInBytes), (handle, wDesc, w, dyDesc, dy, convDesc, dxDesc, dx, requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes)) \
  X(cudnnFindConvolutionBackwardFilterAlgorithmEx, (cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnTensorDescriptor_t dyDesc, const void *y, const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t dwDesc, void *dw, const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionBwdFilterAlgoPerf_t *perfResults, void *workSpace, size_t workSpaceSizeInBytes), (handle, xDesc, x, dyDesc, y, convDesc, dwDesc, dw, requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes)) \
  X(cudnnFindConvolutionForwardAlgorithmEx, (cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc, void *y, const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults, void *workSpace, size_t workSpaceSizeInBytes), (handle, xDesc, x, wDesc, w, convDesc, yDesc, y, requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes)) \
  X(cudnnGetConvolution2dForwardOutputDim, (const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t inputTensorDesc, const cudnnFilterDescriptor_t filterDesc, int *n, int *c, int *h, int *w), (convDesc, inputTensorDesc, filterDesc, n, c, h, w)) \
  X(cudnnGetConvolutionBackwardDataAlgorithmMaxCount, (cudnnHandle_t handle, int *count), (handle, count)) \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7, (cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc, const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionBwdDataAlgoPerf_t *perfResults), (handle, filterDesc, diffDesc, convDesc, gradDesc, requestedAlgoCount, returnedAlgoCount, perfResults)) \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize, (cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const cudnnTensorDescriptor_t dyDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc, cudnnConvolutionBwdDataAlgo_t algo, size_t *sizeInBytes), (handle, wDesc, dyDesc, convDesc, dxDesc, algo, sizeInBytes)) \
  X(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount, (cudnnHandle_t handle, int *count), (handle, count)) \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7, (cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc, const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionBwdFilterAlgoPerf_t *perfResults), (handle, srcDesc, diffDesc, convDesc, gradDesc, requestedAlgoCount, returnedAlgoCount, perfResults)) \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize, (cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t dyDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t gradDesc, cudnnConvolutionBwdFilterAlgo_t algo, size_t *sizeInBytes), (handle, xDesc, dyDesc, convDesc, gradDesc, algo, sizeInBytes)) \
  X(cudnnGetConvolutionForwardAlgorithmMaxCount, (cudnnHandle_t handle, int *count), (handle, count)) \
  X(cudnnGetConvolutionForwardAlgorithm_v7, (cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc, const cudnnFilterDescriptor_t filterDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t destDesc, const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults), (handle, srcDesc, filterDesc, convDesc, destDesc, requestedAlgoCount, returnedAlgoCount, perfResults)) \
  X(cudnnGetConvolutionForwardWorkspaceSize, (cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnFilterDescriptor_t wDesc, const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc, cudnnConvolutionFwdAlgo_t algo, size_t *sizeInBytes), (handle, xDesc, wDesc, convDesc, yDesc, algo, sizeInBytes)) \
  X(cudnnGetErrorString, (cudnnStatus_t status), (status)) \
  X(cudnnGetLastErrorString, (char *message, size_t max_size), (message, max_size)) \
  X(cudnnGetVersion, (void), ()) \
  X(cudnnSetConvolution2dDescriptor, (cudnnConvolutionDescriptor_t convDesc, int pad_h, int pad_w, int u, int v, int dilation_h, int dilation_w, cudnnConvolutionMode_t mode, cudnnDataType_t computeType), (convDesc, pad_h, pad_w, u, v, dilation_h, dilation_w, mode, computeType)) \
  X(cudnnSetConvolutionGroupCount, (cudnnConvolutionDescriptor_t convDesc, int groupCount), (convDesc, groupCount)) \
  X(cudnnSetConvolutionMathType, (cudnnConvolutionDescriptor_t convDesc, cudnnMathType_t mathType), (convDesc, mathType)) \
  X(cudnnSetFilter4dDescriptor, (cudnnFilterDescriptor_t filterDesc, cudnnDataType_t dataType, cudnnTensorFormat_t format, int k, int c, int h, int w), (filterDesc, dataType, format, k, c, h, w)) \
  X(cudnnSetStream, (cudnnHandle_t handle, cudaStream_t streamId), (handle, streamId)) \
  X(cudnnSetTensor4dDescriptor, (cudnnTensorDescriptor_t tensorDesc, cudnnTensorFormat_t format, cudnnDataType_t dataType, int n, int c, int h, int w), (tensorDesc, format, dataType, n, c, h, w)) \
// clang-format on

namespace lockstep::kernels::vendor {
namespace {

enum class Lib { kCublas, kCudnn };

struct Loaded {
  void* handle = nullptr;
  std::string error;  // "" when loaded
};

Loaded Load(const char* what, const std::string& soname) {
  const char* dir = std::getenv(kVendorLibraryDirEnv);
  const std::string path =
      dir != nullptr && dir[0] != '\0' ? absl::StrCat(dir, "/", soname)
                                       : soname;
  Loaded out;
  dlerror();
  out.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (out.handle == nullptr) {
    const char* why = dlerror();
    out.error = absl::StrCat(what, " not loaded: ",
                             why != nullptr ? why : path + ": dlopen failed");
  }
  return out;
}

// Loaded once per process; function-local statics are initialized
// thread-safely.
const Loaded& Library(Lib lib) {
  if (lib == Lib::kCublas) {
    static const Loaded* const cublas = new Loaded(
        Load("cuBLAS", absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR)));
    return *cublas;
  }
  static const Loaded* const cudnn =
      new Loaded(Load("cuDNN", absl::StrCat("libcudnn.so.", CUDNN_MAJOR)));
  return *cudnn;
}

void* Symbol(Lib lib, const char* name) {
  const Loaded& l = Library(lib);
  return l.handle == nullptr ? nullptr : dlsym(l.handle, name);
}

// What an entry point returns when its library or symbol is missing.
template <typename R>
R Missing(Lib lib);
template <>
cublasStatus_t Missing(Lib) {
  return CUBLAS_STATUS_NOT_INITIALIZED;
}
template <>
cudnnStatus_t Missing(Lib) {
  return CUDNN_STATUS_NOT_INITIALIZED;
}
template <>
size_t Missing(Lib) {
  return 0;
}
template <>
const char* Missing(Lib lib) {
  const Loaded& l = Library(lib);
  return l.error.empty() ? "symbol not found in the loaded library"
                         : l.error.c_str();
}
template <>
void Missing(Lib) {}

template <typename Fn>
struct ReturnOf;
template <typename R, typename... A>
struct ReturnOf<R (*)(A...)> {
  using type = R;
};

#define LS_ENTRY_NAME(name, params, args) #name,
const char* const kCublasEntryPoints[] = {
    LS_CUBLAS_ENTRY_POINTS(LS_ENTRY_NAME)};
const char* const kCudnnEntryPoints[] = {LS_CUDNN_ENTRY_POINTS(LS_ENTRY_NAME)};
#undef LS_ENTRY_NAME

// "" when `lib` loaded and exports every name in `names`.
template <size_t N>
std::string LibraryProblem(Lib lib, const char* const (&names)[N]) {
  const Loaded& l = Library(lib);
  if (!l.error.empty()) return l.error;
  std::vector<const char*> missing;
  for (const char* name : names) {
    if (dlsym(l.handle, name) == nullptr) missing.push_back(name);
  }
  if (missing.empty()) return "";
  return absl::StrCat(lib == Lib::kCublas ? "cuBLAS" : "cuDNN",
                      " lacks entry points: ", absl::StrJoin(missing, ", "));
}

}  // namespace

absl::Status VendorLibrariesStatus() {
  std::vector<std::string> problems;
  for (std::string p : {LibraryProblem(Lib::kCublas, kCublasEntryPoints),
                        LibraryProblem(Lib::kCudnn, kCudnnEntryPoints)}) {
    if (!p.empty()) problems.push_back(std::move(p));
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrJoin(problems, "; "));
}

}  // namespace lockstep::kernels::vendor

// The forwarding definitions, with the libraries' C linkage.
#define LS_FORWARD(lib, name, params, args)                                   \
  extern "C" ::lockstep::kernels::vendor::ReturnOf<decltype(&name)>::type     \
  name params {                                                               \
    using Fn = decltype(&name);                                               \
    using R = ::lockstep::kernels::vendor::ReturnOf<Fn>::type;                \
    static const Fn fn =                                                      \
        reinterpret_cast<Fn>(::lockstep::kernels::vendor::Symbol(lib, #name)); \
    if (fn == nullptr) return ::lockstep::kernels::vendor::Missing<R>(lib);   \
    return fn args;                                                           \
  }
#define LS_FORWARD_CUBLAS(name, params, args) \
  LS_FORWARD(::lockstep::kernels::vendor::Lib::kCublas, name, params, args)
#define LS_FORWARD_CUDNN(name, params, args) \
  LS_FORWARD(::lockstep::kernels::vendor::Lib::kCudnn, name, params, args)

LS_CUBLAS_ENTRY_POINTS(LS_FORWARD_CUBLAS)
LS_CUDNN_ENTRY_POINTS(LS_FORWARD_CUDNN)
