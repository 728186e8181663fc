// Philox4x32-10 counter-based random numbers for CANONICAL mode.
//
// Philox4x32-R is the counter-based generator of Salmon, Moraes, Dror and
// Shaw, "Parallel random numbers: as easy as 1, 2, 3" (SC'11), with the
// Random123 constants. Every random number Lockstep draws is a pure function
// of (seed, stream, index), so the same numbers come out on any device, in any
// thread count and in any evaluation order. The mapping from (seed, stream,
// index) to Philox's key and counter is part of the canonical-arithmetic spec
// (kernels/random/SPEC.md):
//
//   key     = { lo32(seed), hi32(seed) }
//   counter = { lo32(index / 4), hi32(index / 4), lo32(stream), hi32(stream) }
//   PhiloxBits(seed, stream, index) = Philox4x32_10(counter, key)[index % 4]
//
// so four consecutive indices share one block evaluation.
//
// Header-only and LS_HD: compiled by the host compiler and by nvcc.
#ifndef LOCKSTEP_KERNELS_RANDOM_PHILOX_H_
#define LOCKSTEP_KERNELS_RANDOM_PHILOX_H_

#include <cstdint>

#include "kernels/canonical/float_bits.h"
#include "kernels/canonical/hd.h"

namespace lockstep::canonical {

// Random123 Philox4x32 constants.
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;  // Multiplier, words 0/1.
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;  // Multiplier, words 2/3.
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // Key bump, key word 0.
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // Key bump, key word 1.

// A Philox4x32 block: four 32-bit words (counter in, random bits out).
struct PhiloxBlock {
  uint32_t v[4];
};

// A Philox4x32 key: two 32-bit words.
struct PhiloxKey {
  uint32_t k[2];
};

namespace philox_internal {

// One Philox4x32 round (Random123 philox4x32round):
//   (hi0, lo0) = M0 * c0,  (hi1, lo1) = M1 * c2  (full 64-bit products)
//   out = { hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0 }
LS_HD_INLINE PhiloxBlock Round(PhiloxBlock c, PhiloxKey key) {
#if defined(__CUDA_ARCH__)
  const uint32_t hi0 = __umulhi(kPhiloxM0, c.v[0]);
  const uint32_t lo0 = kPhiloxM0 * c.v[0];
  const uint32_t hi1 = __umulhi(kPhiloxM1, c.v[2]);
  const uint32_t lo1 = kPhiloxM1 * c.v[2];
#else
  const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c.v[0];
  const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c.v[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32);
  const uint32_t lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32);
  const uint32_t lo1 = static_cast<uint32_t>(p1);
#endif
  PhiloxBlock out;
  out.v[0] = hi1 ^ c.v[1] ^ key.k[0];
  out.v[1] = lo1;
  out.v[2] = hi0 ^ c.v[3] ^ key.k[1];
  out.v[3] = lo0;
  return out;
}

}  // namespace philox_internal

// The raw Philox4x32-R block function. Round 1 uses `key`; before each later
// round the key is bumped by (W0, W1) modulo 2^32. Canonical mode uses
// R = 10 (Philox4x32_10); other round counts exist for the known-answer
// tests. REQUIRES: rounds >= 1.
LS_HD_INLINE PhiloxBlock Philox4x32R(int rounds, PhiloxBlock counter,
                                     PhiloxKey key) {
  PhiloxBlock c = philox_internal::Round(counter, key);
  for (int r = 1; r < rounds; ++r) {
    key.k[0] += kPhiloxW0;
    key.k[1] += kPhiloxW1;
    c = philox_internal::Round(c, key);
  }
  return c;
}

// Philox4x32-10, the generator every canonical random number comes from.
LS_HD_INLINE PhiloxBlock Philox4x32_10(PhiloxBlock counter, PhiloxKey key) {
  return Philox4x32R(10, counter, key);
}

// The key for `seed`: { lo32(seed), hi32(seed) }.
LS_HD_INLINE PhiloxKey PhiloxKeyFor(uint64_t seed) {
  PhiloxKey key;
  key.k[0] = static_cast<uint32_t>(seed);
  key.k[1] = static_cast<uint32_t>(seed >> 32);
  return key;
}

// The counter of the block holding `index` in `stream`:
// { lo32(index / 4), hi32(index / 4), lo32(stream), hi32(stream) }.
LS_HD_INLINE PhiloxBlock PhiloxCounterFor(uint64_t stream, uint64_t index) {
  const uint64_t block = index >> 2;
  PhiloxBlock c;
  c.v[0] = static_cast<uint32_t>(block);
  c.v[1] = static_cast<uint32_t>(block >> 32);
  c.v[2] = static_cast<uint32_t>(stream);
  c.v[3] = static_cast<uint32_t>(stream >> 32);
  return c;
}

// The 32 random bits at `index` of `stream` under `seed`: word index % 4 of
// the block PhiloxCounterFor(stream, index) under PhiloxKeyFor(seed).
LS_HD_INLINE uint32_t PhiloxBits(uint64_t seed, uint64_t stream,
                                 uint64_t index) {
  const PhiloxBlock out =
      Philox4x32_10(PhiloxCounterFor(stream, index), PhiloxKeyFor(seed));
  return out.v[index & 3u];
}

// Calls f(i, PhiloxBits(seed, stream, i)) for every i in [begin, end), in
// order: the same bits, with one Philox block computed per four
// consecutive indices instead of one per index. Host code.
template <class F>
inline void ForPhiloxBits(uint64_t seed, uint64_t stream, uint64_t begin,
                          uint64_t end, F&& f) {
  const PhiloxKey key = PhiloxKeyFor(seed);
  uint64_t i = begin;
  while (i < end) {
    const PhiloxBlock out = Philox4x32_10(PhiloxCounterFor(stream, i), key);
    const uint64_t in_block = 4 - (i & 3u);  // indices left in this block
    const uint64_t stop = end - i > in_block ? i + in_block : end;
    for (; i < stop; ++i) f(i, out.v[i & 3u]);
  }
}

// Uniform float in [0, 1) from 32 random bits: (bits >> 8) * 2^-24, exact.
// The result is a multiple of 2^-24; every one of the 2^24 values is equally
// likely.
LS_HD_INLINE float BitsToUniform01(uint32_t bits) {
  return static_cast<float>(bits >> 8) * 0x1.0p-24f;
}

// Uniform float in [a, b) from 32 random bits. Rounding sequence (each step
// one IEEE-754 round-to-nearest-even float operation, no fma):
//   u = BitsToUniform01(bits)      exact
//   d = b - a                      rounded
//   p = d * u                      rounded
//   r = a + p                      rounded
//   if r >= b: r = the largest float below b   (rounding reached b)
// REQUIRES: a < b, both finite, b - a finite. (Not checked: violating it
// gives some float, never a crash.)
// The largest float below b (b finite): b > 0 steps the bit pattern down,
// b < 0 steps it up, b == +-0 gives -2^-149.
LS_HD_INLINE float FloatBelow(float b) {
  if (b == 0.0f) return -0x1.0p-149f;
  const uint32_t bb = LsFloatToBits(b);
  return LsBitsToFloat(b > 0.0f ? bb - 1u : bb + 1u);
}

LS_HD_INLINE float BitsToUniform(uint32_t bits, float a, float b) {
  const float u = BitsToUniform01(bits);
  const float d = b - a;
  const float p = d * u;
  const float r = a + p;
  return r >= b ? FloatBelow(b) : r;
}

// Uniform float in [0, 1) at (seed, stream, index).
LS_HD_INLINE float PhiloxUniform01(uint64_t seed, uint64_t stream,
                                   uint64_t index) {
  return BitsToUniform01(PhiloxBits(seed, stream, index));
}

// Uniform float in [a, b) at (seed, stream, index); see BitsToUniform.
LS_HD_INLINE float PhiloxUniform(uint64_t seed, uint64_t stream, uint64_t index,
                                 float a, float b) {
  return BitsToUniform(PhiloxBits(seed, stream, index), a, b);
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_RANDOM_PHILOX_H_
