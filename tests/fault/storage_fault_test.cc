// The store under a full disk (the coordinator's --max_db_bytes, SQLite's
// max_page_count) and under a corrupt database file, through the real
// coordinator binary, and its backup and verify-db subcommands.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fault/fault_cluster.h"
#include "tests/testing/subprocess.h"

namespace lockstep::fault {
namespace {

using ::lockstep::testing::PollUntil;
using ::lockstep::testing::ReadFileOrEmpty;
using ::lockstep::testing::RunCommand;
using ::testing::HasSubstr;

std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int64_t FileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

class StorageFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fc_ = std::make_unique<FaultCluster>(
        absl::StrCat(
            testing::TempDir(), "/",
            ::testing::UnitTest::GetInstance()->current_test_info()->name()),
        std::vector<std::string>{"--heartbeat_interval_ms=200",
                                 "--heartbeat_timeout_ms=3000",
                                 "--lease_ms=30000"});
    ASSERT_TRUE(fc_->StartCoordinator());
    fc_->StartWorker("a1", "a", false, 3);
    fc_->StartWorker("b-healthy", "b", false, 1);
    fc_->StartWorker("b-drill", "b", true, 1);
    ASSERT_TRUE(fc_->WaitConnected(absl::Seconds(60))) << fc_->Logs();
    ASSERT_EQ(fc_->RecordReference(), "") << fc_->Logs();
  }

  void TearDown() override {
    if (HasFailure()) std::printf("%s\n", fc_->Logs().c_str());
  }

  // SIGTERM: a clean shutdown, the WAL checkpointed into the file.
  void StopCoordinator() {
    fc_->cluster().coordinator()->Signal(SIGTERM);
    ASSERT_TRUE(fc_->cluster().coordinator()->Wait(absl::Seconds(30)));
  }

  // Runs `lockstep-coordinator ARGS...` to completion.
  testing::CommandResult Coordinator(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {
        fc_->cluster().Runfile("server/lockstep-coordinator")};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunCommand(argv, absl::Seconds(60));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : testing::CommandResult{};
  }

  std::unique_ptr<FaultCluster> fc_;
};

TEST_F(StorageFaultTest, FullDatabaseRefusesNewWorkKeepsReadsAndLosesNothing) {
  const std::string db = fc_->cluster().db();
  StopCoordinator();
  // Room for a few pages more than the reference jobs took: a job of three
  // 50-step runs needs far more.
  const int64_t limit = FileSize(db) + 48 * 1024;
  ASSERT_TRUE(fc_->StartCoordinator({absl::StrCat("--max_db_bytes=", limit)}))
      << fc_->Logs();
  const std::string job = fc_->Submit(JobKind::kCanonical);
  ASSERT_FALSE(job.empty()) << fc_->Logs();
  const std::string log = fc_->cluster().coordinator()->log_path();
  ASSERT_TRUE(PollUntil(absl::Seconds(60), [&] {
    return ReadFileOrEmpty(log).find("is full") != std::string::npos;
  })) << "the limit was never reached";
  EXPECT_THAT(ReadFileOrEmpty(log),
              HasSubstr(absl::StrCat("reached its size limit, --max_db_bytes=",
                                     limit)));

  // New work is refused with RESOURCE_EXHAUSTED naming the limit.
  auto stub = fc_->cluster().Stub();
  absl::StatusOr<v1::Job> held = fc_->cluster().GetJob(job);
  ASSERT_TRUE(held.ok()) << held.status();  // reads go on
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    v1::SubmitJobRequest req;
    *req.mutable_spec() = held->spec();
    v1::Job out;
    grpc::Status s = stub->SubmitJob(&ctx, req, &out);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << s.error_message();
    EXPECT_THAT(s.error_message(),
                HasSubstr(absl::StrCat("--max_db_bytes=", limit)));
  }
  // The job cannot finish while the database is full; earlier reports and
  // lists are still served.
  absl::SleepFor(absl::Seconds(2));
  held = fc_->cluster().GetJob(job);
  ASSERT_TRUE(held.ok());
  EXPECT_NE(held->state(), v1::JOB_SUCCEEDED);
  auto list = fc_->cluster().Cli({"jobs", "--json"});
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->exit_code, 0) << list->err;
  EXPECT_THAT(list->out, HasSubstr(job));
  for (const std::string& id : fc_->reference_jobs()) {
    absl::StatusOr<v1::Report> report = fc_->GetReport(id);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_NE(report->verdict(), v1::VERDICT_UNSPECIFIED);
  }

  // A larger limit: the workers resend what was refused, the job ends as
  // it should, and everything committed before is still there.
  fc_->KillCoordinator();
  ASSERT_TRUE(fc_->StartCoordinator({"--max_db_bytes=268435456"}))
      << fc_->Logs();
  absl::StatusOr<v1::Job> done = fc_->WaitFinished(job, absl::Seconds(120));
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(fc_->CheckJob(*done), "");
  for (const std::string& id : fc_->reference_jobs()) {
    absl::StatusOr<v1::Job> ref = fc_->cluster().GetJob(id);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_EQ(fc_->CheckJob(*ref), "");
  }
  StopCoordinator();
  const testing::CommandResult v = Coordinator({"verify-db", "--db=" + db});
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
  EXPECT_THAT(v.out, HasSubstr("verify-db: OK: " + db));
}

TEST_F(StorageFaultTest, CorruptFileIsRefusedUntouchedAndABackupRestores) {
  const std::string db = fc_->cluster().db();
  // An online backup, taken while a job streams.
  const std::string job = fc_->Submit(JobKind::kCanonical);
  ASSERT_FALSE(job.empty());
  absl::SleepFor(absl::Milliseconds(300));
  const std::string backup = fc_->dir() + "/backup.db";
  testing::CommandResult b =
      Coordinator({"backup", "--db=" + db, "--out=" + backup});
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  EXPECT_THAT(b.out, HasSubstr("integrity_check ok"));
  testing::CommandResult v = Coordinator({"verify-db", "--db=" + backup});
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
  // A backup never overwrites.
  b = Coordinator({"backup", "--db=" + db, "--out=" + backup});
  EXPECT_EQ(b.exit_code, 1);
  EXPECT_THAT(b.err, HasSubstr("never overwrites"));
  ASSERT_TRUE(fc_->WaitFinished(job, absl::Seconds(120)).ok());
  StopCoordinator();

  // Damage a page in the middle of the file.
  const int64_t size = FileSize(db);
  ASSERT_GT(size, 16 * 4096);
  {
    std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((size / 4096 / 2) * 4096);
    f << std::string(4096, '\x5a');
  }
  const std::string damaged = ReadBytes(db);
  testing::CommandResult start =
      Coordinator({"--listen=127.0.0.1:0", "--allow_plaintext", "--db=" + db,
                   "--zoo_dir=" + fc_->cluster().Runfile("examples")});
  EXPECT_EQ(start.exit_code, 1) << start.out << start.err;
  EXPECT_THAT(start.err, HasSubstr(db + " is corrupt"));
  EXPECT_THAT(start.err, HasSubstr("verify-db --db=" + db));
  EXPECT_THAT(start.err, HasSubstr("lockstep-coordinator backup"));
  EXPECT_EQ(ReadBytes(db), damaged) << "the corrupt file was modified";
  v = Coordinator({"verify-db", "--db=" + db});
  EXPECT_EQ(v.exit_code, 1) << v.out;
  EXPECT_THAT(v.out, HasSubstr("verify-db: FAILED: " + db));
  EXPECT_EQ(std::count(v.out.begin(), v.out.end(), '\n'), 1) << v.out;
  EXPECT_EQ(ReadBytes(db), damaged);

  // Restored from the backup, the coordinator starts and serves the jobs
  // that were finished when it was taken.
  ASSERT_EQ(std::rename(backup.c_str(), db.c_str()), 0);
  std::remove((db + "-wal").c_str());
  std::remove((db + "-shm").c_str());
  ASSERT_TRUE(fc_->StartCoordinator()) << fc_->Logs();
  for (const std::string& id : fc_->reference_jobs()) {
    absl::StatusOr<v1::Job> ref = fc_->cluster().GetJob(id);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_EQ(fc_->CheckJob(*ref), "");
  }
}

}  // namespace
}  // namespace lockstep::fault
