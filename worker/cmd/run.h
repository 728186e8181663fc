// `lockstep-worker run`: trains a model locally and compares the runs
// (worker/exec/run_command.h).
#ifndef LOCKSTEP_WORKER_CMD_RUN_H_
#define LOCKSTEP_WORKER_CMD_RUN_H_

#include "worker/exec/run_command.h"

namespace lockstep::worker::cmd {

// Runs the command with progress on stdout and errors on stderr. Exit 0 when
// the runs agree, 1 when they differ, 2 for a bad model or config.
int RunMain(const RunCommandOptions& options);

}  // namespace lockstep::worker::cmd

#endif  // LOCKSTEP_WORKER_CMD_RUN_H_
