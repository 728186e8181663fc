// lockstep: the command-line client of the Lockstep coordinator.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "client/client.h"
#include "client/commands.h"
#include "client/onnx_cli.h"
#include "common/grpc_limits.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070",
          "coordinator address, host:port");
ABSL_FLAG(int64_t, timeout_ms, 5000, "deadline of each unary call, ms");
ABSL_FLAG(int, max_message_bytes, lockstep::kDefaultMaxMessageBytes,
          "largest message sent to or accepted from the coordinator, bytes "
          "(1024..268435456)");
ABSL_FLAG(std::string, token, "",
          "bearer token sent on every call (else --token_file, else "
          "$LOCKSTEP_TOKEN)");
ABSL_FLAG(std::string, token_file, "",
          "file whose first line is the bearer token");
ABSL_FLAG(std::string, ca, "",
          "PEM CA of the coordinator's certificate: connect over TLS");
ABSL_FLAG(std::string, cert, "",
          "PEM client certificate (mutual TLS); needs --key and --ca");
ABSL_FLAG(std::string, key, "", "PEM private key of --cert");
ABSL_FLAG(bool, json, false, "print results as JSON (for scripts)");
ABSL_FLAG(bool, all, false, "workers: include workers that are gone");
ABSL_FLAG(std::string, reason, "",
          "workers drain|quarantine|activate, cancel: why");
ABSL_FLAG(int, runs, 0, "submit/check: number of runs (default 2)");
ABSL_FLAG(std::string, scope, "",
          "submit/check: same_worker (default), same_class or across_classes");
ABSL_FLAG(std::string, mode, "",
          "submit/check: override the config's determinism: canonical, "
          "deterministic or default");
ABSL_FLAG(std::string, labels, "", "submit/check: job labels, k=v,...");
ABSL_FLAG(std::string, worker_labels, "",
          "submit/check: only workers with these labels, k=v,...");
ABSL_FLAG(std::string, idempotency_key, "",
          "submit/check: resubmitting with the same key returns the first job");
ABSL_FLAG(std::string, zoo, "examples",
          "folder of the model zoo, for `submit NAME`");
ABSL_FLAG(bool, watch, false, "submit: watch the job until it finishes");
ABSL_FLAG(int64_t, wait_timeout_ms, 0,
          "watch/check: give up after this long (0: no limit)");
ABSL_FLAG(std::string, golden, "",
          "check: the golden run digest, or key=value: the newest "
          "REPRODUCIBLE job with that label and the same model and config");
ABSL_FLAG(std::string, junit, "", "check: write JUnit XML to this file");
ABSL_FLAG(std::string, model_digest, "", "certificates: only this model");
ABSL_FLAG(std::string, workers, "",
          "audit start: comma-separated worker names or ids (default: all)");
ABSL_FLAG(bool, quarantine, false, "audit start: quarantine every outlier");
ABSL_FLAG(bool, wait, true, "audit start: wait for the result");
ABSL_FLAG(std::string, o, "",
          "import: the model JSON to write (default: MODEL.json next to "
          "MODEL.onnx)");
ABSL_FLAG(std::string, params, "",
          "import: the ParameterSet file to write (default: the -o path with "
          ".json replaced by .params); submit/check: the model's ParameterSet "
          "file when the model sets parameters_digest (default: MODEL with "
          ".json replaced by .params)");

namespace {

constexpr char kUsage[] =
    "Lockstep client.\n"
    "  lockstep [--coordinator=HOST:PORT] [--token=T | --token_file=F] "
    "[--ca=F [--cert=F --key=F]] COMMAND ...\n"
    "  workers [--all] [--json]          connected workers and their classes\n"
    "  workers drain|quarantine|activate WORKER [--reason=TEXT]\n"
    "  submit MODEL CONFIG | ZOO_NAME [--runs=N] [--scope=S] [--mode=M] "
    "[--watch]\n"
    "  watch JOB                         live progress, then the verdict\n"
    "  jobs                              recent jobs\n"
    "  report JOB                        verdict, divergence, certificates\n"
    "  diff RUN_A RUN_B                  compare any two runs\n"
    "  certificates [--model_digest=D]\n"
    "  cancel JOB [--reason=TEXT]\n"
    "  check MODEL CONFIG | ZOO_NAME [--golden=DIGEST|k=v] [--junit=FILE] "
    "[--json]\n"
    "  audit start WORKLOAD | MODEL CONFIG [--workers=a,b | "
    "--worker_labels=k=v] [--quarantine] [--wait=false]\n"
    "  audit show AUDIT | audit list\n"
    "  import MODEL.onnx [-o MODEL.json] [--params FILE]   ONNX to a Lockstep "
    "model and its initial weights (no coordinator needed); submit, check and "
    "audit start also take MODEL.onnx\n"
    "  blobs upload FILE | blobs stat DIGEST | blobs gc\n"
    "Exit codes: 0 ok / reproducible; 1 nondeterministic; 2 numerics changed "
    "vs golden; 3 could not run; 64 usage.";

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() < 2) {
    std::fprintf(stderr, "lockstep: missing command\n%s\n", kUsage);
    return lockstep::client::kExitUsage;
  }
  const std::string command = positional[1];
  std::vector<std::string> args(positional.begin() + 2, positional.end());
  if (command == "import") {
    return lockstep::client::RunImport(args, absl::GetFlag(FLAGS_o),
                                       absl::GetFlag(FLAGS_params), stdout,
                                       stderr);
  }
  if (absl::GetFlag(FLAGS_timeout_ms) <= 0) {
    std::fprintf(stderr, "lockstep: --timeout_ms must be > 0\n");
    return lockstep::client::kExitUsage;
  }
  const int max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  if (max_message_bytes < lockstep::kMinMaxMessageBytes ||
      max_message_bytes > lockstep::kMaxMaxMessageBytes) {
    std::fprintf(stderr,
                 "lockstep: --max_message_bytes: %d is outside "
                 "1024..268435456\n",
                 max_message_bytes);
    return lockstep::client::kExitUsage;
  }
  lockstep::client::ClientOptions options;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
  options.max_message_bytes = max_message_bytes;
  absl::StatusOr<std::string> token = lockstep::ResolveToken(
      absl::GetFlag(FLAGS_token), absl::GetFlag(FLAGS_token_file));
  if (!token.ok()) {
    std::fprintf(stderr, "lockstep: %s\n",
                 std::string(token.status().message()).c_str());
    return lockstep::client::kExitUsage;
  }
  options.security.token = *token;
  options.security.ca_file = absl::GetFlag(FLAGS_ca);
  options.security.cert_file = absl::GetFlag(FLAGS_cert);
  options.security.key_file = absl::GetFlag(FLAGS_key);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      lockstep::client::NewChannel(options);
  if (!channel.ok()) {
    std::fprintf(stderr, "lockstep: %s\n",
                 std::string(channel.status().message()).c_str());
    return lockstep::client::kExitUsage;
  }
  lockstep::client::Client client(options, *channel);

  lockstep::client::CommandOptions c;
  c.json = absl::GetFlag(FLAGS_json);
  c.all = absl::GetFlag(FLAGS_all);
  c.reason = absl::GetFlag(FLAGS_reason);
  c.runs = absl::GetFlag(FLAGS_runs);
  c.scope = absl::GetFlag(FLAGS_scope);
  c.mode = absl::GetFlag(FLAGS_mode);
  c.labels = absl::GetFlag(FLAGS_labels);
  c.worker_labels = absl::GetFlag(FLAGS_worker_labels);
  c.idempotency_key = absl::GetFlag(FLAGS_idempotency_key);
  c.zoo_dir = absl::GetFlag(FLAGS_zoo);
  c.watch = absl::GetFlag(FLAGS_watch);
  c.wait_timeout_ms = absl::GetFlag(FLAGS_wait_timeout_ms);
  c.golden = absl::GetFlag(FLAGS_golden);
  c.junit = absl::GetFlag(FLAGS_junit);
  c.model_digest = absl::GetFlag(FLAGS_model_digest);
  c.workers = absl::GetFlag(FLAGS_workers);
  c.quarantine = absl::GetFlag(FLAGS_quarantine);
  c.wait = absl::GetFlag(FLAGS_wait);
  c.params = absl::GetFlag(FLAGS_params);
  lockstep::client::Commands commands(&client, c, stdout, stderr);

  if (command == "workers") return commands.Workers(args);
  if (command == "submit") return commands.Submit(args);
  if (command == "watch") return commands.Watch(args);
  if (command == "jobs") return commands.Jobs(args);
  if (command == "cancel") return commands.Cancel(args);
  if (command == "report") return commands.Report(args);
  if (command == "diff") return commands.Diff(args);
  if (command == "certificates") return commands.Certificates(args);
  if (command == "check") return commands.Check(args);
  if (command == "audit") return commands.Audit(args);
  if (command == "blobs") return commands.Blobs(args);
  std::fprintf(stderr, "lockstep: unknown command \"%s\"\n%s\n",
               command.c_str(), kUsage);
  return lockstep::client::kExitUsage;
}
