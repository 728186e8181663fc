// `lockstep-worker run`: train a model locally N times, print per-step loss
// and digests, and say whether the runs agree (standalone mode, no
// coordinator).
//
//   lockstep-worker run --model=m.json --config=c.json [--runs=N]
//       [--inject_fault=step=S,layer=L,role=R,bit=B[,element=E][,slot=X]]
//       [--dump=first_divergent|all|<layer>:<role>[:step]] [--dump_dir=DIR]
//       [--data_root=DIR]
//
// Exit codes: 0 the runs agree (or N == 1); 1 they differ; 2 a spec, config
// or flag error (the message is printed as is); 3 any other failure.
#ifndef LOCKSTEP_WORKER_EXEC_RUN_COMMAND_H_
#define LOCKSTEP_WORKER_EXEC_RUN_COMMAND_H_

#include <cstdio>
#include <string>

namespace lockstep::worker {

inline constexpr int kRunExitAgree = 0;
inline constexpr int kRunExitDiffer = 1;
inline constexpr int kRunExitSpecError = 2;
inline constexpr int kRunExitFailure = 3;
// Largest --runs.
inline constexpr int kMaxLocalRuns = 64;

struct RunCommandOptions {
  std::string model_path;   // --model
  std::string config_path;  // --config
  int runs = 1;             // --runs, 1 .. kMaxLocalRuns
  // --inject_fault: a FaultSpec (fault.h); run 1 gets it when runs >= 2,
  // run 0 when runs == 1. Empty: no fault.
  std::string inject_fault;
  std::string dump;                        // --dump (dump.h); empty: none
  std::string dump_dir = "lockstep-dump";  // --dump_dir
  // --data_root: the directory file datasets are read from; empty: file
  // datasets are refused.
  std::string data_root;
  // --device_resident: on the CUDA backend keep tensors on the device for
  // the whole run (ExecutorOptions::device_resident); false copies every
  // kernel's tensors in and out (same bits; for comparing the two).
  bool device_resident = true;
  // --queue_device_fingerprints: in a device-resident run, collect the
  // device fingerprints once per step
  // (ExecutorOptions::queue_device_fingerprints); false waits for each
  // (same bits; for comparing the two).
  bool queue_device_fingerprints = true;
  // --op_times: after each run, its wall time per step by op
  // (ExecutorOptions::op_times).
  bool op_times = false;
  // --op_times_by_layer: the same, one line per layer and op
  // (ExecutorOptions::op_times_by_layer); implies op_times.
  bool op_times_by_layer = false;
};

// Runs the command; progress and results go to `out`, errors to `err`.
// Returns the exit code.
int RunCommand(const RunCommandOptions& options, std::FILE* out,
               std::FILE* err);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_EXEC_RUN_COMMAND_H_
