// One run process (`lockstep-worker execute`) and the thread that reads its
// frames. The daemon owns one RunSupervisor per active run.
//
// Thread-safe: Kill() may be called from any thread; callbacks run on the
// supervisor's reader thread.
#ifndef LOCKSTEP_WORKER_RUN_SUPERVISOR_H_
#define LOCKSTEP_WORKER_RUN_SUPERVISOR_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lockstep/v1/worker_gateway.pb.h"
#include "worker/run_limits.h"

namespace lockstep::worker {

struct SupervisorOptions {
  // argv of the run process; the assignment arrives on its stdin.
  std::vector<std::string> argv;
  // The run is killed after this long (wall clock). Default 1 h.
  int64_t timeout_ms = 3600 * 1000;
  // Applied to the process (run_limits.h) before it is sent the assignment;
  // core dumps are always off. Default: no memory or CPU-time limit.
  RunResourceLimits limits;
};

class RunSupervisor {
 public:
  // Every frame the run process writes (progress, batch, finished). When
  // the process ends without a `finished` frame (crash, kill, timeout), a
  // synthesized failed `finished` naming the signal, exit code or timeout
  // (or the resource limit it ran into) and the last lines of its stderr is
  // delivered instead. Not called after Kill().
  using OnMessage = std::function<void(lockstep::v1::WorkerMessage)>;

  static absl::StatusOr<std::unique_ptr<RunSupervisor>> Start(
      const SupervisorOptions& options,
      const lockstep::v1::RunAssignment& assignment, OnMessage on_message);
  // Kills the process (if still running) and joins the reader thread.
  // REQUIRES: not called from the OnMessage callback.
  ~RunSupervisor();
  RunSupervisor(const RunSupervisor&) = delete;
  RunSupervisor& operator=(const RunSupervisor&) = delete;

  // Kills the run process now; no further callbacks are made.
  void Kill();
  pid_t pid() const { return pid_; }

 private:
  RunSupervisor() = default;
  void ReadLoop(lockstep::v1::RunAssignment assignment,
                SupervisorOptions options);

  pid_t pid_ = -1;
  int out_fd_ = -1;  // child's stdout
  std::string stderr_path_;
  OnMessage on_message_;
  std::thread reader_;
  absl::Mutex mu_;
  bool killed_ ABSL_GUARDED_BY(mu_) = false;
  bool exited_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_RUN_SUPERVISOR_H_
