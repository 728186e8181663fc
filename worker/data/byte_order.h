// Byte-order helpers for the file readers and writers. Internal to
// worker/data. File formats fix their byte order (IDX: big-endian; NPY: the
// '<' little-endian dtypes); these helpers turn it into host order on any
// host, so the element bits never depend on the machine reading the file.
#ifndef LOCKSTEP_WORKER_DATA_BYTE_ORDER_H_
#define LOCKSTEP_WORKER_DATA_BYTE_ORDER_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/base/config.h"

namespace lockstep::worker {

// REQUIRES: p points at 2 / 4 readable bytes.
inline uint16_t LoadLittleEndian16(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint16_t>(u[0] | (u[1] << 8));
}
inline uint32_t LoadLittleEndian32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint32_t>(u[0]) | (static_cast<uint32_t>(u[1]) << 8) |
         (static_cast<uint32_t>(u[2]) << 16) |
         (static_cast<uint32_t>(u[3]) << 24);
}
inline uint32_t LoadBigEndian32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (static_cast<uint32_t>(u[0]) << 24) |
         (static_cast<uint32_t>(u[1]) << 16) |
         (static_cast<uint32_t>(u[2]) << 8) | static_cast<uint32_t>(u[3]);
}

// Appends the 2 / 4 / 8 bytes of v in little-endian / big-endian order.
inline void AppendLittleEndian16(uint16_t v, std::string* out) {
  out->push_back(static_cast<char>(v & 0xff));
  out->push_back(static_cast<char>(v >> 8));
}
inline void AppendLittleEndian32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
inline void AppendLittleEndian64(uint64_t v, std::string* out) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
inline void AppendBigEndian32(uint32_t v, std::string* out) {
  for (int i = 3; i >= 0; --i) out->push_back(static_cast<char>(v >> (8 * i)));
}

// True on a little-endian host, where the '<' dtypes need no swapping.
inline constexpr bool kHostIsLittleEndian =
#if defined(ABSL_IS_LITTLE_ENDIAN)
    true;
#else
    false;
#endif

// Copies `count` elements of `elem_size` bytes (1, 2, 4 or 8) from
// little-endian `src` to host-order `dst` (or back: the operation is its own
// inverse). REQUIRES: both buffers hold count * elem_size bytes.
inline void CopyLittleEndian(const void* src, int64_t count, int elem_size,
                             void* dst) {
  const size_t bytes = static_cast<size_t>(count) * elem_size;
  if (kHostIsLittleEndian || elem_size == 1) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return;
  }
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  for (int64_t i = 0; i < count; ++i) {
    for (int b = 0; b < elem_size; ++b) {
      d[i * elem_size + b] = s[i * elem_size + (elem_size - 1 - b)];
    }
  }
}

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_DATA_BYTE_ORDER_H_
