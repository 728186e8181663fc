// The worker daemon: one WorkerGateway stream per session (hello with the
// hardware profile, heartbeats at the interval the coordinator asks for,
// reconnection with exponential backoff and jitter), and the runs the
// coordinator assigns, each executed in its own process.
//
// Fingerprint batches are numbered per run attempt and kept until the
// coordinator acknowledges them; after a reconnect (a coordinator restart,
// a broken connection) every unacknowledged batch, then the run's result,
// is sent again, and the coordinator's idempotent ingest drops duplicates.
//
// Thread-safe: Run() blocks in the calling thread; Stop() may be called from
// any thread (e.g. a signal-handling thread).
#ifndef LOCKSTEP_WORKER_DAEMON_H_
#define LOCKSTEP_WORKER_DAEMON_H_

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
#include "grpcpp/grpcpp.h"
#include "lockstep/v1/worker.pb.h"
#include "lockstep/v1/worker_gateway.grpc.pb.h"
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
};

class WorkerDaemon {
 public:
  WorkerDaemon(DaemonOptions options, lockstep::v1::HardwareProfile profile);
  ~WorkerDaemon();
  WorkerDaemon(const WorkerDaemon&) = delete;
  WorkerDaemon& operator=(const WorkerDaemon&) = delete;

  // Connects and serves until Stop(). Returns OK after Stop(), or an error
  // the daemon cannot recover from (the coordinator refused the hello as
  // invalid).
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
    int64_t next_sequence = 0;
    std::deque<lockstep::v1::FingerprintBatch> unacked;
    int32_t steps_done = 0;
    float last_loss = 0.0f;
    std::optional<lockstep::v1::RunFinished> finished;
  };

  // One session; returns the status the stream ended with.
  grpc::Status Session(lockstep::v1::WorkerGateway::Stub* stub);
  void OnCoordinatorMessage(const lockstep::v1::CoordinatorMessage& m);
  void OnRunMessage(const std::string& run_id, lockstep::v1::WorkerMessage m);
  void StartRun(const lockstep::v1::RunAssignment& a);
  // Writes to the current stream; false when there is none or it broke.
  bool Send(const lockstep::v1::WorkerMessage& m);
  // Everything the coordinator has not acknowledged, after a (re)connect.
  void Resend();
  lockstep::v1::Heartbeat MakeHeartbeat();
  // Destroys supervisors whose runs ended (joins their threads).
  void Reap();

  const DaemonOptions options_;
  const lockstep::v1::HardwareProfile profile_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* active_ ABSL_GUARDED_BY(mu_) = nullptr;
  Stream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t sessions_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, ActiveRun> runs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<RunSupervisor>> reap_ ABSL_GUARDED_BY(mu_);
  // Serialises writes to the stream (acquired before mu_).
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
};

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_DAEMON_H_
