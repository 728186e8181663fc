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
  static T Add(T a, T b) { return _mm512_add_ps(a, b); }
  static T Sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T Mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T Div(T a, T b) { return _mm512_div_ps(a, b); }
  static T Fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T Set1(float v) { return _mm512_set1_ps(v); }
  static M Replaces(T best, T v) {
    const __mmask16 greater = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);
    const __mmask16 v_nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __mmask16 best_nan = _mm512_cmp_ps_mask(best, best, _CMP_UNORD_Q);
    return static_cast<__mmask16>(greater | (v_nan & ~best_nan));
  }
  static T Select(M m, T a, T b) { return _mm512_mask_blend_ps(m, a, b); }
  static I SelectI(M m, I a, I b) { return _mm512_mask_blend_epi32(m, a, b); }
  static I Set1I(int32_t k) { return _mm512_set1_epi32(k); }
  static void StoreI(int32_t* p, I v) { _mm512_storeu_si512(p, v); }
  static void Transpose(T* r) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    // 4 x 4 blocks of 4 x 4 float blocks.
    for (int i = 0; i < 16; i += 4) {
      r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
      r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    // Move the 128-bit blocks: row i of the result takes block (i / 4) of
    // rows 4 b + (i % 4), b = 0 .. 3.
    for (int i = 0; i < 4; ++i) {
      t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
      t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
      t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
      t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; ++i) {
      r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
      r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
      r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
      r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
    }
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
