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
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lockstep/v1/worker_gateway.pb.h"
#include "worker/exec/fault.h"

namespace lockstep::worker {

// A drill for hung runs: before step `step` of a run of model `model`
// (empty: any model), the run process sleeps `seconds`.
struct StallSpec {
  int step = 0;
  int seconds = 0;
  std::string model;
};
// Parses "step=S,seconds=N[,model=NAME]"; INVALID_ARGUMENT naming the key.
absl::StatusOr<StallSpec> ParseStallSpec(absl::string_view text);

struct ChildOptions {
  std::optional<FaultSpec> fault;
  std::optional<StallSpec> stall;
  // The canonical directory file datasets are read from
  // (DatasetOptions::data_root); empty: file datasets are refused.
  std::string data_root;
  // The daemon's blob cache (worker/blob_cache.h): a model with
  // parameters_digest reads its verified ParameterSet from there. Empty:
  // such models fail.
  std::string blob_cache_dir;
};

// Executes `assignment`, writing frames to `out_fd`. Returns the status the
// `finished` frame reported (also written when the run fails).
absl::Status ExecuteAssignment(const lockstep::v1::RunAssignment& assignment,
                               const ChildOptions& options, int out_fd);

// The body of the run process: reads one assignment frame from stdin,
// runs ExecuteAssignment with stdout as `out_fd`. Returns the exit code: 0
// when the run succeeded, 1 otherwise. `lockstep-worker execute`
// (worker/cmd/execute.h) calls it after parsing its drill specs.
int RunChildMain(const ChildOptions& options);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_RUN_CHILD_H_
