// Fleet load harness: a real lockstep-coordinator child process on loopback
// and N simulated workers, each a real WorkerGateway stream.
//
// The simulated workers share a few threads: their streams use gRPC's
// callback API over a handful of channels (one HTTP/2 connection carries a
// bounded number of concurrent streams), and one driver thread sends what
// is due (heartbeats, fingerprint batches, run results). Each worker sends
// the hello the real daemon sends (this machine's probed hardware profile,
// with a host name and device identity of its own), heartbeats at the
// interval the coordinator's welcome asks for, listing its run's progress,
// and executes assigned runs the way the daemon does: one batch per
// captured step holding a fingerprint of every manifest entry, with the
// step digest, a bounded number of batches unacknowledged, then the run's
// result with its run digest. The fingerprints are synthesized: the same
// for every worker, so every run of an audit agrees and the audit's
// verification path (step and run digests checked against the stored
// fingerprints) runs in full.
//
// Heartbeats are not acknowledged by the protocol. To time them, each
// heartbeat is followed on its stream by a probe the coordinator answers
// at once (a batch with a negative sequence, refused with `rejected` for
// its shape, inline, without touching the store or the scheduler); a
// stream is handled in order, so the probe's answer comes after the
// heartbeat was handled, and after any batches the worker sent before it.
// The probes show up in the coordinator's refused-batch counter.
#ifndef LOCKSTEP_TESTS_LOAD_LOAD_HARNESS_H_
#define LOCKSTEP_TESTS_LOAD_LOAD_HARNESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace lockstep::load {

struct LoadOptions {
  // Simulated workers.
  int workers = 10;
  // Streams per channel (each channel is its own TCP connection).
  int streams_per_channel = 50;
  // How long heartbeats are measured with the fleet idle.
  absl::Duration heartbeat_window = absl::Seconds(10);
  // Model-zoo workload of the audit; empty: no audit.
  std::string workload = "mlp";
  // Time a simulated worker takes per training step.
  absl::Duration step_time = absl::Milliseconds(20);
  // Batches a run may have unacknowledged before it waits.
  int window = 4;
  // Follow each heartbeat with a probe to time it.
  bool heartbeat_probe = true;
  // Bounds.
  absl::Duration connect_timeout = absl::Seconds(90);
  absl::Duration audit_timeout = absl::Seconds(150);
  // Scratch folder for the database and the coordinator's log.
  std::string dir;
  // Extra coordinator flags.
  std::vector<std::string> coordinator_flags;
};

// Process figures from /proc.
struct ProcessSample {
  double cpu_seconds = 0;  // utime + stime
  int64_t rss_kb = 0;      // VmRSS
  int64_t hwm_kb = 0;      // VmHWM
};

struct LoadResult {
  int workers = 0;
  int connected = 0;  // welcomed
  double connect_seconds = 0;

  // Idle fleet, over the heartbeat window.
  int64_t heartbeats = 0;
  double heartbeats_per_second = 0;
  int64_t heartbeat_probes = 0;
  int64_t heartbeat_probes_answered = 0;
  double heartbeat_p50_ms = 0;
  double heartbeat_p99_ms = 0;
  double idle_cpu_percent = 0;  // of one core
  int64_t idle_rss_kb = 0;

  // The audit.
  std::string audit_id;
  std::string audit_error;            // StartAudit's error, if it failed
  double audit_start_seconds = 0;     // StartAudit RPC
  double audit_assigned_seconds = 0;  // until every worker holds its run
  int runs_assigned = 0;
  int runs_recorded = 0;  // results acknowledged
  int64_t batches_sent = 0;
  int64_t batches_acked = 0;
  int64_t batches_refused = 0;
  std::string first_refusal;
  int64_t cancels = 0;
  double batch_ack_p50_ms = 0;
  double batch_ack_p99_ms = 0;
  int64_t fingerprints_acked = 0;
  int fingerprints_per_batch = 0;
  double ingest_seconds = 0;  // first batch sent to last result recorded
  double fingerprints_per_second = 0;
  double ingest_cpu_percent = 0;
  // Heartbeats timed while the runs streamed.
  double busy_heartbeat_p50_ms = 0;
  double busy_heartbeat_p99_ms = 0;
  std::string audit_state;  // AUDIT_DONE, ...
  int audit_healthy = 0;
  int audit_workers = 0;
  double audit_total_seconds = 0;  // StartAudit until the audit is done

  ProcessSample end;  // after everything
  // Workers with at least one heartbeat probe answered, and probes still
  // unanswered when the harness closed the streams.
  int workers_heartbeat_answered = 0;
  int64_t probes_unanswered_at_end = 0;
  // Streams that ended before the harness closed them.
  int streams_lost = 0;
  std::string first_stream_error;
};

// Runs one measurement: starts the coordinator, connects the workers,
// measures the idle fleet, runs the audit, and stops everything it started.
absl::StatusOr<LoadResult> RunLoad(const LoadOptions& options);

// /proc/<pid>/stat and /proc/<pid>/status.
absl::StatusOr<ProcessSample> SampleProcess(int pid);

}  // namespace lockstep::load

#endif  // LOCKSTEP_TESTS_LOAD_LOAD_HARNESS_H_
