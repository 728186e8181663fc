#include "server/analysis.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::server {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;
using namespace ::lockstep::v1;  // NOLINT

constexpr int kEntries = 3;
constexpr int kSteps = 3;

TensorManifest MakeManifest() {
  TensorManifest m;
  m.set_steps(kSteps);
  const char* ops[] = {"dense.forward", "bias_add.grad", "sgd.update"};
  const TensorRole roles[] = {ACTIVATION, GRAD_BIAS, WEIGHT};
  for (int i = 0; i < kEntries; ++i) {
    ManifestEntry* e = m.add_entries();
    e->set_index(i);
    e->set_layer("fc1");
    e->set_op(ops[i]);
    e->set_role(roles[i]);
    e->set_phase(i == 0 ? PHASE_FORWARD
                        : (i == 1 ? PHASE_BACKWARD : PHASE_OPTIMIZER));
  }
  return m;
}

// A succeeded run whose fingerprint (step, index) is `base` + step*10 +
// index, with tensors at or after `flip_from` (step-major) changed.
RunData MakeRun(const std::string& id, int index, const std::string& worker,
                const std::string& cls, int flip_step = -1,
                int flip_index = -1) {
  RunData r;
  r.run.set_run_id(id);
  r.run.set_index(index);
  r.run.set_worker_id(worker);
  r.run.set_hardware_class_digest(cls);
  r.run.set_state(RUN_SUCCEEDED);
  bool flipped = false;
  for (int s = 0; s < kSteps; ++s) {
    store::StepRecord step;
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

Job MakeJob(DeterminismMode mode) {
  Job job;
  job.set_job_id("job-1");
  job.set_model_digest("md");
  job.set_config_digest("cd");
  job.mutable_spec()->mutable_model()->set_name("mlp");
  job.mutable_spec()->mutable_config()->set_determinism(mode);
  return job;
}

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
  EXPECT_EQ((*d)->step(), 1);
  EXPECT_EQ((*d)->tensor().index(), 1);
  EXPECT_EQ((*d)->tensor().op(), "bias_add.grad");
  // Later tensors: step 1 index 2, and all 3 of step 2.
  EXPECT_EQ((*d)->downstream_differing(), 4);
  EXPECT_EQ((*d)->tensors_compared(), kSteps * kEntries);
  EXPECT_DOUBLE_EQ((*d)->magnitude().sum_rel(), 0.5 / 1.5);
  EXPECT_EQ((*d)->cause().id(), "LS-CANONICAL-MISMATCH");

  JobConfig atomic;
  atomic.set_determinism(DEFAULT);
  d = CompareRunData(manifest, atomic, a, b);
  EXPECT_EQ((*d)->cause().id(), "ND-ATOMIC-BIAS-GRAD");

  auto same = CompareRunData(manifest, atomic, a, a);
  ASSERT_THAT(same, IsOk());
  EXPECT_FALSE(same->has_value());
}

TEST(Analysis, MisalignedRunsAreAnError) {
  const TensorManifest manifest = MakeManifest();
  RunData a = MakeRun("r0", 0, "w1", "c1");
  RunData b = MakeRun("r1", 1, "w1", "c1");
  b.steps.pop_back();
  EXPECT_THAT(CompareRunData(manifest, JobConfig(), a, b),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("recorded steps")));
  b = MakeRun("r1", 1, "w1", "c1");
  b.steps[0].fingerprints.pop_back();
  b.steps[0].step_digest = "other";
  EXPECT_THAT(
      CompareRunData(manifest, JobConfig(), a, b),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not aligned")));
}

TEST(Analysis, ReproducibleOverTwoWorkersCertifiesRunToRunAndCrossDevice) {
  Job job = MakeJob(CANONICAL);
  std::vector<RunData> runs = {MakeRun("r0", 0, "w1", "c1"),
                               MakeRun("r1", 1, "w2", "c1"),
                               MakeRun("r2", 2, "w1", "c1")};
  for (const RunData& r : runs) *job.add_runs() = r.run;
  auto report = BuildReport(job, MakeManifest(), runs);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->verdict(), REPRODUCIBLE);
  EXPECT_EQ(report->level(), CROSS_DEVICE);
  EXPECT_EQ(report->run_digests_size(), 3);
  auto certs =
      CertificatesFor(job, *report, {{"c1", "class one"}}, 1, 99, true);
  ASSERT_EQ(certs.size(), 2u);
  EXPECT_EQ(certs[0].level(), RUN_TO_RUN);
  EXPECT_EQ(certs[1].level(), CROSS_DEVICE);
  EXPECT_EQ(certs[1].hardware_class(), "class one");
  EXPECT_EQ(certs[1].golden_run_digest(), "digest-same");
  EXPECT_EQ(certs[1].evidence_job_ids(0), "job-1");
  EXPECT_NE(certs[0].certificate_id(), certs[1].certificate_id());
  // Deterministic ids: issuing again gives the same ones.
  auto again = CertificatesFor(job, *report, {}, 1, 100, true);
  EXPECT_EQ(again[0].certificate_id(), certs[0].certificate_id());
}

TEST(Analysis, CrossClassOnlyForCanonical) {
  std::vector<RunData> runs = {MakeRun("r0", 0, "w1", "c1"),
                               MakeRun("r1", 1, "w2", "c2")};
  for (DeterminismMode mode : {CANONICAL, DETERMINISTIC}) {
    Job job = MakeJob(mode);
    for (const RunData& r : runs) *job.add_runs() = r.run;
    auto report = BuildReport(job, MakeManifest(), runs);
    ASSERT_THAT(report, IsOk());
    EXPECT_EQ(report->level(), CROSS_CLASS);
    auto certs = CertificatesFor(job, *report, {}, 1, 1, true);
    if (mode == CANONICAL) {
      ASSERT_EQ(certs.size(), 1u);
      EXPECT_EQ(certs[0].level(), CROSS_CLASS);
      EXPECT_EQ(certs[0].hardware_classes_size(), 2);
    } else {
      EXPECT_TRUE(certs.empty());
    }
  }
}

TEST(Analysis, CrossClassNeedsNanFreeRuns) {
  std::vector<RunData> runs = {MakeRun("r0", 0, "w1", "c1"),
                               MakeRun("r1", 1, "w2", "c2")};
  EXPECT_TRUE(RunsAreNanFree(runs));
  runs[1].steps[2].fingerprints[1].mutable_stats()->set_nan_count(3);
  EXPECT_FALSE(RunsAreNanFree(runs));
  Job job = MakeJob(CANONICAL);
  for (const RunData& r : runs) *job.add_runs() = r.run;
  auto report = BuildReport(job, MakeManifest(), runs);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->verdict(), REPRODUCIBLE);
  // NaN payloads are not canonical across classes: no CROSS_CLASS claim.
  EXPECT_TRUE(
      CertificatesFor(job, *report, {}, 1, 1, RunsAreNanFree(runs)).empty());
}

TEST(Analysis, NondeterministicReportsEarliestDivergence) {
  Job job = MakeJob(DEFAULT);
  std::vector<RunData> runs = {MakeRun("r0", 0, "w1", "c1"),
                               MakeRun("r1", 1, "w1", "c1", 2, 0),
                               MakeRun("r2", 2, "w1", "c1", 1, 1)};
  for (const RunData& r : runs) *job.add_runs() = r.run;
  auto report = BuildReport(job, MakeManifest(), runs);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->verdict(), NONDETERMINISTIC);
  EXPECT_EQ(report->divergence().run_b(), "r2");
  EXPECT_EQ(report->divergence().step(), 1);
  EXPECT_THAT(report->summary(), HasSubstr("2 of 2 runs differ"));
  EXPECT_THAT(report->summary(), HasSubstr("ND-ATOMIC-BIAS-GRAD"));
  EXPECT_TRUE(CertificatesFor(job, *report, {}, 1, 1, true).empty());
}

TEST(Analysis, FailedAndInconclusive) {
  Job job = MakeJob(CANONICAL);
  RunData ok = MakeRun("r0", 0, "w1", "c1");
  RunData failed = MakeRun("r1", 1, "w1", "c1");
  failed.run.set_state(RUN_FAILED);
  auto report = BuildReport(job, MakeManifest(), {ok, failed});
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->verdict(), FAILED);
  report = BuildReport(job, MakeManifest(), {ok});
  EXPECT_EQ(report->verdict(), INCONCLUSIVE);
}

}  // namespace
}  // namespace lockstep::server

namespace lockstep::server {
namespace {

using namespace ::lockstep::v1;  // NOLINT

TEST(Audit, OutlierInItsClassIsNamedWithItsDivergence) {
  Job job = MakeJob(CANONICAL);
  std::vector<RunData> runs = {
      MakeRun("r0", 0, "w0", "c1"), MakeRun("r1", 1, "w1", "c1"),
      MakeRun("r2", 2, "w2", "c1", /*flip_step=*/1, /*flip_index=*/2),
      MakeRun("r3", 3, "w3", "c1")};
  Audit audit;
  ASSERT_THAT(
      EvaluateAudit(job, MakeManifest(), runs, {{"c1", "class one"}}, &audit),
      lockstep::testing::IsOk());
  ASSERT_EQ(audit.workers_size(), 4);
  for (const auto& w : audit.workers()) {
    if (w.worker_id() == "w2") {
      EXPECT_EQ(w.health(), OUTLIER);
      EXPECT_EQ(w.divergence().step(), 1);
      EXPECT_EQ(w.divergence().tensor().index(), 2);
      EXPECT_EQ(w.divergence().tensor().role(), WEIGHT);
    } else {
      EXPECT_EQ(w.health(), HEALTHY) << w.worker_id();
    }
  }
  ASSERT_EQ(audit.classes_size(), 1);
  EXPECT_EQ(audit.classes(0).workers(), 4);
  EXPECT_EQ(audit.classes(0).agreeing(), 3);
  EXPECT_EQ(audit.classes(0).hardware_class(), "class one");
  EXPECT_THAT(audit.summary(), ::testing::HasSubstr("3 healthy, 1 outlier"));
  EXPECT_THAT(audit.summary(), ::testing::HasSubstr("outlier w2: step 1"));
}

TEST(Audit, DisagreeingClassAndFailedRun) {
  Job job = MakeJob(CANONICAL);
  std::vector<RunData> runs = {
      MakeRun("r0", 0, "w0", "c1"),       MakeRun("r1", 1, "w1", "c1"),
      MakeRun("r2", 2, "w2", "c2", 0, 0), MakeRun("r3", 3, "w3", "c2", 0, 0),
      MakeRun("r4", 4, "w4", "c1"),       MakeRun("r5", 5, "w5", "c1")};
  runs[5].run.set_state(RUN_FAILED);
  Audit audit;
  ASSERT_THAT(EvaluateAudit(job, MakeManifest(), runs, {}, &audit),
              lockstep::testing::IsOk());
  for (const auto& c : audit.classes()) {
    EXPECT_EQ(c.agrees_with_other_classes(), c.hardware_class_digest() == "c1");
  }
  for (const auto& w : audit.workers()) {
    if (w.worker_id() == "w5") EXPECT_EQ(w.health(), NO_RESULT);
    if (w.worker_id() == "w2") EXPECT_EQ(w.health(), HEALTHY);  // its class
  }
  EXPECT_THAT(audit.summary(),
              ::testing::HasSubstr("1 class(es) disagree with the others"));
}

TEST(Audit, TieInAClassFlagsEveryone) {
  Job job = MakeJob(CANONICAL);
  std::vector<RunData> runs = {MakeRun("r0", 0, "w0", "c1"),
                               MakeRun("r1", 1, "w1", "c1", 2, 1)};
  Audit audit;
  ASSERT_THAT(EvaluateAudit(job, MakeManifest(), runs, {}, &audit),
              lockstep::testing::IsOk());
  for (const auto& w : audit.workers()) EXPECT_EQ(w.health(), OUTLIER);
  EXPECT_EQ(audit.classes(0).majority_digest(), "");
}

}  // namespace
}  // namespace lockstep::server
