// `lockstep-worker daemon`: probes this machine, runs the start-up selftest
// and serves the coordinator (worker/daemon.h) until SIGINT or SIGTERM.
#ifndef LOCKSTEP_WORKER_CMD_DAEMON_H_
#define LOCKSTEP_WORKER_CMD_DAEMON_H_

#include <cstdint>
#include <string>

#include "worker/hardware_probe.h"

namespace lockstep::worker::cmd {

struct DaemonCommandOptions {
  // Coordinator address, host:port.
  std::string coordinator = "127.0.0.1:7070";
  // Worker name, unique in the fleet. Empty: the host name.
  std::string name;
  // Comma-separated key=value labels, e.g. "rack=a1,pool=ci". Empty: none.
  std::string labels;
  // Runs executed at the same time.
  int slots = 1;
  // First reconnect delay, ms (doubles up to max_backoff_ms); > 0.
  int64_t initial_backoff_ms = 200;
  // Longest reconnect delay, ms; >= initial_backoff_ms.
  int64_t max_backoff_ms = 5000;
  // A FaultSpec (worker/exec/fault.h) flipped into every run this worker
  // executes, reported in its hardware profile (a drill). Empty: none.
  std::string inject_fault;
  // A StallSpec (worker/run_child.h): the run process sleeps before a step
  // (a drill for hung runs). Empty: none.
  std::string inject_stall;
  // Whether the drills above may be used; without it a drill flag is a
  // usage error.
  bool allow_drills = false;
  // The directory file datasets are read from (absolute; passed to every
  // run process). Empty: file datasets are refused.
  std::string data_root;
  // The blob cache of models' initial parameters (worker/blob_cache.h):
  // its folder (passed to every run process) and the bytes it keeps.
  std::string blob_cache_dir = "lockstep-blob-cache";
  int64_t blob_cache_bytes = int64_t{4} << 30;
  // Run the selftest at start and report it in the hardware profile.
  bool selftest = true;
  // Wall-clock limit of one run, s.
  int64_t run_timeout_s = 3600;
  // Memory (MiB) and CPU-time (s) limits of each run process: 0 derives
  // them from the job's size, -1 sets none (worker/run_limits.h).
  int64_t run_memory_limit_mb = 0;
  int64_t run_cpu_limit_s = 0;
  // Bearer token (a token of the worker role), else a file holding it, else
  // $LOCKSTEP_TOKEN. Empty: none.
  std::string token;
  std::string token_file;
  // TLS: the coordinator's CA (set: TLS), this worker's certificate and key
  // (mutual TLS; the certificate's CN is then the worker's name).
  std::string ca;
  std::string cert;
  std::string key;
};

// Serves until a signal stops it. Exit 0 after SIGINT / SIGTERM; 1 when the
// probe fails, the binary cannot find itself or the daemon stops on an
// error; 64 for a malformed option, a drill without allow_drills or a bad
// data root (message on stderr). Runs execute as
// `<this binary> execute` child processes.
int DaemonMain(const DaemonCommandOptions& options, HardwareProbe& probe);

}  // namespace lockstep::worker::cmd

#endif  // LOCKSTEP_WORKER_CMD_DAEMON_H_
