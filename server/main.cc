// lockstep-coordinator: serves the Lockstep API and the worker gateway.
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_limits.h"
#include "common/logging.h"
#include "common/transport.h"
#include "server/auth.h"
#include "server/certs.h"
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
// Transport security and authorisation (docs/security.md).
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of the gRPC and HTTP listeners: TLS; needs "
          "--tls_key");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, worker_ca, "",
          "PEM CA of worker certificates (needs --tls_cert): every worker "
          "must present a certificate it signed, and its --name must be the "
          "certificate's CN or a SAN");
ABSL_FLAG(bool, allow_plaintext, false,
          "serve without TLS, on loopback --listen and --http_listen "
          "addresses only (development and single-machine use); without "
          "TLS and without this flag the coordinator refuses to start");
ABSL_FLAG(bool, force_plaintext, false,
          "serve without TLS on any address, non-loopback ones included "
          "(implies --allow_plaintext; logged as a warning at every start): "
          "only inside a network you trust");
ABSL_FLAG(std::string, auth, "",
          "\"tokens\": every call needs a bearer token whose role allows it "
          "(lockstep-coordinator tokens create); \"none\": no tokens, every "
          "caller is an admin; empty (default): tokens, except in loopback "
          "development mode (--allow_plaintext on loopback addresses)");
ABSL_FLAG(int64_t, quota_jobs, 0,
          "unfinished jobs each principal (token) may have; 0: no quota");
ABSL_FLAG(int64_t, quota_runs, 0,
          "runs each principal's unfinished jobs may have; 0: no quota");
ABSL_FLAG(int64_t, quota_fingerprint_bytes, 0,
          "bytes of fingerprints each principal's unfinished jobs may store; "
          "0: no quota");
ABSL_FLAG(std::string, name, "", "tokens create|revoke: the token's name");
ABSL_FLAG(std::string, role, "",
          "tokens create: viewer, submitter, admin or worker");
ABSL_FLAG(std::string, out_dir, "", "certs: folder to write the files to");
ABSL_FLAG(std::string, hosts, "localhost,127.0.0.1,::1",
          "certs: the coordinator's DNS names and IP addresses (SANs)");
ABSL_FLAG(std::string, workers, "",
          "certs: worker names, one certificate each (CN = name), comma "
          "separated");
ABSL_FLAG(int, days, 365, "certs: validity of every certificate, days");
ABSL_FLAG(int, limit, 50, "admin-log: entries to show, newest first");
ABSL_FLAG(std::string, blob_dir, "",
          "folder of the blob store (models' initial parameters); default: "
          "the --db path + \".blobs\"");
ABSL_FLAG(int64_t, max_blob_bytes, int64_t{1} << 30,
          "largest blob an upload may store, bytes");
ABSL_FLAG(int64_t, quota_blob_bytes, 0,
          "bytes of stored blobs each principal (token) may have uploaded; "
          "0: no quota");
ABSL_FLAG(int64_t, max_blob_store_bytes, 0,
          "bytes of all stored blobs; 0: no limit but the disk's");
ABSL_FLAG(int64_t, blob_gc_grace_ms, int64_t{24} * 3600 * 1000,
          "a blob that no unfinished job references is deleted once it was "
          "last referenced this long ago");
ABSL_FLAG(int64_t, blob_gc_interval_ms, 10 * 60 * 1000,
          "how often the coordinator deletes such blobs");

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

// Who runs a local subcommand, for the admin log: "local:$USER".
std::string LocalPrincipal() {
  const char* user = std::getenv("USER");
  return absl::StrCat("local:", user == nullptr ? "unknown" : user);
}

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

lockstep::server::BlobStoreOptions BlobFlags() {
  lockstep::server::BlobStoreOptions o;
  o.dir = absl::GetFlag(FLAGS_blob_dir);
  if (o.dir.empty()) {
    o.dir = lockstep::server::DefaultBlobDir(absl::GetFlag(FLAGS_db));
  }
  o.max_blob_bytes = absl::GetFlag(FLAGS_max_blob_bytes);
  o.max_bytes_per_principal = absl::GetFlag(FLAGS_quota_blob_bytes);
  o.max_total_bytes = absl::GetFlag(FLAGS_max_blob_store_bytes);
  o.gc_grace_ms = absl::GetFlag(FLAGS_blob_gc_grace_ms);
  return o;
}

// Opens --db for a maintenance subcommand (created and migrated if new).
absl::StatusOr<std::unique_ptr<lockstep::store::Store>> OpenDb() {
  lockstep::store::StoreOptions o;
  o.path = absl::GetFlag(FLAGS_db);
  // A token change must not wait for a read of every page of a large
  // database (the coordinator checks it when it starts; verify-db on
  // demand).
  o.check_on_open = false;
  return lockstep::store::Store::Open(o);
}

// `lockstep-coordinator tokens create|list|revoke --db=FILE`: works on the
// database file, also while a coordinator uses it (a revocation applies to
// its next call).
int TokensMain(const std::string& verb) {
  using lockstep::server::Role;
  auto store = OpenDb();
  if (!store.ok()) {
    std::fprintf(stderr, "tokens: %s\n", store.status().ToString().c_str());
    return 1;
  }
  const std::string name = absl::GetFlag(FLAGS_name);
  if (verb == "list") {
    auto tokens = (*store)->ListTokens();
    if (!tokens.ok()) {
      std::fprintf(stderr, "tokens: %s\n", tokens.status().ToString().c_str());
      return 1;
    }
    std::printf("%-24s %-10s %-14s %s\n", "NAME", "ROLE", "CREATED_MS",
                "STATE");
    for (const auto& t : *tokens) {
      std::printf("%-24s %-10s %-14lld %s\n", t.name.c_str(), t.role.c_str(),
                  static_cast<long long>(t.created_unix_ms),
                  t.revoked_unix_ms == 0
                      ? "valid"
                      : absl::StrCat("revoked at ", t.revoked_unix_ms).c_str());
    }
    return 0;
  }
  if (name.empty() || name.size() > 64) {
    std::fprintf(stderr, "tokens %s: --name: must be 1 to 64 bytes\n",
                 verb.c_str());
    return 2;
  }
  lockstep::store::AdminLogEntry log;
  log.at_unix_ms = NowMs();
  log.principal = LocalPrincipal();
  log.target = name;
  log.outcome = "ok";
  if (verb == "create") {
    absl::StatusOr<Role> role =
        lockstep::server::ParseRole(absl::GetFlag(FLAGS_role), "--role");
    if (!role.ok()) {
      std::fprintf(stderr, "tokens create: %s\n",
                   std::string(role.status().message()).c_str());
      return 2;
    }
    absl::StatusOr<std::string> token = lockstep::server::NewToken();
    if (!token.ok()) {
      std::fprintf(stderr, "tokens create: %s\n",
                   token.status().ToString().c_str());
      return 1;
    }
    lockstep::store::TokenRecord t;
    t.name = name;
    t.role = lockstep::server::RoleName(*role);
    t.token_sha256 = lockstep::server::TokenSha256Hex(*token);
    t.created_unix_ms = log.at_unix_ms;
    log.action = "token_create";
    log.detail = absl::StrCat("role=", t.role);
    if (absl::Status s = (*store)->InsertToken(t, log); !s.ok()) {
      std::fprintf(stderr, "tokens create: %s\n", s.ToString().c_str());
      return 1;
    }
    // The token itself is shown once and never stored.
    std::printf("%s\n", token->c_str());
    return 0;
  }
  if (verb == "revoke") {
    log.action = "token_revoke";
    if (absl::Status s = (*store)->RevokeToken(name, log.at_unix_ms, log);
        !s.ok()) {
      std::fprintf(stderr, "tokens revoke: %s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("tokens: revoked %s\n", name.c_str());
    return 0;
  }
  std::fprintf(stderr, "tokens: unknown verb \"%s\" (create, list, revoke)\n",
               verb.c_str());
  return 2;
}

// `lockstep-coordinator admin-log --db=FILE [--limit=N]`: newest first.
int AdminLogMain() {
  auto store = OpenDb();
  if (!store.ok()) {
    std::fprintf(stderr, "admin-log: %s\n", store.status().ToString().c_str());
    return 1;
  }
  auto log = (*store)->ListAdminLog(std::max(1, absl::GetFlag(FLAGS_limit)));
  if (!log.ok()) {
    std::fprintf(stderr, "admin-log: %s\n", log.status().ToString().c_str());
    return 1;
  }
  for (const auto& e : *log) {
    std::printf("%lld %s %s %s %s [%s] %s\n",
                static_cast<long long>(e.entry_id),
                absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                                 absl::FromUnixMillis(e.at_unix_ms),
                                 absl::UTCTimeZone())
                    .c_str(),
                e.principal.c_str(), e.action.c_str(), e.target.c_str(),
                e.detail.c_str(), e.outcome.c_str());
  }
  return 0;
}

// `lockstep-coordinator gc-blobs [--db=FILE] [--blob_dir=DIR]`: deletes the
// blobs no unfinished job references and that were last referenced more
// than --blob_gc_grace_ms ago (what the coordinator's periodic sweep does).
// For a stopped coordinator; a running one collects with the CollectBlobs
// RPC (`lockstep blobs gc`).
int GcBlobsMain() {
  auto store = OpenDb();
  if (!store.ok()) {
    std::fprintf(stderr, "gc-blobs: %s\n", store.status().ToString().c_str());
    return 1;
  }
  auto blobs =
      lockstep::server::BlobStore::Open(BlobFlags(), store->get(), NowMs);
  if (!blobs.ok()) {
    std::fprintf(stderr, "gc-blobs: %s\n", blobs.status().ToString().c_str());
    return 1;
  }
  auto gone = (*blobs)->Collect();
  lockstep::store::AdminLogEntry e;
  e.at_unix_ms = NowMs();
  e.principal = LocalPrincipal();
  e.action = "collect_blobs";
  e.target = "blobs";
  int64_t bytes = 0;
  if (gone.ok()) {
    for (const auto& b : *gone) bytes += b.size;
    e.detail = absl::StrCat(gone->size(), " blobs, ", bytes, " bytes");
  }
  e.outcome = gone.ok() ? "ok" : gone.status().ToString();
  if (absl::Status s = (*store)->AppendAdminLog(e); !s.ok()) {
    std::fprintf(stderr, "gc-blobs: admin log: %s\n", s.ToString().c_str());
  }
  if (!gone.ok()) {
    std::fprintf(stderr, "gc-blobs: %s\n", gone.status().ToString().c_str());
    return 1;
  }
  for (const auto& b : *gone) {
    std::printf("deleted %s (%lld bytes)\n", b.digest.c_str(),
                static_cast<long long>(b.size));
  }
  std::printf("gc-blobs: %zu blobs, %lld bytes deleted\n", gone->size(),
              static_cast<long long>(bytes));
  return 0;
}

// `lockstep-coordinator certs --out_dir=DIR [--hosts=...] [--workers=...]`.
int CertsMain() {
  lockstep::server::CertsOptions o;
  o.out_dir = absl::GetFlag(FLAGS_out_dir);
  o.hosts = absl::StrSplit(absl::GetFlag(FLAGS_hosts), ',', absl::SkipEmpty());
  o.workers =
      absl::StrSplit(absl::GetFlag(FLAGS_workers), ',', absl::SkipEmpty());
  o.days = absl::GetFlag(FLAGS_days);
  if (absl::Status s = lockstep::server::WriteTestCertificates(o); !s.ok()) {
    std::fprintf(stderr, "certs: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("certs: wrote ca, server, client%s%s certificates to %s\n",
              o.workers.empty() ? "" : " and worker-",
              absl::StrJoin(o.workers, ", worker-").c_str(), o.out_dir.c_str());
  return 0;
}

// Applies the transport and token flags to `options`: TLS files, the
// plaintext rule (TLS, or --allow_plaintext on loopback, or
// --force_plaintext anywhere) and the --auth mode. Returns false after printing
// why the flags are refused.
bool ApplySecurityFlags(lockstep::server::CoordinatorOptions* options) {
  options->tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options->tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options->worker_ca_file = absl::GetFlag(FLAGS_worker_ca);
  const bool tls = !options->tls_cert_file.empty();
  const bool loopback = lockstep::IsLoopbackAddress(options->listen_address) &&
                        (options->http_listen.empty() ||
                         lockstep::IsLoopbackAddress(options->http_listen));
  const bool force = absl::GetFlag(FLAGS_force_plaintext);
  if (!tls && !force && !absl::GetFlag(FLAGS_allow_plaintext)) {
    std::fprintf(stderr,
                 "lockstep-coordinator: no --tls_cert is set: give --tls_cert "
                 "and --tls_key (see `lockstep-coordinator certs`), or "
                 "--allow_plaintext to serve in the clear on loopback\n");
    return false;
  }
  if (!tls && !loopback) {
    if (!force) {
      std::fprintf(stderr,
                   "lockstep-coordinator: --listen=%s%s%s is not a loopback "
                   "address and no --tls_cert is set: give --tls_cert and "
                   "--tls_key (see `lockstep-coordinator certs`), or "
                   "--force_plaintext to serve in the clear anyway\n",
                   options->listen_address.c_str(),
                   options->http_listen.empty() ? "" : " / --http_listen=",
                   options->http_listen.c_str());
      return false;
    }
    LS_LOG(WARNING) << "PLAINTEXT on a non-loopback address "
                    << "(--force_plaintext): tokens and fingerprints cross "
                    << "the network unencrypted and workers are not "
                    << "authenticated by certificate; use --tls_cert, "
                    << "--tls_key and --worker_ca outside a trusted network";
  }
  const std::string auth = absl::GetFlag(FLAGS_auth);
  if (auth == "tokens") {
    options->auth.require_tokens = true;
  } else if (auth == "none") {
    options->auth.require_tokens = false;
  } else if (auth.empty()) {
    options->auth.require_tokens = tls || !loopback;
  } else {
    std::fprintf(stderr,
                 "lockstep-coordinator: --auth: \"%s\" is not tokens or "
                 "none\n",
                 auth.c_str());
    return false;
  }
  if (!options->auth.require_tokens && !loopback) {
    LS_LOG(WARNING) << "NO BEARER TOKENS on a non-loopback address "
                    << "(--auth=none): anyone who reaches the port may "
                    << "submit, cancel and administer";
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Lockstep coordinator.\n  lockstep-coordinator [--listen=0.0.0.0:7070] "
      "[--db=lockstep.db] [--tls_cert=F --tls_key=F [--worker_ca=F]]\n"
      "  lockstep-coordinator verify-db --db=FILE\n"
      "  lockstep-coordinator backup --db=FILE --out=COPY\n"
      "  lockstep-coordinator tokens create --name=N --role=R | list | "
      "revoke --name=N  [--db=FILE]\n"
      "  lockstep-coordinator admin-log [--db=FILE] [--limit=N]\n"
      "  lockstep-coordinator gc-blobs [--db=FILE] [--blob_dir=DIR] "
      "[--blob_gc_grace_ms=MS]\n"
      "  lockstep-coordinator certs --out_dir=DIR [--hosts=H,...] "
      "[--workers=W,...]");
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() > 1) {
    const std::string command = args[1];
    if (args.size() == 2 && command == "verify-db") return VerifyDbMain();
    if (args.size() == 2 && command == "backup") return BackupMain();
    if (args.size() == 3 && command == "tokens") return TokensMain(args[2]);
    if (args.size() == 2 && command == "admin-log") return AdminLogMain();
    if (args.size() == 2 && command == "gc-blobs") return GcBlobsMain();
    if (args.size() == 2 && command == "certs") return CertsMain();
    std::fprintf(stderr,
                 "lockstep-coordinator: unknown subcommand or extra argument "
                 "\"%s\" (subcommands: verify-db, backup, tokens "
                 "create|list|revoke, admin-log, gc-blobs, certs)\n",
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
  options.jobs.quotas.max_jobs = absl::GetFlag(FLAGS_quota_jobs);
  options.jobs.quotas.max_runs = absl::GetFlag(FLAGS_quota_runs);
  options.jobs.quotas.max_fingerprint_bytes =
      absl::GetFlag(FLAGS_quota_fingerprint_bytes);
  options.blobs = BlobFlags();
  options.blob_gc_interval_ms = absl::GetFlag(FLAGS_blob_gc_interval_ms);
  options.zoo_dir = absl::GetFlag(FLAGS_zoo_dir);
  options.http_listen = absl::GetFlag(FLAGS_http_listen);
  if (!ApplySecurityFlags(&options)) return 1;
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
