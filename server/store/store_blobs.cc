// Store: blob rows and the jobs that reference them (schema version 7).
// Rare calls, so the statements are prepared per call instead of in the
// slot table.
#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/store/store.h"

namespace lockstep::store {
namespace {

namespace v1 = ::lockstep::v1;

constexpr char kBlobColumns[] =
    "b.digest, b.size, b.created_ms, b.uploaded_by, b.last_referenced_ms, "
    "(SELECT count(*) FROM job_blobs jb JOIN jobs j ON j.job_id = jb.job_id "
    "WHERE jb.digest = b.digest AND j.state IN (1, 2))";

BlobRecord BlobFromRow(const Statement& s) {
  BlobRecord b;
  b.digest = s.ColumnText(0);
  b.size = s.ColumnInt64(1);
  b.created_unix_ms = s.ColumnInt64(2);
  b.uploaded_by = s.ColumnText(3);
  b.last_referenced_unix_ms = s.ColumnInt64(4);
  b.referencing_jobs = s.ColumnInt64(5);
  return b;
}

absl::Status CurrentBlobSchema(bool prepared) {
  if (prepared) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "store opened at an older schema version (migrate_to_version)");
}

}  // namespace

absl::StatusOr<bool> Store::InsertBlob(const BlobRecord& blob) {
  absl::MutexLock lock(&mu_);
  LS_RETURN_IF_ERROR(CurrentBlobSchema(!stmts_.empty()));
  LS_ASSIGN_OR_RETURN(
      std::unique_ptr<Statement> s,
      db_->Prepare("INSERT INTO blobs (digest, size, created_ms, uploaded_by, "
                   "last_referenced_ms) VALUES (?, ?, ?, ?, ?) "
                   "ON CONFLICT(digest) DO NOTHING"));
  LS_RETURN_IF_ERROR(s->BindText(1, blob.digest));
  LS_RETURN_IF_ERROR(s->BindInt64(2, blob.size));
  LS_RETURN_IF_ERROR(s->BindInt64(3, blob.created_unix_ms));
  LS_RETURN_IF_ERROR(s->BindText(4, blob.uploaded_by));
  LS_RETURN_IF_ERROR(s->BindInt64(5, blob.created_unix_ms));
  LS_RETURN_IF_ERROR(NameFull(s->Run()));
  return sqlite3_changes(db_->handle()) == 1;
}

absl::StatusOr<std::optional<BlobRecord>> Store::GetBlob(
    const std::string& digest) {
  absl::MutexLock lock(&mu_);
  LS_RETURN_IF_ERROR(CurrentBlobSchema(!stmts_.empty()));
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Statement> s,
                      db_->Prepare(absl::StrCat("SELECT ", kBlobColumns,
                                                " FROM blobs b WHERE "
                                                "b.digest = ?")));
  LS_RETURN_IF_ERROR(s->BindText(1, digest));
  LS_ASSIGN_OR_RETURN(bool row, s->Step());
  if (!row) return std::optional<BlobRecord>();
  return std::optional<BlobRecord>(BlobFromRow(*s));
}

absl::StatusOr<std::vector<BlobRecord>> Store::ListBlobs() {
  absl::MutexLock lock(&mu_);
  LS_RETURN_IF_ERROR(CurrentBlobSchema(!stmts_.empty()));
  LS_ASSIGN_OR_RETURN(
      std::unique_ptr<Statement> s,
      db_->Prepare(absl::StrCat("SELECT ", kBlobColumns,
                                " FROM blobs b ORDER BY b.digest")));
  std::vector<BlobRecord> out;
  while (true) {
    LS_ASSIGN_OR_RETURN(bool row, s->Step());
    if (!row) break;
    out.push_back(BlobFromRow(*s));
  }
  return out;
}

absl::StatusOr<int64_t> Store::BlobBytesOf(const std::string& uploaded_by) {
  absl::MutexLock lock(&mu_);
  LS_RETURN_IF_ERROR(CurrentBlobSchema(!stmts_.empty()));
  LS_ASSIGN_OR_RETURN(
      std::unique_ptr<Statement> s,
      db_->Prepare("SELECT coalesce(sum(size), 0) FROM blobs WHERE "
                   "uploaded_by = ?"));
  LS_RETURN_IF_ERROR(s->BindText(1, uploaded_by));
  LS_ASSIGN_OR_RETURN(bool row, s->Step());
  return row ? s->ColumnInt64(0) : 0;
}

absl::StatusOr<int64_t> Store::TotalBlobBytes() {
  absl::MutexLock lock(&mu_);
  LS_RETURN_IF_ERROR(CurrentBlobSchema(!stmts_.empty()));
  return db_->QueryInt64("SELECT coalesce(sum(size), 0) FROM blobs");
}

absl::StatusOr<std::vector<BlobRecord>> Store::DeleteUnreferencedBlobs(
    int64_t cutoff_unix_ms) {
  absl::MutexLock lock(&mu_);
  LS_RETURN_IF_ERROR(CurrentBlobSchema(!stmts_.empty()));
  Transaction tx(db_.get());
  LS_RETURN_IF_ERROR(tx.begin_status());
  std::vector<BlobRecord> doomed;
  {
    LS_ASSIGN_OR_RETURN(
        std::unique_ptr<Statement> s,
        db_->Prepare(absl::StrCat("SELECT ", kBlobColumns,
                                  " FROM blobs b WHERE b.last_referenced_ms < "
                                  "? ORDER BY b.digest")));
    LS_RETURN_IF_ERROR(s->BindInt64(1, cutoff_unix_ms));
    while (true) {
      LS_ASSIGN_OR_RETURN(bool row, s->Step());
      if (!row) break;
      BlobRecord b = BlobFromRow(*s);
      if (b.referencing_jobs == 0) doomed.push_back(std::move(b));
    }
  }
  for (const BlobRecord& b : doomed) {
    for (const char* sql : {"DELETE FROM job_blobs WHERE digest = ?",
                            "DELETE FROM blobs WHERE digest = ?"}) {
      LS_ASSIGN_OR_RETURN(std::unique_ptr<Statement> d, db_->Prepare(sql));
      LS_RETURN_IF_ERROR(d->BindText(1, b.digest));
      LS_RETURN_IF_ERROR(d->Run());
    }
  }
  LS_RETURN_IF_ERROR(tx.Commit());
  return doomed;
}

absl::Status Store::ReferenceBlobLocked(const v1::Job& job) {
  const std::string& digest = job.spec().model().parameters_digest();
  if (digest.empty()) return absl::OkStatus();
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Statement> touch,
                      db_->Prepare("UPDATE blobs SET last_referenced_ms = max("
                                   "last_referenced_ms, ?) WHERE digest = ?"));
  LS_RETURN_IF_ERROR(touch->BindInt64(1, job.created_unix_ms()));
  LS_RETURN_IF_ERROR(touch->BindText(2, digest));
  LS_RETURN_IF_ERROR(touch->Run());
  if (sqlite3_changes(db_->handle()) != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "spec.model.parameters_digest: the coordinator has no blob \"", digest,
        "\"; upload it first (lockstep submit uploads the --params file)"));
  }
  LS_ASSIGN_OR_RETURN(
      std::unique_ptr<Statement> ref,
      db_->Prepare("INSERT INTO job_blobs (job_id, digest) VALUES (?, ?)"));
  LS_RETURN_IF_ERROR(ref->BindText(1, job.job_id()));
  LS_RETURN_IF_ERROR(ref->BindText(2, digest));
  return ref->Run();
}

absl::Status Store::TouchJobBlobsLocked(const v1::Job& job) {
  if (job.spec().model().parameters_digest().empty()) return absl::OkStatus();
  LS_ASSIGN_OR_RETURN(
      std::unique_ptr<Statement> s,
      db_->Prepare("UPDATE blobs SET last_referenced_ms = max("
                   "last_referenced_ms, ?) WHERE digest IN (SELECT digest "
                   "FROM job_blobs WHERE job_id = ?)"));
  LS_RETURN_IF_ERROR(s->BindInt64(1, job.finished_unix_ms()));
  LS_RETURN_IF_ERROR(s->BindText(2, job.job_id()));
  return s->Run();
}

}  // namespace lockstep::store
