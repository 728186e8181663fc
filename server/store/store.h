// The coordinator's durable state in one SQLite file.
//
// Open() checks that the file is a Lockstep database (PRAGMA application_id),
// applies the ordered migrations that the file lacks, each in its own
// transaction, and refuses a file whose schema version is newer than this
// build knows. The database runs in WAL mode with synchronous=FULL by
// default, so every call that returned OK is durable (survives a crash of
// the coordinator process and of the machine).
//
// Thread-safe: every public method takes the store's mutex.
#ifndef LOCKSTEP_SERVER_STORE_STORE_H_
#define LOCKSTEP_SERVER_STORE_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lockstep/v1/worker.pb.h"
#include "server/store/sqlite.h"

namespace lockstep::store {

// 'LKSP' — identifies Lockstep databases (PRAGMA application_id).
inline constexpr int32_t kApplicationId = 0x4c4b5350;

// The schema version this build writes. Migrations 1..kSchemaVersion are
// listed in store.cc, in order.
inline constexpr int kSchemaVersion = 2;

struct StoreOptions {
  // Database file; ":memory:" for tests. Default: ./lockstep.db.
  std::string path = "lockstep.db";
  // Create the file if it does not exist. Default: true.
  bool create = true;
  // SQLite busy timeout when another process holds the lock. Default 5 s.
  int busy_timeout_ms = 5000;
  // PRAGMA synchronous: "FULL" (default; durable across power loss) or
  // "NORMAL" (durable across process crashes only; faster commits).
  std::string synchronous = "FULL";
  // Apply migrations only up to this version (0 = kSchemaVersion). For
  // tests and tools that need an older schema; the coordinator uses 0.
  int migrate_to_version = 0;
};

// A worker event in the per-worker health history.
struct WorkerEvent {
  int64_t event_id = 0;
  std::string worker_id;
  int64_t at_unix_ms = 0;
  std::string kind;    // "connected", "disconnected", "admin_state", ...
  std::string detail;  // Human-readable.
};

class Store {
 public:
  static absl::StatusOr<std::unique_ptr<Store>> Open(
      const StoreOptions& options);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // The schema version of the open file.
  int schema_version() const;
  const std::string& path() const { return options_.path; }

  // PRAGMA integrity_check; OK when the file is sound, DATA_LOSS otherwise.
  absl::Status CheckIntegrity();

  // Inserts or updates a worker: identity, labels and profile from
  // `worker`, first seen kept from the first insert, last seen updated.
  // Admin state is not touched (see SetWorkerAdminState).
  absl::Status UpsertWorker(const lockstep::v1::Worker& worker,
                            int64_t now_unix_ms);
  // The stored worker (state fields other than admin state are unset), or
  // nullopt.
  absl::StatusOr<std::optional<lockstep::v1::Worker>> GetWorker(
      const std::string& worker_id);
  // Every stored worker, ordered by name.
  absl::StatusOr<std::vector<lockstep::v1::Worker>> ListWorkers();
  // NOT_FOUND for an unknown worker.
  absl::Status SetWorkerAdminState(const std::string& worker_id,
                                   lockstep::v1::WorkerAdminState state,
                                   const std::string& reason,
                                   int64_t now_unix_ms);

  absl::Status AppendWorkerEvent(const std::string& worker_id,
                                 int64_t at_unix_ms, const std::string& kind,
                                 const std::string& detail);
  // Newest first, at most `limit`.
  absl::StatusOr<std::vector<WorkerEvent>> ListWorkerEvents(
      const std::string& worker_id, int limit);

 private:
  Store(StoreOptions options, std::unique_ptr<Database> db, int version);
  absl::Status PrepareStatements() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AppendWorkerEventLocked(const std::string& worker_id,
                                       int64_t at_unix_ms,
                                       const std::string& kind,
                                       const std::string& detail)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const StoreOptions options_;
  mutable absl::Mutex mu_;
  std::unique_ptr<Database> db_ ABSL_GUARDED_BY(mu_);
  const int version_;
  // Prepared statements, indexed by the Slot enum in store.cc.
  std::vector<std::unique_ptr<Statement>> stmts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep::store

#endif  // LOCKSTEP_SERVER_STORE_STORE_H_
