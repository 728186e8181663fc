// A ParameterSet over the seeded initialisation: what it lists, and only
// that, replaces the initial values bit for bit; a wrong tensor fails the
// run naming its layer, param and shape.
#include "worker/exec/parameters.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/exec/executor.h"
#include "worker/exec/init.h"
#include "worker/exec/test_util.h"

namespace lockstep::worker {
namespace {

namespace v1 = ::lockstep::v1;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kBatch = 4;

// A tensor of `shape` with values 0.25 * (i + 1) * (-1)^i.
v1::ParameterTensor Tensor(const std::string& layer, const std::string& param,
                           const std::vector<int64_t>& shape) {
  v1::ParameterTensor t;
  t.set_layer(layer);
  t.set_param(param);
  int64_t n = 1;
  for (int64_t d : shape) {
    t.add_shape(d);
    n *= d;
  }
  std::string data(4 * n, '\0');
  for (int64_t i = 0; i < n; ++i) {
    const float v = 0.25f * static_cast<float>(i + 1) * (i % 2 ? -1.0f : 1.0f);
    std::memcpy(data.data() + 4 * i, &v, 4);
  }
  t.set_data(data);
  return t;
}

// The bits of every WEIGHT and BIAS tensor after step 0, keyed by
// "layer/role", and the run digest.
struct Observed {
  std::map<std::string, std::vector<uint32_t>> params;
  std::string run_digest;
};

absl::StatusOr<Observed> Train(const model::ModelPlan& plan,
                               const v1::JobConfig& config,
                               const v1::ParameterSet* set) {
  Observed o;
  ExecutorOptions options;
  options.parameters = set;
  options.observer = [&o](int step, const v1::ManifestEntry& e,
                          const kernels::Tensor& t,
                          const v1::TensorFingerprint&) {
    if (step == 0 && e.phase() == v1::PHASE_OPTIMIZER &&
        (e.role() == v1::WEIGHT || e.role() == v1::BIAS)) {
      std::vector<uint32_t> bits(t.numel());
      if (t.numel() > 0) std::memcpy(bits.data(), t.data<float>(), t.bytes());
      o.params[e.layer() + "/" + v1::TensorRole_Name(e.role())] = bits;
    }
    return absl::OkStatus();
  };
  absl::StatusOr<RunResult> r =
      RunJob(plan, config, &testing::CpuRegistry(),
             testing::TeacherBatches(plan, config.seed()), std::move(options));
  if (!r.ok()) return r.status();
  o.run_digest = r->run_digest.ToHex();
  return o;
}

std::vector<uint32_t> Bits(const v1::ParameterTensor& t) {
  std::vector<uint32_t> bits(t.data().size() / 4);
  std::memcpy(bits.data(), t.data().data(), t.data().size());
  return bits;
}

TEST(ParametersTest, ListedTensorsAndOnlyThoseChangeTheInitialValues) {
  const model::ModelPlan plan = testing::MlpPlan(kBatch);
  // Learning rate 1e-30: a weight of magnitude above ~1e-20 comes out of
  // step 0's update with the same bits, so step 0's fingerprints show the
  // initial values. (A seeded bias is 0 and moves by lr * gradient, which
  // depends on the other parameters: fc1's bias is not compared.)
  v1::JobConfig config = testing::BaseConfig(kBatch, 1);
  config.mutable_optimizer()->set_learning_rate(1e-30f);
  v1::ParameterSet set;
  *set.add_tensors() = Tensor("fc1", "weight", {6, 8});
  *set.add_tensors() = Tensor("fc2", "bias", {3});
  ASSERT_THAT(ValidateParameterSet(plan, set), IsOk());

  absl::StatusOr<Observed> seeded = Train(plan, config, nullptr);
  absl::StatusOr<Observed> given = Train(plan, config, &set);
  ASSERT_THAT(seeded, IsOk());
  ASSERT_THAT(given, IsOk());
  ASSERT_EQ(seeded->params.size(), 4u);  // fc1, fc2: weight and bias
  ASSERT_EQ(given->params.size(), 4u);
  EXPECT_EQ(given->params["fc1/WEIGHT"], Bits(set.tensors(0)));
  EXPECT_NE(seeded->params["fc1/WEIGHT"], Bits(set.tensors(0)));
  EXPECT_EQ(given->params["fc2/BIAS"], Bits(set.tensors(1)));
  EXPECT_NE(seeded->params["fc2/BIAS"], Bits(set.tensors(1)));
  // Not listed: the seeded value, bit for bit.
  EXPECT_EQ(given->params["fc2/WEIGHT"], seeded->params["fc2/WEIGHT"]);

  // Exactly the parameters not listed are initialised from the seed.
  std::vector<std::pair<int, int>> seeded_params;
  ExecutorOptions options;
  options.parameters = &set;
  options.param_init = [&](int layer, int param, kernels::Tensor& out) {
    seeded_params.emplace_back(layer, param);
    return InitializeParam(config.seed(), layer, param,
                           plan.layers[layer].params[param],
                           v1::INITIALIZER_UNSPECIFIED, out);
  };
  ASSERT_THAT(RunJob(plan, config, &testing::CpuRegistry(),
                     testing::TeacherBatches(plan, config.seed()),
                     std::move(options)),
              IsOk());
  // fc1 is layer 0 (weight 0, bias 1), fc2 layer 2.
  EXPECT_EQ(seeded_params, (std::vector<std::pair<int, int>>{{0, 1}, {2, 0}}));
}

TEST(ParametersTest, TwoRunsWithTheSameParametersAreBitIdentical) {
  const model::ModelPlan plan = testing::MlpPlan(kBatch);
  const v1::JobConfig config = testing::BaseConfig(kBatch, 3);
  v1::ParameterSet set;
  *set.add_tensors() = Tensor("fc2", "weight", {8, 3});
  absl::StatusOr<Observed> a = Train(plan, config, &set);
  absl::StatusOr<Observed> b = Train(plan, config, &set);
  absl::StatusOr<Observed> seeded = Train(plan, config, nullptr);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  ASSERT_THAT(seeded, IsOk());
  EXPECT_EQ(a->run_digest, b->run_digest);
  EXPECT_EQ(a->params, b->params);
  EXPECT_NE(a->run_digest, seeded->run_digest);
}

TEST(ParametersTest, AWrongTensorFailsTheRunNamingIt) {
  const model::ModelPlan plan = testing::MlpPlan(kBatch);
  const v1::JobConfig config = testing::BaseConfig(kBatch, 1);
  struct Bad {
    v1::ParameterTensor tensor;
    std::vector<std::string> says;
  };
  v1::ParameterTensor short_data = Tensor("fc1", "bias", {8});
  short_data.mutable_data()->resize(12);
  v1::ParameterTensor nan = Tensor("fc1", "bias", {8});
  const float q = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan.mutable_data()->data() + 8, &q, 4);
  const std::vector<Bad> bad = {
      {Tensor("fc1", "weight", {8, 6}),
       {"tensors[0]", "layer \"fc1\"", "param \"weight\"", "shape [8, 6]",
        "planned shape is [6, 8]"}},
      {Tensor("fc9", "weight", {6, 8}), {"no layer \"fc9\""}},
      {Tensor("relu1", "weight", {6, 8}),
       {"layer \"relu1\" has no param \"weight\"", "it has: none"}},
      {Tensor("fc1", "running_stats", {2, 8}),
       {"has no param \"running_stats\"", "it has: weight, bias"}},
      {short_data, {"data has 12 bytes", "needs 32"}},
      {nan, {"element 2 is not finite"}},
  };
  for (const Bad& b : bad) {
    v1::ParameterSet set;
    *set.add_tensors() = b.tensor;
    SCOPED_TRACE(b.says[0]);
    absl::Status s = Train(plan, config, &set).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    for (const std::string& part : b.says) {
      EXPECT_THAT(std::string(s.message()), HasSubstr(part));
    }
  }
  v1::ParameterSet twice;
  *twice.add_tensors() = Tensor("fc1", "bias", {8});
  *twice.add_tensors() = Tensor("fc1", "bias", {8});
  EXPECT_THAT(ValidateParameterSet(plan, twice),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("tensors[1]"), HasSubstr("twice"))));
}

TEST(ParametersTest, BatchNormRunningStatsHaveShapeTwoByChannels) {
  model::ModelPlan plan;
  model::LayerPlan bn;
  bn.name = "bn";
  bn.op = v1::BATCH_NORM;
  bn.output_shape = {kBatch, 5, 2, 2};
  plan.layers.push_back(bn);
  v1::ParameterSet set;
  *set.add_tensors() = Tensor("bn", "running_stats", {2, 5});
  EXPECT_THAT(ValidateParameterSet(plan, set), IsOk());
  *set.mutable_tensors(0) = Tensor("bn", "running_stats", {5, 2});
  EXPECT_THAT(ValidateParameterSet(plan, set),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("planned shape is [2, 5]")));
}

}  // namespace
}  // namespace lockstep::worker
