// The command-line flags of lockstep-worker, turned into each subcommand's
// options. Only the binary's main() links this (the flags are defined in
// flags.cc and nowhere in library code).
#ifndef LOCKSTEP_WORKER_CMD_FLAGS_H_
#define LOCKSTEP_WORKER_CMD_FLAGS_H_

#include "worker/cmd/daemon.h"
#include "worker/cmd/execute.h"
#include "worker/cmd/probe.h"
#include "worker/cmd/selftest.h"
#include "worker/exec/run_command.h"
#include "worker/hardware_probe.h"

namespace lockstep::worker::cmd {

// REQUIRES absl::ParseCommandLine has run.
ProbeCommandOptions ProbeOptionsFromFlags();
RunCommandOptions RunOptionsFromFlags();
ExecuteCommandOptions ExecuteOptionsFromFlags();
DaemonCommandOptions DaemonOptionsFromFlags();
SelftestCommandOptions SelftestOptionsFromFlags();
// The hardware probe's options (probe and daemon).
SystemProbeOptions SystemProbeOptionsFromFlags();

}  // namespace lockstep::worker::cmd

#endif  // LOCKSTEP_WORKER_CMD_FLAGS_H_
