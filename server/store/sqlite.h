// Thin RAII layer over SQLite 3.40: a connection, prepared statements that
// are always reset after use, and a transaction guard that rolls back unless
// committed. Errors become absl::Status carrying SQLite's message.
//
// Not thread-safe: one Database is used by one thread at a time (Store
// serialises access with its mutex).
#ifndef LOCKSTEP_SERVER_STORE_SQLITE_H_
#define LOCKSTEP_SERVER_STORE_SQLITE_H_

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep::store {

// A prepared statement. Bind* then Step() until it returns false (no more
// rows); the statement is reset and its bindings cleared by Reset(), which
// the Scoped wrapper calls on every path.
class Statement {
 public:
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Parameters are 1-based, like SQLite's.
  absl::Status BindInt64(int index, int64_t value);
  absl::Status BindText(int index, absl::string_view value);
  absl::Status BindBlob(int index, absl::string_view value);
  absl::Status BindNull(int index);

  // Runs one step. Returns true when a row is available, false when done.
  absl::StatusOr<bool> Step();
  // Runs a statement that returns no rows.
  absl::Status Run();

  int64_t ColumnInt64(int column) const;
  std::string ColumnText(int column) const;
  std::string ColumnBlob(int column) const;
  bool ColumnIsNull(int column) const;

  void Reset();

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_;
};

// Resets a statement when it goes out of scope.
class ScopedReset {
 public:
  explicit ScopedReset(Statement* s) : s_(s) {}
  ~ScopedReset() { s_->Reset(); }
  ScopedReset(const ScopedReset&) = delete;
  ScopedReset& operator=(const ScopedReset&) = delete;

 private:
  Statement* s_;
};

class Database {
 public:
  // Opens (creating if needed) the database at `path`; ":memory:" works.
  static absl::StatusOr<std::unique_ptr<Database>> Open(const std::string& path,
                                                        bool create);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Executes one or more SQL statements without results.
  absl::Status Exec(absl::string_view sql);
  absl::StatusOr<std::unique_ptr<Statement>> Prepare(absl::string_view sql);
  // Runs a query returning a single integer (e.g. a PRAGMA).
  absl::StatusOr<int64_t> QueryInt64(absl::string_view sql);
  absl::StatusOr<std::string> QueryText(absl::string_view sql);

  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }

 private:
  Database(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_;
  std::string path_;
};

// BEGIN IMMEDIATE on construction; ROLLBACK on destruction unless Commit()
// succeeded.
class Transaction {
 public:
  explicit Transaction(Database* db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  // Status of BEGIN; check before doing work.
  const absl::Status& begin_status() const { return begin_status_; }
  absl::Status Commit();

 private:
  Database* db_;
  absl::Status begin_status_;
  bool done_ = false;
};

// Converts an SQLite result code + the connection's message to a Status.
absl::Status SqliteError(sqlite3* db, int rc, absl::string_view what);

}  // namespace lockstep::store

#endif  // LOCKSTEP_SERVER_STORE_SQLITE_H_
