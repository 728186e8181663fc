// The CUDA kernels' per-thread bodies, run on emulated grids on the host,
// against the CPU backend through the registry: bit for bit, for every op,
// two input families and two launch configurations.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/plan.h"
#include "kernels/cuda/test_cases.h"
#include "kernels/graph_ops.h"
#include "kernels/registry.h"

namespace lockstep::kernels::cuda {
namespace {

using testing::CanonicalOpCases;
using testing::CloneAll;
using testing::Family;
using testing::OpCase;
using testing::RunRegistered;
using testing::SameBits;

// 1 block of 32 threads (every thread loops over many outputs) and 7 blocks
// of 128 (a ragged grid), plus the automatic grid.
const LaunchConfig kConfigs[] = {{1, 32}, {7, 128}, {0, 256}};

class EmulationTest : public ::testing::TestWithParam<Family> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterCpuCanonicalKernels(&cpu_).ok());
  }
  Registry cpu_;
};

TEST_P(EmulationTest, BitIdenticalToCpuBackend) {
  const std::vector<OpCase> cases = CanonicalOpCases(GetParam(), 1234);
  for (const OpCase& c : cases) {
    absl::StatusOr<std::vector<Tensor>> want =
        RunRegistered(cpu_, kCpuBackendName, c);
    ASSERT_TRUE(want.ok()) << c.label << ": " << want.status();
    for (const LaunchConfig& config : kConfigs) {
      SCOPED_TRACE(absl::StrFormat("%s, %s, %d blocks x %d threads", c.label,
                                   testing::FamilyName(GetParam()),
                                   config.blocks, config.threads_per_block));
      std::vector<Tensor> got = CloneAll(c.outputs);
      absl::StatusOr<DeviceCall> call =
          PlanCanonicalOp(c.op, c.inputs, absl::MakeSpan(got), c.attrs);
      ASSERT_TRUE(call.ok()) << call.status();
      ASSERT_TRUE(RunEmulated(*call, config).ok());
      ASSERT_EQ(got.size(), want->size());
      for (size_t o = 0; o < got.size(); ++o) {
        EXPECT_TRUE(SameBits(got[o], (*want)[o])) << "output " << o;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, EmulationTest,
                         ::testing::Values(Family::kRandom, Family::kSmallInts),
                         [](const ::testing::TestParamInfo<Family>& info) {
                           return std::string(testing::FamilyName(info.param));
                         });

TEST(EmulationCoverageTest, EveryOpHasACaseAndAKernel) {
  std::set<std::string> covered;
  for (const OpCase& c : CanonicalOpCases(Family::kSmallInts, 1)) {
    covered.insert(c.op);
  }
  for (const std::string& op : CudaCanonicalOpNames()) {
    EXPECT_TRUE(covered.count(op)) << op << " has no test case";
  }
  Registry cpu;
  ASSERT_TRUE(RegisterCpuCanonicalKernels(&cpu).ok());
  // Every CPU op but the graph primitives of op set v3, which have no CUDA
  // kernels yet (kernels/graph_ops.h, GraphElementwiseOpNames()).
  EXPECT_EQ(CudaCanonicalOpNames().size() + GraphElementwiseOpNames().size() +
                GraphDataOpNames().size(),
            cpu.Ops().size());
}

TEST(EmulationTest, RunningTwiceGivesTheSameBits) {
  for (const OpCase& c : CanonicalOpCases(Family::kRandom, 99)) {
    if (c.op == op::kSgdUpdate || c.op == op::kMomentumUpdate ||
        c.op == op::kAdamUpdate) {
      continue;  // in place: a second run continues from the first
    }
    std::vector<Tensor> a = CloneAll(c.outputs);
    std::vector<Tensor> b = CloneAll(c.outputs);
    ASSERT_TRUE(
        RunEmulated(
            PlanCanonicalOp(c.op, c.inputs, absl::MakeSpan(a), c.attrs).value(),
            {7, 128})
            .ok());
    ASSERT_TRUE(
        RunEmulated(
            PlanCanonicalOp(c.op, c.inputs, absl::MakeSpan(b), c.attrs).value(),
            {7, 128})
            .ok());
    for (size_t o = 0; o < a.size(); ++o) {
      EXPECT_TRUE(SameBits(a[o], b[o])) << c.label;
    }
  }
}

TEST(PlanTest, RejectsBadCallsAsTheCpuBackendDoes) {
  Registry cpu;
  ASSERT_TRUE(RegisterCpuCanonicalKernels(&cpu).ok());
  Tensor x = Tensor::Zeros(DType::kFloat32, {3, 4}).value();
  Tensor w = Tensor::Zeros(DType::kFloat32, {5, 6}).value();
  std::vector<Tensor> y = {Tensor::Zeros(DType::kFloat32, {3, 6}).value()};
  const Tensor in[] = {x, w};
  absl::StatusOr<DeviceCall> call =
      PlanCanonicalOp(op::kDenseForward, in, absl::MakeSpan(y), OpAttrs{});
  ASSERT_FALSE(call.ok());
  EXPECT_EQ(call.status().code(), absl::StatusCode::kInvalidArgument);
  KernelFn fn = cpu.Lookup(KernelKey{op::kDenseForward, Mode::kCanonical,
                                     kCanonicalAlgorithm, kCpuBackendName})
                    .value();
  EXPECT_EQ(fn(absl::MakeConstSpan(in), absl::MakeSpan(y), OpAttrs{}),
            call.status());

  EXPECT_EQ(PlanCanonicalOp("no.such_op", in, absl::MakeSpan(y), OpAttrs{})
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST(PlanTest, RejectsBadLaunchConfigs) {
  Tensor x = Tensor::Zeros(DType::kFloat32, {4}).value();
  std::vector<Tensor> y = {Tensor::Zeros(DType::kFloat32, {4}).value()};
  const Tensor in[] = {x};
  DeviceCall call =
      PlanCanonicalOp(op::kReluForward, in, absl::MakeSpan(y), OpAttrs{})
          .value();
  EXPECT_EQ(RunEmulated(call, {1, 0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunEmulated(call, {-1, 32}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlanTest, BlocksFor) {
  EXPECT_EQ(BlocksFor({0, 256}, 0), 1);
  EXPECT_EQ(BlocksFor({0, 256}, 257), 2);
  EXPECT_EQ(BlocksFor({7, 128}, 1), 7);
  EXPECT_EQ(BlocksFor({0, 1}, int64_t{1} << 40), kMaxAutoBlocks);
}

}  // namespace
}  // namespace lockstep::kernels::cuda
