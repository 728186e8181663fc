// lockstep: the command-line client of the Lockstep coordinator.
//
// Exit codes: 0 success; 3 the coordinator could not be reached or the call
// failed (the status code and message are printed); 64 usage error.
// (1 and 2 are reserved for `lockstep check` verdicts.)
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "client/client.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070",
          "coordinator address, host:port");
ABSL_FLAG(int64_t, timeout_ms, 5000, "deadline of each call, ms");
ABSL_FLAG(bool, json, false, "print results as JSON (for scripts)");
ABSL_FLAG(bool, all, false, "workers: include workers that are gone");
ABSL_FLAG(std::string, reason, "", "workers drain|quarantine|activate: why");

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 3;
constexpr int kExitUsage = 64;

constexpr char kUsage[] =
    "Lockstep client.\n"
    "  lockstep [--coordinator=HOST:PORT] workers [--all] [--json]\n"
    "  lockstep workers drain|quarantine|activate WORKER [--reason=TEXT]\n"
    "WORKER is a worker name or id. Exit codes: 0 ok, 3 call failed, 64 "
    "usage.";

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "lockstep: %s: %s\n",
               absl::StatusCodeToString(s.code()).c_str(),
               std::string(s.message()).c_str());
  return kExitFailed;
}

int Usage(const std::string& why) {
  std::fprintf(stderr, "lockstep: %s\n%s\n", why.c_str(), kUsage);
  return kExitUsage;
}

int Workers(lockstep::client::Client& client,
            const std::vector<std::string>& args) {
  const bool json = absl::GetFlag(FLAGS_json);
  if (args.empty()) {
    auto r = client.ListWorkers(absl::GetFlag(FLAGS_all));
    if (!r.ok()) return Fail(r.status());
    const std::string out = json ? lockstep::client::FormatJson(*r)
                                 : lockstep::client::FormatWorkersTable(*r);
    std::fputs(out.c_str(), stdout);
    return kExitOk;
  }
  if (args.size() != 2) return Usage("workers: expected ACTION WORKER");
  lockstep::v1::WorkerAdminState state;
  if (args[0] == "drain") {
    state = lockstep::v1::DRAINING;
  } else if (args[0] == "quarantine") {
    state = lockstep::v1::QUARANTINED;
  } else if (args[0] == "activate") {
    state = lockstep::v1::ACTIVE;
  } else {
    return Usage("workers: unknown action \"" + args[0] + "\"");
  }
  auto w = client.SetWorkerState(args[1], state, absl::GetFlag(FLAGS_reason));
  if (!w.ok()) return Fail(w.status());
  if (json) {
    std::fputs(lockstep::client::FormatJson(*w).c_str(), stdout);
  } else {
    std::printf("%s (%s) is now %s\n", w->name().c_str(),
                w->worker_id().c_str(),
                lockstep::v1::WorkerAdminState_Name(w->admin_state()).c_str());
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() < 2) return Usage("missing command");
  const std::string command = positional[1];
  std::vector<std::string> args(positional.begin() + 2, positional.end());
  if (absl::GetFlag(FLAGS_timeout_ms) <= 0) {
    return Usage("--timeout_ms must be > 0");
  }
  lockstep::client::ClientOptions options;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
  lockstep::client::Client client(options);
  if (command == "workers") return Workers(client, args);
  return Usage("unknown command \"" + command + "\"");
}
