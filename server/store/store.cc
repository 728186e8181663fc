#include "server/store/store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

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

}  // namespace

Store::Store(StoreOptions options, std::unique_ptr<Database> db, int version)
    : options_(std::move(options)), db_(std::move(db)), version_(version) {}

Store::~Store() = default;

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
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Database> db,
                      Database::Open(options.path, options.create));
  LS_RETURN_IF_ERROR(db->Exec(
      absl::StrCat("PRAGMA busy_timeout = ", options.busy_timeout_ms)));

  // Identify the file before writing anything to it.
  absl::StatusOr<int64_t> app_id = db->QueryInt64("PRAGMA application_id");
  if (!app_id.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(options.path,
                     " is not a SQLite database: ", app_id.status().message()));
  }
  LS_ASSIGN_OR_RETURN(int64_t version, db->QueryInt64("PRAGMA user_version"));
  LS_ASSIGN_OR_RETURN(
      int64_t tables,
      db->QueryInt64(
          "SELECT count(*) FROM sqlite_schema WHERE type = 'table'"));
  if (*app_id != kApplicationId && !(*app_id == 0 && tables == 0)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is not a Lockstep database (application_id 0x%08x, expected "
        "0x%08x); refusing to modify it",
        options.path, static_cast<uint32_t>(*app_id),
        static_cast<uint32_t>(kApplicationId)));
  }
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s has schema version %d, newer than the %d this build of Lockstep "
        "knows; use a newer lockstep-coordinator (the file was not changed)",
        options.path, version, kSchemaVersion));
  }
  if (version > target) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s has schema version %d, newer than the requested %d",
                        options.path, version, target));
  }

  LS_RETURN_IF_ERROR(db->Exec("PRAGMA journal_mode = WAL"));
  LS_RETURN_IF_ERROR(
      db->Exec(absl::StrCat("PRAGMA synchronous = ", options.synchronous)));
  LS_RETURN_IF_ERROR(db->Exec("PRAGMA foreign_keys = ON"));
  LS_RETURN_IF_ERROR(Migrate(db.get(), static_cast<int>(version), target));

  auto store =
      std::unique_ptr<Store>(new Store(options, std::move(db), target));
  if (target == kSchemaVersion) {
    absl::MutexLock lock(&store->mu_);
    LS_RETURN_IF_ERROR(store->PrepareStatements());
  }
  return store;
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

#define LS_REQUIRE_CURRENT_SCHEMA()                                      \
  if (stmts_.empty()) {                                                  \
    return absl::FailedPreconditionError(                                \
        "store opened at an older schema version (migrate_to_version)"); \
  }

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
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  Statement* s = stmts_[kGetWorker].get();
  ScopedReset reset(s);
  LS_RETURN_IF_ERROR(s->BindText(1, worker_id));
  LS_ASSIGN_OR_RETURN(bool row, s->Step());
  if (!row) return std::optional<Worker>();
  LS_ASSIGN_OR_RETURN(Worker w, WorkerFromRow(*s));
  return std::optional<Worker>(std::move(w));
}

absl::StatusOr<std::vector<Worker>> Store::ListWorkers() {
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  Statement* s = stmts_[kListWorkers].get();
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
  absl::MutexLock lock(&mu_);
  LS_REQUIRE_CURRENT_SCHEMA();
  Statement* s = stmts_[kListEvents].get();
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

}  // namespace lockstep::store
