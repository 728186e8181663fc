// Who may call what: bearer tokens with roles, worker client certificates,
// and the admin log.
//
// Roles: viewer < submitter < admin (each may do what the ones before it
// may); worker stands apart and only opens WorkerGateway streams. Tokens are
// random strings ("lst_" + 64 hex digits) of which the store keeps only the
// SHA-256, looked up on every call, so a revocation takes effect on the next
// call.
//
// Thread-safe.
#ifndef LOCKSTEP_SERVER_AUTH_H_
#define LOCKSTEP_SERVER_AUTH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "server/store/store.h"
#include "server/worker_registry.h"

namespace lockstep::server {

enum class Role { kViewer = 1, kSubmitter = 2, kAdmin = 3, kWorker = 4 };

// "viewer", "submitter", "admin", "worker".
const char* RoleName(Role role);
// INVALID_ARGUMENT naming `field` and the roles for anything else.
absl::StatusOr<Role> ParseRole(absl::string_view name,
                               absl::string_view field = "role");
// Whether a caller holding `held` may do what needs `needed`.
bool RoleAllows(Role held, Role needed);

// A new random token: "lst_" + 64 lowercase hex digits (32 bytes from
// OpenSSL's RAND_bytes).
absl::StatusOr<std::string> NewToken();
// SHA-256 of `token`, lowercase hex: what the store keeps.
std::string TokenSha256Hex(absl::string_view token);

struct Principal {
  // A token's name, "cert:<identity>" for a worker known by its
  // certificate, or "" when tokens are off.
  std::string name;
  Role role = Role::kAdmin;
  // A worker's certificate identities (its CN and SANs); empty when it
  // authenticated with a token or tokens are off.
  std::vector<std::string> certificate_identities;
};

struct AuthOptions {
  // Every call needs a bearer token whose role allows it. Default false:
  // every caller is an anonymous admin (loopback development mode).
  bool require_tokens = false;
  // WorkerGateway streams need a client certificate verified against the
  // worker CA; a token alone is not enough. Default false.
  bool require_worker_certificates = false;
};

class Authorizer {
 public:
  // `store` must outlive the authorizer.
  Authorizer(store::Store* store, AuthOptions options, Clock clock)
      : store_(store), options_(options), clock_(std::move(clock)) {}

  const AuthOptions& options() const { return options_; }

  // The caller of a public RPC when its token grants `needed`:
  // UNAUTHENTICATED without a token or with an unknown or revoked one,
  // PERMISSION_DENIED naming the role needed and the role held.
  absl::StatusOr<Principal> Authorize(const grpc::ServerContextBase& context,
                                      Role needed) const;
  // The same for an HTTP request's Authorization header value ("" when
  // absent).
  absl::StatusOr<Principal> AuthorizeHeader(absl::string_view authorization,
                                            Role needed) const;
  // The caller of WorkerGateway.Connect: a verified client certificate
  // (required with require_worker_certificates; its identities then bind
  // the worker's name), else a token with the worker role.
  absl::StatusOr<Principal> AuthorizeWorker(
      const grpc::ServerContextBase& context) const;

  // Appends an admin action to the store's admin log; `outcome` is the
  // action's result. Failures to log are logged, not returned.
  void LogAdminAction(const Principal& who, const std::string& action,
                      const std::string& target, const std::string& detail,
                      const absl::Status& outcome) const;

 private:
  absl::StatusOr<Principal> FromToken(absl::string_view authorization,
                                      Role needed) const;

  store::Store* const store_;
  const AuthOptions options_;
  const Clock clock_;
};

// PERMISSION_DENIED unless `hello_name` is one of the certificate
// identities of `worker` (always OK for a worker without them).
absl::Status CheckWorkerName(const Principal& worker,
                             const std::string& hello_name);

// The admin-log principal of `p`: its name, or "anonymous" when tokens are
// off.
std::string LogName(const Principal& p);

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_AUTH_H_
