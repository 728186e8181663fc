// ValidateConv2dCall / ValidatePool2dCall: the whole-call checks every
// backend runs (their per-argument messages are covered by the backends'
// tests, which compare them across backends).
#include "kernels/spatial/tensor_shapes.h"

#include <vector>

#include "absl/status/status.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::spatial {
namespace {

using ::lockstep::kernels::DType;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

Tensor Z(std::vector<int64_t> shape) {
  return Tensor::Zeros(DType::kFloat32, std::move(shape)).value();
}

TEST(TensorShapesTest, ConvCallEachDirection) {
  OpAttrs a;
  a.stride_h = a.stride_w = 1;
  a.dilation_h = a.dilation_w = 1;
  a.groups = 1;
  std::vector<Tensor> fwd_in = {Z({2, 3, 6, 6}), Z({4, 3, 3, 3})};
  std::vector<Tensor> fwd_out = {Z({2, 4, 4, 4})};
  auto s = ValidateConv2dCall(kernels::op::kConv2dForward, fwd_in,
                              absl::MakeSpan(fwd_out), a);
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->n, 2);
  std::vector<Tensor> gi_in = {Z({2, 4, 4, 4}), Z({4, 3, 3, 3})};
  std::vector<Tensor> gi_out = {Z({2, 3, 6, 6})};
  EXPECT_THAT(ValidateConv2dCall(kernels::op::kConv2dGradInput, gi_in,
                                 absl::MakeSpan(gi_out), a),
              IsOk());
  std::vector<Tensor> gw_in = {Z({2, 3, 6, 6}), Z({2, 4, 4, 4})};
  std::vector<Tensor> gw_out = {Z({4, 3, 3, 3})};
  EXPECT_THAT(ValidateConv2dCall(kernels::op::kConv2dGradWeight, gw_in,
                                 absl::MakeSpan(gw_out), a),
              IsOk());
  // A wrong output shape names the op and the argument.
  std::vector<Tensor> bad_out = {Z({2, 4, 5, 4})};
  EXPECT_THAT(ValidateConv2dCall(kernels::op::kConv2dForward, fwd_in,
                                 absl::MakeSpan(bad_out), a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("conv2d.forward"), HasSubstr("y"))));
  EXPECT_THAT(
      ValidateConv2dCall("relu.forward", fwd_in, absl::MakeSpan(fwd_out), a),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("relu.forward: not a conv2d op")));
}

TEST(TensorShapesTest, PoolCallEachOp) {
  OpAttrs a;
  a.kernel_h = a.kernel_w = 2;
  a.stride_h = a.stride_w = 2;
  std::vector<Tensor> x = {Z({1, 2, 4, 4})};
  std::vector<Tensor> y = {Z({1, 2, 2, 2})};
  for (const char* op :
       {kernels::op::kMaxPool2dForward, kernels::op::kAvgPool2dForward}) {
    EXPECT_THAT(ValidatePool2dCall(op, x, absl::MakeSpan(y), a), IsOk()) << op;
  }
  std::vector<Tensor> max_in = {Z({1, 2, 4, 4}), Z({1, 2, 2, 2})};
  std::vector<Tensor> dx = {Z({1, 2, 4, 4})};
  EXPECT_THAT(ValidatePool2dCall(kernels::op::kMaxPool2dGrad, max_in,
                                 absl::MakeSpan(dx), a),
              IsOk());
  EXPECT_THAT(
      ValidatePool2dCall(kernels::op::kAvgPool2dGrad, y, absl::MakeSpan(dx), a),
      IsOk());
  // max_pool2d.grad needs {x, dy}: one input is an arity error.
  EXPECT_THAT(
      ValidatePool2dCall(kernels::op::kMaxPool2dGrad, y, absl::MakeSpan(dx), a),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("max_pool2d.grad")));
  EXPECT_THAT(ValidatePool2dCall("conv2d.forward", x, absl::MakeSpan(y), a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not a max_pool2d / avg_pool2d op")));
}

}  // namespace
}  // namespace lockstep::spatial
