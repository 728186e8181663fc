// Network faults between the workers and the coordinator: every worker
// dials a FaultProxy (fault_proxy.h) in front of the coordinator, and each
// trial, while jobs stream, delays and jitters the traffic (reordering
// delivery across directions and sessions), cuts every connection once or
// more, and refuses new connections for a while. Every job must end with
// the verdict its runs call for and every run's stored fingerprints must be
// exactly the reference's (fault_cluster.h).
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/fault/fault_cluster.h"
#include "tests/fault/fault_proxy.h"
#include "tests/testing/subprocess.h"

namespace lockstep::fault {
namespace {

constexpr int kTrials = 6;

TEST(NetworkFaultTest, CutsDelaysAndReorderingLoseNothing) {
  const uint64_t seed = SuiteSeed(20261127);
  std::mt19937_64 rng(seed);
  FaultCluster fc(absl::StrCat(testing::TempDir(), "/network_fault"),
                  {"--heartbeat_interval_ms=200", "--heartbeat_timeout_ms=2000",
                   "--lease_ms=4000", "--max_attempts=20"});
  ASSERT_TRUE(fc.StartCoordinator());
  auto proxy = FaultProxy::Start(fc.port(), seed);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  const std::string via = absl::StrCat("127.0.0.1:", (*proxy)->port());
  fc.StartWorker("a1", "a", false, 2, via);
  fc.StartWorker("a2", "a", false, 2, via);
  fc.StartWorker("b-healthy", "b", false, 1, via);
  fc.StartWorker("b-drill", "b", true, 1, via);
  ASSERT_TRUE(fc.WaitConnected(absl::Seconds(60))) << fc.Logs();
  ASSERT_EQ(fc.RecordReference(), "") << fc.Logs();

  for (int trial = 0; trial < kTrials; ++trial) {
    const int delay_ms = std::uniform_int_distribution<int>(0, 20)(rng);
    const int jitter_ms = std::uniform_int_distribution<int>(0, 40)(rng);
    const int cuts = std::uniform_int_distribution<int>(1, 3)(rng);
    const int refuse_ms = std::uniform_int_distribution<int>(0, 800)(rng);
    SCOPED_TRACE(absl::StrCat("trial ", trial, " (seed ", seed, "): delay ",
                              delay_ms, " ms + up to ", jitter_ms, " ms, ",
                              cuts, " cuts, refusing for ", refuse_ms, " ms"));
    std::printf(
        "trial %d: delay %d ms + jitter up to %d ms, %d cuts, "
        "refusing %d ms after the last\n",
        trial, delay_ms, jitter_ms, cuts, refuse_ms);
    std::fflush(stdout);
    (*proxy)->SetDelay(absl::Milliseconds(delay_ms));
    (*proxy)->SetJitter(absl::Milliseconds(jitter_ms));
    const std::vector<std::string> jobs = {fc.Submit(JobKind::kCanonical),
                                           fc.Submit(JobKind::kSplit)};
    ASSERT_FALSE(jobs[0].empty() || jobs[1].empty()) << fc.Logs();
    for (int c = 0; c < cuts; ++c) {
      absl::SleepFor(absl::Milliseconds(
          std::uniform_int_distribution<int>(300, 2500)(rng)));
      const int cut = (*proxy)->CutAll();
      std::printf("  cut %d connections\n", cut);
    }
    (*proxy)->SetRefuse(true);
    absl::SleepFor(absl::Milliseconds(refuse_ms));
    (*proxy)->SetRefuse(false);
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
    (*proxy)->SetDelay(absl::ZeroDuration());
    (*proxy)->SetJitter(absl::ZeroDuration());
    ASSERT_TRUE(fc.WaitConnected(absl::Seconds(30))) << fc.Logs();
    if (HasFailure()) {
      std::printf("%s\n", fc.Logs().c_str());
      return;
    }
  }
  std::printf("proxy: %lld connections, %lld bytes forwarded\n",
              static_cast<long long>((*proxy)->connections_accepted()),
              static_cast<long long>((*proxy)->bytes_forwarded()));
}

}  // namespace
}  // namespace lockstep::fault
