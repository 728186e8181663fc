// `lockstep-worker execute` (internal): the run process the daemon starts
// for each assignment, assignment on stdin, frames on stdout
// (worker/run_child.h).
#ifndef LOCKSTEP_WORKER_CMD_EXECUTE_H_
#define LOCKSTEP_WORKER_CMD_EXECUTE_H_

#include <string>

namespace lockstep::worker::cmd {

struct ExecuteCommandOptions {
  // A FaultSpec (worker/exec/fault.h) flipped into the run. Empty: none.
  std::string inject_fault;
  // A StallSpec (worker/run_child.h): sleep before a step. Empty: none.
  std::string inject_stall;
  // The directory file datasets are read from (--data_root); empty: file
  // datasets are refused.
  std::string data_root;
  // The daemon's blob cache folder (--blob_cache_dir); empty: models with
  // parameters_digest fail.
  std::string blob_cache_dir;
};

// Exit 0 when the run succeeded, 1 when it failed, 64 when a drill spec or
// the data root is malformed (message on stderr).
int ExecuteMain(const ExecuteCommandOptions& options);

}  // namespace lockstep::worker::cmd

#endif  // LOCKSTEP_WORKER_CMD_EXECUTE_H_
