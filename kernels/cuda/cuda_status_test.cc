// LS_CUDA_RETURN_IF_ERROR: CUDA errors become absl::Status naming the call,
// file and line, with the documented codes. Needs no device.
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

#if defined(LOCKSTEP_WITH_CUDA)
#include "kernels/cuda/cuda_status.h"
#endif

namespace lockstep::kernels::cuda {
namespace {

#if defined(LOCKSTEP_WITH_CUDA)

absl::Status Check(cudaError_t err) {
  LS_CUDA_RETURN_IF_ERROR(err);
  return absl::OkStatus();
}

absl::StatusOr<int> CheckOr(cudaError_t err) {
  LS_CUDA_RETURN_IF_ERROR(err);
  return 7;
}

bool Contains(const absl::Status& s, const std::string& part) {
  return std::string(s.message()).find(part) != std::string::npos;
}

TEST(CudaStatusTest, SuccessIsOk) {
  EXPECT_TRUE(Check(cudaSuccess).ok());
  EXPECT_EQ(CheckOr(cudaSuccess).value(), 7);
}

TEST(CudaStatusTest, StickyErrorsMeanTheDeviceIsUnusable) {
  for (cudaError_t err : {cudaErrorIllegalAddress, cudaErrorLaunchFailure,
                          cudaErrorECCUncorrectable, cudaErrorAssert}) {
    const absl::Status s = Check(err);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(Contains(s, "device unusable: ")) << s;
    EXPECT_TRUE(Contains(s, cudaGetErrorName(err))) << s;
  }
}

TEST(CudaStatusTest, MissingDeviceOrDriver) {
  const absl::Status s = Check(cudaErrorInsufficientDriver);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(Contains(s, "no usable CUDA device: ")) << s;
  EXPECT_TRUE(Contains(s, "cudaErrorInsufficientDriver")) << s;
  EXPECT_EQ(Check(cudaErrorNoDevice).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(CudaStatusTest, OtherErrorsAreInternalAndNameCallFileAndLine) {
  const absl::Status s = Check(cudaErrorInvalidValue);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  // The stringified call, then "failed at <file>:<line>".
  EXPECT_TRUE(
      Contains(s, "cuda: err failed at kernels/cuda/cuda_status_test.cc:"))
      << s;
  EXPECT_TRUE(Contains(s, "(cudaErrorInvalidValue)")) << s;
  EXPECT_EQ(CheckOr(cudaErrorMemoryAllocation).status().code(),
            absl::StatusCode::kInternal);
}

#else

TEST(CudaStatusTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace lockstep::kernels::cuda
