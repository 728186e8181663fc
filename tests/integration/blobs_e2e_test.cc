// End to end with real binaries on loopback: a model's initial parameters
// uploaded once as a content-addressed blob, referenced by jobs, refused
// when corrupt or over quota, collected when unreferenced, and fetched,
// cached and applied by a worker.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/blob_digest.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "lockstep/v1/parameters.pb.h"
#include "tests/testing/cluster.h"

namespace lockstep {
namespace {

using ::lockstep::testing::Cluster;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::PollUntil;
using ::lockstep::testing::ReadFileOrEmpty;
using ::lockstep::testing::TempDir;
using ::testing::HasSubstr;

// A tensor of `shape`, every element `value`.
v1::ParameterTensor Filled(const std::string& layer, const std::string& param,
                           const std::vector<int64_t>& shape, float value) {
  v1::ParameterTensor t;
  t.set_layer(layer);
  t.set_param(param);
  int64_t n = 1;
  for (int64_t d : shape) {
    t.add_shape(d);
    n *= d;
  }
  std::string data(4 * n, '\0');
  for (int64_t i = 0; i < n; ++i) std::memcpy(data.data() + 4 * i, &value, 4);
  t.set_data(data);
  return t;
}

// Files under `dir` and its subfolders.
int CountFiles(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  int n = 0;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    const std::string path = dir + "/" + name;
    if (stat(path.c_str(), &st) != 0) continue;
    n += S_ISDIR(st.st_mode) ? CountFiles(path) : 1;
  }
  closedir(d);
  return n;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

class BlobsE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir() + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_EQ(std::system(("mkdir -p " + dir_).c_str()), 0);
    cluster_ = std::make_unique<Cluster>(dir_);
    config_ = dir_ + "/config.json";
    std::ofstream(config_)
        << "{\"seed\": 3, \"batch_size\": 8, \"steps\": 3, \"optimizer\": "
           "{\"kind\": \"SGD\", \"learning_rate\": 0.1}, \"determinism\": "
           "\"CANONICAL\", \"dataset\": {\"synthetic\": {\"examples\": 0}}}";
  }

  void TearDown() override {
    if (HasFailure()) std::printf("%s\n", cluster_->Logs().c_str());
  }

  void Start(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> flags = {"--heartbeat_interval_ms=200",
                                      "--heartbeat_timeout_ms=2000",
                                      "--lease_ms=3000"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    ASSERT_GT(cluster_->StartCoordinator(0, flags), 0);
  }

  std::string BlobDir() const { return cluster_->db() + ".blobs"; }

  // examples/mlp with parameters_digest naming `set`, written to
  // <dir>/<name>.json and its ParameterSet to <dir>/<name>.params. Returns
  // the model path.
  std::string WriteModel(const std::string& name, const v1::ParameterSet& set,
                         v1::Model* out = nullptr) {
    v1::Model m;
    EXPECT_TRUE(
        google::protobuf::util::JsonStringToMessage(
            ReadFileOrEmpty(cluster_->Runfile("examples/mlp/model.json")), &m)
            .ok());
    const std::string bytes = set.SerializeAsString();
    m.set_parameters_digest(BlobDigest(bytes));
    std::string json;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(m, &json).ok());
    const std::string path = dir_ + "/" + name + ".json";
    std::ofstream(path) << json;
    std::ofstream(dir_ + "/" + name + ".params", std::ios::binary) << bytes;
    if (out != nullptr) *out = m;
    return path;
  }

  v1::ParameterSet GoodSet() {
    v1::ParameterSet set;
    *set.add_tensors() = Filled("fc1", "bias", {64}, 0.125f);
    *set.add_tensors() = Filled("logits", "weight", {32, 10}, -0.0625f);
    return set;
  }

  grpc::Status Upload(const std::string& digest, int64_t size,
                      const std::string& bytes, v1::BlobInfo* info) {
    auto stub = cluster_->Stub();
    grpc::ClientContext ctx;
    auto writer = stub->UploadBlob(&ctx, info);
    v1::UploadBlobRequest req;
    req.mutable_header()->set_digest(digest);
    req.mutable_header()->set_size(size);
    writer->Write(req);
    req.set_chunk(bytes);
    writer->Write(req);
    writer->WritesDone();
    return writer->Finish();
  }

  v1::StatBlobResponse Stat(const std::string& digest) {
    auto stub = cluster_->Stub();
    grpc::ClientContext ctx;
    v1::StatBlobRequest req;
    req.set_digest(digest);
    v1::StatBlobResponse r;
    EXPECT_TRUE(stub->StatBlob(&ctx, req, &r).ok());
    return r;
  }

  // `lockstep submit MODEL CONFIG` to no worker (the job stays queued).
  absl::StatusOr<testing::CommandResult> SubmitQueued(
      const std::string& model) {
    return cluster_->Cli(
        {"submit", model, config_, "--json", "--worker_labels=pool=nobody"});
  }

  std::string dir_, config_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(BlobsE2E, SubmitUploadsOnceAndTheJobReferencesTheBlob) {
  Start();
  const v1::ParameterSet set = GoodSet();
  const std::string model = WriteModel("mlp", set);
  const std::string digest = BlobDigest(set.SerializeAsString());
  auto first = SubmitQueued(model);
  ASSERT_THAT(first, IsOk());
  ASSERT_EQ(first->exit_code, 0) << first->err;
  EXPECT_THAT(first->err, HasSubstr(digest));
  EXPECT_THAT(first->err, HasSubstr("uploaded"));
  auto second = SubmitQueued(model);
  ASSERT_THAT(second, IsOk());
  ASSERT_EQ(second->exit_code, 0) << second->err;
  EXPECT_THAT(second->err, HasSubstr("already on the coordinator"));
  const v1::StatBlobResponse s = Stat(digest);
  ASSERT_TRUE(s.exists());
  EXPECT_EQ(s.blob().size(), static_cast<int64_t>(set.ByteSizeLong()));
  EXPECT_EQ(s.blob().referencing_jobs(), 2);
  EXPECT_EQ(CountFiles(BlobDir() + "/sha256"), 1);

  // A --params file that does not match the model's digest is refused
  // before anything is sent.
  std::ofstream(dir_ + "/other.params") << "not the parameters";
  auto wrong = cluster_->Cli(
      {"submit", model, config_, "--params=" + dir_ + "/other.params"});
  ASSERT_THAT(wrong, IsOk());
  EXPECT_EQ(wrong->exit_code, 3);
  EXPECT_THAT(wrong->err, HasSubstr("--params"));
  EXPECT_THAT(wrong->err, HasSubstr(digest));
}

TEST_F(BlobsE2E, ACorruptUploadIsRefusedAndNothingIsKept) {
  Start();
  const std::string announced = BlobDigest("the bytes the client meant");
  const std::string sent = "the bytes that arrived";
  v1::BlobInfo info;
  grpc::Status s = Upload(announced, sent.size(), sent, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr(announced));
  EXPECT_THAT(s.error_message(), HasSubstr(BlobDigest(sent)));
  EXPECT_THAT(s.error_message(), HasSubstr("nothing was stored"));
  // More bytes than announced, and a size over the limit.
  s = Upload(BlobDigest(sent), 4, sent, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("header.size of 4"));
  s = Upload(BlobDigest(sent), int64_t{1} << 40, sent, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("blob size limit"));
  s = Upload("sha256:nothex", sent.size(), sent, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("header.digest"));
  EXPECT_FALSE(Stat(announced).exists());
  EXPECT_FALSE(Stat(BlobDigest(sent)).exists());
  EXPECT_EQ(CountFiles(BlobDir()), 0);
  // The same bytes with their own digest are stored.
  ASSERT_TRUE(Upload(BlobDigest(sent), sent.size(), sent, &info).ok());
  EXPECT_EQ(info.digest(), BlobDigest(sent));
  EXPECT_EQ(
      ReadFileOrEmpty(BlobDir() + "/sha256/" + info.digest().substr(7, 2) +
                      "/" + info.digest().substr(7)),
      sent);
}

TEST_F(BlobsE2E, UploadsPastTheQuotaAreRefusedNamingIt) {
  Start({"--quota_blob_bytes=1000"});
  v1::BlobInfo info;
  const std::string a(600, 'a'), b(600, 'b');
  ASSERT_TRUE(Upload(BlobDigest(a), a.size(), a, &info).ok());
  grpc::Status s = Upload(BlobDigest(b), b.size(), b, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("blob_quota_bytes"));
  EXPECT_THAT(s.error_message(), HasSubstr("holds 600"));
  EXPECT_THAT(s.error_message(), HasSubstr("needs 600"));
  EXPECT_THAT(s.error_message(), HasSubstr("limit of 1000"));
  EXPECT_FALSE(Stat(BlobDigest(b)).exists());
  // Uploading a stored blob again costs nothing.
  EXPECT_TRUE(Upload(BlobDigest(a), a.size(), a, &info).ok());
}

TEST_F(BlobsE2E, SubmitRefusesAMissingOrMalformedDigest) {
  Start();
  v1::Model m;
  WriteModel("mlp", GoodSet(), &m);  // written, never uploaded
  v1::SubmitJobRequest req;
  *req.mutable_spec()->mutable_model() = m;
  auto* c = req.mutable_spec()->mutable_config();
  c->set_seed(1);
  c->set_batch_size(4);
  c->set_steps(1);
  c->mutable_optimizer()->set_kind(v1::SGD);
  c->mutable_optimizer()->set_learning_rate(0.1f);
  auto stub = cluster_->Stub();
  {
    grpc::ClientContext ctx;
    v1::Job job;
    grpc::Status s = stub->SubmitJob(&ctx, req, &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(s.error_message(), HasSubstr(m.parameters_digest()));
  }
  req.mutable_spec()->mutable_model()->set_parameters_digest("sha256:1234");
  {
    grpc::ClientContext ctx;
    v1::Job job;
    grpc::Status s = stub->SubmitJob(&ctx, req, &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("spec.model.parameters_digest"));
  }
  grpc::ClientContext ctx;
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(stub->ListJobs(&ctx, v1::ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
}

TEST_F(BlobsE2E, UnreferencedBlobsAreCollectedAfterTheGracePeriod) {
  Start({"--blob_gc_grace_ms=400", "--blob_gc_interval_ms=100"});
  v1::BlobInfo info;
  const std::string loose = "nobody uses this";
  ASSERT_TRUE(Upload(BlobDigest(loose), loose.size(), loose, &info).ok());
  const v1::ParameterSet set = GoodSet();
  const std::string digest = BlobDigest(set.SerializeAsString());
  auto submitted = SubmitQueued(WriteModel("mlp", set));
  ASSERT_THAT(submitted, IsOk());
  ASSERT_EQ(submitted->exit_code, 0) << submitted->err;
  v1::Job job;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(submitted->out, &job).ok());

  EXPECT_TRUE(PollUntil(absl::Seconds(20),
                        [&] { return !Stat(BlobDigest(loose)).exists(); }));
  // Long past the grace period, the queued job's blob stays.
  absl::SleepFor(absl::Milliseconds(800));
  EXPECT_TRUE(Stat(digest).exists());
  EXPECT_EQ(CountFiles(BlobDir() + "/sha256"), 1);

  // Cancelling the job releases its reference.
  auto cancelled = cluster_->Cli({"cancel", job.job_id()});
  ASSERT_THAT(cancelled, IsOk());
  ASSERT_EQ(cancelled->exit_code, 0) << cancelled->err;
  EXPECT_TRUE(
      PollUntil(absl::Seconds(20), [&] { return !Stat(digest).exists(); }));
  EXPECT_EQ(CountFiles(BlobDir() + "/sha256"), 0);

  // `lockstep-coordinator gc-blobs` on the database of a stopped one.
  const std::string late = "uploaded just before the stop";
  ASSERT_TRUE(Upload(BlobDigest(late), late.size(), late, &info).ok());
  cluster_->coordinator()->Signal(SIGTERM);
  ASSERT_TRUE(cluster_->coordinator()->Wait(absl::Seconds(30)).has_value());
  EXPECT_EQ(CountFiles(BlobDir() + "/sha256"), 1);
  auto gc = testing::RunCommand(
      {cluster_->Runfile("server/lockstep-coordinator"), "gc-blobs",
       "--db=" + cluster_->db(), "--blob_gc_grace_ms=0"},
      absl::Seconds(60));
  ASSERT_THAT(gc, IsOk());
  EXPECT_EQ(gc->exit_code, 0) << gc->err;
  EXPECT_THAT(gc->out, HasSubstr("deleted " + BlobDigest(late)));
  EXPECT_THAT(gc->out, HasSubstr("1 blobs"));
  EXPECT_EQ(CountFiles(BlobDir() + "/sha256"), 0);
}

TEST_F(BlobsE2E, AWorkerFetchesOnceAppliesAndCachesTheParameters) {
  Start();
  const std::string cache = dir_ + "/cache";
  ASSERT_NE(cluster_->StartWorker(
                "w1", {"--selftest=false", "--blob_cache_dir=" + cache}),
            nullptr);
  ASSERT_TRUE(PollUntil(absl::Seconds(60),
                        [&] { return cluster_->IsConnected("w1"); }));
  const v1::ParameterSet set = GoodSet();
  const std::string digest = BlobDigest(set.SerializeAsString());
  const std::string model = WriteModel("mlp", set);
  std::vector<std::string> run_digests;
  for (int i = 0; i < 2; ++i) {
    auto r = cluster_->Cli({"check", model, config_, "--json"});
    ASSERT_THAT(r, IsOk());
    ASSERT_EQ(r->exit_code, 0) << r->out << r->err;
  }
  const std::string log = ReadFileOrEmpty(dir_ + "/w1.log");
  EXPECT_EQ(Count(log, "fetched from the coordinator"), 1) << log;
  EXPECT_GE(Count(log, "read from the cache"), 3) << log;
  EXPECT_EQ(ReadFileOrEmpty(cache + "/" + digest.substr(7)),
            set.SerializeAsString());

  // A ParameterSet whose tensor has the wrong shape fails the job naming
  // the tensor.
  v1::ParameterSet bad;
  *bad.add_tensors() = Filled("fc2", "weight", {32, 64}, 0.5f);
  auto r = cluster_->Cli(
      {"submit", WriteModel("bad", bad), config_, "--watch", "--json"});
  ASSERT_THAT(r, IsOk());
  EXPECT_NE(r->exit_code, 0);
  const std::string all = r->out + r->err;
  EXPECT_THAT(all, HasSubstr("layer \"fc2\", param \"weight\""));
  EXPECT_THAT(all, HasSubstr("shape [32, 64]"));
  EXPECT_THAT(all, HasSubstr("planned shape is [64, 32]"));
}

}  // namespace
}  // namespace lockstep
