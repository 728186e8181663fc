#include "kernels/ops/validate.h"

#include <cstdint>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::kernels {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

Tensor F(std::vector<int64_t> shape) {
  return *Tensor::Zeros(DType::kFloat32, std::move(shape));
}
Tensor Labels(std::vector<int32_t> v) {
  return *Tensor::FromValues<int32_t>({static_cast<int64_t>(v.size())}, v);
}

TEST(ValidateTest, DenseShapesAndTransposes) {
  OpAttrs a;
  absl::StatusOr<canonical::DenseShape> d =
      ValidateDenseForward(F({2, 3}), F({3, 4}), F({2, 4}), a);
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(d->m, 2);
  EXPECT_EQ(d->k, 3);
  EXPECT_EQ(d->n, 4);
  a.transpose_x = true;
  a.transpose_w = true;
  d = ValidateDenseForward(F({3, 2}), F({4, 3}), F({2, 4}), a);
  ASSERT_THAT(d, IsOk());
  EXPECT_EQ(d->k, 3);
  EXPECT_THAT(ValidateDenseForward(F({2, 3}), F({4, 3}), F({2, 4}), a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dense.forward: inner dimensions differ")));
  EXPECT_THAT(ValidateDenseForward(F({3, 2}), F({4, 3}), F({2, 5}), a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("y has shape [2, 5], expected [2, 4]")));
  EXPECT_THAT(ValidateDenseForward(F({3, 2, 1}), F({4, 3}), F({2, 4}), a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("x must have rank 2")));
  // grad_input writes dx in x's stored layout ([K, M] when transposed).
  EXPECT_THAT(ValidateDenseGradInput(F({2, 4}), F({4, 3}), F({3, 2}), a),
              IsOk());
  EXPECT_THAT(ValidateDenseGradInput(F({2, 4}), F({4, 3}), F({2, 3}), a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dx has shape [2, 3], expected [3, 2]")));
  EXPECT_THAT(ValidateDenseGradWeight(F({3, 2}), F({2, 4}), F({4, 3}), a),
              IsOk());
  EXPECT_THAT(ValidateDenseGradWeight(F({3, 2}), F({5, 4}), F({4, 3}), a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dy's rows must equal M = 2")));
}

TEST(ValidateTest, BiasAdd) {
  absl::StatusOr<canonical::BiasShape> s =
      ValidateBiasAdd(F({2, 3, 4, 5}), F({3}), F({2, 3, 4, 5}));
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->spatial, 20);
  EXPECT_THAT(ValidateBiasAdd(F({2, 3}), F({4}), F({2, 3})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("b has shape [4], expected [3]")));
  EXPECT_THAT(
      ValidateBiasAddGrad(F({3}), F({3})),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank >= 2")));
}

TEST(ValidateTest, SoftmaxLabelsCheckedBeforeCompute) {
  EXPECT_THAT(
      ValidateSoftmaxXent("softmax_xent.forward", F({2, 3}), Labels({0, 2})),
      IsOk());
  EXPECT_THAT(
      ValidateSoftmaxXent("softmax_xent.forward", F({2, 3}), Labels({0, 3})),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("labels[1] = 3 is outside [0, 3)")));
  EXPECT_THAT(
      ValidateSoftmaxXent("softmax_xent.grad", F({2, 3}), Labels({-1, 0})),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("softmax_xent.grad: labels[0] = -1")));
  EXPECT_THAT(
      ValidateSoftmaxXent("softmax_xent.forward", F({2, 3}), Labels({0, 1, 2})),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("labels has shape [3], expected [2]")));
  EXPECT_THAT(ValidateSoftmaxXent("softmax_xent.forward", F({2, 3}), F({2})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("labels must be int32")));
  EXPECT_THAT(
      ValidateSoftmaxXent("softmax_xent.forward", F({0, 3}), Labels({})),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("batch size 0 must be in [1, 16777216]")));
}

TEST(ValidateTest, OptimizerAttributes) {
  OpAttrs a;
  a.learning_rate = 0.1f;
  Tensor g = F({4});
  std::vector<Tensor> state = {F({4}), F({4})};
  const absl::string_view names[] = {"w", "v"};
  EXPECT_THAT(ValidateOptimizer("momentum.update", g, state, names, a), IsOk());
  a.learning_rate = -1.0f;
  EXPECT_THAT(ValidateOptimizer("momentum.update", g, state, names, a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("learning_rate is -1")));
  a.learning_rate = 0.1f;
  a.beta2 = 1.0f;
  const absl::string_view adam_names[] = {"w", "m", "v"};
  std::vector<Tensor> adam = {F({4}), F({4}), F({4})};
  EXPECT_THAT(ValidateOptimizer("adam.update", g, adam, adam_names, a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("beta2 is 1, must be in [0, 1)")));
  a.beta2 = 0.999f;
  a.step = 0;
  EXPECT_THAT(ValidateOptimizer("adam.update", g, adam, adam_names, a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("step is 0, must be >= 1")));
  a.step = 1;
  adam[2] = adam[1];  // v aliases m
  EXPECT_THAT(ValidateOptimizer("adam.update", g, adam, adam_names, a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("v must not share storage with m")));
  std::vector<Tensor> bad = {F({5}), F({4})};
  EXPECT_THAT(ValidateOptimizer("momentum.update", g, bad, names, a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("w has shape [5], expected [4]")));
}

TEST(ValidateTest, FlattenAndArity) {
  EXPECT_THAT(ValidateFlatten(F({2, 3, 4}), F({2, 12})), IsOk());
  EXPECT_THAT(ValidateFlatten(F({2, 3, 4}), F({4, 6})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("leading dimension")));
  std::vector<Tensor> in = {F({1})};
  std::vector<Tensor> out;
  EXPECT_THAT(CheckArity("relu.forward", in, 1, absl::MakeSpan(out), 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("expected 1 inputs and 1 outputs, got 1 "
                                 "and 0")));
}

}  // namespace
}  // namespace lockstep::kernels
