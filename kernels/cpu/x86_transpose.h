// In-register transposes of a block of float vectors, shared by the AVX2 and
// AVX-512 translation units of the GEMM (gemm_avx2.cc, gemm_avx512.cc) and
// of the lane kernels (lane_kernels_avx2.cc, lane_kernels_avx512.cc). Not a
// public header.
//
// The functions are static and always inlined (a call would pass the
// block through memory): every including unit, built with its own -m
// flags, keeps its own copy, so the linker can never pick an AVX-512 copy
// for an AVX2 caller. Each is compiled only where its ISA is enabled.
#ifndef LOCKSTEP_KERNELS_CPU_X86_TRANSPOSE_H_
#define LOCKSTEP_KERNELS_CPU_X86_TRANSPOSE_H_

#if defined(__AVX2__)
#include <immintrin.h>

#include <cstdint>

namespace lockstep::kernels::cpu_internal {

// r[0 .. 4): each 128-bit lane, as a 4 x 4 matrix (row i in r[i]),
// transposed in place.
__attribute__((always_inline)) static inline void TransposeLanes4x4Avx2(
    __m256* r) {
  const __m256 a = _mm256_unpacklo_ps(r[0], r[1]);
  const __m256 b = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 c = _mm256_unpacklo_ps(r[2], r[3]);
  const __m256 d = _mm256_unpackhi_ps(r[2], r[3]);
  r[0] = _mm256_shuffle_ps(a, c, _MM_SHUFFLE(1, 0, 1, 0));
  r[1] = _mm256_shuffle_ps(a, c, _MM_SHUFFLE(3, 2, 3, 2));
  r[2] = _mm256_shuffle_ps(b, d, _MM_SHUFFLE(1, 0, 1, 0));
  r[3] = _mm256_shuffle_ps(b, d, _MM_SHUFFLE(3, 2, 3, 2));
}

// r[0 .. 8) as an 8 x 8 matrix (row i = r[i]), transposed in place.
__attribute__((always_inline)) static inline void TransposeAvx2(__m256* r) {
  TransposeLanes4x4Avx2(r);
  TransposeLanes4x4Avx2(r + 4);
  const __m256 u0 = r[0], u1 = r[1], u2 = r[2], u3 = r[3];
  r[0] = _mm256_permute2f128_ps(u0, r[4], 0x20);
  r[1] = _mm256_permute2f128_ps(u1, r[5], 0x20);
  r[2] = _mm256_permute2f128_ps(u2, r[6], 0x20);
  r[3] = _mm256_permute2f128_ps(u3, r[7], 0x20);
  r[4] = _mm256_permute2f128_ps(u0, r[4], 0x31);
  r[5] = _mm256_permute2f128_ps(u1, r[5], 0x31);
  r[6] = _mm256_permute2f128_ps(u2, r[6], 0x31);
  r[7] = _mm256_permute2f128_ps(u3, r[7], 0x31);
}

// r[i] = row i of the transpose of the 8 x 8 matrix whose row l is p[l *
// stride .. l * stride + 8): TransposeAvx2 of the loaded rows, its 128-bit
// moves done by the loads (each register two 128-bit halves, the second
// inserted from memory), leaving 16 in-lane shuffles instead of 24.
__attribute__((always_inline)) static inline void LoadTransposeAvx2(
    const float* p, int64_t stride, __m256* r) {
#pragma GCC unroll 8
  for (int g = 0; g < 2; ++g) {
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
      r[4 * g + m] = _mm256_insertf128_ps(
          _mm256_castps128_ps256(_mm_loadu_ps(p + m * stride + 4 * g)),
          _mm_loadu_ps(p + (m + 4) * stride + 4 * g), 1);
    }
  }
  TransposeLanes4x4Avx2(r);
  TransposeLanes4x4Avx2(r + 4);
}

}  // namespace lockstep::kernels::cpu_internal
#endif  // __AVX2__

#if defined(__AVX512F__)
namespace lockstep::kernels::cpu_internal {

// r[0 .. 4): each 128-bit lane, as a 4 x 4 matrix (row i in r[i]),
// transposed in place.
__attribute__((always_inline)) static inline void TransposeLanes4x4Avx512(
    __m512* r) {
  const __m512 a = _mm512_unpacklo_ps(r[0], r[1]);
  const __m512 b = _mm512_unpackhi_ps(r[0], r[1]);
  const __m512 c = _mm512_unpacklo_ps(r[2], r[3]);
  const __m512 d = _mm512_unpackhi_ps(r[2], r[3]);
  r[0] = _mm512_shuffle_ps(a, c, _MM_SHUFFLE(1, 0, 1, 0));
  r[1] = _mm512_shuffle_ps(a, c, _MM_SHUFFLE(3, 2, 3, 2));
  r[2] = _mm512_shuffle_ps(b, d, _MM_SHUFFLE(1, 0, 1, 0));
  r[3] = _mm512_shuffle_ps(b, d, _MM_SHUFFLE(3, 2, 3, 2));
}

// r[0 .. 16) as a 16 x 16 matrix, transposed in place.
__attribute__((always_inline)) static inline void TransposeAvx512(__m512* r) {
  // 4 x 4 blocks of 4 x 4 float blocks.
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) TransposeLanes4x4Avx512(r + i);
  __m512 t[16];
  // Move the 128-bit blocks: row i of the result takes block (i / 4) of
  // rows 4 b + (i % 4), b = 0 .. 3.
#pragma GCC unroll 16
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
  }
}

// r[i] = row i of the transpose of the 16 x 16 matrix whose row l is p[l *
// stride .. l * stride + 16): TransposeAvx512 of the loaded rows, with its
// 128-bit block moves done by the loads. Register 4 g + m is assembled from
// the 128-bit blocks g of rows m, m + 4, m + 8 and m + 12 (one load, three
// inserts from memory, which may issue on either vector port); a 4 x 4
// transpose within the 128-bit lanes of each group of four then leaves
// column 4 g + c, rows 0 .. 15 in order, in register 4 g + c: 32 shuffles,
// where TransposeAvx512 takes 64 on the one shuffle port.
__attribute__((always_inline)) static inline void LoadTransposeAvx512(
    const float* p, int64_t stride, __m512* r) {
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
      const float* q = p + 4 * g;
      __m512 v = _mm512_castps128_ps512(_mm_loadu_ps(q + m * stride));
      v = _mm512_insertf32x4(v, _mm_loadu_ps(q + (m + 4) * stride), 1);
      v = _mm512_insertf32x4(v, _mm_loadu_ps(q + (m + 8) * stride), 2);
      v = _mm512_insertf32x4(v, _mm_loadu_ps(q + (m + 12) * stride), 3);
      r[4 * g + m] = v;
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < 16; g += 4) TransposeLanes4x4Avx512(r + g);
}

}  // namespace lockstep::kernels::cpu_internal
#endif  // __AVX512F__

#endif  // LOCKSTEP_KERNELS_CPU_X86_TRANSPOSE_H_
