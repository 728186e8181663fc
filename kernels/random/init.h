// Canonical parameter initialisers over raw float buffers.
//
// Every value is a pure function of (seed, stream, element index), drawn from
// Philox4x32-10 (kernels/random/philox.h), so an initialised tensor has the
// same bits on every device and for every thread count. The exact arithmetic
// is in kernels/random/SPEC.md:
//
//   uniform(a, b)   out[i] = BitsToUniform(PhiloxBits(seed, stream, i), a, b)
//                   (u = (bits >> 8) * 2^-24; d = b - a; p = d * u;
//                    r = a + p; each one IEEE float rounding, no fma)
//   glorot_uniform  uniform(-L, L), L = sqrt(6 / float(fan_in + fan_out))
//   he_uniform      uniform(-L, L), L = sqrt(6 / float(fan_in))
//   zeros           +0.0f
//   constant(v)     v
//
// Streams: callers pick one stream per tensor. The convention for model
// parameters is kStreamParameterBase + (the parameter's ordinal in the
// model's parameter list), so no two parameters share random numbers.
#ifndef LOCKSTEP_KERNELS_RANDOM_INIT_H_
#define LOCKSTEP_KERNELS_RANDOM_INIT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/canonical/hd.h"
#include "kernels/math/portable_math.h"
#include "kernels/random/philox.h"

namespace lockstep::canonical {

// Stream of parameter p (p = 0, 1, ... in model order) is
// kStreamParameterBase + p. ("PARA" in the high word.)
inline constexpr uint64_t kStreamParameterBase = 0x5041524100000000ull;

// Glorot/Xavier uniform limit: L = sqrt(6.0f / float(fan_in + fan_out)),
// with fan_in + fan_out summed exactly in int64, converted to float with
// round-to-nearest-even, then one IEEE division and one IEEE sqrt.
// REQUIRES: fan_in >= 1, fan_out >= 1, fan_in + fan_out does not overflow.
LS_HD_INLINE float GlorotUniformLimit(int64_t fan_in, int64_t fan_out) {
  const float s = static_cast<float>(fan_in + fan_out);
  return CanonicalSqrt(6.0f / s);
}

// He/Kaiming uniform limit: L = sqrt(6.0f / float(fan_in)) (int64 -> float
// round-to-nearest-even, IEEE division, IEEE sqrt). REQUIRES: fan_in >= 1.
LS_HD_INLINE float HeUniformLimit(int64_t fan_in) {
  return CanonicalSqrt(6.0f / static_cast<float>(fan_in));
}

// Element `index` of a uniform(-limit, limit) tensor: the same value the host
// fill functions below write (device kernels call this per element).
LS_HD_INLINE float SymmetricUniformAt(uint64_t seed, uint64_t stream,
                                      uint64_t index, float limit) {
  return PhiloxUniform(seed, stream, index, -limit, limit);
}

// out[i] = PhiloxUniform(seed, stream, i, a, b) for i in [0, n).
// InvalidArgument if n < 0, out is null with n > 0, a or b is not finite,
// a >= b, or b - a overflows.
absl::Status FillUniform(uint64_t seed, uint64_t stream, float a, float b,
                         float* out, int64_t n);

// Glorot/Xavier uniform: uniform(-L, L) with L = GlorotUniformLimit.
// InvalidArgument if fan_in or fan_out is outside [1, 2^61], n < 0, or out
// is null with n > 0.
absl::Status GlorotUniform(uint64_t seed, uint64_t stream, int64_t fan_in,
                           int64_t fan_out, float* out, int64_t n);

// He/Kaiming uniform: uniform(-L, L) with L = HeUniformLimit(fan_in).
// InvalidArgument if fan_in < 1, n < 0, or out is null with n > 0.
absl::Status HeUniform(uint64_t seed, uint64_t stream, int64_t fan_in,
                       float* out, int64_t n);

// out[i] = +0.0f. InvalidArgument if n < 0 or out is null with n > 0.
absl::Status FillZeros(float* out, int64_t n);

// out[i] = value (bit pattern copied, NaN included). InvalidArgument if
// n < 0 or out is null with n > 0.
absl::Status FillConstant(float value, float* out, int64_t n);

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_RANDOM_INIT_H_
