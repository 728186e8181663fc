// Store: bearer tokens and the admin log (schema version 6). Rare calls, so
// the statements are prepared per call instead of in the slot table.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/store/store.h"

namespace lockstep::store {
namespace {

constexpr char kTokenColumns[] =
    "name, role, token_sha256, created_ms, coalesce(revoked_ms, 0)";

TokenRecord TokenFromRow(const Statement& s) {
  TokenRecord t;
  t.name = s.ColumnText(0);
  t.role = s.ColumnText(1);
  t.token_sha256 = s.ColumnText(2);
  t.created_unix_ms = s.ColumnInt64(3);
  t.revoked_unix_ms = s.ColumnInt64(4);
  return t;
}

absl::Status CurrentSchema(bool prepared) {
  if (prepared) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "store opened at an older schema version (migrate_to_version)");
}

}  // namespace

absl::Status Store::AppendAdminLogLocked(const AdminLogEntry& e) {
  LS_ASSIGN_OR_RETURN(
      std::unique_ptr<Statement> s,
      db_->Prepare("INSERT INTO admin_log (at_ms, principal, action, target, "
                   "detail, outcome) VALUES (?, ?, ?, ?, ?, ?)"));
  LS_RETURN_IF_ERROR(s->BindInt64(1, e.at_unix_ms));
  LS_RETURN_IF_ERROR(s->BindText(2, e.principal));
  LS_RETURN_IF_ERROR(s->BindText(3, e.action));
  LS_RETURN_IF_ERROR(s->BindText(4, e.target));
  LS_RETURN_IF_ERROR(s->BindText(5, e.detail));
  LS_RETURN_IF_ERROR(s->BindText(6, e.outcome));
  return s->Run();
}

absl::Status Store::AppendAdminLog(const AdminLogEntry& entry) {
  absl::MutexLock lock(&mu_);
  LS_RETURN_IF_ERROR(CurrentSchema(!stmts_.empty()));
  return NameFull(AppendAdminLogLocked(entry));
}

absl::StatusOr<std::vector<AdminLogEntry>> Store::ListAdminLog(int limit) {
  std::vector<AdminLogEntry> out;
  LS_RETURN_IF_ERROR(ReadWith([&](Database* db) -> absl::Status {
    LS_ASSIGN_OR_RETURN(
        std::unique_ptr<Statement> s,
        db->Prepare("SELECT entry_id, at_ms, principal, action, target, "
                    "detail, outcome FROM admin_log ORDER BY entry_id DESC "
                    "LIMIT ?"));
    LS_RETURN_IF_ERROR(s->BindInt64(1, limit));
    while (true) {
      LS_ASSIGN_OR_RETURN(bool row, s->Step());
      if (!row) break;
      AdminLogEntry e;
      e.entry_id = s->ColumnInt64(0);
      e.at_unix_ms = s->ColumnInt64(1);
      e.principal = s->ColumnText(2);
      e.action = s->ColumnText(3);
      e.target = s->ColumnText(4);
      e.detail = s->ColumnText(5);
      e.outcome = s->ColumnText(6);
      out.push_back(std::move(e));
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::Status Store::InsertToken(const TokenRecord& token,
                                const AdminLogEntry& log) {
  absl::MutexLock lock(&mu_);
  LS_RETURN_IF_ERROR(CurrentSchema(!stmts_.empty()));
  Transaction tx(db_.get());
  LS_RETURN_IF_ERROR(tx.begin_status());
  {
    LS_ASSIGN_OR_RETURN(
        std::unique_ptr<Statement> find,
        db_->Prepare("SELECT count(*) FROM api_tokens WHERE name = ?"));
    LS_RETURN_IF_ERROR(find->BindText(1, token.name));
    LS_ASSIGN_OR_RETURN(bool row, find->Step());
    if (row && find->ColumnInt64(0) > 0) {
      return absl::AlreadyExistsError(absl::StrCat(
          "name: a token named \"", token.name,
          "\" exists (names stay taken after revocation); choose another"));
    }
  }
  LS_ASSIGN_OR_RETURN(
      std::unique_ptr<Statement> s,
      db_->Prepare("INSERT INTO api_tokens (name, role, token_sha256, "
                   "created_ms) VALUES (?, ?, ?, ?)"));
  LS_RETURN_IF_ERROR(s->BindText(1, token.name));
  LS_RETURN_IF_ERROR(s->BindText(2, token.role));
  LS_RETURN_IF_ERROR(s->BindText(3, token.token_sha256));
  LS_RETURN_IF_ERROR(s->BindInt64(4, token.created_unix_ms));
  LS_RETURN_IF_ERROR(NameFull(s->Run()));
  LS_RETURN_IF_ERROR(NameFull(AppendAdminLogLocked(log)));
  return NameFull(tx.Commit());
}

// Every authenticated call asks this: on the reader connection it does not
// wait for an ingest group's commit, and it sees every commit made before
// it starts (a token revoked is refused from then on).
absl::StatusOr<std::optional<TokenRecord>> Store::FindTokenByHash(
    const std::string& sha256_hex) {
  std::optional<TokenRecord> out;
  LS_RETURN_IF_ERROR(ReadWith([&](Database* db) -> absl::Status {
    LS_ASSIGN_OR_RETURN(std::unique_ptr<Statement> s,
                        db->Prepare(absl::StrCat("SELECT ", kTokenColumns,
                                                 " FROM api_tokens WHERE "
                                                 "token_sha256 = ?")));
    LS_RETURN_IF_ERROR(s->BindText(1, sha256_hex));
    LS_ASSIGN_OR_RETURN(bool row, s->Step());
    if (row) out = TokenFromRow(*s);
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<TokenRecord>> Store::ListTokens() {
  std::vector<TokenRecord> out;
  LS_RETURN_IF_ERROR(ReadWith([&](Database* db) -> absl::Status {
    LS_ASSIGN_OR_RETURN(
        std::unique_ptr<Statement> s,
        db->Prepare(absl::StrCat("SELECT ", kTokenColumns,
                                 " FROM api_tokens ORDER BY name")));
    while (true) {
      LS_ASSIGN_OR_RETURN(bool row, s->Step());
      if (!row) break;
      out.push_back(TokenFromRow(*s));
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::Status Store::RevokeToken(const std::string& name, int64_t now_unix_ms,
                                const AdminLogEntry& log) {
  absl::MutexLock lock(&mu_);
  LS_RETURN_IF_ERROR(CurrentSchema(!stmts_.empty()));
  Transaction tx(db_.get());
  LS_RETURN_IF_ERROR(tx.begin_status());
  {
    LS_ASSIGN_OR_RETURN(
        std::unique_ptr<Statement> find,
        db_->Prepare("SELECT coalesce(revoked_ms, 0) FROM api_tokens WHERE "
                     "name = ?"));
    LS_RETURN_IF_ERROR(find->BindText(1, name));
    LS_ASSIGN_OR_RETURN(bool row, find->Step());
    if (!row) {
      return absl::NotFoundError(
          absl::StrCat("name: no token named \"", name, "\""));
    }
    if (find->ColumnInt64(0) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("name: token \"", name, "\" is already revoked"));
    }
  }
  LS_ASSIGN_OR_RETURN(
      std::unique_ptr<Statement> s,
      db_->Prepare("UPDATE api_tokens SET revoked_ms = ? WHERE name = ?"));
  LS_RETURN_IF_ERROR(s->BindInt64(1, now_unix_ms));
  LS_RETURN_IF_ERROR(s->BindText(2, name));
  LS_RETURN_IF_ERROR(NameFull(s->Run()));
  LS_RETURN_IF_ERROR(NameFull(AppendAdminLogLocked(log)));
  return NameFull(tx.Commit());
}

}  // namespace lockstep::store
