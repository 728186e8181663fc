#include "server/store/maintenance.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "server/store/sqlite.h"
#include "server/store/store.h"

namespace lockstep::store {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Opens an existing database for reading only: no file is created, and
// closing the connection does not checkpoint the WAL into the file.
absl::StatusOr<std::unique_ptr<Database>> OpenExisting(
    const std::string& path) {
  if (!Exists(path)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Database> db,
                      Database::Open(path, /*create=*/false));
  sqlite3_db_config(db->handle(), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  LS_RETURN_IF_ERROR(db->Exec("PRAGMA busy_timeout = 5000"));
  LS_RETURN_IF_ERROR(db->Exec("PRAGMA query_only = 1"));
  return db;
}

// Every row of a one-column PRAGMA, at most `limit`.
absl::StatusOr<std::vector<std::string>> Rows(Database* db,
                                              absl::string_view sql,
                                              int limit) {
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Statement> st, db->Prepare(sql));
  ScopedReset reset(st.get());
  std::vector<std::string> out;
  while (static_cast<int>(out.size()) < limit) {
    LS_ASSIGN_OR_RETURN(bool row, st->Step());
    if (!row) break;
    out.push_back(st->ColumnText(0));
  }
  return out;
}

// The checks of VerifyDatabase; OK carries the summary's details.
absl::StatusOr<std::string> Verify(const std::string& path) {
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenExisting(path));
  LS_ASSIGN_OR_RETURN(int64_t app_id, db->QueryInt64("PRAGMA application_id"));
  if (app_id != kApplicationId) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "not a Lockstep database (application_id 0x%08x, expected 0x%08x)",
        static_cast<uint32_t>(app_id), static_cast<uint32_t>(kApplicationId)));
  }
  LS_ASSIGN_OR_RETURN(int64_t version, db->QueryInt64("PRAGMA user_version"));
  if (version < 1 || version > kSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrFormat("schema version %d is not one this build knows (1..%d)",
                        version, kSchemaVersion));
  }
  LS_ASSIGN_OR_RETURN(std::vector<std::string> integrity,
                      Rows(db.get(), "PRAGMA integrity_check(10)", 10));
  if (integrity.empty() || integrity[0] != "ok") {
    return absl::DataLossError(
        absl::StrCat("integrity_check: ", absl::StrJoin(integrity, "; ")));
  }
  {
    LS_ASSIGN_OR_RETURN(std::unique_ptr<Statement> st,
                        db->Prepare("PRAGMA foreign_key_check"));
    ScopedReset reset(st.get());
    LS_ASSIGN_OR_RETURN(bool row, st->Step());
    if (row) {
      return absl::DataLossError(absl::StrFormat(
          "foreign_key_check: a row of %s (rowid %d) refers to a missing row "
          "of %s",
          st->ColumnText(0), st->ColumnInt64(1), st->ColumnText(2)));
    }
  }
  LS_RETURN_IF_ERROR(VerifySchema(db.get(), static_cast<int>(version)));
  LS_ASSIGN_OR_RETURN(int64_t pages, db->QueryInt64("PRAGMA page_count"));
  LS_ASSIGN_OR_RETURN(int64_t page_size, db->QueryInt64("PRAGMA page_size"));
  std::string counts;
  if (version >= 3) {
    LS_ASSIGN_OR_RETURN(int64_t jobs,
                        db->QueryInt64("SELECT count(*) FROM jobs"));
    LS_ASSIGN_OR_RETURN(int64_t runs,
                        db->QueryInt64("SELECT count(*) FROM runs"));
    LS_ASSIGN_OR_RETURN(int64_t steps,
                        db->QueryInt64("SELECT count(*) FROM run_steps"));
    counts = absl::StrFormat(", %d jobs, %d runs, %d stored steps", jobs, runs,
                             steps);
  }
  return absl::StrFormat("schema version %d%s, %d bytes", version, counts,
                         pages * page_size);
}

// Flushes `path` to stable storage.
absl::Status Sync(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return absl::InternalError(absl::StrCat("fsync ", path));
  return absl::OkStatus();
}

}  // namespace

VerifyResult VerifyDatabase(const std::string& path) {
  absl::StatusOr<std::string> details = Verify(path);
  VerifyResult result;
  result.ok = details.ok();
  result.summary = details.ok() ? absl::StrCat("OK: ", path, ": ", *details)
                                : absl::StrCat("FAILED: ", path, ": ",
                                               details.status().message());
  // One line, whatever SQLite's messages hold.
  absl::StrReplaceAll({{"\n", "; "}}, &result.summary);
  return result;
}

absl::StatusOr<BackupResult> BackupDatabase(const std::string& db_path,
                                            const std::string& out_path) {
  if (out_path.empty()) {
    return absl::InvalidArgumentError("out: must not be empty");
  }
  if (Exists(out_path)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "out: ", out_path, " exists; a backup never overwrites a file"));
  }
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Database> src, OpenExisting(db_path));
  LS_ASSIGN_OR_RETURN(int64_t app_id, src->QueryInt64("PRAGMA application_id"));
  if (app_id != kApplicationId) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s is not a Lockstep database (application_id 0x%08x)",
                        db_path, static_cast<uint32_t>(app_id)));
  }
  const std::string tmp = out_path + ".tmp";
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    std::remove((tmp + suffix).c_str());
  }
  BackupResult result;
  {
    LS_ASSIGN_OR_RETURN(std::unique_ptr<Database> dst,
                        Database::Open(tmp, /*create=*/true));
    sqlite3_backup* backup =
        sqlite3_backup_init(dst->handle(), "main", src->handle(), "main");
    if (backup == nullptr) {
      return SqliteError(dst->handle(), sqlite3_errcode(dst->handle()),
                         "backup init");
    }
    // One step for the whole file: one read transaction on the source, so
    // the copy is one consistent snapshot. Under WAL the coordinator's
    // commits go on meanwhile; a busy source is retried.
    int rc = SQLITE_OK;
    for (int tries = 0; tries < 100; ++tries) {
      rc = sqlite3_backup_step(backup, -1);
      if (rc != SQLITE_BUSY && rc != SQLITE_LOCKED) break;
      sqlite3_sleep(50);
    }
    result.pages = sqlite3_backup_pagecount(backup);
    sqlite3_backup_finish(backup);
    if (rc != SQLITE_DONE) {
      std::remove(tmp.c_str());
      return SqliteError(dst->handle(), rc, "backup");
    }
    // A standalone copy: no WAL beside it.
    absl::Status s = dst->Exec("PRAGMA journal_mode = DELETE");
    if (s.ok()) {
      absl::StatusOr<std::string> check =
          dst->QueryText("PRAGMA integrity_check");
      s = !check.ok()      ? check.status()
          : *check != "ok" ? absl::DataLossError(absl::StrCat(
                                 "the copy fails integrity_check: ", *check))
                           : absl::OkStatus();
    }
    if (s.ok()) {
      absl::StatusOr<int64_t> id = dst->QueryInt64("PRAGMA application_id");
      if (!id.ok())
        s = id.status();
      else if (*id != kApplicationId)
        s = absl::DataLossError("the copy lost the Lockstep application_id");
    }
    if (s.ok()) {
      absl::StatusOr<int64_t> size = dst->QueryInt64("PRAGMA page_size");
      if (size.ok()) result.bytes = result.pages * *size;
    }
    if (!s.ok()) {
      dst.reset();
      std::remove(tmp.c_str());
      return s;
    }
  }
  LS_RETURN_IF_ERROR(Sync(tmp));
  if (Exists(out_path)) {
    std::remove(tmp.c_str());
    return absl::AlreadyExistsError(absl::StrCat(
        "out: ", out_path, " appeared during the backup; not overwritten"));
  }
  if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", out_path));
  }
  return result;
}

}  // namespace lockstep::store
