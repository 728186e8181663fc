// A small fleet through the load harness: every simulated worker connects,
// its heartbeats are answered, every batch is acknowledged and every run of
// the fleet audit is recorded and judged healthy.
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/load/load_harness.h"
#include "tests/testing/subprocess.h"

namespace lockstep::load {
namespace {

TEST(LoadHarnessSmokeTest, SmallFleetConnectsHeartbeatsAndCompletesAnAudit) {
  constexpr int kWorkers = 20;
  LoadOptions o;
  o.workers = kWorkers;
  o.streams_per_channel = 8;  // several channels
  o.heartbeat_window = absl::Seconds(3);
  o.workload = "mlp";
  o.step_time = absl::Milliseconds(2);
  o.audit_timeout = absl::Seconds(90);
  o.dir = absl::StrCat(testing::TempDir(), "/load-smoke-", getpid());
  ASSERT_EQ(std::system(absl::StrCat("mkdir -p '", o.dir, "'").c_str()), 0);

  absl::StatusOr<LoadResult> r = RunLoad(o);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string log = testing::ReadFileOrEmpty(o.dir + "/coordinator.log");

  EXPECT_EQ(r->connected, kWorkers) << log;
  EXPECT_EQ(r->streams_lost, 0) << r->first_stream_error << "\n" << log;

  // Heartbeats: sent during the window, and every worker's answered.
  EXPECT_GT(r->heartbeats, 0);
  EXPECT_GT(r->heartbeat_probes_answered, 0);
  EXPECT_EQ(r->workers_heartbeat_answered, kWorkers);
  // At most the last probe of each worker may still be on its way.
  EXPECT_LE(r->probes_unanswered_at_end, kWorkers);

  // The audit: one run per worker, every batch acknowledged, every result
  // recorded, every worker healthy.
  EXPECT_TRUE(r->audit_error.empty()) << r->audit_error;
  EXPECT_EQ(r->runs_assigned, kWorkers);
  EXPECT_EQ(r->runs_recorded, kWorkers) << log;
  EXPECT_GT(r->batches_sent, 0);
  EXPECT_EQ(r->batches_acked, r->batches_sent);
  EXPECT_EQ(r->batches_refused, 0) << r->first_refusal;
  EXPECT_EQ(r->cancels, 0);
  EXPECT_GT(r->fingerprints_per_batch, 0);
  EXPECT_EQ(r->fingerprints_acked,
            r->batches_acked * r->fingerprints_per_batch);
  EXPECT_EQ(r->audit_state, "AUDIT_DONE") << log;
  EXPECT_EQ(r->audit_workers, kWorkers);
  EXPECT_EQ(r->audit_healthy, kWorkers);

  // The coordinator was measured.
  EXPECT_GT(r->end.rss_kb, 0);
  EXPECT_GE(r->end.hwm_kb, r->end.rss_kb);
}

}  // namespace
}  // namespace lockstep::load
