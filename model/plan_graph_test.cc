// Planning of CONSTANT, PARAMETER, GATHER, CONCAT, SLICE and MATMUL with an
// unbatched operand, and their manifest entries.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lockstep/v1/job.pb.h"
#include "lockstep/v1/model.pb.h"
#include "model/manifest.h"
#include "model/plan.h"
#include "model/spec_io.h"

namespace lockstep::model {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

constexpr char kTokenConfig[] = R"pb(
  seed: 1
  batch_size: 2
  steps: 3
  optimizer { learning_rate: 0.1 }
  dataset { tokens {} }
)pb";

constexpr char kFloatConfig[] = R"pb(
  seed: 1
  batch_size: 2
  steps: 3
  optimizer { learning_rate: 0.1 }
)pb";

absl::StatusOr<ModelPlan> Plan(const std::string& model,
                               const std::string& config = kTokenConfig) {
  absl::StatusOr<v1::Model> m = ParseModel(model, "test");
  EXPECT_THAT(m, IsOk());
  absl::StatusOr<v1::JobConfig> c = ParseJobConfig(config, "test");
  EXPECT_THAT(c, IsOk());
  if (!m.ok() || !c.ok()) return absl::InternalError("parse");
  return PlanModel(*m, *c, Limits());
}

// A tied-embedding token model: one PARAMETER table [5, 3] read by GATHER
// (the token embedding) and by MATMUL transpose_b (the logits), with a
// GATHER of CONSTANT positions, a SLICE and a CONCAT in between. `extra`
// replaces the marker line.
std::string TiedModel(
    const std::string& ends_params = "gather { axis: 1 }",
    const std::string& mid_params = "slice { axis: 1 start: 1 end: 3 }",
    const std::string& pos_values = "values: [ 0, -1 ]") {
  return absl::StrCat(R"pb(
                        name: "tied"
                        input_shape: [ 4 ]
                        num_classes: 5
                        layers {
                          name: "table"
                          op: PARAMETER
                          parameter { shape: [ 5, 3 ] }
                          origin: "/wte (Initializer)"
                        }
                        layers {
                          name: "emb"
                          op: GATHER
                          inputs: [ "table", "<input>" ]
                          gather { axis: 0 }
                          origin: "/wte/Gather (Gather)"
                        }
                        layers {
                          name: "h"
                          op: DENSE
                          dense { units: 3 last_axis: true }
                        }
                        layers { name: "pos" op: CONSTANT
                                 constant { shape: [ 2 ])pb",
                      pos_values, R"pb(}
                                       }
    layers {
      name: "ends"
      op: GATHER
      inputs: [ "h", "pos" ]
      )pb",
                      ends_params, R"pb(
                        }
                        layers {
      name: "mid"
      op: SLICE
      inputs: [ "h" ]
      )pb",
                      mid_params, R"pb(
    }
    layers {
      name: "cat"
      op: CONCAT
      inputs: [ "ends", "mid" ]
      concat { axis: -2 }
    }
    layers {
      name: "logits"
      op: MATMUL
      inputs: [ "cat", "table" ]
      matmul { transpose_b: true }
    }
    layers { name: "loss" op: SOFTMAX_XENT }
  )pb");
}

TEST(PlanGraphTest, TiedModelShapesAndRepresentation) {
  absl::StatusOr<ModelPlan> plan = Plan(TiedModel());
  ASSERT_THAT(plan, IsOk());
  const std::vector<LayerPlan>& l = plan->layers;
  EXPECT_EQ(plan->input_dtype, kernels::DType::kInt32);
  // PARAMETER: unbatched, one param "value" (WEIGHT) of its shape.
  EXPECT_FALSE(l[0].batched);
  EXPECT_THAT(l[0].output_shape, ElementsAre(5, 3));
  ASSERT_EQ(l[0].params.size(), 1u);
  EXPECT_EQ(l[0].params[0].name, "value");
  EXPECT_EQ(l[0].params[0].role, v1::WEIGHT);
  EXPECT_EQ(l[0].params[0].fan_in, 5);
  EXPECT_EQ(l[0].params[0].fan_out, 3);
  EXPECT_EQ(l[0].origin, "/wte (Initializer)");
  // GATHER of the token ids: [N, T, D], batched; the model input is -1.
  EXPECT_TRUE(l[1].batched);
  EXPECT_THAT(l[1].inputs, ElementsAre(0, kModelInput));
  EXPECT_THAT(l[1].output_shape, ElementsAre(2, 4, 3));
  EXPECT_TRUE(l[1].indices.empty());
  // CONSTANT: unbatched, values kept.
  EXPECT_FALSE(l[3].batched);
  EXPECT_THAT(l[3].constant_values, ElementsAre(0.0f, -1.0f));
  // GATHER of CONSTANT positions: -1 wrapped to 3.
  EXPECT_THAT(l[4].output_shape, ElementsAre(2, 2, 3));
  EXPECT_THAT(l[4].indices, ElementsAre(0, 3));
  EXPECT_EQ(l[4].axis, 1);
  // SLICE positions 1, 2.
  EXPECT_THAT(l[5].indices, ElementsAre(1, 2));
  EXPECT_THAT(l[5].output_shape, ElementsAre(2, 2, 3));
  // CONCAT along -2 = axis 1.
  EXPECT_EQ(l[6].axis, 1);
  EXPECT_THAT(l[6].output_shape, ElementsAre(2, 4, 3));
  // MATMUL with the unbatched table: [N, T, V], a seen as [N*T, D].
  EXPECT_TRUE(l[7].batched);
  EXPECT_TRUE(l[7].last_axis);
  EXPECT_THAT(l[7].output_shape, ElementsAre(2, 4, 5));
  // The plan table shows the origin.
  EXPECT_THAT(DescribePlan(*plan), HasSubstr("from /wte/Gather (Gather)"));
}

TEST(PlanGraphTest, ManifestRolesAndGradientFlow) {
  absl::StatusOr<ModelPlan> plan = Plan(TiedModel());
  ASSERT_THAT(plan, IsOk());
  absl::StatusOr<v1::JobConfig> config = ParseJobConfig(kTokenConfig, "test");
  ASSERT_THAT(config, IsOk());
  absl::StatusOr<std::vector<v1::ManifestEntry>> entries =
      StepTensors(*plan, *config);
  ASSERT_THAT(entries, IsOk());
  std::vector<std::string> got;
  for (const v1::ManifestEntry& e : *entries) {
    if (e.layer() != "table" && e.layer() != "pos" && e.layer() != "ends" &&
        e.layer() != "emb") {
      continue;
    }
    got.push_back(absl::StrCat(e.layer(), " ", v1::TensorRole_Name(e.role()),
                               " ", e.op(), e.slot().empty() ? "" : " ",
                               e.slot()));
  }
  EXPECT_THAT(
      got,
      ElementsAre(
          "table ACTIVATION parameter.forward", "emb ACTIVATION gather.forward",
          "pos ACTIVATION constant", "ends ACTIVATION gather.forward",
          // ends: a gradient to h only, none to the CONSTANT indices.
          "ends GRAD_ACTIVATION gather.grad input0",
          // emb: no gradient to the table through the token ids' slot, one
          // to the table (input0).
          "emb GRAD_ACTIVATION gather.grad input0",
          // table: two uses (emb, logits) summed, then its gradient.
          "table GRAD_ACTIVATION grad_accumulate sum",
          "table GRAD_WEIGHT parameter.grad", "table WEIGHT sgd.update"));
  const std::vector<bool> carries = CarriesGradient(*plan);
  EXPECT_TRUE(carries[0]);
  EXPECT_FALSE(carries[3]);  // the CONSTANT
  EXPECT_THAT(GradientConsumers(*plan)[0].size(), 2u);
  EXPECT_THAT(GradientConsumers(*plan)[3].size(), 0u);
}

TEST(PlanGraphTest, ScalarsAndUnbatchedMatMul) {
  absl::StatusOr<ModelPlan> plan =
      Plan(R"pb(
             name: "s"
             input_shape: [ 2, 3 ]
             num_classes: 2
             layers {
               name: "p"
               op: PARAMETER
               parameter {
                 shape: [ 3, 2 ]
                 init: ONES
               }
             }
             layers {
               name: "q"
               op: PARAMETER
               parameter {
                 shape: [ 2, 2 ]
                 init: ZEROS
               }
             }
             layers {
               name: "pq"
               op: MATMUL
               inputs: [ "p", "q" ]
             }
             layers {
               name: "fc"
               op: DENSE
               inputs: [ "<input>" ]
               dense { units: 3 last_axis: true }
             }
             layers {
               name: "y"
               op: MATMUL
               inputs: [ "fc", "pq" ]
             }
             layers {
               name: "c"
               op: CONSTANT
               constant {
                 shape: []
                 values: [ 1 ]
               }
             }
             layers {
               name: "pick"
               op: GATHER
               inputs: [ "y", "c" ]
               gather { axis: -1 }
             }
             layers {
               name: "s"
               op: SLICE
               inputs: [ "pick" ]
               slice { axis: 1 start: -5 end: 100 }
             }
             layers {
               name: "all"
               op: CONCAT
               inputs: [ "s", "s" ]
               concat { axis: 1 }
             }
             layers {
               name: "two"
               op: DENSE
               inputs: [ "all" ]
               dense { units: 2 }
             }
             layers { name: "loss" op: SOFTMAX_XENT }
           )pb",
           kFloatConfig);
  ASSERT_THAT(plan, IsOk());
  const std::vector<LayerPlan>& l = plan->layers;
  EXPECT_TRUE(l[0].params[0].init_ones);
  EXPECT_TRUE(l[1].params[0].init_zeros);
  // Two unbatched operands: unbatched [3, 2].
  EXPECT_FALSE(l[2].batched);
  EXPECT_FALSE(l[2].last_axis);
  EXPECT_THAT(l[2].output_shape, ElementsAre(3, 2));
  // Batched [N, 2, 3] x unbatched [3, 2].
  EXPECT_TRUE(l[4].batched);
  EXPECT_TRUE(l[4].last_axis);
  EXPECT_THAT(l[4].output_shape, ElementsAre(2, 2, 2));
  // A scalar CONSTANT has the empty shape; a scalar index drops the axis.
  EXPECT_TRUE(l[5].output_shape.empty());
  EXPECT_THAT(l[6].output_shape, ElementsAre(2, 2));
  EXPECT_THAT(l[6].indices, ElementsAre(1));
  EXPECT_EQ(l[6].axis, 2);
  // ONNX clamping: start -5 -> 0, end 100 -> 2.
  EXPECT_THAT(l[7].indices, ElementsAre(0, 1));
  EXPECT_THAT(l[8].output_shape, ElementsAre(2, 4));
  EXPECT_EQ(plan->parameter_count, 6 + 4 + 9 + 8);
}

struct BadCase {
  std::string model;
  std::string message;
};

TEST(PlanGraphTest, ErrorsNameTheLayerTheFieldAndTheLimit) {
  const BadCase cases[] = {
      {TiedModel("gather { axis: 1 }", "slice { axis: 1 start: 1 end: 3 }",
                 "values: [ 0, 4 ]"),
       "layers[4] \"ends\": GATHER index 4 (value 1 of layer \"pos\") is not "
       "a whole number in -4..3"},
      {TiedModel("gather { axis: 1 }", "slice { axis: 1 start: 1 end: 3 }",
                 "values: [ 0, 0.5 ]"),
       "GATHER index 0.5"},
      {TiedModel("gather { axis: 1 }", "slice { axis: 1 start: 1 end: 3 }",
                 "values: [ 0 ]"),
       "layers[3] \"pos\": constant.values: 1 values for constant.shape [2], "
       "which holds 2"},
      {TiedModel("gather { axis: 0 }"),
       "layers[4] \"ends\": gather.axis: 0 is the batch axis of a batched "
       "input"},
      {TiedModel("gather { axis: 3 }"),
       "gather.axis: 3 is outside -3..2 (the input has rank 3)"},
      {TiedModel("gather { axis: 1 }", "slice { axis: 1 start: 3 end: 1 }"),
       "layers[5] \"mid\": slice.start 3, slice.end 1 select nothing"},
      {TiedModel("gather { axis: 1 }", "slice { axis: 1 step: -1 }"),
       "slice.step: -1 must be positive"},
      {TiedModel("gather { axis: 1 }", "slice { axis: 2 start: 0 end: 2 }"),
       "layers[6] \"cat\": CONCAT inputs must have one rank and equal "
       "dimensions except along concat.axis 1"},
  };
  for (const BadCase& c : cases) {
    EXPECT_THAT(Plan(c.model), StatusIs(kInvalid, HasSubstr(c.message)))
        << c.message;
  }
}

TEST(PlanGraphTest, UnbatchedInputErrors) {
  // An old op refuses an unbatched input.
  EXPECT_THAT(Plan(R"pb(
                     name: "m"
                     input_shape: [ 3 ]
                     num_classes: 2
                     layers {
                       name: "p"
                       op: PARAMETER
                       parameter { shape: [ 3 ] }
                     }
                     layers {
                       name: "r"
                       op: RELU
                       inputs: [ "p" ]
                     }
                     layers { name: "loss" op: SOFTMAX_XENT }
                   )pb",
                   kFloatConfig),
              StatusIs(kInvalid, HasSubstr("layers[1] \"r\": RELU needs "
                                           "batched inputs, but layer \"p\" "
                                           "is unbatched")));
  // MATMUL of an unbatched a and a batched b.
  EXPECT_THAT(
      Plan(R"pb(
             name: "m"
             input_shape: [ 2, 3 ]
             num_classes: 2
             layers {
               name: "p"
               op: PARAMETER
               parameter { shape: [ 2, 2 ] }
             }
             layers {
               name: "fc"
               op: DENSE
               inputs: [ "<input>" ]
               dense { units: 3 last_axis: true }
             }
             layers {
               name: "y"
               op: MATMUL
               inputs: [ "p", "fc" ]
             }
             layers { name: "f" op: FLATTEN }
             layers { name: "loss" op: SOFTMAX_XENT }
           )pb",
           kFloatConfig),
      StatusIs(kInvalid, HasSubstr("layers[2] \"y\": inputs: MATMUL of an "
                                   "unbatched a and a batched b is not "
                                   "supported")));
  // CONSTANT and PARAMETER limits and inputs.
  EXPECT_THAT(Plan(R"pb(
                     name: "m"
                     input_shape: [ 3 ]
                     num_classes: 2
                     layers {
                       name: "p"
                       op: PARAMETER
                       parameter { shape: [ 3, 0 ] }
                     }
                     layers { name: "loss" op: SOFTMAX_XENT }
                   )pb",
                   kFloatConfig),
              StatusIs(kInvalid, HasSubstr("layers[0] \"p\": "
                                           "parameter.shape[1]: 0 is outside "
                                           "1..1048576")));
  EXPECT_THAT(Plan(R"pb(
                     name: "m"
                     input_shape: [ 3 ]
                     num_classes: 2
                     layers {
                       name: "c"
                       op: CONSTANT
                       inputs: [ "<input>" ]
                       constant {
                         shape: [ 1 ]
                         values: [ 1 ]
                       }
                     }
                     layers { name: "loss" op: SOFTMAX_XENT }
                   )pb",
                   kFloatConfig),
              StatusIs(kInvalid, HasSubstr("layers[0] \"c\": inputs: CONSTANT "
                                           "takes no inputs, got 1")));
  EXPECT_THAT(Plan(R"pb(
                     name: "m"
                     input_shape: [ 3 ]
                     num_classes: 2
                     layers {
                       name: "c"
                       op: CONSTANT
                       constant {
                         shape: [ 1 ]
                         values: [ inf ]
                       }
                     }
                     layers { name: "loss" op: SOFTMAX_XENT }
                   )pb",
                   kFloatConfig),
              StatusIs(kInvalid, HasSubstr("constant.values[0]: inf is not "
                                           "finite")));
  EXPECT_THAT(Plan(R"pb(
                     name: "m"
                     input_shape: [ 3 ]
                     num_classes: 2
                     layers {
                       name: "c"
                       op: CONSTANT
                       constant { shape: [ 2048, 1024 ] }
                     }
                     layers { name: "loss" op: SOFTMAX_XENT }
                   )pb",
                   kFloatConfig),
              StatusIs(kInvalid, HasSubstr("constant.shape: [2048, 1024] "
                                           "exceeds the limit of 1048576 "
                                           "elements")));
}

}  // namespace
}  // namespace lockstep::model
