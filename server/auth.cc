#include "server/auth.h"

#include <openssl/rand.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/logging.h"
#include "common/sha256.h"

namespace lockstep::server {
namespace {

constexpr char kTokenPrefix[] = "lst_";
constexpr size_t kTokenRandomBytes = 32;
// Longer headers are refused before hashing.
constexpr size_t kMaxAuthorizationBytes = 512;

absl::Status Unauthenticated(absl::string_view why) {
  return absl::UnauthenticatedError(
      absl::StrCat(why,
                   "; send `authorization: Bearer TOKEN` (lockstep --token, "
                   "--token_file or LOCKSTEP_TOKEN)"));
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kViewer:
      return "viewer";
    case Role::kSubmitter:
      return "submitter";
    case Role::kAdmin:
      return "admin";
    case Role::kWorker:
      return "worker";
  }
  return "unknown";
}

absl::StatusOr<Role> ParseRole(absl::string_view name,
                               absl::string_view field) {
  for (Role r :
       {Role::kViewer, Role::kSubmitter, Role::kAdmin, Role::kWorker}) {
    if (name == RoleName(r)) return r;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": \"", name,
                   "\" is not a role (viewer, submitter, admin, worker)"));
}

bool RoleAllows(Role held, Role needed) {
  if (held == Role::kWorker || needed == Role::kWorker) return held == needed;
  return static_cast<int>(held) >= static_cast<int>(needed);
}

absl::StatusOr<std::string> NewToken() {
  unsigned char bytes[kTokenRandomBytes];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return absl::InternalError("RAND_bytes failed: no token created");
  }
  return absl::StrCat(
      kTokenPrefix, absl::BytesToHexString(absl::string_view(
                        reinterpret_cast<const char*>(bytes), sizeof(bytes))));
}

std::string TokenSha256Hex(absl::string_view token) { return Sha256Hex(token); }

absl::StatusOr<Principal> Authorizer::FromToken(absl::string_view authorization,
                                                Role needed) const {
  if (authorization.empty()) return Unauthenticated("no bearer token");
  if (authorization.size() > kMaxAuthorizationBytes) {
    return Unauthenticated(absl::StrCat("authorization: longer than ",
                                        kMaxAuthorizationBytes, " bytes"));
  }
  absl::string_view token = authorization;
  if (!absl::ConsumePrefix(&token, "Bearer ") &&
      !absl::ConsumePrefix(&token, "bearer ")) {
    return Unauthenticated("authorization: not of the form \"Bearer TOKEN\"");
  }
  token = absl::StripAsciiWhitespace(token);
  absl::StatusOr<std::optional<store::TokenRecord>> record =
      store_->FindTokenByHash(TokenSha256Hex(token));
  if (!record.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot check the bearer token: ", record.status().message()));
  }
  if (!record->has_value()) return Unauthenticated("unknown bearer token");
  if ((*record)->revoked_unix_ms != 0) {
    return Unauthenticated(
        absl::StrCat("bearer token \"", (*record)->name, "\" was revoked"));
  }
  absl::StatusOr<Role> role = ParseRole((*record)->role);
  if (!role.ok()) {
    return absl::PermissionDeniedError(absl::StrCat("token \"", (*record)->name,
                                                    "\" has an unknown role \"",
                                                    (*record)->role, "\""));
  }
  if (!RoleAllows(*role, needed)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "token \"", (*record)->name, "\" has role ", RoleName(*role),
        "; this call needs ",
        needed == Role::kWorker ? "worker"
                                : absl::StrCat(RoleName(needed), " or above")));
  }
  Principal p;
  p.name = (*record)->name;
  p.role = *role;
  return p;
}

absl::StatusOr<Principal> Authorizer::AuthorizeHeader(
    absl::string_view authorization, Role needed) const {
  if (!options_.require_tokens) return Principal();
  return FromToken(authorization, needed);
}

absl::StatusOr<Principal> Authorizer::Authorize(
    const grpc::ServerContextBase& context, Role needed) const {
  if (!options_.require_tokens) return Principal();
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return FromToken("", needed);
  return FromToken(absl::string_view(it->second.data(), it->second.size()),
                   needed);
}

absl::StatusOr<Principal> Authorizer::AuthorizeWorker(
    const grpc::ServerContextBase& context) const {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  std::vector<std::string> identities;
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    for (const grpc::string_ref& id : auth->GetPeerIdentity()) {
      identities.emplace_back(id.data(), id.size());
    }
  }
  if (!identities.empty()) {
    Principal p;
    p.name = absl::StrCat("cert:", identities.front());
    p.role = Role::kWorker;
    p.certificate_identities = std::move(identities);
    return p;
  }
  if (options_.require_worker_certificates) {
    return absl::UnauthenticatedError(
        "workers must present a client certificate signed by the "
        "coordinator's --worker_ca (lockstep-worker --cert, --key)");
  }
  if (!options_.require_tokens) return Principal();
  absl::StatusOr<Principal> p = Authorize(context, Role::kWorker);
  return p;
}

void Authorizer::LogAdminAction(const Principal& who, const std::string& action,
                                const std::string& target,
                                const std::string& detail,
                                const absl::Status& outcome) const {
  store::AdminLogEntry e;
  e.at_unix_ms = clock_();
  e.principal = LogName(who);
  e.action = action;
  e.target = target;
  e.detail = detail;
  e.outcome = outcome.ok() ? "ok" : outcome.ToString();
  if (absl::Status s = store_->AppendAdminLog(e); !s.ok()) {
    LS_LOG(WARNING) << "admin log: cannot record " << action << " by "
                    << e.principal << ": " << s;
  }
}

absl::Status CheckWorkerName(const Principal& worker,
                             const std::string& hello_name) {
  if (worker.certificate_identities.empty()) {
    // A worker token names one worker: the token is its identity.
    if (worker.role == Role::kWorker && !worker.name.empty() &&
        hello_name != worker.name) {
      return absl::PermissionDeniedError(absl::StrCat(
          "hello.name: \"", hello_name, "\" is not this worker token's name \"",
          worker.name,
          "\"; a worker token names one worker: create one per worker "
          "(lockstep-coordinator tokens create --name=NAME --role=worker) "
          "and start the worker with --name=NAME"));
    }
    return absl::OkStatus();
  }
  if (std::find(worker.certificate_identities.begin(),
                worker.certificate_identities.end(),
                hello_name) != worker.certificate_identities.end()) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "hello.name: \"", hello_name,
      "\" is not this worker's certificate identity (",
      absl::StrJoin(worker.certificate_identities, ", "),
      "); a worker with a certificate must use its CN or a SAN as --name"));
}

std::string LogName(const Principal& p) {
  return p.name.empty() ? "anonymous" : p.name;
}

}  // namespace lockstep::server
