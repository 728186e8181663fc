// Run-process resource limits: how they are derived from a job, that the
// supervisor puts them on the process before it reads its assignment, and
// that a run meeting one fails naming the limit.
#include "worker/run_limits.h"

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/plan.h"
#include "model/spec_io.h"
#include "tests/testing/subprocess.h"
#include "worker/run_supervisor.h"

namespace lockstep::worker {
namespace {

namespace v1 = ::lockstep::v1;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A model whose live tensors are about 2 x 8192 x 4096 x 4 bytes (the weight
// and its gradient), far above a 250 MiB limit. (A run process starts with
// about 1 MiB of private data; the CUDA vendor libraries, when a GPU node
// loads them, add about 190 MiB.)
constexpr char kWideModel[] = R"pb(
  name: "wide"
  input_shape: [ 8192 ]
  num_classes: 4096
  layers {
    name: "fc"
    op: DENSE
    dense { units: 4096 use_bias: false }
  }
  layers { name: "loss" op: SOFTMAX_XENT }
)pb";

v1::RunAssignment Assignment(const std::string& config_text) {
  v1::RunAssignment a;
  a.set_run_id("r-limits");
  a.set_attempt(1);
  absl::StatusOr<v1::Model> model = model::ParseModel(kWideModel, "model");
  absl::StatusOr<v1::JobConfig> config =
      model::ParseJobConfig(config_text, "config");
  EXPECT_THAT(model, IsOk());
  EXPECT_THAT(config, IsOk());
  if (model.ok()) *a.mutable_model() = *model;
  if (config.ok()) *a.mutable_config() = *config;
  return a;
}

constexpr char kCpuConfig[] =
    "seed: 1 batch_size: 4 steps: 10 threads: 2 backend: CPU "
    "optimizer { kind: SGD learning_rate: 0.01 } "
    "dataset { synthetic {} }";

TEST(DeriveRunLimits, FollowsTheJobsSize) {
  const v1::RunAssignment a = Assignment(kCpuConfig);
  absl::StatusOr<model::ModelPlan> plan =
      model::PlanModel(a.model(), a.config(), model::Limits());
  ASSERT_THAT(plan, IsOk());
  const int64_t live = model::EstimateLiveTensorBytes(*plan, a.config());
  const double flops = 3.0 * static_cast<double>(model::ForwardFlops(*plan));
  ASSERT_GT(live, int64_t{100} << 20);

  absl::StatusOr<RunResourceLimits> limits =
      DeriveRunLimits(a, /*node_has_gpu=*/false, RunLimitSettings());
  ASSERT_THAT(limits, IsOk());
  EXPECT_EQ(limits->memory_bytes, kMemoryBaseBytes + kMemoryFactor * live);
  EXPECT_EQ(limits->cpu_seconds,
            static_cast<int64_t>(std::ceil(
                kCpuBaseSeconds +
                (flops / kCpuFloor + static_cast<double>(live) / kHashFloor) *
                    10 * 2)));
  EXPECT_EQ(limits->memory_source, "derived from the job's size");
  EXPECT_THAT(DescribeRunLimits(*limits),
              HasSubstr("(derived from the job's size), CPU time"));

  // Twice the steps: the per-step part doubles.
  v1::RunAssignment longer = a;
  longer.mutable_config()->set_steps(20);
  absl::StatusOr<RunResourceLimits> more =
      DeriveRunLimits(longer, false, RunLimitSettings());
  ASSERT_THAT(more, IsOk());
  EXPECT_GT(more->cpu_seconds, limits->cpu_seconds);
  EXPECT_EQ(more->memory_bytes, limits->memory_bytes);
}

TEST(DeriveRunLimits, NoDerivedMemoryLimitWhereAGpuMayRun) {
  v1::RunAssignment any = Assignment(kCpuConfig);
  any.mutable_config()->set_backend(v1::ANY);
  // ANY on a node without a GPU runs on the CPU: limited.
  absl::StatusOr<RunResourceLimits> cpu_node =
      DeriveRunLimits(any, false, RunLimitSettings());
  ASSERT_THAT(cpu_node, IsOk());
  EXPECT_GT(cpu_node->memory_bytes, 0);
  // ANY on a GPU node, and CUDA anywhere: no memory limit, CPU time still.
  absl::StatusOr<RunResourceLimits> gpu_node =
      DeriveRunLimits(any, true, RunLimitSettings());
  ASSERT_THAT(gpu_node, IsOk());
  EXPECT_EQ(gpu_node->memory_bytes, 0);
  EXPECT_GT(gpu_node->cpu_seconds, 0);
  v1::RunAssignment cuda = any;
  cuda.mutable_config()->set_backend(v1::CUDA);
  EXPECT_EQ(DeriveRunLimits(cuda, false, RunLimitSettings())->memory_bytes, 0);
  // A CPU job on a GPU node is limited.
  EXPECT_GT(DeriveRunLimits(Assignment(kCpuConfig), true, RunLimitSettings())
                ->memory_bytes,
            0);
  // An operator's limit holds for GPU runs too.
  RunLimitSettings set;
  set.memory_limit_mb = 4096;
  EXPECT_EQ(DeriveRunLimits(cuda, true, set)->memory_bytes,
            int64_t{4096} << 20);
}

TEST(DeriveRunLimits, OperatorSettings) {
  const v1::RunAssignment a = Assignment(kCpuConfig);
  RunLimitSettings set;
  set.memory_limit_mb = 300;
  set.cpu_limit_s = 42;
  absl::StatusOr<RunResourceLimits> limits = DeriveRunLimits(a, false, set);
  ASSERT_THAT(limits, IsOk());
  EXPECT_EQ(limits->memory_bytes, int64_t{300} << 20);
  EXPECT_EQ(limits->cpu_seconds, 42);
  EXPECT_EQ(DescribeRunLimits(*limits),
            "memory 300 MiB (--run_memory_limit_mb), CPU time 42 s "
            "(--run_cpu_limit_s), no core dumps");

  RunLimitSettings none;
  none.memory_limit_mb = -1;
  none.cpu_limit_s = -1;
  limits = DeriveRunLimits(a, false, none);
  ASSERT_THAT(limits, IsOk());
  EXPECT_EQ(limits->memory_bytes, 0);
  EXPECT_EQ(limits->cpu_seconds, 0);
  EXPECT_EQ(DescribeRunLimits(*limits),
            "no memory limit, no CPU-time limit, no core dumps");

  RunLimitSettings bad;
  bad.memory_limit_mb = -2;
  EXPECT_THAT(DeriveRunLimits(a, false, bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--run_memory_limit_mb: -2 is below -1")));
  bad = RunLimitSettings();
  bad.cpu_limit_s = -5;
  EXPECT_THAT(DeriveRunLimits(a, false, bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--run_cpu_limit_s: -5 is below -1")));
}

TEST(DeriveRunLimits, AModelThatDoesNotPlanGetsTheBaseLimits) {
  v1::RunAssignment a = Assignment(kCpuConfig);
  a.mutable_model()->mutable_layers(0)->mutable_dense()->set_units(-3);
  absl::StatusOr<RunResourceLimits> limits =
      DeriveRunLimits(a, false, RunLimitSettings());
  ASSERT_THAT(limits, IsOk());
  EXPECT_EQ(limits->memory_bytes, kMemoryBaseBytes);
  EXPECT_EQ(limits->cpu_seconds, kCpuBaseSeconds);
}

// Runs `options.argv` under a supervisor with `a` and returns the
// RunFinished it reports (waits at most 60 s).
v1::RunFinished Supervise(const SupervisorOptions& options,
                          const v1::RunAssignment& a) {
  absl::Notification done;
  v1::RunFinished finished;
  absl::StatusOr<std::unique_ptr<RunSupervisor>> s =
      RunSupervisor::Start(options, a, [&](v1::WorkerMessage m) {
        if (m.has_finished() && !done.HasBeenNotified()) {
          finished = m.finished();
          done.Notify();
        }
      });
  EXPECT_THAT(s, IsOk());
  if (!s.ok()) return finished;
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  return finished;
}

TEST(RunSupervisorLimits, InPlaceBeforeTheAssignmentIsRead) {
  const std::string out =
      absl::StrCat(lockstep::testing::TempDir(), "/limits_", getpid());
  SupervisorOptions options;
  // The shell reads its assignment first, then reports its limits.
  options.argv = {"/bin/sh", "-c",
                  absl::StrCat("cat >/dev/null; { ulimit -c; ulimit -d; "
                               "ulimit -t; } >",
                               out)};
  options.limits.memory_bytes = int64_t{300} << 20;
  options.limits.cpu_seconds = 77;
  const v1::RunFinished finished = Supervise(options, Assignment(kCpuConfig));
  EXPECT_FALSE(finished.success());
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  // ulimit -d is in KiB.
  EXPECT_EQ(ss.str(), absl::StrCat("0\n", 300 * 1024, "\n77\n"));
}

TEST(RunSupervisorLimits, CpuTimeLimitEndsTheRunNamingIt) {
  SupervisorOptions options;
  options.argv = {"/bin/sh", "-c", "cat >/dev/null; while :; do :; done"};
  options.limits.cpu_seconds = 1;
  options.limits.cpu_source = "--run_cpu_limit_s";
  const v1::RunFinished finished = Supervise(options, Assignment(kCpuConfig));
  EXPECT_FALSE(finished.success());
  EXPECT_THAT(finished.failure_reason(),
              StartsWith("CPU-time limit reached: the run used "));
  EXPECT_THAT(finished.failure_reason(),
              HasSubstr("its limit is 1 s (--run_cpu_limit_s)"));
}

TEST(RunSupervisorLimits, MemoryLimitEndsARealRunNamingIt) {
  SupervisorOptions options;
  options.argv = {lockstep::testing::RunfilePath("worker/lockstep-worker"),
                  "execute"};
  options.limits.memory_bytes = int64_t{250} << 20;
  options.limits.memory_source = "--run_memory_limit_mb";
  const v1::RunFinished finished = Supervise(options, Assignment(kCpuConfig));
  EXPECT_FALSE(finished.success());
  EXPECT_THAT(finished.failure_reason(), HasSubstr("memory limit reached"));
  EXPECT_THAT(finished.failure_reason(), HasSubstr("250 MiB"));
  // Without the limit the same run gets past its allocations (it then
  // fails at the manifest check: this assignment carries no manifest).
  options.limits.memory_bytes = 0;
  const v1::RunFinished unlimited = Supervise(options, Assignment(kCpuConfig));
  EXPECT_THAT(unlimited.failure_reason(), HasSubstr("manifest"));
}

}  // namespace
}  // namespace lockstep::worker
