// lockstep-worker: runs Lockstep jobs on this machine's CPU and GPUs.
//
//   lockstep-worker daemon --coordinator=host:7070 --name=gpu-node-3
//   lockstep-worker probe [--json]
//   lockstep-worker run --model=m.json --config=c.json [--runs=N] ...
//   lockstep-worker selftest [--ops=a,b] [--seed=N] [--json]
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "google/protobuf/util/json_util.h"
#include "worker/daemon.h"
#include "worker/exec/fault.h"
#include "worker/exec/run_command.h"
#include "worker/hardware_probe.h"
#include "worker/run_child.h"
#include "worker/selftest.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070",
          "daemon: coordinator address, host:port");
ABSL_FLAG(std::string, name, "",
          "daemon: worker name, unique in the fleet (default: the host name)");
ABSL_FLAG(std::string, labels, "",
          "daemon: comma-separated key=value labels, e.g. rack=a1,pool=ci");
ABSL_FLAG(int, slots, 1, "daemon: runs executed at the same time");
ABSL_FLAG(int64_t, initial_backoff_ms, 200,
          "daemon: first reconnect delay, ms (doubles up to the max)");
ABSL_FLAG(int64_t, max_backoff_ms, 5000, "daemon: longest reconnect delay, ms");
ABSL_FLAG(bool, json, false,
          "probe: print the profile as JSON; selftest: print the report as "
          "JSON");
ABSL_FLAG(std::string, model, "", "run: model file (JSON or text proto)");
ABSL_FLAG(std::string, config, "", "run: job config file (JSON or text proto)");
ABSL_FLAG(int, runs, 1, "run: number of runs to train and compare");
ABSL_FLAG(std::string, inject_fault, "",
          "run, daemon: flip one bit, step=S,layer=L,role=R,bit=B[,element=E]"
          "[,slot=X]; run: into run 1 when --runs >= 2; daemon: into every "
          "run this worker executes (a drill: the worker reports it in its "
          "hardware profile)");
ABSL_FLAG(std::string, inject_stall, "",
          "daemon: a drill for hung runs, step=S,seconds=N[,model=NAME]: the "
          "run process sleeps N s before step S");
ABSL_FLAG(bool, selftest, true,
          "daemon: run the selftest (as `lockstep-worker selftest`) at start "
          "and report it in the hardware profile; the coordinator "
          "quarantines a worker whose selftest fails");
ABSL_FLAG(int64_t, run_timeout_s, 3600,
          "daemon: wall-clock limit of one run, s");
ABSL_FLAG(std::string, dump, "",
          "run: write tensors as .npy: first_divergent, all or "
          "<layer>:<role>[:step]");
ABSL_FLAG(std::string, dump_dir, "lockstep-dump",
          "run: directory for --dump files");
ABSL_FLAG(std::string, ops, "",
          "selftest: comma-separated ops to test, e.g. "
          "dense.forward,conv2d.grad_weight (default: all)");
ABSL_FLAG(std::string, seed, "1",
          "selftest: seed of the test inputs (unsigned 32-bit)");

namespace {

constexpr char kUsage[] =
    "Lockstep worker.\n"
    "  lockstep-worker daemon [--coordinator=127.0.0.1:7070] [--name=NAME] "
    "[--labels=k=v,...]\n"
    "  lockstep-worker probe [--json]   print this machine's hardware profile\n"
    "  lockstep-worker execute          (internal) one run: assignment on "
    "stdin, frames on stdout\n"
    "  lockstep-worker run --model=m.json --config=c.json [--runs=N]\n"
    "      [--inject_fault=step=S,layer=L,role=R,bit=B] "
    "[--dump=first_divergent|"
    "all|<layer>:<role>[:step]] [--dump_dir=DIR]\n"
    "      train locally and compare runs (exit 0 agree, 1 differ, 2 bad "
    "spec)\n"
    "  lockstep-worker selftest [--ops=op,...] [--seed=N] [--json]\n"
    "      validate this node: every op in every mode on every backend here "
    "vs the\n"
    "      CPU CANONICAL scalar reference (exit 0 pass, 1 a CANONICAL row "
    "differs or a\n"
    "      DETERMINISTIC row does not repeat, 2 usage error)";

int Probe() {
  auto profile = lockstep::worker::NewSystemProbe()->Probe();
  if (!profile.ok()) {
    std::fprintf(stderr, "lockstep-worker: probe failed: %s\n",
                 profile.status().ToString().c_str());
    return 1;
  }
  if (absl::GetFlag(FLAGS_json)) {
    std::string json;
    google::protobuf::util::JsonPrintOptions opts;
    opts.add_whitespace = true;
    opts.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(*profile, &json, opts);
    std::printf("%s", json.c_str());
    return 0;
  }
  const auto& p = *profile;
  std::printf("host:            %s\n", p.hostname().c_str());
  std::printf("cpu:             %s (%s, %s), %d logical cores\n",
              p.cpu().model().c_str(), p.cpu().vendor().c_str(),
              p.cpu().arch().c_str(), p.cpu().cores());
  std::string features;
  for (const auto& f : p.cpu().features()) features += f + " ";
  std::printf("isa:             %s\n", features.c_str());
  std::printf("os:              %s, kernel %s\n", p.software().distro().c_str(),
              p.software().kernel().c_str());
  std::printf("built with:      %s, CUDA %s\n", p.software().compiler().c_str(),
              p.software().built_with_cuda() ? "yes" : "no");
  if (p.gpus_size() == 0) {
    std::printf("gpus:            none (%s)\n", p.gpu_error().c_str());
  }
  for (const auto& g : p.gpus()) {
    std::printf("gpu %d:           %s, sm_%d%d, %d SMs, %s\n", g.ordinal(),
                g.name().c_str(), g.compute_capability_major(),
                g.compute_capability_minor(), g.sm_count(), g.uuid().c_str());
  }
  std::printf("hardware class:  %s\n", p.hardware_class().c_str());
  std::printf("class digest:    %s\n", p.hardware_class_digest().c_str());
  return 0;
}

int Run() {
  lockstep::worker::RunCommandOptions options;
  options.model_path = absl::GetFlag(FLAGS_model);
  options.config_path = absl::GetFlag(FLAGS_config);
  options.runs = absl::GetFlag(FLAGS_runs);
  options.inject_fault = absl::GetFlag(FLAGS_inject_fault);
  options.dump = absl::GetFlag(FLAGS_dump);
  options.dump_dir = absl::GetFlag(FLAGS_dump_dir);
  return lockstep::worker::RunCommand(options, stdout, stderr);
}

// The --inject_fault flag, parsed; exits with a usage error when malformed.
std::optional<lockstep::worker::FaultSpec> FaultFlag(bool* bad) {
  *bad = false;
  const std::string text = absl::GetFlag(FLAGS_inject_fault);
  if (text.empty()) return std::nullopt;
  auto fault = lockstep::worker::ParseFaultSpec(text);
  if (!fault.ok()) {
    // The parser's messages already name the flag.
    std::fprintf(stderr, "lockstep-worker: %s\n",
                 std::string(fault.status().message()).c_str());
    *bad = true;
    return std::nullopt;
  }
  return *fault;
}

// The --inject_stall flag, parsed; `bad` is set when malformed.
std::optional<lockstep::worker::StallSpec> StallFlag(bool* bad) {
  *bad = false;
  const std::string text = absl::GetFlag(FLAGS_inject_stall);
  if (text.empty()) return std::nullopt;
  auto stall = lockstep::worker::ParseStallSpec(text);
  if (!stall.ok()) {
    std::fprintf(stderr, "lockstep-worker: %s\n",
                 std::string(stall.status().message()).c_str());
    *bad = true;
    return std::nullopt;
  }
  return *stall;
}

int Execute() {
  bool bad_fault = false, bad_stall = false;
  lockstep::worker::ChildOptions options;
  options.fault = FaultFlag(&bad_fault);
  options.stall = StallFlag(&bad_stall);
  if (bad_fault || bad_stall) return 64;
  return lockstep::worker::RunChildMain(options);
}

int Daemon() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto profile = lockstep::worker::NewSystemProbe()->Probe();
  if (!profile.ok()) {
    std::fprintf(stderr, "lockstep-worker: probe failed: %s\n",
                 profile.status().ToString().c_str());
    return 1;
  }
  bool bad_fault = false;
  std::optional<lockstep::worker::FaultSpec> fault = FaultFlag(&bad_fault);
  if (bad_fault) return 64;
  lockstep::worker::DaemonOptions options;
  // Runs execute in child processes of this same binary.
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    std::fprintf(stderr, "lockstep-worker: cannot find its own binary\n");
    return 1;
  }
  self[n] = '\0';
  options.run_argv = {self, "execute"};
  if (fault.has_value()) {
    options.run_argv.push_back("--inject_fault=" +
                               absl::GetFlag(FLAGS_inject_fault));
    auto* f = profile->mutable_injecting_fault();
    f->set_step(fault->step);
    f->set_layer(fault->layer);
    f->set_role(lockstep::v1::TensorRole_Name(fault->role));
    f->set_bit(fault->bit);
  }
  bool bad_stall = false;
  if (StallFlag(&bad_stall).has_value()) {
    options.run_argv.push_back("--inject_stall=" +
                               absl::GetFlag(FLAGS_inject_stall));
  }
  if (bad_stall) return 64;
  options.run_timeout_ms = absl::GetFlag(FLAGS_run_timeout_s) * 1000;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.name = absl::GetFlag(FLAGS_name);
  if (options.name.empty()) options.name = profile->hostname();
  options.slots = absl::GetFlag(FLAGS_slots);
  options.initial_backoff_ms = absl::GetFlag(FLAGS_initial_backoff_ms);
  options.max_backoff_ms = absl::GetFlag(FLAGS_max_backoff_ms);
  const std::string labels = absl::GetFlag(FLAGS_labels);
  if (!labels.empty()) {
    for (absl::string_view kv : absl::StrSplit(labels, ',')) {
      std::pair<std::string, std::string> p =
          absl::StrSplit(kv, absl::MaxSplits('=', 1));
      if (p.first.empty()) {
        std::fprintf(stderr,
                     "lockstep-worker: --labels: \"%s\" is not key=value\n",
                     std::string(kv).c_str());
        return 64;
      }
      options.labels[p.first] = p.second;
    }
  }
  if (options.initial_backoff_ms <= 0 ||
      options.max_backoff_ms < options.initial_backoff_ms) {
    std::fprintf(stderr,
                 "lockstep-worker: --initial_backoff_ms must be > 0 and <= "
                 "--max_backoff_ms\n");
    return 64;
  }
  LS_LOG(INFO) << "worker " << options.name << ", class "
               << profile->hardware_class_digest() << " ("
               << profile->hardware_class() << ")"
               << (profile->gpus_size() == 0
                       ? ", no GPU: " + profile->gpu_error()
                       : "");

  if (absl::GetFlag(FLAGS_selftest)) {
    *profile->mutable_selftest() = lockstep::worker::RunStartupSelftest();
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
  lockstep::worker::WorkerDaemon daemon(options, *profile);
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

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() >= 2 && std::string(args[1]) == "selftest") {
    if (args.size() != 2) {
      std::fprintf(stderr,
                   "lockstep-worker selftest: unexpected argument \"%s\"\n%s\n",
                   args[2], kUsage);
      return 2;
    }
    return lockstep::worker::SelftestCommand(
        absl::GetFlag(FLAGS_ops), absl::GetFlag(FLAGS_seed),
        absl::GetFlag(FLAGS_json), stdout, stderr);
  }
  if (args.size() != 2) {
    std::fprintf(stderr, "%s\n", kUsage);
    return 64;
  }
  const std::string command = args[1];
  if (command == "probe") return Probe();
  if (command == "daemon") return Daemon();
  if (command == "run") return Run();
  if (command == "execute") return Execute();
  std::fprintf(stderr, "lockstep-worker: unknown command \"%s\"\n%s\n",
               command.c_str(), kUsage);
  return 64;
}
