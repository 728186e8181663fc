// XXH3-64 and XXH3-128 (seed 0, default secret) as portable host+device code.
//
// Written from the public XXH3 specification (xxHash's doc/xxhash_spec.md,
// version 0.2.0, sections "XXH3 Algorithm Overview" .. "for large inputs").
// The output is bit-for-bit the output of libxxhash's XXH3_64bits() and
// XXH3_128bits() (stable since xxHash 0.8.0); xxh3_portable_test checks this
// on every input-length class.
//
// Why a second implementation exists: the CUDA fingerprinting kernels hash
// tensors where they live, on the device, so that only 16 bytes per tensor
// cross the bus. Every function here is LS_HD: scalar, integer operations
// only, no SIMD, no STL, no abseil, no exceptions, no heap. The same source is
// compiled by the host compiler (for tests) and by nvcc (for the kernels).
// Speed is not a goal on the host; libxxhash is used there (fingerprint.h).
//
// All multi-byte reads are assembled from bytes in little-endian order, so
// the result does not depend on the machine's endianness or on alignment.
// Thread-safety: pure functions of their arguments.
#ifndef LOCKSTEP_KERNELS_HASH_XXH3_PORTABLE_H_
#define LOCKSTEP_KERNELS_HASH_XXH3_PORTABLE_H_

#include <cstddef>
#include <cstdint>

#include "kernels/canonical/hd.h"

namespace lockstep::hash::portable {

// A 128-bit hash as libxxhash's XXH128_hash_t: low and high 64-bit halves.
struct Hash128 {
  uint64_t lo;
  uint64_t hi;
};

// The default 192-byte secret of the specification ("defaultSecret").
#define LS_XXH3_DEFAULT_SECRET_BYTES                                          \
  0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c,     \
      0xf7, 0x21, 0xad, 0x1c, 0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, \
      0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f, 0xcb, 0x79, 0xe6, 0x4e, \
      0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21, \
      0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, \
      0x81, 0x3a, 0x26, 0x4c, 0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, \
      0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3, 0x71, 0x64, 0x48, 0x97, \
      0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8, \
      0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, \
      0xc7, 0x0b, 0x4f, 0x1d, 0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, \
      0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64, 0xea, 0xc5, 0xac, 0x83, \
      0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb, \
      0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, \
      0x29, 0xd4, 0x68, 0x9e, 0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, \
      0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce, 0x45, 0xcb, 0x3a, 0x8f, \
      0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e

namespace xxh3_internal {

inline constexpr uint64_t kSecretSize = 192;
inline constexpr uint64_t kStripeLen = 64;
// Stripes per block: (secret size - 64) / 8 = 16, so blocks of 1024 bytes.
inline constexpr uint64_t kStripesPerBlock = (kSecretSize - kStripeLen) / 8;
inline constexpr uint64_t kBlockLen = kStripeLen * kStripesPerBlock;

inline constexpr uint64_t kPrime32_1 = 0x9E3779B1ULL;
inline constexpr uint64_t kPrime32_2 = 0x85EBCA77ULL;
inline constexpr uint64_t kPrime32_3 = 0xC2B2AE3DULL;
inline constexpr uint64_t kPrime64_1 = 0x9E3779B185EBCA87ULL;
inline constexpr uint64_t kPrime64_2 = 0xC2B2AE3D27D4EB4FULL;
inline constexpr uint64_t kPrime64_3 = 0x165667B19E3779F9ULL;
inline constexpr uint64_t kPrime64_4 = 0x85EBCA77C2B2AE63ULL;
inline constexpr uint64_t kPrime64_5 = 0x27D4EB2F165667C5ULL;
inline constexpr uint64_t kPrimeMx1 = 0x165667919E3779F9ULL;
inline constexpr uint64_t kPrimeMx2 = 0x9FB21C651E98DF25ULL;

// The secret must be readable by device code, where a host constexpr array
// cannot be indexed at run time; nvcc gets its own copy in constant memory.
#if defined(__CUDACC__)
__constant__ static const unsigned char kSecretDevice[192] = {
    LS_XXH3_DEFAULT_SECRET_BYTES};
#endif
inline constexpr unsigned char kSecretHost[192] = {
    LS_XXH3_DEFAULT_SECRET_BYTES};

LS_HD_INLINE const unsigned char* Secret() {
#if defined(__CUDA_ARCH__)
  return kSecretDevice;
#else
  return kSecretHost;
#endif
}

LS_HD_INLINE uint32_t ReadLe32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

LS_HD_INLINE uint64_t ReadLe64(const unsigned char* p) {
  return static_cast<uint64_t>(ReadLe32(p)) |
         (static_cast<uint64_t>(ReadLe32(p + 4)) << 32);
}

LS_HD_INLINE uint32_t Bswap32(uint32_t x) {
  return ((x << 24) & 0xff000000U) | ((x << 8) & 0x00ff0000U) |
         ((x >> 8) & 0x0000ff00U) | ((x >> 24) & 0x000000ffU);
}

LS_HD_INLINE uint64_t Bswap64(uint64_t x) {
  return (static_cast<uint64_t>(Bswap32(static_cast<uint32_t>(x))) << 32) |
         static_cast<uint64_t>(Bswap32(static_cast<uint32_t>(x >> 32)));
}

LS_HD_INLINE uint32_t Rotl32(uint32_t x, int s) {
  return (x << s) | (x >> (32 - s));
}

LS_HD_INLINE uint64_t Rotl64(uint64_t x, int s) {
  return (x << s) | (x >> (64 - s));
}

// (u128)a * (u128)b, the full product, from four 32x32->64 products.
LS_HD_INLINE Hash128 Mul64To128(uint64_t a, uint64_t b) {
  const uint64_t a_lo = a & 0xffffffffULL;
  const uint64_t a_hi = a >> 32;
  const uint64_t b_lo = b & 0xffffffffULL;
  const uint64_t b_hi = b >> 32;
  const uint64_t lo_lo = a_lo * b_lo;
  const uint64_t hi_lo = a_hi * b_lo;
  const uint64_t lo_hi = a_lo * b_hi;
  const uint64_t hi_hi = a_hi * b_hi;
  // At most (2^32-1) + (2^32-1) + (2^32-1)^2 < 2^64: no carry is lost.
  const uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xffffffffULL) + lo_hi;
  Hash128 r;
  r.hi = (hi_lo >> 32) + (cross >> 32) + hi_hi;
  r.lo = (cross << 32) | (lo_lo & 0xffffffffULL);
  return r;
}

// lowerHalf(a * b) xor higherHalf(a * b).
LS_HD_INLINE uint64_t MulFold64(uint64_t a, uint64_t b) {
  const Hash128 m = Mul64To128(a, b);
  return m.lo ^ m.hi;
}

// avalanche() of the specification.
LS_HD_INLINE uint64_t Avalanche(uint64_t x) {
  x ^= x >> 37;
  x *= kPrimeMx1;
  x ^= x >> 32;
  return x;
}

// avalanche_XXH64() of the specification.
LS_HD_INLINE uint64_t AvalancheXxh64(uint64_t x) {
  x ^= x >> 33;
  x *= kPrime64_2;
  x ^= x >> 29;
  x *= kPrime64_3;
  x ^= x >> 32;
  return x;
}

// ---- Small inputs (1..16 bytes); seed 0 throughout. ----

LS_HD_INLINE uint32_t Combined1To3(const unsigned char* in, uint64_t len) {
  return static_cast<uint32_t>(in[len - 1]) |
         (static_cast<uint32_t>(len) << 8) |
         (static_cast<uint32_t>(in[0]) << 16) |
         (static_cast<uint32_t>(in[len >> 1]) << 24);
}

LS_HD_INLINE uint64_t Hash64Len1To3(const unsigned char* in, uint64_t len) {
  const unsigned char* s = Secret();
  const uint32_t combined = Combined1To3(in, len);
  const uint64_t value =
      static_cast<uint64_t>(ReadLe32(s) ^ ReadLe32(s + 4)) ^ combined;
  return AvalancheXxh64(value);
}

LS_HD_INLINE Hash128 Hash128Len1To3(const unsigned char* in, uint64_t len) {
  const unsigned char* s = Secret();
  const uint32_t combined = Combined1To3(in, len);
  const uint64_t low =
      static_cast<uint64_t>(ReadLe32(s) ^ ReadLe32(s + 4)) ^ combined;
  const uint64_t high =
      static_cast<uint64_t>(ReadLe32(s + 8) ^ ReadLe32(s + 12)) ^
      static_cast<uint64_t>(Rotl32(Bswap32(combined), 13));
  Hash128 r;
  r.lo = AvalancheXxh64(low);
  r.hi = AvalancheXxh64(high);
  return r;
}

LS_HD_INLINE uint64_t Hash64Len4To8(const unsigned char* in, uint64_t len) {
  const unsigned char* s = Secret();
  const uint64_t first = ReadLe32(in);
  const uint64_t last = ReadLe32(in + len - 4);
  const uint64_t combined = last | (first << 32);
  // modifiedSeed is 0 for seed 0.
  uint64_t v = (ReadLe64(s + 8) ^ ReadLe64(s + 16)) ^ combined;
  v ^= Rotl64(v, 49) ^ Rotl64(v, 24);
  v *= kPrimeMx2;
  v ^= (v >> 35) + len;
  v *= kPrimeMx2;
  v ^= v >> 28;
  return v;
}

LS_HD_INLINE Hash128 Hash128Len4To8(const unsigned char* in, uint64_t len) {
  const unsigned char* s = Secret();
  const uint64_t first = ReadLe32(in);
  const uint64_t last = ReadLe32(in + len - 4);
  const uint64_t combined = first | (last << 32);
  const uint64_t v = (ReadLe64(s + 16) ^ ReadLe64(s + 24)) ^ combined;
  const Hash128 m = Mul64To128(v, kPrime64_1 + (len << 2));
  uint64_t high = m.hi + (m.lo << 1);
  uint64_t low = m.lo ^ (high >> 3);
  low ^= low >> 35;
  low *= kPrimeMx2;
  low ^= low >> 28;
  high = Avalanche(high);
  Hash128 r;
  r.lo = low;
  r.hi = high;
  return r;
}

LS_HD_INLINE uint64_t Hash64Len9To16(const unsigned char* in, uint64_t len) {
  const unsigned char* s = Secret();
  const uint64_t first = ReadLe64(in);
  const uint64_t last = ReadLe64(in + len - 8);
  const uint64_t low = (ReadLe64(s + 24) ^ ReadLe64(s + 32)) ^ first;
  const uint64_t high = (ReadLe64(s + 40) ^ ReadLe64(s + 48)) ^ last;
  const uint64_t acc = len + Bswap64(low) + high + MulFold64(low, high);
  return Avalanche(acc);
}

LS_HD_INLINE Hash128 Hash128Len9To16(const unsigned char* in, uint64_t len) {
  const unsigned char* s = Secret();
  const uint64_t first = ReadLe64(in);
  const uint64_t last = ReadLe64(in + len - 8);
  const uint64_t val1 = (ReadLe64(s + 32) ^ ReadLe64(s + 40)) ^ first ^ last;
  const uint64_t val2 = (ReadLe64(s + 48) ^ ReadLe64(s + 56)) ^ last;
  const Hash128 m = Mul64To128(val1, kPrime64_1);
  uint64_t low = m.lo + ((len - 1) << 54);
  uint64_t high =
      m.hi + ((val2 >> 32) << 32) + (val2 & 0xffffffffULL) * kPrime32_2;
  low ^= Bswap64(high);
  const Hash128 m2 = Mul64To128(low, kPrime64_2);
  low = m2.lo;
  high = m2.hi + high * kPrime64_2;
  Hash128 r;
  r.lo = Avalanche(low);
  r.hi = Avalanche(high);
  return r;
}

// ---- Medium inputs (17..240 bytes). ----

// mixStep(data, secretOffset, seed = 0).
LS_HD_INLINE uint64_t MixStep(const unsigned char* data, uint64_t secret_off) {
  const unsigned char* s = Secret() + secret_off;
  return MulFold64(ReadLe64(data) ^ ReadLe64(s),
                   ReadLe64(data + 8) ^ ReadLe64(s + 8));
}

// mixTwoChunks(data1, data2, secretOffset, seed = 0) on acc[0..1].
LS_HD_INLINE void MixTwoChunks(uint64_t acc[2], const unsigned char* d1,
                               const unsigned char* d2, uint64_t secret_off) {
  acc[0] += MixStep(d1, secret_off);
  acc[1] += MixStep(d2, secret_off + 16);
  acc[0] ^= ReadLe64(d2) + ReadLe64(d2 + 8);
  acc[1] ^= ReadLe64(d1) + ReadLe64(d1 + 8);
}

LS_HD_INLINE uint64_t Hash64Len17To128(const unsigned char* in, uint64_t len) {
  uint64_t acc = len * kPrime64_1;
  const int64_t rounds = static_cast<int64_t>(((len - 1) >> 5) + 1);
  for (int64_t i = rounds - 1; i >= 0; --i) {
    const uint64_t u = static_cast<uint64_t>(i);
    acc += MixStep(in + u * 16, u * 32);
    acc += MixStep(in + len - u * 16 - 16, u * 32 + 16);
  }
  return Avalanche(acc);
}

LS_HD_INLINE Hash128 Finish128Medium(const uint64_t acc[2], uint64_t len) {
  const uint64_t low = acc[0] + acc[1];
  const uint64_t high =
      acc[0] * kPrime64_1 + acc[1] * kPrime64_4 + len * kPrime64_2;
  Hash128 r;
  r.lo = Avalanche(low);
  r.hi = 0ULL - Avalanche(high);
  return r;
}

LS_HD_INLINE Hash128 Hash128Len17To128(const unsigned char* in, uint64_t len) {
  uint64_t acc[2] = {len * kPrime64_1, 0};
  const int64_t rounds = static_cast<int64_t>(((len - 1) >> 5) + 1);
  for (int64_t i = rounds - 1; i >= 0; --i) {
    const uint64_t u = static_cast<uint64_t>(i);
    MixTwoChunks(acc, in + u * 16, in + len - u * 16 - 16, u * 32);
  }
  return Finish128Medium(acc, len);
}

LS_HD_INLINE uint64_t Hash64Len129To240(const unsigned char* in, uint64_t len) {
  uint64_t acc = len * kPrime64_1;
  const uint64_t chunks = len >> 4;
  for (uint64_t i = 0; i < 8; ++i) acc += MixStep(in + i * 16, i * 16);
  acc = Avalanche(acc);
  for (uint64_t i = 8; i < chunks; ++i) {
    acc += MixStep(in + i * 16, (i - 8) * 16 + 3);
  }
  acc += MixStep(in + len - 16, 119);
  return Avalanche(acc);
}

LS_HD_INLINE Hash128 Hash128Len129To240(const unsigned char* in, uint64_t len) {
  uint64_t acc[2] = {len * kPrime64_1, 0};
  const uint64_t chunks = len >> 5;
  for (uint64_t i = 0; i < 4; ++i) {
    MixTwoChunks(acc, in + i * 32, in + i * 32 + 16, i * 32);
  }
  acc[0] = Avalanche(acc[0]);
  acc[1] = Avalanche(acc[1]);
  for (uint64_t i = 4; i < chunks; ++i) {
    MixTwoChunks(acc, in + i * 32, in + i * 32 + 16, (i - 4) * 32 + 3);
  }
  MixTwoChunks(acc, in + len - 16, in + len - 32, 103);
  return Finish128Medium(acc, len);
}

// ---- Large inputs (241 bytes and more). ----

// accumulate(stripe, secretOffset).
LS_HD_INLINE void Accumulate(uint64_t acc[8], const unsigned char* stripe,
                             uint64_t secret_off) {
  const unsigned char* s = Secret() + secret_off;
  for (int i = 0; i < 8; ++i) {
    const uint64_t data = ReadLe64(stripe + 8 * i);
    const uint64_t value = data ^ ReadLe64(s + 8 * i);
    acc[i ^ 1] += data;
    acc[i] += (value & 0xffffffffULL) * (value >> 32);
  }
}

// round_scramble() with the last 64 bytes of the secret.
LS_HD_INLINE void Scramble(uint64_t acc[8]) {
  const unsigned char* s = Secret() + kSecretSize - kStripeLen;
  for (int i = 0; i < 8; ++i) {
    uint64_t a = acc[i];
    a ^= a >> 47;
    a ^= ReadLe64(s + 8 * i);
    a *= kPrime32_1;
    acc[i] = a;
  }
}

// Steps 1..3 of the large-input algorithm: every block but the last gets a
// round (accumulate 16 stripes + scramble), the last block its full stripes
// except the last one, then the input's last 64 bytes as a final stripe.
LS_HD_INLINE void LargeAccumulate(const unsigned char* in, uint64_t len,
                                  uint64_t acc[8]) {
  acc[0] = kPrime32_3;
  acc[1] = kPrime64_1;
  acc[2] = kPrime64_2;
  acc[3] = kPrime64_3;
  acc[4] = kPrime64_4;
  acc[5] = kPrime32_2;
  acc[6] = kPrime64_5;
  acc[7] = kPrime32_1;
  const uint64_t full_blocks = (len - 1) / kBlockLen;
  for (uint64_t b = 0; b < full_blocks; ++b) {
    const unsigned char* block = in + b * kBlockLen;
    for (uint64_t n = 0; n < kStripesPerBlock; ++n) {
      Accumulate(acc, block + n * kStripeLen, n * 8);
    }
    Scramble(acc);
  }
  const unsigned char* last_block = in + full_blocks * kBlockLen;
  const uint64_t last_len = len - full_blocks * kBlockLen;  // 1..1024
  const uint64_t stripes = (last_len - 1) / kStripeLen;
  for (uint64_t n = 0; n < stripes; ++n) {
    Accumulate(acc, last_block + n * kStripeLen, n * 8);
  }
  Accumulate(acc, in + len - kStripeLen, kSecretSize - 71);
}

// finalMerge(initValue, secretOffset).
LS_HD_INLINE uint64_t FinalMerge(const uint64_t acc[8], uint64_t init,
                                 uint64_t secret_off) {
  const unsigned char* s = Secret() + secret_off;
  uint64_t result = init;
  for (int i = 0; i < 4; ++i) {
    result += MulFold64(acc[2 * i] ^ ReadLe64(s + 16 * i),
                        acc[2 * i + 1] ^ ReadLe64(s + 16 * i + 8));
  }
  return Avalanche(result);
}

}  // namespace xxh3_internal

// XXH3-64 of in[0 .. len), seed 0, default secret: equals libxxhash's
// XXH3_64bits(in, len). REQUIRES: in readable for len bytes (may be null
// when len == 0).
LS_HD_INLINE uint64_t Xxh3Hash64(const unsigned char* in, uint64_t len) {
  namespace x = xxh3_internal;
  if (len == 0) {
    const unsigned char* s = x::Secret();
    return x::AvalancheXxh64(x::ReadLe64(s + 56) ^ x::ReadLe64(s + 64));
  }
  if (len <= 3) return x::Hash64Len1To3(in, len);
  if (len <= 8) return x::Hash64Len4To8(in, len);
  if (len <= 16) return x::Hash64Len9To16(in, len);
  if (len <= 128) return x::Hash64Len17To128(in, len);
  if (len <= 240) return x::Hash64Len129To240(in, len);
  uint64_t acc[8];
  x::LargeAccumulate(in, len, acc);
  return x::FinalMerge(acc, len * x::kPrime64_1, 11);
}

// XXH3-128 of in[0 .. len), seed 0, default secret: equals libxxhash's
// XXH3_128bits(in, len) (.lo = low64, .hi = high64). Same REQUIRES.
LS_HD_INLINE Hash128 Xxh3Hash128(const unsigned char* in, uint64_t len) {
  namespace x = xxh3_internal;
  if (len == 0) {
    const unsigned char* s = x::Secret();
    Hash128 r;
    r.lo = x::AvalancheXxh64(x::ReadLe64(s + 64) ^ x::ReadLe64(s + 72));
    r.hi = x::AvalancheXxh64(x::ReadLe64(s + 80) ^ x::ReadLe64(s + 88));
    return r;
  }
  if (len <= 3) return x::Hash128Len1To3(in, len);
  if (len <= 8) return x::Hash128Len4To8(in, len);
  if (len <= 16) return x::Hash128Len9To16(in, len);
  if (len <= 128) return x::Hash128Len17To128(in, len);
  if (len <= 240) return x::Hash128Len129To240(in, len);
  uint64_t acc[8];
  x::LargeAccumulate(in, len, acc);
  Hash128 r;
  r.lo = x::FinalMerge(acc, len * x::kPrime64_1, 11);
  r.hi = x::FinalMerge(acc, ~(len * x::kPrime64_2), x::kSecretSize - 75);
  return r;
}

}  // namespace lockstep::hash::portable

#endif  // LOCKSTEP_KERNELS_HASH_XXH3_PORTABLE_H_
