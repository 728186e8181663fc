// Fleet load: for each fleet size, a fresh lockstep-coordinator child
// process on 127.0.0.1 and that many simulated workers (tests/load/
// load_harness.h). Measures the idle fleet heartbeating, then a fleet audit
// of one run per worker while the runs stream their fingerprints, and prints
// one table.
//
//   bazel run -c opt //tests/load:load_harness -- [--workers=10,100,1000]
//       [--heartbeat_window_s=10] [--workload=mlp] [--step_ms=20]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/load/load_harness.h"
#include "tests/testing/subprocess.h"

ABSL_FLAG(std::string, workers, "10,100,1000",
          "comma-separated fleet sizes, one measurement each");
ABSL_FLAG(int, heartbeat_window_s, 10,
          "seconds the idle fleet's heartbeats are measured");
ABSL_FLAG(std::string, workload, "mlp",
          "model-zoo workload of the fleet audit; empty: no audit");
ABSL_FLAG(int, step_ms, 20, "time a simulated worker takes per step, ms");
ABSL_FLAG(int, window, 4, "batches a run may have unacknowledged");
ABSL_FLAG(int, streams_per_channel, 50,
          "worker streams per channel (TCP connection)");
ABSL_FLAG(int, audit_timeout_s, 150, "bound on each audit phase, s");
ABSL_FLAG(bool, heartbeat_probe, true,
          "follow each heartbeat with a probe the coordinator answers, to "
          "time heartbeats (the protocol does not acknowledge them)");
ABSL_FLAG(std::vector<std::string>, coordinator_flags, {},
          "extra flags for lockstep-coordinator, comma-separated");
ABSL_FLAG(bool, set_max_runs, true,
          "pass --max_runs=<fleet size> to the coordinator when the fleet "
          "exceeds its default of 64 runs per job (one audit run per worker)");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::vector<int> sizes;
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_workers), ',', absl::SkipEmpty())) {
    int n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 1 || n > 100000) {
      std::fprintf(stderr, "--workers: \"%s\" is not a fleet size\n",
                   std::string(s).c_str());
      return 2;
    }
    sizes.push_back(n);
  }
  std::vector<lockstep::load::LoadResult> results;
  for (int n : sizes) {
    lockstep::load::LoadOptions o;
    o.workers = n;
    o.heartbeat_window = absl::Seconds(absl::GetFlag(FLAGS_heartbeat_window_s));
    o.workload = absl::GetFlag(FLAGS_workload);
    o.step_time = absl::Milliseconds(absl::GetFlag(FLAGS_step_ms));
    o.window = absl::GetFlag(FLAGS_window);
    o.streams_per_channel = absl::GetFlag(FLAGS_streams_per_channel);
    o.audit_timeout = absl::Seconds(absl::GetFlag(FLAGS_audit_timeout_s));
    o.heartbeat_probe = absl::GetFlag(FLAGS_heartbeat_probe);
    o.coordinator_flags = absl::GetFlag(FLAGS_coordinator_flags);
    if (absl::GetFlag(FLAGS_set_max_runs) && n > 64) {
      o.coordinator_flags.push_back(absl::StrCat("--max_runs=", n));
    }
    o.dir = absl::StrCat(lockstep::testing::TempDir(), "/lockstep-load-",
                         getpid(), "-", n);
    std::system(absl::StrCat("mkdir -p '", o.dir, "'").c_str());
    std::fprintf(stderr, "fleet of %d: coordinator log in %s\n", n,
                 o.dir.c_str());
    absl::StatusOr<lockstep::load::LoadResult> r = lockstep::load::RunLoad(o);
    if (!r.ok()) {
      std::fprintf(stderr, "fleet of %d: %s\n", n,
                   r.status().ToString().c_str());
      return 1;
    }
    const auto& x = *r;
    std::fprintf(
        stderr,
        "fleet of %d: %d connected in %.1f s; %lld/%lld heartbeat probes "
        "answered; audit %s %s (%d/%d healthy), %d/%d runs recorded, "
        "%lld/%lld batches acked (%d fingerprints each), %lld refused%s%s, "
        "%d streams lost%s%s\n",
        n, x.connected, x.connect_seconds,
        static_cast<long long>(x.heartbeat_probes_answered),
        static_cast<long long>(x.heartbeat_probes), x.audit_id.c_str(),
        x.audit_error.empty() ? x.audit_state.c_str() : x.audit_error.c_str(),
        x.audit_healthy, x.audit_workers, x.runs_recorded, x.runs_assigned,
        static_cast<long long>(x.batches_acked),
        static_cast<long long>(x.batches_sent), x.fingerprints_per_batch,
        static_cast<long long>(x.batches_refused),
        x.first_refusal.empty() ? "" : ": ", x.first_refusal.c_str(),
        x.streams_lost, x.first_stream_error.empty() ? "" : ": ",
        x.first_stream_error.c_str());
    results.push_back(*r);
  }

  std::printf(
      "\n%7s %8s %6s %6s %6s %6s %7s %7s %6s %6s %8s %8s %8s %8s %8s %10s "
      "%8s\n",
      "workers", "connect", "hb/s", "hb p50", "hb p99", "idle", "idle",
      "ack p50", "ack", "ingest", "busy hb", "RSS", "VmHWM", "audit", "runs",
      "ingest", "audit");
  std::printf(
      "%7s %8s %6s %6s %6s %6s %7s %7s %6s %6s %8s %8s %8s %8s %8s %10s "
      "%8s\n",
      "", "s", "", "ms", "ms", "CPU %", "RSS MiB", "ms", "p99 ms", "CPU %",
      "p99 ms", "MiB", "MiB", "start s", "assigned", "fp/s", "done s");
  for (const auto& x : results) {
    std::printf(
        "%7d %8.1f %6.0f %6.2f %6.2f %6.1f %7.1f %7.1f %6.1f %6.1f %8.1f "
        "%8.1f %8.1f %8.2f %8.2f %10.0f %8.1f\n",
        x.workers, x.connect_seconds, x.heartbeats_per_second,
        x.heartbeat_p50_ms, x.heartbeat_p99_ms, x.idle_cpu_percent,
        x.idle_rss_kb / 1024.0, x.batch_ack_p50_ms, x.batch_ack_p99_ms,
        x.ingest_cpu_percent, x.busy_heartbeat_p99_ms, x.end.rss_kb / 1024.0,
        x.end.hwm_kb / 1024.0, x.audit_start_seconds, x.audit_assigned_seconds,
        x.fingerprints_per_second, x.audit_total_seconds);
  }
  return 0;
}
