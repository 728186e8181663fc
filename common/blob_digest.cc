#include "common/blob_digest.h"

#include <openssl/evp.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/sha256.h"

namespace lockstep {

struct BlobHasher::State {
  EVP_MD_CTX* ctx = nullptr;
};

BlobHasher::BlobHasher() : state_(std::make_unique<State>()) {
  state_->ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr);
}

BlobHasher::~BlobHasher() { EVP_MD_CTX_free(state_->ctx); }

void BlobHasher::Update(absl::string_view bytes) {
  EVP_DigestUpdate(state_->ctx, bytes.data(), bytes.size());
}

std::string BlobHasher::Finish() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(state_->ctx, md, &n);
  return absl::StrCat(kBlobDigestPrefix,
                      absl::BytesToHexString(absl::string_view(
                          reinterpret_cast<const char*>(md), n)));
}

std::string BlobDigest(absl::string_view bytes) {
  return absl::StrCat(kBlobDigestPrefix, Sha256Hex(bytes));
}

absl::Status ValidateBlobDigest(absl::string_view digest,
                                absl::string_view field) {
  absl::string_view hex = digest;
  bool ok = absl::ConsumePrefix(&hex, kBlobDigestPrefix) && hex.size() == 64;
  for (char c : hex) {
    ok = ok && (absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f'));
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": \"", digest.substr(0, 80),
      "\" is not a blob digest (\"sha256:\" + 64 lowercase hex digits)"));
}

}  // namespace lockstep
