#include "server/store/sqlite.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep::store {

absl::Status SqliteError(sqlite3* db, int rc, absl::string_view what) {
  const char* msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  const std::string text =
      absl::StrCat("sqlite: ", what, ": ", msg, " (", sqlite3_errstr(rc), ")");
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(text);
    case SQLITE_CONSTRAINT:
      return absl::AlreadyExistsError(text);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(text);
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return absl::ResourceExhaustedError(text);
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
      return absl::PermissionDeniedError(text);
    default:
      return absl::InternalError(text);
  }
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

absl::Status Statement::BindInt64(int index, int64_t value) {
  const int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK) return SqliteError(db_, rc, "bind");
  return absl::OkStatus();
}

absl::Status Statement::BindText(int index, absl::string_view value) {
  const int rc = sqlite3_bind_text64(stmt_, index, value.data(), value.size(),
                                     SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK) return SqliteError(db_, rc, "bind");
  return absl::OkStatus();
}

absl::Status Statement::BindBlob(int index, absl::string_view value) {
  const int rc = sqlite3_bind_blob64(stmt_, index, value.data(), value.size(),
                                     SQLITE_TRANSIENT);
  if (rc != SQLITE_OK) return SqliteError(db_, rc, "bind");
  return absl::OkStatus();
}

absl::Status Statement::BindNull(int index) {
  const int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK) return SqliteError(db_, rc, "bind");
  return absl::OkStatus();
}

absl::StatusOr<bool> Statement::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteError(db_, rc, sqlite3_sql(stmt_));
}

absl::Status Statement::Run() {
  ScopedReset reset(this);
  absl::StatusOr<bool> row = Step();
  if (!row.ok()) return row.status();
  return absl::OkStatus();
}

int64_t Statement::ColumnInt64(int column) const {
  return sqlite3_column_int64(stmt_, column);
}

std::string Statement::ColumnText(int column) const {
  const unsigned char* p = sqlite3_column_text(stmt_, column);
  const int n = sqlite3_column_bytes(stmt_, column);
  return p ? std::string(reinterpret_cast<const char*>(p), n) : std::string();
}

std::string Statement::ColumnBlob(int column) const {
  const void* p = sqlite3_column_blob(stmt_, column);
  const int n = sqlite3_column_bytes(stmt_, column);
  return p ? std::string(static_cast<const char*>(p), n) : std::string();
}

bool Statement::ColumnIsNull(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

absl::StatusOr<std::unique_ptr<Database>> Database::Open(
    const std::string& path, bool create) {
  sqlite3* db = nullptr;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
  if (create) flags |= SQLITE_OPEN_CREATE;
  const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status s = SqliteError(db, rc, absl::StrCat("open ", path));
    sqlite3_close(db);
    return s;
  }
  sqlite3_extended_result_codes(db, 1);
  return std::unique_ptr<Database>(new Database(db, path));
}

Database::~Database() { sqlite3_close(db_); }

absl::Status Database::Exec(absl::string_view sql) {
  char* err = nullptr;
  const std::string text(sql);
  const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    absl::Status s = SqliteError(db_, rc, text.substr(0, 120));
    sqlite3_free(err);
    return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Statement>> Database::Prepare(
    absl::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  const int rc =
      sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                         SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    return SqliteError(db_, rc, absl::StrCat("prepare ", sql.substr(0, 120)));
  }
  return std::make_unique<Statement>(db_, stmt);
}

absl::StatusOr<int64_t> Database::QueryInt64(absl::string_view sql) {
  auto stmt = Prepare(sql);
  if (!stmt.ok()) return stmt.status();
  ScopedReset reset(stmt->get());
  auto row = (*stmt)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::NotFoundError(absl::StrCat("no row: ", sql));
  return (*stmt)->ColumnInt64(0);
}

absl::StatusOr<std::string> Database::QueryText(absl::string_view sql) {
  auto stmt = Prepare(sql);
  if (!stmt.ok()) return stmt.status();
  ScopedReset reset(stmt->get());
  auto row = (*stmt)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::NotFoundError(absl::StrCat("no row: ", sql));
  return (*stmt)->ColumnText(0);
}

Transaction::Transaction(Database* db) : db_(db) {
  begin_status_ = db_->Exec("BEGIN IMMEDIATE");
  if (!begin_status_.ok()) done_ = true;
}

Transaction::~Transaction() {
  if (!done_) db_->Exec("ROLLBACK").IgnoreError();
}

absl::Status Transaction::Commit() {
  if (done_) return absl::FailedPreconditionError("transaction not open");
  absl::Status s = db_->Exec("COMMIT");
  if (s.ok()) done_ = true;
  return s;
}

}  // namespace lockstep::store
