#include "common/transport.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace lockstep {
namespace {

// Larger "PEM files" are refused (a chain of a few certificates is < 16 KiB).
constexpr size_t kMaxPemBytes = 1 << 20;

absl::StatusOr<std::string> ReadSmallFile(const std::string& path,
                                          absl::string_view flag) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot read ", path));
  }
  std::ostringstream out;
  out << f.rdbuf();
  std::string text = out.str();
  if (text.size() > kMaxPemBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": ", path, " is larger than ", kMaxPemBytes, " bytes"));
  }
  return text;
}

}  // namespace

absl::StatusOr<std::string> ReadPemFile(const std::string& path,
                                        absl::string_view flag) {
  absl::StatusOr<std::string> text = ReadSmallFile(path, flag);
  if (!text.ok()) return text.status();
  if (!absl::StrContains(*text, "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path, " is not a PEM file"));
  }
  return text;
}

absl::StatusOr<std::string> ResolveToken(const std::string& token_flag,
                                         const std::string& token_file_flag) {
  if (!token_flag.empty() && !token_file_flag.empty()) {
    return absl::InvalidArgumentError(
        "--token, --token_file: set at most one of them");
  }
  if (!token_flag.empty()) return token_flag;
  if (!token_file_flag.empty()) {
    absl::StatusOr<std::string> text =
        ReadSmallFile(token_file_flag, "--token_file");
    if (!text.ok()) return text.status();
    std::string token(absl::StripAsciiWhitespace(
        std::vector<absl::string_view>(absl::StrSplit(*text, '\n'))[0]));
    if (token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token_file: ", token_file_flag, " is empty"));
    }
    return token;
  }
  const char* env = std::getenv(kTokenEnvVar);
  return env == nullptr ? std::string() : std::string(env);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const ChannelSecurity& s) {
  if (s.cert_file.empty() != s.key_file.empty()) {
    return absl::InvalidArgumentError("--cert, --key: set both or neither");
  }
  if (s.ca_file.empty()) {
    if (!s.cert_file.empty()) {
      return absl::InvalidArgumentError(
          "--cert: a client certificate needs TLS; set --ca too");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  absl::StatusOr<std::string> ca = ReadPemFile(s.ca_file, "--ca");
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *ca;
  if (!s.cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadPemFile(s.cert_file, "--cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPemFile(s.key_file, "--key");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::SslCredentials(ssl);
  if (s.token.empty()) return creds;
  return grpc::CompositeChannelCredentials(
      creds, grpc::AccessTokenCredentials(s.token));
}

void AttachToken(const ChannelSecurity& s, grpc::ClientContext* ctx) {
  if (s.token.empty() || !s.ca_file.empty()) return;
  ctx->AddMetadata("authorization", absl::StrCat("Bearer ", s.token));
}

bool IsLoopbackAddress(absl::string_view address) {
  absl::string_view host = address;
  if (absl::ConsumePrefix(&host, "[")) {
    host = host.substr(0, host.find(']'));
  } else {
    const size_t colon = host.rfind(':');
    if (colon != absl::string_view::npos) host = host.substr(0, colon);
  }
  if (host == "localhost" || host == "::1") return true;
  std::vector<absl::string_view> parts = absl::StrSplit(host, '.');
  int first = 0;
  return parts.size() == 4 && absl::SimpleAtoi(parts[0], &first) &&
         first == 127;
}

}  // namespace lockstep
