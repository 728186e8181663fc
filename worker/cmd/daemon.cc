#include "worker/cmd/daemon.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/logging.h"
#include "common/transport.h"
#include "worker/cmd/drill_flags.h"
#include "worker/daemon.h"
#include "worker/data/dataset.h"  // CanonicalDataRoot
#include "worker/run_limits.h"
#include "worker/selftest_child.h"

namespace lockstep::worker::cmd {

int DaemonMain(const DaemonCommandOptions& flags, HardwareProbe& probe) {
  if (!flags.allow_drills &&
      (!flags.inject_fault.empty() || !flags.inject_stall.empty())) {
    std::fprintf(
        stderr,
        "lockstep-worker: %s is a drill and is refused unless "
        "--allow_drills is given (never on a production worker)\n",
        !flags.inject_fault.empty() ? "--inject_fault" : "--inject_stall");
    return kUsageExitCode;
  }
  std::string data_root;
  if (!flags.data_root.empty()) {
    absl::StatusOr<std::string> root =
        CanonicalDataRoot(flags.data_root, "--data_root");
    if (!root.ok()) {
      std::fprintf(stderr, "lockstep-worker: %s\n",
                   std::string(root.status().message()).c_str());
      return kUsageExitCode;
    }
    data_root = *root;
  }

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto profile = probe.Probe();
  if (!profile.ok()) {
    std::fprintf(stderr, "lockstep-worker: probe failed: %s\n",
                 profile.status().ToString().c_str());
    return 1;
  }
  bool bad_fault = false;
  std::optional<FaultSpec> fault =
      ParseFaultFlag(flags.inject_fault, &bad_fault, stderr);
  if (bad_fault) return kUsageExitCode;
  DaemonOptions options;
  // Runs execute in child processes of this same binary.
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    std::fprintf(stderr, "lockstep-worker: cannot find its own binary\n");
    return 1;
  }
  self[n] = '\0';
  options.run_argv = {self, "execute"};
  if (!data_root.empty())
    options.run_argv.push_back("--data_root=" + data_root);
  options.blob_cache.dir = flags.blob_cache_dir;
  options.blob_cache.max_bytes = flags.blob_cache_bytes;
  if (!options.blob_cache.dir.empty() && options.blob_cache.dir[0] != '/') {
    char cwd[4096];
    if (getcwd(cwd, sizeof(cwd)) != nullptr) {
      options.blob_cache.dir = std::string(cwd) + "/" + options.blob_cache.dir;
    }
  }
  options.run_argv.push_back("--blob_cache_dir=" + options.blob_cache.dir);
  if (fault.has_value()) {
    options.run_argv.push_back("--inject_fault=" + flags.inject_fault);
    auto* f = profile->mutable_injecting_fault();
    f->set_step(fault->step);
    f->set_layer(fault->layer);
    f->set_role(lockstep::v1::TensorRole_Name(fault->role));
    f->set_bit(fault->bit);
  }
  bool bad_stall = false;
  if (ParseStallFlag(flags.inject_stall, &bad_stall, stderr).has_value()) {
    options.run_argv.push_back("--inject_stall=" + flags.inject_stall);
  }
  if (bad_stall) return kUsageExitCode;
  options.run_timeout_ms = flags.run_timeout_s * 1000;
  options.run_limits.memory_limit_mb = flags.run_memory_limit_mb;
  options.run_limits.cpu_limit_s = flags.run_cpu_limit_s;
  // The same checks DeriveRunLimits makes per run, once at start.
  if (absl::Status s = DeriveRunLimits(lockstep::v1::RunAssignment(), false,
                                       options.run_limits)
                           .status();
      !s.ok()) {
    std::fprintf(stderr, "lockstep-worker: %s\n",
                 std::string(s.message()).c_str());
    return kUsageExitCode;
  }
  options.coordinator = flags.coordinator;
  absl::StatusOr<std::string> token =
      lockstep::ResolveToken(flags.token, flags.token_file);
  if (!token.ok()) {
    std::fprintf(stderr, "lockstep-worker: %s\n",
                 std::string(token.status().message()).c_str());
    return kUsageExitCode;
  }
  options.security.token = *token;
  options.security.ca_file = flags.ca;
  options.security.cert_file = flags.cert;
  options.security.key_file = flags.key;
  if (absl::Status s = lockstep::ChannelCredentials(options.security).status();
      !s.ok()) {
    std::fprintf(stderr, "lockstep-worker: %s\n",
                 std::string(s.message()).c_str());
    return kUsageExitCode;
  }
  options.name = flags.name;
  if (options.name.empty()) options.name = profile->hostname();
  options.slots = flags.slots;
  options.initial_backoff_ms = flags.initial_backoff_ms;
  options.max_backoff_ms = flags.max_backoff_ms;
  if (!flags.labels.empty()) {
    for (absl::string_view kv : absl::StrSplit(flags.labels, ',')) {
      std::pair<std::string, std::string> p =
          absl::StrSplit(kv, absl::MaxSplits('=', 1));
      if (p.first.empty()) {
        std::fprintf(stderr,
                     "lockstep-worker: --labels: \"%s\" is not key=value\n",
                     std::string(kv).c_str());
        return kUsageExitCode;
      }
      options.labels[p.first] = p.second;
    }
  }
  if (options.initial_backoff_ms <= 0 ||
      options.max_backoff_ms < options.initial_backoff_ms) {
    std::fprintf(stderr,
                 "lockstep-worker: --initial_backoff_ms must be > 0 and <= "
                 "--max_backoff_ms\n");
    return kUsageExitCode;
  }
  LS_LOG(INFO) << "worker " << options.name << ", class "
               << profile->hardware_class_digest() << " ("
               << profile->hardware_class() << ")"
               << (profile->gpus_size() == 0
                       ? ", no GPU: " + profile->gpu_error()
                       : "");

  if (flags.selftest) {
    // In a child process: the daemon itself creates no CUDA context.
    *profile->mutable_selftest() =
        RunSelftestInChild({self, "selftest", "--json"});
    const lockstep::v1::SelftestResult& st = profile->selftest();
    if (st.passed()) {
      LS_LOG(INFO) << "selftest (" << st.duration_ms()
                   << " ms): " << st.summary();
    } else {
      LS_LOG(ERROR) << "selftest (" << st.duration_ms()
                    << " ms): " << st.summary()
                    << "; the coordinator will quarantine this worker";
    }
  }
  WorkerDaemon daemon(options, *profile);
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    LS_LOG(INFO) << "signal " << sig << ": stopping";
    daemon.Stop();
  });
  absl::Status status = daemon.Run();
  if (!status.ok()) {
    std::fprintf(stderr, "lockstep-worker: %s\n", status.ToString().c_str());
    // Wake the signal thread so the process can exit.
    kill(getpid(), SIGTERM);
    signal_thread.join();
    return 1;
  }
  signal_thread.join();
  return 0;
}

}  // namespace lockstep::worker::cmd
