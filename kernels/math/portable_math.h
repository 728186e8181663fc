// Portable exp, log, tanh, erf and sqrt for CANONICAL mode.
//
// Built only from IEEE +, -, *, LsFma, division, comparisons and bit
// manipulation, so the host compiler (-ffp-contract=off) and nvcc
// (-fmad=false) produce the same bits for every input. The exact algorithms,
// constants and error bounds are in kernels/math/SPEC.md.
#ifndef LOCKSTEP_KERNELS_MATH_PORTABLE_MATH_H_
#define LOCKSTEP_KERNELS_MATH_PORTABLE_MATH_H_

#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

#include "kernels/canonical/float_bits.h"
#include "kernels/canonical/hd.h"

namespace lockstep::canonical {

// The one NaN every canonical math function returns (sign and payload of a
// NaN input are not propagated, so every device gives the same bits).
inline constexpr uint32_t kCanonicalNanBits = 0x7FC00000u;

namespace math_internal {

// 2^n for -126 <= n <= 127 (a normal float, exact).
LS_HD_INLINE float Pow2(int32_t n) {
  return LsBitsToFloat(static_cast<uint32_t>(n + 127) << 23);
}

}  // namespace math_internal

// e^x, error < 1 ULP for every float (see SPEC.md for measured figures).
// exp(NaN) = canonical NaN, exp(+-0) = 1, exp(+inf) = +inf, exp(-inf) = +0,
// x >= 0x1.62e43p6 (ln FLT_MAX rounded up) -> +inf, results below 2^-126 are
// subnormal (one rounding at the final scaling), x < -104 -> +0.
LS_HD_INLINE float CanonicalExp(float x) {
  if (x != x) return LsBitsToFloat(kCanonicalNanBits);
  if (x > 0x1.64p6f) return LsBitsToFloat(0x7F800000u);  // > 89: overflow.
  if (x < -0x1.ap6f) return 0.0f;                        // < -104: +0.
  // k = round-to-nearest-even(x * log2(e)), |x * log2(e)| < 2^22.
  const float t = x * 0x1.715476p+0f;
  const float kf = (t + 0x1.8p23f) - 0x1.8p23f;
  // x = k*ln2 + r_hi + r_lo. r_hi is exact: for k != 0, |x| > 0.34, so x
  // and k*ln2_hi are multiples of 2^-25 and |r_hi| <= 0.35 < min(|x|, 1/2);
  // for k == 0, r_hi = x. r_lo = -k*ln2_lo is tiny (|r_lo| < 2^-21).
  const float r_hi = LsFma(-kf, 0x1.62e430p-1f, x);
  const float r_lo = -kf * -0x1.05c610p-29f;
  const float r = r_hi + r_lo;
  // e^r = 1 + r + r^2 * Q(r), Q = Taylor coefficients 1/2! .. 1/7!, summed
  // as hi + tail where hi + lo = 1 + r_hi exactly (Fast2Sum).
  float q = 0x1.a01a02p-13f;
  q = LsFma(q, r, 0x1.6c16c2p-10f);
  q = LsFma(q, r, 0x1.111112p-7f);
  q = LsFma(q, r, 0x1.555556p-5f);
  q = LsFma(q, r, 0x1.555556p-3f);
  q = LsFma(q, r, 0x1.0p-1f);
  const float r2 = r * r;
  const float hi = 1.0f + r_hi;
  const float lo = (1.0f - hi) + r_hi;
  const float tail = LsFma(q, r2, lo + r_lo);
  const float p = hi + tail;
  // p * 2^k in two steps: the first is exact, the second rounds once.
  const int32_t k = static_cast<int32_t>(kf);
  const int32_t k1 = k / 2;
  const int32_t k2 = k - k1;
  return (p * math_internal::Pow2(k1)) * math_internal::Pow2(k2);
}

// Natural logarithm, error < 1 ULP for every positive float, subnormals
// included. log(NaN) = canonical NaN, log(x < 0) = canonical NaN (-inf
// included), log(+0) = log(-0) = -inf, log(+inf) = +inf, log(1) = +0.
LS_HD_INLINE float CanonicalLog(float x) {
  if (x != x) return LsBitsToFloat(kCanonicalNanBits);
  if (x == 0.0f) return LsBitsToFloat(0xFF800000u);
  if (x < 0.0f) return LsBitsToFloat(kCanonicalNanBits);
  uint32_t bits = LsFloatToBits(x);
  if (bits == 0x7F800000u) return x;
  int32_t e = 0;
  if (bits < 0x00800000u) {  // Subnormal: scale into the normal range.
    bits = LsFloatToBits(x * 0x1.0p23f);
    e = -23;
  }
  e += static_cast<int32_t>(bits >> 23) - 127;
  uint32_t mbits = (bits & 0x007FFFFFu) | 0x3F800000u;  // m in [1, 2).
  if (mbits > 0x3FB504F3u) {  // m > sqrt(2): use m / 2, e + 1.
    mbits -= 0x00800000u;
    e += 1;
  }
  const float m = LsBitsToFloat(mbits);  // m in [sqrt(1/2), sqrt(2)].
  const float f = m - 1.0f;              // Exact (Sterbenz).
  const float s = f / (2.0f + f);
  const float z = s * s;
  float w = 0x1.745d18p-3f;
  w = LsFma(w, z, 0x1.c71c72p-3f);
  w = LsFma(w, z, 0x1.24924ap-2f);
  w = LsFma(w, z, 0x1.99999ap-2f);
  w = LsFma(w, z, 0x1.555556p-1f);
  const float big_r = z * w;
  const float hfsq = 0.5f * (f * f);
  const float ef = static_cast<float>(e);
  // log(x) = e*ln2 + f - (hfsq - s*(hfsq + R)).
  const float tail =
      LsFma(ef, -0x1.05c610p-29f, LsFma(s, hfsq + big_r, -hfsq)) + f;
  return LsFma(ef, 0x1.62e430p-1f, tail);
}

// Hyperbolic tangent, error < 1 ULP for every float. tanh(-x) = -tanh(x)
// bit for bit (computed on |x|, sign copied back), tanh(+-0) = +-0,
// tanh(+-inf) = +-1, tanh(NaN) = canonical NaN.
LS_HD_INLINE float CanonicalTanh(float x) {
  if (x != x) return LsBitsToFloat(kCanonicalNanBits);
  const uint32_t sign = LsFloatToBits(x) & 0x80000000u;
  const float a = LsBitsToFloat(LsFloatToBits(x) & 0x7FFFFFFFu);
  float y;
  if (a > 0x1.3p3f) {  // > 9.5: tanh rounds to 1 (from 9.0109).
    y = 1.0f;
  } else if (a < 1.0f) {
    // Odd minimax polynomial a + a^3 * P(a^2) on [0, 1]
    // (tools/remez_tanh.py 1.0 7).
    const float z = a * a;
    float p = 0x1.0539b8p-13f;
    p = LsFma(p, z, -0x1.bfd14ep-11f);
    p = LsFma(p, z, 0x1.9672aap-9f);
    p = LsFma(p, z, -0x1.1a4e54p-7f);
    p = LsFma(p, z, 0x1.6516a2p-6f);
    p = LsFma(p, z, -0x1.ba01d6p-5f);
    p = LsFma(p, z, 0x1.111094p-3f);
    p = LsFma(p, z, -0x1.555554p-2f);
    y = LsFma(a * z, p, a);
  } else {
    // tanh(a) = 1 - 2 / (e + 1), e = e^(2a) >= e^2. d + d_err = e + 1 and
    // q + rem / d = 2 / d exactly, so 2 / (e + 1) ~= q + (rem - q*d_err) / d.
    const float e = CanonicalExp(2.0f * a);
    const float d = e + 1.0f;
    const float d_err = (e - d) + 1.0f;
    const float q = 2.0f / d;
    const float rem = LsFma(-q, d, 2.0f);
    const float corr = LsFma(-q, d_err, rem) / d;
    y = 1.0f - (q + corr);
  }
  return LsBitsToFloat(LsFloatToBits(y) | sign);
}

// Error function. erf(-x) = -erf(x) bit for bit (computed on |x|, sign
// copied back), erf(+-0) = +-0, erf(+-inf) = +-1, erf(NaN) = canonical NaN.
//   |x| < 1:  x * P(x^2), P the Maclaurin series of erf(x)/x truncated after
//             12 terms (coefficients (2/sqrt(pi)) (-1)^n / (n! (2n+1)) rounded
//             to float; the first omitted term is below 1e-10), Horner with
//             LsFma.
//   1 <= |x| < 6:  1 - erfc(|x|), erfc(z) = t * exp(-z^2 - 1.26551223 +
//             t * Q(t)), t = 1 / (1 + z/2), Q the 9-coefficient Chebyshev
//             fit of Press et al. (relative error of erfc < 1.2e-7); z^2 is
//             carried as hi + lo (one LsFma) so the exponent loses nothing.
//   |x| >= 6: 1 (erfc(6) < 2.2e-17).
// Error measured by portable_math_test against double erf: see
// docs/canonical-arithmetic.md section 5.
LS_HD_INLINE float CanonicalErf(float x) {
  if (x != x) return LsBitsToFloat(kCanonicalNanBits);
  const uint32_t sign = LsFloatToBits(x) & 0x80000000u;
  const float a = LsBitsToFloat(LsFloatToBits(x) & 0x7FFFFFFFu);
  float y;
  if (a < 1.0f) {
    const float z = a * a;
    float p = -0x1.51d718p-30f;
    p = LsFma(p, z, 0x1.fcc572p-27f);
    p = LsFma(p, z, -0x1.5f742ep-23f);
    p = LsFma(p, z, 0x1.b9e6cap-20f);
    p = LsFma(p, z, -0x1.f4d25cp-17f);
    p = LsFma(p, z, 0x1.f9a326p-14f);
    p = LsFma(p, z, -0x1.c02db4p-11f);
    p = LsFma(p, z, 0x1.565bcep-8f);
    p = LsFma(p, z, -0x1.b82ce4p-6f);
    p = LsFma(p, z, 0x1.ce2f22p-4f);
    p = LsFma(p, z, -0x1.812746p-2f);
    p = LsFma(p, z, 0x1.20dd76p+0f);
    y = a * p;
  } else if (a < 6.0f) {
    const float t = 1.0f / LsFma(0.5f, a, 1.0f);
    float q = 0x1.5df28ap-3f;
    q = LsFma(q, t, -0x1.a4f124p-1f);
    q = LsFma(q, t, 0x1.7d0f60p+0f);
    q = LsFma(q, t, -0x1.229cbap+0f);
    q = LsFma(q, t, 0x1.1d8f98p-2f);
    q = LsFma(q, t, -0x1.7d8498p-3f);
    q = LsFma(q, t, 0x1.8c6d92p-4f);
    q = LsFma(q, t, 0x1.7f11f6p-2f);
    q = LsFma(q, t, 0x1.00018ep+0f);
    const float zz = a * a;
    const float zz_lo = LsFma(a, a, -zz);
    const float arg = (LsFma(t, q, -0x1.43f89cp+0f) - zz) - zz_lo;
    const float erfc = t * CanonicalExp(arg);
    y = 1.0f - erfc;
  } else {
    y = 1.0f;
  }
  return LsBitsToFloat(LsFloatToBits(y) | sign);
}

// IEEE-754 square root (correctly rounded on host and device); a NaN result
// is the canonical NaN (x86 and CUDA disagree on the default NaN's bits).
LS_HD_INLINE float CanonicalSqrt(float x) {
#if defined(__CUDA_ARCH__)
  const float r = __fsqrt_rn(x);
#else
  const float r = std::sqrt(x);
#endif
  return r != r ? LsBitsToFloat(kCanonicalNanBits) : r;
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_MATH_PORTABLE_MATH_H_
