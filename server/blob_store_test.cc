// The blob store over a real database file and folder, with a fake clock:
// what an upload keeps, what an abandoned one leaves, the references jobs
// hold, and collection after the grace period.
#include "server/blob_store.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "common/blob_digest.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::server {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;
using namespace ::lockstep::v1;  // NOLINT

constexpr int64_t kGraceMs = 1000;

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

int Entries(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") ++n;
  }
  closedir(d);
  return n;
}

class BlobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(std::getenv("TEST_TMPDIR")) + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_EQ(std::system(("mkdir -p " + dir_).c_str()), 0);
    store::StoreOptions so;
    so.path = dir_ + "/lockstep.db";
    store_ = std::move(store::Store::Open(so).value());
    Reopen();
  }

  void Reopen() {
    blobs_.reset();
    BlobStoreOptions bo;
    bo.dir = DefaultBlobDir(dir_ + "/lockstep.db");
    bo.max_bytes_per_principal = 100;
    bo.gc_grace_ms = kGraceMs;
    blobs_ = std::move(
        BlobStore::Open(bo, store_.get(), [this] { return now_; }).value());
  }

  absl::StatusOr<store::BlobRecord> Put(const std::string& bytes,
                                        const std::string& who = "ci") {
    std::optional<store::BlobRecord> exists;
    auto up =
        blobs_->BeginUpload(BlobDigest(bytes), bytes.size(), who, &exists);
    if (!up.ok()) return up.status();
    if (exists.has_value()) return *exists;
    LS_RETURN_IF_ERROR((*up)->Append(bytes));
    return (*up)->Finish();
  }

  Job QueuedJob(const std::string& id, const std::string& digest) {
    Job job;
    job.set_job_id(id);
    job.set_state(JOB_QUEUED);
    job.set_created_unix_ms(now_);
    job.mutable_spec()->mutable_model()->set_parameters_digest(digest);
    return job;
  }

  std::string dir_;
  int64_t now_ = 1'000'000;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<BlobStore> blobs_;
};

TEST_F(BlobStoreTest, AnUploadIsAFileAndARowAnAbandonedOneNothing) {
  auto r = Put("forty bytes of parameters................");
  ASSERT_THAT(r, IsOk());
  auto path = blobs_->PathOf(r->digest);
  ASSERT_THAT(path, IsOk());
  std::ifstream in(*path);
  std::string back((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  EXPECT_EQ(back, "forty bytes of parameters................");
  EXPECT_EQ(r->uploaded_by, "ci");

  // Started, half sent, dropped: no file, no row, and its reservation
  // against the quota is given back.
  const std::string big(50, 'x');
  {
    std::optional<store::BlobRecord> exists;
    auto up = blobs_->BeginUpload(BlobDigest(big), big.size(), "ci", &exists);
    ASSERT_THAT(up, IsOk());
    ASSERT_THAT((*up)->Append(big.substr(0, 30)), IsOk());
    EXPECT_EQ(Entries(blobs_->options().dir + "/tmp"), 1);
    // Meanwhile the quota counts it: 41 stored + 50 pending + 10 > 100.
    EXPECT_THAT(
        Put(std::string(10, 'y')),
        StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("holds 91")));
  }
  EXPECT_EQ(Entries(blobs_->options().dir + "/tmp"), 0);
  auto none = blobs_->Stat(BlobDigest(big));
  ASSERT_THAT(none, IsOk());
  EXPECT_FALSE(none->has_value());
  EXPECT_THAT(Put(std::string(59, 'x')), IsOk());  // 41 + 59 = the quota

  // Another principal has a quota of its own.
  EXPECT_THAT(Put("z", "dev"), IsOk());
}

TEST_F(BlobStoreTest, LeftoverTemporaryFilesAreRemovedAtOpen) {
  std::ofstream(blobs_->options().dir + "/tmp/123-0.part") << "half";
  Reopen();
  EXPECT_EQ(Entries(blobs_->options().dir + "/tmp"), 0);
}

TEST_F(BlobStoreTest, JobsHoldTheirBlobUntilTheyEndPlusTheGracePeriod) {
  auto kept = Put("used by a job");
  auto loose = Put("used by nobody");
  ASSERT_THAT(kept, IsOk());
  ASSERT_THAT(loose, IsOk());
  Job job = QueuedJob("job-1", kept->digest);
  ASSERT_THAT(store_->InsertJob(job, TensorManifest(), ""), IsOk());
  // A job naming a blob the store lacks is refused, and not stored.
  EXPECT_THAT(
      store_->InsertJob(QueuedJob("job-2", BlobDigest("never uploaded")),
                        TensorManifest(), ""),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr(BlobDigest("never uploaded"))));
  auto refused = store_->GetJob("job-2");
  ASSERT_THAT(refused, IsOk());
  EXPECT_FALSE(refused->has_value());

  now_ += kGraceMs - 1;
  auto gone = blobs_->Collect();
  ASSERT_THAT(gone, IsOk());
  EXPECT_TRUE(gone->empty());
  now_ += 2;
  gone = blobs_->Collect();
  ASSERT_THAT(gone, IsOk());
  ASSERT_EQ(gone->size(), 1u);
  EXPECT_EQ((*gone)[0].digest, loose->digest);
  EXPECT_FALSE(Exists(blobs_->options().dir + "/sha256/" +
                      loose->digest.substr(7, 2) + "/" +
                      loose->digest.substr(7)));
  auto stat = blobs_->Stat(kept->digest);
  ASSERT_THAT(stat, IsOk());
  ASSERT_TRUE(stat->has_value());
  EXPECT_EQ((*stat)->referencing_jobs, 1);

  // The job ends: its end is the blob's last reference.
  now_ += 10 * kGraceMs;
  job.set_state(JOB_CANCELLED);
  job.set_finished_unix_ms(now_);
  ASSERT_THAT(store_->FinishJob(job, Report(), {}), IsOk());
  gone = blobs_->Collect();
  ASSERT_THAT(gone, IsOk());
  EXPECT_TRUE(gone->empty());
  now_ += kGraceMs + 1;
  gone = blobs_->Collect();
  ASSERT_THAT(gone, IsOk());
  ASSERT_EQ(gone->size(), 1u);
  EXPECT_EQ((*gone)[0].digest, kept->digest);
  EXPECT_THAT(blobs_->PathOf(kept->digest),
              StatusIs(absl::StatusCode::kNotFound));
  // Uploaded again, it is a new blob with a new grace period.
  ASSERT_THAT(Put("used by a job"), IsOk());
  EXPECT_THAT(blobs_->PathOf(kept->digest), IsOk());
}

}  // namespace
}  // namespace lockstep::server
