// The run-time loaded cuBLAS / cuDNN (vendor_libs.h), no device needed:
// with the toolkit's libraries where the build found them, and (the
// _missing variant, LOCKSTEP_VENDOR_LIBRARY_DIR pointing nowhere) without.
#include "kernels/cudnn/vendor_libs.h"

#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#if defined(LOCKSTEP_WITH_CUDA)
#include <cublas_v2.h>
#include <cudnn.h>

#include "kernels/cudnn/vendor_status.h"
#endif

namespace lockstep::kernels::vendor {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

#if defined(LOCKSTEP_WITH_CUDA)

bool Missing() { return std::getenv(kVendorLibraryDirEnv) != nullptr; }

TEST(VendorLibsTest, LoadedLibrariesAnswerThroughTheShim) {
  if (Missing()) GTEST_SKIP() << "vendor libraries hidden";
  ASSERT_TRUE(VendorLibrariesStatus().ok()) << VendorLibrariesStatus();
  // Host-only calls: no device or driver needed.
  int major = -1;
  ASSERT_EQ(cublasGetProperty(MAJOR_VERSION, &major), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(major, CUBLAS_VER_MAJOR);
  EXPECT_EQ(cudnnGetVersion() / 10000, static_cast<size_t>(CUDNN_MAJOR));
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED),
               "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_STREQ(cudnnGetErrorString(CUDNN_STATUS_SUCCESS),
               "CUDNN_STATUS_SUCCESS");
  cudnnTensorDescriptor_t desc = nullptr;
  ASSERT_EQ(cudnnCreateTensorDescriptor(&desc), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW,
                                       CUDNN_DATA_FLOAT, 1, 2, 3, 4),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnDestroyTensorDescriptor(desc), CUDNN_STATUS_SUCCESS);
}

TEST(VendorLibsTest, MissingLibrariesReportNotInitializedAndWhy) {
  if (!Missing()) GTEST_SKIP() << "vendor libraries present";
  const absl::Status s = VendorLibrariesStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  const std::string dir = std::getenv(kVendorLibraryDirEnv);
  EXPECT_THAT(std::string(s.message()),
              StartsWith("cuBLAS not loaded: " + dir + "/libcublas.so." +
                         std::to_string(CUBLAS_VER_MAJOR) + ": "));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("; cuDNN not loaded: " + dir + "/libcudnn.so." +
                        std::to_string(CUDNN_MAJOR) + ": "));
  EXPECT_EQ(std::string(s.message()).find('\n'), std::string::npos);

  cublasHandle_t handle = nullptr;
  EXPECT_EQ(cublasCreate(&handle), CUBLAS_STATUS_NOT_INITIALIZED);
  int major = -1;
  EXPECT_EQ(cublasGetProperty(MAJOR_VERSION, &major),
            CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(major, -1);
  cudnnHandle_t dnn = nullptr;
  EXPECT_EQ(cudnnCreate(&dnn), CUDNN_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cudnnGetVersion(), 0u);
  EXPECT_THAT(cudnnGetErrorString(CUDNN_STATUS_SUCCESS),
              StartsWith("cuDNN not loaded: "));

  // A kernel's error names the missing library.
  const absl::Status gemm = CublasErrorToStatus(
      CUBLAS_STATUS_NOT_INITIALIZED, "cublasCreate(&handle)", "f.cu", 1);
  EXPECT_THAT(std::string(gemm.message()), HasSubstr("cuBLAS not loaded: "));
  const absl::Status conv = CudnnErrorToStatus(
      CUDNN_STATUS_NOT_INITIALIZED, "cudnnCreate(&handle)", "f.cu", 2);
  EXPECT_THAT(std::string(conv.message()), HasSubstr("cuDNN not loaded: "));
}

#else

TEST(VendorLibsTest, BuiltWithoutCuda) {
  EXPECT_EQ(VendorLibrariesStatus().message(),
            "vendor libraries: built without CUDA");
}

#endif

}  // namespace
}  // namespace lockstep::kernels::vendor
