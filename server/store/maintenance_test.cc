// verify-db and backup over real files, and the store's behaviour at its
// size limit and on a corrupt file.
#include "server/store/maintenance.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/store/sqlite.h"
#include "server/store/store.h"

namespace lockstep::store {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace ::lockstep::v1;  // NOLINT

constexpr int kEntries = 64;

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class MaintenanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("TEST_TMPDIR");
    base_ = std::string(dir ? dir : "/tmp") + "/maint_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    path_ = base_ + ".db";
    for (const std::string& p : {path_, base_ + ".bak", base_ + ".bak.tmp"}) {
      for (const char* suffix : {"", "-wal", "-shm"}) {
        std::remove((p + suffix).c_str());
      }
    }
  }

  StoreOptions Options(int64_t max_bytes = 0) const {
    StoreOptions o;
    o.path = path_;
    o.synchronous = "NORMAL";
    o.max_bytes = max_bytes;
    return o;
  }

  static Job MakeJob(const std::string& id) {
    Job job;
    job.set_job_id(id);
    job.set_state(JOB_RUNNING);
    job.set_model_digest("m");
    job.set_config_digest("c");
    job.set_created_unix_ms(1);
    v1::Run* r = job.add_runs();
    r->set_run_id(id + "-r00");
    r->set_job_id(id);
    r->set_attempt(1);
    r->set_state(RUN_RUNNING);
    return job;
  }

  static FingerprintBatch Batch(const std::string& run, int step) {
    FingerprintBatch b;
    b.set_run_id(run);
    b.set_attempt(1);
    b.set_sequence(step);
    b.set_step(step);
    for (int i = 0; i < kEntries; ++i) {
      auto* fp = b.add_fingerprints();
      fp->set_index(i);
      fp->set_hash_hi(1000003ull * step + i);
      fp->set_hash_lo(~(1000003ull * step + i));
      fp->mutable_stats()->set_sum(0.25 * (step + i));
      fp->mutable_stats()->set_l2(1.5 * (step + i));
    }
    b.set_step_complete(true);
    b.set_step_digest("d" + std::to_string(step));
    return b;
  }

  // A store with one job whose run has `steps` stored steps.
  void Fill(Store* store, const std::string& job_id, int steps) {
    TensorManifest manifest;
    manifest.set_steps(steps);
    for (int i = 0; i < kEntries; ++i) manifest.add_entries()->set_layer("l");
    ASSERT_THAT(store->InsertJob(MakeJob(job_id), manifest, ""), IsOk());
    for (int s = 0; s < steps; ++s) {
      ASSERT_THAT(store->IngestBatch(Batch(job_id + "-r00", s), kEntries),
                  IsOk());
    }
  }

  std::string base_, path_;
};

TEST_F(MaintenanceTest, VerifyPassesASoundDatabase) {
  {
    auto store = Store::Open(Options());
    ASSERT_THAT(store, IsOk());
    Fill(store->get(), "j1", 5);
  }
  const VerifyResult r = VerifyDatabase(path_);
  EXPECT_TRUE(r.ok) << r.summary;
  EXPECT_THAT(r.summary, StartsWith("OK: " + path_));
  EXPECT_THAT(r.summary,
              HasSubstr(absl::StrCat("schema version ", kSchemaVersion,
                                     ", 1 jobs, 1 runs, 5 "
                                     "stored steps")));
  EXPECT_EQ(r.summary.find('\n'), std::string::npos);
}

TEST_F(MaintenanceTest, VerifyFailsMissingForeignAndTamperedFiles) {
  VerifyResult r = VerifyDatabase(path_);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.summary, HasSubstr("no such file"));

  {
    auto db = Database::Open(path_, true);
    ASSERT_THAT(db, IsOk());
    ASSERT_THAT((*db)->Exec("CREATE TABLE t (x)"), IsOk());
  }
  r = VerifyDatabase(path_);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.summary, HasSubstr("not a Lockstep database"));
  std::remove(path_.c_str());

  { ASSERT_THAT(Store::Open(Options()), IsOk()); }
  {
    auto db = Database::Open(path_, false);
    ASSERT_THAT(db, IsOk());
    ASSERT_THAT((*db)->Exec("DROP INDEX runs_by_job"), IsOk());
  }
  r = VerifyDatabase(path_);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.summary, HasSubstr("index runs_by_job is missing"));

  {
    auto db = Database::Open(path_, false);
    ASSERT_THAT(db, IsOk());
    ASSERT_THAT((*db)->Exec("CREATE INDEX runs_by_job ON runs(job_id);"
                            "PRAGMA foreign_keys = OFF;"
                            "INSERT INTO runs (run_id, job_id, record, state, "
                            "attempt) VALUES ('r', 'nope', x'', 1, 1)"),
                IsOk());
  }
  r = VerifyDatabase(path_);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.summary, HasSubstr("foreign_key_check: a row of runs"));
}

// Overwrites `bytes` bytes at `offset` with 0xA5 (in place).
void Damage(const std::string& path, int64_t offset, int bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset);
  f << std::string(bytes, '\xa5');
}

TEST_F(MaintenanceTest, CorruptFileIsRefusedUntouchedAndVerifyNamesIt) {
  {
    auto store = Store::Open(Options());
    ASSERT_THAT(store, IsOk());
    Fill(store->get(), "j1", 40);
  }
  // A page in the middle: the header is fine, the b-tree is not.
  const std::string sound = ReadAll(path_);
  ASSERT_GT(sound.size(), 8u * 4096);
  Damage(path_, 5 * 4096, 4096);
  const std::string damaged = ReadAll(path_);
  auto store = Store::Open(Options());
  EXPECT_THAT(store.status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(path_ + " is corrupt"),
                             HasSubstr("has not modified the file"),
                             HasSubstr("verify-db --db=" + path_),
                             HasSubstr("lockstep-coordinator backup"))));
  EXPECT_EQ(ReadAll(path_), damaged);
  VerifyResult r = VerifyDatabase(path_);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.summary, StartsWith("FAILED: " + path_ + ": "));
  EXPECT_EQ(r.summary.find('\n'), std::string::npos) << r.summary;
  EXPECT_EQ(ReadAll(path_), damaged);

  // The header: SQLite no longer recognises the file.
  Damage(path_, 0, 16);
  const std::string no_header = ReadAll(path_);
  store = Store::Open(Options());
  EXPECT_THAT(store.status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("is corrupt or not a database"),
                             HasSubstr("verify-db --db=" + path_))));
  EXPECT_EQ(ReadAll(path_), no_header);
  EXPECT_FALSE(VerifyDatabase(path_).ok);
}

TEST_F(MaintenanceTest, BackupWhileTheStoreWritesIsACheckedCopy) {
  auto store = Store::Open(Options());
  ASSERT_THAT(store, IsOk());
  Fill(store->get(), "j1", 10);
  // Uncheckpointed commits sit in the WAL: the copy must hold them.
  const std::string out = base_ + ".bak";
  auto b = BackupDatabase(path_, out);
  ASSERT_THAT(b, IsOk());
  EXPECT_GT(b->pages, 0);
  Fill(store->get(), "j2", 3);  // the source is still writable
  const VerifyResult r = VerifyDatabase(out);
  EXPECT_TRUE(r.ok) << r.summary;
  EXPECT_THAT(r.summary, HasSubstr("1 jobs, 1 runs, 10 stored steps"));
  StoreOptions o = Options();
  o.path = out;
  auto copy = Store::Open(o);
  ASSERT_THAT(copy, IsOk());
  auto steps = (*copy)->LoadRunSteps("j1-r00", 1);
  ASSERT_THAT(steps, IsOk());
  EXPECT_EQ(steps->size(), 10u);
  copy->reset();

  // Never over an existing file.
  const std::string before = ReadAll(out);
  EXPECT_THAT(BackupDatabase(path_, out),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("never overwrites")));
  EXPECT_EQ(ReadAll(out), before);
  EXPECT_THAT(BackupDatabase(base_ + ".missing", base_ + ".bak2"),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(MaintenanceTest, FullDatabaseRefusesNewWorkAndKeepsWhatIsCommitted) {
  {
    auto store = Store::Open(Options());
    ASSERT_THAT(store, IsOk());
    Fill(store->get(), "j1", 3);
  }
  // A limit a little above the current size.
  const int64_t limit = static_cast<int64_t>(ReadAll(path_).size()) + 16 * 4096;
  auto store = Store::Open(Options(limit));
  ASSERT_THAT(store, IsOk());
  TensorManifest manifest;
  manifest.set_steps(1000);
  for (int i = 0; i < kEntries; ++i) manifest.add_entries()->set_layer("l");
  ASSERT_THAT((*store)->InsertJob(MakeJob("j2"), manifest, ""), IsOk());
  absl::Status refused;
  int stored = 0;
  for (; stored < 1000; ++stored) {
    auto r = (*store)->IngestBatch(Batch("j2-r00", stored), kEntries);
    if (!r.ok()) {
      refused = r.status();
      break;
    }
  }
  ASSERT_LT(stored, 1000) << "the limit was never reached";
  EXPECT_THAT(
      refused,
      StatusIs(absl::StatusCode::kResourceExhausted,
               AllOf(HasSubstr("database " + path_ + " is full"),
                     HasSubstr("--max_db_bytes=" + std::to_string(limit)),
                     HasSubstr("nothing committed is lost"))));
  EXPECT_TRUE((*store)->full());
  // New work is refused up front; reads go on.
  EXPECT_THAT((*store)->InsertJob(MakeJob("j3"), manifest, ""),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("new jobs are refused"),
                             HasSubstr("--max_db_bytes="))));
  auto steps = (*store)->LoadRunSteps("j2-r00", 1);
  ASSERT_THAT(steps, IsOk());
  EXPECT_EQ(static_cast<int>(steps->size()), stored);
  EXPECT_THAT((*store)->GetJob("j1"), IsOk());
  store->reset();

  // A larger limit: everything committed is there and writes go on.
  store = Store::Open(Options(limit * 4));
  ASSERT_THAT(store, IsOk());
  EXPECT_FALSE((*store)->full());
  EXPECT_EQ((*store)->LoadRunSteps("j1-r00", 1)->size(), 3u);
  EXPECT_EQ(static_cast<int>((*store)->LoadRunSteps("j2-r00", 1)->size()),
            stored);
  EXPECT_THAT((*store)->IngestBatch(Batch("j2-r00", stored), kEntries), IsOk());
  EXPECT_THAT((*store)->InsertJob(MakeJob("j3"), manifest, ""), IsOk());
  store->reset();
  EXPECT_TRUE(VerifyDatabase(path_).ok);
}

}  // namespace
}  // namespace lockstep::store
