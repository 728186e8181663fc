#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/store/store.h"

namespace lockstep::store {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;
using namespace ::lockstep::v1;  // NOLINT

constexpr int kEntries = 4;

class StoreJobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions o;
    o.path = ":memory:";
    store_ = std::move(Store::Open(o).value());
  }

  static Job MakeJob(const std::string& id, int64_t created, int runs = 2) {
    Job job;
    job.set_job_id(id);
    job.set_state(JOB_QUEUED);
    job.set_model_digest("m" + id);
    job.set_config_digest("c" + id);
    job.set_created_unix_ms(created);
    job.mutable_spec()->mutable_model()->set_name("mlp");
    for (int i = 0; i < runs; ++i) {
      v1::Run* r = job.add_runs();
      r->set_run_id(id + "-r0" + std::to_string(i));
      r->set_job_id(id);
      r->set_index(i);
      r->set_attempt(1);
      r->set_state(RUN_QUEUED);
    }
    return job;
  }

  static FingerprintBatch Batch(const std::string& run, int attempt,
                                int64_t seq, int step, int first, int count,
                                bool complete) {
    FingerprintBatch b;
    b.set_run_id(run);
    b.set_attempt(attempt);
    b.set_sequence(seq);
    b.set_step(step);
    for (int i = 0; i < count; ++i) {
      auto* fp = b.add_fingerprints();
      fp->set_index(first + i);
      fp->set_hash_hi(1000 * step + first + i);
      fp->set_hash_lo(7);
      fp->mutable_stats()->set_sum(0.5 * (first + i));
    }
    b.set_step_complete(complete);
    if (complete) b.set_step_digest("d" + std::to_string(step));
    return b;
  }

  void MarkRunning(const std::string& job_id, int index) {
    auto job = store_->GetJob(job_id);
    v1::Run run = (*job)->runs(index);
    run.set_state(RUN_RUNNING);
    ASSERT_THAT(store_->UpdateRun(run), IsOk());
  }

  std::unique_ptr<Store> store_;
};

TEST_F(StoreJobsTest, InsertGetListAndPaging) {
  TensorManifest manifest;
  manifest.set_steps(3);
  manifest.add_entries()->set_layer("fc1");
  for (int i = 0; i < 5; ++i) {
    ASSERT_THAT(store_->InsertJob(MakeJob("j" + std::to_string(i), 100 + i),
                                  manifest, ""),
                IsOk());
  }
  auto job = store_->GetJob("j2");
  ASSERT_THAT(job, IsOk());
  ASSERT_TRUE(job->has_value());
  EXPECT_EQ((*job)->model_digest(), "mj2");
  ASSERT_EQ((*job)->runs_size(), 2);
  EXPECT_EQ((*job)->runs(1).run_id(), "j2-r01");
  EXPECT_EQ(store_->GetManifest("j2")->entries(0).layer(), "fc1");
  EXPECT_THAT(store_->GetManifest("nope"),
              StatusIs(absl::StatusCode::kNotFound));

  JobQuery q;
  q.page_size = 2;
  auto page = store_->ListJobs(q);
  ASSERT_THAT(page, IsOk());
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].job_id(), "j4");
  EXPECT_EQ((*page)[1].job_id(), "j3");
  q.before_created_ms = (*page)[1].created_unix_ms();
  q.before_job_id = (*page)[1].job_id();
  page = store_->ListJobs(q);
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].job_id(), "j2");

  Job done = **store_->GetJob("j0");
  done.set_state(JOB_SUCCEEDED);
  done.set_finished_unix_ms(500);
  ASSERT_THAT(store_->UpdateJob(done), IsOk());
  q = JobQuery();
  q.state = JOB_SUCCEEDED;
  page = store_->ListJobs(q);
  ASSERT_EQ(page->size(), 1u);
  EXPECT_EQ((*page)[0].job_id(), "j0");
  auto unfinished = store_->ListUnfinishedJobIds();
  ASSERT_THAT(unfinished, IsOk());
  EXPECT_EQ(unfinished->size(), 4u);
}

TEST_F(StoreJobsTest, IdempotencyKey) {
  ASSERT_THAT(store_->InsertJob(MakeJob("a", 1), TensorManifest(), "key-1"),
              IsOk());
  EXPECT_THAT(
      store_->InsertJob(MakeJob("b", 2), TensorManifest(), "key-1"),
      StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("idempotency_key")));
  EXPECT_FALSE(store_->GetJob("b")->has_value());  // rolled back whole
  EXPECT_EQ(**store_->FindJobByIdempotencyKey("key-1"), "a");
  EXPECT_FALSE(store_->FindJobByIdempotencyKey("key-2")->has_value());
  // Empty keys never collide.
  EXPECT_THAT(store_->InsertJob(MakeJob("c", 3), TensorManifest(), ""), IsOk());
  EXPECT_THAT(store_->InsertJob(MakeJob("d", 4), TensorManifest(), ""), IsOk());
}

TEST_F(StoreJobsTest, IngestSequencesAreIdempotentAndGapless) {
  ASSERT_THAT(store_->InsertJob(MakeJob("j", 1), TensorManifest(), ""), IsOk());
  // A queued run accepts nothing.
  EXPECT_THAT(
      store_->IngestBatch(Batch("j-r00", 1, 0, 0, 0, 4, true), kEntries),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("RUN_QUEUED")));
  MarkRunning("j", 0);
  auto r = store_->IngestBatch(Batch("j-r00", 1, 0, 0, 0, 4, true), kEntries);
  ASSERT_THAT(r, IsOk());
  EXPECT_FALSE(r->duplicate);
  EXPECT_TRUE(r->step_completed);
  // The same batch again: acknowledged, nothing changes.
  r = store_->IngestBatch(Batch("j-r00", 1, 0, 0, 0, 4, true), kEntries);
  ASSERT_THAT(r, IsOk());
  EXPECT_TRUE(r->duplicate);
  EXPECT_EQ(*store_->NextSequence("j-r00"), 1);
  // A gap is refused.
  EXPECT_THAT(
      store_->IngestBatch(Batch("j-r00", 1, 5, 1, 0, 4, true), kEntries),
      StatusIs(absl::StatusCode::kOutOfRange,
               HasSubstr("batch.sequence: 5 skips ahead; run j-r00 "
                         "expects 1 next")));
  // Unknown run, stale attempt.
  EXPECT_THAT(store_->IngestBatch(Batch("nope", 1, 0, 0, 0, 4, true), kEntries),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
  EXPECT_THAT(
      store_->IngestBatch(Batch("j-r00", 2, 1, 1, 0, 4, true), kEntries),
      StatusIs(absl::StatusCode::kAborted, HasSubstr("attempt")));
  // A step split over two batches.
  ASSERT_THAT(
      store_->IngestBatch(Batch("j-r00", 1, 1, 1, 0, 3, false), kEntries),
      IsOk());
  r = store_->IngestBatch(Batch("j-r00", 1, 2, 1, 3, 1, true), kEntries);
  ASSERT_THAT(r, IsOk());
  EXPECT_TRUE(r->step_completed);
  auto steps = store_->LoadRunSteps("j-r00", 1);
  ASSERT_THAT(steps, IsOk());
  ASSERT_EQ(steps->size(), 2u);
  EXPECT_EQ((*steps)[1].step, 1);
  ASSERT_EQ((*steps)[1].fingerprints.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ((*steps)[1].fingerprints[i].index(), i);
    EXPECT_EQ((*steps)[1].fingerprints[i].hash_hi(), 1000u + i);
  }
  EXPECT_EQ((*steps)[1].step_digest, "d1");
}

TEST_F(StoreJobsTest, MalformedBatchesChangeNothing) {
  ASSERT_THAT(store_->InsertJob(MakeJob("j", 1), TensorManifest(), ""), IsOk());
  MarkRunning("j", 0);
  // Index gap inside a batch.
  FingerprintBatch gap = Batch("j-r00", 1, 0, 0, 0, 4, true);
  gap.mutable_fingerprints(2)->set_index(3);
  EXPECT_THAT(
      store_->IngestBatch(gap, kEntries),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("batch.fingerprints[2].index: 3, expected 2")));
  // Past the manifest.
  EXPECT_THAT(
      store_->IngestBatch(Batch("j-r00", 1, 0, 0, 0, 5, true), kEntries),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("exceeds the manifest's 4 entries")));
  // A completed step with too few fingerprints.
  EXPECT_THAT(
      store_->IngestBatch(Batch("j-r00", 1, 0, 0, 0, 3, true), kEntries),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("step 0 has 3 fingerprints, the manifest has "
                         "4")));
  EXPECT_EQ(*store_->NextSequence("j-r00"), 0);
  EXPECT_TRUE(store_->LoadRunSteps("j-r00", 1)->empty());
  // The same step completed twice (under a new sequence) is refused.
  ASSERT_THAT(
      store_->IngestBatch(Batch("j-r00", 1, 0, 0, 0, 4, true), kEntries),
      IsOk());
  EXPECT_THAT(
      store_->IngestBatch(Batch("j-r00", 1, 1, 0, 0, 4, true), kEntries),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("already complete")));
  EXPECT_EQ(*store_->NextSequence("j-r00"), 1);
  EXPECT_EQ(store_->LoadRunSteps("j-r00", 1)->size(), 1u);
}

// Batches from many threads are committed in groups; each must get the
// result it would get alone, and a refused or duplicate batch in a group
// must leave the others intact.
TEST_F(StoreJobsTest, ConcurrentBatchesGetTheirOwnResults) {
  constexpr int kRuns = 6;
  constexpr int kSteps = 25;
  ASSERT_THAT(store_->InsertJob(MakeJob("j", 1, kRuns), TensorManifest(), ""),
              IsOk());
  for (int r = 0; r < kRuns; ++r) MarkRunning("j", r);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < kRuns; ++r) {
    threads.emplace_back([&, r] {
      const std::string run = "j-r0" + std::to_string(r);
      for (int s = 0; s < kSteps; ++s) {
        auto ok =
            store_->IngestBatch(Batch(run, 1, s, s, 0, 4, true), kEntries);
        if (!ok.ok() || ok->duplicate || !ok->step_completed) ++failures;
        // A resent batch: acknowledged as a duplicate, nothing changes.
        auto dup =
            store_->IngestBatch(Batch(run, 1, s, s, 0, 4, true), kEntries);
        if (!dup.ok() || !dup->duplicate) ++failures;
        // A stale attempt and a malformed batch are refused.
        auto stale = store_->IngestBatch(
            Batch(run, 2, s + 1, s + 1, 0, 4, true), kEntries);
        if (stale.status().code() != absl::StatusCode::kAborted) ++failures;
        auto short_step = store_->IngestBatch(
            Batch(run, 1, s + 1, s + 1, 0, 3, true), kEntries);
        if (short_step.status().code() != absl::StatusCode::kInvalidArgument) {
          ++failures;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  for (int r = 0; r < kRuns; ++r) {
    const std::string run = "j-r0" + std::to_string(r);
    EXPECT_EQ(*store_->NextSequence(run), kSteps) << run;
    auto steps = store_->LoadRunSteps(run, 1);
    ASSERT_THAT(steps, IsOk());
    ASSERT_EQ(steps->size(), static_cast<size_t>(kSteps)) << run;
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_EQ((*steps)[s].step, s);
      EXPECT_EQ((*steps)[s].step_digest, "d" + std::to_string(s));
      ASSERT_EQ((*steps)[s].fingerprints.size(), 4u);
      EXPECT_EQ((*steps)[s].fingerprints[3].hash_hi(), 1000u * s + 3);
    }
  }
}

// A completed step is stored as the serialized FingerprintBatch holding only
// its fingerprints and step digest; the encoder writes those bytes directly.
TEST(StoreBlobTest, StepBlobIsTheSerializedFingerprintOnlyBatch) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/blob.db";
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::remove((path + suffix).c_str());
  }
  StoreOptions o;
  o.path = path;
  std::unique_ptr<Store> store = std::move(Store::Open(o).value());
  Job job;
  job.set_job_id("j");
  v1::Run* run = job.add_runs();
  run->set_run_id("j-r00");
  run->set_job_id("j");
  run->set_attempt(1);
  run->set_state(RUN_RUNNING);
  ASSERT_THAT(store->InsertJob(job, TensorManifest(), ""), IsOk());
  // Step 0 in one batch; step 1 split over two, with an empty stats
  // message, negative values and a fingerprint with every field default.
  FingerprintBatch a;
  a.set_run_id("j-r00");
  a.set_attempt(1);
  for (int i = 0; i < 3; ++i) {
    TensorFingerprint* fp = a.add_fingerprints();
    fp->set_index(i);
    fp->set_hash_hi(0xfedcba9876543210ULL + i);
    fp->set_hash_lo(i);
    fp->mutable_stats()->set_sum(-1.5 * i);
    fp->mutable_stats()->set_l2(2.0);
    fp->mutable_stats()->set_nan_count(i);
  }
  a.set_step_complete(true);
  a.set_step_digest("0123456789abcdef0123456789abcdef");
  ASSERT_THAT(store->IngestBatch(a, 3), IsOk());
  FingerprintBatch b1;
  b1.set_run_id("j-r00");
  b1.set_attempt(1);
  b1.set_sequence(1);
  b1.set_step(1);
  b1.add_fingerprints();  // index 0, every field default
  b1.add_fingerprints()->set_index(1);
  b1.mutable_fingerprints(1)->mutable_stats();
  ASSERT_THAT(store->IngestBatch(b1, 3), IsOk());
  FingerprintBatch b2;
  b2.set_run_id("j-r00");
  b2.set_attempt(1);
  b2.set_sequence(2);
  b2.set_step(1);
  b2.add_fingerprints()->set_index(2);
  b2.mutable_fingerprints(0)->set_hash_hi(~0ULL);
  b2.set_step_complete(true);
  b2.set_step_digest("fedcba9876543210fedcba9876543210");
  ASSERT_THAT(store->IngestBatch(b2, 3), IsOk());

  FingerprintBatch want0;
  *want0.mutable_fingerprints() = a.fingerprints();
  want0.set_step_digest(a.step_digest());
  FingerprintBatch want1;
  *want1.add_fingerprints() = b1.fingerprints(0);
  *want1.add_fingerprints() = b1.fingerprints(1);
  *want1.add_fingerprints() = b2.fingerprints(0);
  want1.set_step_digest(b2.step_digest());
  auto db = Database::Open(path, false);
  ASSERT_THAT(db, IsOk());
  auto st = (*db)->Prepare(
      "SELECT fingerprints FROM run_steps WHERE run_id = 'j-r00' ORDER BY "
      "step");
  ASSERT_THAT(st, IsOk());
  for (const FingerprintBatch* want : {&want0, &want1}) {
    ASSERT_THAT((*st)->Step(), IsOk());
    std::string bytes;
    ASSERT_TRUE(want->SerializeToString(&bytes));
    EXPECT_EQ((*st)->ColumnBlob(0), bytes);
  }
}

TEST_F(StoreJobsTest, RestartDropsEarlierAttempts) {
  ASSERT_THAT(store_->InsertJob(MakeJob("j", 1), TensorManifest(), ""), IsOk());
  MarkRunning("j", 0);
  ASSERT_THAT(
      store_->IngestBatch(Batch("j-r00", 1, 0, 0, 0, 4, true), kEntries),
      IsOk());
  ASSERT_THAT(
      store_->IngestBatch(Batch("j-r00", 1, 1, 1, 0, 2, false), kEntries),
      IsOk());
  v1::Run run = (*store_->GetJob("j"))->runs(0);
  run.set_attempt(2);
  run.set_state(RUN_ASSIGNED);
  ASSERT_THAT(store_->RestartRun(run), IsOk());
  EXPECT_EQ(*store_->NextSequence("j-r00"), 0);
  EXPECT_TRUE(store_->LoadRunSteps("j-r00", 1)->empty());
  // The old attempt's late batch is refused; the new attempt starts at 0.
  EXPECT_THAT(
      store_->IngestBatch(Batch("j-r00", 1, 2, 1, 2, 2, true), kEntries),
      StatusIs(absl::StatusCode::kAborted));
  ASSERT_THAT(
      store_->IngestBatch(Batch("j-r00", 2, 0, 0, 0, 4, true), kEntries),
      IsOk());
  EXPECT_EQ(store_->LoadRunSteps("j-r00", 2)->size(), 1u);
  // UpdateRun refuses a changed attempt.
  run.set_attempt(3);
  EXPECT_THAT(store_->UpdateRun(run), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(StoreJobsTest, Certificates) {
  for (int i = 0; i < 3; ++i) {
    Certificate c;
    c.set_certificate_id("c" + std::to_string(i));
    c.set_model_digest(i < 2 ? "m1" : "m2");
    c.set_hardware_class_digest("h");
    c.set_level(i == 0 ? RUN_TO_RUN : CROSS_DEVICE);
    c.set_issued_unix_ms(10 + i);
    ASSERT_THAT(store_->InsertCertificate(c), IsOk());
  }
  EXPECT_EQ((*store_->GetCertificate("c1"))->model_digest(), "m1");
  EXPECT_FALSE(store_->GetCertificate("zz")->has_value());
  auto all = store_->ListCertificates("", "", LEVEL_UNSPECIFIED, 50);
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].certificate_id(), "c2");
  EXPECT_EQ(store_->ListCertificates("m1", "", LEVEL_UNSPECIFIED, 50)->size(),
            2u);
  EXPECT_EQ(store_->ListCertificates("m1", "h", RUN_TO_RUN, 50)->size(), 1u);
}

TEST_F(StoreJobsTest, CertificateInsertionIsIdempotent) {
  Certificate c;
  c.set_certificate_id("cert-1");
  c.set_model_digest("m1");
  c.set_level(RUN_TO_RUN);
  ASSERT_THAT(store_->InsertCertificate(c), IsOk());
  EXPECT_THAT(store_->InsertCertificate(c), IsOk());
  EXPECT_EQ(store_->ListCertificates("", "", LEVEL_UNSPECIFIED, 50)->size(),
            1u);
}

TEST_F(StoreJobsTest, FinishJobStoresStateReportAndCertificatesTogether) {
  Job job = MakeJob("job-a", 100);
  ASSERT_THAT(store_->InsertJob(job, TensorManifest(), ""), IsOk());
  EXPECT_FALSE(store_->GetJobReport("job-a")->has_value());
  EXPECT_TRUE(store_->ListJobsAwaitingVerdict()->empty());

  // A finished state stored without its verdict awaits one.
  job.set_state(JOB_FAILED);
  job.set_failure_reason("run 0 failed");
  ASSERT_THAT(store_->UpdateJob(job), IsOk());
  EXPECT_THAT(*store_->ListJobsAwaitingVerdict(),
              ::testing::ElementsAre("job-a"));

  Report report;
  report.set_job_id("job-a");
  report.set_verdict(FAILED);
  report.set_summary("job failed: run 0 failed");
  Certificate c;
  c.set_certificate_id("cert-a");
  c.set_model_digest("mjob-a");
  ASSERT_THAT(store_->FinishJob(job, report, {c}), IsOk());
  auto stored = store_->GetJobReport("job-a");
  ASSERT_THAT(stored, IsOk());
  ASSERT_TRUE(stored->has_value());
  EXPECT_EQ((*stored)->verdict(), FAILED);
  EXPECT_TRUE((*store_->GetCertificate("cert-a")).has_value());
  EXPECT_TRUE(store_->ListJobsAwaitingVerdict()->empty());

  // The first verdict stands.
  Report other = report;
  other.set_verdict(REPRODUCIBLE);
  ASSERT_THAT(store_->FinishJob(job, other, {c}), IsOk());
  EXPECT_EQ((*store_->GetJobReport("job-a"))->verdict(), FAILED);
}

TEST_F(StoreJobsTest, RefusedWritesStoreNothing) {
  Job job = MakeJob("job-b", 100);
  ASSERT_THAT(store_->InsertJob(job, TensorManifest(), ""), IsOk());
  ASSERT_THAT(store_->SetReadOnlyForTesting(true), IsOk());
  v1::Run run = job.runs(0);
  run.set_state(RUN_RUNNING);
  EXPECT_FALSE(store_->UpdateRun(run).ok());
  Report report;
  report.set_verdict(REPRODUCIBLE);
  Certificate c;
  c.set_certificate_id("cert-b");
  job.set_state(JOB_SUCCEEDED);
  EXPECT_FALSE(store_->FinishJob(job, report, {c}).ok());
  EXPECT_FALSE(store_->InsertCertificate(c).ok());
  ASSERT_THAT(store_->SetReadOnlyForTesting(false), IsOk());
  EXPECT_EQ((*store_->GetJob("job-b"))->runs(0).state(), RUN_QUEUED);
  EXPECT_EQ((*store_->GetJob("job-b"))->state(), JOB_QUEUED);
  EXPECT_FALSE(store_->GetJobReport("job-b")->has_value());
  EXPECT_FALSE(store_->GetCertificate("cert-b")->has_value());
}

TEST_F(StoreJobsTest, FinishJobIndexesTheFirstVerdictForGoldenLookups) {
  Job job = MakeJob("job-g", 100);
  (*job.mutable_spec()->mutable_labels())["golden"] = "main";
  ASSERT_THAT(store_->InsertJob(job, TensorManifest(), ""), IsOk());
  job.set_state(JOB_SUCCEEDED);
  Report report;
  report.set_verdict(REPRODUCIBLE);
  ASSERT_THAT(store_->FinishJob(job, report, {}), IsOk());
  auto found = store_->FindGoldenJob("golden", "main", "mjob-g", "cjob-g", "");
  ASSERT_THAT(found, IsOk());
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ(**found, "job-g");
  // A later verdict neither replaces the report nor the index.
  report.set_verdict(NONDETERMINISTIC);
  ASSERT_THAT(store_->FinishJob(job, report, {}), IsOk());
  EXPECT_TRUE(store_->FindGoldenJob("golden", "main", "mjob-g", "cjob-g", "")
                  ->has_value());
}

}  // namespace
}  // namespace lockstep::store
