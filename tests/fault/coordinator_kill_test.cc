// The coordinator killed (SIGKILL) at seeded random points while jobs run
// and workers stream, and restarted on the same database each time.
//
// Each trial submits a CANONICAL job over two healthy workers and a split
// job over a healthy and a bit-flip drill worker, kills the coordinator
// at a random point (before any step is stored, mid-stream, or after
// results were committed), leaves it down for a random pause and restarts
// it. Then every job must end with the
// verdict of the reference run, every run's stored fingerprints must equal
// the reference's (nothing acknowledged lost, nothing stored twice), and no
// run may be executed twice: leases outlive the outage, so every run ends
// on attempt 1, a run whose result was committed before the kill keeps
// that result, and every (run, attempt) starts exactly once in the worker
// logs.
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

// 4 blocks of 5 trials: 20 kills. Each block is its own cluster, so the
// blocks shard (BUILD: shard_count).
constexpr int kBlocks = 4;
constexpr int kTrialsPerBlock = 5;

class CoordinatorKillTest : public ::testing::TestWithParam<int> {};

TEST_P(CoordinatorKillTest, RestartedCoordinatorLosesAndRepeatsNothing) {
  const int block = GetParam();
  const uint64_t seed = SuiteSeed(20261125) + block;
  std::mt19937_64 rng(seed);
  FaultCluster fc(absl::StrCat(testing::TempDir(), "/coordinator_kill_", block),
                  {"--heartbeat_interval_ms=200", "--heartbeat_timeout_ms=3000",
                   "--lease_ms=15000"});
  ASSERT_TRUE(fc.StartCoordinator());
  fc.StartWorker("a1", "a", false, 2);
  fc.StartWorker("a2", "a", false, 2);
  fc.StartWorker("b-healthy", "b", false, 1);
  fc.StartWorker("b-drill", "b", true, 1);
  ASSERT_TRUE(fc.WaitConnected(absl::Seconds(60))) << fc.Logs();
  const std::string reference = fc.RecordReference();
  ASSERT_EQ(reference, "") << fc.Logs();

  for (int t = 0; t < kTrialsPerBlock; ++t) {
    const int trial = block * kTrialsPerBlock + t;
    // Where the kill lands, all three equally likely: before any step is
    // stored (0..800 ms after submission), mid-stream (once a run has
    // done a random number of its 40 steps: the runs pause 1 s at step
    // 20), or after results were committed (once a random number of the
    // 4 runs has succeeded, plus 0..300 ms).
    const int phase = std::uniform_int_distribution<int>(0, 2)(rng);
    const int at_ms = std::uniform_int_distribution<int>(0, 800)(rng);
    const int at_step = std::uniform_int_distribution<int>(1, 39)(rng);
    const int at_results = std::uniform_int_distribution<int>(1, 4)(rng);
    const int extra_ms = std::uniform_int_distribution<int>(0, 300)(rng);
    const int down_ms = std::uniform_int_distribution<int>(0, 500)(rng);
    const std::string where =
        phase == 0   ? absl::StrCat(at_ms, " ms after submission")
        : phase == 1 ? absl::StrCat("at step ", at_step)
                     : absl::StrCat(at_results, " results + ", extra_ms, " ms");
    SCOPED_TRACE(absl::StrCat("trial ", trial, " (seed ", seed, "): kill ",
                              where, ", down ", down_ms, " ms"));
    const std::vector<std::string> jobs = {fc.Submit(JobKind::kCanonical),
                                           fc.Submit(JobKind::kSplit)};
    ASSERT_FALSE(jobs[0].empty() || jobs[1].empty()) << fc.Logs();
    if (phase == 0) {
      absl::SleepFor(absl::Milliseconds(at_ms));
    } else if (phase == 1) {
      fc.WaitProgress(jobs, at_step, 0, absl::Seconds(60));
    } else {
      fc.WaitProgress(jobs, 0, at_results, absl::Seconds(60));
      absl::SleepFor(absl::Milliseconds(extra_ms));
    }
    fc.KillCoordinator();

    // What the killed coordinator had committed.
    std::map<std::string, v1::Run> at_kill;
    int committed_results = 0;
    for (const std::string& job : jobs) {
      auto runs = ReadRunRecords(fc.cluster().db(), job);
      ASSERT_TRUE(runs.ok()) << runs.status();
      for (const auto& [id, run] : *runs) {
        at_kill[id] = run;
        if (run.state() == v1::RUN_SUCCEEDED) ++committed_results;
      }
    }
    int64_t stored_steps = 0;
    for (const auto& [id, run] : at_kill) {
      int64_t partials = 0;
      auto steps = ReadStoredSteps(fc.cluster().db(), id, &partials);
      ASSERT_TRUE(steps.ok()) << steps.status();
      stored_steps += steps->size();
    }
    std::printf(
        "trial %d: killed %s with %d of 4 results and %lld steps "
        "committed; down %d ms\n",
        trial, where.c_str(), committed_results,
        static_cast<long long>(stored_steps), down_ms);
    std::fflush(stdout);

    absl::SleepFor(absl::Milliseconds(down_ms));
    ASSERT_TRUE(fc.StartCoordinator()) << fc.Logs();
    for (const std::string& id : jobs) {
      absl::StatusOr<v1::Job> job = fc.WaitFinished(id, absl::Seconds(120));
      ASSERT_TRUE(job.ok()) << job.status() << "\n" << fc.Logs();
      const std::string problems = fc.CheckJob(*job);
      EXPECT_EQ(problems, "") << job->DebugString();
      for (const v1::Run& run : job->runs()) {
        EXPECT_EQ(run.attempt(), 1)
            << run.run_id() << " was re-executed: " << run.failure_reason();
        const v1::Run& before = at_kill[run.run_id()];
        if (before.state() == v1::RUN_SUCCEEDED) {
          EXPECT_EQ(run.finished_unix_ms(), before.finished_unix_ms())
              << run.run_id() << ": a committed result was replaced";
          EXPECT_EQ(run.run_digest(), before.run_digest()) << run.run_id();
        }
      }
    }
    for (const auto& [run_attempt, count] : fc.Executions()) {
      EXPECT_EQ(count, 1) << run_attempt.first << " attempt "
                          << run_attempt.second << " executed " << count
                          << " times";
    }
    if (HasFailure()) {
      std::printf("%s\n", fc.Logs().c_str());
      return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Blocks, CoordinatorKillTest,
                         ::testing::Range(0, kBlocks));

}  // namespace
}  // namespace lockstep::fault
