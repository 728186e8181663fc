// The CUDA kernels' per-thread bodies, run on emulated grids on the host,
// against the CPU backend through the registry: bit for bit, for every op,
// two input families and three launch configurations; the op set v3 graph
// primitives' edge cases (kernels/graph_op_cases.h) at four more.
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/emulated_backend.h"
#include "kernels/cuda/plan.h"
#include "kernels/cuda/test_cases.h"
#include "kernels/graph_op_cases.h"
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

// Runs `c` through PlanCanonicalOp + RunEmulated at every config of
// `configs` and compares every output's bits with the CPU kernel's.
void ExpectCpuBits(const Registry& cpu, const OpCase& c,
                   absl::Span<const LaunchConfig> configs,
                   absl::string_view family) {
  absl::StatusOr<std::vector<Tensor>> want =
      RunRegistered(cpu, kCpuBackendName, c);
  ASSERT_TRUE(want.ok()) << c.label << ": " << want.status();
  for (const LaunchConfig& config : configs) {
    SCOPED_TRACE(absl::StrFormat("%s, %s, %d blocks x %d threads", c.label,
                                 family, config.blocks,
                                 config.threads_per_block));
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

TEST_P(EmulationTest, BitIdenticalToCpuBackend) {
  for (const OpCase& c : CanonicalOpCases(GetParam(), 1234)) {
    ExpectCpuBits(cpu_, c, kConfigs, testing::FamilyName(GetParam()));
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
  // Every op with a CANONICAL CPU kernel.
  EXPECT_EQ(CudaCanonicalOpNames().size(), cpu.Ops().size());
  // Every graph primitive of op set v3 has edge cases.
  std::set<std::string> edge;
  for (const OpCase& c : GraphEdgeOpCases(1)) edge.insert(c.op);
  for (const std::vector<std::string>& ops :
       {GraphDataOpNames(), GraphElementwiseOpNames()}) {
    for (const std::string& op : ops) {
      EXPECT_TRUE(edge.count(op)) << op << " has no edge case";
    }
  }
}

// The graph primitives' edge cases: one thread for the whole grid, one
// warp, a ragged grid and a grid larger than most of the work.
TEST(EmulationEdgeTest, GraphPrimitivesBitIdenticalToCpuBackend) {
  Registry cpu;
  ASSERT_TRUE(RegisterCpuCanonicalKernels(&cpu).ok());
  const LaunchConfig configs[] = {{1, 1}, {1, 32}, {3, 64}, {64, 256}};
  for (const OpCase& c : GraphEdgeOpCases(2024)) {
    ExpectCpuBits(cpu, c, configs, "edge");
  }
}

// A kernel call whose "device" outputs are never written would show the
// emulator's fill pattern (0xA5A5A5A5); ops that write +0.0f where nothing
// lands (gather.grad, slice.grad) must still write it.
TEST(EmulationEdgeTest, EveryOutputElementIsWritten) {
  for (const OpCase& c : GraphEdgeOpCases(7)) {
    std::vector<Tensor> got = CloneAll(c.outputs);
    for (Tensor& t : got) {
      std::memset(t.raw_data(), 0x5A, static_cast<size_t>(t.bytes()));
    }
    DeviceCall call =
        PlanCanonicalOp(c.op, c.inputs, absl::MakeSpan(got), c.attrs).value();
    ASSERT_TRUE(RunEmulated(call, {2, 32}).ok());
    for (const Tensor& t : got) {
      const uint32_t* w = static_cast<const uint32_t*>(t.raw_data());
      for (int64_t i = 0; i < t.numel(); ++i) {
        ASSERT_NE(w[i], 0xA5A5A5A5u) << c.label << " element " << i;
        ASSERT_NE(w[i], 0x5A5A5A5Au) << c.label << " element " << i;
      }
    }
  }
}

// conv2d.grad_weight (and the transposed convolution's, its operands
// swapped) too small or too grouped for the tiled product, whose
// reductions span two to five chunks, ragged and whole: the chunked
// launches (kConv2dGradWeightChunks, then the tree) give the CPU
// backend's bits, with signed zeros and subnormals among the inputs.
TEST(EmulationConvTest, ChunkedGradWeightEqualsCpuBits) {
  Registry cpu;
  ASSERT_TRUE(RegisterCpuCanonicalKernels(&cpu).ok());
  struct Shape {
    std::vector<int64_t> x, w;
    int64_t groups, stride, pad;
  };
  const Shape shapes[] = {
      {{8, 3, 8, 8}, {8, 3, 3, 3}, 1, 1, 1},    // 512 terms: 2 whole chunks
      {{5, 4, 9, 9}, {6, 2, 3, 3}, 2, 1, 0},    // grouped, 245 -> 1 chunk
      {{9, 4, 9, 9}, {6, 2, 3, 3}, 2, 1, 0},    // grouped, 441: 2, ragged
      {{3, 8, 13, 13}, {8, 1, 3, 3}, 8, 2, 1},  // depthwise, stride 2, 147
      {{9, 8, 16, 16}, {8, 1, 3, 3}, 8, 2, 1},  // depthwise, 576: 3, ragged
      {{5, 2, 16, 16}, {4, 2, 1, 1}, 1, 1, 0},  // 1 x 1, 1280: 5 whole
  };
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto fill = [&](std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& f : v) f = u(rng);
    if (n > 7) {
      v[1] = -0.0f;
      v[5] = 1e-40f;
      v[7] = -3e-39f;
    }
    return Tensor::FromValues<float>(std::move(shape), v).value();
  };
  int chunked = 0;
  for (const Shape& sh : shapes) {
    OpAttrs a;
    a.groups = sh.groups;
    a.stride_h = a.stride_w = sh.stride;
    a.pad_top = a.pad_bottom = a.pad_left = a.pad_right = sh.pad;
    const int64_t oh = (sh.x[2] + 2 * sh.pad - sh.w[2]) / sh.stride + 1;
    const int64_t ow = (sh.x[3] + 2 * sh.pad - sh.w[3]) / sh.stride + 1;
    const Tensor x = fill(sh.x);
    const Tensor dy = fill({sh.x[0], sh.w[0], oh, ow});
    OpCase conv{absl::StrFormat("conv2d.grad_weight x=[%d,%d,%d,%d] groups=%d",
                                sh.x[0], sh.x[1], sh.x[2], sh.x[3], sh.groups),
                op::kConv2dGradWeight,
                {x, dy},
                {Tensor::Zeros(DType::kFloat32, sh.w).value()},
                a};
    ExpectCpuBits(cpu, conv, kConfigs, "chunked");
    // The transposed convolution whose input gradient this conv2d is:
    // input dy, output x.
    OpCase transposed = conv;
    transposed.label = "conv_transpose2d.grad_weight of " + conv.label;
    transposed.op = op::kConvTranspose2dGradWeight;
    transposed.inputs = {dy, x};
    ExpectCpuBits(cpu, transposed, kConfigs, "chunked");
    std::vector<Tensor> out = CloneAll(conv.outputs);
    const DeviceCall call =
        PlanCanonicalOp(conv.op, conv.inputs, absl::MakeSpan(out), a).value();
    for (const Launch& l : call.launches) {
      chunked += l.params.op == DeviceOp::kConv2dGradWeightChunks;
    }
  }
  EXPECT_EQ(chunked, 4);  // the shapes of more than one chunk
}

// A resident run's queued fingerprints (kernels/residency.h) on
// EmulatedMirrors: each the host fingerprint of the bytes as they were when
// queued, collected in queue order, once.
TEST(EmulationResidencyTest, QueuedFingerprintsMatchHost) {
  Registry emulated;
  ASSERT_TRUE(RegisterEmulatedCudaKernels(&emulated).ok());
  EXPECT_TRUE(testing::QueuedFingerprintsMatchHost(emulated, "cuda"));
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

// The graph primitives' bad calls: PlanCanonicalOp refuses each exactly as
// the CPU kernel does (code and message), before anything is written.
TEST(PlanTest, RejectsBadGraphCallsAsTheCpuBackendDoes) {
  Registry cpu;
  ASSERT_TRUE(RegisterCpuCanonicalKernels(&cpu).ok());
  auto f = [](std::vector<int64_t> s) {
    return Tensor::Zeros(DType::kFloat32, std::move(s)).value();
  };
  auto ints = [](std::vector<int32_t> v) {
    const int64_t n = static_cast<int64_t>(v.size());
    return Tensor::FromValues<int32_t>({n}, v).value();
  };
  auto kind = [](int k) {
    OpAttrs a;
    a.graph_kind = k;
    return a;
  };
  OpAttrs bad_axes = kind(1);
  bad_axes.reduce_axes = 0b100;
  OpAttrs mean_axis0 = kind(2);
  mean_axis0.reduce_axes = 0b1;
  const Tensor shared = f({2, 3});
  struct Bad {
    std::string what, op;
    std::vector<Tensor> in, out;
    OpAttrs attrs;
  };
  const Bad bad[] = {
      {"negative gather index",
       op::kGatherForward,
       {f({1, 4, 2}), ints({1, -1})},
       {f({1, 2, 2})},
       {}},
      {"gather index == V",
       op::kGatherGrad,
       {ints({0, 4}), f({1, 2, 2})},
       {f({1, 4, 2})},
       {}},
      {"gather of int32 x",
       op::kGatherForward,
       {ints({1, 2}), ints({0})},
       {f({1, 1, 1})},
       {}},
      {"slice.grad positions not increasing",
       op::kSliceGrad,
       {ints({2, 2}), f({1, 2, 1})},
       {f({1, 4, 1})},
       {}},
      {"slice.forward y of the wrong width",
       op::kSliceForward,
       {f({1, 4, 2}), ints({0, 1})},
       {f({1, 2, 3})},
       {}},
      {"concat of one part",
       op::kConcatForward,
       {f({2, 1, 3})},
       {f({2, 1, 3})},
       {}},
      {"concat parts do not add up",
       op::kConcatForward,
       {f({2, 1, 3}), f({2, 2, 3}), f({2, 1, 3})},
       {f({2, 5, 3})},
       {}},
      {"concat.grad part of another A",
       op::kConcatGrad,
       {f({2, 3, 1})},
       {f({2, 1, 1}), f({3, 2, 1})},
       {}},
      {"copy of another element count",
       op::kParameterForward,
       {f({2, 3})},
       {f({5})},
       {}},
      {"binary shapes do not broadcast",
       op::kBinaryForward,
       {f({2, 3}), f({4})},
       {f({2, 3})},
       kind(1)},
      {"binary kind 0",
       op::kBinaryForward,
       {f({2}), f({2})},
       {f({2})},
       kind(0)},
      {"binary y not the broadcast shape",
       op::kBinaryForward,
       {f({2, 1}), f({3})},
       {f({2, 1})},
       kind(3)},
      {"binary.grad db of a's shape",
       op::kBinaryGrad,
       {f({2, 3}), f({3}), f({2, 3})},
       {f({2, 3}), f({2, 3})},
       kind(1)},
      {"compare kind 6", op::kCompare, {f({2}), f({2})}, {f({2})}, kind(6)},
      {"unary kind 9", op::kUnaryForward, {f({2})}, {f({2})}, kind(9)},
      {"unary.grad dy of another shape",
       op::kUnaryGrad,
       {f({2}), f({3})},
       {f({2})},
       kind(1)},
      {"where cond does not broadcast",
       op::kWhereForward,
       {f({3}), f({2, 2}), f({2})},
       {f({2, 2})},
       {}},
      {"where.grad da and db share storage",
       op::kWhereGrad,
       {f({2, 3}), f({2, 3})},
       {shared, shared},
       {}},
      {"reduce axis beyond the rank",
       op::kReduceForward,
       {f({2, 3})},
       {f({2, 3})},
       bad_axes},
      {"reduce y of the wrong shape",
       op::kReduceForward,
       {f({2, 3})},
       {f({2, 3})},
       mean_axis0},
      {"reduce.grad kind 3", op::kReduceGrad, {f({3})}, {f({2, 3})}, kind(3)},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    // Shallow copies: outputs that share storage keep sharing it.
    std::vector<Tensor> got = b.out;
    absl::StatusOr<DeviceCall> call =
        PlanCanonicalOp(b.op, b.in, absl::MakeSpan(got), b.attrs);
    ASSERT_FALSE(call.ok());
    EXPECT_EQ(call.status().code(), absl::StatusCode::kInvalidArgument);
    std::vector<Tensor> cpu_out = b.out;
    KernelFn fn = cpu.Lookup(KernelKey{b.op, Mode::kCanonical,
                                       kCanonicalAlgorithm, kCpuBackendName})
                      .value();
    EXPECT_EQ(fn(b.in, absl::MakeSpan(cpu_out), b.attrs), call.status());
  }
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

TEST(PlanTest, DeviceLaunchConfigLimits) {
  for (const LaunchConfig& ok :
       {LaunchConfig{0, 32}, LaunchConfig{1, 256}, LaunchConfig{7, 128},
        LaunchConfig{0x7fffffff, 64}, LaunchConfig{}}) {
    EXPECT_TRUE(CheckDeviceLaunchConfig(ok, "k").ok())
        << ok.blocks << " x " << ok.threads_per_block;
  }
  for (int64_t threads :
       {int64_t{0}, int64_t{1}, int64_t{31}, int64_t{33}, int64_t{100},
        int64_t{288}, int64_t{512}, int64_t{1024}, int64_t{-32}}) {
    const absl::Status s =
        CheckDeviceLaunchConfig({1, threads}, "relu.forward");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << threads;
    EXPECT_EQ(s.message(),
              absl::StrFormat("relu.forward: launch config threads_per_block "
                              "= %d: must be a multiple of 32 in [32, 256]",
                              threads));
  }
  for (int64_t blocks : {int64_t{-1}, int64_t{1} << 31}) {
    const absl::Status s = CheckDeviceLaunchConfig({blocks, 64}, "hash");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << blocks;
    EXPECT_EQ(s.message(),
              absl::StrFormat("hash: launch config blocks = %d: must be 0 "
                              "(automatic) or in [1, 2147483647]",
                              blocks));
  }
}

TEST(PlanTest, BlocksFor) {
  EXPECT_EQ(BlocksFor({0, 256}, 0), 1);
  EXPECT_EQ(BlocksFor({0, 256}, 257), 2);
  EXPECT_EQ(BlocksFor({7, 128}, 1), 7);
  EXPECT_EQ(BlocksFor({0, 1}, int64_t{1} << 40), kMaxAutoBlocks);
}

}  // namespace
}  // namespace lockstep::kernels::cuda
