#include "kernels/cuda/cuda_version.h"

#include "gtest/gtest.h"

namespace lockstep::kernels::cuda {
namespace {

TEST(CudaVersionTest, SameOrNewerMajorIsEnough) {
  EXPECT_EQ(DriverVersionProblem(13000, 13000), "");
  EXPECT_EQ(DriverVersionProblem(13000, 13020), "");  // minor version compat
  EXPECT_EQ(DriverVersionProblem(13020, 13000), "");
  EXPECT_EQ(DriverVersionProblem(14000, 13000), "");
}

TEST(CudaVersionTest, OlderDriverNamesBothVersions) {
  EXPECT_EQ(DriverVersionProblem(12040, 13000),
            "NVIDIA driver too old: it supports CUDA 12.4, this binary needs "
            "CUDA 13.0 or newer (upgrade the driver)");
  EXPECT_EQ(DriverVersionProblem(12090, 13020),
            "NVIDIA driver too old: it supports CUDA 12.9, this binary needs "
            "CUDA 13.0 or newer (upgrade the driver)");
}

TEST(CudaVersionTest, NoDriver) {
  EXPECT_EQ(DriverVersionProblem(0, 13000),
            "no NVIDIA driver: this binary needs one supporting CUDA 13.0 or "
            "newer");
}

TEST(CudaVersionTest, VersionString) {
  EXPECT_EQ(CudaVersionString(13000), "13.0");
  EXPECT_EQ(CudaVersionString(12040), "12.4");
  EXPECT_EQ(CudaVersionString(11080), "11.8");
}

}  // namespace
}  // namespace lockstep::kernels::cuda
