// The worker daemon's connection to the coordinator: one WorkerGateway
// stream per session, a hello with the hardware profile, heartbeats at the
// interval the coordinator asks for, and reconnection with exponential
// backoff (with jitter) whenever the stream ends.
//
// Thread-safe: Run() blocks in the calling thread; Stop() may be called from
// any thread (e.g. a signal-handling thread).
#ifndef LOCKSTEP_WORKER_DAEMON_H_
#define LOCKSTEP_WORKER_DAEMON_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "lockstep/v1/worker.pb.h"
#include "lockstep/v1/worker_gateway.grpc.pb.h"

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
};

class WorkerDaemon {
 public:
  WorkerDaemon(DaemonOptions options, lockstep::v1::HardwareProfile profile);
  WorkerDaemon(const WorkerDaemon&) = delete;
  WorkerDaemon& operator=(const WorkerDaemon&) = delete;

  // Connects and serves until Stop(). Returns OK after Stop(), or an error
  // the daemon cannot recover from (the coordinator refused the hello as
  // invalid).
  absl::Status Run();
  void Stop();

  // Sessions that received a welcome so far (for tests and logs).
  int64_t sessions() const;

 private:
  // One session; returns the status the stream ended with.
  grpc::Status Session(lockstep::v1::WorkerGateway::Stub* stub);

  const DaemonOptions options_;
  const lockstep::v1::HardwareProfile profile_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* active_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t sessions_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_DAEMON_H_
