// End to end with real binaries on loopback: models exported from PyTorch
// while the test runs (export_models.py, Debian's python3-torch) are
// imported with `lockstep import`, then certified with `lockstep check`
// against a live coordinator and a CPU worker, their ONNX initializers
// uploaded once as the model's initial parameters; an ONNX file with
// unsupported ops is refused with every such node listed.
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
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

class OnnxE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir() + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_EQ(std::system(("mkdir -p " + dir_).c_str()), 0);
    const std::string cmd = absl::StrCat(
        "/usr/bin/python3 tests/onnx/export_models.py ", dir_, " 2>&1");
    ASSERT_EQ(std::system(cmd.c_str()), 0)
        << "export_models.py failed (needs python3-torch)";
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

  // A config of 2 SGD steps of batch 4 on synthetic examples or tokens.
  std::string Config(bool tokens) {
    const std::string path =
        dir_ + (tokens ? "/tokens.config.json" : "/images.config.json");
    std::ofstream(path) << absl::StrCat(
        "{\"seed\": 5, \"batch_size\": 4, \"steps\": 2, \"optimizer\": "
        "{\"kind\": \"SGD\", \"learning_rate\": 0.05}, \"determinism\": "
        "\"CANONICAL\", \"dataset\": {",
        tokens ? "\"tokens\": {}" : "\"synthetic\": {\"examples\": 0}", "}}");
    return path;
  }

  std::string dir_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(OnnxE2E, ImportedModelsAreCertifiedWithTheirOnnxWeights) {
  struct Case {
    const char* name;
    bool tokens;
  };
  // cnn: batch norm, a depthwise residual block, dropout; autoencoder:
  // transposed convolutions (stride 2, output padding 1; grouped, with a
  // bias) after batch norm; gpt: a GPT block
  // from primitives (decomposed LayerNorm, erf GELU, causal mask through
  // WHERE, Split into SLICEs); gpt_nofold: the same block exported without
  // constant folding, its embedding table tied to the output projection
  // (one PARAMETER read by the GATHER and, transposed, by the MATMUL).
  for (const Case& c :
       {Case{"mlp", false}, Case{"cnn", false}, Case{"autoencoder", false},
        Case{"gpt", true}, Case{"gpt_nofold", true}}) {
    SCOPED_TRACE(c.name);
    const std::string onnx = absl::StrCat(dir_, "/", c.name, ".onnx");
    const std::string json = absl::StrCat(dir_, "/", c.name, ".json");
    auto imported = cluster_->Cli({"import", onnx, "-o", json});
    ASSERT_THAT(imported, IsOk());
    ASSERT_EQ(imported->exit_code, 0) << imported->out << imported->err;
    v1::Model model;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                    ReadFileOrEmpty(json), &model)
                    .ok());
    ASSERT_FALSE(model.parameters_digest().empty());

    auto check = cluster_->Cli({"check", json, Config(c.tokens), "--json"});
    ASSERT_THAT(check, IsOk());
    EXPECT_EQ(check->exit_code, 0) << check->out << check->err;
    EXPECT_THAT(check->out, HasSubstr("\"outcome\": \"reproducible\""));
    EXPECT_THAT(check->err, HasSubstr(model.parameters_digest()));
    EXPECT_THAT(check->err, HasSubstr("uploaded"));

    // The coordinator holds the initializers under the model's digest.
    auto stat = cluster_->Cli({"blobs", "stat", model.parameters_digest()});
    ASSERT_THAT(stat, IsOk());
    EXPECT_EQ(stat->exit_code, 0) << stat->out << stat->err;

    // The .onnx file itself: imported in memory, the same weights, which
    // the coordinator already has.
    auto direct = cluster_->Cli({"check", onnx, Config(c.tokens)});
    ASSERT_THAT(direct, IsOk());
    EXPECT_EQ(direct->exit_code, 0) << direct->out << direct->err;
    EXPECT_THAT(direct->err, HasSubstr("already on the coordinator"));
  }
}

// A fleet audit of the team's own model: `audit start MODEL.onnx CONFIG`
// imports it, uploads its initializers and runs it CANONICAL on the selected
// workers; the audit names the model and its job carries the parameters.
TEST_F(OnnxE2E, AuditRunsTheImportedModelWithItsWeights) {
  const std::string onnx = dir_ + "/cnn.onnx";
  auto audit = cluster_->Cli(
      {"audit", "start", onnx, Config(false), "--workers=w1", "--json"});
  ASSERT_THAT(audit, IsOk());
  ASSERT_EQ(audit->exit_code, 0) << audit->out << audit->err;
  EXPECT_THAT(audit->err, HasSubstr("uploaded"));
  EXPECT_THAT(audit->out,
              HasSubstr("\"model_name\": \"cnn (parameters sha256:"));
  EXPECT_THAT(audit->out, HasSubstr("\"state\": \"AUDIT_DONE\""));
  // The audit's job ran the imported model on w1: one run, with a digest.
  EXPECT_THAT(audit->out, HasSubstr("\"run_digest\": \""));
  EXPECT_THAT(audit->out, HasSubstr("\"health\": \"HEALTHY\""));

  // Without a config the ONNX file is refused before anything is sent.
  auto bare = cluster_->Cli({"audit", "start", onnx, "--workers=w1"});
  ASSERT_THAT(bare, IsOk());
  EXPECT_EQ(bare->exit_code, 64);
  EXPECT_THAT(bare->err, HasSubstr("audit start MODEL.onnx CONFIG"));
}

TEST_F(OnnxE2E, UnsupportedOpsAreListedAndNothingIsWritten) {
  const std::string json = dir_ + "/unsupported.json";
  auto r = cluster_->Cli({"import", dir_ + "/unsupported.onnx", "-o", json});
  ASSERT_THAT(r, IsOk());
  EXPECT_NE(r->exit_code, 0);
  EXPECT_THAT(r->err, HasSubstr("LSTM"));
  EXPECT_THAT(r->err, HasSubstr("GridSample"));
  EXPECT_EQ(ReadFileOrEmpty(json), "");
}

}  // namespace
}  // namespace lockstep
