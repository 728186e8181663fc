// The AVX-512F GEMM path: built with -mavx512f -mavx2 -mfma
// (kernels/cpu/BUILD).
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/gemm.h"

#if defined(__AVX512F__)
// gcc 12's AVX-512 intrinsics pass _mm512_undefined_ps() as the pass-through
// operand, which -W(maybe-)uninitialized reports (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/x86_transpose.h"

#define LS_GEMM_ISA_NS avx512_isa
#include "kernels/cpu/gemm_impl.h"

namespace lockstep::kernels::cpu_internal {
namespace avx512_isa {
namespace {

struct Avx512Vec {
  using T = __m512;
  static constexpr int kWidth = 16;
  static T Zero() { return _mm512_setzero_ps(); }
  static T Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static void Stream(float* p, T v) { _mm512_stream_ps(p, v); }
  static void Fence() { _mm_sfence(); }
  static T Set1(float x) { return _mm512_set1_ps(x); }
  static T Fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T Add(T a, T b) { return _mm512_add_ps(a, b); }
  // r[0 .. 16) as a 16 x 16 matrix (row i = r[i]), transposed in place.
  __attribute__((always_inline)) static void Transpose(T* r) {
    TransposeAvx512(r);
  }
  // r[i] = row i of the transpose of the 16 x 16 matrix whose row l is
  // p[l * stride ..].
  __attribute__((always_inline)) static void LoadTransposed(const float* p,
                                                            int64_t stride,
                                                            T* r) {
    LoadTransposeAvx512(p, stride, r);
  }
  // The 8 x 16 matrix of rows r[0 .. 8) stored by columns: column j's eight
  // values at dst + j * stride (GemmDriver::StoreTileByColumns). 24 shuffles
  // and 16 stores, where a transposing copy through memory takes 64
  // shuffles and 40 loads and stores.
  __attribute__((always_inline)) static void StoreColumns8(const T* r,
                                                           float* dst,
                                                           int64_t stride) {
    T top[4] = {r[0], r[1], r[2], r[3]};
    T bottom[4] = {r[4], r[5], r[6], r[7]};
    // 128-bit lane l of top[i] (bottom[i]): column 4 l + i, rows 0 - 3
    // (4 - 7).
    TransposeLanes4x4Avx512(top);
    TransposeLanes4x4Avx512(bottom);
    const __m512i lanes01 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5,
                                              6, 7, 20, 21, 22, 23);
    const __m512i lanes23 = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12,
                                              13, 14, 15, 28, 29, 30, 31);
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      // Columns i and 4 + i; 8 + i and 12 + i.
      const T c01 = _mm512_permutex2var_ps(top[i], lanes01, bottom[i]);
      const T c23 = _mm512_permutex2var_ps(top[i], lanes23, bottom[i]);
      StoreHalves(c01, dst + i * stride, dst + (4 + i) * stride);
      StoreHalves(c23, dst + (8 + i) * stride, dst + (12 + i) * stride);
    }
  }

 private:
  __attribute__((always_inline)) static void StoreHalves(T v, float* lo,
                                                         float* hi) {
    _mm256_storeu_ps(lo, _mm512_castps512_ps256(v));
    _mm256_storeu_pd(reinterpret_cast<double*>(hi),
                     _mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  }
};

}  // namespace
}  // namespace avx512_isa

void GemmAvx512(const canonical::MatMulShape& s, const float* a, const float* b,
                float* c, int64_t chunk, const GemmPacking& packing,
                ThreadPool* pool) {
  using avx512_isa::Avx512Vec;
  // A product at most 8 columns wide (a convolution with 8 or fewer output
  // channels, or input channels for grad_input: the channels are the
  // micro-kernel's lanes) on 12 x 8 tiles of 256-bit vectors: a 16-lane
  // tile would multiply-add at least half its lanes for nothing. Where a
  // 512-bit fma costs two 256-bit ones (Zen 4) the 8-lane tiles do twice
  // the useful work per cycle, and where it costs one they do as much
  // (docs/benchmarks.md, "... eight channels on 8-lane tiles, eight rows on
  // 8-row tiles"). Every tile shape gives each output the same terms in
  // the same order, so the same bits.
  if (s.cols <= 8) {
    avx512_isa::GemmDriver<avx512_isa::Avx2Vec, 12, 1>::Run(s, a, b, c, chunk,
                                                            packing, pool);
    return;
  }
  // An indirect product (a convolution's input read in place, its rows
  // output pixels, input pixels or taps) on 8-row tiles. Each reduction
  // step loads one A value per row through the tile's row starts: 8 of
  // them stay in general registers, 12 do not (the compiler keeps some in
  // vector registers or on the stack and moves one back every step) unless
  // the rows are adjacent floats (the one-base-register case of
  // GemmDriver), which 12-row tiles are not where they cross the end of an
  // output row of 16 or 32 pixels. And a 1 x 1 grad_weight's rows (its
  // input channels, 16 - 256) pad less. On the AMD EPYC host the 1 x 1
  // stride-2 64 -> 128 grad_weight rose from 77 to 92 GFLOP/s, the
  // 16-channel 3 x 3 grad_weight from 87 to 94, the 3 x 3 stride-2 8 -> 16
  // forward from 65 to 69 (docs/benchmarks.md, "... 8-row tiles where
  // 12-row ones pad, and for indirect products").
  const bool indirect = packing.a_base != nullptr;
  // A product at most one vector wide (a convolution with 9 - 16 output
  // channels, or input channels for grad_input) on 12 x 16 or 8 x 16
  // tiles: 12 x 32 ones would leave half their lanes or more empty.
  if (s.cols <= Avx512Vec::kWidth) {
    if (indirect) {
      avx512_isa::GemmDriver<avx512_isa::Avx512Vec, 8, 1>::Run(
          s, a, b, c, chunk, packing, pool);
    } else {
      avx512_isa::GemmDriver<avx512_isa::Avx512Vec, 12, 1>::Run(
          s, a, b, c, chunk, packing, pool);
    }
    return;
  }
  // Eight rows or fewer (a 1 x 1 convolution's packed product into few
  // channels, a small batch's dense layer) on 8 x 48 tiles: 12-row ones
  // would multiply-add a third of theirs or more for nothing.
  if (s.rows <= 8) {
    avx512_isa::GemmDriver<avx512_isa::Avx512Vec, 8, 3>::Run(s, a, b, c, chunk,
                                                             packing, pool);
    return;
  }
  // Otherwise 8 x 32 tiles for an indirect product (above), and where
  // 12 x 32 ones would pad the rows by 2.5 % or more beyond them (64 rows:
  // 8 tiles of 8 against 6 of 12, the last a third full): a stem's
  // packed forward into 64 channels, an attention head's 256-token
  // products, a 16-channel convolution's GEMM. On full rows both tiles run
  // at the fma bound (a 2048^3 product at the same speed within noise on
  // the AMD EPYC host), and where a product's rows are thousands of pixels
  // or tokens the last tile's padding is noise, so those keep the 12-row
  // tiles.
  const int64_t pad12 = (s.rows + 11) / 12 * 12;
  const int64_t pad8 = (s.rows + 7) / 8 * 8;
  if (indirect || (pad12 - pad8) * 40 >= pad12) {
    avx512_isa::GemmDriver<avx512_isa::Avx512Vec, 8, 2>::Run(s, a, b, c, chunk,
                                                             packing, pool);
    return;
  }
  avx512_isa::GemmDriver<avx512_isa::Avx512Vec, 12, 2>::Run(s, a, b, c, chunk,
                                                            packing, pool);
}

void GatherEvenRowsAvx512(const float* src, int64_t src_stride, int64_t rows,
                          int64_t len, float* dst, int64_t dst_stride,
                          int64_t n) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20,
                                         22, 24, 26, 28, 30);
  for (int64_t i = 0; i < rows; ++i, src += src_stride, dst += dst_stride) {
    int64_t c = 0;
    for (; c + 16 <= n && 2 * c + 32 <= len; c += 16) {
      _mm512_storeu_ps(
          dst + c, _mm512_permutex2var_ps(_mm512_loadu_ps(src + 2 * c), even,
                                          _mm512_loadu_ps(src + 2 * c + 16)));
    }
    for (; c < n; c += 16) {
      // The floats of the row from 2c on, at most 32, and at most 16 out.
      const int64_t have = std::min<int64_t>(len - 2 * c, 32);
      const auto mask = [](int64_t k) {
        return static_cast<__mmask16>(k >= 16  ? 0xFFFFu
                                      : k <= 0 ? 0u
                                               : (1u << k) - 1);
      };
      const __m512 v = _mm512_permutex2var_ps(
          _mm512_maskz_loadu_ps(mask(have), src + 2 * c), even,
          _mm512_maskz_loadu_ps(mask(have - 16), src + 2 * c + 16));
      _mm512_mask_storeu_ps(dst + c, mask(n - c), v);
    }
  }
}

void CopyRowsAvx512(const float* src, int64_t src_stride, int64_t rows,
                    float* dst, int64_t dst_stride, int64_t n) {
  const int64_t whole = n / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - whole)) - 1);
  for (int64_t i = 0; i < rows; ++i, src += src_stride, dst += dst_stride) {
    for (int64_t c = 0; c < whole; c += 16) {
      _mm512_storeu_ps(dst + c, _mm512_loadu_ps(src + c));
    }
    if (tail != 0) {
      _mm512_mask_storeu_ps(dst + whole, tail,
                            _mm512_maskz_loadu_ps(tail, src + whole));
    }
  }
}

void DepthwiseForwardAvx512(const spatial::Conv2dShape& s, const float* x,
                            const float* w, float* y, ThreadPool* pool) {
  avx512_isa::DepthwiseForward<avx512_isa::Avx512Vec>(s, x, w, y, pool);
}

void DepthwiseGradInputAvx512(const spatial::Conv2dShape& s, const float* dy,
                              const float* w, float* dx, ThreadPool* pool) {
  avx512_isa::DepthwiseGradInput<avx512_isa::Avx512Vec>(s, dy, w, dx, pool);
}

void DepthwiseGradWeightAvx512(const spatial::Conv2dShape& s, const float* x,
                               const float* dy, float* dw, int64_t chunk,
                               ThreadPool* pool) {
  avx512_isa::DepthwiseGradWeight<avx512_isa::Avx512Vec>(s, x, dy, dw, chunk,
                                                         pool);
}

void TransposeCopyAvx512(const float* src, int64_t src_stride, int64_t rows,
                         int64_t cols, float* dst, int64_t dst_stride) {
  int64_t i = 0;
  for (; i + 16 <= rows; i += 16) {
    const float* s = src + i * src_stride;
    float* d = dst + i;
    int64_t j = 0;
    for (; j + 16 <= cols; j += 16) {
      __m512 r[16];
      LoadTransposeAvx512(s + j, src_stride, r);
#pragma GCC unroll 16
      for (int c = 0; c < 16; ++c) {
        _mm512_storeu_ps(d + (j + c) * dst_stride, r[c]);
      }
    }
    if (j < cols) {
      TransposeCopy(s + j, src_stride, 16, cols - j, d + j * dst_stride,
                    dst_stride);
    }
  }
  if (i < rows) {
    TransposeCopy(src + i * src_stride, src_stride, rows - i, cols, dst + i,
                  dst_stride);
  }
}

void ExpandPlanesAvx512(const float* src, int64_t planes, int64_t src_plane,
                        const uint16_t* masks, int64_t chunks, float* dst,
                        int64_t dst_plane) {
  const int64_t tail = dst_plane - 16 * (chunks - 1);
  const __mmask16 last = static_cast<__mmask16>((1u << tail) - 1);
  for (int64_t i = 0; i < planes; ++i) {
    const float* s = src + i * src_plane;
    float* d = dst + i * dst_plane;
    for (int64_t k = 0; k + 1 < chunks; ++k) {
      const __mmask16 m = masks[k];
      _mm512_storeu_ps(d + 16 * k, _mm512_maskz_expandloadu_ps(m, s));
      s += __builtin_popcount(m);
    }
    _mm512_mask_storeu_ps(d + 16 * (chunks - 1), last,
                          _mm512_maskz_expandloadu_ps(masks[chunks - 1], s));
  }
}

}  // namespace lockstep::kernels::cpu_internal

#else  // not built for AVX-512: never selected (isa.cc), kept linkable.

namespace lockstep::kernels::cpu_internal {
void GemmAvx512(const canonical::MatMulShape& s, const float* a, const float* b,
                float* c, int64_t chunk, const GemmPacking& packing,
                ThreadPool* pool) {
  GemmScalar(s, a, b, c, chunk, packing, pool);
}
void DepthwiseForwardAvx512(const spatial::Conv2dShape& s, const float* x,
                            const float* w, float* y, ThreadPool* pool) {
  DepthwiseForwardScalar(s, x, w, y, pool);
}
void DepthwiseGradInputAvx512(const spatial::Conv2dShape& s, const float* dy,
                              const float* w, float* dx, ThreadPool* pool) {
  DepthwiseGradInputScalar(s, dy, w, dx, pool);
}
void DepthwiseGradWeightAvx512(const spatial::Conv2dShape& s, const float* x,
                               const float* dy, float* dw, int64_t chunk,
                               ThreadPool* pool) {
  DepthwiseGradWeightScalar(s, x, dy, dw, chunk, pool);
}
void GatherEvenRowsAvx512(const float* src, int64_t src_stride, int64_t rows,
                          int64_t, float* dst, int64_t dst_stride, int64_t n) {
  for (int64_t i = 0; i < rows; ++i, src += src_stride, dst += dst_stride) {
    for (int64_t c = 0; c < n; ++c) dst[c] = src[2 * c];
  }
}
void CopyRowsAvx512(const float* src, int64_t src_stride, int64_t rows,
                    float* dst, int64_t dst_stride, int64_t n) {
  for (int64_t i = 0; i < rows; ++i, src += src_stride, dst += dst_stride) {
    for (int64_t c = 0; c < n; ++c) dst[c] = src[c];
  }
}
void TransposeCopyAvx512(const float* src, int64_t src_stride, int64_t rows,
                         int64_t cols, float* dst, int64_t dst_stride) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      dst[j * dst_stride + i] = src[i * src_stride + j];
    }
  }
}
void ExpandPlanesAvx512(const float* src, int64_t planes, int64_t src_plane,
                        const uint16_t* masks, int64_t, float* dst,
                        int64_t dst_plane) {
  for (int64_t i = 0; i < planes; ++i) {
    const float* s = src + i * src_plane;
    for (int64_t q = 0; q < dst_plane; ++q) {
      dst[i * dst_plane + q] = (masks[q / 16] >> (q % 16)) & 1 ? *s++ : 0.0f;
    }
  }
}
}  // namespace lockstep::kernels::cpu_internal

#endif
