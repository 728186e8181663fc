// The CPU graph data kernels (kernels/graph_ops.h): exact movement, the
// gather gradient as EMBEDDING's canonical segment sum (bit for bit, any
// thread count), a float64 reference on exact integers, and errors.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/graph_ops.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"
#include "kernels/testing/float_test_util.h"

namespace lockstep::kernels {
namespace {

using ::lockstep::testing::BitsEqual;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::RandomFloats;
using ::lockstep::testing::SmallInts;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

class GraphDataKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_THAT(RegisterCpuCanonicalKernels(&registry_), IsOk());
  }
  void TearDown() override { SetCpuThreadsForTesting(0); }

  absl::Status Run(const std::string& op, std::vector<Tensor> in,
                   std::vector<Tensor> out) {
    absl::StatusOr<KernelFn> fn = registry_.Lookup(
        KernelKey{op, Mode::kCanonical, kCanonicalAlgorithm, kCpuBackendName});
    if (!fn.ok()) return fn.status();
    return (*fn)(in, absl::MakeSpan(out), OpAttrs{});
  }

  Registry registry_;
};

Tensor Floats(std::vector<int64_t> shape, std::vector<float> v) {
  return *Tensor::FromValues<float>(std::move(shape), std::move(v));
}
Tensor Ints(std::vector<int64_t> shape, std::vector<int32_t> v) {
  return *Tensor::FromValues<int32_t>(std::move(shape), std::move(v));
}
Tensor ZerosF(std::vector<int64_t> shape) {
  return *Tensor::Zeros(DType::kFloat32, std::move(shape));
}
std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

TEST_F(GraphDataKernelsTest, GatherMovesRowsAndSliceGradInverts) {
  // x [A=2, V=3, B=2].
  const Tensor x = Floats({2, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  Tensor y = ZerosF({2, 2, 2});
  ASSERT_THAT(Run(op::kGatherForward, {x, Ints({2}, {2, 0})}, {y}), IsOk());
  EXPECT_TRUE(BitsEqual(Values(y), {4, 5, 0, 1, 10, 11, 6, 7}));
  // slice.grad puts dy back and zeros the rest (-0.0f stays -0.0f).
  const Tensor dy = Floats({2, 2, 2}, {1, -0.0f, 2, 3, 4, 5, 6, 7});
  Tensor dx = Floats({2, 3, 2}, std::vector<float>(12, 9.0f));
  ASSERT_THAT(Run(op::kSliceGrad, {Ints({2}, {0, 2}), dy}, {dx}), IsOk());
  EXPECT_TRUE(BitsEqual(Values(dx), {1, -0.0f, 0, 0, 2, 3, 4, 5, 0, 0, 6, 7}));
}

TEST_F(GraphDataKernelsTest, ConcatAndItsGradientRoundTrip) {
  const Tensor a = Floats({2, 1, 2}, {1, 2, 3, 4});
  const Tensor b = Floats({2, 2, 2}, {5, 6, 7, 8, 9, 10, 11, 12});
  Tensor y = ZerosF({2, 3, 2});
  ASSERT_THAT(Run(op::kConcatForward, {a, b}, {y}), IsOk());
  EXPECT_TRUE(BitsEqual(Values(y), {1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12}));
  Tensor da = ZerosF({2, 1, 2});
  Tensor db = ZerosF({2, 2, 2});
  ASSERT_THAT(Run(op::kConcatGrad, {y}, {da, db}), IsOk());
  EXPECT_TRUE(BitsEqual(Values(da), Values(a)));
  EXPECT_TRUE(BitsEqual(Values(db), Values(b)));
  EXPECT_THAT(Run(op::kConcatForward, {a, b}, {ZerosF({2, 4, 2})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the parts add up to 3 along C")));
}

// The gradient of gather with A == 1 is embedding.grad_weight, bit for bit,
// with segments longer than one 256-term chain, at any thread count; with
// A > 1 each a is its own segment sum.
TEST_F(GraphDataKernelsTest, GatherGradIsTheEmbeddingSegmentSum) {
  const int64_t a = 3, v = 7, p = 700, b = 5;
  std::vector<int32_t> ids(p);
  for (int64_t i = 0; i < p; ++i) ids[i] = static_cast<int32_t>((i * i) % 4);
  const Tensor idx = Ints({p}, ids);
  const Tensor dy = Floats({a, p, b}, RandomFloats(a * p * b, 11));
  std::vector<float> want;
  for (int64_t k = 0; k < a; ++k) {
    const Tensor dy_k =
        Floats({p, b}, std::vector<float>(dy.data<float>() + k * p * b,
                                          dy.data<float>() + (k + 1) * p * b));
    Tensor dw = ZerosF({v, b});
    ASSERT_THAT(Run(op::kEmbeddingGradWeight, {idx, dy_k}, {dw}), IsOk());
    const std::vector<float> part = Values(dw);
    want.insert(want.end(), part.begin(), part.end());
  }
  for (const int threads : {1, 2, 3, 8}) {
    SetCpuThreadsForTesting(threads);
    Tensor dx = Floats({a, v, b}, std::vector<float>(a * v * b, 5.0f));
    ASSERT_THAT(Run(op::kGatherGrad, {idx, dy}, {dx}), IsOk());
    EXPECT_TRUE(BitsEqual(Values(dx), want)) << threads << " threads";
  }
}

// float64 reference on exact integers: every sum is exact, so the float32
// result must equal it.
TEST_F(GraphDataKernelsTest, GatherGradMatchesTheFloat64Reference) {
  const int64_t a = 2, v = 4, p = 300, b = 3;
  std::vector<int32_t> ids(p);
  for (int64_t i = 0; i < p; ++i) ids[i] = static_cast<int32_t>((7 * i) % 3);
  const std::vector<float> g = SmallInts(a * p * b, 5);
  std::vector<double> ref(a * v * b, 0.0);
  for (int64_t k = 0; k < a; ++k) {
    for (int64_t i = 0; i < p; ++i) {
      for (int64_t j = 0; j < b; ++j) {
        ref[(k * v + ids[i]) * b + j] += g[(k * p + i) * b + j];
      }
    }
  }
  Tensor dx = ZerosF({a, v, b});
  ASSERT_THAT(
      Run(op::kGatherGrad, {Ints({p}, ids), Floats({a, p, b}, g)}, {dx}),
      IsOk());
  std::vector<float> want(ref.begin(), ref.end());
  EXPECT_TRUE(BitsEqual(Values(dx), want));
}

TEST_F(GraphDataKernelsTest, BadIndicesAreRefusedBeforeWriting) {
  const Tensor x = ZerosF({1, 3, 2});
  Tensor y = Floats({1, 2, 2}, {7, 7, 7, 7});
  EXPECT_THAT(Run(op::kGatherForward, {x, Ints({2}, {1, 3})}, {y}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("index 3 at position 1 is outside [0, 3)")));
  EXPECT_TRUE(BitsEqual(Values(y), {7, 7, 7, 7}));
  EXPECT_THAT(Run(op::kSliceGrad, {Ints({2}, {1, 1}), ZerosF({1, 2, 2})},
                  {ZerosF({1, 3, 2})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("positions must increase")));
  EXPECT_THAT(Run(op::kParameterForward, {ZerosF({2, 3})}, {ZerosF({5})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("differ in element count")));
}

}  // namespace
}  // namespace lockstep::kernels
