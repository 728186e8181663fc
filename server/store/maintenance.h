// Offline and online maintenance of a coordinator database:
// `lockstep-coordinator verify-db` and `lockstep-coordinator backup`.
//
// Both open the file without creating it and never write to it (the source
// connection does not checkpoint on close), so they are safe to run next to
// a coordinator that is using the file: SQLite's WAL lets them read a
// consistent snapshot while the coordinator commits.
#ifndef LOCKSTEP_SERVER_STORE_MAINTENANCE_H_
#define LOCKSTEP_SERVER_STORE_MAINTENANCE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lockstep::store {

struct VerifyResult {
  bool ok = false;
  // One line: "OK: ..." with the schema version and row counts, or
  // "FAILED: ..." naming the first problem found.
  std::string summary;
};

// Checks, in order: the file opens and is a Lockstep database
// (application_id), its schema version is one this build knows, PRAGMA
// integrity_check, PRAGMA foreign_key_check, and its tables and indexes
// equal those that the migrations up to its version create.
VerifyResult VerifyDatabase(const std::string& path);

struct BackupResult {
  int64_t pages = 0;
  int64_t bytes = 0;
};

// Copies the database at `db_path` to `out_path` with SQLite's online
// backup API (one consistent snapshot, taken while a coordinator may be
// writing), then checks the copy with PRAGMA integrity_check and the
// Lockstep identity. The copy is written to `out_path`.tmp and renamed once
// verified, so `out_path` is either absent or a complete, checked copy.
// ALREADY_EXISTS when `out_path` exists (a backup never overwrites).
absl::StatusOr<BackupResult> BackupDatabase(const std::string& db_path,
                                            const std::string& out_path);

}  // namespace lockstep::store

#endif  // LOCKSTEP_SERVER_STORE_MAINTENANCE_H_
