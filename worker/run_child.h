// The run process: `lockstep-worker execute` reads one RunAssignment frame
// from stdin, trains it, and writes WorkerMessage frames to stdout: a
// `progress` after every step, a `batch` (fingerprints of one captured step,
// step_complete with its digest; sequence left 0 for the daemon to number)
// after every captured step, and a final `finished`. Diagnostics go to
// stderr. Each run in its own process: a crash, a hang or a runaway
// allocation ends that run only, never the daemon.
#ifndef LOCKSTEP_WORKER_RUN_CHILD_H_
#define LOCKSTEP_WORKER_RUN_CHILD_H_

#include <optional>

#include "absl/status/status.h"
#include "lockstep/v1/worker_gateway.pb.h"
#include "worker/exec/fault.h"

namespace lockstep::worker {

// Executes `assignment`, writing frames to `out_fd`. Returns the status the
// `finished` frame reported (also written when the run fails).
absl::Status ExecuteAssignment(const lockstep::v1::RunAssignment& assignment,
                               const std::optional<FaultSpec>& fault,
                               int out_fd);

// main() of `lockstep-worker execute`: stdin → ExecuteAssignment → stdout.
// Exit code 0 when the run succeeded, 1 otherwise.
int RunChildMain(const std::optional<FaultSpec>& fault);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_RUN_CHILD_H_
