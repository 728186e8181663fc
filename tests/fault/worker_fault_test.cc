// Worker daemons killed (SIGKILL, then restarted under the same name) or
// stopped (SIGSTOP, shorter or longer than a lease, then SIGCONT) at seeded
// random points while their runs stream.
//
// A stopped daemon's run process trains on and blocks on its full pipe; a
// killed daemon takes its run process with it (PR_SET_PDEATHSIG). Either
// way the lease rules decide: a run whose lease survives carries on as the
// same attempt, one whose lease expires gets a fresh attempt on a worker
// that matches, and the late batches of the old attempt are refused. Every
// job must still end with the verdict its runs call for, and every run's
// stored fingerprints must be exactly the reference's, all of its final
// attempt (fault_cluster.h).
#include <signal.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/fault/fault_cluster.h"
#include "tests/testing/subprocess.h"

namespace lockstep::fault {
namespace {

constexpr int kBlocks = 4;
constexpr int kTrialsPerBlock = 5;
constexpr int kLeaseMs = 2000;

enum class Fault { kKill, kStopShort, kStopLong };

const char* Name(Fault f) {
  switch (f) {
    case Fault::kKill:
      return "SIGKILL";
    case Fault::kStopShort:
      return "SIGSTOP within the lease";
    case Fault::kStopLong:
      return "SIGSTOP past the lease";
  }
  return "";
}

class WorkerFaultTest : public ::testing::TestWithParam<int> {};

TEST_P(WorkerFaultTest, RunsAreResumedOrReassignedAndNothingIsLost) {
  const int block = GetParam();
  const uint64_t seed = SuiteSeed(20261126) + block;
  std::mt19937_64 rng(seed);
  FaultCluster fc(absl::StrCat(testing::TempDir(), "/worker_fault_", block),
                  {"--heartbeat_interval_ms=200", "--heartbeat_timeout_ms=1500",
                   absl::StrCat("--lease_ms=", kLeaseMs), "--max_attempts=20"});
  ASSERT_TRUE(fc.StartCoordinator());
  fc.StartWorker("a1", "a", false, 2);
  fc.StartWorker("a2", "a", false, 2);
  fc.StartWorker("a3", "a", false, 2);
  fc.StartWorker("b-healthy", "b", false, 1);
  fc.StartWorker("b-drill", "b", true, 1);
  ASSERT_TRUE(fc.WaitConnected(absl::Seconds(60))) << fc.Logs();
  ASSERT_EQ(fc.RecordReference(), "") << fc.Logs();

  for (int t = 0; t < kTrialsPerBlock; ++t) {
    const int trial = block * kTrialsPerBlock + t;
    const Fault fault =
        static_cast<Fault>(std::uniform_int_distribution<int>(0, 2)(rng));
    // The fault lands once a run has done a random number of its 40 steps
    // (the runs pause 1 s at step 20), or, one time in five, right after
    // submission.
    const int at_step = std::uniform_int_distribution<int>(0, 4)(rng) == 0
                            ? 0
                            : std::uniform_int_distribution<int>(1, 39)(rng);
    const int hold_ms =
        fault == Fault::kKill ? std::uniform_int_distribution<int>(0, 1500)(rng)
        : fault == Fault::kStopShort
            ? std::uniform_int_distribution<int>(200, kLeaseMs / 2)(rng)
            : std::uniform_int_distribution<int>(kLeaseMs + 500,
                                                 kLeaseMs + 1500)(rng);
    const std::vector<std::string> jobs = {fc.Submit(JobKind::kCanonical),
                                           fc.Submit(JobKind::kSplit)};
    ASSERT_FALSE(jobs[0].empty() || jobs[1].empty()) << fc.Logs();
    if (at_step > 0) fc.WaitProgress(jobs, at_step, 0, absl::Seconds(60));

    // The victim: a worker running one of this trial's runs now, else any.
    std::vector<std::string> busy;
    for (const std::string& id : jobs) {
      auto job = fc.cluster().GetJob(id);
      if (!job.ok()) continue;
      for (const v1::Run& run : job->runs()) {
        if (run.state() != v1::RUN_RUNNING && run.state() != v1::RUN_ASSIGNED) {
          continue;
        }
        const v1::ListWorkersResponse workers = fc.cluster().Workers(false);
        for (const auto& w : workers.workers()) {
          if (w.worker_id() == run.worker_id()) busy.push_back(w.name());
        }
      }
    }
    const std::vector<std::string>& pool =
        busy.empty() ? fc.worker_names() : busy;
    const std::string victim =
        pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
    SCOPED_TRACE(absl::StrCat("trial ", trial, " (seed ", seed,
                              "): ", Name(fault), " of ", victim, " at step ",
                              at_step, ", for ", hold_ms, " ms"));
    std::printf("trial %d: %s of %s (%s) at step %d, for %d ms\n", trial,
                Name(fault), victim.c_str(),
                busy.empty() ? "idle" : "holding a run", at_step, hold_ms);
    std::fflush(stdout);
    testing::Subprocess* w = fc.cluster().worker(victim);
    if (fault == Fault::kKill) {
      w->Signal(SIGKILL);
      w->Wait(absl::Seconds(10));
      absl::SleepFor(absl::Milliseconds(hold_ms));
      fc.RestartWorker(victim);
    } else {
      w->Signal(SIGSTOP);
      absl::SleepFor(absl::Milliseconds(hold_ms));
      w->Signal(SIGCONT);
    }

    for (const std::string& id : jobs) {
      absl::StatusOr<v1::Job> job = fc.WaitFinished(id, absl::Seconds(120));
      ASSERT_TRUE(job.ok()) << job.status() << "\n" << fc.Logs();
      EXPECT_EQ(fc.CheckJob(*job), "") << job->DebugString();
      for (const v1::Run& run : job->runs()) {
        if (run.attempt() > 1) {
          std::printf("  %s: attempt %d (%s)\n", run.run_id().c_str(),
                      run.attempt(), run.failure_reason().c_str());
        }
      }
    }
    ASSERT_TRUE(fc.WaitConnected(absl::Seconds(30))) << fc.Logs();
    if (HasFailure()) {
      std::printf("%s\n", fc.Logs().c_str());
      return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Blocks, WorkerFaultTest, ::testing::Range(0, kBlocks));

}  // namespace
}  // namespace lockstep::fault
