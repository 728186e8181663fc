// 128-bit digests of strings and messages, written as 32 lowercase hex
// characters. Used for hardware classes, model and config digests and ids.
// The function is XXH3-128 with seed 0 (a fast, well-distributed
// non-cryptographic hash: digests identify content, they do not
// authenticate it).
#ifndef LOCKSTEP_COMMON_DIGEST_H_
#define LOCKSTEP_COMMON_DIGEST_H_

#include <string>

#include "absl/strings/string_view.h"

namespace lockstep {

// XXH3-128 of `bytes` as 32 lowercase hex characters, high half first.
std::string Digest128Hex(absl::string_view bytes);

// True if `s` looks like a digest: exactly 32 lowercase hex characters.
bool IsDigest128Hex(absl::string_view s);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_DIGEST_H_
