// Runs the real `lockstep-worker run` binary (a data dependency) on a small
// model and config written to TEST_TMPDIR.
#include "worker/exec/run_command.h"

#include <sched.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/npy.h"

namespace lockstep::worker {
namespace {

using ::lockstep::testing::IsOk;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kModel[] = R"({
  "name": "tiny",
  "input_shape": [8],
  "num_classes": 3,
  "layers": [
    {"name": "fc1", "op": "DENSE", "dense": {"units": 8, "use_bias": true}},
    {"name": "relu1", "op": "RELU"},
    {"name": "fc2", "op": "DENSE", "dense": {"units": 3, "use_bias": true}},
    {"name": "loss", "op": "SOFTMAX_XENT"}
  ]
}
)";

constexpr char kConfig[] = R"({
  "seed": 5,
  "batch_size": 4,
  "steps": 4,
  "optimizer": {"kind": "SGD", "learning_rate": 0.1},
  "determinism": "CANONICAL",
  "capture": {"kind": "EVERY_STEP"}
}
)";

std::string TmpDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d != nullptr ? d : "/tmp";
}

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = TmpDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string Binary() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir ? srcdir : ".", "/", ws ? ws : "lockstep",
                      "/worker/lockstep-worker");
}

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Result RunWorker(const std::vector<std::string>& args) {
  const std::string out = TmpDir() + "/out.txt";
  std::string cmd = "'" + Binary() + "' run";
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " > '" + out + "' 2>&1";
  const int status = std::system(cmd.c_str());
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  r.output = ss.str();
  return r;
}

class RunCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Write("model.json", kModel);
    config_ = Write("config.json", kConfig);
  }
  std::string model_;
  std::string config_;
};

TEST_F(RunCommandTest, TwoRunsAgree) {
  const Result r =
      RunWorker({"--model=" + model_, "--config=" + config_, "--runs=2"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("step 0/4  loss "), HasSubstr("step 3/4  loss "),
                    HasSubstr("step digest "), HasSubstr("run 1 digest "),
                    HasSubstr("runs agree: 2 runs")));
}

// A run on one kernel thread with a CPU free and a tensor of 64 KiB or more
// hashes beside its kernels where that is faster, and says in how many
// steps it did: the warm-up and two probe steps there, two probe steps
// inline (BackgroundChooser), whatever the step times.
TEST_F(RunCommandTest, SaysWhereLargeTensorsWereHashed) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0 || CPU_COUNT(&cpus) < 2) {
    GTEST_SKIP() << "needs 2 CPUs: with one, every tensor is hashed inline";
  }
  const std::string model = Write("wide.json", R"({
  "name": "wide",
  "input_shape": [8],
  "num_classes": 3,
  "layers": [
    {"name": "fc1", "op": "DENSE", "dense": {"units": 4096, "use_bias": true}},
    {"name": "fc2", "op": "DENSE", "dense": {"units": 3, "use_bias": true}},
    {"name": "loss", "op": "SOFTMAX_XENT"}
  ]
}
)");
  const std::string config = Write("wide_config.json", R"({
  "seed": 5,
  "batch_size": 4,
  "steps": 5,
  "threads": 1,
  "optimizer": {"kind": "SGD", "learning_rate": 0.1},
  "determinism": "CANONICAL",
  "capture": {"kind": "EVERY_STEP"}
}
)");
  const Result r = RunWorker({"--model=" + model, "--config=" + config});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("run 0: of 5 captured steps, 3 hashed their large "
                        "tensors on a thread beside the kernels and 2 inline"));
  // The tiny model's tensors are all small: nothing to say.
  const Result small = RunWorker({"--model=" + model_, "--config=" + config_});
  EXPECT_THAT(small.output, Not(HasSubstr("captured steps, ")));
}

// --op_times: each run's wall time per step by op, the kernels the model
// calls among them, fingerprinting and the executor's own share; the
// digest is the same as without it.
TEST_F(RunCommandTest, OpTimesNameEveryKernelOfTheStep) {
  const Result plain = RunWorker({"--model=" + model_, "--config=" + config_});
  const Result r = RunWorker(
      {"--model=" + model_, "--config=" + config_, "--runs=2", "--op_times"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("run 0: wall time by op, per step ("),
                    HasSubstr("run 1: wall time by op, per step ("),
                    HasSubstr("over 4 steps, the first included):"),
                    HasSubstr("  dense.forward "), HasSubstr("  relu.grad "),
                    HasSubstr("  sgd.update "), HasSubstr("  (fingerprint) "),
                    HasSubstr("  (between kernels) ")));
  // Two dense layers: 2 forward calls a step.
  EXPECT_THAT(r.output, ::testing::ContainsRegex(
                            "  dense\\.forward +2\\.0 calls +[0-9.]+ ms"));
  EXPECT_THAT(plain.output, Not(HasSubstr("wall time by op")));
  const auto digest = [](const std::string& out) {
    const size_t at = out.find("run 0 digest ");
    return at == std::string::npos ? std::string() : out.substr(at, 45);
  };
  EXPECT_FALSE(digest(plain.output).empty()) << plain.output;
  EXPECT_EQ(digest(r.output), digest(plain.output));
}

// --op_times_by_layer: the same table, one line per layer and op.
TEST_F(RunCommandTest, OpTimesByLayerNameEachLayer) {
  const Result r = RunWorker(
      {"--model=" + model_, "--config=" + config_, "--op_times_by_layer"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("run 0: wall time by layer and op, per "
                                  "step ("));
  // One forward call a step for each of the two dense layers.
  EXPECT_THAT(r.output, ::testing::ContainsRegex(
                            "  fc1 dense\\.forward +1\\.0 calls +[0-9.]+ ms"));
  EXPECT_THAT(r.output, ::testing::ContainsRegex(
                            "  fc2 dense\\.forward +1\\.0 calls +[0-9.]+ ms"));
  EXPECT_THAT(r.output, AllOf(HasSubstr("  (fingerprint) "),
                              Not(HasSubstr("  dense.forward "))));
}

TEST_F(RunCommandTest, InjectedFaultIsNamedAndExitsOne) {
  const std::string dump_dir = TmpDir() + "/dump_first";
  const Result r = RunWorker(
      {"--model=" + model_, "--config=" + config_, "--runs=2",
       "--inject_fault=step=1,layer=fc2,role=ACTIVATION,bit=30,element=2",
       "--dump=first_divergent", "--dump_dir=" + dump_dir});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("run 1: injected fault step=1,layer=fc2,"
                              "role=ACTIVATION,bit=30,element=2"),
                    HasSubstr("first divergence at step 1, #4 layer \"fc2\" "
                              "ACTIVATION dense.forward"),
                    HasSubstr("downstream contaminated: "),
                    HasSubstr("runs differ"), Not(HasSubstr("WARNING"))));
  // Both runs' copies of the divergent tensor, with sidecars.
  for (int run : {0, 1}) {
    const std::string stem =
        absl::StrCat(dump_dir, "/run", run, "_step1_0004_fc2_ACTIVATION");
    auto t = ReadNpy(stem + ".npy");
    ASSERT_THAT(t, IsOk()) << stem;
    EXPECT_EQ(t->shape(), (std::vector<int64_t>{4, 3}));
    std::ifstream json(stem + ".json");
    std::stringstream ss;
    ss << json.rdbuf();
    EXPECT_THAT(ss.str(), AllOf(HasSubstr("\"layer\":\"fc2\""),
                                HasSubstr("\"fingerprint\": \"")));
  }
}

TEST_F(RunCommandTest, DumpSelectedTensors) {
  const std::string dump_dir = TmpDir() + "/dump_sel";
  const Result r =
      RunWorker({"--model=" + model_, "--config=" + config_,
                 "--dump=fc1:GRAD_WEIGHT:2", "--dump_dir=" + dump_dir});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dump_dir)) {
    files.push_back(e.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_EQ(absl::StrJoin(files, " "),
            "run0_step2_0012_fc1_GRAD_WEIGHT.json "
            "run0_step2_0012_fc1_GRAD_WEIGHT.npy");
}

TEST_F(RunCommandTest, SpecErrorsExitTwoAndNameTheField) {
  const std::string bad_field =
      Write("bad_field.json",
            R"({"name": "x", "input_shape": [8], "num_classes": 3, "layers": [
  {"name": "fc1", "op": "DENSE", "dense": {"unit": 8}},
  {"name": "loss", "op": "SOFTMAX_XENT"}]})");
  Result r = RunWorker({"--model=" + bad_field, "--config=" + config_});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("layers[0].dense.unit"));

  const std::string bad_units =
      Write("bad_units.json",
            R"({"name": "x", "input_shape": [8], "num_classes": 3, "layers": [
  {"name": "fc1", "op": "DENSE", "dense": {"units": 0}},
  {"name": "loss", "op": "SOFTMAX_XENT"}]})");
  r = RunWorker({"--model=" + bad_units, "--config=" + config_});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("units"));

  r = RunWorker(
      {"--model=" + TmpDir() + "/missing.json", "--config=" + config_});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("missing.json"));

  r = RunWorker({"--model=" + model_, "--config=" + config_,
                 "--inject_fault=step=1,layer=fc2,role=ACTIVATION,bit=99"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("bit: \"99\" is outside [0, 31]"));

  r = RunWorker({"--model=" + model_, "--config=" + config_,
                 "--inject_fault=step=9,layer=fc2,role=ACTIVATION,bit=1"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("step: 9 is outside the job's steps"));

  r = RunWorker({"--model=" + model_, "--config=" + config_, "--runs=0"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--runs: 0 is outside [1, 64]"));

  r = RunWorker({"--model=" + model_, "--config=" + config_, "--dump=fc1"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--dump"));

  const std::string cuda =
      Write("cuda.json", R"({"seed": 1, "batch_size": 4, "steps": 1,
  "optimizer": {"kind": "SGD", "learning_rate": 0.1}, "backend": "CUDA"})");
  r = RunWorker({"--model=" + model_, "--config=" + cuda});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("config.backend: CUDA needs a usable CUDA "
                                  "device, and this worker has none"));
}

}  // namespace
}  // namespace lockstep::worker
