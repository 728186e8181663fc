#include "common/digest.h"

#include "absl/strings/str_format.h"
#include "xxhash.h"

namespace lockstep {

std::string Digest128Hex(absl::string_view bytes) {
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return absl::StrFormat("%016x%016x", h.high64, h.low64);
}

bool IsDigest128Hex(absl::string_view s) {
  if (s.size() != 32) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace lockstep
