#include "kernels/spatial/validate.h"

#include "absl/status/status.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::spatial {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

Conv2dShape GoodConv() {
  Conv2dShape s;
  s.n = 2;
  s.c_in = 4;
  s.h = 8;
  s.w = 8;
  s.c_out = 6;
  s.k_h = 3;
  s.k_w = 3;
  s.pad_top = s.pad_bottom = s.pad_left = s.pad_right = 1;
  s.groups = 2;
  return s;
}

TEST(ValidateConv2dShapeTest, AcceptsAGoodShape) {
  EXPECT_THAT(ValidateConv2dShape(GoodConv()), IsOk());
}

TEST(ValidateConv2dShapeTest, RejectsZeroStride) {
  Conv2dShape s = GoodConv();
  s.stride_w = 0;
  EXPECT_THAT(ValidateConv2dShape(s),
              StatusIs(kInvalid, AllOf(HasSubstr("conv2d"),
                                       HasSubstr("stride_w must be >= 1"),
                                       HasSubstr("got 0"))));
}

TEST(ValidateConv2dShapeTest, RejectsNonPositiveSizesAndNegativePadding) {
  Conv2dShape s = GoodConv();
  s.c_in = 0;
  EXPECT_THAT(ValidateConv2dShape(s), StatusIs(kInvalid, HasSubstr("c_in")));
  s = GoodConv();
  s.dilation_h = -1;
  EXPECT_THAT(ValidateConv2dShape(s),
              StatusIs(kInvalid, HasSubstr("dilation_h")));
  s = GoodConv();
  s.pad_left = -2;
  EXPECT_THAT(ValidateConv2dShape(s),
              StatusIs(kInvalid, HasSubstr("pad_left must be >= 0")));
}

TEST(ValidateConv2dShapeTest, RejectsGroupsThatDoNotDivideChannels) {
  Conv2dShape s = GoodConv();
  s.groups = 3;  // divides c_out = 6 but not c_in = 4
  EXPECT_THAT(ValidateConv2dShape(s),
              StatusIs(kInvalid, HasSubstr("groups (3) must divide c_in (4)")));
  s = GoodConv();
  s.c_out = 5;
  EXPECT_THAT(ValidateConv2dShape(s),
              StatusIs(kInvalid, HasSubstr("must divide c_out (5)")));
}

TEST(ValidateConv2dShapeTest, RejectsKernelLargerThanPaddedInput) {
  Conv2dShape s = GoodConv();
  s.pad_top = s.pad_bottom = 0;
  s.k_h = 9;  // 9 > 8
  EXPECT_THAT(ValidateConv2dShape(s),
              StatusIs(kInvalid, AllOf(HasSubstr("kernel extent 9 along h"),
                                       HasSubstr("padded input (8)"))));
  s = GoodConv();
  s.dilation_w = 5;  // extent 5 * 2 + 1 = 11 > 8 + 2
  EXPECT_THAT(ValidateConv2dShape(s),
              StatusIs(kInvalid, HasSubstr("kernel extent 11 along w")));
}

TEST(ValidateConv2dShapeTest, RejectsAbsurdSizesWithoutOverflow) {
  Conv2dShape s = GoodConv();
  s.h = kMaxSpatialDim + 1;
  EXPECT_THAT(ValidateConv2dShape(s),
              StatusIs(kInvalid, HasSubstr("h must be <= 16777216")));
  s = GoodConv();
  s.n = s.c_in = s.h = s.w = kMaxSpatialDim;  // product 2^96 would overflow
  s.groups = 1;
  EXPECT_THAT(ValidateConv2dShape(s),
              StatusIs(kInvalid, HasSubstr("input elements")));
}

Pool2dShape GoodPool() {
  Pool2dShape s;
  s.n = 1;
  s.c = 3;
  s.h = 7;
  s.w = 6;
  s.k_h = 3;
  s.k_w = 2;
  s.stride_h = 2;
  s.stride_w = 2;
  s.pad_top = 1;
  s.pad_left = 1;
  return s;
}

TEST(ValidatePool2dShapeTest, AcceptsAGoodShape) {
  EXPECT_THAT(ValidatePool2dShape(GoodPool()), IsOk());
}

TEST(ValidatePool2dShapeTest, RejectsZeroStrideAndKernel) {
  Pool2dShape s = GoodPool();
  s.stride_h = 0;
  EXPECT_THAT(ValidatePool2dShape(s),
              StatusIs(kInvalid, HasSubstr("pool2d: stride_h must be >= 1")));
  s = GoodPool();
  s.k_w = 0;
  EXPECT_THAT(ValidatePool2dShape(s), StatusIs(kInvalid, HasSubstr("k_w")));
}

TEST(ValidatePool2dShapeTest, RejectsPaddingOnlyWindows) {
  Pool2dShape s = GoodPool();
  s.pad_left = 2;  // == k_w: window 0 would hold only padding
  EXPECT_THAT(ValidatePool2dShape(s),
              StatusIs(kInvalid, HasSubstr("pad_left (2) must be < k_w (2)")));
}

TEST(ValidatePool2dShapeTest, RejectsNegativePadding) {
  Pool2dShape s = GoodPool();
  s.pad_bottom = -1;
  EXPECT_THAT(ValidatePool2dShape(s),
              StatusIs(kInvalid, HasSubstr("pad_bottom must be >= 0, got -1")));
}

TEST(ValidatePool2dShapeTest, RejectsKernelLargerThanPaddedInput) {
  Pool2dShape s = GoodPool();
  s.h = 1;
  s.pad_top = 0;
  EXPECT_THAT(ValidatePool2dShape(s),
              StatusIs(kInvalid, HasSubstr("kernel extent 3 along h")));
}

TEST(ValidatePool2dShapeTest, RejectsDivisorsFloatCannotHold) {
  Pool2dShape s = GoodPool();
  s.h = s.w = s.k_h = s.k_w = 8192;  // 2^26 taps
  s.pad_top = s.pad_left = 0;
  EXPECT_THAT(ValidatePool2dShape(s),
              StatusIs(kInvalid, HasSubstr("window size k_h*k_w")));
}

TEST(ValidateGlobalPool2dShapeTest, ChecksSizes) {
  GlobalPool2dShape s;
  s.n = 2;
  s.c = 3;
  s.h = 7;
  s.w = 7;
  EXPECT_THAT(ValidateGlobalPool2dShape(s), IsOk());
  s.w = 0;
  EXPECT_THAT(
      ValidateGlobalPool2dShape(s),
      StatusIs(kInvalid, HasSubstr("global_avg_pool2d: w must be >= 1")));
  s.h = s.w = 8192;
  EXPECT_THAT(ValidateGlobalPool2dShape(s),
              StatusIs(kInvalid, HasSubstr("plane size h*w")));
}

TEST(ValidateResizeBilinearShapeTest, ChecksSizes) {
  ResizeBilinearShape s;
  s.n = 1;
  s.c = 2;
  s.in_h = 5;
  s.in_w = 6;
  s.out_h = 10;
  s.out_w = 3;
  EXPECT_THAT(ValidateResizeBilinearShape(s), IsOk());
  s.out_h = 0;
  EXPECT_THAT(ValidateResizeBilinearShape(s),
              StatusIs(kInvalid, HasSubstr("out_h must be >= 1")));
  s.out_h = kMaxResizeDim + 1;
  EXPECT_THAT(ValidateResizeBilinearShape(s),
              StatusIs(kInvalid, HasSubstr("out_h must be <= 8388608")));
}

}  // namespace
}  // namespace lockstep::spatial
