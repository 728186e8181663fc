// `lockstep-worker probe`: prints this machine's hardware profile.
#ifndef LOCKSTEP_WORKER_CMD_PROBE_H_
#define LOCKSTEP_WORKER_CMD_PROBE_H_

#include <cstdio>

#include "worker/hardware_probe.h"

namespace lockstep::worker::cmd {

struct ProbeCommandOptions {
  // Print the profile as JSON (proto field names) instead of a table.
  bool json = false;
};

// Probes with `probe` and prints the profile on `out`. Exit 0, or 1 with
// "lockstep-worker: probe failed: ..." on `err` when the probe fails.
int ProbeMain(const ProbeCommandOptions& options, HardwareProbe& probe,
              std::FILE* out, std::FILE* err);

}  // namespace lockstep::worker::cmd

#endif  // LOCKSTEP_WORKER_CMD_PROBE_H_
