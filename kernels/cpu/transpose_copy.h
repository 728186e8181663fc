// The transposing copy of the CPU convolutions' data movement, shared by the
// packers (conv_gemm.cc) and the GEMM's write-back (gemm_impl.h). Not a
// public header.
//
// Static and always inlined, like x86_transpose.h: each including unit,
// built with its own -m flags, keeps its own copy, so the linker can never
// pick a copy built for another ISA.
#ifndef LOCKSTEP_KERNELS_CPU_TRANSPOSE_COPY_H_
#define LOCKSTEP_KERNELS_CPU_TRANSPOSE_COPY_H_

#include <algorithm>
#include <cstdint>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace lockstep::kernels::cpu_internal {

// dst[j * dst_stride + i] = src[i * src_stride + kStep * j] for i < rows,
// j < cols (kStep 1 or 2). With SSE, 4 x 4 blocks of the first
// vector_cols columns (at most cols) go through registers, so each store
// writes four consecutive floats of dst instead of one (the strided single
// stores were the cost), each row of a block one load (kStep 2: two loads
// and a shuffle, which read src up to kStep * vector_cols floats into each
// row); the rest, and other architectures, one float at a time. Pure data
// movement.
template <int kStep>
__attribute__((always_inline)) static inline void TransposeCopyStep(
    const float* src, int64_t src_stride, int64_t rows, int64_t cols,
    int64_t vector_cols, float* dst, int64_t dst_stride) {
  static_assert(kStep == 1 || kStep == 2);
  int64_t i = 0;
#if defined(__SSE__)
  auto load4 = [](const float* s) {
    if constexpr (kStep == 1) {
      return _mm_loadu_ps(s);
    } else {
      return _mm_shuffle_ps(_mm_loadu_ps(s), _mm_loadu_ps(s + 4),
                            _MM_SHUFFLE(2, 0, 2, 0));
    }
  };
  for (; i + 4 <= rows; i += 4) {
    const float* s0 = src + i * src_stride;
    const float* s1 = s0 + src_stride;
    const float* s2 = s1 + src_stride;
    const float* s3 = s2 + src_stride;
    float* d = dst + i;
    int64_t j = 0;
    for (; j + 4 <= vector_cols; j += 4, d += 4 * dst_stride) {
      __m128 r0 = load4(s0 + kStep * j);
      __m128 r1 = load4(s1 + kStep * j);
      __m128 r2 = load4(s2 + kStep * j);
      __m128 r3 = load4(s3 + kStep * j);
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      _mm_storeu_ps(d, r0);
      _mm_storeu_ps(d + dst_stride, r1);
      _mm_storeu_ps(d + 2 * dst_stride, r2);
      _mm_storeu_ps(d + 3 * dst_stride, r3);
    }
    for (; j < cols; ++j, d += dst_stride) {
      d[0] = s0[kStep * j];
      d[1] = s1[kStep * j];
      d[2] = s2[kStep * j];
      d[3] = s3[kStep * j];
    }
  }
#endif
  for (; i < rows; ++i) {
    const float* si = src + i * src_stride;
    for (int64_t j = 0; j < cols; ++j) dst[j * dst_stride + i] = si[kStep * j];
  }
}

// dst[j * dst_stride + i] = src[i * src_stride + j] for i < rows, j < cols.
__attribute__((always_inline)) static inline void TransposeCopy(
    const float* src, int64_t src_stride, int64_t rows, int64_t cols,
    float* dst, int64_t dst_stride) {
  TransposeCopyStep<1>(src, src_stride, rows, cols, cols, dst, dst_stride);
}

// dst[j * dst_stride + i] = src[i * src_stride + 2 * j] for i < rows, j <
// cols, where each row of src holds len >= 2 * cols - 1 floats: every
// other column; the 4 x 4 blocks' loads stay inside the rows.
__attribute__((always_inline)) static inline void TransposeCopyEven(
    const float* src, int64_t src_stride, int64_t len, int64_t rows,
    int64_t cols, float* dst, int64_t dst_stride) {
  TransposeCopyStep<2>(src, src_stride, rows, cols, std::min(cols, len / 2),
                       dst, dst_stride);
}

}  // namespace lockstep::kernels::cpu_internal

#endif  // LOCKSTEP_KERNELS_CPU_TRANSPOSE_COPY_H_
