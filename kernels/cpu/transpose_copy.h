// The transposing copy of the CPU convolutions' data movement, shared by the
// packers (conv_gemm.cc) and the GEMM's write-back (gemm_impl.h). Not a
// public header.
//
// Static and always inlined, like x86_transpose.h: each including unit,
// built with its own -m flags, keeps its own copy, so the linker can never
// pick a copy built for another ISA.
#ifndef LOCKSTEP_KERNELS_CPU_TRANSPOSE_COPY_H_
#define LOCKSTEP_KERNELS_CPU_TRANSPOSE_COPY_H_

#include <cstdint>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace lockstep::kernels::cpu_internal {

// dst[j * dst_stride + i] = src[i * src_stride + j] for i < rows, j < cols.
// With SSE, 4 x 4 blocks go through registers, so each store writes four
// consecutive floats of dst instead of one (the strided single stores were
// the cost); the rest, and other architectures, one float at a time. Pure
// data movement.
__attribute__((always_inline)) static inline void TransposeCopy(
    const float* src, int64_t src_stride, int64_t rows, int64_t cols,
    float* dst, int64_t dst_stride) {
  int64_t i = 0;
#if defined(__SSE__)
  for (; i + 4 <= rows; i += 4) {
    const float* s0 = src + i * src_stride;
    const float* s1 = s0 + src_stride;
    const float* s2 = s1 + src_stride;
    const float* s3 = s2 + src_stride;
    float* d = dst + i;
    int64_t j = 0;
    for (; j + 4 <= cols; j += 4, d += 4 * dst_stride) {
      __m128 r0 = _mm_loadu_ps(s0 + j);
      __m128 r1 = _mm_loadu_ps(s1 + j);
      __m128 r2 = _mm_loadu_ps(s2 + j);
      __m128 r3 = _mm_loadu_ps(s3 + j);
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      _mm_storeu_ps(d, r0);
      _mm_storeu_ps(d + dst_stride, r1);
      _mm_storeu_ps(d + 2 * dst_stride, r2);
      _mm_storeu_ps(d + 3 * dst_stride, r3);
    }
    for (; j < cols; ++j, d += dst_stride) {
      d[0] = s0[j];
      d[1] = s1[j];
      d[2] = s2[j];
      d[3] = s3[j];
    }
  }
#endif
  for (; i < rows; ++i) {
    const float* si = src + i * src_stride;
    for (int64_t j = 0; j < cols; ++j) dst[j * dst_stride + i] = si[j];
  }
}

}  // namespace lockstep::kernels::cpu_internal

#endif  // LOCKSTEP_KERNELS_CPU_TRANSPOSE_COPY_H_
