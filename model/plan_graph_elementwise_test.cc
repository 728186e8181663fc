// PlanGraphElementwise with unbatched inputs (CONSTANT / PARAMETER outputs
// and graph ops of them): full-shape broadcasting, LayerPlan.batched, the
// batch-axis rules, REDUCE axes on unbatched tensors.
#include "model/plan_graph_elementwise.h"

#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::model {
namespace {

namespace v1 = ::lockstep::v1;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

GraphInput Batched(std::vector<int64_t> shape) {
  return GraphInput{std::move(shape), true, "layer \"x\""};
}
GraphInput Unbatched(std::vector<int64_t> shape) {
  return GraphInput{std::move(shape), false, "layer \"c\""};
}

v1::Layer Binary() {
  v1::Layer l;
  l.set_op(v1::BINARY);
  l.mutable_binary()->set_kind(v1::BINARY_ADD);
  return l;
}

TEST(PlanGraphElementwiseTest, UnbatchedOperandsBroadcastOverTheBatch) {
  LayerPlan lp;
  const GraphInput in[] = {Batched({8, 5, 16}), Unbatched({5, 16})};
  ASSERT_THAT(PlanGraphElementwise(Binary(), in, &lp), IsOk());
  EXPECT_EQ(lp.output_shape, (std::vector<int64_t>{8, 5, 16}));
  EXPECT_TRUE(lp.batched);
  EXPECT_EQ(lp.attrs.graph_kind, 1);
  // A size-1 batch axis on an unbatched operand of the output's rank.
  const GraphInput ones[] = {Unbatched({1, 1, 16}), Batched({8, 5, 1})};
  ASSERT_THAT(PlanGraphElementwise(Binary(), ones, &lp), IsOk());
  EXPECT_EQ(lp.output_shape, (std::vector<int64_t>{8, 5, 16}));
  // Only unbatched inputs: an unbatched output, scalars included.
  const GraphInput both[] = {Unbatched({}), Unbatched({3, 1})};
  ASSERT_THAT(PlanGraphElementwise(Binary(), both, &lp), IsOk());
  EXPECT_EQ(lp.output_shape, (std::vector<int64_t>{3, 1}));
  EXPECT_FALSE(lp.batched);
}

TEST(PlanGraphElementwiseTest, BatchAxesMustLineUp) {
  LayerPlan lp;
  const GraphInput wide[] = {Batched({8, 5, 16}), Unbatched({4, 5, 16})};
  EXPECT_THAT(PlanGraphElementwise(Binary(), wide, &lp),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the unbatched layer \"c\" has 4 on the "
                                 "batch axis 0 of the BINARY output; it must "
                                 "be 1")));
  const GraphInput low[] = {Batched({8, 16}), Unbatched({2, 5, 16})};
  EXPECT_THAT(PlanGraphElementwise(Binary(), low, &lp),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a batched BINARY input must have the "
                                 "output's rank 3")));
}

TEST(PlanGraphElementwiseTest, ReduceAxesOnUnbatchedTensors) {
  v1::Layer l;
  l.set_op(v1::REDUCE);
  l.mutable_reduce()->add_axes(0);
  LayerPlan lp;
  const GraphInput c[] = {Unbatched({3, 4})};
  ASSERT_THAT(PlanGraphElementwise(l, c, &lp), IsOk());
  EXPECT_EQ(lp.output_shape, (std::vector<int64_t>{4}));
  EXPECT_FALSE(lp.batched);
  EXPECT_EQ(lp.attrs.reduce_axes, 1u);
  EXPECT_EQ(lp.attrs.graph_kind, 1);  // unset kind: SUM
  // Empty axes: every axis of an unbatched tensor, every non-batch axis of
  // a batched one; MEAN with keepdims.
  l.mutable_reduce()->clear_axes();
  l.mutable_reduce()->set_kind(v1::REDUCE_MEAN);
  l.mutable_reduce()->set_keepdims(true);
  ASSERT_THAT(PlanGraphElementwise(l, c, &lp), IsOk());
  EXPECT_EQ(lp.output_shape, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(lp.attrs.reduce_axes, 3u);
  const GraphInput x[] = {Batched({8, 3, 4})};
  ASSERT_THAT(PlanGraphElementwise(l, x, &lp), IsOk());
  EXPECT_EQ(lp.output_shape, (std::vector<int64_t>{8, 1, 1}));
  EXPECT_EQ(lp.attrs.reduce_axes, 6u);
  EXPECT_EQ(lp.attrs.graph_kind, 2);
  EXPECT_TRUE(lp.attrs.reduce_keepdims);
}

TEST(PlanGraphElementwiseTest, KindsMustBeSet) {
  LayerPlan lp;
  const GraphInput in[] = {Batched({8, 4})};
  v1::Layer u;
  u.set_op(v1::UNARY);
  u.mutable_unary();
  EXPECT_THAT(PlanGraphElementwise(u, in, &lp),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unary.kind: 0 is not one of UNARY_NEG")));
  v1::Layer c;
  c.set_op(v1::COMPARE);
  c.mutable_compare()->set_kind(static_cast<v1::CompareKind>(9));
  const GraphInput two[] = {Batched({8, 4}), Batched({8, 4})};
  EXPECT_THAT(PlanGraphElementwise(c, two, &lp),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("compare.kind: 9 is not one of")));
  EXPECT_TRUE(GraphInputTakesGradient(v1::WHERE, 1));
  EXPECT_FALSE(GraphInputTakesGradient(v1::WHERE, 0));
  EXPECT_FALSE(GraphInputTakesGradient(v1::COMPARE, 1));
  EXPECT_TRUE(GraphInputTakesGradient(v1::BINARY, 0));
}

}  // namespace
}  // namespace lockstep::model
