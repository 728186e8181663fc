// The AVX2 lane kernels: built with -mavx2 -mfma (kernels/cpu/BUILD).
#include "kernels/cpu/lane_kernels.h"

#define LS_LANE_ISA_NS avx2_lanes
#include "kernels/cpu/lane_kernels_impl.h"

#if defined(__AVX2__)
#include <immintrin.h>

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
  static T Add(T a, T b) { return _mm256_add_ps(a, b); }
  static T Sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T Mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T Div(T a, T b) { return _mm256_div_ps(a, b); }
  static T Fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T Set1(float v) { return _mm256_set1_ps(v); }
  static M Replaces(T best, T v) {
    const __m256 greater = _mm256_cmp_ps(v, best, _CMP_GT_OQ);
    const __m256 v_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    const __m256 best_nan = _mm256_cmp_ps(best, best, _CMP_UNORD_Q);
    return _mm256_or_ps(greater, _mm256_andnot_ps(best_nan, v_nan));
  }
  static T Select(M m, T a, T b) { return _mm256_blendv_ps(a, b, m); }
  static I SelectI(M m, I a, I b) {
    return _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), m));
  }
  static I Set1I(int32_t k) { return _mm256_set1_epi32(k); }
  static void StoreI(int32_t* p, I v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  }
  static void Transpose(T* r) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]);
    const __m256 t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]);
    const __m256 t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]);
    const __m256 t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]);
    const __m256 t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
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
