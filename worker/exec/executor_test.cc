#include "worker/exec/executor.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/hash/fingerprint.h"
#include "kernels/registry.h"
#include "model/manifest.h"
#include "model/plan.h"
#include "worker/exec/compare.h"
#include "worker/exec/init.h"
#include "worker/exec/test_util.h"

namespace lockstep::worker {
namespace {

namespace v1 = ::lockstep::v1;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::IsOkAndHolds;
using ::lockstep::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kBatch = 4;

absl::StatusOr<RunResult> RunModel(const model::ModelPlan& plan,
                                   const v1::JobConfig& config,
                                   ExecutorOptions options = {}) {
  return RunJob(plan, config, &testing::CpuRegistry(),
                testing::TeacherBatches(plan, config.seed()),
                std::move(options));
}

struct Case {
  const char* name;
  model::ModelPlan plan;
};

std::vector<Case> Models() {
  return {{"mlp", testing::MlpPlan(kBatch)},
          {"convres", testing::ConvResPlan(kBatch)}};
}

TEST(ExecutorTest, SameJobTwiceGivesTheSameRunDigest) {
  for (const Case& c : Models()) {
    for (v1::OptimizerKind opt : {v1::SGD, v1::MOMENTUM, v1::ADAM}) {
      SCOPED_TRACE(std::string(c.name) + " " + v1::OptimizerKind_Name(opt));
      v1::JobConfig config = testing::BaseConfig(kBatch, 3);
      config.mutable_optimizer()->set_kind(opt);
      config.mutable_optimizer()->set_momentum(0.9f);
      config.mutable_optimizer()->set_learning_rate(0.05f);
      auto a = RunModel(c.plan, config);
      auto b = RunModel(c.plan, config);
      ASSERT_THAT(a, IsOk());
      ASSERT_THAT(b, IsOk());
      EXPECT_EQ(a->run_digest, b->run_digest);
      EXPECT_EQ(a->step_digests, b->step_digests);
      EXPECT_EQ(CompareRuns(*a, *b).verdict,
                RunComparison::Verdict::kIdentical);
      EXPECT_FALSE(a->fault_injected);
      ASSERT_EQ(a->fingerprints.size(), 3u);
      EXPECT_EQ(a->fingerprints[0].size(),
                static_cast<size_t>(a->manifest.entries_size()));

      // A different seed is a different run of the same manifest.
      v1::JobConfig other = config;
      other.set_seed(8);
      auto d = RunModel(c.plan, other);
      ASSERT_THAT(d, IsOk());
      EXPECT_EQ(d->manifest.manifest_digest(), a->manifest.manifest_digest());
      EXPECT_NE(d->run_digest, a->run_digest);
    }
  }
}

// config.threads sizes the CPU kernels' pool for the run (it used to be
// validated and then ignored, so DEFAULT's atomic kernels kept running on
// every core of a job that asked for one thread).
TEST(ExecutorTest, ConfigThreadsSizesTheCpuPool) {
  kernels::SetCpuThreadsForTesting(3);
  v1::JobConfig config = testing::BaseConfig(kBatch, 1);
  config.set_threads(1);
  auto r = RunModel(Models()[0].plan, config);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(kernels::CpuThreadPool()->num_threads(), 1);
  config.set_threads(2);
  ASSERT_THAT(RunModel(Models()[0].plan, config), IsOk());
  EXPECT_EQ(kernels::CpuThreadPool()->num_threads(), 2);
  // 0 leaves the worker's pool as it is.
  config.set_threads(0);
  ASSERT_THAT(RunModel(Models()[0].plan, config), IsOk());
  EXPECT_EQ(kernels::CpuThreadPool()->num_threads(), 2);
  kernels::SetCpuThreadsForTesting(0);
}

// CpuPoolParallelism runs each task once on the process pool, and a
// tensor's fingerprint message spread over it is the one computed alone.
TEST(ExecutorTest, CpuPoolParallelismRunsEveryTaskOnce) {
  kernels::SetCpuThreadsForTesting(3);
  const hash::Parallelism p = CpuPoolParallelism();
  EXPECT_EQ(p.threads, 3);
  std::vector<std::atomic<int>> runs(7);
  p.run(7, [&](int64_t i) { ++runs[i]; });
  for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].load(), 1) << i;
  // 20 leaves of float32 with a NaN, an infinity and a -0.0.
  const int64_t n = 20 * hash::kLeafBytes / 4 - 5;
  absl::StatusOr<kernels::Tensor> z =
      kernels::Tensor::Zeros(kernels::DType::kFloat32, {n});
  ASSERT_THAT(z, IsOk());
  kernels::Tensor& t = *z;
  float* x = t.data<float>();
  for (int64_t i = 0; i < n; ++i) x[i] = std::sin(static_cast<float>(i));
  x[7] = std::nanf("");
  x[hash::kLeafBytes / 4] = -INFINITY;
  x[n - 1] = -0.0f;
  auto alone = FingerprintTensor(t, 5);
  auto spread = FingerprintTensor(t, 5, &p);
  ASSERT_THAT(alone, IsOk());
  ASSERT_THAT(spread, IsOk());
  EXPECT_EQ(spread->SerializeAsString(), alone->SerializeAsString());
  EXPECT_EQ(spread->stats().nan_count(), 1);
  kernels::SetCpuThreadsForTesting(0);
}

// FingerprintTensor into a message that holds an earlier tensor's
// fingerprint (as Emit reuses one) gives exactly the new message.
TEST(ExecutorTest, FingerprintTensorIntoAReusedMessage) {
  auto f = kernels::Tensor::FromValues<float>(
      {2, 2}, std::vector<float>{1.5f, -2.0f, INFINITY, std::nanf("")});
  auto g = kernels::Tensor::FromValues<float>({3}, std::vector<float>{0, 0, 0});
  auto i =
      kernels::Tensor::FromValues<int32_t>({2}, std::vector<int32_t>{7, -7});
  ASSERT_THAT(f, IsOk());
  ASSERT_THAT(g, IsOk());
  ASSERT_THAT(i, IsOk());
  v1::TensorFingerprint reused;
  int32_t index = 0;
  for (const kernels::Tensor* t : {&*f, &*i, &*f, &*g, &*i}) {
    ASSERT_THAT(FingerprintTensor(*t, index, nullptr, &reused), IsOk());
    auto fresh = FingerprintTensor(*t, index);
    ASSERT_THAT(fresh, IsOk());
    EXPECT_EQ(reused.SerializeAsString(), fresh->SerializeAsString())
        << t->DebugString() << "\n"
        << reused.DebugString() << "\nwant\n"
        << fresh->DebugString();
    EXPECT_TRUE(reused.has_stats());
    ++index;
  }
  // The int32 tensor's statistics are all zero, the float one's are not.
  ASSERT_THAT(FingerprintTensor(*i, 0, nullptr, &reused), IsOk());
  EXPECT_EQ(reused.stats().ByteSizeLong(), 0u);
  ASSERT_THAT(FingerprintTensor(*f, 0, nullptr, &reused), IsOk());
  EXPECT_EQ(reused.stats().nan_count(), 1);
  EXPECT_EQ(reused.stats().inf_count(), 1);
  EXPECT_EQ(reused.stats().sum(), -0.5);
}

// Every fingerprint of a run is the same message whether the pool, and so
// the fingerprints of its large tensors, has 1 or several threads.
TEST(ExecutorTest, FingerprintsAreTheSameOnEveryPoolSize) {
  // conv1's output [N, 3, 6, 6] is 14 leaves, the input [N, 2, 6, 6] 10.
  const int64_t batch = 2048;
  const model::ModelPlan plan = testing::ConvResPlan(batch);
  v1::JobConfig config = testing::BaseConfig(batch, 2);
  config.set_threads(1);
  auto one = RunModel(plan, config);
  ASSERT_THAT(one, IsOk());
  int large = 0;
  for (const v1::ManifestEntry& e : one->manifest.entries()) {
    int64_t bytes = 4;
    for (int64_t d : e.shape()) bytes *= d;
    const size_t leaves = hash::NumLeaves(static_cast<size_t>(bytes));
    if (leaves >= 2 * hash::kMinLeavesPerThread) ++large;
  }
  EXPECT_GE(large, 4);  // input, conv1, relu1, conv2, add and their grads
  for (int threads : {2, 3, 4}) {
    SCOPED_TRACE(threads);
    config.set_threads(threads);
    auto r = RunModel(plan, config);
    ASSERT_THAT(r, IsOk());
    EXPECT_EQ(CpuPoolParallelism().threads, threads);
    testing::ExpectSameFingerprints(*r, *one);
    // Streamed through the observer instead of kept (Emit then reuses one
    // message for every tensor): the same messages, in the same order.
    std::vector<std::string> streamed;
    ExecutorOptions stream;
    stream.keep_fingerprints = false;
    stream.observer = [&](int, const v1::ManifestEntry&, const kernels::Tensor&,
                          const v1::TensorFingerprint& fp) {
      streamed.push_back(fp.SerializeAsString());
      return absl::OkStatus();
    };
    auto st = RunModel(plan, config, stream);
    ASSERT_THAT(st, IsOk());
    EXPECT_EQ(st->run_digest, one->run_digest);
    std::vector<std::string> kept;
    for (const auto& step : one->fingerprints) {
      for (const v1::TensorFingerprint& fp : step) {
        kept.push_back(fp.SerializeAsString());
      }
    }
    EXPECT_TRUE(streamed == kept);
  }
  kernels::SetCpuThreadsForTesting(0);
}

TEST(ExecutorTest, DeterministicModeFallsBackToCanonicalAndRecordsIt) {
  for (const Case& c : Models()) {
    SCOPED_TRACE(c.name);
    v1::JobConfig canonical = testing::BaseConfig(kBatch, 2);
    v1::JobConfig det = canonical;
    det.set_determinism(v1::DETERMINISTIC);
    auto a = RunModel(c.plan, det);
    auto b = RunModel(c.plan, det);
    auto ref = RunModel(c.plan, canonical);
    ASSERT_THAT(a, IsOk());
    ASSERT_THAT(b, IsOk());
    ASSERT_THAT(ref, IsOk());
    EXPECT_EQ(a->run_digest, b->run_digest);
    // The same kernels ran, so the same bits.
    EXPECT_EQ(a->run_digest, ref->run_digest);
    ASSERT_FALSE(a->kernels.empty());
    for (const KernelChoice& k : a->kernels) {
      EXPECT_TRUE(k.fallback) << k.op;
      EXPECT_EQ(k.requested_mode, kernels::Mode::kDeterministic);
      EXPECT_EQ(k.ran.mode, kernels::Mode::kCanonical) << k.op;
      EXPECT_EQ(k.ran.algorithm, "canonical");
    }
    for (const KernelChoice& k : ref->kernels) EXPECT_FALSE(k.fallback);
  }
}

// An independent count of differing fingerprints: the first one in
// (step, entry) order, and how many differ after it.
struct Diff {
  int first_step = -1;
  int first_entry = -1;
  int64_t later = 0;
};
Diff CountDiffs(const RunResult& a, const RunResult& b) {
  Diff d;
  for (size_t s = 0; s < a.fingerprints.size(); ++s) {
    for (size_t i = 0; i < a.fingerprints[s].size(); ++i) {
      const auto& x = a.fingerprints[s][i];
      const auto& y = b.fingerprints[s][i];
      if (x.hash_hi() == y.hash_hi() && x.hash_lo() == y.hash_lo()) continue;
      if (d.first_step < 0) {
        d.first_step = a.captured_steps[s];
        d.first_entry = static_cast<int>(i);
      } else {
        ++d.later;
      }
    }
  }
  return d;
}

TEST(ExecutorTest, InjectedFaultIsTheFirstDivergence) {
  struct FaultCase {
    const char* model;
    const char* spec;
    int step;
    const char* layer;
    v1::TensorRole role;
    const char* slot;
  };
  const FaultCase cases[] = {
      {"convres", "step=1,layer=conv2,role=ACTIVATION,bit=22,element=5", 1,
       "conv2", v1::ACTIVATION, ""},
      {"convres", "step=0,layer=conv1,role=GRAD_WEIGHT,bit=30", 0, "conv1",
       v1::GRAD_WEIGHT, ""},
      {"convres", "step=1,layer=fc,role=WEIGHT,bit=20,element=3", 1, "fc",
       v1::WEIGHT, ""},
      {"mlp", "step=2,layer=fc1,role=ACTIVATION,bit=25,element=7", 2, "fc1",
       v1::ACTIVATION, ""},
      {"mlp", "step=0,layer=fc2,role=GRAD_WEIGHT,bit=29,element=1", 0, "fc2",
       v1::GRAD_WEIGHT, ""},
      {"mlp", "step=0,layer=fc1,role=WEIGHT,bit=28", 0, "fc1", v1::WEIGHT, ""},
  };
  for (const FaultCase& fc : cases) {
    SCOPED_TRACE(std::string(fc.model) + " " + fc.spec);
    const model::ModelPlan plan = std::string(fc.model) == "mlp"
                                      ? testing::MlpPlan(kBatch)
                                      : testing::ConvResPlan(kBatch);
    const v1::JobConfig config = testing::BaseConfig(kBatch, 4);
    auto fault = ParseFaultSpec(fc.spec);
    ASSERT_THAT(fault, IsOk());
    ExecutorOptions options;
    options.fault = *fault;
    auto ref = RunModel(plan, config);
    auto bad = RunModel(plan, config, options);
    ASSERT_THAT(ref, IsOk());
    ASSERT_THAT(bad, IsOk());
    EXPECT_TRUE(bad->fault_injected);
    ASSERT_TRUE(bad->fault_entry.has_value());
    EXPECT_EQ(bad->fault_entry->layer(), fc.layer);
    EXPECT_NE(ref->run_digest, bad->run_digest);

    const RunComparison cmp = CompareRuns(ref.value(), bad.value());
    ASSERT_EQ(cmp.verdict, RunComparison::Verdict::kDiverged)
        << DescribeComparison(cmp);
    ASSERT_TRUE(cmp.first.has_value());
    EXPECT_EQ(cmp.first->step, fc.step);
    EXPECT_EQ(cmp.first->entry.layer(), fc.layer);
    EXPECT_EQ(cmp.first->entry.role(), fc.role);
    if (*fc.slot != '\0') {
      EXPECT_EQ(cmp.first->entry.slot(), fc.slot);
    }
    EXPECT_EQ(cmp.first->entry.index(), bad->fault_entry->index());

    const Diff d = CountDiffs(ref.value(), bad.value());
    EXPECT_EQ(d.first_step, fc.step);
    EXPECT_EQ(d.first_entry, cmp.first->entry.index());
    EXPECT_GT(cmp.downstream, 0);
    EXPECT_EQ(cmp.downstream, d.later);
    // One bit flipped: the statistics show it too.
    EXPECT_GT(cmp.first->rel_l2 + cmp.first->rel_sum + cmp.first->rel_max_abs,
              0.0);
    EXPECT_THAT(DescribeComparison(cmp),
                AllOf(HasSubstr("first divergence at step"),
                      HasSubstr(std::string("\"") + fc.layer + "\""),
                      HasSubstr(v1::TensorRole_Name(fc.role))));
  }
}

TEST(ExecutorTest, FaultInAnAccumulatedGradient) {
  // relu1 feeds conv2 and add; its gradient is their sum. Flip the sum at an
  // element where relu1 is active (elsewhere relu.grad masks the fault and
  // nothing downstream changes).
  const model::ModelPlan plan = testing::ConvResPlan(kBatch);
  const v1::JobConfig config = testing::BaseConfig(kBatch, 3);
  int64_t active = -1;
  ExecutorOptions find;
  find.observer = [&](int step, const v1::ManifestEntry& e,
                      const kernels::Tensor& t,
                      const v1::TensorFingerprint&) -> absl::Status {
    if (step == 1 && e.layer() == "relu1" && e.role() == v1::ACTIVATION) {
      for (int64_t i = 0; i < t.numel() && active < 0; ++i) {
        if (t.data<float>()[i] > 0.0f) active = i;
      }
    }
    return absl::OkStatus();
  };
  auto ref = RunModel(plan, config, find);
  ASSERT_THAT(ref, IsOk());
  ASSERT_GE(active, 0);
  ExecutorOptions options;
  options.fault = *ParseFaultSpec(absl::StrCat(
      "step=1,layer=relu1,role=GRAD_ACTIVATION,slot=sum,bit=26,element=",
      active));
  auto bad = RunModel(plan, config, options);
  ASSERT_THAT(bad, IsOk());
  const RunComparison cmp = CompareRuns(*ref, *bad);
  ASSERT_EQ(cmp.verdict, RunComparison::Verdict::kDiverged);
  EXPECT_EQ(cmp.first->step, 1);
  EXPECT_EQ(cmp.first->entry.layer(), "relu1");
  EXPECT_EQ(cmp.first->entry.slot(), "sum");
  EXPECT_GT(cmp.downstream, 0);
  EXPECT_EQ(cmp.downstream, CountDiffs(*ref, *bad).later);
}

TEST(ExecutorTest, FaultInAnUncapturedTensorShowsUpDownstream) {
  // FORWARD_ONLY: a weight gradient is not captured, but the corrupted update
  // changes the next step's forward pass.
  const model::ModelPlan plan = testing::MlpPlan(kBatch);
  v1::JobConfig config = testing::BaseConfig(kBatch, 3);
  config.mutable_capture()->set_kind(v1::CapturePolicy::FORWARD_ONLY);
  ExecutorOptions options;
  options.fault = *ParseFaultSpec("step=0,layer=fc2,role=GRAD_WEIGHT,bit=30");
  auto ref = RunModel(plan, config);
  auto bad = RunModel(plan, config, options);
  ASSERT_THAT(ref, IsOk());
  ASSERT_THAT(bad, IsOk());
  EXPECT_TRUE(bad->fault_injected);
  const RunComparison cmp = CompareRuns(*ref, *bad);
  ASSERT_EQ(cmp.verdict, RunComparison::Verdict::kDiverged);
  EXPECT_EQ(cmp.first->step, 1);
  EXPECT_EQ(cmp.first->entry.layer(), "fc2");
  EXPECT_EQ(cmp.first->entry.role(), v1::ACTIVATION);
}

// Three steps of the residual conv model with `options` and op times
// collected into *times: checks that timing changes no bit of the run and
// that (fingerprint) counts every captured tensor once; the run in *timed.
void RunConvResWithOpTimes(ExecutorOptions options, OpTimes* times,
                           RunResult* timed) {
  const model::ModelPlan plan = testing::ConvResPlan(kBatch);
  const v1::JobConfig config = testing::BaseConfig(kBatch, 3);
  options.op_times = times;
  auto run = RunModel(plan, config, options);
  auto plain = RunModel(plan, config);
  ASSERT_THAT(run, IsOk());
  ASSERT_THAT(plain, IsOk());
  EXPECT_EQ(run->run_digest, plain->run_digest);
  const int64_t captured = static_cast<int64_t>(run->captured_steps.size());
  ASSERT_GT(captured, 0);
  ASSERT_EQ(times->count(kFingerprintOpTime), 1u);
  // Every captured tensor is hashed, or (ADD's two gradients, views of dy
  // emitted right after it) takes dy's fingerprint.
  ASSERT_EQ(times->count(kFingerprintReusedOpTime), 1u);
  EXPECT_EQ((*times)[kFingerprintReusedOpTime].calls, 2 * captured);
  EXPECT_EQ((*times)[kFingerprintOpTime].calls +
                (*times)[kFingerprintReusedOpTime].calls,
            captured * run->manifest.entries_size());
  *timed = *std::move(run);
}

// op_times (step_bench --op_times) counts every kernel call by op and every
// captured tensor's fingerprint, and changes no bit of the run.
TEST(ExecutorTest, OpTimesCountKernelCallsAndFingerprints) {
  OpTimes times;
  RunResult timed;
  ASSERT_NO_FATAL_FAILURE(RunConvResWithOpTimes({}, &times, &timed));
  // Every op the run's kernels were chosen for ran once or more per step,
  // except ADD's gradient: both are views of dy, and no kernel runs.
  ASSERT_FALSE(timed.kernels.empty());
  for (const KernelChoice& k : timed.kernels) {
    SCOPED_TRACE(k.op);
    if (k.op == kernels::op::kAddGrad) {
      EXPECT_EQ(times.count(k.op), 0u);
      continue;
    }
    ASSERT_EQ(times.count(k.op), 1u);
    EXPECT_GE(times[k.op].calls, 3);
    EXPECT_EQ(times[k.op].calls % 3, 0);
    EXPECT_GE(times[k.op].seconds, 0.0);
  }
  EXPECT_GE(times.count("conv2d.forward"), 1u);
}

// op_times_by_layer (step_bench --op_times_by_layer) keys each kernel call
// by its layer and op: the same calls as by op alone, split by layer.
TEST(ExecutorTest, OpTimesByLayerSplitTheOpsByLayer) {
  OpTimes by_op, by_layer;
  RunResult timed_by_op, timed_by_layer;
  ASSERT_NO_FATAL_FAILURE(RunConvResWithOpTimes({}, &by_op, &timed_by_op));
  ExecutorOptions options;
  options.op_times_by_layer = true;
  ASSERT_NO_FATAL_FAILURE(
      RunConvResWithOpTimes(options, &by_layer, &timed_by_layer));
  // The convres plan's two convolutions, one call per step each way.
  for (const char* layer : {"conv1", "conv2"}) {
    for (const char* op : {"conv2d.forward", "conv2d.grad_weight"}) {
      const std::string key = absl::StrCat(layer, " ", op);
      SCOPED_TRACE(key);
      ASSERT_EQ(by_layer.count(key), 1u);
      EXPECT_EQ(by_layer[key].calls, 3);
    }
  }
  // Summed over layers, each op's calls are those counted by op.
  std::map<std::string, int64_t> summed;
  for (const auto& [key, t] : by_layer) {
    if (key == kFingerprintOpTime || key == kFingerprintReusedOpTime) {
      EXPECT_EQ(t.calls, by_op[key].calls) << key;
      continue;
    }
    const size_t space = key.find(' ');
    ASSERT_NE(space, std::string::npos) << key;
    summed[key.substr(space + 1)] += t.calls;
  }
  ASSERT_EQ(summed.size() + 2, by_op.size());
  for (const auto& [op, calls] : summed) {
    ASSERT_EQ(by_op.count(op), 1u) << op;
    EXPECT_EQ(calls, by_op[op].calls) << op;
  }
}

// With background fingerprints the step's waits for the thread are timed
// apart from its own fingerprinting work, which still counts every
// captured tensor once.
TEST(ExecutorTest, OpTimesSeparateBackgroundWaits) {
  ExecutorOptions options;
  options.fingerprint_thread = FingerprintThread::kBackground;
  options.background_fingerprint_min_bytes = 0;  // every tensor queued
  options.hold_background_fingerprints = true;   // so every step waits
  OpTimes times;
  RunResult timed;
  ASSERT_NO_FATAL_FAILURE(RunConvResWithOpTimes(options, &times, &timed));
  ASSERT_EQ(times.count(kFingerprintWaitOpTime), 1u);
  // At least the drain at the end of every captured step.
  EXPECT_GE(times[kFingerprintWaitOpTime].calls,
            static_cast<int64_t>(timed.captured_steps.size()));
}

TEST(ExecutorTest, ObserverSeesManifestOrderAndIndependentFingerprints) {
  const model::ModelPlan plan = testing::ConvResPlan(kBatch);
  v1::JobConfig config = testing::BaseConfig(kBatch, 5);
  config.mutable_capture()->set_kind(v1::CapturePolicy::EVERY_KTH_STEP);
  config.mutable_capture()->set_every_k(3);
  std::vector<std::pair<int, int>> seen;  // (step, entry index)
  int checked = 0;
  ExecutorOptions options;
  options.observer = [&](int step, const v1::ManifestEntry& e,
                         const kernels::Tensor& t,
                         const v1::TensorFingerprint& fp) -> absl::Status {
    seen.emplace_back(step, e.index());
    EXPECT_EQ(fp.index(), e.index());
    // Recompute with kernels/hash from a private copy of the bytes.
    std::vector<unsigned char> bytes(t.bytes());
    if (!bytes.empty()) std::memcpy(bytes.data(), t.raw_data(), bytes.size());
    if (e.dtype() == v1::INT32) {
      auto h = hash::HashTensorBytes(hash::DtypeCode::kInt32, t.shape(),
                                     bytes.data(), bytes.size());
      EXPECT_THAT(h, IsOk());
      EXPECT_EQ(h->hi, fp.hash_hi());
      EXPECT_EQ(h->lo, fp.hash_lo());
    } else {
      auto h = hash::HashTensorBytes(hash::DtypeCode::kFloat32, t.shape(),
                                     bytes.data(), bytes.size());
      EXPECT_THAT(h, IsOk());
      EXPECT_EQ(h->hi, fp.hash_hi()) << model::DescribeEntry(e);
      EXPECT_EQ(h->lo, fp.hash_lo());
      const hash::TensorStats s = hash::ComputeStats(
          reinterpret_cast<const float*>(bytes.data()), t.numel());
      EXPECT_EQ(s.sum, fp.stats().sum());
      EXPECT_EQ(s.l2, fp.stats().l2());
      EXPECT_EQ(s.max_abs, fp.stats().max_abs());
      EXPECT_EQ(s.nan_count, fp.stats().nan_count());
    }
    ++checked;
    return absl::OkStatus();
  };
  auto r = RunModel(plan, config, options);
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->captured_steps, (std::vector<int>{0, 3, 4}));
  const int n = r->manifest.entries_size();
  std::vector<std::pair<int, int>> expected;
  for (int s : {0, 3, 4}) {
    for (int i = 0; i < n; ++i) expected.emplace_back(s, i);
  }
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(checked, 3 * n);

  // Step digests combine the step's fingerprints in order; the run digest
  // combines the manifest digest and the step digests.
  ASSERT_EQ(r->fingerprints.size(), 3u);
  std::vector<hash::Fingerprint> steps;
  for (size_t s = 0; s < 3; ++s) {
    std::vector<hash::Fingerprint> fps;
    for (const auto& f : r->fingerprints[s]) fps.push_back(HashOf(f));
    EXPECT_EQ(hash::CombineDigests(fps), r->step_digests[s]);
    steps.push_back(r->step_digests[s]);
  }
  auto m = hash::Fingerprint::FromHex(r->manifest.manifest_digest());
  ASSERT_THAT(m, IsOk());
  steps.insert(steps.begin(), *m);
  EXPECT_EQ(hash::CombineDigests(steps), r->run_digest);
  EXPECT_EQ(r->losses.size(), 5u);
}

TEST(ExecutorTest, LossIsTheRecordedLossTensor) {
  const model::ModelPlan plan = testing::MlpPlan(kBatch);
  const v1::JobConfig config = testing::BaseConfig(kBatch, 2);
  std::vector<float> observed;
  ExecutorOptions options;
  options.observer = [&](int, const v1::ManifestEntry& e,
                         const kernels::Tensor& t,
                         const v1::TensorFingerprint&) -> absl::Status {
    if (e.role() == v1::LOSS) observed.push_back(t.data<float>()[0]);
    return absl::OkStatus();
  };
  auto r = RunModel(plan, config, options);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->losses, observed);
  // Three classes, small random weights: the first loss is near log(3).
  EXPECT_NEAR(r->losses[0], 1.0986, 0.3);
}

// Central finite differences of the step-0 loss against the recorded weight
// and bias gradients: checks the wiring of every layer's backward pass.
void CheckGradients(const model::ModelPlan& plan) {
  const v1::JobConfig config = testing::BaseConfig(plan.input_shape[0], 1);
  auto init = [&](int layer, int param, int64_t element, float delta) {
    return [&plan, &config, layer, param, element, delta](
               int l, int p, kernels::Tensor& t) -> absl::Status {
      absl::Status st = InitializeParam(
          config.seed(), l, p, plan.layers[l].params[p], v1::GLOROT_UNIFORM, t);
      if (l == layer && p == param) t.data<float>()[element] += delta;
      return st;
    };
  };
  // The analytic gradients of step 0.
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
  auto ref = RunModel(plan, config, base);
  ASSERT_THAT(ref, IsOk());
  const float eps = 1e-3f;
  int checked = 0;
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    for (size_t p = 0; p < plan.layers[l].params.size(); ++p) {
      const std::vector<float>& g =
          grads[{plan.layers[l].name, static_cast<int>(p)}];
      ASSERT_FALSE(g.empty()) << plan.layers[l].name;
      for (int64_t e : {int64_t{0}, static_cast<int64_t>(g.size()) / 2,
                        static_cast<int64_t>(g.size()) - 1}) {
        double loss[2];
        for (int side = 0; side < 2; ++side) {
          ExecutorOptions o;
          o.param_init = init(static_cast<int>(l), static_cast<int>(p), e,
                              side == 0 ? eps : -eps);
          auto r = RunModel(plan, config, o);
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
  EXPECT_GT(checked, 0);
}

TEST(ExecutorTest, GradientsMatchFiniteDifferences) {
  CheckGradients(testing::MlpPlan(kBatch));
  CheckGradients(testing::ConvResPlan(kBatch));
}

// The transformer layers' backward wiring: MATMUL with both transposes and
// a scale, a causal SOFTMAX, MATMUL of a layer with itself (both gradient
// slots feed one producer), a RESHAPE with -1 and a TRANSPOSE whose
// permutation is not its own inverse (the gradient must use the inverse).
TEST(ExecutorTest, TransformerLayersGradientsMatchFiniteDifferences) {
  v1::Model model;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        name: "attention"
        input_shape: [ 3, 4 ]
        num_classes: 3
        layers {
          name: "fc0"
          op: DENSE
          dense { units: 4 use_bias: true last_axis: true }
        }
        layers {
          name: "fc1"
          op: DENSE
          dense { units: 4 use_bias: true last_axis: true }
        }
        layers {
          name: "scores"
          op: MATMUL
          inputs: [ "fc0", "fc1" ]
          matmul { transpose_b: true scale: 0.5 }
        }
        layers {
          name: "probs"
          op: SOFTMAX
          softmax { causal: true }
        }
        layers {
          name: "ctx"
          op: MATMUL
          inputs: [ "probs", "fc1" ]
        }
        layers {
          name: "gram"
          op: MATMUL
          inputs: [ "ctx", "ctx" ]
          matmul { transpose_a: true }
        }
        layers {
          name: "split"
          op: RESHAPE
          reshape { shape: [ 2, -1, 2 ] }
        }
        layers {
          name: "perm"
          op: TRANSPOSE
          transpose { perm: [ 0, 3, 1, 2 ] }
        }
        layers { name: "flat" op: FLATTEN }
        layers {
          name: "out"
          op: DENSE
          dense { units: 3 use_bias: true }
        }
        layers { name: "loss" op: SOFTMAX_XENT }
      )pb",
      &model));
  auto plan =
      model::PlanModel(model, testing::BaseConfig(kBatch, 1), model::Limits());
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->layers[7].output_shape,
            (std::vector<int64_t>{kBatch, 2, 2, 4}));
  CheckGradients(*plan);
}

// The broadcasting graph layers' backward wiring: REDUCE MEAN with
// keepdims and REDUCE SUM without, BINARY SUB / POW / MUL against [N, T, 1]
// operands (their gradients reduced over the broadcast axis), UNARY EXP and
// ERF, a COMPARE (no gradient) feeding WHERE's condition, and WHERE's a and
// b of different shapes.
TEST(ExecutorTest, GraphElementwiseLayersGradientsMatchFiniteDifferences) {
  v1::Model model;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        name: "graph"
        input_shape: [ 3, 4 ]
        num_classes: 3
        layers {
          name: "h"
          op: DENSE
          dense { units: 4 use_bias: true last_axis: true }
        }
        layers {
          name: "g"
          op: DENSE
          inputs: [ "h" ]
          dense { units: 1 use_bias: true last_axis: true }
        }
        layers {
          name: "mean"
          op: REDUCE
          inputs: [ "h" ]
          reduce {
            kind: REDUCE_MEAN
            axes: [ -1 ]
            keepdims: true
          }
        }
        layers {
          name: "cen"
          op: BINARY
          inputs: [ "h", "mean" ]
          binary { kind: BINARY_SUB }
        }
        layers {
          name: "ex"
          op: UNARY
          inputs: [ "cen" ]
          unary { kind: UNARY_EXP }
        }
        layers {
          name: "pw"
          op: BINARY
          inputs: [ "ex", "g" ]
          binary { kind: BINARY_POW }
        }
        layers {
          name: "prod"
          op: BINARY
          inputs: [ "pw", "cen" ]
          binary { kind: BINARY_MUL }
        }
        layers {
          name: "cmp"
          op: COMPARE
          inputs: [ "cen", "g" ]
          compare { kind: COMPARE_GREATER }
        }
        layers {
          name: "sel"
          op: WHERE
          inputs: [ "cmp", "prod", "g" ]
        }
        layers {
          name: "sum"
          op: REDUCE
          reduce {
            kind: REDUCE_SUM
            axes: [ 1 ]
          }
        }
        layers {
          name: "erf"
          op: UNARY
          unary { kind: UNARY_ERF }
        }
        layers {
          name: "out"
          op: DENSE
          dense { units: 3 use_bias: true }
        }
        layers { name: "loss" op: SOFTMAX_XENT }
      )pb",
      &model));
  auto plan =
      model::PlanModel(model, testing::BaseConfig(kBatch, 1), model::Limits());
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->layers[2].output_shape, (std::vector<int64_t>{kBatch, 3, 1}));
  EXPECT_EQ(plan->layers[8].output_shape, (std::vector<int64_t>{kBatch, 3, 4}));
  EXPECT_EQ(plan->layers[9].output_shape, (std::vector<int64_t>{kBatch, 4}));
  EXPECT_TRUE(plan->layers[9].batched);
  // No gradient into COMPARE's inputs or WHERE's condition: the manifest
  // lists WHERE's input1 and input2 gradients only, and none for COMPARE.
  auto tensors = model::StepTensors(*plan, testing::BaseConfig(kBatch, 1));
  ASSERT_THAT(tensors, IsOk());
  std::vector<std::string> slots;
  for (const v1::ManifestEntry& e : *tensors) {
    if (e.role() != v1::GRAD_ACTIVATION) continue;
    if (e.layer() == "cmp" || e.layer() == "sel") {
      slots.push_back(e.layer() + ":" + e.slot());
    }
  }
  EXPECT_EQ(slots, (std::vector<std::string>{"sel:input1", "sel:input2"}));
  CheckGradients(*plan);
}

TEST(ExecutorTest, TrainingLearnsTheTeacherTask) {
  const model::ModelPlan plan = testing::MlpPlan(16);
  v1::JobConfig config = testing::BaseConfig(16, 60);
  config.mutable_optimizer()->set_learning_rate(0.5f);
  ExecutorOptions options;
  options.keep_fingerprints = false;
  auto r = RunModel(plan, config, options);
  ASSERT_THAT(r, IsOk());
  auto mean = [&](int from, int to) {
    double s = 0;
    for (int i = from; i < to; ++i) s += r->losses[i];
    return s / (to - from);
  };
  const double first = mean(0, 5);
  const double last = mean(55, 60);
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
}

TEST(ExecutorTest, FingerprintingOffStillTrainsTheSameWay) {
  const model::ModelPlan plan = testing::ConvResPlan(kBatch);
  const v1::JobConfig config = testing::BaseConfig(kBatch, 2);
  ExecutorOptions off;
  off.fingerprint = false;
  auto a = RunModel(plan, config, off);
  auto b = RunModel(plan, config);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(a->losses, b->losses);
  EXPECT_TRUE(a->step_digests.empty());
}

TEST(ExecutorTest, StepsRunInOrderOnly) {
  const model::ModelPlan plan = testing::MlpPlan(kBatch);
  const v1::JobConfig config = testing::BaseConfig(kBatch, 2);
  auto exec = Executor::Create(plan, config, &testing::CpuRegistry(),
                               testing::TeacherBatches(plan, 7), {});
  ASSERT_THAT(exec, IsOk());
  EXPECT_THAT((*exec)->RunStep(1),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("next step is 0")));
  EXPECT_THAT((*exec)->Finish(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  auto s0 = (*exec)->RunStep(0);
  ASSERT_THAT(s0, IsOk());
  EXPECT_TRUE(s0->captured);
  EXPECT_EQ(s0->step, 0);
  ASSERT_THAT((*exec)->RunStep(1), IsOk());
  EXPECT_THAT((*exec)->RunStep(2),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  auto r = (*exec)->Finish();
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->step_digests[0], s0->digest);
}

TEST(ExecutorTest, BatchSourceAndObserverErrorsStopTheRun) {
  const model::ModelPlan plan = testing::MlpPlan(kBatch);
  const v1::JobConfig config = testing::BaseConfig(kBatch, 3);
  BatchSource failing = testing::TeacherBatches(plan, 7);
  BatchFn inner = failing.fill;
  failing.fill = [inner](int step, kernels::Tensor& x,
                         kernels::Tensor& y) -> absl::Status {
    if (step == 1) return absl::DataLossError("dataset: read failed");
    return inner(step, x, y);
  };
  EXPECT_THAT(RunJob(plan, config, &testing::CpuRegistry(), failing, {}),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("read failed")));

  ExecutorOptions options;
  options.observer = [](int step, const v1::ManifestEntry& e,
                        const kernels::Tensor&,
                        const v1::TensorFingerprint&) -> absl::Status {
    if (step == 0 && e.index() == 3) return absl::CancelledError("stop");
    return absl::OkStatus();
  };
  EXPECT_THAT(RunModel(plan, config, options),
              StatusIs(absl::StatusCode::kCancelled));
}

TEST(ExecutorTest, BadLabelsAreReportedWithTheLayer) {
  const model::ModelPlan plan = testing::MlpPlan(kBatch);
  const v1::JobConfig config = testing::BaseConfig(kBatch, 1);
  BatchSource src;
  src.fill = [](int, kernels::Tensor&, kernels::Tensor& y) -> absl::Status {
    y.data<int32_t>()[2] = 9;  // 3 classes
    return absl::OkStatus();
  };
  EXPECT_THAT(RunJob(plan, config, &testing::CpuRegistry(), src, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("layer \"loss\""),
                             HasSubstr("softmax_xent.forward"))));
}

// The CPU's CANONICAL kernels registered a second time under backend "cuda",
// standing in for a worker with a usable GPU.
const kernels::Registry& CpuAndStandInCudaRegistry() {
  static const kernels::Registry* registry = [] {
    auto* r = new kernels::Registry();
    (void)kernels::RegisterCpuCanonicalKernels(r);
    for (const kernels::KernelKey& k : testing::CpuRegistry().Keys()) {
      kernels::KernelKey cuda = k;
      cuda.backend = kernels::kCudaBackendName;
      (void)r->Register(cuda, testing::CpuRegistry().Lookup(k).value());
    }
    return r;
  }();
  return *registry;
}

TEST(ExecutorTest, BackendFollowsTheConfigAndTheWorker) {
  v1::JobConfig config = testing::BaseConfig(kBatch, 1);
  const kernels::Registry& cpu_only = testing::CpuRegistry();
  const kernels::Registry& with_cuda = CpuAndStandInCudaRegistry();
  for (v1::Backend b : {v1::BACKEND_UNSPECIFIED, v1::ANY, v1::CPU}) {
    config.set_backend(b);
    EXPECT_THAT(BackendFor(cpu_only, config), IsOkAndHolds("cpu"));
  }
  config.set_backend(v1::CPU);
  EXPECT_THAT(BackendFor(with_cuda, config), IsOkAndHolds("cpu"));
  for (v1::Backend b : {v1::BACKEND_UNSPECIFIED, v1::ANY, v1::CUDA}) {
    config.set_backend(b);
    EXPECT_THAT(BackendFor(with_cuda, config), IsOkAndHolds("cuda"));
  }
  config.set_backend(v1::CUDA);
  EXPECT_THAT(BackendFor(cpu_only, config),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(ExecutorTest, CudaJobsRunTheCudaKernels) {
  const model::ModelPlan plan = testing::MlpPlan(kBatch);
  v1::JobConfig cpu = testing::BaseConfig(kBatch, 2);
  cpu.set_backend(v1::CPU);
  v1::JobConfig cuda = cpu;
  cuda.set_backend(v1::CUDA);
  const kernels::Registry& registry = CpuAndStandInCudaRegistry();
  auto a = RunJob(plan, cpu, &registry,
                  testing::TeacherBatches(plan, cpu.seed()), {});
  auto b = RunJob(plan, cuda, &registry,
                  testing::TeacherBatches(plan, cuda.seed()), {});
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  ASSERT_FALSE(b->kernels.empty());
  for (const KernelChoice& k : b->kernels) {
    EXPECT_EQ(k.ran.backend, "cuda") << k.op;
  }
  for (const KernelChoice& k : a->kernels) {
    EXPECT_EQ(k.ran.backend, "cpu") << k.op;
  }
  // The same CANONICAL arithmetic on both: the same run digest.
  EXPECT_EQ(a->run_digest, b->run_digest);
}

TEST(ExecutorTest, KernelSelectionErrors) {
  const model::ModelPlan plan = testing::MlpPlan(kBatch);
  v1::JobConfig cuda = testing::BaseConfig(kBatch, 1);
  cuda.set_backend(v1::CUDA);
  EXPECT_THAT(RunModel(plan, cuda),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("config.backend: CUDA needs a usable CUDA "
                                 "device, and this worker has none")));

  v1::JobConfig unknown_alg = testing::BaseConfig(kBatch, 1);
  (*unknown_alg.mutable_op_algorithms())["bias_add.grad"] = "atomic";
  EXPECT_THAT(
      RunModel(plan, unknown_alg),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("config.op_algorithms[\"bias_add.grad\"]"),
                     HasSubstr("\"atomic\""),
                     HasSubstr("available: CANONICAL/canonical"))));

  v1::JobConfig unknown_op = testing::BaseConfig(kBatch, 1);
  (*unknown_op.mutable_op_algorithms())["bias_add.backward"] = "atomic";
  EXPECT_THAT(RunModel(plan, unknown_op),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown op \"bias_add.backward\"")));

  v1::JobConfig bad_lr = testing::BaseConfig(kBatch, 1);
  bad_lr.mutable_optimizer()->set_learning_rate(0.0f);
  EXPECT_THAT(RunModel(plan, bad_lr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("config.optimizer.learning_rate")));

  v1::JobConfig bad_batch = testing::BaseConfig(kBatch + 1, 1);
  EXPECT_THAT(RunModel(plan, bad_batch),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("config.batch_size")));

  ExecutorOptions missing;
  missing.fault = *ParseFaultSpec("step=0,layer=nope,role=ACTIVATION,bit=1");
  EXPECT_THAT(RunModel(plan, testing::BaseConfig(kBatch, 1), missing),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no layer \"nope\"")));
}

// A stand-in DETERMINISTIC kernel: the canonical relu under another key.
absl::Status FakeDeterministicRelu(absl::Span<const kernels::Tensor> in,
                                   absl::Span<kernels::Tensor> out,
                                   const kernels::OpAttrs& attrs);
kernels::KernelFn g_canonical_relu = nullptr;
absl::Status FakeDeterministicRelu(absl::Span<const kernels::Tensor> in,
                                   absl::Span<kernels::Tensor> out,
                                   const kernels::OpAttrs& attrs) {
  return g_canonical_relu(in, out, attrs);
}

TEST(ExecutorTest, ModeKernelsAndOverridesAreChosenAndRecorded) {
  kernels::Registry registry;
  ASSERT_THAT(kernels::RegisterCpuCanonicalKernels(&registry), IsOk());
  g_canonical_relu =
      *registry.Lookup({kernels::op::kReluForward, kernels::Mode::kCanonical,
                        "canonical", "cpu"});
  ASSERT_THAT(
      registry.Register({kernels::op::kReluForward,
                         kernels::Mode::kDeterministic, "blocked", "cpu"},
                        &FakeDeterministicRelu),
      IsOk());
  v1::JobConfig config = testing::BaseConfig(kBatch, 1);
  config.set_determinism(v1::DETERMINISTIC);
  auto relu = ChooseKernel(registry, config, kernels::op::kReluForward);
  ASSERT_THAT(relu, IsOk());
  EXPECT_FALSE(relu->fallback);
  EXPECT_EQ(relu->ran.algorithm, "blocked");
  auto dense = ChooseKernel(registry, config, kernels::op::kDenseForward);
  ASSERT_THAT(dense, IsOk());
  EXPECT_TRUE(dense->fallback);

  // An explicit "canonical" override in another mode is honoured.
  (*config.mutable_op_algorithms())[kernels::op::kReluForward] = "canonical";
  relu = ChooseKernel(registry, config, kernels::op::kReluForward);
  ASSERT_THAT(relu, IsOk());
  EXPECT_EQ(relu->ran.mode, kernels::Mode::kCanonical);
  EXPECT_EQ(relu->requested_algorithm, "canonical");
  EXPECT_TRUE(relu->fallback);

  // The run records which kernel ran per op.
  config.clear_op_algorithms();
  const model::ModelPlan plan = testing::MlpPlan(kBatch);
  auto r =
      RunJob(plan, config, &registry, testing::TeacherBatches(plan, 7), {});
  ASSERT_THAT(r, IsOk());
  bool found = false;
  for (const KernelChoice& k : r->kernels) {
    if (k.op == kernels::op::kReluForward) {
      found = true;
      EXPECT_EQ(k.ran.DebugString(), "relu.forward/DETERMINISTIC/blocked/cpu");
    }
  }
  EXPECT_TRUE(found);
}

// CANONICAL, DETERMINISTIC and DEFAULT CPU kernels, as a worker registers
// them.
const kernels::Registry& AllModesCpuRegistry() {
  static const kernels::Registry* registry = [] {
    auto* r = new kernels::Registry();
    (void)kernels::RegisterCpuCanonicalKernels(r);
    (void)kernels::RegisterCpuDeterministicAndDefaultKernels(r);
    return r;
  }();
  return *registry;
}

std::map<std::string, std::string> VariantsOf(const RunResult& r) {
  std::map<std::string, std::string> out;
  for (const KernelChoice& k : r.kernels) out[k.op] = k.variant;
  return out;
}

TEST(KernelVariantTest, DefaultRunReportsTheAtomicKernels) {
  const std::string isa(kernels::CpuIsaName(kernels::ActiveCpuIsa()));
  v1::JobConfig config = testing::BaseConfig(kBatch, 1);
  config.set_determinism(v1::DEFAULT);
  const model::ModelPlan plan = testing::MlpPlan(kBatch);
  auto r = RunJob(plan, config, &AllModesCpuRegistry(),
                  testing::TeacherBatches(plan, 7), {});
  ASSERT_THAT(r, IsOk());
  const std::map<std::string, std::string> v = VariantsOf(*r);
  const std::string cpu = "cpu/" + isa;
  EXPECT_EQ(v.at(kernels::op::kBiasAddGrad), cpu + "/default/atomic");
  EXPECT_EQ(v.at(kernels::op::kDenseForward), cpu + "/default/split_k_atomic");
  EXPECT_EQ(v.at(kernels::op::kDenseGradInput), cpu + "/default/deterministic");
  EXPECT_EQ(v.at(kernels::op::kReluForward), cpu + "/default/canonical");
  // Every op that ran has a variant.
  for (const KernelChoice& k : r->kernels) EXPECT_FALSE(k.variant.empty());

  // DETERMINISTIC: the single-chain GEMM, and the CANONICAL kernel where
  // that is the deterministic one.
  config.set_determinism(v1::DETERMINISTIC);
  r = RunJob(plan, config, &AllModesCpuRegistry(),
             testing::TeacherBatches(plan, 7), {});
  ASSERT_THAT(r, IsOk());
  const std::map<std::string, std::string> d = VariantsOf(*r);
  EXPECT_EQ(d.at(kernels::op::kDenseForward), cpu + "/deterministic");
  EXPECT_EQ(d.at(kernels::op::kBiasAddGrad), cpu + "/deterministic/canonical");

  // A named override is reported as named.
  config.set_determinism(v1::DEFAULT);
  (*config.mutable_op_algorithms())[kernels::op::kBiasAddGrad] = "atomic";
  auto choice =
      ChooseKernel(AllModesCpuRegistry(), config, kernels::op::kBiasAddGrad);
  ASSERT_THAT(choice, IsOk());
  EXPECT_EQ(choice->variant, cpu + "/default/atomic");
}

TEST(KernelVariantTest, CanonicalRunReportsCanonicalForEveryManifestOp) {
  for (const Case& c : Models()) {
    SCOPED_TRACE(c.name);
    auto r =
        RunJob(c.plan, testing::BaseConfig(kBatch, 1), &AllModesCpuRegistry(),
               testing::TeacherBatches(c.plan, 7), {});
    ASSERT_THAT(r, IsOk());
    const std::map<std::string, std::string> v = VariantsOf(*r);
    const std::vector<std::string> ops = AllModesCpuRegistry().Ops();
    const std::string expected = absl::StrCat(
        "cpu/", kernels::CpuIsaName(kernels::ActiveCpuIsa()), "/canonical");
    int kernel_ops = 0;
    for (const v1::ManifestEntry& e : r->manifest.entries()) {
      if (!std::binary_search(ops.begin(), ops.end(), e.op())) continue;
      ++kernel_ops;
      ASSERT_EQ(v.count(e.op()), 1u) << e.op();
      EXPECT_EQ(v.at(e.op()), expected) << e.op();
    }
    EXPECT_GT(kernel_ops, 0);
    for (const auto& [op, variant] : v) EXPECT_EQ(variant, expected) << op;
  }
}

TEST(KernelVariantTest, NamesTheCpuPathAndOtherBackends) {
  const kernels::Registry& cpu = AllModesCpuRegistry();
  const kernels::KernelKey canonical{kernels::op::kDenseForward,
                                     kernels::Mode::kCanonical, "canonical",
                                     "cpu"};
  EXPECT_EQ(KernelVariant(cpu, canonical, "scalar"), "cpu/scalar/canonical");
  EXPECT_EQ(KernelVariant(cpu, canonical, "avx512"), "cpu/avx512/canonical");
  EXPECT_EQ(KernelVariant(cpu,
                          {kernels::op::kDenseForward,
                           kernels::Mode::kCanonical, "scalar", "cpu"},
                          "avx2"),
            "cpu/avx2/canonical/scalar");
  EXPECT_EQ(KernelVariant(cpu,
                          {kernels::op::kConv2dGradWeight,
                           kernels::Mode::kDefault, "default", "cpu"},
                          "avx2"),
            "cpu/avx2/default/atomic");
  // The chosen variant follows the ISA the CPU kernels dispatch to.
  for (const kernels::CpuIsa isa : kernels::SupportedCpuIsas()) {
    kernels::SetCpuIsaForTesting(isa);
    auto choice = ChooseKernel(cpu, testing::BaseConfig(kBatch, 1),
                               kernels::op::kDenseForward);
    ASSERT_THAT(choice, IsOk());
    EXPECT_EQ(choice->variant,
              absl::StrCat("cpu/", kernels::CpuIsaName(isa), "/canonical"));
  }
  kernels::SetCpuIsaForTesting(std::nullopt);
  // Other backends carry no CPU path.
  const kernels::Registry& cuda = CpuAndStandInCudaRegistry();
  EXPECT_EQ(KernelVariant(cuda,
                          {kernels::op::kReluForward, kernels::Mode::kCanonical,
                           "canonical", "cuda"},
                          "avx2"),
            "cuda/canonical");
}

// Golden run digest. CANONICAL results are defined bit for bit by
// docs/canonical-arithmetic.md and worker/exec/README.md, so this digest is
// the same on every machine. It changes only with a change of the canonical
// arithmetic (bump kCanonicalArithmeticVersion and update it here in the
// same change), of the execution order, of the initialisation, of the
// fingerprint format, or of this test's teacher data.
TEST(ExecutorTest, GoldenRunDigest) {
  const model::ModelPlan plan = testing::MlpPlan(4);
  auto r = RunModel(plan, testing::BaseConfig(4, 3));
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->manifest.manifest_digest(), "7e3d622c64b2d556621cda8796bf7289");
  EXPECT_EQ(r->run_digest.ToHex(), "9ba684026015c0e1e5018f4ead258337");
}

TEST(CompareTest, IncomparableRuns) {
  const v1::JobConfig config = testing::BaseConfig(kBatch, 2);
  auto a = RunModel(testing::MlpPlan(kBatch), config);
  v1::JobConfig three = config;
  three.set_steps(3);
  auto b = RunModel(testing::MlpPlan(kBatch), three);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  const RunComparison c = CompareRuns(*a, *b);
  EXPECT_EQ(c.verdict, RunComparison::Verdict::kIncomparable);
  EXPECT_THAT(c.reason, HasSubstr("manifests differ"));

  auto m = RunModel(testing::ConvResPlan(kBatch), config);
  ASSERT_THAT(m, IsOk());
  const RunComparison d = CompareRuns(*a, *m);
  EXPECT_EQ(d.verdict, RunComparison::Verdict::kIncomparable);
  EXPECT_THAT(d.reason, HasSubstr("first difference at entry 0"));
}

TEST(CompareTest, RelativeDifference) {
  EXPECT_EQ(RelativeDifference(0.0, 0.0), 0.0);
  EXPECT_EQ(RelativeDifference(2.0, 1.0), 0.5);
  EXPECT_EQ(RelativeDifference(-1.0, 1.0), 2.0);
  EXPECT_EQ(RelativeDifference(0.0, 3.0), 1.0);
}

}  // namespace
}  // namespace lockstep::worker
