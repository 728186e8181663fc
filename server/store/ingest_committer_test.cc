// The store's ingest committer: one thread that stores every queued batch in
// one transaction and answers each batch only after that commit.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/store/sqlite.h"
#include "server/store/store.h"

namespace lockstep::store {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::IsOkAndHolds;
using ::lockstep::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace ::lockstep::v1;  // NOLINT

constexpr int kEntries = 4;

FingerprintBatch Batch(const std::string& run, int64_t seq, int step) {
  FingerprintBatch b;
  b.set_run_id(run);
  b.set_attempt(1);
  b.set_sequence(seq);
  b.set_step(step);
  for (int i = 0; i < kEntries; ++i) {
    auto* fp = b.add_fingerprints();
    fp->set_index(i);
    fp->set_hash_hi(1000 * step + i);
    fp->set_hash_lo(7);
  }
  b.set_step_complete(true);
  b.set_step_digest(absl::StrCat("d", step));
  return b;
}

// What the committer answered, in the order it answered.
struct Answers {
  absl::Mutex mu;
  std::vector<std::pair<std::string, absl::StatusOr<IngestResult>>> got
      ABSL_GUARDED_BY(mu);

  IngestDone For(const std::string& name) {
    return [this, name](absl::StatusOr<IngestResult> r) {
      absl::MutexLock lock(&mu);
      got.emplace_back(name, std::move(r));
    };
  }
  void WaitFor(size_t n) {
    absl::MutexLock lock(&mu);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return got.size() >= n;
    };
    ASSERT_TRUE(
        mu.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30)))
        << "the committer answered " << got.size() << " of " << n;
  }
  std::vector<std::string> Names() {
    absl::MutexLock lock(&mu);
    std::vector<std::string> names;
    for (const auto& [name, r] : got) names.push_back(name);
    return names;
  }
  absl::StatusOr<IngestResult> Result(const std::string& name) {
    absl::MutexLock lock(&mu);
    for (const auto& [n, r] : got) {
      if (n == name) return r;
    }
    return absl::NotFoundError(name);
  }
};

class IngestCommitterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    path_ = absl::StrCat(
        tmp ? tmp : "/tmp", "/committer-",
        ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".db");
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::remove((path_ + suffix).c_str());
    }
    Open(int64_t{64} << 20);
  }

  void Open(int64_t max_queue_bytes, int64_t max_bytes = 0,
            int checkpoint_pages = 1000) {
    StoreOptions o;
    o.path = path_;
    o.max_ingest_queue_bytes = max_queue_bytes;
    o.max_bytes = max_bytes;
    o.checkpoint_pages = checkpoint_pages;
    store_ = std::move(Store::Open(o).value());
    Job job;
    job.set_job_id("j");
    job.set_state(JOB_RUNNING);
    job.mutable_spec()->mutable_model()->set_name("mlp");
    for (int i = 0; i < kRuns; ++i) {
      v1::Run* r = job.add_runs();
      r->set_run_id(RunId(i));
      r->set_job_id("j");
      r->set_index(i);
      r->set_attempt(1);
      r->set_state(RUN_RUNNING);
    }
    ASSERT_THAT(store_->InsertJob(job, TensorManifest(), ""), IsOk());
  }

  static std::string RunId(int i) { return absl::StrCat("j-r0", i); }

  // Frames the WAL file has room for: the most the WAL has held (SQLite
  // writes a restarted WAL over the old one without shrinking the file).
  int64_t WalFrames() const {
    struct stat st;
    if (::stat((path_ + "-wal").c_str(), &st) != 0 || st.st_size <= 32) {
      return 0;
    }
    return (st.st_size - 32) / (24 + 4096);
  }

  // Completed steps of `run` as another connection sees them: only what is
  // committed.
  int64_t CommittedSteps(const std::string& run) {
    auto db = Database::Open(path_, false);
    EXPECT_THAT(db, IsOk());
    auto st = (*db)->Prepare(absl::StrCat(
        "SELECT COUNT(*) FROM run_steps WHERE run_id = '", run, "'"));
    EXPECT_THAT(st, IsOk());
    EXPECT_THAT((*st)->Step(), IsOk());
    return (*st)->ColumnInt64(0);
  }

  static constexpr int kRuns = 4;
  std::string path_;
  std::unique_ptr<Store> store_;
};

TEST_F(IngestCommitterTest, AnswersEachStreamInOrderOnlyAfterItsCommit) {
  constexpr int kSteps = 30;
  absl::Mutex mu;
  // Per run: the sequences answered, in order, and whether another
  // connection saw each step committed when its answer came.
  std::map<std::string, std::vector<int64_t>> answered;
  int not_yet_committed = 0;
  int refused = 0;
  std::vector<std::thread> streams;
  for (int w = 0; w < kRuns; ++w) {
    streams.emplace_back([&, w] {
      for (int s = 0; s < kSteps; ++s) {
        store_->SubmitIngest(Batch(RunId(w), s, s), kEntries,
                             [&, w, s](absl::StatusOr<IngestResult> r) {
                               const bool committed =
                                   CommittedSteps(RunId(w)) >= s + 1;
                               absl::MutexLock lock(&mu);
                               if (!r.ok() || r->duplicate) ++refused;
                               if (!committed) ++not_yet_committed;
                               answered[RunId(w)].push_back(s);
                             });
      }
    });
  }
  for (auto& t : streams) t.join();
  // Every batch is answered (the stop commits what is still queued).
  store_->StopIngest();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(refused, 0);
  EXPECT_EQ(not_yet_committed, 0);
  for (int w = 0; w < kRuns; ++w) {
    std::vector<int64_t> want;
    for (int s = 0; s < kSteps; ++s) want.push_back(s);
    EXPECT_EQ(answered[RunId(w)], want) << RunId(w);
    EXPECT_EQ(CommittedSteps(RunId(w)), kSteps);
  }
}

TEST_F(IngestCommitterTest, OneRefusedBatchFailsNothingElseInItsGroup) {
  Answers answers;
  store_->PauseIngestForTesting(true);
  FingerprintBatch gap = Batch(RunId(1), 0, 0);
  gap.mutable_fingerprints(2)->set_index(3);
  store_->SubmitIngest(Batch(RunId(0), 0, 0), kEntries, answers.For("a"));
  store_->SubmitIngest(gap, kEntries, answers.For("gap"));
  store_->SubmitIngest(Batch(RunId(0), 1, 1), kEntries, answers.For("b"));
  // Run 1 again, as if the refused batch had never been: it stores.
  store_->SubmitIngest(Batch(RunId(1), 0, 0), kEntries, answers.For("c"));
  // Step 0 of run 0 again under a new sequence: refused by the table's
  // primary key when it writes the step.
  store_->SubmitIngest(Batch(RunId(0), 2, 0), kEntries, answers.For("again"));
  store_->SubmitIngest(Batch(RunId(0), 2, 2), kEntries, answers.For("d"));
  store_->SubmitIngest(Batch(RunId(2), 5, 0), kEntries, answers.For("skip"));
  store_->SubmitIngest(Batch(RunId(0), 0, 0), kEntries, answers.For("dup"));
  EXPECT_GT(store_->IngestQueueBytes(), 0);
  EXPECT_TRUE(answers.Names().empty());  // nothing answered before commit
  store_->PauseIngestForTesting(false);
  answers.WaitFor(8);
  EXPECT_THAT(answers.Names(),
              ElementsAre("a", "gap", "b", "c", "again", "d", "skip", "dup"));
  for (const char* ok : {"a", "b", "c", "d"}) {
    auto r = answers.Result(ok);
    ASSERT_THAT(r, IsOk()) << ok;
    EXPECT_TRUE(r->step_completed) << ok;
    EXPECT_FALSE(r->duplicate) << ok;
  }
  EXPECT_THAT(answers.Result("gap"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch.fingerprints[2].index")));
  EXPECT_THAT(answers.Result("again"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("step 0 of run j-r00 is already complete")));
  EXPECT_THAT(answers.Result("skip"),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("expects 0")));
  ASSERT_THAT(answers.Result("dup"), IsOk());
  EXPECT_TRUE(answers.Result("dup")->duplicate);
  // Exactly the accepted batches are stored, and the sequences follow them.
  EXPECT_EQ(CommittedSteps(RunId(0)), 3);
  EXPECT_EQ(CommittedSteps(RunId(1)), 1);
  EXPECT_EQ(CommittedSteps(RunId(2)), 0);
  EXPECT_THAT(store_->NextSequence(RunId(0)), IsOkAndHolds(3));
  EXPECT_THAT(store_->NextSequence(RunId(1)), IsOkAndHolds(1));
  auto steps = store_->LoadRunSteps(RunId(0), 1);
  ASSERT_THAT(steps, IsOk());
  ASSERT_EQ(steps->size(), 3u);
  EXPECT_EQ((*steps)[2].step, 2);
}

TEST_F(IngestCommitterTest, ABatchRefusedAfterItsFirstWriteLeavesNoTrace) {
  // A trigger refuses run 1's sequence update: its batch has already
  // inserted its step by then, and SQLite undoes only the failed statement.
  {
    auto db = Database::Open(path_, false);
    ASSERT_THAT(db, IsOk());
    ASSERT_THAT(
        (*db)->Exec(absl::StrCat(
            "CREATE TRIGGER refuse_sequence BEFORE UPDATE OF "
            "next_sequence ON runs WHEN NEW.run_id = '",
            RunId(1), "' BEGIN SELECT RAISE(ABORT, 'sequence refused'); END")),
        IsOk());
  }
  Answers answers;
  store_->PauseIngestForTesting(true);
  store_->SubmitIngest(Batch(RunId(0), 0, 0), kEntries, answers.For("a"));
  store_->SubmitIngest(Batch(RunId(1), 0, 0), kEntries, answers.For("refused"));
  store_->SubmitIngest(Batch(RunId(0), 1, 1), kEntries, answers.For("b"));
  store_->PauseIngestForTesting(false);
  answers.WaitFor(3);
  EXPECT_THAT(answers.Names(), ElementsAre("a", "refused", "b"));
  EXPECT_THAT(answers.Result("a"), IsOk());
  EXPECT_THAT(answers.Result("b"), IsOk());
  EXPECT_THAT(answers.Result("refused").status(), ::testing::Not(IsOk()));
  EXPECT_THAT(answers.Result("refused").status().message(),
              HasSubstr("sequence refused"));
  // The group committed its other batches; the refused one's step insert
  // was rolled back to its savepoint with it.
  EXPECT_EQ(CommittedSteps(RunId(0)), 2);
  EXPECT_EQ(CommittedSteps(RunId(1)), 0);
  EXPECT_THAT(store_->NextSequence(RunId(0)), IsOkAndHolds(2));
  EXPECT_THAT(store_->NextSequence(RunId(1)), IsOkAndHolds(0));
}

TEST_F(IngestCommitterTest, ReportsTheQueueFullByBytesUntilItDrains) {
  const std::vector<FingerprintBatch> batches = {
      Batch(RunId(0), 0, 0), Batch(RunId(0), 1, 1), Batch(RunId(0), 2, 2),
      Batch(RunId(1), 0, 0)};
  std::vector<int64_t> bytes;
  for (const auto& b : batches) {
    bytes.push_back(static_cast<int64_t>(b.ByteSizeLong()));
  }
  store_.reset();
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::remove((path_ + suffix).c_str());
  }
  // Room for exactly the first three.
  Open(bytes[0] + bytes[1] + bytes[2]);
  Answers answers;
  store_->PauseIngestForTesting(true);
  EXPECT_TRUE(store_->SubmitIngest(batches[0], kEntries, answers.For("0")));
  EXPECT_TRUE(store_->SubmitIngest(batches[1], kEntries, answers.For("1")));
  // The third reaches the limit: queued all the same, the caller told to
  // hold back.
  EXPECT_FALSE(store_->SubmitIngest(batches[2], kEntries, answers.For("2")));
  EXPECT_FALSE(store_->SubmitIngest(batches[3], kEntries, answers.For("3")));
  EXPECT_EQ(store_->IngestQueueBytes(),
            bytes[0] + bytes[1] + bytes[2] + bytes[3]);
  EXPECT_TRUE(answers.Names().empty());
  store_->PauseIngestForTesting(false);
  answers.WaitFor(4);
  EXPECT_THAT(answers.Names(), ElementsAre("0", "1", "2", "3"));
  EXPECT_EQ(store_->IngestQueueBytes(), 0);
  EXPECT_TRUE(
      store_->SubmitIngest(Batch(RunId(0), 3, 3), kEntries, answers.For("4")));
  answers.WaitFor(5);
  for (const char* name : {"0", "1", "2", "3", "4"}) {
    EXPECT_THAT(answers.Result(name), IsOk()) << name;
  }
  EXPECT_EQ(CommittedSteps(RunId(0)), 4);
}

TEST_F(IngestCommitterTest, StopCommitsWhatIsQueuedAndRefusesTheRest) {
  Answers answers;
  store_->PauseIngestForTesting(true);
  for (int s = 0; s < 10; ++s) {
    store_->SubmitIngest(Batch(RunId(s % 2), s / 2, s / 2), kEntries,
                         answers.For(absl::StrCat(s)));
  }
  // Stopping lets a paused committer go on: what is queued is stored.
  store_->StopIngest();
  EXPECT_EQ(answers.Names().size(), 10u);
  for (int s = 0; s < 10; ++s) {
    EXPECT_THAT(answers.Result(absl::StrCat(s)), IsOk()) << s;
  }
  // After the stop: refused at once, with what to do.
  store_->SubmitIngest(Batch(RunId(0), 5, 5), kEntries, answers.For("late"));
  EXPECT_THAT(answers.Result("late"), StatusIs(absl::StatusCode::kUnavailable,
                                               HasSubstr("resend the batch")));
  EXPECT_THAT(store_->IngestBatch(Batch(RunId(0), 5, 5), kEntries),
              StatusIs(absl::StatusCode::kUnavailable));
  // Everything answered OK is in the file after it is closed and reopened.
  store_.reset();
  StoreOptions o;
  o.path = path_;
  auto reopened = Store::Open(o);
  ASSERT_THAT(reopened, IsOk());
  EXPECT_THAT((*reopened)->NextSequence(RunId(0)), IsOkAndHolds(5));
  EXPECT_THAT((*reopened)->NextSequence(RunId(1)), IsOkAndHolds(5));
  auto steps = (*reopened)->LoadRunSteps(RunId(1), 1);
  ASSERT_THAT(steps, IsOk());
  EXPECT_EQ(steps->size(), 5u);
}

// Reads run on a connection of their own: while the writer is held (as
// during a group's commit and fsync) they still answer, from the last
// commit, and every read sees each commit as soon as it is made (no read
// transaction is left open on a stale snapshot).
TEST_F(IngestCommitterTest, ReadsDoNotWaitForTheWriter) {
  for (int s = 0; s < 3; ++s) {
    ASSERT_THAT(store_->IngestBatch(Batch(RunId(0), s, s), kEntries), IsOk());
  }
  TokenRecord token;
  token.name = "ci";
  token.role = "viewer";
  token.token_sha256 = std::string(64, 'a');
  token.created_unix_ms = 1;
  AdminLogEntry log;
  log.at_unix_ms = 1;
  log.principal = "local:test";
  log.action = "token_create";
  log.target = "ci";
  log.outcome = "ok";
  ASSERT_THAT(store_->InsertToken(token, log), IsOk());
  absl::Notification read;
  std::thread reader;
  store_->HoldWriterForTesting([&] {
    reader = std::thread([&] {
      auto job = store_->GetJob("j");
      EXPECT_THAT(job, IsOk());
      EXPECT_TRUE(job.ok() && job->has_value());
      auto jobs = store_->ListJobs(JobQuery{});
      EXPECT_THAT(jobs, IsOk());
      EXPECT_EQ(jobs.ok() ? jobs->size() : 0, 1u);
      auto steps = store_->LoadRunSteps(RunId(0), 1);
      EXPECT_THAT(steps, IsOk());
      EXPECT_EQ(steps.ok() ? steps->size() : 0, 3u);
      EXPECT_THAT(store_->GetJobReport("j"), IsOk());
      EXPECT_THAT(store_->ListCertificates("", "", v1::LEVEL_UNSPECIFIED, 10),
                  IsOk());
      // Every authenticated call's token check.
      auto found = store_->FindTokenByHash(std::string(64, 'a'));
      EXPECT_THAT(found, IsOk());
      EXPECT_TRUE(found.ok() && found->has_value());
      EXPECT_THAT(store_->ListTokens(), IsOk());
      EXPECT_THAT(store_->ListAdminLog(10), IsOk());
      read.Notify();
    });
    EXPECT_TRUE(read.WaitForNotificationWithTimeout(absl::Seconds(10)))
        << "the reads waited for the writer";
  });
  reader.join();
  // A revoked token is refused from the revocation's commit on.
  log.action = "token_revoke";
  ASSERT_THAT(store_->RevokeToken("ci", 2, log), IsOk());
  auto revoked = store_->FindTokenByHash(std::string(64, 'a'));
  ASSERT_THAT(revoked, IsOk());
  ASSERT_TRUE(revoked->has_value());
  EXPECT_EQ((*revoked)->revoked_unix_ms, 2);
  for (int s = 3; s < 8; ++s) {
    ASSERT_THAT(store_->IngestBatch(Batch(RunId(0), s, s), kEntries), IsOk());
    auto steps = store_->LoadRunSteps(RunId(0), 1);
    ASSERT_THAT(steps, IsOk());
    EXPECT_EQ(steps->size(), static_cast<size_t>(s + 1));
    auto job = store_->GetJob("j");
    ASSERT_THAT(job, IsOk());
  }
}

// Reads on their own connection hold WAL snapshots that a PASSIVE
// checkpoint must leave alone, and SQLite starts the WAL over only when a
// write finds every frame copied: with reads going on all the time the WAL
// grew without bound. A commit past 4 x checkpoint_pages waits for the
// reads and copies everything, so the WAL stays bounded. The WAL file's
// size is the most it ever held.
TEST_F(IngestCommitterTest, TheWalStaysBoundedWhileReadsGoOn) {
  store_.reset();
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::remove((path_ + suffix).c_str());
  }
  Open(int64_t{64} << 20, 0, /*checkpoint_pages=*/8);
  {
    // An empty WAL to count from.
    auto db = Database::Open(path_, false);
    ASSERT_THAT(db, IsOk());
    EXPECT_THAT((*db)->QueryText("PRAGMA wal_checkpoint(TRUNCATE)"),
                IsOkAndHolds("0"));
  }
  ASSERT_EQ(WalFrames(), 0);
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0};
  std::thread reader([&] {
    for (int i = 0; i < 1000000 && !stop.load(); ++i) {
      EXPECT_THAT(store_->ListJobs(JobQuery{}), IsOk());
      EXPECT_THAT(store_->LoadRunSteps(RunId(0), 1), IsOk());
      ++reads;
    }
  });
  constexpr int kSteps = 1500;
  int most = 0;  // frames one commit adds, at most
  for (int s = 0; s < kSteps; ++s) {
    const int64_t before = WalFrames();
    ASSERT_THAT(store_->IngestBatch(Batch(RunId(0), s, s), kEntries), IsOk());
    most = std::max<int>(most, static_cast<int>(WalFrames() - before));
  }
  stop = true;
  reader.join();
  EXPECT_GT(reads.load(), 0);
  // 32 pages and the commit that passed them.
  EXPECT_LE(WalFrames(), 32 + 2 * std::max(most, 8));
  EXPECT_THAT(store_->NextSequence(RunId(0)), IsOkAndHolds(kSteps));
  EXPECT_THAT(Store::Open([&] {
                StoreOptions bad;
                bad.path = path_ + ".other";
                bad.checkpoint_pages = 0;
                return bad;
              }()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("checkpoint_pages: 0 is below 1")));
}

// The database reaching its size limit in the middle of a group: SQLite
// may then roll back the group's whole transaction, savepoints and all.
// Every batch of the group is answered "full" (retryable: the worker keeps
// it and resends), none is acknowledged without being stored, and nothing
// committed before is lost.
TEST_F(IngestCommitterTest, AFullDatabaseAnswersTheGroupFullAndAcksOnlyStored) {
  constexpr int kWide = 400;  // fingerprints per batch: several pages each
  auto wide = [&](const std::string& run, int64_t seq) {
    FingerprintBatch b;
    b.set_run_id(run);
    b.set_attempt(1);
    b.set_sequence(seq);
    b.set_step(static_cast<int>(seq));
    for (int i = 0; i < kWide; ++i) {
      auto* fp = b.add_fingerprints();
      fp->set_index(i);
      fp->set_hash_hi(0x9e3779b97f4a7c15ull * (seq * kWide + i + 1));
      fp->set_hash_lo(0xc2b2ae3d27d4eb4full * (seq * kWide + i + 1));
    }
    b.set_step_complete(true);
    b.set_step_digest(absl::StrCat("d", seq));
    return b;
  };
  store_.reset();
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::remove((path_ + suffix).c_str());
  }
  Open(int64_t{64} << 20, 256 << 10);
  for (int round = 0; round < 8; ++round) {
    Answers answers;
    store_->PauseIngestForTesting(true);
    constexpr int kGroup = 12;
    std::map<std::string, int64_t> next;
    for (int w = 0; w < kRuns; ++w) {
      next[RunId(w)] = store_->NextSequence(RunId(w)).value();
    }
    std::vector<std::pair<std::string, int64_t>> sent;
    for (int i = 0; i < kGroup; ++i) {
      const std::string run = RunId(i % kRuns);
      const int64_t seq = next[run] + i / kRuns;
      sent.emplace_back(run, seq);
      store_->SubmitIngest(wide(run, seq), kWide,
                           answers.For(absl::StrCat(run, "/", seq)));
    }
    store_->PauseIngestForTesting(false);
    answers.WaitFor(kGroup);
    std::map<std::string, int64_t> acked;
    for (const auto& [run, seq] : sent) {
      auto r = answers.Result(absl::StrCat(run, "/", seq));
      if (r.ok()) {
        EXPECT_FALSE(r->duplicate);
        EXPECT_EQ(seq, next[run] + acked[run]) << run << "/" << seq;
        ++acked[run];
      } else {
        EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kResourceExhausted,
                                         HasSubstr("--max_db_bytes=")))
            << run << "/" << seq;
      }
    }
    for (int w = 0; w < kRuns; ++w) {
      EXPECT_THAT(store_->NextSequence(RunId(w)),
                  IsOkAndHolds(next[RunId(w)] + acked[RunId(w)]))
          << RunId(w) << " round " << round;
      EXPECT_EQ(CommittedSteps(RunId(w)), next[RunId(w)] + acked[RunId(w)]);
    }
  }
  EXPECT_TRUE(store_->full()) << "the limit was never reached";
}

}  // namespace
}  // namespace lockstep::store
