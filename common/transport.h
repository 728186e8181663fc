// Transport security shared by the coordinator, the worker and the CLI:
// PEM files, TLS channel credentials, bearer tokens, loopback addresses.
//
//   ChannelSecurity s;                 // from --ca, --cert, --key, --token
//   auto creds = ChannelCredentials(s);      // TLS when s.ca_file is set
//   grpc::ClientContext ctx; AttachToken(s, &ctx);
#ifndef LOCKSTEP_COMMON_TRANSPORT_H_
#define LOCKSTEP_COMMON_TRANSPORT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace lockstep {

// The environment variable a token is read from when neither --token nor
// --token_file is given.
inline constexpr char kTokenEnvVar[] = "LOCKSTEP_TOKEN";

// The contents of a PEM file; INVALID_ARGUMENT naming `flag` and the path
// when it cannot be read, is empty or is not PEM.
absl::StatusOr<std::string> ReadPemFile(const std::string& path,
                                        absl::string_view flag);

// The bearer token from --token, else --token_file (its first line), else
// $LOCKSTEP_TOKEN; "" when none is set. INVALID_ARGUMENT when both flags
// are set or the file cannot be read or is empty.
absl::StatusOr<std::string> ResolveToken(const std::string& token_flag,
                                         const std::string& token_file_flag);

// How a worker or the CLI reaches the coordinator.
struct ChannelSecurity {
  // PEM CA that signed the coordinator's certificate; set: TLS, empty:
  // plaintext.
  std::string ca_file;
  // PEM client certificate and key (mutual TLS); both or neither; need
  // ca_file.
  std::string cert_file;
  std::string key_file;
  // Bearer token sent on every call; empty: none.
  std::string token;
};

// TLS credentials (with the token as call credentials) when `s.ca_file` is
// set, insecure ones otherwise. INVALID_ARGUMENT naming the flag for a bad
// combination or an unreadable file.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const ChannelSecurity& s);

// On a plaintext channel, adds `authorization: Bearer TOKEN` to `ctx`
// (TLS channels carry the token as call credentials already).
void AttachToken(const ChannelSecurity& s, grpc::ClientContext* ctx);

// Whether `address` ("host:port", "[v6]:port") names a loopback host:
// 127.0.0.0/8, ::1 or "localhost".
bool IsLoopbackAddress(absl::string_view address);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_TRANSPORT_H_
