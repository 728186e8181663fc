// The DEFAULT "atomic" kernels add their partial results in arrival order,
// so their bits depend on that order. Rather than hoping to observe a race,
// the tests pin the order (atomic_float.h ScopedAtomicArrivalOrderForTesting:
// the tasks run one after another in a seeded permutation) and check that
//   - the same order gives the same bits, every time;
//   - other orders give other bits (inputs of wide dynamic range, where
//     float addition's lack of associativity shows);
//   - on exact small-integer inputs every order gives CANONICAL's bits, so
//     each task's partial arrives exactly once whatever the order.
// The process pool is fixed at 4 threads, so the kernels split their work
// into the same tasks on any machine.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kernels/cpu/atomic_float.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"
#include "kernels/testing/float_test_util.h"

namespace lockstep::kernels {
namespace {

using ::lockstep::testing::BitsEqual;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::RandomFloats;
using ::lockstep::testing::SmallInts;

constexpr int kThreads = 4;
constexpr uint64_t kSeeds[] = {1, 2, 3, 4, 5, 6, 7, 8};

// Wide dynamic range, so that the order of additions shows in the bits.
std::vector<float> Wide(std::vector<float> v) {
  for (size_t i = 0; i < v.size(); ++i) v[i] *= (i % 7 == 0) ? 1e4f : 1.0f;
  return v;
}

struct AtomicCase {
  const char* name;
  const char* op;
  const char* algorithm;
  std::vector<std::vector<int64_t>> in_shapes;
  std::vector<int64_t> out_shape;
  OpAttrs attrs;
  // > 0: the first input is int32 ids in [0, ids_vocab) (embedding).
  int64_t ids_vocab = 0;
};

std::vector<AtomicCase> Cases() {
  OpAttrs pad1;
  pad1.pad_top = pad1.pad_bottom = pad1.pad_left = pad1.pad_right = 1;
  OpAttrs pad1_stride2 = pad1;
  pad1_stride2.stride_h = pad1_stride2.stride_w = 2;
  return {
      {"bias_add.grad",
       op::kBiasAddGrad,
       kAtomicAlgorithm,
       {{256, 16, 8, 8}},
       {16},
       OpAttrs{}},
      {"dense.forward",
       op::kDenseForward,
       kSplitKAtomicAlgorithm,
       {{16, 2048}, {2048, 16}},
       {16, 16},
       OpAttrs{}},
      {"matmul.forward",
       op::kMatMulForward,
       kSplitKAtomicAlgorithm,
       {{4, 8, 1024}, {4, 1024, 8}},
       {4, 8, 8},
       OpAttrs{}},
      {"conv2d.grad_weight",
       op::kConv2dGradWeight,
       kAtomicAlgorithm,
       {{32, 8, 12, 12}, {32, 8, 12, 12}},
       {8, 8, 3, 3},
       pad1},
      // Stride 2 with an output-padding row: x [32, 8, 6, 6] -> y [.., 12, 12].
      {"conv_transpose2d.grad_weight",
       op::kConvTranspose2dGradWeight,
       kAtomicAlgorithm,
       {{32, 8, 6, 6}, {32, 8, 12, 12}},
       {8, 8, 3, 3},
       pad1_stride2},
      {"embedding.grad_weight",
       op::kEmbeddingGradWeight,
       kAtomicAlgorithm,
       {{64, 32}, {64, 32, 16}},
       {8, 16},
       OpAttrs{},
       /*ids_vocab=*/8},
  };
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

enum class Family { kWide, kSmallInts };

std::vector<Tensor> Inputs(const AtomicCase& c, Family family) {
  std::vector<Tensor> in;
  uint32_t seed = 1;
  for (const std::vector<int64_t>& shape : c.in_shapes) {
    const size_t n = static_cast<size_t>(Numel(shape));
    if (in.empty() && c.ids_vocab > 0) {
      // Every id named by many positions spread over every task.
      std::vector<int32_t> ids(n);
      for (size_t i = 0; i < n; ++i) {
        ids[i] = static_cast<int32_t>((i * 5 + i / 3) % c.ids_vocab);
      }
      in.push_back(*Tensor::FromValues<int32_t>(shape, ids));
      continue;
    }
    std::vector<float> v = family == Family::kWide
                               ? Wide(RandomFloats(n, seed++))
                               : SmallInts(n, seed++);
    in.push_back(*Tensor::FromValues<float>(shape, v));
  }
  return in;
}

class DefaultNondeterminismTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_THAT(RegisterCpuCanonicalKernels(&registry_), IsOk());
    ASSERT_THAT(RegisterCpuDeterministicAndDefaultKernels(&registry_), IsOk());
    SetCpuThreadsForTesting(kThreads);
  }
  void TearDown() override { SetCpuThreadsForTesting(0); }

  std::vector<float> Run(const AtomicCase& c, Mode mode, const char* algorithm,
                         const std::vector<Tensor>& in) {
    absl::StatusOr<KernelFn> fn =
        registry_.Lookup({c.op, mode, algorithm, kCpuBackendName});
    EXPECT_THAT(fn, IsOk());
    if (!fn.ok()) return {};
    std::vector<Tensor> out = {*Tensor::Zeros(DType::kFloat32, c.out_shape)};
    EXPECT_THAT((*fn)(in, absl::MakeSpan(out), c.attrs), IsOk());
    const float* p = out[0].data<float>();
    return std::vector<float>(p, p + out[0].numel());
  }

  // The atomic kernel with its tasks arriving in the order `seed` draws.
  std::vector<float> RunInOrder(const AtomicCase& c, uint64_t seed,
                                const std::vector<Tensor>& in) {
    ScopedAtomicArrivalOrderForTesting order(seed);
    return Run(c, Mode::kDefault, c.algorithm, in);
  }

  Registry registry_;
};

std::string Bits(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(float));
}

TEST(AtomicArrivalOrderTest, IsASeededPermutation) {
  const std::vector<int64_t> a = AtomicArrivalOrder(7, 16);
  EXPECT_EQ(a, AtomicArrivalOrder(7, 16));
  EXPECT_NE(a, AtomicArrivalOrder(8, 16));
  std::vector<int64_t> identity(16);
  for (int64_t i = 0; i < 16; ++i) identity[i] = i;
  EXPECT_NE(a, identity);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, identity);
  EXPECT_TRUE(AtomicArrivalOrder(7, 0).empty());
}

TEST(AtomicArrivalOrderTest, PinnedParallelForRunsTasksInThatOrder) {
  ThreadPool pool(kThreads);
  std::vector<int64_t> ran;
  {
    ScopedAtomicArrivalOrderForTesting order(11);
    AtomicParallelFor(&pool, 16, [&](int64_t t) { ran.push_back(t); });
  }
  EXPECT_EQ(ran, AtomicArrivalOrder(11, 16));
  // Unpinned: every task once, in whatever order the threads take them.
  std::vector<int> count(16, 0);
  AtomicParallelFor(&pool, 16, [&](int64_t t) {
    __atomic_fetch_add(&count[t], 1, __ATOMIC_RELAXED);
  });
  EXPECT_EQ(count, std::vector<int>(16, 1));
}

TEST_F(DefaultNondeterminismTest, SameArrivalOrderGivesSameBits) {
  for (const AtomicCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    const std::vector<Tensor> in = Inputs(c, Family::kWide);
    for (const uint64_t seed : {uint64_t{1}, uint64_t{5}}) {
      const std::vector<float> first = RunInOrder(c, seed, in);
      ASSERT_FALSE(first.empty());
      EXPECT_TRUE(BitsEqual(RunInOrder(c, seed, in), first))
          << "arrival order of seed " << seed;
    }
  }
}

TEST_F(DefaultNondeterminismTest, OtherArrivalOrdersGiveOtherBits) {
  for (const AtomicCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    const std::vector<Tensor> in = Inputs(c, Family::kWide);
    std::set<std::string> distinct;
    for (const uint64_t seed : kSeeds)
      distinct.insert(Bits(RunInOrder(c, seed, in)));
    std::printf("%-18s DEFAULT/%s: %zu distinct results over %zu orders\n",
                c.name, c.algorithm, distinct.size(), std::size(kSeeds));
    EXPECT_GE(distinct.size(), 2u)
        << "the result did not depend on the arrival order";
    // CANONICAL, by contrast, has one result (it never uses the order).
    EXPECT_TRUE(BitsEqual(Run(c, Mode::kCanonical, kCanonicalAlgorithm, in),
                          Run(c, Mode::kCanonical, kCanonicalAlgorithm, in)));
  }
}

TEST_F(DefaultNondeterminismTest, ExactInputsGiveCanonicalBitsInEveryOrder) {
  for (const AtomicCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    const std::vector<Tensor> in = Inputs(c, Family::kSmallInts);
    const std::vector<float> canonical =
        Run(c, Mode::kCanonical, kCanonicalAlgorithm, in);
    ASSERT_FALSE(canonical.empty());
    for (const uint64_t seed : kSeeds) {
      EXPECT_TRUE(BitsEqual(RunInOrder(c, seed, in), canonical))
          << "arrival order of seed " << seed;
    }
    // And unpinned, on the pool's threads, the tasks racing for the same
    // outputs (compare-and-swap or row-block locks): every term lands
    // exactly once, every time.
    for (int run = 0; run < 20; ++run) {
      EXPECT_TRUE(BitsEqual(Run(c, Mode::kDefault, c.algorithm, in), canonical))
          << "unpinned run " << run;
    }
  }
}

}  // namespace
}  // namespace lockstep::kernels
