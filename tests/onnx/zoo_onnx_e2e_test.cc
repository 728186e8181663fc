// The zoo's large models as PyTorch exports them (examples/export_onnx.py,
// run under Debian's python3-torch while the test runs): each .onnx file is
// imported with `lockstep import`, then certified with `lockstep check`
// under the model's own examples/<model>/config.json (cut to 2 steps of
// batch 4 on the CPU backend) against a live coordinator and a CPU worker
// on loopback, the ONNX initializers (PyTorch's initial weights) uploaded
// as the model's initial parameters.
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "lockstep/v1/job.pb.h"
#include "lockstep/v1/model.pb.h"
#include "tests/testing/cluster.h"

namespace lockstep {
namespace {

using ::lockstep::testing::Cluster;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::PollUntil;
using ::lockstep::testing::ReadFileOrEmpty;
using ::lockstep::testing::TempDir;
using ::testing::HasSubstr;

constexpr const char* kZooOnnxModels[] = {"resnet18", "mobilenet_v2",
                                          "vit_tiny", "gpt_tiny"};

class ZooOnnxE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir() + "/zoo_onnx";
    ASSERT_EQ(std::system(("mkdir -p " + dir_).c_str()), 0);
    const std::string cmd = absl::StrCat(
        "/usr/bin/python3 examples/export_onnx.py ", dir_, " 2>&1");
    ASSERT_EQ(std::system(cmd.c_str()), 0)
        << "export_onnx.py failed (needs python3-torch)";
    cluster_ = std::make_unique<Cluster>(dir_);
    ASSERT_GT(cluster_->StartCoordinator(
                  0, {"--heartbeat_interval_ms=200",
                      "--heartbeat_timeout_ms=3000", "--lease_ms=5000"}),
              0);
    ASSERT_NE(cluster_->StartWorker("w1", {"--selftest=false"}), nullptr);
    ASSERT_TRUE(PollUntil(absl::Seconds(60),
                          [&] { return cluster_->IsConnected("w1"); }));
  }

  void TearDown() override {
    if (HasFailure()) std::printf("%s\n", cluster_->Logs().c_str());
  }

  // examples/<name>/config.json with 2 steps of batch 4 on the CPU backend.
  std::string ShortConfig(const std::string& name) {
    v1::JobConfig config;
    const std::string text = ReadFileOrEmpty(
        cluster_->Runfile(absl::StrCat("examples/", name, "/config.json")));
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(text, &config).ok())
        << name << "/config.json: " << text;
    config.set_steps(2);
    config.set_batch_size(4);
    config.set_backend(v1::CPU);
    std::string json;
    EXPECT_TRUE(
        google::protobuf::util::MessageToJsonString(config, &json).ok());
    const std::string path = absl::StrCat(dir_, "/", name, ".config.json");
    std::ofstream(path) << json;
    return path;
  }

  std::string dir_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(ZooOnnxE2E, EveryZooExportIsImportedAndCertifiedWithItsOnnxWeights) {
  for (const char* name : kZooOnnxModels) {
    SCOPED_TRACE(name);
    const std::string onnx = absl::StrCat(dir_, "/", name, ".onnx");
    const std::string json = absl::StrCat(dir_, "/", name, ".json");
    auto imported = cluster_->Cli({"import", onnx, "-o", json});
    ASSERT_THAT(imported, IsOk());
    ASSERT_EQ(imported->exit_code, 0) << imported->out << imported->err;
    v1::Model model;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                    ReadFileOrEmpty(json), &model)
                    .ok());
    ASSERT_FALSE(model.parameters_digest().empty());

    auto check = cluster_->Cli({"check", json, ShortConfig(name), "--json"});
    ASSERT_THAT(check, IsOk());
    EXPECT_EQ(check->exit_code, 0) << check->out << check->err;
    EXPECT_THAT(check->out, HasSubstr("\"outcome\": \"reproducible\""));
    EXPECT_THAT(check->err, HasSubstr(model.parameters_digest()));
    EXPECT_THAT(check->err, HasSubstr("uploaded"));

    // The coordinator holds PyTorch's initial weights under that digest.
    auto stat = cluster_->Cli({"blobs", "stat", model.parameters_digest()});
    ASSERT_THAT(stat, IsOk());
    EXPECT_EQ(stat->exit_code, 0) << stat->out << stat->err;
  }
}

}  // namespace
}  // namespace lockstep
