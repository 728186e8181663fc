// The executor over every model of the zoo (examples/), planned by
// model::PlanModel with the data set of its config (worker/data), shrunk to a
// tiny batch and a few steps.
#include <sched.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/atomic_float.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/registry.h"
#include "kernels/testing/float_test_util.h"
#include "model/manifest.h"
#include "model/plan.h"
#include "model/spec_io.h"
#include "worker/data/dataset.h"
#include "worker/exec/compare.h"
#include "worker/exec/dataset_batches.h"
#include "worker/exec/executor.h"
#include "worker/exec/fingerprint_pipeline.h"
#include "worker/exec/init.h"
#include "worker/exec/test_util.h"

namespace lockstep::worker {
namespace {

namespace v1 = ::lockstep::v1;
using ::lockstep::testing::BitsEqual;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

using testing::ZooPath;
using Zoo = testing::ZooModel;

Zoo Load(const std::string& name, int batch, int steps,
         const std::string& config_file = "config.json",
         const std::string& model_file = "model.json") {
  return testing::LoadZooModel(name, batch, steps, config_file, model_file);
}

// Every captured tensor hashed on the background thread; with `hold`, only
// once the step waits for it (so a write into a queued tensor's storage
// that the executor does not wait for shows up in its fingerprint).
ExecutorOptions Background(bool hold) {
  ExecutorOptions o;
  o.fingerprint_thread = FingerprintThread::kBackground;
  o.hold_background_fingerprints = hold;
  o.background_fingerprint_min_bytes = 0;
  return o;
}

absl::StatusOr<RunResult> RunZoo(const Zoo& z, ExecutorOptions options = {}) {
  if (!z.dataset) return absl::InternalError("zoo model not loaded");
  options.initializer = z.model.initializer();
  return RunJob(z.plan, z.config, &testing::CpuRegistry(),
                DatasetBatches(z.dataset, z.config.batch_size()),
                std::move(options));
}

const char* const kZoo[] = {"mlp",
                            "lenet5",
                            "resnet_small",
                            "gauntlet",
                            "norm_mlp",
                            "mobilenet_tiny",
                            "resnet_bn",
                            "char_lm",
                            "gpt_tiny",
                            "resnet18",
                            "mobilenet_v2",
                            "vit_tiny",
                            "conv_autoencoder"};

// gpt_tiny with tied embeddings (examples/gpt_tiny/model_tied.json): one
// PARAMETER table feeds the token GATHER and the logits MATMUL
// (transpose_b). It runs bit-identically; its table is layer 0 like
// gpt_tiny's EMBEDDING, so it starts from the same values and the step-0
// embedding output is gpt_tiny's, bit for bit; and its loss falls.
// (graph_executor_test runs the same ops in DETERMINISTIC and DEFAULT.)
TEST(ZooTest, GptTinyTiedEmbeddings) {
  Zoo z = Load("gpt_tiny", 2, 3, "config.json", "model_tied.json");
  ASSERT_NE(z.dataset, nullptr);
  ASSERT_EQ(z.plan.layers[0].op, v1::PARAMETER);
  ASSERT_EQ(z.plan.layers[1].op, v1::GATHER);
  auto a = RunZoo(z);
  auto b = RunZoo(z);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(a->run_digest, b->run_digest);
  // AdamW's first steps overshoot (the table gets both uses' gradients);
  // by step 16 the loss is below its start.
  Zoo longer = z;
  longer.config.set_steps(16);
  longer.config.mutable_capture()->set_kind(v1::CapturePolicy::FORWARD_ONLY);
  auto l = RunZoo(longer);
  ASSERT_THAT(l, IsOk());
  EXPECT_LT(l->losses.back(), l->losses.front())
      << ::testing::PrintToString(l->losses);

  Zoo untied = Load("gpt_tiny", 2, 1);
  ASSERT_NE(untied.dataset, nullptr);
  auto emb_hash = [](const RunResult& r) {
    for (int i = 0; i < r.manifest.entries_size(); ++i) {
      const v1::ManifestEntry& e = r.manifest.entries(i);
      if (e.layer() == "emb" && e.role() == v1::ACTIVATION) {
        return HashOf(r.fingerprints[0][i]);
      }
    }
    return hash::Fingerprint{};
  };
  auto u = RunZoo(untied);
  ASSERT_THAT(u, IsOk());
  EXPECT_EQ(emb_hash(*a), emb_hash(*u));
  EXPECT_NE(emb_hash(*a), hash::Fingerprint{});
}

TEST(ZooTest, EveryModelRunsTwiceBitIdentically) {
  for (const char* name : kZoo) {
    SCOPED_TRACE(name);
    Zoo z = Load(name, 2, 3);
    ASSERT_NE(z.dataset, nullptr);
    auto a = RunZoo(z);
    auto b = RunZoo(z);
    ASSERT_THAT(a, IsOk());
    ASSERT_THAT(b, IsOk());
    EXPECT_EQ(a->run_digest, b->run_digest);
    EXPECT_EQ(CompareRuns(*a, *b).verdict, RunComparison::Verdict::kIdentical);
    EXPECT_EQ(a->dataset_digest, z.dataset->digest());
    for (float loss : a->losses) EXPECT_TRUE(std::isfinite(loss));

    v1::JobConfig det = z.config;
    det.set_determinism(v1::DETERMINISTIC);
    Zoo zd = z;
    zd.config = det;
    auto c = RunZoo(zd);
    ASSERT_THAT(c, IsOk());
    EXPECT_EQ(c->run_digest, a->run_digest);
  }
}

TEST(ZooTest, InjectedFaultIsLocalisedInEveryModel) {
  // Faults at the first layer's activation (step 1) and at the last weighted
  // layer's weight gradient (step 0), each at the element with the largest
  // value, flipping the top exponent bit: a fault that no relu or max pool
  // can mask.
  for (const char* name : kZoo) {
    SCOPED_TRACE(name);
    Zoo z = Load(name, 2, 3);
    ASSERT_NE(z.dataset, nullptr);
    z.config.mutable_capture()->set_kind(v1::CapturePolicy::EVERY_STEP);
    std::string last_weighted;
    for (const model::LayerPlan& l : z.plan.layers) {
      if (!l.params.empty() && l.params[0].role == v1::WEIGHT) {
        last_weighted = l.name;
      }
    }
    struct Point {
      int step;
      std::string layer;
      v1::TensorRole role;
      int64_t element = -1;
    };
    std::vector<Point> points = {
        {1, z.plan.layers[0].name, v1::ACTIVATION},
        {0, last_weighted, v1::GRAD_WEIGHT},
    };
    // The global gradient norm when the config clips gradients.
    if (z.config.optimizer().clip_grad_norm() > 0.0f) {
      points.push_back({1, "", v1::GRAD_NORM});
    }
    // Attention: the first causal softmax's probabilities (step 1) and the
    // first MATMUL's output gradient (step 0).
    for (const model::LayerPlan& l : z.plan.layers) {
      if (l.op == v1::SOFTMAX && l.attrs.causal) {
        points.push_back({1, l.name, v1::ACTIVATION});
        break;
      }
    }
    // The normalisation layers' own tensors: the last one's output, and a
    // batch norm's running statistics.
    for (auto it = z.plan.layers.rbegin(); it != z.plan.layers.rend(); ++it) {
      if (it->op == v1::LAYER_NORM || it->op == v1::BATCH_NORM) {
        points.push_back({1, it->name, v1::ACTIVATION});
        if (it->op == v1::BATCH_NORM) {
          points.push_back({1, it->name, v1::RUNNING_STAT});
        }
        break;
      }
    }
    ExecutorOptions find;
    find.observer = [&](int step, const v1::ManifestEntry& e,
                        const kernels::Tensor& t,
                        const v1::TensorFingerprint&) -> absl::Status {
      for (Point& p : points) {
        if (p.step != step || p.layer != e.layer() || p.role != e.role()) {
          continue;
        }
        float best = 0.0f;
        for (int64_t i = 0; i < t.numel(); ++i) {
          const float v = p.role == v1::GRAD_WEIGHT
                              ? std::fabs(t.data<float>()[i])
                              : t.data<float>()[i];
          if (v > best) {
            best = v;
            p.element = i;
          }
        }
      }
      return absl::OkStatus();
    };
    auto ref = RunZoo(z, find);
    ASSERT_THAT(ref, IsOk());
    for (const Point& p : points) {
      ASSERT_GE(p.element, 0) << p.layer;
      const std::string spec = absl::StrCat(
          "step=", p.step, ",layer=", p.layer,
          ",role=", v1::TensorRole_Name(p.role), ",bit=30,element=", p.element);
      SCOPED_TRACE(spec);
      ExecutorOptions o;
      o.fault = *ParseFaultSpec(spec);
      auto bad = RunZoo(z, o);
      ASSERT_THAT(bad, IsOk());
      const RunComparison c = CompareRuns(*ref, *bad);
      ASSERT_EQ(c.verdict, RunComparison::Verdict::kDiverged);
      EXPECT_EQ(c.first->step, p.step) << DescribeComparison(c);
      EXPECT_EQ(c.first->entry.layer(), p.layer);
      EXPECT_EQ(c.first->entry.role(), p.role);
      EXPECT_GT(c.downstream, 0);
    }
  }
}

// Fingerprints hashed on a background thread are the inline ones, bit for
// bit, in every model: with the thread free-running, and held back until the
// step waits for each tensor (every write to a tensor between its hashing
// and the step's end then lands in its fingerprint unless the executor
// waits for it first, as it must before a kernel overwrites a queued
// tensor: clipping's scaled gradients, say). A sink sees the kept list.
TEST(ZooTest, BackgroundFingerprintsEqualInline) {
  for (const char* name : kZoo) {
    SCOPED_TRACE(name);
    Zoo z = Load(name, 2, 3);
    ASSERT_NE(z.dataset, nullptr);
    z.config.mutable_capture()->set_kind(v1::CapturePolicy::EVERY_STEP);
    ExecutorOptions in;
    in.fingerprint_thread = FingerprintThread::kInline;
    auto ref = RunZoo(z, in);
    ASSERT_THAT(ref, IsOk());
    ASSERT_EQ(ref->fingerprints.size(), 3u);
    for (bool hold : {false, true}) {
      SCOPED_TRACE(hold ? "held" : "free-running");
      ExecutorOptions bg = Background(hold);
      std::vector<std::vector<std::string>> sunk(3);
      bg.fingerprint_sink = [&](int step, const v1::ManifestEntry& e,
                                const v1::TensorFingerprint& fp) {
        EXPECT_EQ(e.index(), static_cast<int>(sunk[step].size()));
        sunk[step].push_back(fp.SerializeAsString());
        return absl::OkStatus();
      };
      auto r = RunZoo(z, bg);
      ASSERT_THAT(r, IsOk());
      testing::ExpectSameFingerprints(*r, *ref);
      for (size_t s = 0; s < ref->fingerprints.size(); ++s) {
        ASSERT_EQ(sunk[s].size(), ref->fingerprints[s].size());
        for (size_t i = 0; i < ref->fingerprints[s].size(); ++i) {
          EXPECT_EQ(sunk[s][i], ref->fingerprints[s][i].SerializeAsString())
              << "step " << s << " "
              << model::DescribeEntry(ref->manifest.entries(i));
        }
      }
    }
  }
}

// Left to kAuto with a CPU free, a run probes where to hash: the first
// capturing step in the background, then two rounds of two steps inline and
// two in the background (BackgroundChooser), whatever the step times say. Every
// fingerprint is the inline run's, and the steps that used the thread are
// counted.
TEST(ZooTest, AutoFingerprintsProbeBothWaysWithTheSameBits) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0 || CPU_COUNT(&cpus) < 2) {
    GTEST_SKIP() << "needs 2 CPUs: kAuto hashes inline on one";
  }
  Zoo z = Load("lenet5", 2, 9);
  ASSERT_NE(z.dataset, nullptr);
  z.config.mutable_capture()->set_kind(v1::CapturePolicy::EVERY_STEP);
  z.config.set_threads(1);  // the kernels' pool leaves a CPU free
  ExecutorOptions in;
  in.fingerprint_thread = FingerprintThread::kInline;
  auto ref = RunZoo(z, in);
  ASSERT_THAT(ref, IsOk());
  ExecutorOptions automatic;
  automatic.initializer = z.model.initializer();
  automatic.background_fingerprint_min_bytes = 0;
  auto exec = Executor::Create(z.plan, z.config, &testing::CpuRegistry(),
                               DatasetBatches(z.dataset, 2), automatic);
  ASSERT_THAT(exec, IsOk());
  ASSERT_TRUE((*exec)->background_fingerprints());
  // Warm-up, then the probe: twice two steps inline, two in the background.
  static_assert(BackgroundChooser::kProbeSteps == 8);
  const int expected[] = {1, 1, 1, 2, 3, 3, 3, 4, 5};
  for (int s = 0; s < 9; ++s) {
    ASSERT_THAT((*exec)->RunStep(s), IsOk());
    EXPECT_EQ((*exec)->background_steps(), expected[s]) << "step " << s;
  }
  auto r = (*exec)->Finish();
  ASSERT_THAT(r, IsOk());
  testing::ExpectSameFingerprints(*r, *ref);
  EXPECT_EQ(r->run_digest, ref->run_digest);
  kernels::SetCpuThreadsForTesting(0);
}

// ADD's gradients and RESHAPE's and FLATTEN's output and gradient are
// views of the tensors they would copy (ExecutorOptions::tensor_views).
// Every fingerprint is the same bits with views and with the copy kernels,
// in every model, hashed inline and in the background held back until the
// step waits (so a write into shared storage that the executor does not
// wait for shows up in a fingerprint); with views, no kernel runs for
// them.
TEST(ZooTest, ViewsGiveTheFingerprintsOfCopies) {
  int models_with_views = 0;
  for (const char* name : kZoo) {
    SCOPED_TRACE(name);
    Zoo z = Load(name, 2, 3);
    ASSERT_NE(z.dataset, nullptr);
    z.config.mutable_capture()->set_kind(v1::CapturePolicy::EVERY_STEP);
    bool has_views = false;
    for (const model::LayerPlan& l : z.plan.layers) {
      has_views = has_views || l.op == v1::ADD || l.op == v1::RESHAPE ||
                  l.op == v1::FLATTEN;
    }
    models_with_views += has_views ? 1 : 0;
    OpTimes copy_times;
    ExecutorOptions copies;
    copies.tensor_views = false;
    copies.op_times = &copy_times;
    auto ref = RunZoo(z, copies);
    ASSERT_THAT(ref, IsOk());
    for (bool background : {false, true}) {
      SCOPED_TRACE(background ? "background, held" : "inline");
      OpTimes times;
      ExecutorOptions views =
          background ? Background(/*hold=*/true) : ExecutorOptions();
      views.op_times = &times;
      auto r = RunZoo(z, views);
      ASSERT_THAT(r, IsOk());
      testing::ExpectSameFingerprints(*r, *ref);
      for (const char* op : {kernels::op::kAddGrad, kernels::op::kReshape,
                             kernels::op::kFlatten}) {
        EXPECT_EQ(times.count(op), 0u) << op;
      }
      // ADD's two gradients take the fingerprint of dy, hashed just before
      // them, in each of the three captured steps; with copies, nothing
      // is reused (each copy is storage of its own).
      const int64_t adds = absl::c_count_if(
          z.plan.layers,
          [](const model::LayerPlan& l) { return l.op == v1::ADD; });
      const auto reused = times.find(kFingerprintReusedOpTime);
      const int64_t reused_calls =
          reused == times.end() ? 0 : reused->second.calls;
      EXPECT_EQ(reused_calls, 2 * adds * 3);
    }
    EXPECT_EQ(copy_times.count(kFingerprintReusedOpTime), 0u);
    EXPECT_EQ(copy_times.count(kernels::op::kAddGrad) > 0,
              absl::c_any_of(z.plan.layers, [](const model::LayerPlan& l) {
                return l.op == v1::ADD;
              }));
  }
  EXPECT_GE(models_with_views, 5);
}

// A fault injected into a tensor of a layer done by views (ADD's first
// gradient; a RESHAPE's or FLATTEN's output) flips that tensor alone: the
// layer copies instead, so the tensor it would share storage with (ADD's
// second gradient; the reshaped input) keeps its fingerprint. Hashed in
// the background held back until the step waits, so a flip that reached
// an earlier tensor's storage would show in its fingerprint too.
TEST(ZooTest, FaultInAViewLayerStaysInItsTensor) {
  int checked = 0;
  for (const char* name : kZoo) {
    SCOPED_TRACE(name);
    Zoo z = Load(name, 2, 3);
    ASSERT_NE(z.dataset, nullptr);
    z.config.mutable_capture()->set_kind(v1::CapturePolicy::EVERY_STEP);
    // (fault spec, the entry that must keep its fingerprint)
    std::vector<std::pair<std::string, std::string>> cases;
    for (const model::LayerPlan& l : z.plan.layers) {
      if (l.op == v1::ADD) {
        cases.push_back(
            {absl::StrCat("step=1,layer=", l.name,
                          ",role=GRAD_ACTIVATION,slot=input0,bit=30"),
             absl::StrCat(l.name, "/GRAD_ACTIVATION/input1")});
        break;
      }
    }
    for (const model::LayerPlan& l : z.plan.layers) {
      if ((l.op == v1::RESHAPE || l.op == v1::FLATTEN) &&
          l.inputs[0] != model::kModelInput) {
        cases.push_back(
            {absl::StrCat("step=1,layer=", l.name, ",role=ACTIVATION,bit=30"),
             absl::StrCat(z.plan.layers[l.inputs[0]].name, "/ACTIVATION/")});
        break;
      }
    }
    const ExecutorOptions held = Background(/*hold=*/true);
    auto ref = RunZoo(z, held);
    ASSERT_THAT(ref, IsOk());
    for (const auto& [spec, kept] : cases) {
      SCOPED_TRACE(spec);
      ExecutorOptions o = held;
      o.fault = *ParseFaultSpec(spec);
      auto bad = RunZoo(z, o);
      ASSERT_THAT(bad, IsOk());
      const RunComparison c = CompareRuns(*ref, *bad);
      ASSERT_EQ(c.verdict, RunComparison::Verdict::kDiverged);
      EXPECT_EQ(c.first->step, 1) << DescribeComparison(c);
      int found = 0;
      for (int i = 0; i < ref->manifest.entries_size(); ++i) {
        const v1::ManifestEntry& e = ref->manifest.entries(i);
        if (absl::StrCat(e.layer(), "/", v1::TensorRole_Name(e.role()), "/",
                         e.slot()) != kept) {
          continue;
        }
        ++found;
        EXPECT_EQ(bad->fingerprints[1][i].SerializeAsString(),
                  ref->fingerprints[1][i].SerializeAsString())
            << model::DescribeEntry(e);
      }
      EXPECT_EQ(found, 1) << kept;
      ++checked;
    }
  }
  EXPECT_GE(checked, 5);
}

// A config whose clipping scales every gradient in place after it was
// fingerprinted: held background hashes still see the unscaled gradients.
TEST(ZooTest, BackgroundFingerprintsSeeGradientsBeforeClipping) {
  Zoo z = Load("norm_mlp", 2, 2);
  ASSERT_NE(z.dataset, nullptr);
  z.config.mutable_optimizer()->set_clip_grad_norm(1e-4f);  // always scales
  ExecutorOptions in;
  in.fingerprint_thread = FingerprintThread::kInline;
  const ExecutorOptions bg = Background(/*hold=*/true);
  auto a = RunZoo(z, in);
  auto b = RunZoo(z, bg);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(a->run_digest, b->run_digest);
  EXPECT_EQ(CompareRuns(*a, *b).verdict, RunComparison::Verdict::kIdentical);
}

// A step that fails after tensors were queued (a label out of range fails
// the loss, after the forward's tensors) returns its error once the queued
// hashes are done, and the sink sees only the steps that completed.
TEST(ZooTest, FailedStepDrainsBackgroundFingerprints) {
  Zoo z = Load("resnet_small", 2, 3);
  ASSERT_NE(z.dataset, nullptr);
  BatchSource batches = DatasetBatches(z.dataset, z.config.batch_size());
  BatchFn fill = batches.fill;
  batches.fill = [fill](int step, kernels::Tensor& x, kernels::Tensor& y) {
    absl::Status st = fill(step, x, y);
    if (step == 1) y.data<int32_t>()[0] = 1000;
    return st;
  };
  ExecutorOptions o = Background(/*hold=*/true);
  o.initializer = z.model.initializer();
  std::vector<int> steps_sunk;
  o.fingerprint_sink = [&](int step, const v1::ManifestEntry&,
                           const v1::TensorFingerprint&) {
    steps_sunk.push_back(step);
    return absl::OkStatus();
  };
  auto exec = Executor::Create(z.plan, z.config, &testing::CpuRegistry(),
                               std::move(batches), o);
  ASSERT_THAT(exec, IsOk());
  ASSERT_TRUE((*exec)->background_fingerprints());
  ASSERT_THAT((*exec)->RunStep(0), IsOk());
  const size_t per_step = steps_sunk.size();
  EXPECT_EQ(per_step, static_cast<size_t>((*exec)->manifest().entries_size()));
  EXPECT_THAT((*exec)->RunStep(1), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("labels[0] = 1000")));
  EXPECT_EQ(steps_sunk.size(), per_step);  // nothing of step 1
  EXPECT_THAT((*exec)->RunStep(2),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

// Background hashing needs a run whose tensors nobody else looks at while
// they are hashed: asked for with an observer, it is refused by name; left
// to kAuto, an observer keeps hashing inline.
TEST(ZooTest, BackgroundFingerprintsRefuseAnObserver) {
  Zoo z = Load("mlp", 2, 1);
  ASSERT_NE(z.dataset, nullptr);
  auto observer = [](int, const v1::ManifestEntry&, const kernels::Tensor&,
                     const v1::TensorFingerprint&) { return absl::OkStatus(); };
  ExecutorOptions bg;
  bg.fingerprint_thread = FingerprintThread::kBackground;
  bg.observer = observer;
  EXPECT_THAT(RunZoo(z, bg), StatusIs(absl::StatusCode::kInvalidArgument,
                                      AllOf(HasSubstr("fingerprint_thread"),
                                            HasSubstr("observer"))));
  ExecutorOptions automatic;
  automatic.observer = observer;
  auto exec = Executor::Create(z.plan, z.config, &testing::CpuRegistry(),
                               DatasetBatches(z.dataset, 2), automatic);
  ASSERT_THAT(exec, IsOk());
  EXPECT_FALSE((*exec)->background_fingerprints());
}

// Central finite differences of the step-0 loss for three elements of every
// parameter tensor: the backward wiring of every zoo layer kind.
TEST(ZooTest, GradientsMatchFiniteDifferences) {
  for (const char* name : kZoo) {
    SCOPED_TRACE(name);
    Zoo z = Load(name, 2, 1);
    ASSERT_NE(z.dataset, nullptr);
    std::map<std::pair<std::string, int>, std::vector<float>> grads;
    auto init = [&z](int layer, int param, int64_t element, float delta) {
      return [&z, layer, param, element, delta](
                 int l, int p, kernels::Tensor& t) -> absl::Status {
        absl::Status st =
            InitializeParam(z.config.seed(), l, p, z.plan.layers[l].params[p],
                            z.model.initializer(), t);
        if (l == layer && p == param) t.data<float>()[element] += delta;
        return st;
      };
    };
    ExecutorOptions base;
    base.param_init = init(-1, -1, 0, 0.0f);
    base.observer = [&](int, const v1::ManifestEntry& e,
                        const kernels::Tensor& t,
                        const v1::TensorFingerprint&) -> absl::Status {
      if (e.role() == v1::GRAD_WEIGHT || e.role() == v1::GRAD_BIAS) {
        grads[{e.layer(), e.role() == v1::GRAD_WEIGHT ? 0 : 1}] =
            std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
      }
      return absl::OkStatus();
    };
    // The default initialisation equals InitializeParam's.
    auto plain = RunZoo(z);
    auto ref = RunZoo(z, base);
    ASSERT_THAT(plain, IsOk());
    ASSERT_THAT(ref, IsOk());
    EXPECT_EQ(plain->run_digest, ref->run_digest);
    // Small enough that no ReLU / max-pool kink lies within eps of a checked
    // element (1e-3 crosses one in lenet5's conv2 bias), large enough that
    // float32 loss rounding stays well below the tolerance (1e-4 fails on
    // gauntlet's conv1). Worst |numeric - analytic| / tolerance over all
    // checked elements: 0.22 at 5e-4, 0.54 at 2.5e-4. resnet_bn needs 1e-4:
    // a batch norm's shift moves every value of its channel, so a ReLU kink
    // downstream lies within 5e-4 of stem_bn's bias (numeric -0.0567 at
    // 5e-4 and -0.0548 at 2e-3 against the analytic -0.0640, within
    // tolerance at 1e-4).
    const bool has_bn = std::string(name) == "resnet_bn" ||
                        std::string(name) == "resnet18" ||
                        std::string(name) == "mobilenet_v2";
    const float eps = has_bn ? 1e-4f : 5e-4f;
    // gpt_tiny's four blocks are alike: its check covers the embedding, the
    // first block (whose gradients flow back through all four blocks'
    // attention) and the head, at the largest element of each gradient
    // (the one a wiring error would move most), to keep the test to a few
    // seconds.
    // resnet18, mobilenet_v2 and vit_tiny likewise: the stem, one block's
    // every kind of weighted layer (resnet18's strided projection,
    // mobilenet_v2's expansion, depthwise and projection, vit_tiny's
    // positional embedding and attention) and the classifier.
    const std::set<std::string> sampled =
        std::string(name) == "resnet18"
            ? std::set<std::string>{"conv1",     "bn1",          "l2b0_conv1",
                                    "l2b0_down", "l2b0_down_bn", "fc"}
        : std::string(name) == "mobilenet_v2"
            ? std::set<std::string>{"stem",  "stem_bn",  "b2_expand",
                                    "b2_dw", "b2_dw_bn", "b2_project",
                                    "fc"}
        : std::string(name) == "vit_tiny"
            ? std::set<std::string>{"patch",   "pos",  "b0.ln1",
                                    "b0.q",    "b0.k", "b0.fc",
                                    "b1.proj", "ln_f", "head"}
            : std::set<std::string>{};
    const bool gpt = std::string(name) == "gpt_tiny";
    const bool largest_only = gpt || !sampled.empty();
    for (size_t l = 0; l < z.plan.layers.size(); ++l) {
      const model::LayerPlan& lp = z.plan.layers[l];
      if (gpt && lp.name != "emb" && lp.name != "ln_f" && lp.name != "logits" &&
          lp.name.rfind("b0.", 0) != 0) {
        continue;
      }
      if (!sampled.empty() && sampled.count(lp.name) == 0) continue;
      for (size_t p = 0; p < lp.params.size(); ++p) {
        const int slot = lp.params[p].role == v1::WEIGHT ? 0 : 1;
        const std::vector<float>& g = grads[{lp.name, slot}];
        ASSERT_FALSE(g.empty()) << lp.name;
        int64_t largest = 0;
        for (size_t i = 0; i < g.size(); ++i) {
          if (std::fabs(g[i]) > std::fabs(g[largest])) largest = i;
        }
        const std::vector<int64_t> elements =
            largest_only
                ? std::vector<int64_t>{largest}
                : std::vector<int64_t>{0, static_cast<int64_t>(g.size() / 2),
                                       static_cast<int64_t>(g.size() - 1)};
        for (int64_t e : elements) {
          double loss[2];
          for (int side = 0; side < 2; ++side) {
            ExecutorOptions o;
            o.param_init = init(static_cast<int>(l), static_cast<int>(p), e,
                                side == 0 ? eps : -eps);
            auto r = RunZoo(z, o);
            ASSERT_THAT(r, IsOk());
            loss[side] = r->losses[0];
          }
          const double numeric = (loss[0] - loss[1]) / (2.0 * eps);
          EXPECT_NEAR(numeric, g[e], 3e-3 + 0.05 * std::fabs(g[e]))
              << lp.name << " param " << p << " element " << e;
        }
      }
    }
  }
}

// A worker with every CPU kernel: CANONICAL, DETERMINISTIC and DEFAULT.
const kernels::Registry& FullCpuRegistry() {
  static const kernels::Registry* registry = [] {
    auto* r = new kernels::Registry();
    EXPECT_THAT(kernels::RegisterCpuCanonicalKernels(r), IsOk());
    EXPECT_THAT(kernels::RegisterCpuDeterministicAndDefaultKernels(r), IsOk());
    return r;
  }();
  return *registry;
}

absl::StatusOr<RunResult> RunZooOn(const kernels::Registry& registry,
                                   const Zoo& z) {
  if (!z.dataset) return absl::InternalError("zoo model not loaded");
  ExecutorOptions options;
  options.initializer = z.model.initializer();
  return RunJob(z.plan, z.config, &registry,
                DatasetBatches(z.dataset, z.config.batch_size()),
                std::move(options));
}

// The CPU kernels of the gauntlet's atomic overrides; the others it names
// (conv2d.grad_input, max_pool2d.grad, resize_bilinear.grad) are CUDA's.
const std::map<std::string, std::string> kCpuAtomicOverrides = {
    {"bias_add.grad", "atomic"},
    {"conv2d.grad_weight", "atomic"},
    {"dense.forward", "split_k_atomic"},
};

TEST(ZooTest, GauntletDefaultConfigFallsBackToCanonicalWithoutDefaultKernels) {
  // Only CANONICAL kernels registered: every op of the DEFAULT config runs
  // its CANONICAL kernel, recorded as a fallback, with CANONICAL's bits.
  Zoo def = Load("gauntlet", 2, 1, "config_default.json");
  ASSERT_NE(def.dataset, nullptr);
  ASSERT_EQ(def.config.determinism(), v1::DEFAULT);
  auto r = RunZoo(def);
  ASSERT_THAT(r, IsOk());
  ASSERT_FALSE(r->kernels.empty());
  for (const KernelChoice& k : r->kernels) {
    SCOPED_TRACE(k.op);
    EXPECT_EQ(k.requested_mode, kernels::Mode::kDefault);
    EXPECT_EQ(k.ran.mode, kernels::Mode::kCanonical);
    EXPECT_EQ(k.ran.algorithm, kernels::kCanonicalAlgorithm);
    EXPECT_TRUE(k.fallback);
  }
  Zoo canonical = def;
  canonical.config.set_determinism(v1::CANONICAL);
  auto c = RunZoo(canonical);
  ASSERT_THAT(c, IsOk());
  EXPECT_TRUE(BitsEqual(r->losses, c->losses));
}

TEST(ZooTest, GauntletDefaultConfigRunsDefaultKernelsWhereRegistered) {
  Zoo def = Load("gauntlet", 2, 1, "config_default.json");
  ASSERT_NE(def.dataset, nullptr);
  auto r = RunZooOn(FullCpuRegistry(), def);
  ASSERT_THAT(r, IsOk());
  ASSERT_FALSE(r->kernels.empty());
  for (const KernelChoice& k : r->kernels) {
    SCOPED_TRACE(k.op);
    EXPECT_FALSE(k.fallback);
    EXPECT_EQ(k.ran.mode, kernels::Mode::kDefault);
    EXPECT_EQ(k.ran.algorithm, kernels::kDefaultAlgorithm);
  }
}

TEST(ZooTest, GauntletAtomicOverridesNeedTheirKernels) {
  Zoo atomic = Load("gauntlet", 2, 1, "config_atomic.json");
  ASSERT_NE(atomic.dataset, nullptr);
  // No DEFAULT kernels at all: the first override is refused, naming the
  // only kernel there is.
  EXPECT_THAT(
      RunZoo(atomic),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("config.op_algorithms"), HasSubstr("\"atomic\""),
                     HasSubstr("available: CANONICAL/canonical"))));
  // Every CPU kernel: the CUDA-only atomic overrides are still refused.
  EXPECT_THAT(RunZooOn(FullCpuRegistry(), atomic),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("config.op_algorithms"),
                             HasSubstr("is not registered for mode DEFAULT "
                                       "on backend cpu"),
                             HasSubstr("DEFAULT/default"))));
}

TEST(ZooTest, GauntletAtomicOverridesRunTheNamedKernels) {
  Zoo atomic = Load("gauntlet", 2, 1, "config_atomic.json");
  ASSERT_NE(atomic.dataset, nullptr);
  auto* overrides = atomic.config.mutable_op_algorithms();
  ASSERT_EQ(overrides->size(), 6u);
  for (const auto& [op, algorithm] : kCpuAtomicOverrides) {
    ASSERT_EQ(overrides->count(op), 1u) << op;
    EXPECT_EQ(overrides->at(op), algorithm) << op;
  }
  overrides->clear();
  for (const auto& [op, algorithm] : kCpuAtomicOverrides) {
    (*overrides)[op] = algorithm;
  }
  auto r = RunZooOn(FullCpuRegistry(), atomic);
  ASSERT_THAT(r, IsOk());
  std::map<std::string, std::string> ran_overridden;
  for (const KernelChoice& k : r->kernels) {
    SCOPED_TRACE(k.op);
    EXPECT_FALSE(k.fallback);
    EXPECT_EQ(k.ran.mode, kernels::Mode::kDefault);
    auto it = kCpuAtomicOverrides.find(k.op);
    if (it == kCpuAtomicOverrides.end()) {
      EXPECT_EQ(k.requested_algorithm, "");
      EXPECT_EQ(k.ran.algorithm, kernels::kDefaultAlgorithm);
      continue;
    }
    EXPECT_EQ(k.requested_algorithm, it->second);
    ran_overridden[k.op] = k.ran.algorithm;
  }
  EXPECT_EQ(ran_overridden, kCpuAtomicOverrides);
}

// The algorithm that ran for each op of `r` (Run.kernels).
std::map<std::string, std::string> Algorithms(const RunResult& r) {
  std::map<std::string, std::string> ran;
  for (const KernelChoice& k : r.kernels) ran[k.op] = k.ran.algorithm;
  return ran;
}

// Runs the DEFAULT config `def` on 4 threads under the pinned arrival
// orders of seeds 1..8 (into *runs) and expects two of them to diverge,
// first at step 0 in `layer`'s GRAD_WEIGHT as produced by `op`. Arrival
// orders are pinned by seed, so this cannot flake.
void ExpectArrivalOrdersDivergeAt(const Zoo& def, const std::string& layer,
                                  const std::string& op,
                                  std::vector<RunResult>* runs,
                                  v1::TensorRole role = v1::GRAD_WEIGHT) {
  kernels::SetCpuThreadsForTesting(4);
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    kernels::ScopedAtomicArrivalOrderForTesting order(seed);
    auto r = RunZooOn(FullCpuRegistry(), def);
    ASSERT_THAT(r, IsOk());
    runs->push_back(*std::move(r));
  }
  kernels::SetCpuThreadsForTesting(0);
  const RunResult* other = nullptr;
  for (const RunResult& r : *runs) {
    if (r.run_digest != (*runs)[0].run_digest) other = &r;
  }
  ASSERT_NE(other, nullptr) << "8 arrival orders gave identical runs";
  const RunComparison cmp = CompareRuns((*runs)[0], *other);
  ASSERT_EQ(cmp.verdict, RunComparison::Verdict::kDiverged);
  ASSERT_TRUE(cmp.first.has_value());
  EXPECT_EQ(cmp.first->step, 0);
  EXPECT_EQ(cmp.first->entry.layer(), layer);
  EXPECT_EQ(cmp.first->entry.role(), role);
  EXPECT_EQ(cmp.first->entry.op(), op);
}

// The depthwise weight gradient is the classic atomic site: in DEFAULT mode
// with the atomic conv2d.grad_weight, two arrival orders of the per-batch
// partials give two results, and the first tensor that differs is the
// depthwise layer's weight gradient (b2_dw is the last convolution, so its
// gradient is the first atomic result of the backward pass). Arrival orders
// are pinned by seed, so the test cannot flake: it tries 8 seeds.
TEST(ZooTest, MobilenetDefaultDepthwiseGradientIsNondeterministic) {
  Zoo def = Load("mobilenet_tiny", 0, 2, "config_default.json");
  ASSERT_NE(def.dataset, nullptr);
  ASSERT_EQ(def.config.op_algorithms().at("conv2d.grad_weight"), "atomic");
  std::vector<RunResult> runs;
  ExpectArrivalOrdersDivergeAt(def, "b2_dw", "conv2d.grad_weight", &runs);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  bool atomic_recorded = false;
  for (const KernelChoice& k : runs[0].kernels) {
    if (k.op == "conv2d.grad_weight") {
      atomic_recorded = k.ran.algorithm == kernels::kAtomicAlgorithm;
    }
  }
  EXPECT_TRUE(atomic_recorded);
  // CANONICAL: the same model is bit-identical under any arrival order.
  Zoo canonical = Load("mobilenet_tiny", 0, 2);
  kernels::SetCpuThreadsForTesting(4);
  std::vector<hash::Fingerprint> digests;
  for (uint64_t seed : {1, 2}) {
    kernels::ScopedAtomicArrivalOrderForTesting order(seed);
    auto r = RunZooOn(FullCpuRegistry(), canonical);
    ASSERT_THAT(r, IsOk());
    digests.push_back(r->run_digest);
  }
  kernels::SetCpuThreadsForTesting(0);
  EXPECT_EQ(digests[0], digests[1]);
}

// mobilenet_v2's DEFAULT config makes only the depthwise weight gradients
// atomic ("atomic_depthwise": every other convolution's takes the
// deterministic kernel, dense and bias gradients are pinned too): the first
// divergence between arrival orders is the last depthwise layer's weight
// gradient, b8_dw, in the backward pass of step 0.
TEST(ZooTest, MobilenetV2DefaultDepthwiseGradientIsNondeterministic) {
  Zoo def = Load("mobilenet_v2", 8, 1, "config_default.json");
  ASSERT_NE(def.dataset, nullptr);
  ASSERT_EQ(def.config.op_algorithms().at("conv2d.grad_weight"),
            kernels::kAtomicDepthwiseAlgorithm);
  std::vector<RunResult> runs;
  ExpectArrivalOrdersDivergeAt(def, "b8_dw", "conv2d.grad_weight", &runs);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::map<std::string, std::string> ran = Algorithms(runs[0]);
  EXPECT_EQ(ran["conv2d.grad_weight"], kernels::kAtomicDepthwiseAlgorithm);
  EXPECT_EQ(ran["dense.forward"], kernels::kDeterministicAlgorithm);
}

// gpt_tiny's embedding config leaves only the token embedding's
// scatter-add atomic (the index_add / embedding-backward site users hit in
// practice): the first divergence is emb's weight gradient, the last
// gradient of step 0's backward pass.
TEST(ZooTest, GptTinyDefaultEmbeddingGradientIsNondeterministic) {
  Zoo def = Load("gpt_tiny", 4, 1, "config_default_embedding.json");
  ASSERT_NE(def.dataset, nullptr);
  ASSERT_EQ(def.config.op_algorithms().at("embedding.grad_weight"), "atomic");
  std::vector<RunResult> runs;
  ExpectArrivalOrdersDivergeAt(def, "emb", "embedding.grad_weight", &runs);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::map<std::string, std::string> ran = Algorithms(runs[0]);
  EXPECT_EQ(ran["embedding.grad_weight"], kernels::kAtomicAlgorithm);
  EXPECT_EQ(ran["matmul.forward"], kernels::kDeterministicAlgorithm);
  EXPECT_EQ(ran["dense.forward"], kernels::kDeterministicAlgorithm);
}

// The token model's DEFAULT config pins dense.forward and bias_add.grad to
// their deterministic kernels and leaves the embedding's scatter-add
// atomic: the first divergence between arrival orders is that gradient.
TEST(ZooTest, CharLmDefaultEmbeddingGradientIsNondeterministic) {
  Zoo def = Load("char_lm", 0, 2, "config_default.json");
  ASSERT_NE(def.dataset, nullptr);
  ASSERT_EQ(def.config.op_algorithms().at("embedding.grad_weight"), "atomic");
  std::vector<RunResult> runs;
  ExpectArrivalOrdersDivergeAt(def, "emb", "embedding.grad_weight", &runs);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::map<std::string, std::string> ran = Algorithms(runs[0]);
  EXPECT_EQ(ran["embedding.grad_weight"], kernels::kAtomicAlgorithm);
  EXPECT_EQ(ran["dense.forward"], kernels::kDeterministicAlgorithm);
  EXPECT_EQ(ran["bias_add.grad"], kernels::kDeterministicAlgorithm);
}

// The transformer's DEFAULT config pins every other op to a repeatable
// kernel and leaves the batched matmul split over K with atomic adds (the
// cuBLAS split-K pattern): the first divergence between arrival orders is
// the first attention score matrix, in the forward pass of step 0.
TEST(ZooTest, GptTinyDefaultSplitKMatmulIsNondeterministic) {
  Zoo def = Load("gpt_tiny", 2, 1, "config_default.json");
  ASSERT_NE(def.dataset, nullptr);
  ASSERT_EQ(def.config.op_algorithms().at("matmul.forward"), "split_k_atomic");
  std::vector<RunResult> runs;
  ExpectArrivalOrdersDivergeAt(def, "b0.scores", "matmul.forward", &runs,
                               v1::ACTIVATION);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::map<std::string, std::string> ran = Algorithms(runs[0]);
  EXPECT_EQ(ran["matmul.forward"], kernels::kSplitKAtomicAlgorithm);
  EXPECT_EQ(ran["matmul.grad"], kernels::kDefaultAlgorithm);
  EXPECT_EQ(ran["dense.forward"], kernels::kDeterministicAlgorithm);
}

double Mean(const std::vector<float>& v, size_t from, size_t to) {
  double s = 0;
  for (size_t i = from; i < to; ++i) s += v[i];
  return s / static_cast<double>(to - from);
}

// The acceptance bar for the zoo: each model's example config, run as is
// on its synthetic data, at least halves the loss (the mean of the last 5
// steps is at most half the mean of the first 5).
TEST(ZooTest, ExampleConfigsHalveTheLoss) {
  for (const char* name :
       {"mlp", "lenet5", "resnet_small", "norm_mlp", "mobilenet_tiny",
        "resnet_bn", "char_lm", "gpt_tiny", "resnet18", "mobilenet_v2",
        "vit_tiny", "conv_autoencoder"}) {
    SCOPED_TRACE(name);
    Zoo z = Load(name, 0, 0);
    ASSERT_NE(z.dataset, nullptr);
    ExecutorOptions o;
    o.keep_fingerprints = false;
    auto r = RunZoo(z, o);
    ASSERT_THAT(r, IsOk());
    const size_t n = r->losses.size();
    ASSERT_EQ(n, static_cast<size_t>(z.config.steps()));
    ASSERT_GE(n, 10u);
    const double first = Mean(r->losses, 0, 5);
    const double last = Mean(r->losses, n - 5, n);
    std::printf(
        "%s: %zu steps, mean loss of the first 5 steps %.4f, of the "
        "last 5 %.4f (ratio %.3f)\n",
        name, n, first, last, last / first);
    EXPECT_LE(last, 0.5 * first) << "first " << first << " last " << last;
  }
}

}  // namespace
}  // namespace lockstep::worker
