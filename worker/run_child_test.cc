// The run process end to end, in process: an assignment in, frames out, and
// the kernel variant of every op in the result.
#include "worker/run_child.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/isa.h"
#include "lockstep/v1/worker_gateway.pb.h"
#include "model/manifest.h"
#include "model/plan.h"
#include "model/spec_io.h"
#include "worker/frames.h"

namespace lockstep::worker {
namespace {

namespace v1 = ::lockstep::v1;
using ::lockstep::testing::IsOk;
using ::testing::StartsWith;

constexpr char kModel[] = R"pb(
  name: "tiny"
  input_shape: [ 6 ]
  num_classes: 3
  layers {
    name: "fc1"
    op: DENSE
    dense { units: 5 use_bias: true }
  }
  layers { name: "relu1" op: RELU }
  layers {
    name: "logits"
    op: DENSE
    dense { units: 3 use_bias: true }
  }
  layers { name: "loss" op: SOFTMAX_XENT }
)pb";

// Runs `config` through ExecuteAssignment and returns its RunFinished.
v1::RunFinished Execute(const std::string& config_text) {
  auto model = model::ParseModel(kModel, "model");
  auto config = model::ParseJobConfig(config_text, "config");
  EXPECT_THAT(model, IsOk());
  EXPECT_THAT(config, IsOk());
  if (!model.ok() || !config.ok()) return {};
  auto plan = model::PlanModel(*model, *config, model::Limits());
  EXPECT_THAT(plan, IsOk());
  if (!plan.ok()) return {};
  auto manifest = model::BuildManifest(*plan, *config);
  EXPECT_THAT(manifest, IsOk());
  if (!manifest.ok()) return {};
  v1::RunAssignment a;
  a.set_run_id("r-1");
  a.set_attempt(1);
  *a.mutable_model() = *model;
  *a.mutable_config() = *config;
  *a.mutable_manifest() = *manifest;

  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/frames_", getpid());
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  EXPECT_GE(fd, 0);
  EXPECT_THAT(ExecuteAssignment(a, ChildOptions(), fd), IsOk());
  lseek(fd, 0, SEEK_SET);
  v1::RunFinished finished;
  v1::WorkerMessage m;
  while (ReadFrame(fd, &m).ok()) {
    if (m.has_finished()) finished = m.finished();
  }
  close(fd);
  std::remove(path.c_str());
  return finished;
}

TEST(RunChildTest, ResultNamesTheKernelVariantOfEveryOp) {
  const std::string cpu =
      absl::StrCat("cpu/", kernels::CpuIsaName(kernels::ActiveCpuIsa()));
  const v1::RunFinished canonical = Execute(R"pb(
    seed: 1
    batch_size: 4
    steps: 2
    backend: CPU
    optimizer { learning_rate: 0.1 }
  )pb");
  EXPECT_TRUE(canonical.success()) << canonical.failure_reason();
  for (const char* op :
       {kernels::op::kDenseForward, kernels::op::kDenseGradInput,
        kernels::op::kDenseGradWeight, kernels::op::kBiasAddGrad,
        kernels::op::kReluForward, kernels::op::kSgdUpdate}) {
    ASSERT_EQ(canonical.kernels().count(op), 1u) << op;
    EXPECT_EQ(canonical.kernels().at(op), cpu + "/canonical") << op;
  }
  for (const auto& [op, variant] : canonical.kernels()) {
    EXPECT_EQ(variant, cpu + "/canonical") << op;
  }

  const v1::RunFinished fast = Execute(R"pb(
    seed: 1
    batch_size: 4
    steps: 2
    backend: CPU
    determinism: DEFAULT
    optimizer { learning_rate: 0.1 }
  )pb");
  EXPECT_TRUE(fast.success()) << fast.failure_reason();
  ASSERT_EQ(fast.kernels().count(kernels::op::kBiasAddGrad), 1u);
  EXPECT_EQ(fast.kernels().at(kernels::op::kBiasAddGrad),
            cpu + "/default/atomic");
  EXPECT_THAT(fast.kernels().at(kernels::op::kDenseForward),
              StartsWith(cpu + "/default/"));
}

}  // namespace
}  // namespace lockstep::worker
