// lockstep-coordinator: serves the Lockstep API and the worker gateway.
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/grpc_limits.h"
#include "common/logging.h"
#include "server/coordinator.h"
#include "server/store/maintenance.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:7070",
          "host:port to listen on; port 0 picks a free port");
ABSL_FLAG(std::string, db, "lockstep.db",
          "SQLite database file (created if missing)");
ABSL_FLAG(std::string, port_file, "",
          "if set, the bound port is written to this file once listening");
ABSL_FLAG(int64_t, heartbeat_interval_ms, 2000,
          "heartbeat interval asked of workers, ms");
ABSL_FLAG(int64_t, heartbeat_timeout_ms, 10000,
          "a worker silent this long is marked gone, ms");
ABSL_FLAG(int64_t, lease_ms, 30000,
          "lease of an assigned run, renewed by heartbeats; a run whose "
          "lease expires is retried elsewhere, ms");
ABSL_FLAG(int, max_attempts, 3, "attempts per run before its job fails");
ABSL_FLAG(int, finished_jobs_in_memory, 256,
          "recently finished jobs kept in memory; older ones are read from "
          "the database when asked for");
ABSL_FLAG(int64_t, pinned_wait_ms, 60000,
          "how long a queued run pinned to one worker (audit runs, "
          "SAME_WORKER jobs) waits for that worker while it is gone; then "
          "an audit reports NO_RESULT for it and a SAME_WORKER job moves to "
          "another worker of its class or fails, ms");
ABSL_FLAG(int64_t, max_fingerprints_per_job, 200000000,
          "fingerprints a job may store (tensors x captured steps x runs)");
ABSL_FLAG(int64_t, max_fingerprint_bytes_per_job, int64_t{16} << 30,
          "bytes a job's fingerprints may take in the database");
ABSL_FLAG(std::string, zoo_dir, "examples",
          "model zoo folder; its models are the fleet-audit workloads");
ABSL_FLAG(int, max_message_bytes, lockstep::kDefaultMaxMessageBytes,
          "largest message the coordinator accepts from workers and clients, "
          "bytes (1024..268435456); a larger one is refused with "
          "RESOURCE_EXHAUSTED naming the limit");
ABSL_FLAG(std::string, http_listen, "",
          "host:port of the HTTP listener: the web dashboard, a read-only "
          "JSON API under /api/v1/, Prometheus /metrics, /healthz and "
          "/readyz; off unless set; port 0 picks a free port");
ABSL_FLAG(std::string, http_port_file, "",
          "if set, the bound HTTP port is written to this file once "
          "listening");
// Fleet scale: runs per job (an audit is one run per selected worker).
ABSL_FLAG(int64_t, max_runs, 64,
          "runs a job may ask for (placement.runs); an audit runs once on "
          "each selected worker, so this also bounds the workers one audit "
          "covers");
ABSL_FLAG(std::string, synchronous, "FULL",
          "SQLite synchronous mode: FULL (durable across power loss) or "
          "NORMAL (across process crashes)");
ABSL_FLAG(int64_t, max_db_bytes, 0,
          "largest size the database file may grow to, bytes (0: no limit "
          "but the disk); past it ingest and submissions are refused with "
          "RESOURCE_EXHAUSTED naming the limit, reads go on, and nothing "
          "committed is lost; restart with a larger limit to go on");
ABSL_FLAG(bool, check_db_on_start, true,
          "read every page of the database (PRAGMA quick_check) before "
          "starting; a corrupt file is refused, unmodified");
ABSL_FLAG(std::string, out, "",
          "backup: the file to write the copy to (must not exist)");

namespace {

// Fleet scale: every worker stream is a socket. Raises the soft limit on
// open files to the hard limit, so a fleet is not capped by the 1024 many
// systems default to.
void RaiseOpenFileLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t before = limit.rlim_cur;
  if (limit.rlim_cur != limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) limit.rlim_cur = before;
  }
  LS_LOG(INFO) << "open files: soft limit " << before << " -> "
               << limit.rlim_cur << " (hard " << limit.rlim_max << ")";
}

// Writes `port` to `path` (nothing when `path` is empty): write then
// rename, so readers never see a partial number.
bool WritePortFile(const std::string& path, int port) {
  if (path.empty()) return true;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << port << "\n";
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "lockstep-coordinator: cannot write %s\n",
                 path.c_str());
    return false;
  }
  return true;
}

// `lockstep-coordinator verify-db --db=FILE`: one summary line; exit 0
// when the file passes every check, 1 otherwise.
int VerifyDbMain() {
  const lockstep::store::VerifyResult r =
      lockstep::store::VerifyDatabase(absl::GetFlag(FLAGS_db));
  std::printf("verify-db: %s\n", r.summary.c_str());
  return r.ok ? 0 : 1;
}

// `lockstep-coordinator backup --db=FILE --out=COPY`: an online, verified
// copy; safe while a coordinator uses FILE.
int BackupMain() {
  const std::string db = absl::GetFlag(FLAGS_db);
  const std::string out = absl::GetFlag(FLAGS_out);
  auto r = lockstep::store::BackupDatabase(db, out);
  if (!r.ok()) {
    std::fprintf(stderr, "backup: %s: %s\n", db.c_str(),
                 r.status().ToString().c_str());
    return 1;
  }
  std::printf("backup: %s -> %s: %lld pages, %lld bytes, integrity_check ok\n",
              db.c_str(), out.c_str(), static_cast<long long>(r->pages),
              static_cast<long long>(r->bytes));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Lockstep coordinator.\n  lockstep-coordinator [--listen=0.0.0.0:7070] "
      "[--db=lockstep.db]\n  lockstep-coordinator verify-db --db=FILE\n"
      "  lockstep-coordinator backup --db=FILE --out=COPY");
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() > 1) {
    const std::string command = args[1];
    if (args.size() == 2 && command == "verify-db") return VerifyDbMain();
    if (args.size() == 2 && command == "backup") return BackupMain();
    std::fprintf(stderr,
                 "lockstep-coordinator: unknown subcommand or extra argument "
                 "\"%s\" (subcommands: verify-db, backup)\n",
                 args.size() == 2 ? command.c_str() : args.back());
    return 2;
  }

  // SIGINT/SIGTERM are taken synchronously by this thread; block them before
  // any other thread starts so they inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  RaiseOpenFileLimit();  // fleet scale

  lockstep::server::CoordinatorOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.store.path = absl::GetFlag(FLAGS_db);
  options.store.synchronous = absl::GetFlag(FLAGS_synchronous);
  options.store.max_bytes = absl::GetFlag(FLAGS_max_db_bytes);
  options.store.check_on_open = absl::GetFlag(FLAGS_check_db_on_start);
  options.heartbeat_interval_ms = absl::GetFlag(FLAGS_heartbeat_interval_ms);
  options.heartbeat_timeout_ms = absl::GetFlag(FLAGS_heartbeat_timeout_ms);
  options.jobs.scheduler.lease_ms = absl::GetFlag(FLAGS_lease_ms);
  options.jobs.scheduler.max_attempts = absl::GetFlag(FLAGS_max_attempts);
  options.jobs.scheduler.finished_jobs_in_memory =
      absl::GetFlag(FLAGS_finished_jobs_in_memory);
  options.jobs.scheduler.pinned_wait_ms = absl::GetFlag(FLAGS_pinned_wait_ms);
  options.jobs.submission.max_fingerprints_per_job =
      absl::GetFlag(FLAGS_max_fingerprints_per_job);
  options.jobs.submission.max_fingerprint_bytes_per_job =
      absl::GetFlag(FLAGS_max_fingerprint_bytes_per_job);
  options.jobs.submission.model.max_runs = absl::GetFlag(FLAGS_max_runs);
  options.zoo_dir = absl::GetFlag(FLAGS_zoo_dir);
  options.http_listen = absl::GetFlag(FLAGS_http_listen);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  if (options.max_message_bytes < lockstep::kMinMaxMessageBytes ||
      options.max_message_bytes > lockstep::kMaxMaxMessageBytes) {
    std::fprintf(stderr,
                 "lockstep-coordinator: --max_message_bytes: %d is outside "
                 "1024..268435456\n",
                 options.max_message_bytes);
    return 1;
  }

  auto coordinator = lockstep::server::Coordinator::Start(options);
  if (!coordinator.ok()) {
    std::fprintf(stderr, "lockstep-coordinator: %s\n",
                 coordinator.status().ToString().c_str());
    return 1;
  }
  // The HTTP port first: a reader that sees the gRPC port file finds the
  // HTTP one too.
  if (!WritePortFile(absl::GetFlag(FLAGS_http_port_file),
                     (*coordinator)->http_port()) ||
      !WritePortFile(absl::GetFlag(FLAGS_port_file), (*coordinator)->port())) {
    return 1;
  }
  int sig = 0;
  sigwait(&signals, &sig);
  LS_LOG(INFO) << "signal " << sig << ": shutting down";
  (*coordinator)->Shutdown();
  return 0;
}
