// SHA-256 (libcrypto) written as 64 lowercase hex characters: hashes of
// bearer tokens and the content digests of parameter blobs.
#ifndef LOCKSTEP_COMMON_SHA256_H_
#define LOCKSTEP_COMMON_SHA256_H_

#include <string>

#include "absl/strings/string_view.h"

namespace lockstep {

// SHA-256 of `bytes` as 64 lowercase hex characters.
std::string Sha256Hex(absl::string_view bytes);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_SHA256_H_
