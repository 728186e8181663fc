#include "worker/run_limits.h"

#include <sys/resource.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/job_config.h"
#include "model/plan.h"

namespace lockstep::worker {
namespace {

constexpr char kDerived[] = "derived from the job's size";

int64_t SaturatingSeconds(double seconds) {
  if (!(seconds < 1e12)) return int64_t{1000000000000};
  return static_cast<int64_t>(std::ceil(seconds));
}

absl::Status SetLimit(pid_t pid, __rlimit_resource resource, const char* name,
                      rlim_t soft, rlim_t hard) {
  struct rlimit limit;
  limit.rlim_cur = soft;
  limit.rlim_max = hard;
  if (prlimit(pid, resource, &limit, nullptr) != 0) {
    return absl::InternalError(absl::StrCat("prlimit(", name, ") on process ",
                                            pid, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RunResourceLimits> DeriveRunLimits(
    const v1::RunAssignment& assignment, bool node_has_gpu,
    const RunLimitSettings& settings) {
  if (settings.memory_limit_mb < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--run_memory_limit_mb: ", settings.memory_limit_mb,
                     " is below -1 (0: derived from the job, -1: no limit)"));
  }
  if (settings.memory_limit_mb > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--run_memory_limit_mb: ", settings.memory_limit_mb,
                     " exceeds the limit of 2^40 MiB"));
  }
  if (settings.cpu_limit_s < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--run_cpu_limit_s: ", settings.cpu_limit_s,
                     " is below -1 (0: derived from the job, -1: no limit)"));
  }
  // Sizes of the job, when its model plans; else the base limits.
  int64_t live_bytes = 0;
  double step_flops = 0.0;
  absl::StatusOr<model::ModelPlan> plan = model::PlanModel(
      assignment.model(), assignment.config(), model::Limits());
  if (plan.ok()) {
    live_bytes = model::EstimateLiveTensorBytes(*plan, assignment.config());
    step_flops = 3.0 * static_cast<double>(model::ForwardFlops(*plan));
  }
  const v1::JobConfig& config = assignment.config();
  RunResourceLimits limits;
  if (settings.memory_limit_mb > 0) {
    limits.memory_bytes = settings.memory_limit_mb << 20;
    limits.memory_source = "--run_memory_limit_mb";
  } else if (settings.memory_limit_mb == 0) {
    // The CUDA driver's private mappings are no measure of the job: a run
    // that may use a GPU gets no memory limit unless the operator sets one.
    const bool may_use_gpu = config.backend() == v1::CUDA ||
                             (config.backend() != v1::CPU && node_has_gpu);
    if (!may_use_gpu) {
      const int64_t max = std::numeric_limits<int64_t>::max();
      limits.memory_bytes =
          live_bytes > (max - kMemoryBaseBytes) / kMemoryFactor
              ? max
              : kMemoryBaseBytes + kMemoryFactor * live_bytes;
      limits.memory_source = kDerived;
    }
  }
  if (settings.cpu_limit_s > 0) {
    limits.cpu_seconds = settings.cpu_limit_s;
    limits.cpu_source = "--run_cpu_limit_s";
  } else if (settings.cpu_limit_s == 0) {
    // RLIMIT_CPU adds up every thread; threads that wait on a barrier spin
    // for a while, so the per-step term scales with the pool.
    int64_t threads = config.threads();
    if (threads <= 0) {
      threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
    }
    const double per_step =
        step_flops / kCpuFloor + static_cast<double>(live_bytes) / kHashFloor;
    limits.cpu_seconds = SaturatingSeconds(
        static_cast<double>(kCpuBaseSeconds) +
        per_step * static_cast<double>(std::max(1, config.steps())) *
            static_cast<double>(threads));
    limits.cpu_source = kDerived;
  }
  return limits;
}

absl::Status ApplyRunLimits(pid_t pid, const RunResourceLimits& limits) {
  if (absl::Status s = SetLimit(pid, RLIMIT_CORE, "RLIMIT_CORE", 0, 0);
      !s.ok()) {
    return s;
  }
  if (limits.memory_bytes > 0) {
    const rlim_t bytes = static_cast<rlim_t>(limits.memory_bytes);
    if (absl::Status s =
            SetLimit(pid, RLIMIT_DATA, "RLIMIT_DATA", bytes, bytes);
        !s.ok()) {
      return s;
    }
  }
  if (limits.cpu_seconds > 0) {
    const rlim_t soft = static_cast<rlim_t>(limits.cpu_seconds);
    if (absl::Status s = SetLimit(pid, RLIMIT_CPU, "RLIMIT_CPU", soft,
                                  soft + kHardSlackSeconds);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

std::string DescribeRunLimits(const RunResourceLimits& limits) {
  std::string memory =
      limits.memory_bytes > 0
          ? absl::StrFormat("memory %d MiB (%s)",
                            (limits.memory_bytes + (1 << 20) - 1) >> 20,
                            limits.memory_source)
          : std::string("no memory limit");
  std::string cpu = limits.cpu_seconds > 0
                        ? absl::StrFormat("CPU time %d s (%s)",
                                          limits.cpu_seconds, limits.cpu_source)
                        : std::string("no CPU-time limit");
  return absl::StrCat(memory, ", ", cpu, ", no core dumps");
}

}  // namespace lockstep::worker
