// Content addresses of blobs (a model's ParameterSet): "sha256:" + the
// SHA-256 of the bytes as 64 lowercase hex digits. Unlike Digest128Hex these
// authenticate content: a worker checks every fetched blob against its
// digest.
#ifndef LOCKSTEP_COMMON_BLOB_DIGEST_H_
#define LOCKSTEP_COMMON_BLOB_DIGEST_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace lockstep {

inline constexpr char kBlobDigestPrefix[] = "sha256:";
// Largest chunk of an upload or a fetch stream.
inline constexpr int64_t kBlobChunkBytes = int64_t{1} << 20;

// "sha256:" + hex SHA-256 of `bytes`.
std::string BlobDigest(absl::string_view bytes);

// INVALID_ARGUMENT naming `field` unless `digest` is "sha256:" + 64
// lowercase hex digits.
absl::Status ValidateBlobDigest(absl::string_view digest,
                                absl::string_view field);

// Incremental SHA-256, for bytes that arrive in chunks.
class BlobHasher {
 public:
  BlobHasher();
  ~BlobHasher();
  BlobHasher(const BlobHasher&) = delete;
  BlobHasher& operator=(const BlobHasher&) = delete;

  void Update(absl::string_view bytes);
  // The digest of everything added ("sha256:" + hex). Once only.
  std::string Finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_BLOB_DIGEST_H_
