// lockstep-worker: runs Lockstep jobs on this machine's CPU and GPUs.
//
//   lockstep-worker daemon --coordinator=host:7070 --name=gpu-node-3
//   lockstep-worker probe [--json]
//   lockstep-worker run --model=m.json --config=c.json [--runs=N] ...
//   lockstep-worker selftest [--ops=a,b] [--seed=N] [--json]
//
// Each subcommand lives in worker/cmd/; its flags become its options there
// (worker/cmd/flags.h), and this file only dispatches.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "worker/cmd/daemon.h"
#include "worker/cmd/drill_flags.h"
#include "worker/cmd/execute.h"
#include "worker/cmd/flags.h"
#include "worker/cmd/probe.h"
#include "worker/cmd/run.h"
#include "worker/cmd/selftest.h"
#include "worker/hardware_probe.h"

namespace {

constexpr char kUsage[] =
    "Lockstep worker.\n"
    "  lockstep-worker daemon [--coordinator=127.0.0.1:7070] [--name=NAME] "
    "[--labels=k=v,...]\n"
    "      [--data_root=DIR] [--allow_drills [--inject_fault=...] "
    "[--inject_stall=...]]\n"
    "  lockstep-worker probe [--json]   print this machine's hardware profile\n"
    "  lockstep-worker execute          (internal) one run: assignment on "
    "stdin, frames on stdout\n"
    "  lockstep-worker run --model=m.json --config=c.json [--runs=N]\n"
    "      [--inject_fault=step=S,layer=L,role=R,bit=B] "
    "[--dump=first_divergent|"
    "all|<layer>:<role>[:step]] [--dump_dir=DIR] [--data_root=DIR]\n"
    "      [--device_resident=false] [--queue_device_fingerprints=false] "
    "[--op_times] [--op_times_by_layer]\n"
    "      train locally and compare runs (exit 0 agree, 1 differ, 2 bad "
    "spec)\n"
    "  lockstep-worker selftest [--ops=op,...] [--seed=N] [--json]\n"
    "      validate this node: every op in every mode on every backend here "
    "vs the\n"
    "      CPU CANONICAL scalar reference (exit 0 pass, 1 a CANONICAL row "
    "differs or a\n"
    "      DETERMINISTIC row does not repeat, 2 usage error)";

}  // namespace

int main(int argc, char** argv) {
  namespace cmd = ::lockstep::worker::cmd;
  absl::SetProgramUsageMessage(kUsage);
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const std::string command = args.size() >= 2 ? args[1] : "";
  if (command == "selftest") {
    if (args.size() != 2) {
      std::fprintf(stderr,
                   "lockstep-worker selftest: unexpected argument \"%s\"\n%s\n",
                   args[2], kUsage);
      return 2;
    }
    return cmd::SelftestMain(cmd::SelftestOptionsFromFlags());
  }
  if (args.size() != 2) {
    std::fprintf(stderr, "%s\n", kUsage);
    return cmd::kUsageExitCode;
  }
  if (command == "probe") {
    return cmd::ProbeMain(
        cmd::ProbeOptionsFromFlags(),
        *lockstep::worker::NewSystemProbe(cmd::SystemProbeOptionsFromFlags()),
        stdout, stderr);
  }
  if (command == "daemon") {
    return cmd::DaemonMain(
        cmd::DaemonOptionsFromFlags(),
        *lockstep::worker::NewSystemProbe(cmd::SystemProbeOptionsFromFlags()));
  }
  if (command == "run") return cmd::RunMain(cmd::RunOptionsFromFlags());
  if (command == "execute") {
    return cmd::ExecuteMain(cmd::ExecuteOptionsFromFlags());
  }
  std::fprintf(stderr, "lockstep-worker: unknown command \"%s\"\n%s\n",
               command.c_str(), kUsage);
  return cmd::kUsageExitCode;
}
