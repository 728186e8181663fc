// The worker daemon: one WorkerGateway stream per session (hello with the
// hardware profile, heartbeats at the interval the coordinator asks for,
// reconnection with exponential backoff and jitter), and the runs the
// coordinator assigns, each executed in its own process.
//
// Fingerprint batches are numbered per run attempt and kept until the
// coordinator acknowledges them. Each run's batches, then its result, are
// published on the stream strictly in sequence order: the coordinator
// answers every batch and result with an ack or a rejection, in the order
// it received them. When it rejects one with OUT_OF_RANGE (a gap),
// UNAVAILABLE or RESOURCE_EXHAUSTED, the daemon resends that run's
// unacknowledged batches from the oldest, then its result: the first time
// at once, after further rejections with exponential backoff
// (resend_initial_backoff_ms doubling up to resend_max_backoff_ms; an ack
// that makes progress resets it). Until the resend is on the stream no newer
// batch of that run is written, and rejections of messages written before
// the resend (the later batches of the same gap) do not trigger another
// one. After a reconnect (a coordinator restart, a broken connection) every
// run publishes again from its oldest unacknowledged batch before anything
// newer; the coordinator's idempotent ingest drops duplicates.
//
// Thread-safe: Run() blocks in the calling thread; Stop() may be called from
// any thread (e.g. a signal-handling thread).
#ifndef LOCKSTEP_WORKER_DAEMON_H_
#define LOCKSTEP_WORKER_DAEMON_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/transport.h"
#include "grpcpp/grpcpp.h"
#include "lockstep/v1/worker.pb.h"
#include "lockstep/v1/worker_gateway.grpc.pb.h"
#include "worker/blob_cache.h"
#include "worker/run_supervisor.h"

namespace lockstep::worker {

struct DaemonOptions {
  // Coordinator address, host:port. Default 127.0.0.1:7070.
  std::string coordinator = "127.0.0.1:7070";
  // Worker name, unique in the fleet. Required.
  std::string name;
  std::map<std::string, std::string> labels;
  // Concurrent runs. Default 1.
  int slots = 1;
  // First reconnect delay; doubles (±20 % jitter) up to max. Defaults
  // 200 ms and 5 s.
  int64_t initial_backoff_ms = 200;
  int64_t max_backoff_ms = 5000;
  // Deadline for the coordinator's welcome after hello. Default 10 s.
  int64_t welcome_timeout_ms = 10000;
  // The run process: argv of `lockstep-worker execute ...`. Empty: runs are
  // refused (the worker only reports itself).
  std::vector<std::string> run_argv;
  // Wall-clock limit of one run. Default 1 h.
  int64_t run_timeout_ms = 3600 * 1000;
  // Memory and CPU-time limits of each run process (run_limits.h). Default:
  // derived from the job's size; core dumps are always off.
  RunLimitSettings run_limits;
  // Delay before the second resend of a run's unacknowledged batches after
  // consecutive rejections (the first is immediate); doubles up to max.
  // Defaults 100 ms and 5 s.
  int64_t resend_initial_backoff_ms = 100;
  int64_t resend_max_backoff_ms = 5000;
  // TLS files and the bearer token (common/transport.h). Default:
  // plaintext, no token.
  ChannelSecurity security;
  // The cache of models' initial parameters, fetched with
  // WorkerGateway.FetchBlob before a run that needs them starts. An empty
  // dir: no cache, and such runs fail.
  BlobCacheOptions blob_cache;
};

class WorkerDaemon {
 public:
  WorkerDaemon(DaemonOptions options, lockstep::v1::HardwareProfile profile);
  ~WorkerDaemon();
  WorkerDaemon(const WorkerDaemon&) = delete;
  WorkerDaemon& operator=(const WorkerDaemon&) = delete;

  // Connects and serves until Stop(). Returns OK after Stop(), or an error
  // the daemon cannot recover from (the coordinator refused the hello as
  // invalid, or refused this worker's token or certificate:
  // UNAUTHENTICATED, PERMISSION_DENIED).
  absl::Status Run();
  // Stops serving and kills running runs.
  void Stop();

  // Sessions that received a welcome so far (for tests and logs).
  int64_t sessions() const;

 private:
  using Stream = grpc::ClientReaderWriter<lockstep::v1::WorkerMessage,
                                          lockstep::v1::CoordinatorMessage>;
  struct ActiveRun {
    lockstep::v1::RunAssignment assignment;
    std::unique_ptr<RunSupervisor> supervisor;
    int64_t next_sequence = 0;  // of the next batch from the run process
    std::deque<lockstep::v1::FingerprintBatch> unacked;  // sequence order
    int32_t steps_done = 0;
    float last_loss = 0.0f;
    std::optional<lockstep::v1::RunFinished> finished;

    // Publishing on the current stream. Batches with a sequence below
    // send_cursor have been written on it.
    int64_t send_cursor = 0;
    bool finished_sent = false;
    // Nothing of this run is written before this time (resend backoff).
    absl::Time hold_until = absl::InfinitePast();
    // Delay of the next resend: 0 (at once), then doubling.
    int64_t resend_backoff_ms = 0;
    // Batch and result messages written on this stream, answers (acks and
    // rejections) received for them, and how many of the first answers
    // belong to messages written before the latest resend.
    int64_t stream_sent = 0;
    int64_t stream_answers = 0;
    int64_t stale_answers = 0;
  };

  // One session; returns the status the stream ended with.
  grpc::Status Session(lockstep::v1::WorkerGateway::Stub* stub);
  // The path of the verified blob `digest` in the cache, fetched from the
  // coordinator if absent.
  absl::StatusOr<std::string> Parameters(const std::string& digest);
  void OnCoordinatorMessage(const lockstep::v1::CoordinatorMessage& m);
  void OnRunMessage(const std::string& run_id, lockstep::v1::WorkerMessage m);
  void StartRun(const lockstep::v1::RunAssignment& a);
  // Writes to the current stream; false when there is none or it broke.
  bool Send(const lockstep::v1::WorkerMessage& m);
  // Writes every run's batches (and then result) not yet written on the
  // current stream, in sequence order, skipping runs in resend backoff.
  void Publish();
  // A rejected batch or result of `run`: schedules the resend.
  void OnRetryableRejection(ActiveRun* run) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Background publisher of one session: runs Publish() when kicked or when
  // a run's backoff ends, until resender_stop_.
  void ResendLoop();
  lockstep::v1::Heartbeat MakeHeartbeat();
  // Destroys supervisors whose runs ended (joins their threads).
  void Reap();

  const DaemonOptions options_;
  const lockstep::v1::HardwareProfile profile_;

  // Opened when a run first needs it.
  absl::Mutex cache_mu_;
  std::unique_ptr<BlobCache> blob_cache_ ABSL_GUARDED_BY(cache_mu_);
  // The gateway stub of Run(), for FetchBlob; set before the first session.
  std::atomic<lockstep::v1::WorkerGateway::Stub*> stub_{nullptr};
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* active_ ABSL_GUARDED_BY(mu_) = nullptr;
  Stream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t sessions_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, ActiveRun> runs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<RunSupervisor>> reap_ ABSL_GUARDED_BY(mu_);
  bool publish_kick_ ABSL_GUARDED_BY(mu_) = false;
  bool resender_stop_ ABSL_GUARDED_BY(mu_) = false;
  // Serialises writes to the stream (acquired before mu_).
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
};

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_DAEMON_H_
