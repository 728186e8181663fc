#include "worker/cmd/execute.h"

#include <cstdio>

#include "worker/cmd/drill_flags.h"
#include "worker/run_child.h"

namespace lockstep::worker::cmd {

int ExecuteMain(const ExecuteCommandOptions& options) {
  bool bad_fault = false, bad_stall = false;
  ChildOptions child;
  child.fault = ParseFaultFlag(options.inject_fault, &bad_fault, stderr);
  child.stall = ParseStallFlag(options.inject_stall, &bad_stall, stderr);
  if (bad_fault || bad_stall) return kUsageExitCode;
  return RunChildMain(child);
}

}  // namespace lockstep::worker::cmd
