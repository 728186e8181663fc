// LS_CUBLAS_RETURN_IF_ERROR / LS_CUDNN_RETURN_IF_ERROR: library errors
// become absl::Status naming the call, file and line, with the documented
// codes. Needs no device: without one every library error is reported as
// "no usable CUDA device", and the expectations below follow
// CudaDeviceStatus().
#include "kernels/cudnn/vendor_status.h"

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cudnn/vendor_runtime.h"

namespace lockstep::kernels::vendor {
namespace {

// Stand-ins for the library status types the macros name, with the values
// of cublas_api.h and cudnn_graph.h (this file is compiled without the CUDA
// headers).
enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cudnnStatus_t {
  CUDNN_STATUS_SUCCESS = 0,
  CUDNN_STATUS_BAD_PARAM = 2000,
  CUDNN_STATUS_NOT_SUPPORTED_SHAPE = 3002,
  CUDNN_STATUS_EXECUTION_FAILED = 5000,
};

absl::Status CheckCublas(cublasStatus_t s) {
  LS_CUBLAS_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

absl::StatusOr<int> CheckCudnnOr(cudnnStatus_t s) {
  LS_CUDNN_RETURN_IF_ERROR(s);
  return 7;
}

bool Contains(const absl::Status& s, const std::string& part) {
  return std::string(s.message()).find(part) != std::string::npos;
}

class VendorStatusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!VendorBuiltWithCuda()) {
      GTEST_SKIP() << "built without CUDA: no library to name errors";
    }
    has_device_ = cuda::CudaDeviceStatus().ok();
  }
  // The code a library error gets here: without a device, the device's
  // state decides before the library's error does.
  absl::StatusCode Expected(absl::StatusCode with_device) const {
    return has_device_ ? with_device : absl::StatusCode::kFailedPrecondition;
  }
  bool has_device_ = false;
};

TEST_F(VendorStatusTest, SuccessIsOk) {
  EXPECT_TRUE(CheckCublas(CUBLAS_STATUS_SUCCESS).ok());
  EXPECT_EQ(CheckCudnnOr(CUDNN_STATUS_SUCCESS).value(), 7);
}

TEST_F(VendorStatusTest, CublasErrorsNameTheCallFileLineAndStatus) {
  const absl::Status s = CheckCublas(CUBLAS_STATUS_EXECUTION_FAILED);
  EXPECT_EQ(s.code(), Expected(absl::StatusCode::kInternal)) << s;
  EXPECT_TRUE(Contains(s, "s failed at ")) << s;  // the stringified call
  EXPECT_TRUE(Contains(s, "vendor_status_test.cc:")) << s;
  EXPECT_TRUE(Contains(s, "CUBLAS_STATUS_EXECUTION_FAILED")) << s;
  if (has_device_) {
    EXPECT_TRUE(Contains(s, "cublas: ")) << s;
  } else {
    EXPECT_TRUE(Contains(s, "no usable CUDA device: ")) << s;
    EXPECT_TRUE(Contains(s, "cudaDeviceSynchronize: ")) << s;
  }
}

TEST_F(VendorStatusTest, CudnnErrorsNameTheCallFileLineAndStatus) {
  const absl::Status s = CheckCudnnOr(CUDNN_STATUS_EXECUTION_FAILED).status();
  EXPECT_EQ(s.code(), Expected(absl::StatusCode::kInternal)) << s;
  EXPECT_TRUE(Contains(s, "s failed at ")) << s;
  EXPECT_TRUE(Contains(s, "vendor_status_test.cc:")) << s;
  EXPECT_TRUE(Contains(s, "CUDNN_STATUS_EXECUTION_FAILED")) << s;
}

TEST_F(VendorStatusTest, NotSupportedIsUnimplementedOtherErrorsInternal) {
  EXPECT_EQ(CheckCublas(CUBLAS_STATUS_NOT_SUPPORTED).code(),
            Expected(absl::StatusCode::kUnimplemented));
  EXPECT_EQ(CheckCudnnOr(CUDNN_STATUS_NOT_SUPPORTED_SHAPE).status().code(),
            Expected(absl::StatusCode::kUnimplemented));
  EXPECT_EQ(CheckCudnnOr(CUDNN_STATUS_BAD_PARAM).status().code(),
            Expected(absl::StatusCode::kInternal));
}

TEST_F(VendorStatusTest, HelperFormatsNameAndText) {
  const absl::Status s =
      VendorErrorToStatus("cudnn", "CUDNN_STATUS_X", "what went wrong", false,
                          "cudnnCall(a, b)", "f.cu", 12);
  EXPECT_TRUE(Contains(s,
                       "cudnnCall(a, b) failed at f.cu:12: what went "
                       "wrong (CUDNN_STATUS_X)"))
      << s;
  const absl::Status same = VendorErrorToStatus(
      "cudnn", "CUDNN_STATUS_X", "CUDNN_STATUS_X", false, "c()", "f.cu", 1);
  EXPECT_TRUE(Contains(same, "c() failed at f.cu:1: CUDNN_STATUS_X")) << same;
  EXPECT_FALSE(Contains(same, "(CUDNN_STATUS_X)")) << same;
  if (has_device_) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
    EXPECT_TRUE(Contains(s, "cudnn: cudnnCall")) << s;
  }
}

}  // namespace
}  // namespace lockstep::kernels::vendor
