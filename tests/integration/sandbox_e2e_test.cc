// End to end with real binaries on loopback: the worker sandbox. File
// datasets are read only under the worker's --data_root, a job whose dataset
// is at fault fails on its first attempt with a reason that quotes none of
// the file, and drill flags need --allow_drills.
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"

namespace lockstep {
namespace {

using ::lockstep::testing::Cluster;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::PollUntil;
using ::lockstep::testing::RunCommand;
using ::lockstep::testing::RunfilePath;
using ::lockstep::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// Looks like a password file; no reason or message may quote it.
constexpr char kSecret[] = "root:*:SECRET-51c0de:19000:0:99999:7:::\n";

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// A version 1.0 .npy file: `dict` padded so the data starts at 64 bytes
// alignment, then `data`.
std::string Npy(const std::string& dict, const std::string& data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY\x01";
  out.push_back('\0');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  return out + header + data;
}

class SandboxE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir() + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_EQ(std::system(("rm -rf " + dir_ + " && mkdir -p " + dir_).c_str()),
              0);
    root_ = dir_ + "/data";
    ASSERT_EQ(::mkdir(root_.c_str(), 0755), 0);
    cluster_ = std::make_unique<Cluster>(dir_);
    ASSERT_GT(cluster_->StartCoordinator(
                  0, {"--heartbeat_interval_ms=200",
                      "--heartbeat_timeout_ms=2000", "--lease_ms=3000",
                      "--zoo_dir=" + cluster_->Runfile("examples")}),
              0);
    model_ = cluster_->Runfile("examples/mlp/model.json");  // [64] -> 10.
    // 8 examples of 64 float32 inputs, labels 0..7.
    std::string x(8 * 64 * 4, '\0');
    for (int i = 0; i < 8 * 64; ++i) {
      const float v = 0.01f * static_cast<float>(i % 97) - 0.4f;
      std::memcpy(&x[i * 4], &v, 4);
    }
    std::string y(8 * 4, '\0');
    for (int32_t i = 0; i < 8; ++i) std::memcpy(&y[i * 4], &i, 4);
    WriteFile(root_ + "/x.npy", Npy("{'descr': '<f4', 'fortran_order': False, "
                                    "'shape': (8, 64), }",
                                    x));
    WriteFile(
        root_ + "/y.npy",
        Npy("{'descr': '<i4', 'fortran_order': False, 'shape': (8,), }", y));
    WriteFile(root_ + "/secret.npy", kSecret);  // Not an .npy file.
    WriteFile(dir_ + "/shadow", kSecret);       // Outside the root.
  }

  void TearDown() override {
    if (HasFailure()) std::printf("%s\n", cluster_->Logs().c_str());
  }

  // A job config training on the NPY files `inputs` and `labels`.
  std::string Config(const std::string& name, const std::string& inputs,
                     const std::string& labels) {
    const std::string path = dir_ + "/" + name + ".json";
    std::ofstream(path) << absl::StrCat(
        "{\"seed\": 3, \"batch_size\": 4, \"steps\": 6, "
        "\"optimizer\": {\"kind\": \"SGD\", \"learning_rate\": 0.1}, "
        "\"determinism\": \"CANONICAL\", "
        "\"dataset\": {\"file\": {\"format\": \"NPY\", \"inputs_path\": \"",
        inputs, "\", \"labels_path\": \"", labels, "\"}}}");
    return path;
  }

  std::string Submit(const std::string& config) {
    auto r = cluster_->Cli({"submit", model_, config, "--runs=1",
                            "--scope=same_worker", "--json"});
    EXPECT_THAT(r, IsOk());
    EXPECT_EQ(r->exit_code, 0) << r->err;
    v1::Job job;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r->out, &job).ok())
        << r->out;
    return job.job_id();
  }

  // Waits for `job` to end; returns it.
  v1::Job WaitEnded(const std::string& job) {
    v1::Job out;
    EXPECT_TRUE(PollUntil(absl::Seconds(90), [&] {
      auto j = cluster_->GetJob(job);
      if (!j.ok()) return false;
      out = *j;
      return j->state() == v1::JOB_FAILED || j->state() == v1::JOB_SUCCEEDED ||
             j->state() == v1::JOB_CANCELLED;
    })) << out.DebugString();
    return out;
  }

  void WaitConnected(const std::string& name) {
    ASSERT_TRUE(PollUntil(absl::Seconds(30),
                          [&] { return cluster_->IsConnected(name); }));
  }

  std::string dir_, root_, model_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(SandboxE2E, FileDatasetUnderTheDataRootTrains) {
  cluster_->StartWorker("w1", {"--data_root=" + root_});
  WaitConnected("w1");
  // Absolute and root-relative paths.
  const v1::Job job =
      WaitEnded(Submit(Config("good", root_ + "/x.npy", "y.npy")));
  EXPECT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.DebugString();
  ASSERT_EQ(job.runs_size(), 1);
  EXPECT_EQ(job.runs(0).state(), v1::RUN_SUCCEEDED);
  EXPECT_FALSE(job.runs(0).dataset_digest().empty());
}

TEST_F(SandboxE2E, InputErrorsFailOnTheFirstAttemptWithoutQuotingTheFile) {
  cluster_->StartWorker("w1", {"--data_root=" + root_});
  WaitConnected("w1");
  struct Case {
    std::string name, inputs, reason;
  };
  const std::vector<Case> cases = {
      {"bad_format", root_ + "/secret.npy",
       "bad magic: expected \"\\x93NUMPY\""},
      {"outside", dir_ + "/shadow", "is outside the worker's --data_root"},
      {"dotdot", root_ + "/../shadow", "must not contain a \"..\" component"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const v1::Job job =
        WaitEnded(Submit(Config(c.name, c.inputs, root_ + "/y.npy")));
    ASSERT_EQ(job.runs_size(), 1);
    EXPECT_EQ(job.state(), v1::JOB_FAILED);
    EXPECT_EQ(job.runs(0).state(), v1::RUN_FAILED);
    EXPECT_EQ(job.runs(0).attempt(), 1) << job.DebugString();
    EXPECT_THAT(
        job.runs(0).failure_reason(),
        AllOf(HasSubstr("failed on attempt 1"),
              HasSubstr("dataset.file.inputs_path"), HasSubstr(c.reason),
              Not(HasSubstr("SECRET")), Not(HasSubstr("root:*"))));
    EXPECT_THAT(job.failure_reason(),
                AllOf(HasSubstr(c.reason), Not(HasSubstr("SECRET"))));
  }
  // The worker stays connected and takes the next job.
  EXPECT_TRUE(cluster_->IsConnected("w1"));
}

TEST_F(SandboxE2E, DrillFlagsNeedAllowDrills) {
  const std::string worker = RunfilePath("worker/lockstep-worker");
  for (const std::string& drill :
       {std::string("--inject_fault=step=1,layer=fc2,role=ACTIVATION,bit=22"),
        std::string("--inject_stall=step=1,seconds=1")}) {
    auto r = RunCommand({worker, "daemon", "--coordinator=127.0.0.1:1",
                         "--selftest=false", drill},
                        absl::Seconds(60));
    ASSERT_THAT(r, IsOk());
    EXPECT_EQ(r->exit_code, 64) << r->err;
    EXPECT_THAT(r->err, AllOf(HasSubstr(drill.substr(0, 14)),
                              HasSubstr("refused unless --allow_drills")));
  }
  // With --allow_drills the same worker starts and serves.
  cluster_->StartWorker(
      "drill", {"--allow_drills",
                "--inject_fault=step=1,layer=fc2,role=ACTIVATION,bit=22"});
  WaitConnected("drill");
}

TEST_F(SandboxE2E, BadDataRootIsRefusedAtStart) {
  const std::string worker = RunfilePath("worker/lockstep-worker");
  auto r = RunCommand({worker, "daemon", "--coordinator=127.0.0.1:1",
                       "--selftest=false", "--data_root=" + dir_ + "/absent"},
                      absl::Seconds(60));
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 64) << r->err;
  EXPECT_THAT(r->err, HasSubstr("--data_root"));
}

}  // namespace
}  // namespace lockstep
