// Registration of the CUDA backend and its behaviour without a device (runs
// on any machine; the GPU suite is cuda_gpu_test).
#include "kernels/cuda/cuda_backend.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cuda/plan.h"
#include "kernels/cuda/test_cases.h"
#include "kernels/registry.h"

namespace lockstep::kernels {
namespace {

using cuda::testing::CanonicalOpCases;
using cuda::testing::CloneAll;
using cuda::testing::Family;
using cuda::testing::OpCase;
using cuda::testing::SameBits;

TEST(CudaBackendTest, RegistersEveryCanonicalOpOrReportsNoCuda) {
  Registry registry;
  const absl::Status s = RegisterCudaCanonicalKernels(&registry);
  if (!cuda::BuiltWithCuda()) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(std::string(s.message()).find("built without CUDA"),
              std::string::npos)
        << s;
    EXPECT_EQ(registry.size(), 0u);
    return;
  }
  ASSERT_TRUE(s.ok()) << s;
  std::vector<std::string> want = cuda::CudaCanonicalOpNames();
  EXPECT_EQ(registry.size(), want.size());
  for (const std::string& op : want) {
    EXPECT_TRUE(registry.Contains(
        KernelKey{op, Mode::kCanonical, kCanonicalAlgorithm, kCudaBackendName}))
        << op;
  }
  EXPECT_EQ(CudaBackend().name(), "cuda");
  EXPECT_EQ(RegisterCudaCanonicalKernels(&registry).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(CudaBackendTest, BadCallsAreInvalidArgumentBeforeAnyDeviceWork) {
  Registry registry;
  if (!RegisterCudaCanonicalKernels(&registry).ok()) {
    GTEST_SKIP() << "built without CUDA";
  }
  KernelFn fn = registry
                    .Lookup(KernelKey{op::kReluForward, Mode::kCanonical,
                                      kCanonicalAlgorithm, kCudaBackendName})
                    .value();
  const Tensor x = Tensor::Zeros(DType::kFloat32, {4}).value();
  std::vector<Tensor> y = {Tensor::Zeros(DType::kFloat32, {5}).value()};
  const Tensor in[] = {x};
  EXPECT_EQ(fn(absl::MakeConstSpan(in), absl::MakeSpan(y), OpAttrs{}).code(),
            absl::StatusCode::kInvalidArgument);
}

// Without a device every kernel fails cleanly (no exit, no crash), names
// the CUDA call and leaves its outputs untouched.
TEST(CudaBackendTest, WithoutADeviceKernelsFailWithTheCudaError) {
  Registry registry;
  if (!RegisterCudaCanonicalKernels(&registry).ok()) {
    GTEST_SKIP() << "built without CUDA";
  }
  const absl::Status device = cuda::CudaDeviceStatus();
  if (device.ok()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(device.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(device.message()).find("cudaGetDeviceCount"),
            std::string::npos)
      << device;
  EXPECT_NE(std::string(device.message()).find("cuda_runtime.cu:"),
            std::string::npos)
      << device;
  for (const OpCase& c : CanonicalOpCases(Family::kSmallInts, 5)) {
    KernelFn fn = registry
                      .Lookup(KernelKey{c.op, Mode::kCanonical,
                                        kCanonicalAlgorithm, kCudaBackendName})
                      .value();
    std::vector<Tensor> out = CloneAll(c.outputs);
    const absl::Status s = fn(c.inputs, absl::MakeSpan(out), c.attrs);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << c.label;
    EXPECT_NE(std::string(s.message()).find("no usable CUDA device"),
              std::string::npos)
        << s;
    for (size_t o = 0; o < out.size(); ++o) {
      EXPECT_TRUE(SameBits(out[o], c.outputs[o])) << c.label;
    }
  }
  const float data[4] = {1, 2, 3, 4};
  const std::vector<int64_t> shape = {4};
  EXPECT_EQ(cuda::DeviceFingerprint(hash::DtypeCode::kFloat32, shape, data,
                                    sizeof(data))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  // Bad arguments are reported as such even without a device.
  EXPECT_EQ(cuda::DeviceFingerprint(hash::DtypeCode::kFloat32, shape, data,
                                    sizeof(data) - 1)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::RunGpuBenchmarks().status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// Launch configurations the device would refuse are reported before any
// CUDA call, device or not, naming the field and the limit.
TEST(CudaBackendTest, BadLaunchConfigsRefusedBeforeTheDevice) {
  const float data[4] = {1, 2, 3, 4};
  const std::vector<int64_t> shape = {4};
  const cuda::LaunchConfig bad_threads{1, 48};
  const cuda::LaunchConfig bad_blocks{-2, 64};
  const absl::Status fp =
      cuda::DeviceFingerprint(hash::DtypeCode::kFloat32, shape, data,
                              sizeof(data), bad_threads)
          .status();
  EXPECT_EQ(fp.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fp.message(),
            "DeviceFingerprint: launch config threads_per_block = 48: must be "
            "a multiple of 32 in [32, 256]");
  const absl::Status stats =
      cuda::DeviceFingerprintAndStats(hash::DtypeCode::kFloat32, shape, data,
                                      sizeof(data), bad_blocks)
          .status();
  EXPECT_EQ(stats.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(stats.message(),
            "DeviceFingerprintAndStats: launch config blocks = -2: must be 0 "
            "(automatic) or in [1, 2147483647]");
  uint64_t leaf = 0;
  EXPECT_EQ(cuda::DeviceLeafHashes(data, sizeof(data), absl::MakeSpan(&leaf, 1),
                                   {1, 512})
                .code(),
            absl::StatusCode::kInvalidArgument);
  Tensor x = Tensor::Zeros(DType::kFloat32, {4}).value();
  std::vector<Tensor> y = {Tensor::Zeros(DType::kFloat32, {4}).value()};
  const Tensor in[] = {x};
  const cuda::DeviceCall call =
      cuda::PlanCanonicalOp(op::kReluForward, in, absl::MakeSpan(y), OpAttrs{})
          .value();
  const absl::Status run = cuda::RunOnDevice(call, {1, 1});
  EXPECT_EQ(run.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run.message(),
            "relu.forward: launch config threads_per_block = 1: must be a "
            "multiple of 32 in [32, 256]");
}

}  // namespace
}  // namespace lockstep::kernels
