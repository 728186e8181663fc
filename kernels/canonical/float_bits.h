// Float <-> bit-pattern casts usable in host and device code.
#ifndef LOCKSTEP_KERNELS_CANONICAL_FLOAT_BITS_H_
#define LOCKSTEP_KERNELS_CANONICAL_FLOAT_BITS_H_

#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <cstring>
#endif

#include "kernels/canonical/hd.h"

namespace lockstep::canonical {

// The IEEE-754 binary32 bit pattern of f.
LS_HD_INLINE uint32_t LsFloatToBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

// The float whose IEEE-754 binary32 bit pattern is u.
LS_HD_INLINE float LsBitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_CANONICAL_FLOAT_BITS_H_
