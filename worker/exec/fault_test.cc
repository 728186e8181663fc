#include "worker/exec/fault.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/manifest.h"
#include "worker/exec/test_util.h"

namespace lockstep::worker {
namespace {

namespace v1 = ::lockstep::v1;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(FaultSpecTest, ParsesEveryKey) {
  auto f = ParseFaultSpec(
      "step=3, layer=conv1,role=grad_activation,bit=30,element=12,slot=input0,"
      "index=9");
  ASSERT_THAT(f, IsOk());
  EXPECT_EQ(f->step, 3);
  EXPECT_EQ(f->layer, "conv1");
  EXPECT_EQ(f->role, v1::GRAD_ACTIVATION);
  EXPECT_EQ(f->bit, 30);
  EXPECT_EQ(f->element, 12);
  EXPECT_EQ(f->slot, "input0");
  EXPECT_EQ(f->index, 9);
  auto again = ParseFaultSpec(f->ToString());
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->ToString(), f->ToString());

  auto minimal = ParseFaultSpec("step=0,role=INPUT,bit=1");
  ASSERT_THAT(minimal, IsOk());
  EXPECT_EQ(minimal->layer, "");
  EXPECT_EQ(minimal->element, 0);
  EXPECT_FALSE(minimal->slot.has_value());
}

TEST(FaultSpecTest, ErrorsNameTheKeyAndLimit) {
  const auto invalid = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(ParseFaultSpec("step=0,layer=a,role=ACTIVATION,bit=32"),
              StatusIs(invalid, HasSubstr("bit: \"32\" is outside [0, 31]")));
  EXPECT_THAT(ParseFaultSpec("step=-1,layer=a,role=ACTIVATION,bit=1"),
              StatusIs(invalid, HasSubstr("step: \"-1\" is not an integer")));
  EXPECT_THAT(ParseFaultSpec("step=0,layer=a,role=GRADIENT,bit=1"),
              StatusIs(invalid, AllOf(HasSubstr("role: \"GRADIENT\""),
                                      HasSubstr("GRAD_WEIGHT"))));
  EXPECT_THAT(ParseFaultSpec("step=0,layer=a,bit=1"),
              StatusIs(invalid, HasSubstr("role: missing")));
  EXPECT_THAT(ParseFaultSpec("step=0,role=WEIGHT,bit=1"),
              StatusIs(invalid, HasSubstr("layer: missing")));
  EXPECT_THAT(ParseFaultSpec("step=0,layer=a,role=WEIGHT,bit=1,colour=red"),
              StatusIs(invalid, HasSubstr("unknown key \"colour\"")));
  EXPECT_THAT(ParseFaultSpec("step=0,step=1,layer=a,role=WEIGHT,bit=1"),
              StatusIs(invalid, HasSubstr("step: given twice")));
  EXPECT_THAT(ParseFaultSpec("step"),
              StatusIs(invalid, HasSubstr("\"step\" is not key=value")));
  EXPECT_THAT(ParseFaultSpec(""), StatusIs(invalid, HasSubstr("empty")));
  EXPECT_THAT(ParseFaultSpec("step=0,layer=a,role=WEIGHT,bit=1,element=x"),
              StatusIs(invalid, HasSubstr("element: \"x\"")));
}

TEST(FaultSpecTest, ResolvesAgainstTheStepTensors) {
  v1::JobConfig config = testing::BaseConfig(4, 5);
  config.mutable_optimizer()->set_kind(v1::ADAM);
  auto tensors = model::StepTensors(testing::MlpPlan(4), config);
  ASSERT_THAT(tensors, IsOk());
  auto at = [&](const char* spec) {
    auto f = ParseFaultSpec(spec);
    EXPECT_THAT(f, IsOk());
    return ResolveFault(*f, *tensors, 5);
  };
  auto act = at("step=1,layer=relu1,role=ACTIVATION,bit=3");
  ASSERT_THAT(act, IsOk());
  EXPECT_EQ((*tensors)[*act].layer(), "relu1");
  EXPECT_EQ((*tensors)[*act].role(), v1::ACTIVATION);

  auto input = at("step=0,role=INPUT,bit=3,element=23");
  ASSERT_THAT(input, IsOk());
  EXPECT_EQ(*input, 0);

  // Without index the first matching entry (the weight's m); index picks
  // the bias's.
  auto m = at("step=0,layer=fc1,role=OPTIMIZER_STATE,slot=m,bit=3");
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ((*tensors)[*m].shape_size(), 2);
  auto bias_m = at(
      absl::StrCat("step=0,layer=fc1,role=OPTIMIZER_STATE,slot=m,bit=3,index=",
                   *m + 3)
          .c_str());
  ASSERT_THAT(bias_m, IsOk());
  EXPECT_EQ((*tensors)[*bias_m].shape_size(), 1);

  const auto invalid = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(at("step=5,layer=fc1,role=ACTIVATION,bit=1"),
              StatusIs(invalid, HasSubstr("step: 5 is outside the job's steps "
                                          "[0, 4]")));
  EXPECT_THAT(at("step=0,layer=fc1,role=ACTIVATION,bit=1,element=32"),
              StatusIs(invalid, HasSubstr("element: 32 is outside [0, 31]")));
  EXPECT_THAT(
      at("step=0,layer=relu1,role=GRAD_WEIGHT,bit=1"),
      StatusIs(invalid, AllOf(HasSubstr("layer \"relu1\" role GRAD_WEIGHT "
                                        "matches no tensor"),
                              HasSubstr("relu.grad"))));
  EXPECT_THAT(at("step=0,layer=fc9,role=WEIGHT,bit=1"),
              StatusIs(invalid, HasSubstr("no layer \"fc9\"")));
  EXPECT_THAT(at("step=0,layer=fc1,role=OPTIMIZER_STATE,slot=velocity,bit=1"),
              StatusIs(invalid, HasSubstr("slot velocity")));
}

TEST(FaultSpecTest, FlipBitFlipsExactlyOneBit) {
  auto t = kernels::Tensor::FromValues<float>({3}, {1.0f, 2.0f, 3.0f});
  ASSERT_THAT(t, IsOk());
  ASSERT_THAT(FlipBit(*t, 1, 31), IsOk());  // sign bit
  EXPECT_EQ(t->data<float>()[1], -2.0f);
  ASSERT_THAT(FlipBit(*t, 0, 0), IsOk());
  uint32_t bits;
  std::memcpy(&bits, t->data<float>(), 4);
  EXPECT_EQ(bits, 0x3f800001u);
  EXPECT_EQ(t->data<float>()[2], 3.0f);
  EXPECT_THAT(FlipBit(*t, 3, 0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(FlipBit(*t, 0, 32), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace lockstep::worker
