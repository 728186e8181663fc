// The executor on graph models: unbatched PARAMETERs and CONSTANTs, GATHER,
// SLICE, CONCAT and MATMUL with an unbatched operand, in a tied-embedding
// token model (one table feeds the embedding GATHER and the logits
// MATMUL).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/registry.h"
#include "model/plan.h"
#include "model/test_plans.h"
#include "worker/exec/executor.h"
#include "worker/exec/init.h"

namespace lockstep::worker {
namespace {

namespace v1 = ::lockstep::v1;
using ::lockstep::testing::IsOk;
using ::testing::HasSubstr;

constexpr int64_t kBatch = 3;
constexpr int64_t kT = 4;
constexpr int64_t kVocab = 5;

// The tied model: table [V, 3] -> GATHER of the token ids [N, T, 3] ->
// DENSE -> (GATHER of CONSTANT positions {0, -3}, i.e. {0, 1}; SLICE
// 2..100, clamped to 2..4) -> CONCAT [N, T, 3] (the positions in order
// again) -> MATMUL with an unbatched [3, 3] -> MATMUL with the table
// (transpose_b) [N, T, V] -> loss.
constexpr char kTiedModel[] = R"pb(
  name: "tied"
  input_shape: [ 4 ]
  num_classes: 5
  layers {
    name: "table"
    op: PARAMETER
    parameter { shape: [ 5, 3 ] }
  }
  layers {
    name: "emb"
    op: GATHER
    inputs: [ "table", "<input>" ]
    gather { axis: 0 }
  }
  layers {
    name: "h"
    op: DENSE
    dense { units: 3 use_bias: true last_axis: true }
  }
  layers {
    name: "pos"
    op: CONSTANT
    constant {
      shape: [ 2 ]
      values: [ 0, -3 ]
    }
  }
  layers {
    name: "ends"
    op: GATHER
    inputs: [ "h", "pos" ]
    gather { axis: 1 }
  }
  layers {
    name: "mid"
    op: SLICE
    inputs: [ "h" ]
    slice { axis: 1 start: 2 end: 100 }
  }
  layers {
    name: "cat"
    op: CONCAT
    inputs: [ "ends", "mid" ]
    concat { axis: 1 }
  }
  layers {
    name: "scale"
    op: PARAMETER
    parameter { shape: [ 3, 3 ] }
  }
  layers {
    name: "mixed"
    op: MATMUL
    inputs: [ "cat", "scale" ]
  }
  layers {
    name: "logits"
    op: MATMUL
    inputs: [ "mixed", "table" ]
    matmul { transpose_b: true }
  }
  layers { name: "loss" op: SOFTMAX_XENT }
)pb";

// The same model with the table read through an unbatched TRANSPOSE (as
// an ONNX export without constant folding writes it) instead of
// transpose_b.
v1::Model TransposedTableModel() {
  v1::Model model;
  EXPECT_TRUE(
      google::protobuf::TextFormat::ParseFromString(kTiedModel, &model));
  v1::Model out = model;
  out.clear_layers();
  for (const v1::Layer& l : model.layers()) {
    if (l.name() == "logits") {
      v1::Layer* t = out.add_layers();
      t->set_name("table_t");
      t->set_op(v1::TRANSPOSE);
      t->add_inputs("table");
      t->mutable_transpose()->add_perm(1);
      t->mutable_transpose()->add_perm(0);
      v1::Layer* m = out.add_layers();
      *m = l;
      m->clear_inputs();
      m->add_inputs("mixed");
      m->add_inputs("table_t");
      m->mutable_matmul()->set_transpose_b(false);
      continue;
    }
    *out.add_layers() = l;
  }
  return out;
}

model::ModelPlan TiedPlan(bool transposed_table = false) {
  v1::Model model;
  EXPECT_TRUE(
      google::protobuf::TextFormat::ParseFromString(kTiedModel, &model));
  if (transposed_table) model = TransposedTableModel();
  v1::JobConfig config = model::testing::BaseConfig(kBatch, 1);
  config.mutable_dataset()->mutable_tokens();
  auto plan = model::PlanModel(model, config, model::Limits());
  EXPECT_THAT(plan, IsOk());
  return plan.ok() ? *plan : model::ModelPlan();
}

v1::JobConfig Config(int steps) {
  v1::JobConfig config = model::testing::BaseConfig(kBatch, steps);
  config.mutable_dataset()->mutable_tokens();
  return config;
}

// Token batches: ids (n, t, step) -> (3n + 2t + step) mod V, label = the
// next id mod V (learnable from the token itself).
BatchSource TokenBatches() {
  BatchSource b;
  b.digest = "test-tokens";
  b.fill = [](int step, kernels::Tensor& x,
              kernels::Tensor& labels) -> absl::Status {
    int32_t* ids = x.data<int32_t>();
    int32_t* lab = labels.data<int32_t>();
    for (int64_t n = 0; n < kBatch; ++n) {
      for (int64_t t = 0; t < kT; ++t) {
        const int32_t id =
            static_cast<int32_t>((3 * n + 2 * t + step) % kVocab);
        ids[n * kT + t] = id;
        lab[n * kT + t] = (id + 1) % kVocab;
      }
    }
    return absl::OkStatus();
  };
  return b;
}

const kernels::Registry& AllModes() {
  static const kernels::Registry* r = [] {
    auto* reg = new kernels::Registry;
    EXPECT_THAT(kernels::RegisterCpuCanonicalKernels(reg), IsOk());
    EXPECT_THAT(kernels::RegisterCpuDeterministicAndDefaultKernels(reg),
                IsOk());
    return reg;
  }();
  return *r;
}

absl::StatusOr<RunResult> RunTied(const model::ModelPlan& plan,
                                  const v1::JobConfig& config,
                                  ExecutorOptions options = {}) {
  return RunJob(plan, config, &AllModes(), TokenBatches(), std::move(options));
}

TEST(GraphExecutorTest, TiedModelIsBitIdenticalOverThreadsAndIsas) {
  const model::ModelPlan plan = TiedPlan();
  ASSERT_EQ(plan.layers.size(), 11u);
  auto ref = RunTied(plan, Config(3));
  ASSERT_THAT(ref, IsOk());
  for (const kernels::CpuIsa isa : kernels::SupportedCpuIsas()) {
    for (const int threads : {1, 2, 3, 8}) {
      SCOPED_TRACE(
          absl::StrCat(kernels::CpuIsaName(isa), " threads ", threads));
      kernels::SetCpuIsaForTesting(isa);
      v1::JobConfig config = Config(3);
      config.set_threads(threads);
      auto r = RunTied(plan, config);
      ASSERT_THAT(r, IsOk());
      EXPECT_EQ(r->run_digest, ref->run_digest);
      ASSERT_EQ(r->losses.size(), ref->losses.size());
      for (size_t s = 0; s < r->losses.size(); ++s) {
        uint32_t a, b;
        std::memcpy(&a, &r->losses[s], 4);
        std::memcpy(&b, &ref->losses[s], 4);
        EXPECT_EQ(a, b) << "step " << s;
      }
    }
  }
  kernels::SetCpuIsaForTesting(std::nullopt);
  kernels::SetCpuThreadsForTesting(0);
}

TEST(GraphExecutorTest, LossFallsAndModesRun) {
  const model::ModelPlan plan = TiedPlan();
  v1::JobConfig config = Config(40);
  config.mutable_optimizer()->set_learning_rate(0.5f);
  auto r = RunTied(plan, config);
  ASSERT_THAT(r, IsOk());
  EXPECT_NEAR(r->losses.front(), std::log(5.0), 0.4);
  EXPECT_LT(r->losses.back(), 0.5f * r->losses.front());
  // DETERMINISTIC and DEFAULT (gather.grad atomic) run the model too.
  for (const v1::DeterminismMode mode : {v1::DETERMINISTIC, v1::DEFAULT}) {
    v1::JobConfig c = Config(2);
    c.set_determinism(mode);
    auto m = RunTied(plan, c);
    ASSERT_THAT(m, IsOk());
    bool gather_grad = false;
    for (const KernelChoice& k : m->kernels) {
      if (k.op == "gather.grad") {
        gather_grad = true;
        EXPECT_FALSE(k.fallback);
        if (mode == v1::DEFAULT) {
          EXPECT_THAT(k.variant, HasSubstr("atomic"));
        }
      }
    }
    EXPECT_TRUE(gather_grad);
  }
}

// Central finite differences of the step-0 loss against the recorded
// GRAD_WEIGHT / GRAD_BIAS of every parameter: the tied table's gradient is
// the sum of its GATHER and MATMUL contributions.
class GradientsTest : public ::testing::TestWithParam<bool> {};

TEST_P(GradientsTest, GradientsMatchFiniteDifferences) {
  const model::ModelPlan plan = TiedPlan(GetParam());
  const v1::JobConfig config = Config(1);
  auto init = [&](int layer, int param, int64_t element, float delta) {
    return [&plan, &config, layer, param, element, delta](
               int l, int p, kernels::Tensor& t) -> absl::Status {
      absl::Status st = InitializeParam(
          config.seed(), l, p, plan.layers[l].params[p], v1::GLOROT_UNIFORM, t);
      if (l == layer && p == param) t.data<float>()[element] += delta;
      return st;
    };
  };
  std::map<std::pair<std::string, int>, std::vector<float>> grads;
  ExecutorOptions base;
  base.param_init = init(-1, -1, 0, 0.0f);
  base.observer = [&](int, const v1::ManifestEntry& e, const kernels::Tensor& t,
                      const v1::TensorFingerprint&) -> absl::Status {
    if (e.role() == v1::GRAD_WEIGHT || e.role() == v1::GRAD_BIAS) {
      grads[{e.layer(), e.role() == v1::GRAD_WEIGHT ? 0 : 1}] =
          std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
    }
    return absl::OkStatus();
  };
  ASSERT_THAT(RunTied(plan, config, base), IsOk());
  const float eps = 1e-3f;
  int checked = 0;
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    for (size_t p = 0; p < plan.layers[l].params.size(); ++p) {
      const std::vector<float>& g =
          grads[{plan.layers[l].name, static_cast<int>(p)}];
      ASSERT_FALSE(g.empty()) << plan.layers[l].name;
      for (int64_t e = 0; e < static_cast<int64_t>(g.size());
           e += plan.layers[l].name == "table" ? 1 : 4) {
        double loss[2];
        for (int side = 0; side < 2; ++side) {
          ExecutorOptions o;
          o.param_init = init(static_cast<int>(l), static_cast<int>(p), e,
                              side == 0 ? eps : -eps);
          auto r = RunTied(plan, config, o);
          ASSERT_THAT(r, IsOk());
          loss[side] = r->losses[0];
        }
        const double numeric = (loss[0] - loss[1]) / (2.0 * eps);
        EXPECT_NEAR(numeric, g[e], 2e-3 + 0.05 * std::fabs(g[e]))
            << plan.layers[l].name << " param " << p << " element " << e;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 15);
}

// false: the table read with transpose_b; true: through an unbatched
// TRANSPOSE, whose gradient (the inverse transpose) joins the GATHER's in
// the table's fan-out sum.
INSTANTIATE_TEST_SUITE_P(TableReads, GradientsTest, ::testing::Bool());

// The transposed-table variant: the same logits, bit for bit, as
// transpose_b (both read table[v][d] for logit v), and its run is identical
// over threads and ISAs.
TEST(GraphExecutorTest, UnbatchedTransposeOfTheTableMatchesTransposeB) {
  const model::ModelPlan plan = TiedPlan(true);
  int transposes = 0;
  for (const auto& lp : plan.layers) {
    if (lp.op == v1::TRANSPOSE) {
      ++transposes;
      EXPECT_FALSE(lp.batched);
      EXPECT_EQ(lp.output_shape, (std::vector<int64_t>{3, 5}));
    }
  }
  EXPECT_EQ(transposes, 1);
  auto ref = RunTied(plan, Config(3));
  ASSERT_THAT(ref, IsOk());
  auto tied = RunTied(TiedPlan(false), Config(3));
  ASSERT_THAT(tied, IsOk());
  for (size_t i = 0; i < ref->losses.size(); ++i) {
    EXPECT_EQ(ref->losses[i], tied->losses[i]) << "step " << i;
  }
  for (kernels::CpuIsa isa : kernels::SupportedCpuIsas()) {
    kernels::SetCpuIsaForTesting(isa);
    kernels::SetCpuThreadsForTesting(3);
    auto r = RunTied(plan, Config(3));
    ASSERT_THAT(r, IsOk());
    EXPECT_EQ(r->run_digest, ref->run_digest) << kernels::CpuIsaName(isa);
  }
  kernels::SetCpuIsaForTesting(std::nullopt);
  kernels::SetCpuThreadsForTesting(0);
}

}  // namespace
}  // namespace lockstep::worker
