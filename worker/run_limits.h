// Resource limits of a run process, derived from the job's declared size.
//
// The daemon starts every run in a process of its own (run_supervisor.h);
// before that process reads its assignment, the supervisor caps it with
// prlimit(2):
//   memory   RLIMIT_DATA (private writable memory: heap, thread stacks):
//            kMemoryBaseBytes + kMemoryFactor * the plan's live tensor bytes
//            (model::EstimateLiveTensorBytes), for runs on the CPU backend.
//            Not set for runs that may use a GPU: the CUDA driver maps large
//            private areas that are not the job's tensors.
//   CPU time RLIMIT_CPU (all threads): kCpuBaseSeconds + steps * (3 forward
//            passes at kCpuFloor flop/s + hashing the live tensors at
//            kHashFloor byte/s), rounded up. The floors are two orders of
//            magnitude below what the CPU kernels reach, so only a run gone
//            wrong (or a far too slow node) meets the limit. SIGXCPU at the
//            limit, SIGKILL kHardSlackSeconds later.
//   core     RLIMIT_CORE 0 always: a crashed run leaves no core dump (it
//            would hold the job's data).
// Operators override either limit with the daemon's --run_memory_limit_mb
// and --run_cpu_limit_s (0: derived, as above; -1: no limit).
#ifndef LOCKSTEP_WORKER_RUN_LIMITS_H_
#define LOCKSTEP_WORKER_RUN_LIMITS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lockstep/v1/worker_gateway.pb.h"

namespace lockstep::worker {

inline constexpr int64_t kMemoryBaseBytes = int64_t{512} << 20;
inline constexpr int64_t kMemoryFactor = 4;
inline constexpr int64_t kCpuBaseSeconds = 120;
inline constexpr double kCpuFloor = 2.5e8;  // flop/s
inline constexpr double kHashFloor = 1e8;   // byte/s
inline constexpr int64_t kHardSlackSeconds = 10;

// What the operator set: 0 derives the limit from the job, -1 means none,
// a positive value is the limit itself (MiB, seconds).
struct RunLimitSettings {
  int64_t memory_limit_mb = 0;
  int64_t cpu_limit_s = 0;
};

// The limits of one run process. 0 means no limit of that kind.
struct RunResourceLimits {
  int64_t memory_bytes = 0;
  int64_t cpu_seconds = 0;
  // How each was chosen, for messages: "derived from the job's size",
  // "--run_memory_limit_mb", ...
  std::string memory_source;
  std::string cpu_source;
};

// Limits for `assignment` on a node that has (`node_has_gpu`) or lacks a
// usable GPU. A job whose model does not plan gets the base limits (its run
// fails at planning anyway). INVALID_ARGUMENT for settings below -1.
absl::StatusOr<RunResourceLimits> DeriveRunLimits(
    const lockstep::v1::RunAssignment& assignment, bool node_has_gpu,
    const RunLimitSettings& settings);

// Applies `limits` and RLIMIT_CORE 0 to process `pid` (prlimit(2)).
absl::Status ApplyRunLimits(pid_t pid, const RunResourceLimits& limits);

// One line for logs and failure messages: "memory 600 MiB (derived from the
// job's size), CPU time 130 s (derived from the job's size), no core dumps".
std::string DescribeRunLimits(const RunResourceLimits& limits);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_RUN_LIMITS_H_
