// The AVX2 lane kernels: built with -mavx2 -mfma (kernels/cpu/BUILD).
#include "kernels/cpu/lane_kernels.h"

#define LS_LANE_ISA_NS avx2_lanes
#include "kernels/cpu/lane_kernels_impl.h"

#if defined(__AVX2__)
#include <immintrin.h>

#include "kernels/cpu/x86_transpose.h"

namespace lockstep::kernels::cpu_internal {
namespace avx2_lanes {
namespace {

struct Avx2Lanes {
  using T = __m256;
  using M = __m256;
  using I = __m256i;
  static constexpr int kWidth = 8;
  static T Zero() { return _mm256_setzero_ps(); }
  static T Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, T v) { _mm256_storeu_ps(p, v); }
  // A non-temporal store (p 32-byte aligned), and the fence that orders
  // such stores before the thread's later ones.
  static void Stream(float* p, T v) { _mm256_stream_ps(p, v); }
  static void Fence() { _mm_sfence(); }
  static T Add(T a, T b) { return _mm256_add_ps(a, b); }
  static T Sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T Mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T Div(T a, T b) { return _mm256_div_ps(a, b); }
  // Correctly rounded, as sqrtss (IEEE).
  static T Sqrt(T a) { return _mm256_sqrt_ps(a); }
  static T Fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  // CanonicalErf's a < 1 branch on a = |x| (a >= +0): a * P(a^2).
  __attribute__((always_inline)) static T ErfSmall(T a) {
    const __m256 z = _mm256_mul_ps(a, a);
    __m256 p = _mm256_set1_ps(-0x1.51d718p-30f);
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(0x1.fcc572p-27f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-0x1.5f742ep-23f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(0x1.b9e6cap-20f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-0x1.f4d25cp-17f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(0x1.f9a326p-14f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-0x1.c02db4p-11f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(0x1.565bcep-8f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-0x1.b82ce4p-6f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(0x1.ce2f22p-4f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-0x1.812746p-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(0x1.20dd76p+0f));
    return _mm256_mul_ps(a, p);
  }
  static constexpr bool kHasErfBelowOne = true;
  // CanonicalErf's |x| < 1 branch alone: Erf(x) wherever |x| < 1, in half
  // the operations (no division, no exp). The lane kernels' GELU takes it
  // for every lane, then gives the lanes NotBelowOne names the whole Erf
  // (GeluBlocks).
  __attribute__((always_inline)) static T ErfBelowOne(T x) {
    const __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
    return _mm256_or_ps(ErfSmall(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x)),
                        sign);
  }
  // The lanes of u without |lane| < 1 (NaN among them), one bit each.
  static unsigned NotBelowOne(T u) {
    return static_cast<unsigned>(_mm256_movemask_ps(
        _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), u),
                      _mm256_set1_ps(1.0f), _CMP_NLT_UQ)));
  }
  // canonical::CanonicalErf (kernels/math/portable_math.h), 8 lanes: both
  // branches' operations in the spec's order on every lane, then the
  // branch each lane takes selected, the sign restored, NaN last.
  __attribute__((always_inline)) static T Erf(T x) {
    const __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
    const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    const __m256 small = ErfSmall(a);
    // 1 <= a < 6.
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 t =
        _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.5f), a, one));
    __m256 q = _mm256_set1_ps(0x1.5df28ap-3f);
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(-0x1.a4f124p-1f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(0x1.7d0f60p+0f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(-0x1.229cbap+0f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(0x1.1d8f98p-2f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(-0x1.7d8498p-3f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(0x1.8c6d92p-4f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(0x1.7f11f6p-2f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(0x1.00018ep+0f));
    const __m256 zz = _mm256_mul_ps(a, a);
    const __m256 zz_lo = _mm256_fmsub_ps(a, a, zz);
    const __m256 arg = _mm256_sub_ps(
        _mm256_sub_ps(_mm256_fmadd_ps(t, q, _mm256_set1_ps(-0x1.43f89cp+0f)),
                      zz),
        zz_lo);
    const __m256 mid = _mm256_sub_ps(one, _mm256_mul_ps(t, Exp(arg)));
    __m256 y = _mm256_blendv_ps(
        one, mid, _mm256_cmp_ps(a, _mm256_set1_ps(6.0f), _CMP_LT_OQ));
    y = _mm256_blendv_ps(y, small, _mm256_cmp_ps(a, one, _CMP_LT_OQ));
    y = _mm256_or_ps(y, sign);
    return _mm256_blendv_ps(y,
                            _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)),
                            _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  // -x (the sign flipped, as unary minus: -(+0) = -0, NaN keeps its bits
  // but the sign).
  static T Neg(T x) { return _mm256_xor_ps(x, _mm256_set1_ps(-0.0f)); }
  // canonical::CanonicalTanh (kernels/math/portable_math.h), 8 lanes: both
  // branches' operations in the spec's order on every lane, then the
  // branch each lane takes selected, the sign restored, NaN last.
  static T Tanh(T x) {
    const __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
    const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    // a < 1: a + a^3 P(a^2).
    const __m256 z = _mm256_mul_ps(a, a);
    __m256 p = _mm256_set1_ps(0x1.0539b8p-13f);
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-0x1.bfd14ep-11f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(0x1.9672aap-9f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-0x1.1a4e54p-7f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(0x1.6516a2p-6f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-0x1.ba01d6p-5f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(0x1.111094p-3f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-0x1.555554p-2f));
    const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(a, z), p, a);
    // 1 <= a <= 9.5: 1 - 2 / (e + 1), e = e^(2a), with the division's
    // remainder.
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 two = _mm256_set1_ps(2.0f);
    const __m256 e = Exp(_mm256_mul_ps(two, a));
    const __m256 d = _mm256_add_ps(e, one);
    const __m256 d_err = _mm256_add_ps(_mm256_sub_ps(e, d), one);
    const __m256 q = _mm256_div_ps(two, d);
    const __m256 neg_q = Neg(q);
    const __m256 rem = _mm256_fmadd_ps(neg_q, d, two);
    const __m256 corr = _mm256_div_ps(_mm256_fmadd_ps(neg_q, d_err, rem), d);
    const __m256 mid = _mm256_sub_ps(one, _mm256_add_ps(q, corr));
    __m256 y = _mm256_blendv_ps(
        mid, one, _mm256_cmp_ps(a, _mm256_set1_ps(0x1.3p3f), _CMP_GT_OQ));
    y = _mm256_blendv_ps(y, small, _mm256_cmp_ps(a, one, _CMP_LT_OQ));
    y = _mm256_or_ps(y, sign);
    return _mm256_blendv_ps(y,
                            _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)),
                            _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  // canonical::CanonicalExp (kernels/math/portable_math.h), 8 lanes: the
  // same operations in the same order, the special cases selected last.
  static T Exp(T x) {
    const __m256 kf = _mm256_sub_ps(
        _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(0x1.715476p+0f)),
                      _mm256_set1_ps(0x1.8p23f)),
        _mm256_set1_ps(0x1.8p23f));
    const __m256 neg_kf = _mm256_xor_ps(kf, _mm256_set1_ps(-0.0f));  // -kf
    const __m256 r_hi =
        _mm256_fmadd_ps(neg_kf, _mm256_set1_ps(0x1.62e430p-1f), x);
    const __m256 r_lo = _mm256_mul_ps(neg_kf, _mm256_set1_ps(-0x1.05c610p-29f));
    const __m256 r = _mm256_add_ps(r_hi, r_lo);
    __m256 q = _mm256_set1_ps(0x1.a01a02p-13f);
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(0x1.6c16c2p-10f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(0x1.111112p-7f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(0x1.555556p-5f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(0x1.555556p-3f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(0x1.0p-1f));
    const __m256 r2 = _mm256_mul_ps(r, r);
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 hi = _mm256_add_ps(one, r_hi);
    const __m256 lo = _mm256_add_ps(_mm256_sub_ps(one, hi), r_hi);
    const __m256 tail = _mm256_fmadd_ps(q, r2, _mm256_add_ps(lo, r_lo));
    const __m256 p = _mm256_add_ps(hi, tail);
    const __m256i k = _mm256_cvttps_epi32(kf);
    // k / 2 rounded toward zero, as C++ divides.
    const __m256i k1 =
        _mm256_srai_epi32(_mm256_add_epi32(k, _mm256_srli_epi32(k, 31)), 1);
    const __m256i k2 = _mm256_sub_epi32(k, k1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 pow1 =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    const __m256 pow2 =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, pow1), pow2);
    y = _mm256_blendv_ps(
        y, _mm256_setzero_ps(),
        _mm256_cmp_ps(x, _mm256_set1_ps(-0x1.ap6f), _CMP_LT_OQ));
    y = _mm256_blendv_ps(
        y, _mm256_castsi256_ps(_mm256_set1_epi32(0x7F800000)),
        _mm256_cmp_ps(x, _mm256_set1_ps(0x1.64p6f), _CMP_GT_OQ));
    return _mm256_blendv_ps(y,
                            _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)),
                            _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  // Philox4x32-10 (kernels/random/philox.h) of the 8 blocks first ..
  // first + 7 of `stream` under `seed`, one block per lane, their words
  // stored in block order: out[4 * b + w] = word w of block first + b.
  // REQUIRES: lo32(first) + 7 does not wrap (hi32 is the same for all).
  static void PhiloxBlocks(uint64_t seed, uint64_t stream, uint64_t first,
                           uint32_t* out) {
    const __m256i m0 = _mm256_set1_epi32(static_cast<int32_t>(0xD2511F53u));
    const __m256i m1 = _mm256_set1_epi32(static_cast<int32_t>(0xCD9E8D57u));
    __m256i c0 = _mm256_add_epi32(
        _mm256_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(first))),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i c1 = _mm256_set1_epi32(
        static_cast<int32_t>(static_cast<uint32_t>(first >> 32)));
    __m256i c2 =
        _mm256_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(stream)));
    __m256i c3 = _mm256_set1_epi32(
        static_cast<int32_t>(static_cast<uint32_t>(stream >> 32)));
    uint32_t k0 = static_cast<uint32_t>(seed);
    uint32_t k1 = static_cast<uint32_t>(seed >> 32);
    for (int r = 0; r < 10; ++r) {
      if (r > 0) {
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
      }
      const __m256i lo0 = _mm256_mullo_epi32(c0, m0);
      const __m256i hi0 = _mm256_blend_epi32(
          _mm256_srli_epi64(_mm256_mul_epu32(c0, m0), 32),
          _mm256_mul_epu32(_mm256_srli_epi64(c0, 32), m0), 0xAA);
      const __m256i lo1 = _mm256_mullo_epi32(c2, m1);
      const __m256i hi1 = _mm256_blend_epi32(
          _mm256_srli_epi64(_mm256_mul_epu32(c2, m1), 32),
          _mm256_mul_epu32(_mm256_srli_epi64(c2, 32), m1), 0xAA);
      const __m256i n0 =
          _mm256_xor_si256(_mm256_xor_si256(hi1, c1),
                           _mm256_set1_epi32(static_cast<int32_t>(k0)));
      const __m256i n2 =
          _mm256_xor_si256(_mm256_xor_si256(hi0, c3),
                           _mm256_set1_epi32(static_cast<int32_t>(k1)));
      c0 = n0;
      c1 = lo1;
      c2 = n2;
      c3 = lo0;
    }
    // Words to block order: 4 x 4 transposes within 128-bit lanes (r_m
    // lane L = block 4L + m), then the lanes gathered in block order.
    const __m256i t0 = _mm256_unpacklo_epi32(c0, c1);
    const __m256i t1 = _mm256_unpackhi_epi32(c0, c1);
    const __m256i t2 = _mm256_unpacklo_epi32(c2, c3);
    const __m256i t3 = _mm256_unpackhi_epi32(c2, c3);
    const __m256i r0 = _mm256_unpacklo_epi64(t0, t2);
    const __m256i r1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i r2 = _mm256_unpacklo_epi64(t1, t3);
    const __m256i r3 = _mm256_unpackhi_epi64(t1, t3);
    auto* o = reinterpret_cast<__m256i*>(out);
    _mm256_storeu_si256(o, _mm256_permute2x128_si256(r0, r1, 0x20));
    _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(r2, r3, 0x20));
    _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(r0, r1, 0x31));
    _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(r2, r3, 0x31));
  }
  // float(p[l] >> 8) for 8 random words: 24-bit integers, exact.
  static T U24ToFloat(const uint32_t* p) {
    return _mm256_cvtepi32_ps(_mm256_srli_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), 8));
  }
  // a >= b (ordered), as a lane mask.
  static M GreaterEqual(T a, T b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
  static T Set1(float v) { return _mm256_set1_ps(v); }
  static M Replaces(T best, T v) {
    const __m256 greater = _mm256_cmp_ps(v, best, _CMP_GT_OQ);
    const __m256 v_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    const __m256 best_nan = _mm256_cmp_ps(best, best, _CMP_UNORD_Q);
    return _mm256_or_ps(greater, _mm256_andnot_ps(best_nan, v_nan));
  }
  static T Select(M m, T a, T b) { return _mm256_blendv_ps(a, b, m); }
  // a > b (ordered: false where either is NaN), and the two masks' AND.
  static M Greater(T a, T b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static M AndM(M a, M b) { return _mm256_and_ps(a, b); }
  static I SelectI(M m, I a, I b) {
    return _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), m));
  }
  static I Set1I(int32_t k) { return _mm256_set1_epi32(k); }
  static void StoreI(int32_t* p, I v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  }
  __attribute__((always_inline)) static void Transpose(T* r) {
    TransposeAvx2(r);
  }
  __attribute__((always_inline)) static void LoadTransposed(const float* p,
                                                            int64_t stride,
                                                            T* r) {
    LoadTransposeAvx2(p, stride, r);
  }
};

}  // namespace
}  // namespace avx2_lanes

const LaneKernelSet& LaneKernelsAvx2() {
  return avx2_lanes::KernelSet<avx2_lanes::Avx2Lanes>();
}

}  // namespace lockstep::kernels::cpu_internal

#else  // not built for AVX2: never selected (isa.cc), kept linkable.

namespace lockstep::kernels::cpu_internal {
const LaneKernelSet& LaneKernelsAvx2() { return LaneKernelsScalar(); }
}  // namespace lockstep::kernels::cpu_internal

#endif
