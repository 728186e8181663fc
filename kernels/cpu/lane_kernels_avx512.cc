// The AVX-512 lane kernels: built with -mavx512f (kernels/cpu/BUILD).
#include "kernels/cpu/lane_kernels.h"

#define LS_LANE_ISA_NS avx512_lanes
#include "kernels/cpu/lane_kernels_impl.h"

#if defined(__AVX512F__)
// gcc 12's AVX-512 intrinsics pass _mm512_undefined_ps() as the pass-through
// operand, which -W(maybe-)uninitialized reports (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/x86_transpose.h"

namespace lockstep::kernels::cpu_internal {
namespace avx512_lanes {
namespace {

struct Avx512Lanes {
  using T = __m512;
  using M = __mmask16;
  using I = __m512i;
  static constexpr int kWidth = 16;
  static T Zero() { return _mm512_setzero_ps(); }
  static T Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, T v) { _mm512_storeu_ps(p, v); }
  // A non-temporal store (p 64-byte aligned), and the fence that orders
  // such stores before the thread's later ones.
  static void Stream(float* p, T v) { _mm512_stream_ps(p, v); }
  static void Fence() { _mm_sfence(); }
  static T Add(T a, T b) { return _mm512_add_ps(a, b); }
  static T Sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T Mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T Div(T a, T b) { return _mm512_div_ps(a, b); }
  // Correctly rounded, as sqrtss (IEEE).
  static T Sqrt(T a) { return _mm512_sqrt_ps(a); }
  static T Fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  // canonical::CanonicalErf (kernels/math/portable_math.h), 16 lanes: both
  // branches' operations in the spec's order on every lane, then the
  // branch each lane takes selected, the sign restored, NaN last.
  static T Erf(T x) {
    const __m512i bits = _mm512_castps_si512(x);
    const __m512i sign = _mm512_and_si512(bits, _mm512_set1_epi32(INT32_MIN));
    const __m512 a = _mm512_castsi512_ps(
        _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF)));
    // a < 1.
    const __m512 z = _mm512_mul_ps(a, a);
    __m512 p = _mm512_set1_ps(-0x1.51d718p-30f);
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(0x1.fcc572p-27f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-0x1.5f742ep-23f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(0x1.b9e6cap-20f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-0x1.f4d25cp-17f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(0x1.f9a326p-14f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-0x1.c02db4p-11f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(0x1.565bcep-8f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-0x1.b82ce4p-6f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(0x1.ce2f22p-4f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-0x1.812746p-2f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(0x1.20dd76p+0f));
    const __m512 small = _mm512_mul_ps(a, p);
    // 1 <= a < 6.
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 t =
        _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(0.5f), a, one));
    __m512 q = _mm512_set1_ps(0x1.5df28ap-3f);
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-0x1.a4f124p-1f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(0x1.7d0f60p+0f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-0x1.229cbap+0f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(0x1.1d8f98p-2f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-0x1.7d8498p-3f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(0x1.8c6d92p-4f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(0x1.7f11f6p-2f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(0x1.00018ep+0f));
    const __m512 zz = _mm512_mul_ps(a, a);
    const __m512 zz_lo = _mm512_fmsub_ps(a, a, zz);
    const __m512 arg = _mm512_sub_ps(
        _mm512_sub_ps(_mm512_fmadd_ps(t, q, _mm512_set1_ps(-0x1.43f89cp+0f)),
                      zz),
        zz_lo);
    const __m512 mid = _mm512_sub_ps(one, _mm512_mul_ps(t, Exp(arg)));
    __m512 y = _mm512_mask_blend_ps(
        _mm512_cmp_ps_mask(a, _mm512_set1_ps(6.0f), _CMP_LT_OQ), one, mid);
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, one, _CMP_LT_OQ), y, small);
    y = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(y), sign));
    return _mm512_mask_blend_ps(
        _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y,
        _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
  }
  // -x (the sign flipped, as unary minus: -(+0) = -0, NaN keeps its bits
  // but the sign).
  static T Neg(T x) {
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)));
  }
  // canonical::CanonicalTanh (kernels/math/portable_math.h), 16 lanes: both
  // branches' operations in the spec's order on every lane, then the
  // branch each lane takes selected, the sign restored, NaN last.
  static T Tanh(T x) {
    const __m512i bits = _mm512_castps_si512(x);
    const __m512i sign = _mm512_and_si512(bits, _mm512_set1_epi32(INT32_MIN));
    const __m512 a = _mm512_castsi512_ps(
        _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF)));
    // a < 1: a + a^3 P(a^2).
    const __m512 z = _mm512_mul_ps(a, a);
    __m512 p = _mm512_set1_ps(0x1.0539b8p-13f);
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-0x1.bfd14ep-11f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(0x1.9672aap-9f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-0x1.1a4e54p-7f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(0x1.6516a2p-6f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-0x1.ba01d6p-5f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(0x1.111094p-3f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-0x1.555554p-2f));
    const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(a, z), p, a);
    // 1 <= a <= 9.5: 1 - 2 / (e + 1), e = e^(2a), with the division's
    // remainder.
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 two = _mm512_set1_ps(2.0f);
    const __m512 e = Exp(_mm512_mul_ps(two, a));
    const __m512 d = _mm512_add_ps(e, one);
    const __m512 d_err = _mm512_add_ps(_mm512_sub_ps(e, d), one);
    const __m512 q = _mm512_div_ps(two, d);
    const __m512 neg_q = Neg(q);
    const __m512 rem = _mm512_fmadd_ps(neg_q, d, two);
    const __m512 corr = _mm512_div_ps(_mm512_fmadd_ps(neg_q, d_err, rem), d);
    const __m512 mid = _mm512_sub_ps(one, _mm512_add_ps(q, corr));
    __m512 y = _mm512_mask_blend_ps(
        _mm512_cmp_ps_mask(a, _mm512_set1_ps(0x1.3p3f), _CMP_GT_OQ), mid, one);
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, one, _CMP_LT_OQ), y, small);
    y = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(y), sign));
    return _mm512_mask_blend_ps(
        _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y,
        _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
  }
  // canonical::CanonicalExp (kernels/math/portable_math.h), 16 lanes: the
  // same operations in the same order, the special cases selected last.
  static T Exp(T x) {
    const __m512 kf = _mm512_sub_ps(
        _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(0x1.715476p+0f)),
                      _mm512_set1_ps(0x1.8p23f)),
        _mm512_set1_ps(0x1.8p23f));
    const __m512 neg_kf = _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(kf), _mm512_set1_epi32(INT32_MIN)));  // -kf
    const __m512 r_hi =
        _mm512_fmadd_ps(neg_kf, _mm512_set1_ps(0x1.62e430p-1f), x);
    const __m512 r_lo = _mm512_mul_ps(neg_kf, _mm512_set1_ps(-0x1.05c610p-29f));
    const __m512 r = _mm512_add_ps(r_hi, r_lo);
    __m512 q = _mm512_set1_ps(0x1.a01a02p-13f);
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0x1.6c16c2p-10f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0x1.111112p-7f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0x1.555556p-5f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0x1.555556p-3f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0x1.0p-1f));
    const __m512 r2 = _mm512_mul_ps(r, r);
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 hi = _mm512_add_ps(one, r_hi);
    const __m512 lo = _mm512_add_ps(_mm512_sub_ps(one, hi), r_hi);
    const __m512 tail = _mm512_fmadd_ps(q, r2, _mm512_add_ps(lo, r_lo));
    const __m512 p = _mm512_add_ps(hi, tail);
    const __m512i k = _mm512_cvttps_epi32(kf);
    // k / 2 rounded toward zero, as C++ divides.
    const __m512i k1 =
        _mm512_srai_epi32(_mm512_add_epi32(k, _mm512_srli_epi32(k, 31)), 1);
    const __m512i k2 = _mm512_sub_epi32(k, k1);
    const __m512i bias = _mm512_set1_epi32(127);
    const __m512 pow1 =
        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k1, bias), 23));
    const __m512 pow2 =
        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k2, bias), 23));
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, pow1), pow2);
    y = _mm512_mask_blend_ps(
        _mm512_cmp_ps_mask(x, _mm512_set1_ps(-0x1.ap6f), _CMP_LT_OQ), y,
        _mm512_setzero_ps());
    y = _mm512_mask_blend_ps(
        _mm512_cmp_ps_mask(x, _mm512_set1_ps(0x1.64p6f), _CMP_GT_OQ), y,
        _mm512_castsi512_ps(_mm512_set1_epi32(0x7F800000)));
    return _mm512_mask_blend_ps(
        _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y,
        _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
  }
  // Philox4x32-10 (kernels/random/philox.h) of the 16 blocks first ..
  // first + 15 of `stream` under `seed`, one block per lane, their words
  // stored in block order: out[4 * b + w] = word w of block first + b.
  // REQUIRES: lo32(first) + 15 does not wrap (hi32 is the same for all).
  static void PhiloxBlocks(uint64_t seed, uint64_t stream, uint64_t first,
                           uint32_t* out) {
    const __m512i m0 = _mm512_set1_epi32(static_cast<int32_t>(0xD2511F53u));
    const __m512i m1 = _mm512_set1_epi32(static_cast<int32_t>(0xCD9E8D57u));
    __m512i c0 = _mm512_add_epi32(
        _mm512_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(first))),
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
                          15));
    __m512i c1 = _mm512_set1_epi32(
        static_cast<int32_t>(static_cast<uint32_t>(first >> 32)));
    __m512i c2 =
        _mm512_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(stream)));
    __m512i c3 = _mm512_set1_epi32(
        static_cast<int32_t>(static_cast<uint32_t>(stream >> 32)));
    uint32_t k0 = static_cast<uint32_t>(seed);
    uint32_t k1 = static_cast<uint32_t>(seed >> 32);
    for (int r = 0; r < 10; ++r) {
      if (r > 0) {
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
      }
      // (hi, lo) of the 64-bit products: even lanes' high words shifted
      // down, odd lanes' already in place.
      const __m512i lo0 = _mm512_mullo_epi32(c0, m0);
      const __m512i hi0 = _mm512_mask_blend_epi32(
          0xAAAA, _mm512_srli_epi64(_mm512_mul_epu32(c0, m0), 32),
          _mm512_mul_epu32(_mm512_srli_epi64(c0, 32), m0));
      const __m512i lo1 = _mm512_mullo_epi32(c2, m1);
      const __m512i hi1 = _mm512_mask_blend_epi32(
          0xAAAA, _mm512_srli_epi64(_mm512_mul_epu32(c2, m1), 32),
          _mm512_mul_epu32(_mm512_srli_epi64(c2, 32), m1));
      const __m512i n0 =
          _mm512_xor_si512(_mm512_xor_si512(hi1, c1),
                           _mm512_set1_epi32(static_cast<int32_t>(k0)));
      const __m512i n2 =
          _mm512_xor_si512(_mm512_xor_si512(hi0, c3),
                           _mm512_set1_epi32(static_cast<int32_t>(k1)));
      c0 = n0;
      c1 = lo1;
      c2 = n2;
      c3 = lo0;
    }
    // Words to block order: 4 x 4 transposes within 128-bit lanes (r_m
    // lane L = block 4L + m), then the lanes gathered in block order.
    const __m512i t0 = _mm512_unpacklo_epi32(c0, c1);
    const __m512i t1 = _mm512_unpackhi_epi32(c0, c1);
    const __m512i t2 = _mm512_unpacklo_epi32(c2, c3);
    const __m512i t3 = _mm512_unpackhi_epi32(c2, c3);
    const __m512i r0 = _mm512_unpacklo_epi64(t0, t2);
    const __m512i r1 = _mm512_unpackhi_epi64(t0, t2);
    const __m512i r2 = _mm512_unpacklo_epi64(t1, t3);
    const __m512i r3 = _mm512_unpackhi_epi64(t1, t3);
    const __m512i a = _mm512_shuffle_i32x4(r0, r1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i b = _mm512_shuffle_i32x4(r2, r3, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i c = _mm512_shuffle_i32x4(r0, r1, _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i d = _mm512_shuffle_i32x4(r2, r3, _MM_SHUFFLE(3, 1, 3, 1));
    _mm512_storeu_si512(out,
                        _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm512_storeu_si512(out + 16,
                        _mm512_shuffle_i32x4(c, d, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm512_storeu_si512(out + 32,
                        _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
    _mm512_storeu_si512(out + 48,
                        _mm512_shuffle_i32x4(c, d, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  // float(p[l] >> 8) for 16 random words: 24-bit integers, exact.
  static T U24ToFloat(const uint32_t* p) {
    return _mm512_cvtepi32_ps(_mm512_srli_epi32(_mm512_loadu_si512(p), 8));
  }
  // a >= b (ordered).
  static M GreaterEqual(T a, T b) {
    return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ);
  }
  static T Set1(float v) { return _mm512_set1_ps(v); }
  static M Replaces(T best, T v) {
    const __mmask16 greater = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);
    const __mmask16 v_nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __mmask16 best_nan = _mm512_cmp_ps_mask(best, best, _CMP_UNORD_Q);
    return static_cast<__mmask16>(greater | (v_nan & ~best_nan));
  }
  static T Select(M m, T a, T b) { return _mm512_mask_blend_ps(m, a, b); }
  // a > b (ordered: false where either is NaN), and the two masks' AND.
  static M Greater(T a, T b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static M AndM(M a, M b) { return static_cast<M>(a & b); }
  static I SelectI(M m, I a, I b) { return _mm512_mask_blend_epi32(m, a, b); }
  static I Set1I(int32_t k) { return _mm512_set1_epi32(k); }
  static void StoreI(int32_t* p, I v) { _mm512_storeu_si512(p, v); }
  __attribute__((always_inline)) static void Transpose(T* r) {
    TransposeAvx512(r);
  }
  __attribute__((always_inline)) static void LoadTransposed(const float* p,
                                                            int64_t stride,
                                                            T* r) {
    LoadTransposeAvx512(p, stride, r);
  }
};

}  // namespace
}  // namespace avx512_lanes

const LaneKernelSet& LaneKernelsAvx512() {
  return avx512_lanes::KernelSet<avx512_lanes::Avx512Lanes>();
}

}  // namespace lockstep::kernels::cpu_internal

#else  // not built for AVX-512: never selected (isa.cc), kept linkable.

namespace lockstep::kernels::cpu_internal {
const LaneKernelSet& LaneKernelsAvx512() { return LaneKernelsAvx2(); }
}  // namespace lockstep::kernels::cpu_internal

#endif
