#include "server/store/store.h"

#include <sqlite3.h>

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace lockstep::store {
namespace {

using ::lockstep::v1::Worker;
using ::lockstep::v1::WorkerAdminState;

// Ordered migrations: kMigrations[i] takes the schema from version i to
// i + 1. Never edit a released migration; append a new one and bump
// kSchemaVersion.
constexpr const char* kMigrations[] = {
    // 1: workers.
    R"sql(
CREATE TABLE workers (
  worker_id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  hardware_class TEXT NOT NULL,
  hardware_class_digest TEXT NOT NULL,
  record BLOB NOT NULL,             -- lockstep.v1.Worker: labels, profile
  first_seen_ms INTEGER NOT NULL,
  last_seen_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX workers_by_class ON workers(hardware_class_digest);
)sql",
    // 2: operator state and the per-worker health history.
    R"sql(
ALTER TABLE workers ADD COLUMN admin_state INTEGER NOT NULL DEFAULT 1;
ALTER TABLE workers ADD COLUMN admin_reason TEXT NOT NULL DEFAULT '';
CREATE TABLE worker_events (
  event_id INTEGER PRIMARY KEY,
  worker_id TEXT NOT NULL REFERENCES workers(worker_id),
  at_ms INTEGER NOT NULL,
  kind TEXT NOT NULL,
  detail TEXT NOT NULL
) STRICT;
CREATE INDEX worker_events_by_worker ON worker_events(worker_id, at_ms);
)sql",
    // 3: jobs, runs and their fingerprints; certificates.
    R"sql(
CREATE TABLE jobs (
  job_id TEXT PRIMARY KEY,
  record BLOB NOT NULL,             -- lockstep.v1.Job without runs
  manifest BLOB NOT NULL,           -- lockstep.v1.TensorManifest
  state INTEGER NOT NULL,
  model_digest TEXT NOT NULL,
  config_digest TEXT NOT NULL,
  idempotency_key TEXT UNIQUE,
  created_ms INTEGER NOT NULL,
  finished_ms INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX jobs_by_created ON jobs(created_ms);
CREATE TABLE runs (
  run_id TEXT PRIMARY KEY,
  job_id TEXT NOT NULL REFERENCES jobs(job_id),
  record BLOB NOT NULL,             -- lockstep.v1.Run
  state INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  next_sequence INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX runs_by_job ON runs(job_id);
-- Fingerprints of one completed step of one attempt, aligned to the
-- manifest: a serialized lockstep.v1.FingerprintBatch holding only the
-- fingerprints (in manifest order) and the step digest.
CREATE TABLE run_steps (
  run_id TEXT NOT NULL REFERENCES runs(run_id),
  attempt INTEGER NOT NULL,
  step INTEGER NOT NULL,
  fingerprints BLOB NOT NULL,
  step_digest TEXT NOT NULL,
  PRIMARY KEY (run_id, attempt, step)
) STRICT, WITHOUT ROWID;
-- Batches of a step that is not complete yet (a step split over several
-- batches); folded into run_steps when the step completes.
CREATE TABLE partial_batches (
  run_id TEXT NOT NULL REFERENCES runs(run_id),
  attempt INTEGER NOT NULL,
  sequence INTEGER NOT NULL,
  step INTEGER NOT NULL,
  fingerprints BLOB NOT NULL,
  PRIMARY KEY (run_id, attempt, sequence)
) STRICT, WITHOUT ROWID;
CREATE TABLE certificates (
  certificate_id TEXT PRIMARY KEY,
  record BLOB NOT NULL,             -- lockstep.v1.Certificate
  model_digest TEXT NOT NULL,
  config_digest TEXT NOT NULL,
  hardware_class_digest TEXT NOT NULL,
  level INTEGER NOT NULL,
  issued_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX certificates_by_model ON certificates(model_digest, issued_ms);
CREATE TABLE audits (
  audit_id TEXT PRIMARY KEY,
  record BLOB NOT NULL,             -- lockstep.v1.Audit
  state INTEGER NOT NULL,
  started_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX audits_by_started ON audits(started_ms);
)sql",
    // 4: the verdict of each finished job, computed once when it finished.
    R"sql(
CREATE TABLE job_reports (
  job_id TEXT PRIMARY KEY REFERENCES jobs(job_id),
  report BLOB NOT NULL              -- lockstep.v1.Report
) STRICT, WITHOUT ROWID;
)sql",
    // 5: golden lookups: each label of a finished job with the job's
    // stored verdict, keyed so that the newest REPRODUCIBLE job of a label,
    // model and config is one index seek.
    R"sql(
CREATE TABLE job_verdict_labels (
  label_key TEXT NOT NULL,
  label_value TEXT NOT NULL,
  model_digest TEXT NOT NULL,
  config_digest TEXT NOT NULL,
  verdict INTEGER NOT NULL,         -- lockstep.v1.Verdict
  created_ms INTEGER NOT NULL,
  job_id TEXT NOT NULL REFERENCES jobs(job_id),
  PRIMARY KEY (label_key, label_value, model_digest, config_digest, verdict,
               created_ms, job_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX job_verdict_labels_by_job ON job_verdict_labels(job_id);
)sql",
    // 6: bearer tokens (only their SHA-256 is stored) and the append-only
    // log of admin actions.
    R"sql(
CREATE TABLE api_tokens (
  name TEXT PRIMARY KEY,
  role TEXT NOT NULL,
  token_sha256 TEXT NOT NULL UNIQUE,  -- lowercase hex
  created_ms INTEGER NOT NULL,
  revoked_ms INTEGER                  -- NULL while the token is valid
) STRICT;
CREATE TABLE admin_log (
  entry_id INTEGER PRIMARY KEY AUTOINCREMENT,
  at_ms INTEGER NOT NULL,
  principal TEXT NOT NULL,
  action TEXT NOT NULL,
  target TEXT NOT NULL,
  detail TEXT NOT NULL,
  outcome TEXT NOT NULL
) STRICT;
CREATE TRIGGER admin_log_no_update BEFORE UPDATE ON admin_log
BEGIN SELECT RAISE(ABORT, 'admin_log is append-only'); END;
CREATE TRIGGER admin_log_no_delete BEFORE DELETE ON admin_log
BEGIN SELECT RAISE(ABORT, 'admin_log is append-only'); END;
)sql",
    // 7: content-addressed blobs (their bytes are files next to the
    // database) and the jobs that reference them.
    R"sql(
CREATE TABLE blobs (
  digest TEXT PRIMARY KEY,            -- "sha256:" + 64 lowercase hex
  size INTEGER NOT NULL,
  created_ms INTEGER NOT NULL,
  uploaded_by TEXT NOT NULL,
  last_referenced_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX blobs_by_uploader ON blobs(uploaded_by);
CREATE TABLE job_blobs (
  job_id TEXT NOT NULL REFERENCES jobs(job_id),
  digest TEXT NOT NULL,
  PRIMARY KEY (digest, job_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX job_blobs_by_job ON job_blobs(job_id);
)sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == kSchemaVersion,
              "one migration per schema version");

// Prepared statements: (slot, SQL), prepared once at open.
enum Slot {
  kUpsertWorker,
  kGetWorker,
  kListWorkers,
  kSetAdminState,
  kAppendEvent,
  kListEvents,
  kInsertJob,
  kInsertRun,
  kFindJobByKey,
  kGetJob,
  kGetJobRuns,
  kGetManifest,
  kListJobs,
  kListUnfinishedJobs,
  kUpdateJob,
  kUpdateRun,
  kRestartRun,
  kDeleteRunSteps,
  kDeletePartials,
  kGetRunIngestState,
  kInsertRunStep,
  kInsertPartial,
  kGetPartials,
  kDeleteStepPartials,
  kSetNextSequence,
  kSavepointBatch,
  kRollbackToBatch,
  kReleaseBatch,
  kLoadRunSteps,
  kReadStepAfter,
  kInsertCertificate,
  kGetCertificate,
  kListCertificates,
  kPutAudit,
  kGetAudit,
  kListAudits,
  kListRunningAudits,
  kInsertJobReport,
  kGetJobReport,
  kListJobsAwaitingVerdict,
  kDeleteVerdictLabels,
  kInsertVerdictLabel,
  kFindGoldenJob,
  kNumSlots,
};

constexpr struct {
  Slot slot;
  const char* sql;
} kStatements[] = {
    {kUpsertWorker,
     "INSERT INTO workers (worker_id, name, hardware_class, "
     "hardware_class_digest, record, first_seen_ms, last_seen_ms) "
     "VALUES (?, ?, ?, ?, ?, ?, ?) "
     "ON CONFLICT(worker_id) DO UPDATE SET name = excluded.name, "
     "hardware_class = excluded.hardware_class, "
     "hardware_class_digest = excluded.hardware_class_digest, "
     "record = excluded.record, last_seen_ms = excluded.last_seen_ms"},
    {kGetWorker,
     "SELECT record, first_seen_ms, last_seen_ms, admin_state, admin_reason "
     "FROM workers WHERE worker_id = ?"},
    {kListWorkers,
     "SELECT record, first_seen_ms, last_seen_ms, admin_state, admin_reason "
     "FROM workers ORDER BY name"},
    {kSetAdminState,
     "UPDATE workers SET admin_state = ?, admin_reason = ? WHERE worker_id = "
     "?"},
    {kAppendEvent,
     "INSERT INTO worker_events (worker_id, at_ms, kind, detail) "
     "VALUES (?, ?, ?, ?)"},
    {kListEvents,
     "SELECT event_id, worker_id, at_ms, kind, detail FROM worker_events "
     "WHERE worker_id = ? ORDER BY at_ms DESC, event_id DESC LIMIT ?"},
    {kInsertJob,
     "INSERT INTO jobs (job_id, record, manifest, state, model_digest, "
     "config_digest, idempotency_key, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, "
     "?)"},
    {kInsertRun,
     "INSERT INTO runs (run_id, job_id, record, state, attempt) "
     "VALUES (?, ?, ?, ?, ?)"},
    {kFindJobByKey, "SELECT job_id FROM jobs WHERE idempotency_key = ?"},
    {kGetJob, "SELECT record FROM jobs WHERE job_id = ?"},
    {kGetJobRuns, "SELECT record FROM runs WHERE job_id = ? ORDER BY run_id"},
    {kGetManifest, "SELECT manifest FROM jobs WHERE job_id = ?"},
    {kListJobs,
     "SELECT job_id FROM jobs WHERE (? = 0 OR created_ms < ? OR "
     "(created_ms = ? AND job_id < ?)) AND (? = 0 OR state = ?) AND "
     "(? = '' OR model_digest = ?) AND (? = '' OR config_digest = ?) ORDER "
     "BY created_ms DESC, job_id DESC LIMIT ?"},
    {kListUnfinishedJobs,
     "SELECT job_id FROM jobs WHERE state IN (1, 2) ORDER BY created_ms"},
    {kUpdateJob,
     "UPDATE jobs SET record = ?, state = ?, finished_ms = ? WHERE job_id = ?"},
    {kUpdateRun,
     "UPDATE runs SET record = ?, state = ? WHERE run_id = ? AND attempt = ?"},
    {kRestartRun,
     "UPDATE runs SET record = ?, state = ?, attempt = ?, next_sequence = 0 "
     "WHERE run_id = ?"},
    {kDeleteRunSteps, "DELETE FROM run_steps WHERE run_id = ?"},
    {kDeletePartials, "DELETE FROM partial_batches WHERE run_id = ?"},
    {kGetRunIngestState,
     "SELECT attempt, state, next_sequence FROM runs WHERE run_id = ?"},
    {kInsertRunStep,
     "INSERT INTO run_steps (run_id, attempt, step, fingerprints, step_digest) "
     "VALUES (?, ?, ?, ?, ?)"},
    {kInsertPartial,
     "INSERT INTO partial_batches (run_id, attempt, sequence, step, "
     "fingerprints) VALUES (?, ?, ?, ?, ?)"},
    {kGetPartials,
     "SELECT fingerprints FROM partial_batches WHERE run_id = ? AND attempt = "
     "? AND step = ? ORDER BY sequence"},
    {kDeleteStepPartials,
     "DELETE FROM partial_batches WHERE run_id = ? AND attempt = ? AND step = "
     "?"},
    {kSetNextSequence, "UPDATE runs SET next_sequence = ? WHERE run_id = ?"},
    // A group commit's per-batch savepoint, prepared once (parsed for
    // every batch, they took about 8 % of the committer thread's time with
    // batches of 25 fingerprints).
    {kSavepointBatch, "SAVEPOINT ingest_batch"},
    {kRollbackToBatch, "ROLLBACK TO ingest_batch"},
    {kReleaseBatch, "RELEASE ingest_batch"},
    {kLoadRunSteps,
     "SELECT step, fingerprints, step_digest FROM run_steps WHERE run_id = ? "
     "AND attempt = ? ORDER BY step"},
    {kReadStepAfter,
     "SELECT step, fingerprints, step_digest FROM run_steps WHERE run_id = ? "
     "AND attempt = ? AND step > ? ORDER BY step LIMIT 1"},
    {kInsertCertificate,
     "INSERT INTO certificates (certificate_id, record, model_digest, "
     "config_digest, hardware_class_digest, level, issued_ms) VALUES (?, ?, "
     "?, ?, ?, ?, ?) ON CONFLICT(certificate_id) DO NOTHING"},
    {kInsertJobReport,
     "INSERT INTO job_reports (job_id, report) VALUES (?, ?) "
     "ON CONFLICT(job_id) DO NOTHING"},
    {kGetJobReport, "SELECT report FROM job_reports WHERE job_id = ?"},
    {kListJobsAwaitingVerdict,
     "SELECT job_id FROM jobs WHERE state IN (3, 4, 5) AND job_id NOT IN "
     "(SELECT job_id FROM job_reports) ORDER BY created_ms"},
    {kPutAudit,
     "INSERT INTO audits (audit_id, record, state, started_ms) VALUES (?, ?, "
     "?, ?) ON CONFLICT(audit_id) DO UPDATE SET record = excluded.record, "
     "state = excluded.state"},
    {kGetAudit, "SELECT record FROM audits WHERE audit_id = ?"},
    {kListAudits,
     "SELECT record FROM audits ORDER BY started_ms DESC, audit_id DESC LIMIT "
     "?"},
    {kListRunningAudits,
     "SELECT record FROM audits WHERE state = 1 ORDER BY started_ms"},
    {kDeleteVerdictLabels, "DELETE FROM job_verdict_labels WHERE job_id = ?"},
    {kInsertVerdictLabel,
     "INSERT INTO job_verdict_labels (label_key, label_value, model_digest, "
     "config_digest, verdict, created_ms, job_id) VALUES (?, ?, ?, ?, ?, ?, "
     "?)"},
    {kFindGoldenJob,
     "SELECT job_id FROM job_verdict_labels WHERE label_key = ? AND "
     "label_value = ? AND model_digest = ? AND config_digest = ? AND verdict "
     "= ? AND job_id <> ? ORDER BY created_ms DESC, job_id DESC LIMIT 1"},
    {kGetCertificate,
     "SELECT record FROM certificates WHERE certificate_id = ?"},
    {kListCertificates,
     "SELECT record FROM certificates WHERE (? = '' OR model_digest = ?) AND "
     "(? = '' OR hardware_class_digest = ?) AND (? = 0 OR level = ?) ORDER BY "
     "issued_ms DESC, certificate_id DESC LIMIT ?"},
};

// What every call answers on a store left at an older schema (no prepared
// statements).
absl::Status OlderSchemaError() {
  return absl::FailedPreconditionError(
      "store opened at an older schema version (migrate_to_version)");
}

// The statements that ReadScope runs, prepared on the reader connection too.
constexpr Slot kReadSlots[] = {
    kGetWorker,    kListWorkers,   kListEvents,     kGetJob,
    kGetJobRuns,   kGetManifest,   kListJobs,       kGetJobReport,
    kLoadRunSteps, kReadStepAfter, kGetCertificate, kListCertificates,
    kGetAudit,     kListAudits,
};

absl::StatusOr<Worker> WorkerFromRow(const Statement& s) {
  Worker w;
  if (!w.ParseFromString(s.ColumnBlob(0))) {
    return absl::DataLossError("workers.record does not parse");
  }
  w.set_first_seen_unix_ms(s.ColumnInt64(1));
  w.set_admin_state(static_cast<WorkerAdminState>(s.ColumnInt64(3)));
  w.set_admin_reason(s.ColumnText(4));
  return w;
}

absl::Status Migrate(Database* db, int from, int to) {
  for (int v = from; v < to; ++v) {
    Transaction tx(db);
    LS_RETURN_IF_ERROR(tx.begin_status());
    absl::Status s = db->Exec(kMigrations[v]);
    if (!s.ok()) {
      return absl::InternalError(absl::StrCat("migration to schema version ",
                                              v + 1, " failed: ", s.message()));
    }
    LS_RETURN_IF_ERROR(db->Exec(absl::StrCat("PRAGMA user_version = ", v + 1)));
    LS_RETURN_IF_ERROR(
        db->Exec(absl::StrCat("PRAGMA application_id = ", kApplicationId)));
    LS_RETURN_IF_ERROR(tx.Commit());
  }
  return absl::OkStatus();
}

// What a full database means, for RESOURCE_EXHAUSTED messages and the log.
std::string FullMessage(const std::string& path, int64_t max_bytes) {
  if (max_bytes > 0) {
    return absl::StrCat("database ", path,
                        " is full: it reached its size limit, --max_db_bytes=",
                        max_bytes, " (or its disk is full)");
  }
  return absl::StrCat("database ", path, " is full: no space left on its disk");
}

// A corrupt file, or one that is not a database at all: SQLite's error
// codes for both map to DATA_LOSS (SqliteError).
absl::Status Corrupt(const std::string& path, absl::string_view detail) {
  return absl::DataLossError(
      absl::StrCat(path, " is corrupt or not a database (", detail, "). ",
                   CorruptDatabaseAdvice(path)));
}

}  // namespace

std::string CorruptDatabaseAdvice(const std::string& path) {
  return absl::StrCat(
      "The coordinator did not start and has not modified the file. Check it "
      "with `lockstep-coordinator verify-db --db=",
      path,
      "`, then restore a copy made by `lockstep-coordinator backup` "
      "(docs/operations.md, \"Backups and verification\")");
}

absl::Status VerifySchema(Database* db, int version) {
  if (version < 1 || version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "schema version %d is outside 1..%d", version, kSchemaVersion));
  }
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Database> pristine,
                      Database::Open(":memory:", true));
  LS_RETURN_IF_ERROR(Migrate(pristine.get(), 0, version));
  constexpr absl::string_view kObjects =
      "SELECT type, name, coalesce(sql, '') FROM sqlite_schema "
      "WHERE name NOT LIKE 'sqlite_%' ORDER BY name";
  auto read =
      [&](Database* d) -> absl::StatusOr<std::map<std::string, std::string>> {
    LS_ASSIGN_OR_RETURN(std::unique_ptr<Statement> st, d->Prepare(kObjects));
    ScopedReset reset(st.get());
    std::map<std::string, std::string> out;
    while (true) {
      LS_ASSIGN_OR_RETURN(bool row, st->Step());
      if (!row) break;
      out[absl::StrCat(st->ColumnText(0), " ", st->ColumnText(1))] =
          st->ColumnText(2);
    }
    return out;
  };
  LS_ASSIGN_OR_RETURN(auto want, read(pristine.get()));
  LS_ASSIGN_OR_RETURN(auto have, read(db));
  for (const auto& [name, sql] : want) {
    auto it = have.find(name);
    if (it == have.end()) {
      return absl::FailedPreconditionError(
          absl::StrFormat("schema version %d: %s is missing", version, name));
    }
    if (it->second != sql) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "schema version %d: %s differs from the one migrations create",
          version, name));
    }
  }
  for (const auto& [name, sql] : have) {
    if (want.count(name) == 0) {
      return absl::FailedPreconditionError(
          absl::StrFormat("schema version %d: unexpected %s", version, name));
    }
  }
  return absl::OkStatus();
}

absl::Status Store::NameFull(absl::Status s) {
  if (s.code() != absl::StatusCode::kResourceExhausted ||
      !absl::StrContains(s.message(), "(database or disk is full)")) {
    return s;
  }
  const std::string what = FullMessage(options_.path, options_.max_bytes);
  if (!full_.exchange(true)) {
    LS_LOG(ERROR) << what
                  << "; new jobs are refused and fingerprints wait on their "
                     "workers until there is room: raise --max_db_bytes (or "
                     "free disk space) and restart the coordinator";
  }
  return absl::ResourceExhaustedError(
      absl::StrCat(what, "; nothing committed is lost (", s.message(), ")"));
}

struct Store::Reader {
  absl::Mutex mu;
  std::unique_ptr<Database> db ABSL_GUARDED_BY(mu);
  std::vector<std::unique_ptr<Statement>> stmts ABSL_GUARDED_BY(mu);
  std::unique_ptr<Statement> begin ABSL_GUARDED_BY(mu);
  std::unique_ptr<Statement> commit ABSL_GUARDED_BY(mu);
};

// The statements of one read. With a reader connection: under its mutex,
// inside one read transaction, so that every statement of the scope sees
// the same snapshot (a job and its runs, a page of jobs and each job); the
// transaction ends with the scope, whatever the path out (the ScopedResets
// of its statements, declared after it, end first), so the next read sees
// the newest commit. Without one: the store's connection under mu_.
class Store::ReadScope {
 public:
  explicit ReadScope(Store* store) ABSL_NO_THREAD_SAFETY_ANALYSIS
      : store_(store),
        reader_(store->reader_.get()) {
    if (reader_ != nullptr) {
      reader_->mu.Lock();
      stmts_ = &reader_->stmts;
      status_ = Step(reader_->begin.get());
      open_ = status_.ok();
    } else {
      store_->mu_.Lock();
      stmts_ = &store_->stmts_;
      if (stmts_->empty()) status_ = OlderSchemaError();
    }
  }
  ~ReadScope() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (reader_ == nullptr) {
      store_->mu_.Unlock();
      return;
    }
    if (open_) {
      absl::Status s = Step(reader_->commit.get());
      if (!s.ok()) {
        // Left open, the transaction would pin this snapshot for every
        // later read.
        LS_LOG(WARNING) << "ending a read transaction: " << s;
        s = reader_->db->Exec("ROLLBACK");
        if (!s.ok()) LS_LOG(ERROR) << "rolling a read transaction back: " << s;
      }
    }
    reader_->mu.Unlock();
  }
  ReadScope(const ReadScope&) = delete;
  ReadScope& operator=(const ReadScope&) = delete;

  // BEGIN's status, or FAILED_PRECONDITION at an older schema: check it
  // before any statement.
  const absl::Status& status() const { return status_; }
  Statement* operator[](Slot slot) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return (*stmts_)[slot].get();
  }
  // The scope's connection, for statements prepared per call.
  Database* db() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return reader_ != nullptr ? reader_->db.get() : store_->db_.get();
  }

 private:
  static absl::Status Step(Statement* st) {
    ScopedReset reset(st);
    return st->Run();
  }

  Store* const store_;
  Reader* const reader_;
  const std::vector<std::unique_ptr<Statement>>* stmts_ = nullptr;
  absl::Status status_;
  bool open_ = false;
};

Store::Store(StoreOptions options, std::unique_ptr<Database> db, int version)
    : options_(std::move(options)), db_(std::move(db)), version_(version) {}

Store::~Store() {
  StopIngest();
  if (reader_ != nullptr) {  // the hook uses it; it closes before db_
    absl::MutexLock lock(&mu_);
    sqlite3_wal_hook(db_->handle(), nullptr, nullptr);
  }
}

int Store::schema_version() const { return version_; }

absl::StatusOr<std::unique_ptr<Store>> Store::Open(
    const StoreOptions& options) {
  if (options.path.empty()) {
    return absl::InvalidArgumentError("store path: must not be empty");
  }
  const int target = options.migrate_to_version == 0
                         ? kSchemaVersion
                         : options.migrate_to_version;
  if (target < 1 || target > kSchemaVersion) {
    return absl::InvalidArgumentError(
        absl::StrFormat("migrate_to_version: %d is outside 1..%d",
                        options.migrate_to_version, kSchemaVersion));
  }
  if (options.synchronous != "FULL" && options.synchronous != "NORMAL") {
    return absl::InvalidArgumentError(absl::StrCat(
        "synchronous: \"", options.synchronous, "\" is not FULL or NORMAL"));
  }
  if (options.max_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_bytes: ", options.max_bytes, " is negative (0: no limit)"));
  }
  if (options.checkpoint_pages < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint_pages: ", options.checkpoint_pages, " is below 1"));
  }
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Database> db,
                      Database::Open(options.path, options.create));
  LS_RETURN_IF_ERROR(db->Exec(
      absl::StrCat("PRAGMA busy_timeout = ", options.busy_timeout_ms)));

  // Identify the file before writing anything to it. SQLite reports a
  // damaged header, or a file that is no database, as CORRUPT or NOTADB
  // (DATA_LOSS) on the first read.
  absl::StatusOr<int64_t> app_id = db->QueryInt64("PRAGMA application_id");
  if (!app_id.ok()) {
    if (app_id.status().code() == absl::StatusCode::kDataLoss) {
      return Corrupt(options.path, app_id.status().message());
    }
    return absl::FailedPreconditionError(
        absl::StrCat(options.path,
                     " is not a SQLite database: ", app_id.status().message()));
  }
  absl::StatusOr<int64_t> version = db->QueryInt64("PRAGMA user_version");
  absl::StatusOr<int64_t> tables =
      version.ok() ? db->QueryInt64(
                         "SELECT count(*) FROM sqlite_schema WHERE type = "
                         "'table'")
                   : version.status();
  if (!tables.ok()) {
    if (tables.status().code() == absl::StatusCode::kDataLoss) {
      return Corrupt(options.path, tables.status().message());
    }
    return tables.status();
  }
  if (*app_id != kApplicationId && !(*app_id == 0 && *tables == 0)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is not a Lockstep database (application_id 0x%08x, expected "
        "0x%08x); refusing to modify it",
        options.path, static_cast<uint32_t>(*app_id),
        static_cast<uint32_t>(kApplicationId)));
  }
  if (*version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s has schema version %d, newer than the %d this build of Lockstep "
        "knows; use a newer lockstep-coordinator (the file was not changed)",
        options.path, *version, kSchemaVersion));
  }
  if (*version > target) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s has schema version %d, newer than the requested %d",
                        options.path, *version, target));
  }
  // Damage inside the file (a torn or overwritten page) shows only when the
  // page is read: look at every page now, before anything is written, so a
  // corrupt file is refused whole instead of failing later mid-job.
  if (options.check_on_open && *tables > 0) {
    absl::StatusOr<std::string> check = db->QueryText("PRAGMA quick_check");
    if (!check.ok() && check.status().code() == absl::StatusCode::kDataLoss) {
      return Corrupt(options.path, check.status().message());
    }
    LS_RETURN_IF_ERROR(check.status());
    if (*check != "ok") {
      return Corrupt(options.path, absl::StrCat("quick_check: ", *check));
    }
  }

  LS_RETURN_IF_ERROR(db->Exec("PRAGMA journal_mode = WAL"));
  LS_RETURN_IF_ERROR(
      db->Exec(absl::StrCat("PRAGMA synchronous = ", options.synchronous)));
  LS_RETURN_IF_ERROR(db->Exec("PRAGMA foreign_keys = ON"));
  LS_RETURN_IF_ERROR(Migrate(db.get(), static_cast<int>(*version), target));
  if (options.max_bytes > 0) {
    LS_ASSIGN_OR_RETURN(int64_t page_size, db->QueryInt64("PRAGMA page_size"));
    const int64_t pages = std::max<int64_t>(1, options.max_bytes / page_size);
    // SQLite never sets the limit below the file's current page count.
    LS_ASSIGN_OR_RETURN(int64_t set, db->QueryInt64(absl::StrCat(
                                         "PRAGMA max_page_count = ", pages)));
    if (set > pages) {
      LS_LOG(WARNING) << options.path << " already holds " << set * page_size
                      << " bytes, more than --max_db_bytes="
                      << options.max_bytes
                      << ": it cannot grow until the limit is raised";
    }
  }

  auto store =
      std::unique_ptr<Store>(new Store(options, std::move(db), target));
  if (target == kSchemaVersion) {
    absl::MutexLock lock(&store->mu_);
    LS_RETURN_IF_ERROR(store->PrepareStatements());
    LS_ASSIGN_OR_RETURN(std::string journal,
                        store->db_->QueryText("PRAGMA journal_mode"));
    if (journal == "wal") {  // a file, not ":memory:"
      LS_ASSIGN_OR_RETURN(store->reader_, OpenReader(options));
      sqlite3_wal_hook(store->db_->handle(), &Store::CheckpointAfterCommit,
                       store.get());
    }
  }
  return store;
}

// sqlite3_wal_hook's callback on the store's connection, after each of its
// commits (so under mu_), in place of SQLite's automatic checkpoint;
// `frames` is the WAL's length. From checkpoint_pages frames on, a PASSIVE
// checkpoint copies what no read still needs. Reads on the reader
// connection keep it from ever copying everything while they go on, and
// SQLite starts the WAL over only when a write finds every frame copied:
// 3,000 commits with a reader polling left a 16 - 26 MB WAL at the
// default threshold, against 4 MB without reads. So from 4 *
// checkpoint_pages frames on, the commit also takes the reader's mutex
// (waiting for the one read under way, if any) and, with no read able to
// start, copies every frame and lets the next write start the WAL over
// (RESTART; it still waits, busy_timeout at most, for readers in other
// processes). The result is the committing statement's, so it is always
// SQLITE_OK: the commit has happened whatever the checkpoint does.
int Store::CheckpointAfterCommit(void* self, sqlite3* db, const char*,
                                 int frames) {
  auto* store = static_cast<Store*>(self);
  const int threshold = store->options_.checkpoint_pages;
  if (frames < threshold) return SQLITE_OK;
  if (frames / 4 < threshold) {
    sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr,
                              nullptr);
    return SQLITE_OK;
  }
  absl::MutexLock no_reads(&store->reader_->mu);
  const int rc = sqlite3_wal_checkpoint_v2(
      db, nullptr, SQLITE_CHECKPOINT_RESTART, nullptr, nullptr);
  if (rc != SQLITE_OK) {
    // BUSY: another process's read outlasted busy_timeout; the next
    // commit tries again.
    LS_LOG(WARNING) << "WAL checkpoint (RESTART) at " << frames
                    << " pages: " << SqliteError(db, rc, "wal_checkpoint");
  }
  return SQLITE_OK;
}

absl::StatusOr<std::unique_ptr<Store::Reader>> Store::OpenReader(
    const StoreOptions& options) {
  auto reader = std::make_unique<Reader>();
  absl::MutexLock lock(&reader->mu);
  LS_ASSIGN_OR_RETURN(reader->db,
                      Database::Open(options.path, /*create=*/false));
  Database* db = reader->db.get();
  // Only the writer's connection checkpoints the WAL when it closes.
  sqlite3_db_config(db->handle(), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  LS_RETURN_IF_ERROR(db->Exec(
      absl::StrCat("PRAGMA busy_timeout = ", options.busy_timeout_ms)));
  LS_RETURN_IF_ERROR(db->Exec("PRAGMA query_only = ON"));
  reader->stmts.resize(kNumSlots);
  for (const Slot slot : kReadSlots) {
    for (const auto& entry : kStatements) {
      if (entry.slot == slot) {
        LS_ASSIGN_OR_RETURN(reader->stmts[slot], db->Prepare(entry.sql));
      }
    }
  }
  LS_ASSIGN_OR_RETURN(reader->begin, db->Prepare("BEGIN"));
  LS_ASSIGN_OR_RETURN(reader->commit, db->Prepare("COMMIT"));
  return reader;
}

absl::Status Store::PrepareStatements() {
  stmts_.resize(kNumSlots);
  for (const auto& entry : kStatements) {
    LS_ASSIGN_OR_RETURN(stmts_[entry.slot], db_->Prepare(entry.sql));
  }
  return absl::OkStatus();
}

absl::Status Store::CheckIntegrity() {
  absl::MutexLock lock(&mu_);
  LS_ASSIGN_OR_RETURN(std::string result,
                      db_->QueryText("PRAGMA integrity_check"));
  if (result != "ok") {
    return absl::DataLossError(absl::StrCat("integrity check: ", result));
  }
  return absl::OkStatus();
}

#define LS_REQUIRE_CURRENT_SCHEMA() \
  if (stmts_.empty()) return OlderSchemaError()

absl::Status Store::UpsertWorker(const Worker& worker, int64_t now_unix_ms) {
  if (worker.worker_id().empty()) {
    return absl::InvalidArgumentError("worker.worker_id: must not be empty");
  }
  Worker record;
  record.set_worker_id(worker.worker_id());
  record.set_name(worker.name());
  *record.mutable_labels() = worker.labels();
  *record.mutable_profile() = worker.profile();
  std::string blob;
  if (!record.SerializeToString(&blob)) {
    return absl::InternalError("worker record does not serialize");
  }
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  Statement* s = stmts_[kUpsertWorker].get();
  ScopedReset reset(s);
  LS_RETURN_IF_ERROR(s->BindText(1, worker.worker_id()));
  LS_RETURN_IF_ERROR(s->BindText(2, worker.name()));
  LS_RETURN_IF_ERROR(s->BindText(3, worker.profile().hardware_class()));
  LS_RETURN_IF_ERROR(s->BindText(4, worker.profile().hardware_class_digest()));
  LS_RETURN_IF_ERROR(s->BindBlob(5, blob));
  LS_RETURN_IF_ERROR(s->BindInt64(6, now_unix_ms));
  LS_RETURN_IF_ERROR(s->BindInt64(7, now_unix_ms));
  return s->Run();
}

absl::StatusOr<std::optional<Worker>> Store::GetWorker(
    const std::string& worker_id) {
  ReadScope read(this);
  LS_RETURN_IF_ERROR(read.status());
  Statement* s = read[kGetWorker];
  ScopedReset reset(s);
  LS_RETURN_IF_ERROR(s->BindText(1, worker_id));
  LS_ASSIGN_OR_RETURN(bool row, s->Step());
  if (!row) return std::optional<Worker>();
  LS_ASSIGN_OR_RETURN(Worker w, WorkerFromRow(*s));
  return std::optional<Worker>(std::move(w));
}

absl::StatusOr<std::vector<Worker>> Store::ListWorkers() {
  ReadScope read(this);
  LS_RETURN_IF_ERROR(read.status());
  Statement* s = read[kListWorkers];
  ScopedReset reset(s);
  std::vector<Worker> out;
  while (true) {
    LS_ASSIGN_OR_RETURN(bool row, s->Step());
    if (!row) break;
    LS_ASSIGN_OR_RETURN(Worker w, WorkerFromRow(*s));
    out.push_back(std::move(w));
  }
  return out;
}

absl::Status Store::SetWorkerAdminState(const std::string& worker_id,
                                        WorkerAdminState state,
                                        const std::string& reason,
                                        int64_t now_unix_ms) {
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  Transaction tx(db_.get());
  LS_RETURN_IF_ERROR(tx.begin_status());
  Statement* s = stmts_[kSetAdminState].get();
  {
    ScopedReset reset(s);
    LS_RETURN_IF_ERROR(s->BindInt64(1, state));
    LS_RETURN_IF_ERROR(s->BindText(2, reason));
    LS_RETURN_IF_ERROR(s->BindText(3, worker_id));
    LS_ASSIGN_OR_RETURN(bool unused, s->Step());
    (void)unused;
  }
  if (sqlite3_changes(db_->handle()) == 0) {
    return absl::NotFoundError(
        absl::StrCat("worker_id: no worker \"", worker_id, "\""));
  }
  LS_RETURN_IF_ERROR(AppendWorkerEventLocked(
      worker_id, now_unix_ms, "admin_state",
      absl::StrCat(lockstep::v1::WorkerAdminState_Name(state),
                   reason.empty() ? "" : ": ", reason)));
  return tx.Commit();
}

absl::Status Store::AppendWorkerEvent(const std::string& worker_id,
                                      int64_t at_unix_ms,
                                      const std::string& kind,
                                      const std::string& detail) {
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  return AppendWorkerEventLocked(worker_id, at_unix_ms, kind, detail);
}

absl::Status Store::AppendWorkerEventLocked(const std::string& worker_id,
                                            int64_t at_unix_ms,
                                            const std::string& kind,
                                            const std::string& detail) {
  Statement* s = stmts_[kAppendEvent].get();
  ScopedReset reset(s);
  LS_RETURN_IF_ERROR(s->BindText(1, worker_id));
  LS_RETURN_IF_ERROR(s->BindInt64(2, at_unix_ms));
  LS_RETURN_IF_ERROR(s->BindText(3, kind));
  LS_RETURN_IF_ERROR(s->BindText(4, detail));
  return s->Run();
}

absl::StatusOr<std::vector<WorkerEvent>> Store::ListWorkerEvents(
    const std::string& worker_id, int limit) {
  ReadScope read(this);
  LS_RETURN_IF_ERROR(read.status());
  Statement* s = read[kListEvents];
  ScopedReset reset(s);
  LS_RETURN_IF_ERROR(s->BindText(1, worker_id));
  LS_RETURN_IF_ERROR(s->BindInt64(2, limit));
  std::vector<WorkerEvent> out;
  while (true) {
    LS_ASSIGN_OR_RETURN(bool row, s->Step());
    if (!row) break;
    WorkerEvent e;
    e.event_id = s->ColumnInt64(0);
    e.worker_id = s->ColumnText(1);
    e.at_unix_ms = s->ColumnInt64(2);
    e.kind = s->ColumnText(3);
    e.detail = s->ColumnText(4);
    out.push_back(std::move(e));
  }
  return out;
}

namespace {

std::string Serialize(const google::protobuf::MessageLite& m) {
  std::string out;
  m.SerializeToString(&out);
  return out;
}

using FingerprintList =
    google::protobuf::RepeatedPtrField<v1::TensorFingerprint>;

// The fingerprint-only form a step is stored in: the serialized
// FingerprintBatch holding just `first` then `second` as its fingerprints
// and `step_digest`. Written field by field, in the order protobuf
// serializes them (fingerprints = 5, then step_digest = 7), so the bytes
// equal those of building that message and calling SerializeToString, but
// without copying every fingerprint into a new message first.
std::string EncodeFingerprints(const FingerprintList& first,
                               const FingerprintList& second,
                               const std::string& step_digest) {
  using ::google::protobuf::internal::WireFormatLite;
  constexpr uint32_t kFingerprintsTag =
      WireFormatLite::MakeTag(v1::FingerprintBatch::kFingerprintsFieldNumber,
                              WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  constexpr uint32_t kStepDigestTag =
      WireFormatLite::MakeTag(v1::FingerprintBatch::kStepDigestFieldNumber,
                              WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  size_t total = 0;
  for (const FingerprintList* list : {&first, &second}) {
    for (const v1::TensorFingerprint& fp : *list) {
      total += 1 + WireFormatLite::LengthDelimitedSize(fp.ByteSizeLong());
    }
  }
  if (!step_digest.empty()) {
    total += 1 + WireFormatLite::LengthDelimitedSize(step_digest.size());
  }
  std::string out;
  out.resize(total);
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  using ::google::protobuf::io::CodedOutputStream;
  for (const FingerprintList* list : {&first, &second}) {
    for (const v1::TensorFingerprint& fp : *list) {
      p = CodedOutputStream::WriteTagToArray(kFingerprintsTag, p);
      // ByteSizeLong() above cached the size.
      p = CodedOutputStream::WriteVarint32ToArray(
          static_cast<uint32_t>(fp.GetCachedSize()), p);
      p = fp.SerializeWithCachedSizesToArray(p);
    }
  }
  if (!step_digest.empty()) {
    p = CodedOutputStream::WriteTagToArray(kStepDigestTag, p);
    p = CodedOutputStream::WriteStringWithSizeToArray(step_digest, p);
  }
  return out;
}

}  // namespace

absl::Status Store::InsertJob(const v1::Job& job,
                              const v1::TensorManifest& manifest,
                              const std::string& idempotency_key) {
  if (full()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("new jobs are refused: ",
                     FullMessage(options_.path, options_.max_bytes),
                     "; jobs already admitted go on"));
  }
  return NameFull(InsertJobUnchecked(job, manifest, idempotency_key));
}

absl::Status Store::InsertJobUnchecked(const v1::Job& job,
                                       const v1::TensorManifest& manifest,
                                       const std::string& idempotency_key) {
  v1::Job record = job;
  record.clear_runs();
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  Transaction tx(db_.get());
  LS_RETURN_IF_ERROR(tx.begin_status());
  {
    Statement* st = stmts_[kInsertJob].get();
    ScopedReset reset(st);
    LS_RETURN_IF_ERROR(st->BindText(1, job.job_id()));
    LS_RETURN_IF_ERROR(st->BindBlob(2, Serialize(record)));
    LS_RETURN_IF_ERROR(st->BindBlob(3, Serialize(manifest)));
    LS_RETURN_IF_ERROR(st->BindInt64(4, job.state()));
    LS_RETURN_IF_ERROR(st->BindText(5, job.model_digest()));
    LS_RETURN_IF_ERROR(st->BindText(6, job.config_digest()));
    if (idempotency_key.empty()) {
      LS_RETURN_IF_ERROR(st->BindNull(7));
    } else {
      LS_RETURN_IF_ERROR(st->BindText(7, idempotency_key));
    }
    LS_RETURN_IF_ERROR(st->BindInt64(8, job.created_unix_ms()));
    absl::StatusOr<bool> row = st->Step();
    if (!row.ok()) {
      if (row.status().code() == absl::StatusCode::kAlreadyExists) {
        return absl::AlreadyExistsError(absl::StrCat(
            "idempotency_key: \"", idempotency_key, "\" is already used"));
      }
      return row.status();
    }
  }
  LS_RETURN_IF_ERROR(ReferenceBlobLocked(job));
  for (const v1::Run& run : job.runs()) {
    Statement* st = stmts_[kInsertRun].get();
    ScopedReset reset(st);
    LS_RETURN_IF_ERROR(st->BindText(1, run.run_id()));
    LS_RETURN_IF_ERROR(st->BindText(2, job.job_id()));
    LS_RETURN_IF_ERROR(st->BindBlob(3, Serialize(run)));
    LS_RETURN_IF_ERROR(st->BindInt64(4, run.state()));
    LS_RETURN_IF_ERROR(st->BindInt64(5, run.attempt()));
    LS_ASSIGN_OR_RETURN(bool unused, st->Step());
    (void)unused;
  }
  return tx.Commit();
}

absl::StatusOr<std::optional<std::string>> Store::FindJobByIdempotencyKey(
    const std::string& key) {
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  Statement* st = stmts_[kFindJobByKey].get();
  ScopedReset reset(st);
  LS_RETURN_IF_ERROR(st->BindText(1, key));
  LS_ASSIGN_OR_RETURN(bool row, st->Step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(st->ColumnText(0));
}

absl::StatusOr<std::optional<v1::Job>> Store::GetJob(
    const std::string& job_id) {
  ReadScope read(this);
  LS_RETURN_IF_ERROR(read.status());
  return GetJobIn(read, job_id);
}

absl::StatusOr<std::optional<v1::Job>> Store::GetJobIn(
    const ReadScope& read, const std::string& job_id) {
  v1::Job job;
  {
    Statement* st = read[kGetJob];
    ScopedReset reset(st);
    LS_RETURN_IF_ERROR(st->BindText(1, job_id));
    LS_ASSIGN_OR_RETURN(bool row, st->Step());
    if (!row) return std::optional<v1::Job>();
    if (!job.ParseFromString(st->ColumnBlob(0))) {
      return absl::DataLossError(
          absl::StrCat("jobs.record of ", job_id, " does not parse"));
    }
  }
  Statement* st = read[kGetJobRuns];
  ScopedReset reset(st);
  LS_RETURN_IF_ERROR(st->BindText(1, job_id));
  while (true) {
    LS_ASSIGN_OR_RETURN(bool row, st->Step());
    if (!row) break;
    if (!job.add_runs()->ParseFromString(st->ColumnBlob(0))) {
      return absl::DataLossError(
          absl::StrCat("runs.record of job ", job_id, " does not parse"));
    }
  }
  return std::optional<v1::Job>(std::move(job));
}

absl::StatusOr<v1::TensorManifest> Store::GetManifest(
    const std::string& job_id) {
  ReadScope read(this);
  LS_RETURN_IF_ERROR(read.status());
  Statement* st = read[kGetManifest];
  ScopedReset reset(st);
  LS_RETURN_IF_ERROR(st->BindText(1, job_id));
  LS_ASSIGN_OR_RETURN(bool row, st->Step());
  if (!row)
    return absl::NotFoundError(absl::StrCat("job_id: no job \"", job_id, "\""));
  v1::TensorManifest m;
  if (!m.ParseFromString(st->ColumnBlob(0))) {
    return absl::DataLossError(
        absl::StrCat("jobs.manifest of ", job_id, " does not parse"));
  }
  return m;
}

absl::StatusOr<std::vector<v1::Job>> Store::ListJobs(const JobQuery& q) {
  ReadScope read(this);  // one snapshot for the page and its jobs
  LS_RETURN_IF_ERROR(read.status());
  std::vector<std::string> ids;
  {
    Statement* st = read[kListJobs];
    ScopedReset reset(st);
    LS_RETURN_IF_ERROR(st->BindInt64(1, q.before_created_ms));
    LS_RETURN_IF_ERROR(st->BindInt64(2, q.before_created_ms));
    LS_RETURN_IF_ERROR(st->BindInt64(3, q.before_created_ms));
    LS_RETURN_IF_ERROR(st->BindText(4, q.before_job_id));
    LS_RETURN_IF_ERROR(st->BindInt64(5, q.state));
    LS_RETURN_IF_ERROR(st->BindInt64(6, q.state));
    LS_RETURN_IF_ERROR(st->BindText(7, q.model_digest));
    LS_RETURN_IF_ERROR(st->BindText(8, q.model_digest));
    LS_RETURN_IF_ERROR(st->BindText(9, q.config_digest));
    LS_RETURN_IF_ERROR(st->BindText(10, q.config_digest));
    LS_RETURN_IF_ERROR(st->BindInt64(11, q.page_size));
    while (true) {
      LS_ASSIGN_OR_RETURN(bool row, st->Step());
      if (!row) break;
      ids.push_back(st->ColumnText(0));
    }
  }
  std::vector<v1::Job> out;
  for (const std::string& id : ids) {
    LS_ASSIGN_OR_RETURN(std::optional<v1::Job> job, GetJobIn(read, id));
    if (job.has_value()) out.push_back(std::move(*job));
  }
  return out;
}

namespace {

// A run_steps row (step, fingerprints, step_digest) as a StepRecord.
absl::StatusOr<StepRecord> StepFromRow(Statement* st,
                                       const std::string& run_id) {
  v1::FingerprintBatch stored;
  if (!stored.ParseFromString(st->ColumnBlob(1))) {
    return absl::DataLossError(
        absl::StrCat("run_steps.fingerprints of ", run_id, " do not parse"));
  }
  StepRecord r;
  r.step = static_cast<int32_t>(st->ColumnInt64(0));
  r.fingerprints.assign(stored.fingerprints().begin(),
                        stored.fingerprints().end());
  r.step_digest = st->ColumnText(2);
  return r;
}

// The first column of every row of a parameterless statement.
absl::StatusOr<std::vector<std::string>> FirstColumnTexts(Statement* st) {
  ScopedReset reset(st);
  std::vector<std::string> out;
  while (true) {
    LS_ASSIGN_OR_RETURN(bool row, st->Step());
    if (!row) break;
    out.push_back(st->ColumnText(0));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> Store::ListUnfinishedJobIds() {
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  return FirstColumnTexts(stmts_[kListUnfinishedJobs].get());
}

absl::Status Store::UpdateJob(const v1::Job& job) {
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  return UpdateJobLocked(job);
}

absl::Status Store::UpdateJobLocked(const v1::Job& job) {
  v1::Job record = job;
  record.clear_runs();
  Statement* st = stmts_[kUpdateJob].get();
  ScopedReset reset(st);
  LS_RETURN_IF_ERROR(st->BindBlob(1, Serialize(record)));
  LS_RETURN_IF_ERROR(st->BindInt64(2, job.state()));
  LS_RETURN_IF_ERROR(st->BindInt64(3, job.finished_unix_ms()));
  LS_RETURN_IF_ERROR(st->BindText(4, job.job_id()));
  LS_ASSIGN_OR_RETURN(bool unused, st->Step());
  (void)unused;
  if (sqlite3_changes(db_->handle()) == 0) {
    return absl::NotFoundError(
        absl::StrCat("job_id: no job \"", job.job_id(), "\""));
  }
  return absl::OkStatus();
}

absl::Status Store::FinishJob(
    const v1::Job& job, const v1::Report& report,
    const std::vector<v1::Certificate>& certificates) {
  return NameFull(FinishJobUnchecked(job, report, certificates));
}

absl::Status Store::FinishJobUnchecked(
    const v1::Job& job, const v1::Report& report,
    const std::vector<v1::Certificate>& certificates) {
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  Transaction tx(db_.get());
  LS_RETURN_IF_ERROR(tx.begin_status());
  LS_RETURN_IF_ERROR(UpdateJobLocked(job));
  {
    Statement* st = stmts_[kInsertJobReport].get();
    ScopedReset reset(st);
    LS_RETURN_IF_ERROR(st->BindText(1, job.job_id()));
    LS_RETURN_IF_ERROR(st->BindBlob(2, Serialize(report)));
    LS_RETURN_IF_ERROR(st->Run());
  }
  // A first verdict is indexed for golden lookups in the same transaction;
  // a later one changed nothing.
  if (sqlite3_changes(db_->handle()) == 1) {
    LS_RETURN_IF_ERROR(IndexJobVerdictLocked(job, report.verdict()));
  }
  for (const v1::Certificate& c : certificates) {
    LS_RETURN_IF_ERROR(InsertCertificateLocked(c));
  }
  LS_RETURN_IF_ERROR(TouchJobBlobsLocked(job));
  return tx.Commit();
}

absl::StatusOr<std::optional<v1::Report>> Store::GetJobReport(
    const std::string& job_id) {
  ReadScope read(this);
  LS_RETURN_IF_ERROR(read.status());
  Statement* st = read[kGetJobReport];
  ScopedReset reset(st);
  LS_RETURN_IF_ERROR(st->BindText(1, job_id));
  LS_ASSIGN_OR_RETURN(bool row, st->Step());
  if (!row) return std::optional<v1::Report>();
  v1::Report r;
  if (!r.ParseFromString(st->ColumnBlob(0))) {
    return absl::DataLossError(
        absl::StrCat("job_reports.report of ", job_id, " does not parse"));
  }
  return std::optional<v1::Report>(std::move(r));
}

absl::StatusOr<std::vector<std::string>> Store::ListJobsAwaitingVerdict() {
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  return FirstColumnTexts(stmts_[kListJobsAwaitingVerdict].get());
}

absl::Status Store::SetReadOnlyForTesting(bool read_only) {
  absl::MutexLock lock(&mu_);
  return db_->Exec(
      absl::StrCat("PRAGMA query_only = ", read_only ? "ON" : "OFF"));
}

absl::Status Store::UpdateRun(const v1::Run& run) {
  return NameFull(UpdateRunUnchecked(run));
}

absl::Status Store::UpdateRunUnchecked(const v1::Run& run) {
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  Statement* st = stmts_[kUpdateRun].get();
  ScopedReset reset(st);
  LS_RETURN_IF_ERROR(st->BindBlob(1, Serialize(run)));
  LS_RETURN_IF_ERROR(st->BindInt64(2, run.state()));
  LS_RETURN_IF_ERROR(st->BindText(3, run.run_id()));
  LS_RETURN_IF_ERROR(st->BindInt64(4, run.attempt()));
  LS_ASSIGN_OR_RETURN(bool unused, st->Step());
  (void)unused;
  if (sqlite3_changes(db_->handle()) == 0) {
    return absl::NotFoundError(absl::StrCat("run_id: no run \"", run.run_id(),
                                            "\" at attempt ", run.attempt()));
  }
  return absl::OkStatus();
}

absl::Status Store::RestartRun(const v1::Run& run) {
  return NameFull(RestartRunUnchecked(run));
}

absl::Status Store::RestartRunUnchecked(const v1::Run& run) {
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  Transaction tx(db_.get());
  LS_RETURN_IF_ERROR(tx.begin_status());
  {
    Statement* st = stmts_[kRestartRun].get();
    ScopedReset reset(st);
    LS_RETURN_IF_ERROR(st->BindBlob(1, Serialize(run)));
    LS_RETURN_IF_ERROR(st->BindInt64(2, run.state()));
    LS_RETURN_IF_ERROR(st->BindInt64(3, run.attempt()));
    LS_RETURN_IF_ERROR(st->BindText(4, run.run_id()));
    LS_ASSIGN_OR_RETURN(bool unused, st->Step());
    (void)unused;
    if (sqlite3_changes(db_->handle()) == 0) {
      return absl::NotFoundError(
          absl::StrCat("run_id: no run \"", run.run_id(), "\""));
    }
  }
  for (Slot slot : {kDeleteRunSteps, kDeletePartials}) {
    Statement* st = stmts_[slot].get();
    ScopedReset reset(st);
    LS_RETURN_IF_ERROR(st->BindText(1, run.run_id()));
    LS_RETURN_IF_ERROR(st->Run());
  }
  return tx.Commit();
}

// One batch waiting for the committer.
struct Store::PendingIngest {
  v1::FingerprintBatch batch;
  int entries = 0;
  int64_t bytes = 0;
  IngestDone done;
  absl::StatusOr<IngestResult> result = absl::UnknownError("not ingested");
};

bool Store::SubmitIngest(v1::FingerprintBatch batch, int entries,
                         IngestDone done) {
  auto p = std::make_unique<PendingIngest>();
  p->bytes = static_cast<int64_t>(batch.ByteSizeLong());
  p->batch = std::move(batch);
  p->entries = entries;
  p->done = std::move(done);
  {
    absl::MutexLock lock(&ingest_mu_);
    if (!ingest_stopping_) {
      if (!committer_.joinable()) {
        committer_ = std::thread([this] { CommitLoop(); });
      }
      ingest_bytes_ += p->bytes;
      ingest_queue_.push_back(std::move(p));
      return ingest_bytes_ < options_.max_ingest_queue_bytes;
    }
  }
  p->done(absl::UnavailableError(
      "batch: the coordinator's store is closing; resend the batch"));
  return true;
}

absl::StatusOr<IngestResult> Store::IngestBatch(
    const v1::FingerprintBatch& batch, int entries) {
  absl::Notification stored;
  absl::StatusOr<IngestResult> result;
  SubmitIngest(batch, entries, [&](absl::StatusOr<IngestResult> r) {
    result = std::move(r);
    stored.Notify();
  });
  stored.WaitForNotification();
  return result;
}

void Store::StopIngest() {
  std::thread committer;
  {
    absl::MutexLock lock(&ingest_mu_);
    ingest_stopping_ = true;
    committer.swap(committer_);
  }
  if (committer.joinable()) committer.join();
}

void Store::PauseIngestForTesting(bool paused) {
  absl::MutexLock lock(&ingest_mu_);
  ingest_paused_ = paused;
}

absl::Status Store::ReadWith(const std::function<absl::Status(Database*)>& fn) {
  ReadScope read(this);
  LS_RETURN_IF_ERROR(read.status());
  return fn(read.db());
}

void Store::HoldWriterForTesting(const std::function<void()>& fn) {
  absl::MutexLock lock(&mu_);
  Transaction tx(db_.get());
  fn();
}

int64_t Store::IngestQueueBytes() {
  absl::MutexLock lock(&ingest_mu_);
  return ingest_bytes_;
}

void Store::CommitLoop() {
  while (true) {
    std::vector<std::unique_ptr<PendingIngest>> group;
    {
      absl::MutexLock lock(&ingest_mu_);
      ingest_mu_.Await(absl::Condition(this, &Store::CommitterReady));
      if (ingest_queue_.empty()) return;  // stopping, and nothing is left
      // Everything queued so far: one transaction, one sync.
      group.swap(ingest_queue_);
    }
    IngestGroup(group);
    int64_t bytes = 0;
    for (const auto& p : group) {
      if (!p->result.ok()) p->result = NameFull(p->result.status());
      bytes += p->bytes;
    }
    {
      absl::MutexLock lock(&ingest_mu_);
      ingest_bytes_ -= bytes;
    }
    // Committed (or refused): acknowledged in submission order.
    for (const auto& p : group) p->done(std::move(p->result));
  }
}

void Store::IngestGroup(
    const std::vector<std::unique_ptr<PendingIngest>>& group) {
  absl::MutexLock lock(&mu_);
  auto fail_all = [&](const absl::Status& s) {
    for (const auto& p : group) p->result = s;
  };
  if (stmts_.empty()) {
    return fail_all(OlderSchemaError());
  }
  Transaction tx(db_.get());
  if (!tx.begin_status().ok()) return fail_all(tx.begin_status());
  bool wrote = false;
  if (group.size() == 1) {
    // A refused batch leaves the transaction to roll back unchanged.
    PendingIngest* p = group[0].get();
    p->result = IngestBatchLocked(p->batch, p->entries);
    wrote = p->result.ok() && !p->result->duplicate;
  } else {
    // Each batch in its own savepoint, in submission order, so that a
    // refused one (by a check or by a constraint of the schema) leaves no
    // trace and the others see exactly the state they would have seen one
    // transaction each.
    for (const auto& p : group) {
      if (absl::Status s = stmts_[kSavepointBatch]->Run(); !s.ok()) {
        return fail_all(s);
      }
      p->result = IngestBatchLocked(p->batch, p->entries);
      const bool keep = p->result.ok() && !p->result->duplicate;
      if (!p->result.ok() && sqlite3_get_autocommit(db_->handle()) != 0) {
        // SQLite rolled back the whole transaction, not just the failed
        // statement (it may on SQLITE_FULL, _IOERR, _NOMEM, _BUSY): the
        // group's earlier batches are gone with it. None is acknowledged;
        // each is answered with the cause (a full database: the workers
        // keep them and resend).
        return fail_all(p->result.status());
      }
      absl::Status s =
          keep ? absl::OkStatus() : stmts_[kRollbackToBatch]->Run();
      if (s.ok()) s = stmts_[kReleaseBatch]->Run();
      if (!s.ok()) return fail_all(s);
      wrote = wrote || keep;
    }
  }
  if (!wrote) return;  // nothing to commit: the transaction rolls back
  // One commit (one WAL sync under synchronous=FULL) for the whole group;
  // no batch is acknowledged before it returns.
  if (absl::Status s = tx.Commit(); !s.ok()) {
    for (const auto& p : group) {
      if (p->result.ok()) p->result = s;
    }
  }
}

absl::StatusOr<IngestResult> Store::IngestBatchLocked(
    const v1::FingerprintBatch& batch, int entries) {
  int64_t attempt = 0, state = 0, next = 0;
  {
    Statement* st = stmts_[kGetRunIngestState].get();
    ScopedReset reset(st);
    LS_RETURN_IF_ERROR(st->BindText(1, batch.run_id()));
    LS_ASSIGN_OR_RETURN(bool row, st->Step());
    if (!row) {
      return absl::NotFoundError(
          absl::StrCat("batch.run_id: no run \"", batch.run_id(), "\""));
    }
    attempt = st->ColumnInt64(0);
    state = st->ColumnInt64(1);
    next = st->ColumnInt64(2);
  }
  if (batch.attempt() != attempt) {
    return absl::AbortedError(absl::StrFormat(
        "batch.attempt: %d is not the current attempt %d of run %s (the "
        "run was re-queued)",
        batch.attempt(), attempt, batch.run_id()));
  }
  if (batch.sequence() < next) {
    IngestResult dup;
    dup.duplicate = true;
    return dup;  // already stored; nothing is written
  }
  if (state != v1::RUN_ASSIGNED && state != v1::RUN_RUNNING) {
    return absl::FailedPreconditionError(
        absl::StrCat("run ", batch.run_id(), " is ",
                     v1::RunState_Name(static_cast<v1::RunState>(state)),
                     " and accepts no fingerprints"));
  }
  if (batch.sequence() > next) {
    return absl::OutOfRangeError(absl::StrFormat(
        "batch.sequence: %d skips ahead; run %s expects %d next",
        batch.sequence(), batch.run_id(), next));
  }
  // Where this batch's fingerprints start within the step.
  std::vector<v1::TensorFingerprint> earlier;
  {
    Statement* st = stmts_[kGetPartials].get();
    ScopedReset reset(st);
    LS_RETURN_IF_ERROR(st->BindText(1, batch.run_id()));
    LS_RETURN_IF_ERROR(st->BindInt64(2, attempt));
    LS_RETURN_IF_ERROR(st->BindInt64(3, batch.step()));
    while (true) {
      LS_ASSIGN_OR_RETURN(bool row, st->Step());
      if (!row) break;
      v1::FingerprintBatch part;
      if (!part.ParseFromString(st->ColumnBlob(0))) {
        return absl::DataLossError(
            "partial_batches.fingerprints does not parse");
      }
      for (auto& fp : *part.mutable_fingerprints()) earlier.push_back(fp);
    }
  }
  int expected_index = static_cast<int>(earlier.size());
  for (int i = 0; i < batch.fingerprints_size(); ++i) {
    const int index = batch.fingerprints(i).index();
    if (index != expected_index) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "batch.fingerprints[%d].index: %d, expected %d (fingerprints must "
          "follow the manifest order without gaps)",
          i, index, expected_index));
    }
    if (index >= entries) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "batch.fingerprints[%d].index: %d exceeds the manifest's %d entries "
          "per step",
          i, index, entries));
    }
    ++expected_index;
  }
  IngestResult result;
  if (batch.step_complete()) {
    if (expected_index != entries) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "batch.step_complete: step %d has %d fingerprints, the manifest has "
          "%d entries per step",
          batch.step(), expected_index, entries));
    }
    FingerprintList before;
    for (auto& fp : earlier) *before.Add() = std::move(fp);
    {
      Statement* st = stmts_[kInsertRunStep].get();
      ScopedReset reset(st);
      LS_RETURN_IF_ERROR(st->BindText(1, batch.run_id()));
      LS_RETURN_IF_ERROR(st->BindInt64(2, attempt));
      LS_RETURN_IF_ERROR(st->BindInt64(3, batch.step()));
      LS_RETURN_IF_ERROR(
          st->BindBlob(4, EncodeFingerprints(before, batch.fingerprints(),
                                             batch.step_digest())));
      LS_RETURN_IF_ERROR(st->BindText(5, batch.step_digest()));
      absl::StatusOr<bool> row = st->Step();
      if (!row.ok()) {
        if (row.status().code() == absl::StatusCode::kAlreadyExists) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "batch.step: step %d of run %s is already complete", batch.step(),
              batch.run_id()));
        }
        return row.status();
      }
    }
    if (!earlier.empty()) {
      Statement* st = stmts_[kDeleteStepPartials].get();
      ScopedReset reset(st);
      LS_RETURN_IF_ERROR(st->BindText(1, batch.run_id()));
      LS_RETURN_IF_ERROR(st->BindInt64(2, attempt));
      LS_RETURN_IF_ERROR(st->BindInt64(3, batch.step()));
      LS_RETURN_IF_ERROR(st->Run());
    }
    result.step_completed = true;
  } else {
    Statement* st = stmts_[kInsertPartial].get();
    ScopedReset reset(st);
    LS_RETURN_IF_ERROR(st->BindText(1, batch.run_id()));
    LS_RETURN_IF_ERROR(st->BindInt64(2, attempt));
    LS_RETURN_IF_ERROR(st->BindInt64(3, batch.sequence()));
    LS_RETURN_IF_ERROR(st->BindInt64(4, batch.step()));
    LS_RETURN_IF_ERROR(st->BindBlob(
        5, EncodeFingerprints(batch.fingerprints(), FingerprintList(), "")));
    LS_RETURN_IF_ERROR(st->Run());
  }
  {
    Statement* st = stmts_[kSetNextSequence].get();
    ScopedReset reset(st);
    LS_RETURN_IF_ERROR(st->BindInt64(1, batch.sequence() + 1));
    LS_RETURN_IF_ERROR(st->BindText(2, batch.run_id()));
    LS_RETURN_IF_ERROR(st->Run());
  }
  return result;
}

absl::StatusOr<std::vector<StepRecord>> Store::LoadRunSteps(
    const std::string& run_id, int32_t attempt) {
  ReadScope read(this);
  LS_RETURN_IF_ERROR(read.status());
  Statement* st = read[kLoadRunSteps];
  ScopedReset reset(st);
  LS_RETURN_IF_ERROR(st->BindText(1, run_id));
  LS_RETURN_IF_ERROR(st->BindInt64(2, attempt));
  std::vector<StepRecord> out;
  while (true) {
    LS_ASSIGN_OR_RETURN(bool row, st->Step());
    if (!row) break;
    LS_ASSIGN_OR_RETURN(StepRecord r, StepFromRow(st, run_id));
    out.push_back(std::move(r));
  }
  return out;
}

class Store::RunStepCursor final : public StepReader {
 public:
  RunStepCursor(Store* store, std::string run_id, int32_t attempt)
      : store_(store), run_id_(std::move(run_id)), attempt_(attempt) {}
  absl::StatusOr<std::optional<StepRecord>> Next() override {
    LS_ASSIGN_OR_RETURN(std::optional<StepRecord> step,
                        store_->ReadStepAfter(run_id_, attempt_, last_));
    if (step.has_value()) last_ = step->step;
    return step;
  }

 private:
  Store* const store_;
  const std::string run_id_;
  const int32_t attempt_;
  int32_t last_ = -1;
};

std::unique_ptr<StepReader> Store::OpenRunSteps(const std::string& run_id,
                                                int32_t attempt) {
  return std::make_unique<RunStepCursor>(this, run_id, attempt);
}

absl::StatusOr<std::optional<StepRecord>> Store::ReadStepAfter(
    const std::string& run_id, int32_t attempt, int32_t after_step) {
  ReadScope read(this);
  LS_RETURN_IF_ERROR(read.status());
  Statement* st = read[kReadStepAfter];
  ScopedReset reset(st);
  LS_RETURN_IF_ERROR(st->BindText(1, run_id));
  LS_RETURN_IF_ERROR(st->BindInt64(2, attempt));
  LS_RETURN_IF_ERROR(st->BindInt64(3, after_step));
  LS_ASSIGN_OR_RETURN(bool row, st->Step());
  if (!row) return std::optional<StepRecord>();
  LS_ASSIGN_OR_RETURN(StepRecord r, StepFromRow(st, run_id));
  return std::optional<StepRecord>(std::move(r));
}

absl::StatusOr<int64_t> Store::NextSequence(const std::string& run_id) {
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  Statement* st = stmts_[kGetRunIngestState].get();
  ScopedReset reset(st);
  LS_RETURN_IF_ERROR(st->BindText(1, run_id));
  LS_ASSIGN_OR_RETURN(bool row, st->Step());
  if (!row)
    return absl::NotFoundError(absl::StrCat("run_id: no run \"", run_id, "\""));
  return st->ColumnInt64(2);
}

absl::Status Store::IndexJobVerdict(const v1::Job& job, v1::Verdict verdict) {
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  Transaction tx(db_.get());
  LS_RETURN_IF_ERROR(tx.begin_status());
  LS_RETURN_IF_ERROR(IndexJobVerdictLocked(job, verdict));
  return tx.Commit();
}

absl::Status Store::IndexJobVerdictLocked(const v1::Job& job,
                                          v1::Verdict verdict) {
  {
    Statement* st = stmts_[kDeleteVerdictLabels].get();
    ScopedReset reset(st);
    LS_RETURN_IF_ERROR(st->BindText(1, job.job_id()));
    LS_RETURN_IF_ERROR(st->Run());
  }
  Statement* st = stmts_[kInsertVerdictLabel].get();
  for (const auto& [key, value] : job.spec().labels()) {
    ScopedReset reset(st);
    LS_RETURN_IF_ERROR(st->BindText(1, key));
    LS_RETURN_IF_ERROR(st->BindText(2, value));
    LS_RETURN_IF_ERROR(st->BindText(3, job.model_digest()));
    LS_RETURN_IF_ERROR(st->BindText(4, job.config_digest()));
    LS_RETURN_IF_ERROR(st->BindInt64(5, static_cast<int64_t>(verdict)));
    LS_RETURN_IF_ERROR(st->BindInt64(6, job.created_unix_ms()));
    LS_RETURN_IF_ERROR(st->BindText(7, job.job_id()));
    LS_RETURN_IF_ERROR(st->Run());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> Store::FindGoldenJob(
    const std::string& key, const std::string& value,
    const std::string& model_digest, const std::string& config_digest,
    const std::string& exclude_job_id) {
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  Statement* st = stmts_[kFindGoldenJob].get();
  ScopedReset reset(st);
  LS_RETURN_IF_ERROR(st->BindText(1, key));
  LS_RETURN_IF_ERROR(st->BindText(2, value));
  LS_RETURN_IF_ERROR(st->BindText(3, model_digest));
  LS_RETURN_IF_ERROR(st->BindText(4, config_digest));
  LS_RETURN_IF_ERROR(st->BindInt64(5, static_cast<int64_t>(v1::REPRODUCIBLE)));
  LS_RETURN_IF_ERROR(st->BindText(6, exclude_job_id));
  LS_ASSIGN_OR_RETURN(bool row, st->Step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(st->ColumnText(0));
}

absl::Status Store::InsertCertificate(const v1::Certificate& c) {
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  return InsertCertificateLocked(c);
}

absl::Status Store::InsertCertificateLocked(const v1::Certificate& c) {
  Statement* st = stmts_[kInsertCertificate].get();
  ScopedReset reset(st);
  LS_RETURN_IF_ERROR(st->BindText(1, c.certificate_id()));
  LS_RETURN_IF_ERROR(st->BindBlob(2, Serialize(c)));
  LS_RETURN_IF_ERROR(st->BindText(3, c.model_digest()));
  LS_RETURN_IF_ERROR(st->BindText(4, c.config_digest()));
  LS_RETURN_IF_ERROR(st->BindText(5, c.hardware_class_digest()));
  LS_RETURN_IF_ERROR(st->BindInt64(6, c.level()));
  LS_RETURN_IF_ERROR(st->BindInt64(7, c.issued_unix_ms()));
  return st->Run();
}

absl::StatusOr<std::optional<v1::Certificate>> Store::GetCertificate(
    const std::string& certificate_id) {
  ReadScope read(this);
  LS_RETURN_IF_ERROR(read.status());
  Statement* st = read[kGetCertificate];
  ScopedReset reset(st);
  LS_RETURN_IF_ERROR(st->BindText(1, certificate_id));
  LS_ASSIGN_OR_RETURN(bool row, st->Step());
  if (!row) return std::optional<v1::Certificate>();
  v1::Certificate c;
  if (!c.ParseFromString(st->ColumnBlob(0))) {
    return absl::DataLossError("certificates.record does not parse");
  }
  return std::optional<v1::Certificate>(std::move(c));
}

absl::StatusOr<std::vector<v1::Certificate>> Store::ListCertificates(
    const std::string& model_digest, const std::string& hardware_class_digest,
    v1::Level level, int limit) {
  ReadScope read(this);
  LS_RETURN_IF_ERROR(read.status());
  Statement* st = read[kListCertificates];
  ScopedReset reset(st);
  LS_RETURN_IF_ERROR(st->BindText(1, model_digest));
  LS_RETURN_IF_ERROR(st->BindText(2, model_digest));
  LS_RETURN_IF_ERROR(st->BindText(3, hardware_class_digest));
  LS_RETURN_IF_ERROR(st->BindText(4, hardware_class_digest));
  LS_RETURN_IF_ERROR(st->BindInt64(5, level));
  LS_RETURN_IF_ERROR(st->BindInt64(6, level));
  LS_RETURN_IF_ERROR(st->BindInt64(7, limit));
  std::vector<v1::Certificate> out;
  while (true) {
    LS_ASSIGN_OR_RETURN(bool row, st->Step());
    if (!row) break;
    v1::Certificate c;
    if (!c.ParseFromString(st->ColumnBlob(0))) {
      return absl::DataLossError("certificates.record does not parse");
    }
    out.push_back(std::move(c));
  }
  return out;
}

absl::Status Store::PutAudit(const v1::Audit& audit) {
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  Statement* st = stmts_[kPutAudit].get();
  ScopedReset reset(st);
  LS_RETURN_IF_ERROR(st->BindText(1, audit.audit_id()));
  LS_RETURN_IF_ERROR(st->BindBlob(2, Serialize(audit)));
  LS_RETURN_IF_ERROR(st->BindInt64(3, audit.state()));
  LS_RETURN_IF_ERROR(st->BindInt64(4, audit.started_unix_ms()));
  return st->Run();
}

absl::StatusOr<std::optional<v1::Audit>> Store::GetAudit(
    const std::string& audit_id) {
  ReadScope read(this);
  LS_RETURN_IF_ERROR(read.status());
  Statement* st = read[kGetAudit];
  ScopedReset reset(st);
  LS_RETURN_IF_ERROR(st->BindText(1, audit_id));
  LS_ASSIGN_OR_RETURN(bool row, st->Step());
  if (!row) return std::optional<v1::Audit>();
  v1::Audit a;
  if (!a.ParseFromString(st->ColumnBlob(0))) {
    return absl::DataLossError("audits.record does not parse");
  }
  return std::optional<v1::Audit>(std::move(a));
}

absl::StatusOr<std::vector<v1::Audit>> Store::ListAudits(int limit) {
  ReadScope read(this);
  LS_RETURN_IF_ERROR(read.status());
  Statement* st = read[kListAudits];
  ScopedReset reset(st);
  LS_RETURN_IF_ERROR(st->BindInt64(1, limit));
  return ReadAudits(st);
}

absl::StatusOr<std::vector<v1::Audit>> Store::ListRunningAudits() {
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  Statement* st = stmts_[kListRunningAudits].get();
  ScopedReset reset(st);
  return ReadAudits(st);
}

absl::StatusOr<std::vector<v1::Audit>> Store::ReadAudits(Statement* st) {
  std::vector<v1::Audit> out;
  while (true) {
    LS_ASSIGN_OR_RETURN(bool row, st->Step());
    if (!row) break;
    v1::Audit a;
    if (!a.ParseFromString(st->ColumnBlob(0))) {
      return absl::DataLossError("audits.record does not parse");
    }
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace lockstep::store
