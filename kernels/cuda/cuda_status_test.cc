// LS_CUDA_RETURN_IF_ERROR: CUDA errors become absl::Status naming the call,
// file and line, with the documented codes. Needs no device.
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
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
  // Says what is needed: with no driver (as here), or an older one.
  const std::string needed =
      absl::StrFormat("CUDA %d.0 or newer", CUDART_VERSION / 1000);
  EXPECT_TRUE(Contains(s, needed)) << s;
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
    EXPECT_TRUE(Contains(s,
                         "no usable CUDA device: no NVIDIA driver: this "
                         "binary needs one supporting CUDA"))
        << s;
  }
  EXPECT_EQ(Check(cudaErrorNoDevice).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(CudaStatusTest, NoKernelImageNamesTheDeviceAndWhatToDo) {
  const absl::Status s = Check(cudaErrorNoKernelImageForDevice);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(Contains(s, "device unusable: ")) << s;
  // No device here: the runtime cannot name it.
  EXPECT_TRUE(Contains(s, "has no kernel image in this binary")) << s;
  EXPECT_TRUE(Contains(s, "rebuild Lockstep for this architecture")) << s;
  EXPECT_TRUE(Contains(s, "(cudaErrorNoKernelImageForDevice)")) << s;
}

TEST(CudaStatusTest, UnsupportedPtxAsksForANewerDriver) {
  const absl::Status s = Check(cudaErrorUnsupportedPtxVersion);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(Contains(s,
                       "device unusable: the NVIDIA driver cannot compile "
                       "this binary's PTX"))
      << s;
  EXPECT_TRUE(Contains(s, ": upgrade the driver")) << s;
  EXPECT_TRUE(Contains(s, "(cudaErrorUnsupportedPtxVersion)")) << s;
}

TEST(CudaStatusTest, NamesTheDeviceAsFarAsTheRuntimeCan) {
  // Here (no driver) the runtime knows no device; with one, "CUDA device N
  // (<name>, sm_XY)".
  const std::string name = CurrentCudaDeviceName();
  EXPECT_TRUE(name == "the current CUDA device" ||
              absl::StartsWith(name, "CUDA device "))
      << name;
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
