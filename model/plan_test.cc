#include "model/plan.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lockstep/v1/job.pb.h"
#include "lockstep/v1/model.pb.h"
#include "model/spec_io.h"

namespace lockstep::model {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

constexpr char kConfig[] = R"pb(
  seed: 1
  batch_size: 4
  steps: 3
  optimizer { learning_rate: 0.1 }
)pb";

v1::Model Model(const std::string& text) {
  absl::StatusOr<v1::Model> m = ParseModel(text, "test");
  EXPECT_THAT(m, IsOk());
  return m.ok() ? *m : v1::Model();
}

v1::JobConfig Config(const std::string& text = kConfig) {
  absl::StatusOr<v1::JobConfig> c = ParseJobConfig(text, "test");
  EXPECT_THAT(c, IsOk());
  return c.ok() ? *c : v1::JobConfig();
}

absl::StatusOr<ModelPlan> Plan(const std::string& model,
                               const std::string& config = kConfig,
                               const Limits& limits = Limits()) {
  return PlanModel(Model(model), Config(config), limits);
}

// Plans `model` and returns it, failing the test on error.
ModelPlan MustPlan(const std::string& model,
                   const std::string& config = kConfig) {
  absl::StatusOr<ModelPlan> plan = Plan(model, config);
  EXPECT_THAT(plan, IsOk());
  return plan.ok() ? *std::move(plan) : ModelPlan();
}

// A model with `body` between an input of `input_shape` and a dense +
// loss head, so any body shape can be tested.
std::string WithHead(const std::string& input_shape, const std::string& body) {
  return absl::StrCat("input_shape: ", input_shape, " num_classes: 3 ", body,
                      R"pb(
                        layers {
                          name: "head"
                          op: DENSE
                          dense { units: 3 }
                        }
                        layers { name: "loss" op: SOFTMAX_XENT }
                      )pb");
}

TEST(PlanModelTest, DenseFlattensItsInput) {
  const ModelPlan plan = MustPlan(R"pb(
    name: "d"
    input_shape: [ 3, 2 ]
    num_classes: 5
    layers {
      name: "fc"
      op: DENSE
      dense { units: 5 use_bias: true }
    }
    layers { name: "loss" op: SOFTMAX_XENT }
  )pb");
  EXPECT_EQ(plan.model_name, "d");
  EXPECT_THAT(plan.input_shape, ElementsAre(4, 3, 2));
  EXPECT_EQ(plan.num_classes, 5);
  ASSERT_EQ(plan.layers.size(), 2u);
  const LayerPlan& fc = plan.layers[0];
  EXPECT_EQ(fc.index, 0);
  EXPECT_EQ(fc.name, "fc");
  EXPECT_EQ(fc.op, v1::DENSE);
  EXPECT_THAT(fc.inputs, ElementsAre(kModelInput));
  ASSERT_EQ(fc.input_shapes.size(), 1u);
  EXPECT_THAT(fc.input_shapes[0], ElementsAre(4, 3, 2));  // not flattened
  EXPECT_THAT(fc.output_shape, ElementsAre(4, 5));
  ASSERT_EQ(fc.params.size(), 2u);
  EXPECT_EQ(fc.params[0].name, "weight");
  EXPECT_EQ(fc.params[0].role, v1::WEIGHT);
  EXPECT_THAT(fc.params[0].shape, ElementsAre(6, 5));
  EXPECT_EQ(fc.params[0].fan_in, 6);
  EXPECT_EQ(fc.params[0].fan_out, 5);
  EXPECT_EQ(fc.params[1].name, "bias");
  EXPECT_EQ(fc.params[1].role, v1::BIAS);
  EXPECT_THAT(fc.params[1].shape, ElementsAre(5));
  EXPECT_FALSE(fc.attrs.transpose_x);
  EXPECT_FALSE(fc.attrs.transpose_w);
  const LayerPlan& loss = plan.layers[1];
  EXPECT_THAT(loss.inputs, ElementsAre(0));
  EXPECT_THAT(loss.input_shapes[0], ElementsAre(4, 5));
  EXPECT_THAT(loss.output_shape, ElementsAre(1));
  EXPECT_THAT(loss.params, IsEmpty());
  EXPECT_EQ(plan.parameter_count, 6 * 5 + 5);
}

TEST(PlanModelTest, DenseWithoutBiasHasOnlyAWeight) {
  const ModelPlan plan = MustPlan(WithHead("[ 7 ]", ""));
  ASSERT_EQ(plan.layers[0].params.size(), 1u);
  EXPECT_THAT(plan.layers[0].params[0].shape, ElementsAre(7, 3));
  EXPECT_EQ(plan.parameter_count, 21);
}

TEST(PlanModelTest, Conv2dShapesParamsAndAttrs) {
  const ModelPlan plan = MustPlan(WithHead("[ 3, 9, 9 ]", R"pb(
    layers {
      name: "conv"
      op: CONV2D
      conv2d {
        filters: 4
        kernel_h: 3
        kernel_w: 5
        stride_h: 2
        pad_h: 1
        pad_w: 2
        dilation_h: 2
        use_bias: true
      }
    }
  )pb"));
  const LayerPlan& conv = plan.layers[0];
  // H: (9 + 2 - (2 * 2 + 1)) / 2 + 1 = 4; W: (9 + 4 - 5) / 1 + 1 = 9.
  EXPECT_THAT(conv.output_shape, ElementsAre(4, 4, 4, 9));
  ASSERT_EQ(conv.params.size(), 2u);
  EXPECT_THAT(conv.params[0].shape, ElementsAre(4, 3, 3, 5));
  EXPECT_EQ(conv.params[0].fan_in, 3 * 3 * 5);
  EXPECT_EQ(conv.params[0].fan_out, 4 * 3 * 5);
  EXPECT_THAT(conv.params[1].shape, ElementsAre(4));
  EXPECT_EQ(conv.params[1].role, v1::BIAS);
  const kernels::OpAttrs& a = conv.attrs;
  EXPECT_EQ(a.kernel_h, 3);
  EXPECT_EQ(a.kernel_w, 5);
  EXPECT_EQ(a.stride_h, 2);
  EXPECT_EQ(a.stride_w, 1);  // 0 means 1
  EXPECT_EQ(a.pad_top, 1);
  EXPECT_EQ(a.pad_bottom, 1);
  EXPECT_EQ(a.pad_left, 2);
  EXPECT_EQ(a.pad_right, 2);
  EXPECT_EQ(a.dilation_h, 2);
  EXPECT_EQ(a.dilation_w, 1);  // 0 means 1
  EXPECT_EQ(a.groups, 1);
  // The head flattens [4, 4, 4, 9] to 144 features.
  EXPECT_THAT(plan.layers[1].params[0].shape, ElementsAre(144, 3));
  EXPECT_EQ(plan.parameter_count, 4 * 3 * 3 * 5 + 4 + 144 * 3);
}

TEST(PlanModelTest, ConvTranspose2dShapesParamsAndAttrs) {
  const ModelPlan plan = MustPlan(WithHead("[ 4, 5, 3 ]", R"pb(
    layers {
      name: "up"
      op: CONV_TRANSPOSE2D
      conv2d {
        filters: 6
        kernel_h: 3
        kernel_w: 2
        stride_h: 2
        stride_w: 3
        pad_h: 1
        dilation_w: 2
        output_padding_h: 1
        output_padding_w: 2
        groups: 2
        use_bias: true
      }
    }
  )pb"));
  const LayerPlan& up = plan.layers[0];
  // H: (5 - 1) * 2 - 2 + 1 * (3 - 1) + 1 + 1 = 10;
  // W: (3 - 1) * 3 - 0 + 2 * (2 - 1) + 1 + 2 = 11.
  EXPECT_THAT(up.output_shape, ElementsAre(4, 6, 10, 11));
  ASSERT_EQ(up.params.size(), 2u);
  // [in_channels, filters / groups, kh, kw], PyTorch's layout and fans.
  EXPECT_THAT(up.params[0].shape, ElementsAre(4, 3, 3, 2));
  EXPECT_EQ(up.params[0].fan_in, 3 * 3 * 2);
  EXPECT_EQ(up.params[0].fan_out, 4 * 3 * 2);
  EXPECT_THAT(up.params[1].shape, ElementsAre(6));
  EXPECT_EQ(up.params[1].role, v1::BIAS);
  // The attrs are those of the conv2d whose input gradient it is.
  const kernels::OpAttrs& a = up.attrs;
  EXPECT_EQ(a.kernel_h, 3);
  EXPECT_EQ(a.kernel_w, 2);
  EXPECT_EQ(a.stride_h, 2);
  EXPECT_EQ(a.stride_w, 3);
  EXPECT_EQ(a.pad_top, 1);
  EXPECT_EQ(a.pad_bottom, 1);
  EXPECT_EQ(a.pad_left, 0);
  EXPECT_EQ(a.dilation_h, 1);
  EXPECT_EQ(a.dilation_w, 2);
  EXPECT_EQ(a.groups, 2);
  // 2 * input elements * (F / groups) * kh * kw + the bias.
  EXPECT_EQ(LayerForwardFlops(up),
            2 * (4 * 4 * 5 * 3) * 3 * 3 * 2 + 4 * 6 * 10 * 11);
  EXPECT_THAT(DescribePlan(plan), HasSubstr("CONV_TRANSPOSE2D"));
  EXPECT_EQ(plan.parameter_count, 4 * 3 * 3 * 2 + 6 + 6 * 10 * 11 * 3);
}

TEST(PlanModelTest, Conv2dKernelMayEqualThePaddedInput) {
  const ModelPlan plan = MustPlan(WithHead("[ 1, 4, 4 ]", R"pb(
    layers {
      name: "conv"
      op: CONV2D
      conv2d { filters: 2 kernel_h: 6 kernel_w: 4 pad_h: 1 }
    }
  )pb"));
  EXPECT_THAT(plan.layers[0].output_shape, ElementsAre(4, 2, 1, 1));
}

TEST(PlanModelTest, MaxPoolDefaultsStrideToTheKernel) {
  const ModelPlan plan = MustPlan(WithHead("[ 3, 7, 6 ]", R"pb(
    layers {
      name: "pool"
      op: MAX_POOL2D
      pool { kernel_h: 3 kernel_w: 2 pad_h: 1 }
    }
  )pb"));
  const LayerPlan& pool = plan.layers[0];
  // H: (7 + 2 - 3) / 3 + 1 = 3; W: (6 - 2) / 2 + 1 = 3.
  EXPECT_THAT(pool.output_shape, ElementsAre(4, 3, 3, 3));
  EXPECT_THAT(pool.params, IsEmpty());
  EXPECT_EQ(pool.attrs.kernel_h, 3);
  EXPECT_EQ(pool.attrs.kernel_w, 2);
  EXPECT_EQ(pool.attrs.stride_h, 3);
  EXPECT_EQ(pool.attrs.stride_w, 2);
  EXPECT_EQ(pool.attrs.pad_top, 1);
  EXPECT_EQ(pool.attrs.pad_bottom, 1);
  EXPECT_EQ(pool.attrs.pad_left, 0);
  EXPECT_EQ(pool.attrs.pad_right, 0);
}

TEST(PlanModelTest, AvgPoolCountsPadding) {
  const ModelPlan plan = MustPlan(WithHead("[ 2, 8, 8 ]", R"pb(
    layers {
      name: "pool"
      op: AVG_POOL2D
      pool { kernel_h: 3 kernel_w: 3 stride_h: 2 stride_w: 1 pad_h: 1 pad_w: 1 }
    }
  )pb"));
  const LayerPlan& pool = plan.layers[0];
  // H: (8 + 2 - 3) / 2 + 1 = 4; W: (8 + 2 - 3) / 1 + 1 = 8.
  EXPECT_THAT(pool.output_shape, ElementsAre(4, 2, 4, 8));
  EXPECT_TRUE(pool.attrs.count_include_pad);
  EXPECT_EQ(pool.attrs.stride_h, 2);
  EXPECT_EQ(pool.attrs.stride_w, 1);
}

TEST(PlanModelTest, GlobalAvgPoolFlattensTheImage) {
  const ModelPlan plan = MustPlan(WithHead("[ 5, 3, 2 ]", R"pb(
    layers { name: "gap" op: GLOBAL_AVG_POOL }
  )pb"));
  EXPECT_THAT(plan.layers[0].output_shape, ElementsAre(4, 5));
  EXPECT_THAT(plan.layers[1].params[0].shape, ElementsAre(5, 3));
}

TEST(PlanModelTest, FlattenReluAndBiasAdd) {
  const ModelPlan plan = MustPlan(WithHead("[ 2, 3, 4 ]", R"pb(
    layers { name: "bias" op: BIAS_ADD }
    layers { name: "relu" op: RELU }
    layers { name: "flat" op: FLATTEN }
    layers { name: "bias2" op: BIAS_ADD }
  )pb"));
  const LayerPlan& bias = plan.layers[0];
  EXPECT_THAT(bias.output_shape, ElementsAre(4, 2, 3, 4));
  ASSERT_EQ(bias.params.size(), 1u);
  EXPECT_EQ(bias.params[0].name, "bias");
  EXPECT_EQ(bias.params[0].role, v1::BIAS);
  EXPECT_THAT(bias.params[0].shape, ElementsAre(2));  // channel dim 1
  EXPECT_THAT(plan.layers[1].output_shape, ElementsAre(4, 2, 3, 4));
  EXPECT_THAT(plan.layers[2].output_shape, ElementsAre(4, 24));
  EXPECT_THAT(plan.layers[3].params[0].shape, ElementsAre(24));
  EXPECT_EQ(plan.parameter_count, 2 + 24 + 24 * 3);
}

TEST(PlanModelTest, OpSetV2LayersKeepTheirShapeAndLayerNormHasScaleAndShift) {
  const ModelPlan plan = MustPlan(WithHead("[ 5, 6 ]", R"pb(
    layers { name: "s" op: SIGMOID }
    layers { name: "t" op: TANH }
    layers { name: "si" op: SILU }
    layers { name: "g" op: GELU }
    layers { name: "gt" op: GELU_TANH }
    layers { name: "sm" op: SOFTMAX }
    layers { name: "ln" op: LAYER_NORM }
  )pb"));
  for (int i = 0; i < 7; ++i) {
    EXPECT_THAT(plan.layers[i].output_shape, ElementsAre(4, 5, 6));
  }
  const LayerPlan& ln = plan.layers[6];
  ASSERT_EQ(ln.params.size(), 2u);
  EXPECT_EQ(ln.params[0].role, v1::WEIGHT);
  EXPECT_TRUE(ln.params[0].init_ones);
  EXPECT_THAT(ln.params[0].shape, ElementsAre(6));
  EXPECT_EQ(ln.params[1].role, v1::BIAS);
  EXPECT_FALSE(ln.params[1].init_ones);
  EXPECT_THAT(ln.params[1].shape, ElementsAre(6));
  EXPECT_EQ(LayerForwardFlops(ln), 8 * 4 * 5 * 6);
  EXPECT_EQ(LayerForwardFlops(plan.layers[5]), 4 * 4 * 5 * 6);
}

TEST(PlanModelTest, BatchNormParamsAttrsAndErrors) {
  const ModelPlan plan = MustPlan(WithHead("[ 3, 4, 4 ]", R"pb(
    layers { name: "bn" op: BATCH_NORM }
    layers {
      name: "frozen"
      op: BATCH_NORM
      batch_norm { eval: true momentum: 0.5 epsilon: 0.001 }
    }
  )pb"));
  const LayerPlan& bn = plan.layers[0];
  EXPECT_THAT(bn.output_shape, ElementsAre(4, 3, 4, 4));
  ASSERT_EQ(bn.params.size(), 2u);
  EXPECT_THAT(bn.params[0].shape, ElementsAre(3));
  EXPECT_TRUE(bn.params[0].init_ones);
  EXPECT_FALSE(bn.attrs.batch_norm_eval);
  EXPECT_FLOAT_EQ(bn.attrs.batch_norm_momentum, 0.1f);
  EXPECT_FLOAT_EQ(bn.attrs.norm_epsilon, 1e-5f);
  const LayerPlan& frozen = plan.layers[1];
  EXPECT_TRUE(frozen.attrs.batch_norm_eval);
  EXPECT_FLOAT_EQ(frozen.attrs.batch_norm_momentum, 0.5f);
  EXPECT_FLOAT_EQ(frozen.attrs.norm_epsilon, 0.001f);
  EXPECT_THAT(Plan(WithHead("[ 3 ]", R"pb(
                layers {
                  name: "bn"
                  op: BATCH_NORM
                  batch_norm { momentum: 1.5 }
                }
              )pb")),
              StatusIs(kInvalid,
                       "layers[0] \"bn\": batch_norm.momentum: 1.5 "
                       "is outside [0, 1]"));
  // Batch 1 of a [3] input: one value per channel cannot be normalised
  // with batch statistics.
  EXPECT_THAT(
      Plan(WithHead("[ 3 ]", R"pb(layers { name: "bn" op: BATCH_NORM })pb"),
           R"pb(seed: 1
                batch_size: 1
                steps: 1
                optimizer { learning_rate: 0.1 })pb"),
      StatusIs(kInvalid, HasSubstr("BATCH_NORM in training needs at "
                                   "least 2 values per channel")));
  EXPECT_THAT(Plan(WithHead("[ 3 ]", R"pb(layers {
                                            name: "bn"
                                            op: BATCH_NORM
                                            batch_norm { eval: true }
                                          })pb"),
                   R"pb(seed: 1
                        batch_size: 1
                        steps: 1
                        optimizer { learning_rate: 0.1 })pb"),
              IsOk());
}

TEST(PlanModelTest, GroupedAndDepthwiseConvolution) {
  const ModelPlan plan = MustPlan(WithHead("[ 8, 6, 6 ]", R"pb(
    layers {
      name: "dw"
      op: CONV2D
      conv2d { filters: 8 kernel_h: 3 kernel_w: 3 pad_h: 1 pad_w: 1 groups: 8 }
    }
    layers {
      name: "grouped"
      op: CONV2D
      conv2d { filters: 4 kernel_h: 1 kernel_w: 1 groups: 2 }
    }
  )pb"));
  EXPECT_THAT(plan.layers[0].params[0].shape, ElementsAre(8, 1, 3, 3));
  EXPECT_EQ(plan.layers[0].params[0].fan_in, 9);
  EXPECT_EQ(plan.layers[0].attrs.groups, 8);
  EXPECT_THAT(plan.layers[1].params[0].shape, ElementsAre(4, 4, 1, 1));
  EXPECT_EQ(plan.layers[1].attrs.groups, 2);
  // 2 * N * F * OH * OW * (C / groups) * kh * kw.
  EXPECT_EQ(LayerForwardFlops(plan.layers[0]), 2 * 4 * 8 * 6 * 6 * 1 * 9);
  EXPECT_THAT(Plan(WithHead("[ 8, 6, 6 ]", R"pb(
                layers {
                  name: "bad"
                  op: CONV2D
                  conv2d { filters: 8 kernel_h: 1 kernel_w: 1 groups: 3 }
                }
              )pb")),
              StatusIs(kInvalid,
                       "layers[0] \"bad\": conv2d.groups: 3 must divide both "
                       "the input channels (8) and conv2d.filters (8)"));
  EXPECT_THAT(Plan(WithHead("[ 6 ]", R"pb(
                layers { name: "ln" op: LAYER_NORM }
                layers { name: "ln2" op: LAYER_NORM }
              )pb")),
              IsOk());
}

TEST(PlanModelTest, ResizeBilinear) {
  const ModelPlan plan = MustPlan(WithHead("[ 2, 3, 5 ]", R"pb(
    layers {
      name: "up"
      op: RESIZE_BILINEAR
      resize { out_h: 7 out_w: 2 }
    }
  )pb"));
  EXPECT_THAT(plan.layers[0].output_shape, ElementsAre(4, 2, 7, 2));
  EXPECT_THAT(plan.layers[0].params, IsEmpty());
}

TEST(PlanModelTest, AddResolvesNamedInputsAndDefaults) {
  const ModelPlan plan = MustPlan(WithHead("[ 6 ]", R"pb(
    layers {
      name: "a"
      op: DENSE
      dense { units: 4 }
    }
    layers { name: "r" op: RELU }
    layers {
      name: "b"
      op: DENSE
      dense { units: 4 }
    }
    layers {
      name: "sum"
      op: ADD
      inputs: [ "r", "b" ]
    }
    layers {
      name: "twice"
      op: ADD
      inputs: [ "sum", "sum" ]
    }
  )pb"));
  EXPECT_THAT(plan.layers[0].inputs, ElementsAre(kModelInput));
  EXPECT_THAT(plan.layers[1].inputs, ElementsAre(0));
  EXPECT_THAT(plan.layers[2].inputs, ElementsAre(1));
  EXPECT_THAT(plan.layers[3].inputs, ElementsAre(1, 2));
  EXPECT_THAT(plan.layers[3].output_shape, ElementsAre(4, 4));
  ASSERT_EQ(plan.layers[3].input_shapes.size(), 2u);
  EXPECT_THAT(plan.layers[3].input_shapes[1], ElementsAre(4, 4));
  EXPECT_THAT(plan.layers[4].inputs, ElementsAre(3, 3));
  EXPECT_THAT(plan.layers[5].inputs, ElementsAre(4));  // the head
}

TEST(PlanModelTest, ExplicitInputCanSkipBackToAnyEarlierLayer) {
  const ModelPlan plan = MustPlan(R"pb(
    input_shape: 8
    num_classes: 2
    layers {
      name: "fc1"
      op: DENSE
      dense { units: 2 }
    }
    layers { name: "relu" op: RELU }
    layers { name: "loss" op: SOFTMAX_XENT inputs: "relu" }
  )pb");
  EXPECT_THAT(plan.layers[2].inputs, ElementsAre(1));
}

TEST(PlanModelTest, ForwardFlopsCountsEachOp) {
  const ModelPlan plan = MustPlan(R"pb(
    input_shape: [ 2, 6, 6 ]
    num_classes: 3
    layers {
      name: "conv"
      op: CONV2D
      conv2d {
        filters: 4
        kernel_h: 3
        kernel_w: 3
        pad_h: 1
        pad_w: 1
        use_bias: true
      }
    }
    layers { name: "relu" op: RELU }
    layers {
      name: "pool"
      op: MAX_POOL2D
      pool { kernel_h: 2 kernel_w: 2 }
    }
    layers {
      name: "up"
      op: RESIZE_BILINEAR
      resize { out_h: 4 out_w: 4 }
    }
    layers { name: "gap" op: GLOBAL_AVG_POOL }
    layers {
      name: "fc"
      op: DENSE
      dense { units: 3 use_bias: true }
    }
    layers { name: "loss" op: SOFTMAX_XENT }
  )pb");
  const int64_t n = 4;
  const std::vector<int64_t> expected = {
      2 * n * 4 * 6 * 6 * (2 * 3 * 3) + n * 4 * 6 * 6,  // conv + bias
      n * 4 * 6 * 6,                                    // relu
      n * 4 * 3 * 3 * 4,                                // pool 2x2
      n * 4 * 4 * 4 * 8,                                // resize
      n * 4 * 4 * 4,                                    // gap input
      2 * n * 4 * 3 + n * 3,                            // dense + bias
      4 * n * 3,                                        // loss
  };
  int64_t total = 0;
  ASSERT_EQ(plan.layers.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(LayerForwardFlops(plan.layers[i]), expected[i]) << i;
    total += expected[i];
  }
  EXPECT_EQ(ForwardFlops(plan), total);
}

TEST(PlanModelTest, ForwardFlopsSaturates) {
  LayerPlan huge;
  huge.op = v1::DENSE;
  huge.output_shape = {int64_t{1} << 40, int64_t{1} << 20};
  huge.params.push_back(ParamPlan{"weight", v1::WEIGHT, {1 << 20, 1 << 20}});
  ModelPlan plan;
  plan.layers = {huge, huge};
  EXPECT_EQ(ForwardFlops(plan), std::numeric_limits<int64_t>::max());
}

TEST(PlanModelTest, ShapeToString) {
  EXPECT_EQ(ShapeToString({16, 8, 8, 8}), "[16, 8, 8, 8]");
  EXPECT_EQ(ShapeToString({}), "[]");
}

// The messages quoted in the design, each from a model built to hit it.
TEST(PlanModelErrorsTest, MessagesNameLayerFieldAndLimit) {
  EXPECT_THAT(Plan(WithHead("[ 1, 8, 8 ]", R"pb(
                layers {
                  name: "conv1"
                  op: CONV2D
                  conv2d { filters: 2 kernel_h: 3 kernel_w: 3 }
                }
                layers { name: "r" op: RELU }
                layers { name: "b" op: BIAS_ADD }
                layers {
                  name: "conv2"
                  op: CONV2D
                  conv2d { filters: 2 kernel_h: 7 kernel_w: 1 }
                }
              )pb")),
              StatusIs(kInvalid,
                       "layers[3] \"conv2\": conv2d.kernel_h: 7 "
                       "exceeds the padded input height 6"));
  EXPECT_THAT(Plan(WithHead("[ 1, 8, 8 ]", R"pb(
                layers {
                  name: "conv"
                  op: CONV2D
                  conv2d { filters: 2 kernel_h: 1 kernel_w: 9 pad_w: 0 }
                }
              )pb")),
              StatusIs(kInvalid,
                       "layers[0] \"conv\": conv2d.kernel_w: 9 "
                       "exceeds the padded input width 8"));
  EXPECT_THAT(Plan(WithHead("[ 4 ]", R"pb(
                layers { name: "add1" op: ADD }
              )pb")),
              StatusIs(kInvalid, HasSubstr("layers[0] \"add1\": ADD needs "
                                           "exactly 2 inputs, got 1")));
  EXPECT_THAT(
      Plan(WithHead("[ 4 ]", R"pb(
        layers {
          name: "fc"
          op: DENSE
          dense { units: 0 }
        }
      )pb")),
      StatusIs(kInvalid,
               "layers[0] \"fc\": dense.units: 0 is outside 1..1048576"));
  EXPECT_THAT(Plan(WithHead("[ 4 ]", ""), R"pb(
                batch_size: 100000
                steps: 1
                optimizer { learning_rate: 1 }
              )pb"),
              StatusIs(kInvalid,
                       "config.batch_size: 100000 exceeds the limit of 4096"));
  EXPECT_THAT(
      Plan(WithHead("[ 4 ]", R"pb(
        layers { name: "c1" op: CONV2D }
      )pb")),
      StatusIs(kInvalid, "layers[0] \"c1\": CONV2D needs conv2d params"));
  v1::Model model =
      Model(WithHead("[ 4 ]", R"pb(layers { name: "x" op: RELU })pb"));
  model.mutable_layers(0)->set_op(static_cast<v1::LayerOp>(99));
  EXPECT_THAT(
      PlanModel(model, Config(), Limits()),
      StatusIs(kInvalid, "layers[0] \"x\": op: 99 is not a known LayerOp"));
}

TEST(PlanModelErrorsTest, UnprintableNamesAreEscapedAndCut) {
  v1::Model model =
      Model(WithHead("[ 4 ]", R"pb(layers { name: "x" op: RELU })pb"));
  model.mutable_layers(0)->set_name(std::string("a\nb\0c", 5) +
                                    std::string(1000, 'z'));
  const absl::Status s = PlanModel(model, Config(), Limits()).status();
  EXPECT_THAT(s, StatusIs(kInvalid, HasSubstr("layers[0] \"a\\nb\\x00")));
  EXPECT_THAT(s, StatusIs(kInvalid, HasSubstr("\"...: name: must match")));
  EXPECT_LT(s.message().size(), 200u);
}

TEST(PlanModelErrorsTest, LimitsAreHonoured) {
  const std::string model = WithHead("[ 3, 8, 8 ]", R"pb(
    layers {
      name: "conv"
      op: CONV2D
      conv2d { filters: 8 kernel_h: 3 kernel_w: 3 }
    }
  )pb");
  ASSERT_THAT(Plan(model), IsOk());
  Limits limits;
  limits.max_layers = 2;
  EXPECT_THAT(
      Plan(model, kConfig, limits),
      StatusIs(kInvalid, "model.layers: 3 layers exceeds the limit of 2"));
  limits = Limits();
  limits.max_batch = 3;
  EXPECT_THAT(
      Plan(model, kConfig, limits),
      StatusIs(kInvalid, "config.batch_size: 4 exceeds the limit of 3"));
  limits = Limits();
  limits.max_steps = 2;
  EXPECT_THAT(Plan(model, kConfig, limits),
              StatusIs(kInvalid, "config.steps: 3 exceeds the limit of 2"));
  limits = Limits();
  limits.max_classes = 2;
  EXPECT_THAT(
      Plan(model, kConfig, limits),
      StatusIs(kInvalid, "model.num_classes: 3 exceeds the limit of 2"));
  limits = Limits();
  limits.max_dim = 7;
  EXPECT_THAT(
      Plan(model, kConfig, limits),
      StatusIs(kInvalid, "model.input_shape[1]: 8 exceeds the limit of 7"));
  // The input [4, 3, 8, 8] has 768 elements, the conv output [4, 8, 6, 6]
  // 1152.
  limits = Limits();
  limits.max_tensor_elements = 1151;
  EXPECT_THAT(Plan(model, kConfig, limits),
              StatusIs(kInvalid,
                       "layers[0] \"conv\": output [4, 8, 6, 6] "
                       "exceeds the limit of 1151 elements"));
  limits.max_tensor_elements = 767;
  EXPECT_THAT(Plan(model, kConfig, limits),
              StatusIs(kInvalid,
                       "model.input_shape: the batch [4, 3, 8, 8] "
                       "exceeds the limit of 767 elements"));
  // conv weight 8 * 3 * 3 * 3 = 216 + head weight 288 * 3 = 864: 1080.
  limits = Limits();
  limits.max_parameters = 1079;
  EXPECT_THAT(Plan(model, kConfig, limits),
              StatusIs(kInvalid,
                       "layers[1] \"head\": weight [288, 3] brings "
                       "the parameter count over the limit of 1079"));
  limits.max_parameters = 1080;
  EXPECT_THAT(Plan(model, kConfig, limits), IsOk());
}

TEST(PlanModelErrorsTest, LiveTensorBytesAreEstimatedAndLimited) {
  const std::string model = WithHead("[ 3, 8, 8 ]", R"pb(
    layers {
      name: "conv"
      op: CONV2D
      conv2d { filters: 8 kernel_h: 3 kernel_w: 3 }
    }
  )pb");
  // Elements, batch 4, SGD: input 768 + labels 4; conv output 1152 and
  // weight 216 twice (value, gradient); head output 12, gradient buffer of
  // its input 1152, weight 864 twice; loss output 1 and the gradient of its
  // input 12. 5261 elements of 4 bytes.
  const ModelPlan plan = MustPlan(model);
  EXPECT_EQ(EstimateLiveTensorBytes(plan, Config()), 21044);
  // ADAM keeps two more tensors per parameter: + 2 * 1080 elements.
  const std::string adam = R"pb(
    seed: 1
    batch_size: 4
    steps: 3
    optimizer { kind: ADAM learning_rate: 0.1 }
  )pb";
  EXPECT_EQ(EstimateLiveTensorBytes(plan, Config(adam)), 29684);

  Limits limits;
  limits.max_total_tensor_bytes = 21043;
  EXPECT_THAT(Plan(model, kConfig, limits),
              StatusIs(kInvalid,
                       "model: the run's live tensors (activations, "
                       "gradients, parameters and optimizer state) need "
                       "21044 bytes, exceeding limits.max_total_tensor_bytes "
                       "of 21043"));
  limits.max_total_tensor_bytes = 21044;
  EXPECT_THAT(Plan(model, kConfig, limits), IsOk());
  EXPECT_THAT(Plan(model, adam, limits),
              StatusIs(kInvalid, HasSubstr("need 29684 bytes")));
}

TEST(PlanModelErrorsTest, LargestLegalShapesExceedTheMemoryLimit) {
  // 256 layers of 2^28-element activations: each shape, the layer count
  // and the parameter count are within the default limits, but the run
  // would need hundreds of GiB.
  std::string body;
  for (int i = 0; i < 254; ++i) {
    absl::StrAppend(&body, "layers { name: \"relu", i, "\" op: RELU } ");
  }
  const std::string model = WithHead("[ 1048576 ]", body);
  const std::string config = R"pb(
    seed: 1
    batch_size: 256
    steps: 1
    optimizer { learning_rate: 0.1 }
  )pb";
  Limits unlimited;
  unlimited.max_total_tensor_bytes = std::numeric_limits<int64_t>::max();
  absl::StatusOr<ModelPlan> plan = Plan(model, config, unlimited);
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->layers.size(), 256u);
  const int64_t bytes = EstimateLiveTensorBytes(*plan, Config(config));
  EXPECT_GT(bytes, int64_t{500} << 30);
  EXPECT_EQ(Limits().max_total_tensor_bytes, int64_t{16} << 30);
  EXPECT_THAT(Plan(model, config),
              StatusIs(kInvalid, HasSubstr(absl::StrCat(
                                     "need ", bytes,
                                     " bytes, exceeding "
                                     "limits.max_total_tensor_bytes of "
                                     "17179869184"))));
}

TEST(PlanModelErrorsTest, ShapeProductsDoNotOverflow) {
  // Everything raised to the int64 maximum: products must still be checked
  // without overflow (UBSan would flag signed overflow).
  Limits limits;
  limits.max_dim = std::numeric_limits<int64_t>::max();
  limits.max_tensor_elements = std::numeric_limits<int64_t>::max();
  limits.max_parameters = std::numeric_limits<int64_t>::max();
  EXPECT_THAT(
      Plan(WithHead("[ 4611686018427387904, 4611686018427387904 ]", ""),
           kConfig, limits),
      StatusIs(kInvalid, HasSubstr("model.input_shape: the batch [4, "
                                   "4611686018427387904, 4611686018427387904] "
                                   "exceeds the limit of")));
  // 2^40 features times 2^30 units overflows int64 in the weight product.
  EXPECT_THAT(Plan(R"pb(
                     input_shape: [ 1048576, 1048576 ]
                     num_classes: 3
                     layers {
                       name: "fc"
                       op: DENSE
                       dense { units: 1073741824 }
                     }
                     layers {
                       name: "head"
                       op: DENSE
                       dense { units: 3 }
                     }
                     layers { name: "loss" op: SOFTMAX_XENT }
                   )pb",
                   kConfig, limits),
              StatusIs(kInvalid, HasSubstr("layers[0] \"fc\": weight "
                                           "[1099511627776, 1073741824] brings "
                                           "the parameter count over the "
                                           "limit")));
  // Spatial sizes past the kernels' own bounds are refused by them.
  EXPECT_THAT(Plan(WithHead("[ 1, 33554432, 1 ]", R"pb(
                     layers {
                       name: "conv"
                       op: CONV2D
                       conv2d { filters: 1 kernel_h: 1 kernel_w: 1 }
                     }
                   )pb"),
                   kConfig, limits),
              StatusIs(kInvalid, HasSubstr("layers[0] \"conv\": conv2d: h must "
                                           "be <= 16777216")));
}

// The params message of `layer`, or null when it has none.
google::protobuf::Message* ParamsOf(v1::Layer* layer) {
  switch (layer->params_case()) {
    case v1::Layer::kDense:
      return layer->mutable_dense();
    case v1::Layer::kConv2D:
      return layer->mutable_conv2d();
    case v1::Layer::kPool:
      return layer->mutable_pool();
    case v1::Layer::kResize:
      return layer->mutable_resize();
    default:
      return nullptr;
  }
}

// Every int field of a valid model set to extreme values: PlanModel must
// return OK or INVALID_ARGUMENT and never crash or overflow (run under
// --config=asan to make that a sanitizer check too).
TEST(PlanModelErrorsTest, ExtremeValuesNeverCrash) {
  const v1::Model base = Model(R"pb(
    input_shape: [ 3, 12, 12 ]
    num_classes: 4
    layers {
      name: "conv"
      op: CONV2D
      conv2d {
        filters: 4
        kernel_h: 3
        kernel_w: 3
        stride_h: 1
        stride_w: 1
        pad_h: 1
        pad_w: 1
        dilation_h: 1
        dilation_w: 1
      }
    }
    layers {
      name: "pool"
      op: AVG_POOL2D
      pool { kernel_h: 2 kernel_w: 2 stride_h: 2 stride_w: 2 pad_h: 1 pad_w: 1 }
    }
    layers {
      name: "up"
      op: RESIZE_BILINEAR
      resize { out_h: 5 out_w: 5 }
    }
    layers { name: "b" op: BIAS_ADD }
    layers { name: "f" op: FLATTEN }
    layers {
      name: "fc"
      op: DENSE
      dense { units: 4 }
    }
    layers { name: "loss" op: SOFTMAX_XENT }
  )pb");
  ASSERT_THAT(PlanModel(base, Config(), Limits()), IsOk());
  v1::Model base_copy = base;
  const int64_t extremes[] = {0,
                              -1,
                              1,
                              2,
                              1 << 20,
                              (1 << 20) + 1,
                              std::numeric_limits<int32_t>::max(),
                              std::numeric_limits<int32_t>::min(),
                              std::numeric_limits<int64_t>::max(),
                              std::numeric_limits<int64_t>::min()};
  Limits wide;
  wide.max_dim = wide.max_tensor_elements = wide.max_parameters =
      std::numeric_limits<int64_t>::max();
  int checked = 0;
  for (const Limits& limits : {Limits(), wide}) {
    for (const int64_t value : extremes) {
      const auto check = [&](const v1::Model& m) {
        const absl::Status s = PlanModel(m, Config(), limits).status();
        EXPECT_TRUE(s.ok() || s.code() == kInvalid) << s;
        ++checked;
      };
      for (int d = 0; d < base.input_shape_size(); ++d) {
        v1::Model m = base;
        m.set_input_shape(d, value);
        check(m);
      }
      {
        v1::Model m = base;
        m.set_num_classes(static_cast<int32_t>(value));
        check(m);
      }
      // Each int32 field of each params message.
      for (int i = 0; i < base.layers_size(); ++i) {
        const int fields = ParamsOf(base_copy.mutable_layers(i)) == nullptr
                               ? 0
                               : ParamsOf(base_copy.mutable_layers(i))
                                     ->GetDescriptor()
                                     ->field_count();
        for (int f = 0; f < fields; ++f) {
          v1::Model m = base;
          google::protobuf::Message* p = ParamsOf(m.mutable_layers(i));
          const google::protobuf::FieldDescriptor* field =
              p->GetDescriptor()->field(f);
          if (field->cpp_type() ==
              google::protobuf::FieldDescriptor::CPPTYPE_INT32) {
            p->GetReflection()->SetInt32(p, field, static_cast<int32_t>(value));
            check(m);
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 200);
}

TEST(PlanModelErrorsTest, GraphRules) {
  EXPECT_THAT(Plan(WithHead("[ 4 ]", R"pb(
                layers {
                  name: "fc"
                  op: DENSE
                  dense { units: 2 }
                }
                layers { name: "dead" op: RELU }
                layers { name: "r" op: RELU inputs: "fc" }
              )pb")),
              StatusIs(kInvalid, HasSubstr("layers[1] \"dead\": output is "
                                           "never used")));
  EXPECT_THAT(Plan(R"pb(
                input_shape: 4
                num_classes: 4
                layers { name: "loss" op: SOFTMAX_XENT }
              )pb"),
              StatusIs(kInvalid, HasSubstr("no trainable parameters")));
  EXPECT_THAT(Plan(WithHead("[ 4 ]", R"pb(
                layers { name: "r" op: RELU inputs: "head" }
              )pb")),
              StatusIs(kInvalid,
                       "layers[0] \"r\": inputs: layer \"head\" is "
                       "layers[1], which comes later; inputs must "
                       "name earlier layers"));
  EXPECT_THAT(Plan(WithHead("[ 4 ]", R"pb(
                layers {
                  name: "r"
                  op: RELU
                  inputs: [ "a", "b", "c" ]
                }
              )pb")),
              StatusIs(kInvalid,
                       "layers[0] \"r\": RELU needs exactly 1 input, "
                       "got 3"));
  EXPECT_THAT(
      Plan(WithHead("[ 4 ]", R"pb(
        layers { name: "r" op: RELU inputs: "" }
      )pb")),
      StatusIs(kInvalid, "layers[0] \"r\": inputs: unknown layer \"\""));
  EXPECT_THAT(Plan(WithHead("[ 4 ]", R"pb(
                layers { name: "head.1-x_Y" op: RELU }
              )pb")),
              IsOk());
}

TEST(ValidateJobConfigTest, AcceptsEveryOptimizerWithItsFields) {
  for (const char* optimizer : {
           "learning_rate: 0.1",
           "kind: SGD learning_rate: 0.1",
           "kind: MOMENTUM learning_rate: 0.1 momentum: 0.9",
           "kind: MOMENTUM learning_rate: 0.1",
           "kind: ADAM learning_rate: 0.001",
           "kind: ADAM learning_rate: 0.001 beta1: 0.8 beta2: 0.99 epsilon: "
           "1e-6",
       }) {
    EXPECT_THAT(ValidateJobConfig(
                    Config(absl::StrCat("batch_size: 1 steps: 1 optimizer { ",
                                        optimizer, " }")),
                    Limits()),
                IsOk())
        << optimizer;
  }
}

TEST(ValidateJobConfigTest, RefusesBadFields) {
  struct Case {
    const char* config;
    const char* message;
  };
  const Case cases[] = {
      {"optimizer { learning_rate: -0.5 }",
       "config.optimizer.learning_rate: must be > 0 and finite, got -0.5"},
      {"optimizer { kind: MOMENTUM learning_rate: 1 momentum: -0.1 }",
       "config.optimizer.momentum: must be in [0, 1), got -0.1"},
      {"optimizer { kind: ADAM learning_rate: 1 beta1: 1 }",
       "config.optimizer.beta1: must be in [0, 1) (0 means the default), got "
       "1"},
      {"optimizer { kind: ADAM learning_rate: 1 epsilon: nan }",
       "config.optimizer.epsilon: must be > 0 and finite"},
      {"optimizer { kind: MOMENTUM learning_rate: 1 beta1: 0.9 }",
       "config.optimizer.beta1: applies only to kinds ADAM and ADAMW, but "
       "kind is MOMENTUM"},
      {"optimizer { kind: ADAM learning_rate: 1 weight_decay: 0.1 }",
       "config.optimizer.weight_decay: applies only to kind ADAMW, but kind "
       "is ADAM"},
      {"optimizer { kind: ADAMW learning_rate: 1 weight_decay: 2 }",
       "config.optimizer.weight_decay: must be in [0, 1]"},
      {"optimizer { learning_rate: 1 clip_grad_norm: -1 }",
       "config.optimizer.clip_grad_norm: must be >= 0 and finite"},
      {"optimizer { kind: 9 learning_rate: 1 }",
       "config.optimizer.kind: 9 is not a known OptimizerKind"},
      {"optimizer { learning_rate: 1 } dtype: UINT8",
       "config.dtype: only FLOAT32 is supported, got UINT8"},
      {"optimizer { learning_rate: 1 } dtype: 12",
       "config.dtype: only FLOAT32 is supported, got 12"},
      {"optimizer { learning_rate: 1 } backend: 5",
       "config.backend: 5 is not a known Backend"},
      {"optimizer { learning_rate: 1 } threads: 5000",
       "config.threads: 5000 exceeds the limit of 1024"},
      {"optimizer { learning_rate: 1 } capture { kind: 8 }",
       "config.capture.kind: 8 is not a known CapturePolicy.Kind"},
      {"optimizer { learning_rate: 1 } capture { kind: EVERY_KTH_STEP every_k: "
       "-3 }",
       "config.capture.every_k: must be >= 1 for EVERY_KTH_STEP, got -3"},
      {"optimizer { learning_rate: 1 } capture { every_k: 2 }",
       "config.capture.every_k: applies only to kind EVERY_KTH_STEP, but kind "
       "is EVERY_STEP"},
      {"optimizer { learning_rate: 1 } dataset { synthetic { examples: -1 } }",
       "config.dataset.synthetic.examples: must be >= 0"},
      {"optimizer { learning_rate: 1 } dataset { file { inputs_path: \"a\" "
       "labels_path: \"b\" } }",
       "config.dataset.file.format: must be IDX, NPY or CIFAR10, got 0"},
      {"optimizer { learning_rate: 1 } dataset { file { format: NPY "
       "inputs_path: \"a\" } }",
       "config.dataset.file.labels_path: must not be empty"},
      {"optimizer { learning_rate: 1 } op_algorithms { key: \"dense.forward\" "
       "value: \"\" }",
       "config.op_algorithms[\"dense.forward\"]: algorithm \"\" must match"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ValidateJobConfig(
                    Config(absl::StrCat("batch_size: 2 steps: 2 ", c.config)),
                    Limits()),
                StatusIs(kInvalid, HasSubstr(c.message)))
        << c.config;
  }
}

TEST(ValidateJobConfigTest, AcceptsKnownOverridesAndDatasets) {
  EXPECT_THAT(
      ValidateJobConfig(
          Config(R"pb(
            batch_size: 2
            steps: 2
            optimizer { learning_rate: 1 }
            determinism: DEFAULT
            backend: CUDA
            threads: 8
            capture { kind: EVERY_KTH_STEP every_k: 3 }
            op_algorithms { key: "bias_add.grad" value: "atomic" }
            op_algorithms { key: "dense.forward" value: "split_k_atomic" }
            dataset {
              file {
                format: IDX
                inputs_path: "/d/x.idx"
                labels_path: "/d/y.idx"
              }
            }
          )pb"),
          Limits()),
      IsOk());
}

TEST(ValidatePlacementTest, RunsScopeAndIds) {
  const v1::JobConfig canonical = Config();
  v1::JobConfig fast = Config();
  fast.set_determinism(v1::DEFAULT);
  v1::Placement p;
  EXPECT_THAT(ValidatePlacement(p, canonical, Limits()), IsOk());
  p.set_runs(64);
  EXPECT_THAT(ValidatePlacement(p, canonical, Limits()), IsOk());
  p.set_runs(65);
  EXPECT_THAT(ValidatePlacement(p, canonical, Limits()),
              StatusIs(kInvalid, "placement.runs: 65 exceeds the limit of 64"));
  p.set_runs(-1);
  EXPECT_THAT(ValidatePlacement(p, canonical, Limits()),
              StatusIs(kInvalid, "placement.runs: -1 is outside 0..64"));
  p.set_runs(3);
  p.set_scope(v1::ACROSS_CLASSES);
  EXPECT_THAT(ValidatePlacement(p, canonical, Limits()), IsOk());
  EXPECT_THAT(ValidatePlacement(p, fast, Limits()),
              StatusIs(kInvalid,
                       "placement.scope: ACROSS_CLASSES needs "
                       "config.determinism CANONICAL, got DEFAULT"));
  p.set_scope(static_cast<v1::PlacementScope>(17));
  EXPECT_THAT(
      ValidatePlacement(p, canonical, Limits()),
      StatusIs(kInvalid, HasSubstr("17 is not a known PlacementScope")));
  p.set_scope(v1::SAME_CLASS);
  p.add_hardware_class_digests("0123456789abcdef0123456789abcdef");
  EXPECT_THAT(ValidatePlacement(p, canonical, Limits()), IsOk());
  p.add_hardware_class_digests("0123456789ABCDEF0123456789abcdef");
  EXPECT_THAT(
      ValidatePlacement(p, canonical, Limits()),
      StatusIs(kInvalid, HasSubstr("placement.hardware_class_digests[1]")));
  p.clear_hardware_class_digests();
  p.add_worker_ids("");
  EXPECT_THAT(
      ValidatePlacement(p, canonical, Limits()),
      StatusIs(kInvalid, HasSubstr("placement.worker_ids[0]: must have")));
  p.clear_worker_ids();
  (*p.mutable_worker_labels())[""] = "x";
  EXPECT_THAT(
      ValidatePlacement(p, canonical, Limits()),
      StatusIs(kInvalid, HasSubstr("placement.worker_labels: key \"\"")));
}

}  // namespace
}  // namespace lockstep::model
