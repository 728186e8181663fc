#include "model/manifest.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_plans.h"

namespace lockstep::model {
namespace {

namespace v1 = ::lockstep::v1;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// "FORWARD fc1 ACTIVATION dense.forward [4, 8]" (+ " slot s").
std::vector<std::string> Lines(const v1::TensorManifest& m) {
  std::vector<std::string> out;
  for (const v1::ManifestEntry& e : m.entries()) {
    std::string phase = v1::Phase_Name(e.phase()).substr(6);  // "PHASE_"
    std::string s =
        absl::StrCat(phase, " ", e.layer().empty() ? "-" : e.layer(), " ",
                     v1::TensorRole_Name(e.role()), " ", e.op(), " [",
                     absl::StrJoin(e.shape(), ", "), "]");
    if (e.dtype() == v1::INT32) absl::StrAppend(&s, " int32");
    if (!e.slot().empty()) absl::StrAppend(&s, " slot ", e.slot());
    out.push_back(s);
  }
  return out;
}

TEST(ManifestTest, MlpOrderIsPinned) {
  auto m = BuildManifest(testing::MlpPlan(4), testing::BaseConfig(4, 3));
  ASSERT_THAT(m, IsOk());
  EXPECT_THAT(
      Lines(*m),
      ElementsAre(
          "INPUT - INPUT input [4, 6]",                    //
          "INPUT - LABEL labels [4] int32",                //
          "FORWARD fc1 ACTIVATION dense.forward [4, 8]",   //
          "FORWARD relu1 ACTIVATION relu.forward [4, 8]",  //
          "FORWARD fc2 ACTIVATION dense.forward [4, 3]",   //
          "FORWARD loss LOSS softmax_xent.forward [1]",    //
          "BACKWARD loss GRAD_ACTIVATION softmax_xent.grad [4, 3] slot input0",
          "BACKWARD fc2 GRAD_BIAS bias_add.grad [3]",           //
          "BACKWARD fc2 GRAD_WEIGHT dense.grad_weight [8, 3]",  //
          "BACKWARD fc2 GRAD_ACTIVATION dense.grad_input [4, 8] slot input0",
          "BACKWARD relu1 GRAD_ACTIVATION relu.grad [4, 8] slot input0",
          "BACKWARD fc1 GRAD_BIAS bias_add.grad [8]",           //
          "BACKWARD fc1 GRAD_WEIGHT dense.grad_weight [6, 8]",  //
          "OPTIMIZER fc1 WEIGHT sgd.update [6, 8]",             //
          "OPTIMIZER fc1 BIAS sgd.update [8]",                  //
          "OPTIMIZER fc2 WEIGHT sgd.update [8, 3]",             //
          "OPTIMIZER fc2 BIAS sgd.update [3]"));
  for (int i = 0; i < m->entries_size(); ++i) {
    EXPECT_EQ(m->entries(i).index(), i);
  }
  EXPECT_EQ(m->steps(), 3);
  EXPECT_THAT(m->captured_steps(), ElementsAre());  // empty = every step
  EXPECT_EQ(m->manifest_digest().size(), 32u);
}

TEST(ManifestTest, ConvResidualOrderWithAdamIsPinned) {
  v1::JobConfig config = testing::BaseConfig(2, 2);
  config.mutable_optimizer()->set_kind(v1::ADAM);
  auto m = BuildManifest(testing::ConvResPlan(2), config);
  ASSERT_THAT(m, IsOk());
  EXPECT_THAT(
      Lines(*m),
      ElementsAreArray<std::string>({
          "INPUT - INPUT input [2, 2, 6, 6]",
          "INPUT - LABEL labels [2] int32",
          "FORWARD conv1 ACTIVATION conv2d.forward [2, 3, 6, 6]",
          "FORWARD relu1 ACTIVATION relu.forward [2, 3, 6, 6]",
          "FORWARD conv2 ACTIVATION conv2d.forward [2, 3, 6, 6]",
          "FORWARD add ACTIVATION add.forward [2, 3, 6, 6]",
          "FORWARD pool ACTIVATION max_pool2d.forward [2, 3, 3, 3]",
          "FORWARD up ACTIVATION resize_bilinear.forward [2, 3, 5, 5]",
          "FORWARD gap ACTIVATION global_avg_pool.forward [2, 3]",
          "FORWARD fc ACTIVATION dense.forward [2, 4]",
          "FORWARD loss LOSS softmax_xent.forward [1]",
          "BACKWARD loss GRAD_ACTIVATION softmax_xent.grad [2, 4] slot input0",
          "BACKWARD fc GRAD_BIAS bias_add.grad [4]",
          "BACKWARD fc GRAD_WEIGHT dense.grad_weight [3, 4]",
          "BACKWARD fc GRAD_ACTIVATION dense.grad_input [2, 3] slot input0",
          "BACKWARD gap GRAD_ACTIVATION global_avg_pool.grad [2, 3, 5, 5] "
          "slot input0",
          "BACKWARD up GRAD_ACTIVATION resize_bilinear.grad [2, 3, 3, 3] "
          "slot input0",
          "BACKWARD pool GRAD_ACTIVATION max_pool2d.grad [2, 3, 6, 6] "
          "slot input0",
          "BACKWARD add GRAD_ACTIVATION add.grad [2, 3, 6, 6] slot input0",
          "BACKWARD add GRAD_ACTIVATION add.grad [2, 3, 6, 6] slot input1",
          "BACKWARD conv2 GRAD_WEIGHT conv2d.grad_weight [3, 3, 3, 3]",
          "BACKWARD conv2 GRAD_ACTIVATION conv2d.grad_input [2, 3, 6, 6] "
          "slot input0",
          // relu1 feeds conv2 and add: its gradient is their sum first.
          "BACKWARD relu1 GRAD_ACTIVATION grad_accumulate [2, 3, 6, 6] "
          "slot sum",
          "BACKWARD relu1 GRAD_ACTIVATION relu.grad [2, 3, 6, 6] slot input0",
          // conv1 reads the model input: no gradient w.r.t. the data.
          "BACKWARD conv1 GRAD_BIAS bias_add.grad [3]",
          "BACKWARD conv1 GRAD_WEIGHT conv2d.grad_weight [3, 2, 3, 3]",
          "OPTIMIZER conv1 WEIGHT adam.update [3, 2, 3, 3]",
          "OPTIMIZER conv1 OPTIMIZER_STATE adam.update [3, 2, 3, 3] slot m",
          "OPTIMIZER conv1 OPTIMIZER_STATE adam.update [3, 2, 3, 3] slot v",
          "OPTIMIZER conv1 BIAS adam.update [3]",
          "OPTIMIZER conv1 OPTIMIZER_STATE adam.update [3] slot m",
          "OPTIMIZER conv1 OPTIMIZER_STATE adam.update [3] slot v",
          "OPTIMIZER conv2 WEIGHT adam.update [3, 3, 3, 3]",
          "OPTIMIZER conv2 OPTIMIZER_STATE adam.update [3, 3, 3, 3] slot m",
          "OPTIMIZER conv2 OPTIMIZER_STATE adam.update [3, 3, 3, 3] slot v",
          "OPTIMIZER fc WEIGHT adam.update [3, 4]",
          "OPTIMIZER fc OPTIMIZER_STATE adam.update [3, 4] slot m",
          "OPTIMIZER fc OPTIMIZER_STATE adam.update [3, 4] slot v",
          "OPTIMIZER fc BIAS adam.update [4]",
          "OPTIMIZER fc OPTIMIZER_STATE adam.update [4] slot m",
          "OPTIMIZER fc OPTIMIZER_STATE adam.update [4] slot v",
      }));
}

TEST(ManifestTest, MomentumHasVelocitySlot) {
  v1::JobConfig config = testing::BaseConfig(4, 1);
  config.mutable_optimizer()->set_kind(v1::MOMENTUM);
  auto m = BuildManifest(testing::MlpPlan(4), config);
  ASSERT_THAT(m, IsOk());
  std::vector<std::string> lines = Lines(*m);
  std::vector<std::string> tail(lines.end() - 8, lines.end());
  EXPECT_THAT(
      tail, ElementsAre("OPTIMIZER fc1 WEIGHT momentum.update [6, 8]",
                        "OPTIMIZER fc1 OPTIMIZER_STATE momentum.update [6, 8] "
                        "slot velocity",
                        "OPTIMIZER fc1 BIAS momentum.update [8]",
                        "OPTIMIZER fc1 OPTIMIZER_STATE momentum.update [8] "
                        "slot velocity",
                        "OPTIMIZER fc2 WEIGHT momentum.update [8, 3]",
                        "OPTIMIZER fc2 OPTIMIZER_STATE momentum.update [8, 3] "
                        "slot velocity",
                        "OPTIMIZER fc2 BIAS momentum.update [3]",
                        "OPTIMIZER fc2 OPTIMIZER_STATE momentum.update [3] "
                        "slot velocity"));
}

TEST(ManifestTest, EveryKthStepListsStepsAndTheLast) {
  v1::JobConfig config = testing::BaseConfig(4, 10);
  config.mutable_capture()->set_kind(v1::CapturePolicy::EVERY_KTH_STEP);
  config.mutable_capture()->set_every_k(4);
  auto m = BuildManifest(testing::MlpPlan(4), config);
  ASSERT_THAT(m, IsOk());
  EXPECT_THAT(m->captured_steps(), ElementsAre(0, 4, 8, 9));
  EXPECT_EQ(m->entries_size(), 17);  // every tensor of a captured step
  EXPECT_THAT(ExpandCapturedSteps(*m), ElementsAre(0, 4, 8, 9));

  // The last step is not listed twice when k divides steps - 1.
  config.set_steps(9);
  auto m9 = BuildManifest(testing::MlpPlan(4), config);
  ASSERT_THAT(m9, IsOk());
  EXPECT_THAT(m9->captured_steps(), ElementsAre(0, 4, 8));

  config.set_steps(1);
  auto m1 = BuildManifest(testing::MlpPlan(4), config);
  ASSERT_THAT(m1, IsOk());
  EXPECT_THAT(m1->captured_steps(), ElementsAre(0));

  // Capturing differently is a different manifest.
  EXPECT_NE(m->manifest_digest(), m9->manifest_digest());

  config.mutable_capture()->set_every_k(0);
  EXPECT_THAT(BuildManifest(testing::MlpPlan(4), config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("config.capture.every_k")));
}

TEST(ManifestTest, ForwardOnlyKeepsInputAndForwardEntries) {
  v1::JobConfig config = testing::BaseConfig(2, 3);
  config.mutable_capture()->set_kind(v1::CapturePolicy::FORWARD_ONLY);
  auto m = BuildManifest(testing::ConvResPlan(2), config);
  ASSERT_THAT(m, IsOk());
  ASSERT_EQ(m->entries_size(), 11);  // input, labels, 9 layers
  for (int i = 0; i < m->entries_size(); ++i) {
    const v1::ManifestEntry& e = m->entries(i);
    EXPECT_EQ(e.index(), i);
    EXPECT_TRUE(e.phase() == v1::PHASE_INPUT || e.phase() == v1::PHASE_FORWARD)
        << DescribeEntry(e);
  }
  EXPECT_EQ(m->entries(10).role(), v1::LOSS);
  EXPECT_THAT(m->captured_steps(), ElementsAre());
}

TEST(ManifestTest, DigestIsStableAndSensitive) {
  const ModelPlan plan = testing::MlpPlan(4);
  const v1::JobConfig config = testing::BaseConfig(4, 3);
  auto a = BuildManifest(plan, config);
  auto b = BuildManifest(plan, config);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(a->manifest_digest(), b->manifest_digest());
  EXPECT_EQ(ComputeManifestDigest(*a), a->manifest_digest());
  // Pinned: a change here changes every stored manifest digest.
  EXPECT_EQ(a->manifest_digest(), "7e3d622c64b2d556621cda8796bf7289");

  // The seed does not change the manifest; steps, shapes and names do.
  v1::JobConfig other_seed = config;
  other_seed.set_seed(99);
  auto c = BuildManifest(plan, other_seed);
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->manifest_digest(), a->manifest_digest());

  v1::JobConfig more_steps = config;
  more_steps.set_steps(4);
  auto d = BuildManifest(plan, more_steps);
  ASSERT_THAT(d, IsOk());
  EXPECT_NE(d->manifest_digest(), a->manifest_digest());

  ModelPlan renamed = plan;
  renamed.layers[1].name = "act1";
  auto e = BuildManifest(renamed, config);
  ASSERT_THAT(e, IsOk());
  EXPECT_NE(e->manifest_digest(), a->manifest_digest());
}

TEST(ManifestTest, RejectsPlansItCannotExecute) {
  const v1::JobConfig config = testing::BaseConfig(4, 1);
  ModelPlan forward_ref = testing::MlpPlan(4);
  forward_ref.layers[1].inputs = {2};
  EXPECT_THAT(StepTensors(forward_ref, config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layers[1] \"relu1\": inputs[0] = 2")));

  ModelPlan no_loss = testing::MlpPlan(4);
  no_loss.layers.pop_back();
  EXPECT_THAT(StepTensors(no_loss, config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("SOFTMAX_XENT must be the last layer")));

  ModelPlan no_weight = testing::MlpPlan(4);
  no_weight.layers[0].params.clear();
  EXPECT_THAT(StepTensors(no_weight, config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layers[0] \"fc1\": params[0] must be the "
                                 "weight")));

  ModelPlan bad_shape = testing::MlpPlan(4);
  bad_shape.layers[2].input_shapes[0] = {4, 9};
  EXPECT_THAT(StepTensors(bad_shape, config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("input_shapes[0] [4, 9] differs")));
}

TEST(ManifestTest, ConsumersAreSortedByLayerThenInput) {
  ModelPlan plan = testing::ConvResPlan(1);
  const auto consumers = ComputeConsumers(plan);
  ASSERT_EQ(consumers[1].size(), 2u);  // relu1 -> conv2 (input 0), add (1)
  EXPECT_EQ(consumers[1][0].layer, 2);
  EXPECT_EQ(consumers[1][0].input, 0);
  EXPECT_EQ(consumers[1][1].layer, 3);
  EXPECT_EQ(consumers[1][1].input, 1);
  EXPECT_TRUE(consumers[8].empty());  // the loss
}

}  // namespace
}  // namespace lockstep::model
