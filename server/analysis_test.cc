#include "server/analysis.h"

#include <algorithm>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/hash/fingerprint.h"

namespace lockstep::server {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace ::lockstep::v1;  // NOLINT

constexpr int kEntries = 3;
constexpr int kSteps = 3;

TensorManifest MakeManifest(const std::vector<std::string>& ops = {
                                "dense.forward", "bias_add.grad",
                                "sgd.update"}) {
  TensorManifest m;
  m.set_steps(kSteps);
  m.set_manifest_digest("0123456789abcdef0123456789abcdef");
  const TensorRole roles[] = {ACTIVATION, GRAD_BIAS, WEIGHT};
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    ManifestEntry* e = m.add_entries();
    e->set_index(i);
    e->set_layer("fc1");
    e->set_op(ops[i]);
    e->set_role(roles[i % 3]);
    e->set_phase(i == 0 ? PHASE_FORWARD
                        : (i == 1 ? PHASE_BACKWARD : PHASE_OPTIMIZER));
  }
  return m;
}

// A succeeded run whose fingerprint (step, index) is step*10 + index, with
// every tensor at or after (flip_step, flip_index) (step-major) changed.
RunData MakeRun(const std::string& id, int index, const std::string& worker,
                const std::string& cls, int flip_step = -1,
                int flip_index = -1) {
  RunData r;
  r.run.set_run_id(id);
  r.run.set_index(index);
  r.run.set_worker_id(worker);
  r.run.set_device_id("dev-" + worker);
  r.run.set_hardware_class_digest(cls);
  r.run.set_state(RUN_SUCCEEDED);
  bool flipped = false;
  for (int s = 0; s < kSteps; ++s) {
    StepRecord step;
    step.step = s;
    bool step_flipped = false;
    for (int i = 0; i < kEntries; ++i) {
      TensorFingerprint fp;
      fp.set_index(i);
      fp.set_hash_hi(s * 10 + i);
      fp.set_hash_lo(1);
      fp.mutable_stats()->set_sum(1.0);
      fp.mutable_stats()->set_l2(2.0);
      fp.mutable_stats()->set_max_abs(1.0f);
      if (flip_step >= 0 &&
          (s > flip_step || (s == flip_step && i >= flip_index))) {
        flipped = step_flipped = true;
        fp.set_hash_lo(2);
        fp.mutable_stats()->set_sum(1.5);
      }
      step.fingerprints.push_back(fp);
    }
    step.step_digest =
        step_flipped ? "x" + id + std::to_string(s) : "d" + std::to_string(s);
    r.steps.push_back(std::move(step));
  }
  r.run.set_run_digest(flipped ? "digest-flip-" + std::to_string(flip_step) +
                                     "-" + std::to_string(flip_index)
                               : "digest-same");
  return r;
}

Job MakeJob(DeterminismMode mode, JobState state = JOB_SUCCEEDED) {
  Job job;
  job.set_job_id("job-1");
  job.set_state(state);
  job.set_model_digest("md");
  job.set_config_digest("cd");
  job.mutable_spec()->mutable_model()->set_name("mlp");
  job.mutable_spec()->mutable_config()->set_determinism(mode);
  return job;
}

absl::StatusOr<JobVerdict> Judge(
    const Job& job, const std::vector<RunData>& runs,
    const TensorManifest& manifest = MakeManifest()) {
  return JudgeJob(job, manifest, StreamRuns(runs), {{"c1", "class one"}},
                  /*canonical_version=*/1, /*now_unix_ms=*/99);
}

// The report claims exactly what the certificates say.
void ExpectReportMatchesCertificates(const JobVerdict& v) {
  Level highest = LEVEL_UNSPECIFIED;
  std::vector<std::string> ids;
  for (const Certificate& c : v.certificates) {
    highest = std::max(highest, c.level());
    ids.push_back(c.certificate_id());
  }
  EXPECT_EQ(v.report.level(), highest);
  EXPECT_EQ(std::vector<std::string>(v.report.certificate_ids().begin(),
                                     v.report.certificate_ids().end()),
            ids);
}

std::set<Level> LevelsOf(const JobVerdict& v) {
  std::set<Level> out;
  for (const Certificate& c : v.certificates) out.insert(c.level());
  return out;
}

// --- Comparison ------------------------------------------------------------

TEST(Analysis, MagnitudeIsRelative) {
  TensorStats a, b;
  a.set_sum(1.0);
  b.set_sum(1.5);
  a.set_l2(0.0);
  b.set_l2(0.0);
  a.set_max_abs(-4.0f);
  b.set_max_abs(2.0f);
  Magnitude m = MagnitudeOf(a, b);
  EXPECT_DOUBLE_EQ(m.sum_rel(), 0.5 / 1.5);
  EXPECT_EQ(m.l2_rel(), 0.0);
  EXPECT_DOUBLE_EQ(m.max_abs_rel(), 6.0 / 4.0);
}

TEST(Analysis, FirstDivergenceAndDownstreamCount) {
  const TensorManifest manifest = MakeManifest();
  RunData a = MakeRun("r0", 0, "w1", "c1");
  RunData b = MakeRun("r1", 1, "w1", "c1", /*flip_step=*/1, /*flip_index=*/1);
  auto d = CompareRunData(manifest, MakeJob(CANONICAL).spec().config(), a, b);
  ASSERT_THAT(d, IsOk());
  ASSERT_TRUE(d->has_value());
  EXPECT_EQ((*d)->run_a(), "r0");
  EXPECT_EQ((*d)->run_b(), "r1");
  EXPECT_EQ((*d)->step(), 1);
  EXPECT_EQ((*d)->tensor().index(), 1);
  EXPECT_EQ((*d)->tensor().op(), "bias_add.grad");
  // Later tensors: step 1 index 2, and all 3 of step 2.
  EXPECT_EQ((*d)->downstream_differing(), 4);
  EXPECT_EQ((*d)->tensors_compared(), kSteps * kEntries);
  EXPECT_DOUBLE_EQ((*d)->magnitude().sum_rel(), 0.5 / 1.5);
  EXPECT_EQ((*d)->cause().id(), "LS-CANONICAL-MISMATCH");

  auto same = CompareRunData(manifest, JobConfig(), a, a);
  ASSERT_THAT(same, IsOk());
  EXPECT_FALSE(same->has_value());
}

// A layer imported from ONNX is named with its node in the summary.
TEST(Analysis, DivergenceSummaryNamesTheLayerOrigin) {
  Job job = MakeJob(CANONICAL);
  Layer* layer = job.mutable_spec()->mutable_model()->add_layers();
  layer->set_name("fc1");
  layer->set_origin("/blocks.0/attn/MatMul (MatMul)");
  EXPECT_EQ(LayerLabel(job.spec().model(), "fc1"),
            "layer \"fc1\" (from /blocks.0/attn/MatMul (MatMul))");
  EXPECT_EQ(LayerLabel(job.spec().model(), "other"), "layer \"other\"");
  auto v = Judge(job, {MakeRun("r0", 0, "w1", "c1"),
                       MakeRun("r1", 1, "w1", "c1", /*flip_step=*/1,
                               /*flip_index=*/1)});
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(v->report.verdict(), NONDETERMINISTIC);
  EXPECT_THAT(v->report.summary(),
              HasSubstr("first at step 1, layer \"fc1\" (from "
                        "/blocks.0/attn/MatMul (MatMul)), PHASE_BACKWARD"));
}

TEST(Analysis, MisalignedRunsAreAnError) {
  const TensorManifest manifest = MakeManifest();
  RunData a = MakeRun("r0", 0, "w1", "c1");
  RunData b = MakeRun("r1", 1, "w1", "c1");
  b.steps.pop_back();
  EXPECT_THAT(CompareRunData(manifest, JobConfig(), a, b),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("run r1 lacks step 2")));
  b = MakeRun("r1", 1, "w1", "c1");
  b.steps[0].fingerprints.pop_back();
  b.steps[0].step_digest = "other";
  EXPECT_THAT(
      CompareRunData(manifest, JobConfig(), a, b),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not aligned")));
  b = MakeRun("r1", 1, "w1", "c1");
  b.steps[1].step = 7;
  EXPECT_THAT(CompareRunData(manifest, JobConfig(), a, b),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("different steps (1 vs 7)")));
}

// --- Verification of stored steps -------------------------------------------

// A run whose step digests and run digest are the real Merkle digests.
RunData MakeVerifiableRun(const TensorManifest& manifest,
                          std::string* run_digest) {
  RunData r = MakeRun("r0", 0, "w1", "c1");
  std::vector<hash::Fingerprint> parts = {
      *hash::Fingerprint::FromHex(manifest.manifest_digest())};
  for (StepRecord& s : r.steps) {
    std::vector<hash::Fingerprint> fps;
    for (const TensorFingerprint& f : s.fingerprints) {
      fps.push_back(hash::Fingerprint{f.hash_hi(), f.hash_lo()});
    }
    const hash::Fingerprint d = hash::CombineDigests(fps);
    s.step_digest = d.ToHex();
    parts.push_back(d);
  }
  *run_digest = hash::CombineDigests(parts).ToHex();
  return r;
}

TEST(Analysis, VerifyRunStepsAcceptsMatchingDigests) {
  const TensorManifest manifest = MakeManifest();
  std::string digest;
  RunData r = MakeVerifiableRun(manifest, &digest);
  VectorStepReader reader(&r.steps);
  EXPECT_THAT(VerifyRunSteps(manifest, r.run, digest, &reader), IsOk());
}

TEST(Analysis, VerifyRunStepsRefusesTamperedOrMissingSteps) {
  const TensorManifest manifest = MakeManifest();
  std::string digest;
  const RunData good = MakeVerifiableRun(manifest, &digest);
  {
    RunData r = good;
    r.steps[1].fingerprints[2].set_hash_lo(77);
    VectorStepReader reader(&r.steps);
    EXPECT_THAT(VerifyRunSteps(manifest, r.run, digest, &reader),
                StatusIs(absl::StatusCode::kDataLoss,
                         HasSubstr("run r0 step 1: the worker's step digest")));
  }
  {
    RunData r = good;
    r.steps.pop_back();
    VectorStepReader reader(&r.steps);
    EXPECT_THAT(VerifyRunSteps(manifest, r.run, digest, &reader),
                StatusIs(absl::StatusCode::kDataLoss,
                         HasSubstr("2 of 3 captured steps")));
  }
  {
    RunData r = good;
    r.steps[2].step = 5;
    VectorStepReader reader(&r.steps);
    EXPECT_THAT(VerifyRunSteps(manifest, r.run, digest, &reader),
                StatusIs(absl::StatusCode::kDataLoss,
                         HasSubstr("stored step 5 where step 2")));
  }
  {
    RunData r = good;
    VectorStepReader reader(&r.steps);
    EXPECT_THAT(VerifyRunSteps(manifest, r.run, std::string(32, 'f'), &reader),
                StatusIs(absl::StatusCode::kDataLoss,
                         HasSubstr("reported run digest")));
  }
  {
    TensorManifest sparse = manifest;
    sparse.add_captured_steps(0);
    sparse.add_captured_steps(2);
    sparse.add_captured_steps(4);
    RunData r = good;
    VectorStepReader reader(&r.steps);
    EXPECT_THAT(VerifyRunSteps(sparse, r.run, digest, &reader),
                StatusIs(absl::StatusCode::kDataLoss,
                         HasSubstr("stored step 1 where step 2")));
  }
}

// --- Finding 1: the verdict streams ----------------------------------------

// Steps generated on demand (nothing stored), with a shared read count per
// run: a reader fails the test when asked for a step while another run is
// still a step behind, i.e. when runs are not read side by side.
class LockstepCheckingReader final : public StepReader {
 public:
  LockstepCheckingReader(std::vector<int>* reads, int me, int steps,
                         int entries, int flip_step)
      : reads_(reads),
        me_(me),
        steps_(steps),
        entries_(entries),
        flip_step_(flip_step) {}

  absl::StatusOr<std::optional<StepRecord>> Next() override {
    const int mine = (*reads_)[me_];
    const int behind = *std::min_element(reads_->begin(), reads_->end());
    if (mine > behind) {
      ADD_FAILURE() << "run " << me_ << " read step " << mine
                    << " while another run had read only " << behind;
      ++violations;
    }
    ++(*reads_)[me_];
    if (mine >= steps_) return std::optional<StepRecord>();
    StepRecord s;
    s.step = mine;
    s.fingerprints.resize(entries_);
    for (int i = 0; i < entries_; ++i) {
      TensorFingerprint& f = s.fingerprints[i];
      f.set_index(i);
      f.set_hash_hi(mine);
      f.set_hash_lo(i + (flip_step_ >= 0 && mine >= flip_step_ ? 1000 : 0));
      f.mutable_stats()->set_sum(i);
    }
    // Empty step digests: every tensor is compared.
    return std::optional<StepRecord>(std::move(s));
  }

  static inline int violations = 0;

 private:
  std::vector<int>* reads_;
  const int me_;
  const int steps_;
  const int entries_;
  const int flip_step_;
};

int64_t PeakRssKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      int64_t kb = 0;
      std::string digits;
      for (char c : line) {
        if (c >= '0' && c <= '9') digits += c;
      }
      if (absl::SimpleAtoi(digits, &kb)) return kb;
    }
  }
  return -1;
}

TEST(Verdict, StreamsEveryRunSideBySideWithBoundedMemory) {
  // 4 runs x 4,000 steps x 128 tensors = 2,048,000 fingerprints: more than
  // 200 MB as TensorFingerprint messages if a verdict held them all.
  constexpr int kRuns = 4, kLongSteps = 4000, kWide = 128;
  TensorManifest manifest;
  manifest.set_steps(kLongSteps);
  for (int i = 0; i < kWide; ++i) {
    ManifestEntry* e = manifest.add_entries();
    e->set_index(i);
    e->set_op("dense.forward");
    e->set_role(ACTIVATION);
  }
  std::vector<int> reads(kRuns, 0);
  std::vector<RunSteps> runs;
  for (int k = 0; k < kRuns; ++k) {
    RunSteps r;
    r.run.set_run_id(absl::StrCat("r", k));
    r.run.set_index(k);
    r.run.set_worker_id("w1");
    r.run.set_device_id("dev-1");
    r.run.set_hardware_class_digest("c1");
    r.run.set_state(RUN_SUCCEEDED);
    r.run.set_run_digest(k == 3 ? "late" : "same");
    r.steps = std::make_unique<LockstepCheckingReader>(
        &reads, k, kLongSteps, kWide, k == 3 ? kLongSteps - 2 : -1);
    runs.push_back(std::move(r));
  }
  LockstepCheckingReader::violations = 0;
  const int64_t before = PeakRssKb();
  auto v = JudgeJob(MakeJob(CANONICAL), manifest, std::move(runs), {}, 1, 1);
  const int64_t after = PeakRssKb();
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(LockstepCheckingReader::violations, 0);
  for (int n : reads) EXPECT_EQ(n, kLongSteps + 1);  // every step, then end
  EXPECT_EQ(v->report.verdict(), NONDETERMINISTIC);
  EXPECT_EQ(v->report.divergence().run_b(), "r3");
  EXPECT_EQ(v->report.divergence().step(), kLongSteps - 2);
  EXPECT_EQ(v->report.divergence().downstream_differing(), 2 * kWide - 1);
  EXPECT_EQ(v->report.divergence().tensors_compared(),
            int64_t{kLongSteps} * kWide);
  ASSERT_GT(before, 0);
  EXPECT_LT(after - before, 32 * 1024)
      << "peak RSS grew by " << after - before << " kB over the verdict";
}

TEST(Verdict, ReportsTheEarliestDivergenceOverAllRuns) {
  Job job = MakeJob(DEFAULT);
  std::vector<RunData> runs = {
      MakeRun("r0", 0, "w1", "c1"), MakeRun("r1", 1, "w1", "c1", 2, 0),
      MakeRun("r2", 2, "w1", "c1", 1, 2), MakeRun("r3", 3, "w1", "c1", 1, 1)};
  auto v = Judge(job, runs);
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(v->report.verdict(), NONDETERMINISTIC);
  EXPECT_EQ(v->report.divergence().run_a(), "r0");
  EXPECT_EQ(v->report.divergence().run_b(), "r3");
  EXPECT_EQ(v->report.divergence().step(), 1);
  EXPECT_EQ(v->report.divergence().tensor().index(), 1);
  EXPECT_THAT(v->report.summary(), HasSubstr("3 of 3 runs differ"));
  EXPECT_TRUE(v->certificates.empty());
  EXPECT_EQ(v->report.level(), LEVEL_UNSPECIFIED);
  EXPECT_EQ(v->report.run_digests_size(), 4);
}

TEST(Verdict, NanFoundWhileStreamingInAnyRunBlocksCrossClass) {
  std::vector<RunData> runs = {MakeRun("r0", 0, "w1", "c1"),
                               MakeRun("r1", 1, "w2", "c2")};
  // Only the last step of the second run holds NaNs.
  runs[1].steps[2].fingerprints[1].mutable_stats()->set_nan_count(3);
  auto v = Judge(MakeJob(CANONICAL), runs);
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(v->report.verdict(), REPRODUCIBLE);
  EXPECT_EQ(LevelsOf(*v).count(CROSS_CLASS), 0u);
}

TEST(Verdict, RefusesAJobThatIsNotFinished) {
  EXPECT_THAT(
      Judge(MakeJob(CANONICAL, JOB_RUNNING), {MakeRun("r0", 0, "w1", "c1")}),
      StatusIs(absl::StatusCode::kFailedPrecondition));
}

// --- Finding 4: failed and cancelled jobs; level = certificates ------------

TEST(Verdict, FailedJobSaysFailedWithItsReasonAndIssuesNothing) {
  Job job = MakeJob(CANONICAL, JOB_FAILED);
  job.set_failure_reason("run 2 failed after 3 attempts: out of memory");
  RunData failed = MakeRun("r2", 2, "w3", "c1");
  failed.run.set_state(RUN_FAILED);
  // Two identical succeeded runs on two devices would earn CROSS_DEVICE.
  auto v = Judge(job, {MakeRun("r0", 0, "w1", "c1"),
                       MakeRun("r1", 1, "w2", "c1"), failed});
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(v->report.verdict(), FAILED);
  EXPECT_THAT(v->report.summary(), HasSubstr("out of memory"));
  EXPECT_TRUE(v->certificates.empty());
  EXPECT_EQ(v->report.level(), LEVEL_UNSPECIFIED);
  EXPECT_EQ(v->report.certificate_ids_size(), 0);
}

TEST(Verdict, CancelledJobIsInconclusive) {
  Job job = MakeJob(CANONICAL, JOB_CANCELLED);
  auto v =
      Judge(job, {MakeRun("r0", 0, "w1", "c1"), MakeRun("r1", 1, "w1", "c1")});
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(v->report.verdict(), INCONCLUSIVE);
  EXPECT_THAT(v->report.summary(), HasSubstr("cancelled"));
  EXPECT_TRUE(v->certificates.empty());
  EXPECT_EQ(v->report.level(), LEVEL_UNSPECIFIED);
}

TEST(Verdict, FailedRunsLeavingOneSucceededAndSingleRun) {
  RunData failed = MakeRun("r1", 1, "w1", "c1");
  failed.run.set_state(RUN_FAILED);
  auto v = Judge(MakeJob(CANONICAL), {MakeRun("r0", 0, "w1", "c1"), failed});
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(v->report.verdict(), FAILED);
  v = Judge(MakeJob(CANONICAL), {MakeRun("r0", 0, "w1", "c1")});
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(v->report.verdict(), INCONCLUSIVE);
  EXPECT_TRUE(v->certificates.empty());
}

TEST(Verdict, LevelAndIdsAreExactlyTheCertificates) {
  // w1 ran twice (RUN_TO_RUN), w2 on a second device (CROSS_DEVICE).
  auto v = Judge(MakeJob(CANONICAL),
                 {MakeRun("r0", 0, "w1", "c1"), MakeRun("r1", 1, "w2", "c1"),
                  MakeRun("r2", 2, "w1", "c1")});
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(v->report.verdict(), REPRODUCIBLE);
  ASSERT_EQ(v->certificates.size(), 2u);
  EXPECT_EQ(v->certificates[0].level(), RUN_TO_RUN);
  EXPECT_EQ(v->certificates[1].level(), CROSS_DEVICE);
  EXPECT_EQ(v->certificates[1].hardware_class(), "class one");
  EXPECT_EQ(v->certificates[1].golden_run_digest(), "digest-same");
  EXPECT_EQ(v->certificates[1].evidence_job_ids(0), "job-1");
  EXPECT_EQ(v->certificates[1].canonical_version(), 1);
  EXPECT_EQ(v->certificates[1].issued_unix_ms(), 99);
  EXPECT_NE(v->certificates[0].certificate_id(),
            v->certificates[1].certificate_id());
  EXPECT_EQ(v->report.level(), CROSS_DEVICE);
  ExpectReportMatchesCertificates(*v);
  // Ids derive from (job, level, class): judging again issues the same.
  auto again = Judge(MakeJob(CANONICAL), {MakeRun("r0", 0, "w1", "c1"),
                                          MakeRun("r1", 1, "w2", "c1"),
                                          MakeRun("r2", 2, "w1", "c1")});
  EXPECT_EQ(again->report.certificate_ids(0), v->report.certificate_ids(0));
}

TEST(Verdict, CrossClassOnlyForCanonical) {
  const std::vector<RunData> runs = {MakeRun("r0", 0, "w1", "c1"),
                                     MakeRun("r1", 1, "w2", "c2")};
  for (DeterminismMode mode : {CANONICAL, DETERMINISTIC}) {
    auto v = Judge(MakeJob(mode), runs);
    ASSERT_THAT(v, IsOk());
    EXPECT_EQ(v->report.verdict(), REPRODUCIBLE);
    ExpectReportMatchesCertificates(*v);
    if (mode == CANONICAL) {
      ASSERT_EQ(v->certificates.size(), 1u);
      EXPECT_EQ(v->certificates[0].level(), CROSS_CLASS);
      EXPECT_EQ(v->certificates[0].hardware_classes_size(), 2);
      EXPECT_EQ(v->report.level(), CROSS_CLASS);
    } else {
      EXPECT_TRUE(v->certificates.empty());
      EXPECT_EQ(v->report.level(), LEVEL_UNSPECIFIED);
    }
  }
}

// --- Finding 5: devices, not daemons ---------------------------------------

TEST(Verdict, TwoDaemonsOnOneDeviceAreNotCrossDevice) {
  std::vector<RunData> runs = {MakeRun("r0", 0, "w1", "c1"),
                               MakeRun("r1", 1, "w2", "c1")};
  runs[0].run.set_device_id("host-a/cpu0");
  runs[1].run.set_device_id("host-a/cpu0");
  auto v = Judge(MakeJob(CANONICAL), runs);
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(v->report.verdict(), REPRODUCIBLE);
  EXPECT_TRUE(v->certificates.empty());
  EXPECT_EQ(v->report.level(), LEVEL_UNSPECIFIED);
  EXPECT_THAT(v->report.summary(), HasSubstr("1 device(s)"));

  runs[1].run.set_device_id("host-b/cpu0");
  v = Judge(MakeJob(CANONICAL), runs);
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(LevelsOf(*v), std::set<Level>{CROSS_DEVICE});
  ExpectReportMatchesCertificates(*v);
}

TEST(Verdict, RunsWithoutADeviceIdNeverMakeTwoDevices) {
  std::vector<RunData> runs = {MakeRun("r0", 0, "w1", "c1"),
                               MakeRun("r1", 1, "w2", "c1"),
                               MakeRun("r2", 2, "w3", "c1")};
  for (RunData& r : runs) r.run.clear_device_id();
  auto v = Judge(MakeJob(CANONICAL), runs);
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(LevelsOf(*v).count(CROSS_DEVICE), 0u);
  // One known device plus unknown ones: the unknown may be the same one.
  runs[0].run.set_device_id("host-a/cpu0");
  v = Judge(MakeJob(CANONICAL), runs);
  EXPECT_EQ(LevelsOf(*v).count(CROSS_DEVICE), 0u);
}

TEST(Verdict, RunToRunNeedsOneWorkerWithTwoRuns) {
  auto v = Judge(MakeJob(CANONICAL),
                 {MakeRun("r0", 0, "w1", "c1"), MakeRun("r1", 1, "w1", "c1")});
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(LevelsOf(*v), std::set<Level>{RUN_TO_RUN});
  EXPECT_EQ(v->report.level(), RUN_TO_RUN);
}

// --- Finding 11: levels and hints that claim only what was shown -----------

TEST(Verdict, NanRunsAcrossClassesClaimNoCrossClassInCertificatesOrReport) {
  std::vector<RunData> runs = {MakeRun("r0", 0, "w1", "c1"),
                               MakeRun("r1", 1, "w2", "c2"),
                               MakeRun("r2", 2, "w3", "c2")};
  for (RunData& r : runs) {
    r.steps[0].fingerprints[0].mutable_stats()->set_nan_count(1);
  }
  auto v = Judge(MakeJob(CANONICAL), runs);
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(v->report.verdict(), REPRODUCIBLE);
  EXPECT_EQ(LevelsOf(*v), std::set<Level>{CROSS_DEVICE});
  EXPECT_EQ(v->report.level(), CROSS_DEVICE);
  ExpectReportMatchesCertificates(*v);
  EXPECT_THAT(v->report.summary(), HasSubstr("NaN"));
}

TEST(CauseFor, NanPayloadDifferencesAreNotFaultyHardware) {
  const TensorManifest manifest = MakeManifest();
  RunData a = MakeRun("r0", 0, "w1", "c1");
  RunData b = MakeRun("r1", 1, "w2", "c2");
  for (RunData* r : {&a, &b}) {
    TensorStats* s = r->steps[1].fingerprints[0].mutable_stats();
    s->set_nan_count(4);
    s->set_sum(3.25);
  }
  b.steps[1].fingerprints[0].set_hash_lo(99);
  b.steps[1].step_digest = "nan-payload";
  auto d = CompareRunData(manifest, JobConfig(), a, b);
  ASSERT_THAT(d, IsOk());
  ASSERT_TRUE(d->has_value());
  EXPECT_EQ((*d)->cause().id(), "ND-NAN-PAYLOAD");
  EXPECT_THAT((*d)->cause().text(), HasSubstr("NaN payload"));
  EXPECT_THAT((*d)->cause().text(), Not(HasSubstr("faulty device (")));

  // Different NaN counts: the values differ, not just the payloads.
  b.steps[1].fingerprints[0].mutable_stats()->set_nan_count(5);
  d = CompareRunData(manifest, JobConfig(), a, b);
  EXPECT_EQ((*d)->cause().id(), "LS-CANONICAL-MISMATCH");
}

TEST(Verdict, NanPayloadAcrossClassesIsReportedAsSuchNotAsAFault) {
  std::vector<RunData> runs = {MakeRun("r0", 0, "w1", "c1"),
                               MakeRun("r1", 1, "w2", "c2")};
  for (RunData& r : runs) {
    r.steps[2].fingerprints[2].mutable_stats()->set_nan_count(7);
  }
  runs[1].steps[2].fingerprints[2].set_hash_hi(0x7fffffff);
  runs[1].steps[2].step_digest = "gpu-nan";
  runs[1].run.set_run_digest("gpu-digest");
  auto v = Judge(MakeJob(CANONICAL), runs);
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(v->report.verdict(), NONDETERMINISTIC);
  EXPECT_EQ(v->report.divergence().step(), 2);
  EXPECT_EQ(v->report.divergence().tensor().index(), 2);
  EXPECT_EQ(v->report.divergence().cause().id(), "ND-NAN-PAYLOAD");
  EXPECT_THAT(v->report.summary(), HasSubstr("ND-NAN-PAYLOAD"));
  EXPECT_TRUE(v->certificates.empty());
}

ManifestEntry Entry(const std::string& op, TensorRole role = ACTIVATION) {
  ManifestEntry e;
  e.set_op(op);
  e.set_role(role);
  return e;
}

v1::Run RunWith(const std::string& cls, const std::string& op,
                const std::string& variant) {
  v1::Run r;
  r.set_hardware_class_digest(cls);
  if (!variant.empty()) (*r.mutable_kernels())[op] = variant;
  return r;
}

JobConfig Config(DeterminismMode mode, Backend backend = BACKEND_UNSPECIFIED) {
  JobConfig c;
  c.set_determinism(mode);
  c.set_backend(backend);
  return c;
}

TEST(CauseFor, DefaultModeDeterministicGemmIsNotBlamedOnSplitK) {
  const std::string v = "cpu/avx512/deterministic";
  CauseHint h = CauseFor(Entry("dense.forward"), Config(DEFAULT, CPU),
                         RunWith("c1", "dense.forward", v),
                         RunWith("c1", "dense.forward", v));
  EXPECT_NE(h.id(), "ND-SPLITK-GEMM");
  EXPECT_EQ(h.id(), "LS-UPSTREAM-DIVERGENCE");
  EXPECT_THAT(h.text(), HasSubstr(v));
  EXPECT_THAT(h.text(), HasSubstr("upstream"));
}

TEST(CauseFor, NamesTheAtomicVariantThatRan) {
  CauseHint h =
      CauseFor(Entry("dense.forward"), Config(DEFAULT, CPU),
               RunWith("c1", "dense.forward", "cpu/default/split_k_atomic"),
               RunWith("c1", "dense.forward", "cpu/default/split_k_atomic"));
  EXPECT_EQ(h.id(), "ND-CPU-ATOMIC-ACCUMULATION");
  EXPECT_THAT(h.text(), HasSubstr("cpu/default/split_k_atomic"));
  // The depthwise-only atomic weight gradient (examples/mobilenet_v2's
  // DEFAULT config) and the embedding's atomic scatter-add.
  const std::string dw = "cpu/avx2/default/atomic_depthwise";
  h = CauseFor(Entry("conv2d.grad_weight"), Config(DEFAULT, CPU),
               RunWith("c1", "conv2d.grad_weight", dw),
               RunWith("c1", "conv2d.grad_weight", dw));
  EXPECT_EQ(h.id(), "ND-CPU-ATOMIC-ACCUMULATION");
  EXPECT_THAT(h.text(), HasSubstr(dw));
  const std::string emb = "cpu/avx2/default/atomic";
  h = CauseFor(Entry("embedding.grad_weight"), Config(DEFAULT, CPU),
               RunWith("c1", "embedding.grad_weight", emb),
               RunWith("c1", "embedding.grad_weight", emb));
  EXPECT_EQ(h.id(), "ND-CPU-ATOMIC-ACCUMULATION");
  EXPECT_THAT(h.text(), HasSubstr(emb));
  // Only one side ran the atomic variant: it is the one named.
  h = CauseFor(Entry("bias_add.grad"), Config(DEFAULT, CUDA),
               RunWith("c1", "bias_add.grad", "cuda/deterministic/tree"),
               RunWith("c1", "bias_add.grad", "cuda/default/atomic"));
  EXPECT_EQ(h.id(), "ND-ATOMIC-BIAS-GRAD");
  EXPECT_THAT(h.text(), HasSubstr("cuda/default/atomic"));
  h = CauseFor(
      Entry("conv2d.grad_weight"), Config(DEFAULT, CUDA),
      RunWith("c1", "conv2d.grad_weight", "cudnn/default/atomic_algo0"),
      RunWith("c1", "conv2d.grad_weight", "cudnn/default/atomic_algo0"));
  EXPECT_EQ(h.id(), "ND-CUDNN-CONV-GRAD-WEIGHT");
  // The transposed convolution's weight gradient is cuDNN's backward-filter
  // and its forward cuDNN's backward-data.
  h = CauseFor(Entry("conv_transpose2d.grad_weight"), Config(DEFAULT, CUDA),
               RunWith("c1", "conv_transpose2d.grad_weight",
                       "cudnn/default/atomic_algo0"),
               RunWith("c1", "conv_transpose2d.grad_weight",
                       "cudnn/default/atomic_algo0"));
  EXPECT_EQ(h.id(), "ND-CUDNN-CONV-GRAD-WEIGHT");
  h = CauseFor(
      Entry("conv_transpose2d.forward"), Config(DEFAULT, CUDA),
      RunWith("c1", "conv_transpose2d.forward", "cudnn/default/atomic_algo0"),
      RunWith("c1", "conv_transpose2d.forward", "cudnn/default/atomic_algo0"));
  EXPECT_EQ(h.id(), "ND-CUDNN-CONV-GRAD-INPUT");
}

TEST(CauseFor, CpuJobNeverNamesCudnn) {
  for (const char* op :
       {"conv2d.grad_weight", "conv2d.grad_input", "max_pool2d.grad",
        "dense.forward", "conv_transpose2d.grad_weight"}) {
    // Recorded variant.
    CauseHint h = CauseFor(Entry(op), Config(DEFAULT, CPU),
                           RunWith("c1", op, "cpu/default/atomic"),
                           RunWith("c1", op, "cpu/default/atomic"));
    EXPECT_THAT(h.id(), Not(HasSubstr("CUDNN"))) << op;
    EXPECT_THAT(h.text(), Not(HasSubstr("cuDNN"))) << op;
    EXPECT_THAT(h.id(), HasSubstr("ND-CPU-ATOMIC")) << op;
    // Nothing recorded: the job's backend decides, and the hint says so.
    h = CauseFor(Entry(op), Config(DEFAULT, CPU), RunWith("c1", op, ""),
                 RunWith("c1", op, ""));
    EXPECT_THAT(h.id(), Not(HasSubstr("CUDNN"))) << op;
    EXPECT_THAT(h.text(), Not(HasSubstr("cuDNN"))) << op;
    EXPECT_THAT(h.text(), HasSubstr("kernel variant not recorded")) << op;
  }
}

TEST(CauseFor, UnrecordedVariantsFallBackOnModeAndSayNotRecorded) {
  const v1::Run a = RunWith("c1", "bias_add.grad", "");
  CauseHint h = CauseFor(Entry("bias_add.grad"), Config(DEFAULT, CUDA), a, a);
  EXPECT_EQ(h.id(), "ND-ATOMIC-BIAS-GRAD");
  EXPECT_THAT(h.text(), HasSubstr("kernel variant not recorded"));
  h = CauseFor(Entry("bias_add.grad"), Config(DETERMINISTIC, CPU),
               RunWith("c1", "x", ""), RunWith("c2", "x", ""));
  EXPECT_EQ(h.id(), "ND-CPU-VECTOR-WIDTH");
  h = CauseFor(Entry("bias_add.grad"), Config(CANONICAL), a, a);
  EXPECT_EQ(h.id(), "LS-CANONICAL-MISMATCH");
  h = CauseFor(Entry("input", INPUT), Config(DEFAULT), a, a);
  EXPECT_EQ(h.id(), "ND-DATA-PIPELINE");
}

TEST(CauseFor, CanonicalVariantsOnDifferentIsasAreAMismatch) {
  CauseHint h = CauseFor(Entry("dense.forward"), Config(CANONICAL, CPU),
                         RunWith("c1", "dense.forward", "cpu/avx512/canonical"),
                         RunWith("c2", "dense.forward", "cpu/avx2/canonical"));
  EXPECT_EQ(h.id(), "LS-CANONICAL-MISMATCH");
  EXPECT_THAT(h.text(), HasSubstr("cpu/avx2/canonical"));
}

TEST(CauseFor, DifferentCudnnAlgorithmsOnOneClassAreAutotuning) {
  CauseHint h =
      CauseFor(Entry("conv2d.forward"), Config(DETERMINISTIC, CUDA),
               RunWith("c1", "conv2d.forward", "cudnn/deterministic/algo1"),
               RunWith("c1", "conv2d.forward", "cudnn/deterministic/algo6"));
  EXPECT_EQ(h.id(), "ND-CUDNN-AUTOTUNE");
}

// --- Finding 7: fleet audits vote per tensor --------------------------------

const AuditWorkerResult& WorkerResult(const Audit& audit,
                                      const std::string& worker) {
  for (const AuditWorkerResult& w : audit.workers()) {
    if (w.worker_id() == worker) return w;
  }
  ADD_FAILURE() << "no result for " << worker;
  static const AuditWorkerResult kNone;
  return kNone;
}

Audit Evaluate(const std::vector<RunData>& runs,
               DeterminismMode mode = CANONICAL) {
  Audit audit;
  EXPECT_THAT(EvaluateAudit(MakeJob(mode), MakeManifest(), StreamRuns(runs),
                            {{"c1", "class one"}}, &audit),
              IsOk());
  return audit;
}

TEST(Audit, FiveWorkersOneFaultyIsNamedWithTheFirstTensor) {
  // Two classes; the faulty worker's class has one other member, so a vote
  // within its class would be a 1-1 tie.
  std::vector<RunData> runs = {
      MakeRun("r0", 0, "w0", "c1"), MakeRun("r1", 1, "w1", "c1"),
      MakeRun("r2", 2, "w2", "c1"), MakeRun("r3", 3, "w3", "c2"),
      MakeRun("r4", 4, "w4", "c2", /*flip_step=*/1, /*flip_index=*/1)};
  const Audit audit = Evaluate(runs);
  EXPECT_FALSE(audit.no_majority());
  for (const char* w : {"w0", "w1", "w2", "w3"}) {
    EXPECT_EQ(WorkerResult(audit, w).health(), HEALTHY) << w;
  }
  const AuditWorkerResult& bad = WorkerResult(audit, "w4");
  EXPECT_EQ(bad.health(), OUTLIER);
  EXPECT_EQ(bad.device_id(), "dev-w4");
  EXPECT_EQ(bad.divergence().run_a(), "r0");
  EXPECT_EQ(bad.divergence().run_b(), "r4");
  EXPECT_EQ(bad.divergence().step(), 1);
  EXPECT_EQ(bad.divergence().tensor().index(), 1);
  EXPECT_EQ(bad.divergence().tensor().op(), "bias_add.grad");
  EXPECT_DOUBLE_EQ(bad.divergence().stats_a().sum(), 1.0);
  EXPECT_DOUBLE_EQ(bad.divergence().stats_b().sum(), 1.5);
  EXPECT_DOUBLE_EQ(bad.divergence().magnitude().sum_rel(), 0.5 / 1.5);
  EXPECT_EQ(bad.divergence().cause().id(), "LS-CANONICAL-MISMATCH");
  // Step 1 index 2 and the 3 tensors of step 2 differ too.
  EXPECT_EQ(bad.divergence().downstream_differing(), 4);
  EXPECT_EQ(bad.divergence().tensors_compared(), kSteps * kEntries);
  EXPECT_THAT(audit.summary(), HasSubstr("4 healthy, 1 outlier(s)"));
  EXPECT_THAT(audit.summary(), HasSubstr("outlier w4: step 1"));
  ASSERT_EQ(audit.classes_size(), 2);
  EXPECT_EQ(audit.classes(0).hardware_class(), "class one");
  EXPECT_EQ(audit.classes(0).workers(), 3);
  EXPECT_EQ(audit.classes(0).agreeing(), 3);
  EXPECT_EQ(audit.classes(1).workers(), 2);
  EXPECT_EQ(audit.classes(1).agreeing(), 1);
  for (const AuditClassResult& c : audit.classes()) {
    EXPECT_EQ(c.majority_digest(), "digest-same");
    EXPECT_TRUE(c.agrees_with_other_classes());
  }
}

TEST(Audit, TwoWorkersThatDisagreeHaveNoMajority) {
  const Audit audit = Evaluate(
      {MakeRun("r0", 0, "w0", "c1"), MakeRun("r1", 1, "w1", "c1", 2, 1)});
  EXPECT_TRUE(audit.no_majority());
  for (const AuditWorkerResult& w : audit.workers()) {
    EXPECT_EQ(w.health(), UNDECIDED) << w.worker_id();
    EXPECT_FALSE(w.has_divergence());
  }
  EXPECT_THAT(audit.summary(), HasSubstr("no majority"));
  EXPECT_THAT(audit.summary(), HasSubstr("step 2"));
  EXPECT_EQ(audit.classes(0).majority_digest(), "");
  EXPECT_EQ(audit.classes(0).agreeing(), 0);
}

TEST(Audit, ATwoTwoTieHasNoMajorityAndNoOutlier) {
  const Audit audit = Evaluate(
      {MakeRun("r0", 0, "w0", "c1"), MakeRun("r1", 1, "w1", "c1"),
       MakeRun("r2", 2, "w2", "c1", 0, 2), MakeRun("r3", 3, "w3", "c1", 0, 2)});
  EXPECT_TRUE(audit.no_majority());
  for (const AuditWorkerResult& w : audit.workers()) {
    EXPECT_EQ(w.health(), UNDECIDED) << w.worker_id();
  }
  EXPECT_THAT(audit.summary(), HasSubstr("0 outlier(s)"));
  EXPECT_THAT(audit.summary(), HasSubstr("split 2/2"));
}

TEST(Audit, AFaultyNodeAloneInItsClassIsNamed) {
  const Audit audit = Evaluate(
      {MakeRun("r0", 0, "w0", "c1"), MakeRun("r1", 1, "w1", "c1"),
       MakeRun("r2", 2, "w2", "c1"), MakeRun("r3", 3, "w3", "c9", 0, 0)});
  EXPECT_FALSE(audit.no_majority());
  const AuditWorkerResult& bad = WorkerResult(audit, "w3");
  EXPECT_EQ(bad.health(), OUTLIER);
  EXPECT_EQ(bad.divergence().step(), 0);
  EXPECT_EQ(bad.divergence().tensor().index(), 0);
  ASSERT_EQ(audit.classes_size(), 2);
  EXPECT_EQ(audit.classes(1).hardware_class_digest(), "c9");
  EXPECT_EQ(audit.classes(1).agreeing(), 0);
  EXPECT_EQ(audit.classes(1).majority_digest(), "");
  EXPECT_FALSE(audit.classes(1).agrees_with_other_classes());
}

TEST(Audit, DaemonsSharingADeviceVoteOnce) {
  // Three agreeing daemons on two devices are not 3 agreeing devices.
  std::vector<RunData> runs = {
      MakeRun("r0", 0, "w0", "c1"), MakeRun("r1", 1, "w1", "c1"),
      MakeRun("r2", 2, "w2", "c1"), MakeRun("r3", 3, "w3", "c1", 1, 0)};
  runs[1].run.set_device_id("dev-w0");
  const Audit audit = Evaluate(runs);
  EXPECT_TRUE(audit.no_majority());
  EXPECT_EQ(WorkerResult(audit, "w3").health(), UNDECIDED);
  // With a third device the same fault is named.
  runs[1].run.set_device_id("dev-w1");
  EXPECT_EQ(WorkerResult(Evaluate(runs), "w3").health(), OUTLIER);
}

TEST(Audit, EachOutlierGetsItsOwnFirstTensorAndLaterSplitsAreUndecided) {
  // w5 leaves at step 0; w4 at step 1; then the remaining four split 2-2
  // at step 2: they are undecided, the earlier outliers stay named.
  std::vector<RunData> runs = {
      MakeRun("r0", 0, "w0", "c1"),       MakeRun("r1", 1, "w1", "c1"),
      MakeRun("r2", 2, "w2", "c1", 2, 1), MakeRun("r3", 3, "w3", "c1", 2, 1),
      MakeRun("r4", 4, "w4", "c2", 1, 0), MakeRun("r5", 5, "w5", "c2", 0, 2)};
  RunData failed = MakeRun("r6", 6, "w6", "c1");
  failed.run.set_state(RUN_FAILED);
  runs.push_back(failed);
  const Audit audit = Evaluate(runs);
  EXPECT_TRUE(audit.no_majority());
  EXPECT_EQ(WorkerResult(audit, "w5").health(), OUTLIER);
  EXPECT_EQ(WorkerResult(audit, "w5").divergence().step(), 0);
  EXPECT_EQ(WorkerResult(audit, "w5").divergence().tensor().index(), 2);
  EXPECT_EQ(WorkerResult(audit, "w4").health(), OUTLIER);
  EXPECT_EQ(WorkerResult(audit, "w4").divergence().step(), 1);
  EXPECT_EQ(WorkerResult(audit, "w4").divergence().tensor().index(), 0);
  for (const char* w : {"w0", "w1", "w2", "w3"}) {
    EXPECT_EQ(WorkerResult(audit, w).health(), UNDECIDED) << w;
  }
  EXPECT_EQ(WorkerResult(audit, "w6").health(), NO_RESULT);
  EXPECT_THAT(audit.summary(), HasSubstr("2 outlier(s), 4 undecided, 1 "
                                         "without a result"));
}

TEST(Audit, NonCanonicalAuditsVoteWithinEachClass) {
  // DETERMINISTIC kernels need not agree across classes: c2's three
  // devices agree among themselves and nobody is an outlier.
  std::vector<RunData> runs = {
      MakeRun("r0", 0, "w0", "c1"),       MakeRun("r1", 1, "w1", "c1"),
      MakeRun("r2", 2, "w2", "c1"),       MakeRun("r3", 3, "w3", "c2", 0, 0),
      MakeRun("r4", 4, "w4", "c2", 0, 0), MakeRun("r5", 5, "w5", "c2", 0, 0),
      MakeRun("r6", 6, "w6", "c1")};
  Audit audit = Evaluate(runs, DETERMINISTIC);
  EXPECT_FALSE(audit.no_majority());
  for (const AuditWorkerResult& w : audit.workers()) {
    EXPECT_EQ(w.health(), HEALTHY) << w.worker_id();
  }
  ASSERT_EQ(audit.classes_size(), 2);
  EXPECT_EQ(audit.classes(0).agreeing(), 4);
  EXPECT_EQ(audit.classes(1).agreeing(), 3);
  for (const AuditClassResult& c : audit.classes()) {
    EXPECT_FALSE(c.agrees_with_other_classes());
  }
  // The same runs in CANONICAL mode: c2 leaves the fleet's majority (4 of
  // 7 devices).
  audit = Evaluate(runs, CANONICAL);
  EXPECT_FALSE(audit.no_majority());
  for (const char* w : {"w3", "w4", "w5"}) {
    EXPECT_EQ(WorkerResult(audit, w).health(), OUTLIER) << w;
  }
  EXPECT_EQ(WorkerResult(audit, "w0").health(), HEALTHY);
}

}  // namespace
}  // namespace lockstep::server
