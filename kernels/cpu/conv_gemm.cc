#include "kernels/cpu/conv_gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "kernels/canonical/reduce.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/lane_kernels.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/transpose_copy.h"
#include "kernels/ops/dense.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace lockstep::kernels {
namespace {

namespace c = ::lockstep::canonical;
namespace sp = ::lockstep::spatial;

// Whether a convolution has a 1 x 1 kernel and no padding: every output
// pixel reads one input pixel per channel, at (oh * stride_h, ow *
// stride_w).
bool Unpadded1x1(const sp::Conv2dShape& s) {
  return s.k_h == 1 && s.k_w == 1 && s.pad_top == 0 && s.pad_bottom == 0 &&
         s.pad_left == 0 && s.pad_right == 0;
}

// Outputs o in [*lo, *hi) of an axis of `out` outputs whose tap
// o * stride + off lies inside [0, in).
void TapRange(int64_t in, int64_t out, int64_t stride, int64_t off, int64_t* lo,
              int64_t* hi) {
  const int64_t first = -off <= 0 ? 0 : (-off + stride - 1) / stride;
  const int64_t last = in - 1 - off;  // o * stride <= last
  *hi = last < 0 ? 0 : last / stride + 1;
  if (*hi > out) *hi = out;
  *lo = first < *hi ? first : *hi;
}

// Per kernel column kw: the outputs [lo[kw], hi[kw]) of an axis whose tap
// o * stride + kw * dilation - pad lies inside [0, in).
struct TapRanges {
  std::vector<int64_t> lo, hi;
  TapRanges(int64_t in, int64_t out, int64_t k_size, int64_t stride,
            int64_t pad, int64_t dilation)
      : lo(k_size), hi(k_size) {
    for (int64_t k = 0; k < k_size; ++k) {
      TapRange(in, out, stride, k * dilation - pad, &lo[k], &hi[k]);
    }
  }
};

// For grad_input: map[k * in + i] = the output o whose tap k reads input i
// (o * stride = i + pad - k * dilation, 0 <= o < out), or -1.
std::vector<int64_t> TapSources(int64_t in, int64_t out, int64_t k_size,
                                int64_t stride, int64_t pad, int64_t dilation) {
  std::vector<int64_t> map(k_size * in, -1);
  for (int64_t k = 0; k < k_size; ++k) {
    for (int64_t i = 0; i < in; ++i) {
      const int64_t t = i + pad - k * dilation;
      if (t >= 0 && t % stride == 0 && t / stride < out) {
        map[k * in + i] = t / stride;
      }
    }
  }
  return map;
}

// dst[0, n) = src[0, n), and dst[0, n) = +0.0f. (libc's memcpy and memset
// beat a loop even for the 4 - 8 float runs of small images: GCC turns a
// short zeroing loop into `rep stos`, which costs several times more.)
inline void CopyRun(float* dst, const float* src, int64_t n) {
  std::memcpy(dst, src, n * sizeof(float));
}
inline void ZeroRun(float* dst, int64_t n) {
  std::memset(dst, 0, n * sizeof(float));
}

// Zeroes lanes [count, width) of `rows` packed rows.
void ZeroTail(int64_t rows, int count, int width, float* dst) {
  if (count == width) return;
  for (int64_t p = 0; p < rows; ++p) {
    for (int v = count; v < width; ++v) dst[p * width + v] = 0.0f;
  }
}

// The packers below write k blocks of GEMM panels (GemmPackFn, gemm.h)
// straight from the NCHW tensors, with exactly the values the lowered
// matrices of the canonical reductions hold (zeros at padding taps and
// stride holes).

// The columns [first, first + count) of a lowered matrix whose columns are
// (image, row, col), `rows` x `cols` per image, in runs along one row of
// one image: run(v0, len, image, row, col0) for columns first + v0 ..
// first + v0 + len - 1, in order.
template <class F>
void ForColumnRuns(int64_t first, int64_t count, int64_t rows, int64_t cols,
                   F&& run) {
  const int64_t per_image = rows * cols;
  int64_t image = first / per_image;
  int64_t row = first % per_image / cols;
  int64_t col0 = first % cols;
  for (int64_t v0 = 0; v0 < count;) {
    const int64_t len = std::min(count - v0, cols - col0);
    run(v0, len, image, row, col0);
    v0 += len;
    col0 = 0;
    if (++row == rows) {
      row = 0;
      ++image;
    }
  }
}

// The rows [p_begin, p_begin + p_count) of a depth (channel, kh, kw), as
// calls row(p - p_begin, channel, kh, kw) in order: the depth's taps walked
// like the columns (image, row, col) of ForColumnRuns, one call per tap.
template <class F>
void ForTapRows(int64_t k_h, int64_t k_w, int64_t p_begin, int64_t p_count,
                F&& row) {
  ForColumnRuns(
      p_begin, p_count, k_h, k_w,
      [&](int64_t i0, int64_t len, int64_t ch, int64_t kh, int64_t kw0) {
        for (int64_t j = 0; j < len; ++j) row(i0 + j, ch, kh, kw0 + j);
      });
}

// Forward, B = im2col(x) of one group for images n0 .. n0 + count - 1:
// rows (cl, kh, kw), columns (image, oh, ow).
struct ForwardB {
  const sp::Conv2dShape* s;
  const float* x;  // image n0, the group's first input plane
  int64_t out_h, out_w, cig;
  const TapRanges* ow_range;  // per kw

  static void Pack(const void* ctx, int64_t first, int count, int width,
                   int64_t p_begin, int64_t p_count, float* dst) {
    const ForwardB& f = *static_cast<const ForwardB*>(ctx);
    const sp::Conv2dShape& s = *f.s;
    const int64_t plane_size = s.h * s.w;
    // Runs of columns on one output row of one image.
    ForColumnRuns(
        first, count, f.out_h, f.out_w,
        [&](int64_t v0, int64_t len, int64_t image, int64_t oh, int64_t ow0) {
          const float* image_x = f.x + image * s.c_in * plane_size;
          ForTapRows(
              s.k_h, s.k_w, p_begin, p_count,
              [&](int64_t i, int64_t cl, int64_t kh, int64_t kw) {
                float* col = dst + i * width + v0;
                const int64_t ih =
                    oh * s.stride_h + kh * s.dilation_h - s.pad_top;
                if (ih < 0 || ih >= s.h) {
                  ZeroRun(col, len);
                  return;
                }
                const float* src = image_x + cl * plane_size + ih * s.w;
                const int64_t off = kw * s.dilation_w - s.pad_left;
                // Taps t with ow0 + t in [lo, hi) lie inside the row.
                const int64_t lo =
                    std::clamp<int64_t>(f.ow_range->lo[kw] - ow0, 0, len);
                const int64_t hi =
                    std::clamp<int64_t>(f.ow_range->hi[kw] - ow0, lo, len);
                for (int64_t t = 0; t < lo; ++t) col[t] = 0.0f;
                const int64_t base = ow0 * s.stride_w + off;  // tap t = 0
                if (s.stride_w == 1) {
                  CopyRun(col + lo, src + base + lo, hi - lo);
                } else {
                  for (int64_t t = lo; t < hi; ++t) {
                    col[t] = src[base + t * s.stride_w];
                  }
                }
                for (int64_t t = hi; t < len; ++t) col[t] = 0.0f;
              });
        });
    ZeroTail(p_count, count, width, dst);
  }
};

// grad_input, B = gather(dy) of one group for images n0 .. n0 + count - 1:
// rows (j, kh, kw), columns (image, ih, iw); the dy tap dx[ih, iw] reads,
// or zero.
struct GradInputB {
  const sp::Conv2dShape* s;
  const float* dy;  // image n0, the group's first output plane
  int64_t out_h, out_w, cog;
  const int64_t* oh_of;  // TapSources of the rows
  const int64_t* ow_of;  // and of the columns

  static void Pack(const void* ctx, int64_t first, int count, int width,
                   int64_t p_begin, int64_t p_count, float* dst) {
    const GradInputB& f = *static_cast<const GradInputB*>(ctx);
    const sp::Conv2dShape& s = *f.s;
    const int64_t pix = f.out_h * f.out_w;
    ForColumnRuns(
        first, count, s.h, s.w,
        [&](int64_t v0, int64_t len, int64_t image, int64_t ih, int64_t iw0) {
          const float* image_dy = f.dy + image * s.c_out * pix;
          ForTapRows(s.k_h, s.k_w, p_begin, p_count,
                     [&](int64_t i, int64_t jc, int64_t kh, int64_t kw) {
                       float* col = dst + i * width + v0;
                       const int64_t oh = f.oh_of[kh * s.h + ih];
                       if (oh < 0) {
                         ZeroRun(col, len);
                         return;
                       }
                       const float* src = image_dy + jc * pix + oh * f.out_w;
                       if (s.stride_w == 1) {
                         // ow = iw + off: taps t with 0 <= iw0+off+t < OW.
                         const int64_t off = s.pad_left - kw * s.dilation_w;
                         const int64_t lo =
                             std::clamp<int64_t>(-(iw0 + off), 0, len);
                         const int64_t hi = std::clamp<int64_t>(
                             f.out_w - (iw0 + off), lo, len);
                         for (int64_t t = 0; t < lo; ++t) col[t] = 0.0f;
                         CopyRun(col + lo, src + iw0 + off + lo, hi - lo);
                         for (int64_t t = hi; t < len; ++t) col[t] = 0.0f;
                         return;
                       }
                       const int64_t* ow = f.ow_of + kw * s.w + iw0;
                       for (int64_t t = 0; t < len; ++t) {
                         col[t] = ow[t] >= 0 ? src[ow[t]] : 0.0f;
                       }
                     });
        });
    ZeroTail(p_count, count, width, dst);
  }
};

// The rows [p_begin, p_begin + p_count) of a depth (n, q) with q in [0,
// per_image), as calls run(i, n, q0, q1): rows i .. i + q1 - q0 - 1 are
// image n's q0 .. q1 - 1.
template <class F>
void ForImageRuns(int64_t per_image, int64_t p_begin, int64_t p_count,
                  F&& run) {
  for (int64_t p = p_begin; p < p_begin + p_count;) {
    const int64_t n = p / per_image;
    const int64_t q0 = p % per_image;
    const int64_t q1 = std::min(per_image, q0 + (p_begin + p_count - p));
    run(p - p_begin, n, q0, q1);
    p += q1 - q0;
  }
}

// Whether `isa` is AVX-512 and this CPU runs it: the data-movement helpers
// built for AVX-512 in gemm_avx512.cc (cpu_internal::...Avx512) apply.
bool OnAvx512(CpuIsa isa) {
  return isa == CpuIsa::kAvx512 && CpuIsaSupported(CpuIsa::kAvx512);
}

using TransposeCopyFn = void (*)(const float*, int64_t, int64_t, int64_t,
                                 float*, int64_t);
// cpu_internal::TransposeCopy for `isa`: with AVX-512 16 x 16 blocks
// through registers (cpu_internal::TransposeCopyAvx512), where the SSE
// copy moves 4 x 4. Pure data movement. Measured on one core, each call
// alternating with the SSE copy (docs/benchmarks.md, "... grad_weight's
// packers by 16 x 16 blocks"): 1 x 1 grad_weights at 16 px, batch 8 (x
// packed as the taps' lanes), 48 -> 12 +43 %, 8 -> 48 +28 %; 3 x 3 ones
// (dy packed) at 32 and 16 px +1 - 4.5 %, at 8 and 4 px (runs of 64 and
// 16 pixels) within noise.
void TransposeCopyPortable(const float* src, int64_t src_stride, int64_t rows,
                           int64_t cols, float* dst, int64_t dst_stride) {
  cpu_internal::TransposeCopy(src, src_stride, rows, cols, dst, dst_stride);
}
TransposeCopyFn TransposeCopyFor(CpuIsa isa) {
  return OnAvx512(isa) ? &cpu_internal::TransposeCopyAvx512
                       : &TransposeCopyPortable;
}

// grad_weight of one group: its two operands, each packed with the lanes
// along its own axis and the rows along (n, oh, ow).
struct GradWeightOperands {
  const sp::Conv2dShape* s;
  const float* x;   // image 0, the group's first input plane
  const float* dy;  // image 0, the group's first output plane
  int64_t out_h, out_w;
  const TapRanges* ow_range;
  TransposeCopyFn transpose;  // TransposeCopyFor(isa)

  // Lanes = taps (cl, kh, kw): im2col(x)^T, the values the forward read.
  static void PackTaps(const void* ctx, int64_t first, int count, int width,
                       int64_t p_begin, int64_t p_count, float* dst) {
    const GradWeightOperands& f = *static_cast<const GradWeightOperands*>(ctx);
    const sp::Conv2dShape& s = *f.s;
    const int64_t plane_size = s.h * s.w;
    const int64_t kk = s.k_h * s.k_w;
    const int64_t pix = f.out_h * f.out_w;
    if (Unpadded1x1(s) && s.stride_w <= 2) {
      // A 1 x 1 kernel without padding. At stride 1 it reads every pixel
      // in place: lane v's terms are input plane first + v itself, a run
      // per image. Otherwise, in output row oh, lane v's terms are a run of
      // input row oh * stride_h of plane first + v, every column or
      // (stride 2) every other one. Transposed in 4 x 4 blocks.
      const bool every_pixel = s.stride_h == 1 && s.stride_w == 1;
      ForImageRuns(
          pix, p_begin, p_count,
          [&](int64_t i, int64_t n, int64_t q0, int64_t q1) {
            const float* planes = f.x + (n * s.c_in + first) * plane_size;
            if (every_pixel) {
              f.transpose(planes + q0, plane_size, count, q1 - q0,
                          dst + i * width, width);
              return;
            }
            for (int64_t oh = q0 / f.out_w; oh * f.out_w < q1; ++oh) {
              const int64_t a = std::max<int64_t>(q0 - oh * f.out_w, 0);
              const int64_t b = std::min<int64_t>(q1 - oh * f.out_w, f.out_w);
              const float* src =
                  planes + oh * s.stride_h * s.w + s.stride_w * a;
              float* rows = dst + (i + oh * f.out_w + a - q0) * width;
              if (s.stride_w == 1) {
                f.transpose(src, plane_size, count, b - a, rows, width);
              } else {
                cpu_internal::TransposeCopyEven(src, plane_size, s.w - 2 * a,
                                                count, b - a, rows, width);
              }
            }
          });
      ZeroTail(p_count, count, width, dst);
      return;
    }
    // Each lane's tap (cl, kh, kw), decoded once.
    absl::InlinedVector<int64_t, 32> lane_cl(count), lane_kh(count),
        lane_kw(count);
    for (int v = 0; v < count; ++v) {
      const int64_t tap = first + v;
      lane_cl[v] = tap / kk;
      lane_kh[v] = tap % kk / s.k_w;
      lane_kw[v] = tap % s.k_w;
    }
    ForImageRuns(pix, p_begin, p_count,
                 [&](int64_t i, int64_t n, int64_t q0, int64_t q1) {
                   // Output rows oh overlapping [q0, q1), each its columns [a,
                   // b).
                   for (int64_t oh = q0 / f.out_w; oh * f.out_w < q1; ++oh) {
                     const int64_t a = std::max<int64_t>(q0 - oh * f.out_w, 0);
                     const int64_t b =
                         std::min<int64_t>(q1 - oh * f.out_w, f.out_w);
                     float* rows = dst + (i + oh * f.out_w + a - q0) * width;
                     for (int v = 0; v < count; ++v) {
                       const int64_t cl = lane_cl[v];
                       const int64_t kh = lane_kh[v];
                       const int64_t kw = lane_kw[v];
                       float* d = rows + v;
                       const int64_t ih =
                           oh * s.stride_h + kh * s.dilation_h - s.pad_top;
                       if (ih < 0 || ih >= s.h) {
                         for (int64_t ow = a; ow < b; ++ow)
                           d[(ow - a) * width] = 0.0f;
                         continue;
                       }
                       const float* src =
                           f.x + (n * s.c_in + cl) * plane_size + ih * s.w;
                       const int64_t off = kw * s.dilation_w - s.pad_left;
                       const int64_t lo = std::clamp(f.ow_range->lo[kw], a, b);
                       const int64_t hi = std::clamp(f.ow_range->hi[kw], lo, b);
                       for (int64_t ow = a; ow < lo; ++ow)
                         d[(ow - a) * width] = 0.0f;
                       for (int64_t ow = lo; ow < hi; ++ow) {
                         d[(ow - a) * width] = src[ow * s.stride_w + off];
                       }
                       for (int64_t ow = hi; ow < b; ++ow)
                         d[(ow - a) * width] = 0.0f;
                     }
                   }
                 });
    ZeroTail(p_count, count, width, dst);
  }

  // Lanes = the group's output channels: dy.
  static void PackDy(const void* ctx, int64_t first, int count, int width,
                     int64_t p_begin, int64_t p_count, float* dst) {
    const GradWeightOperands& f = *static_cast<const GradWeightOperands*>(ctx);
    const sp::Conv2dShape& s = *f.s;
    const int64_t pix = f.out_h * f.out_w;
    ForImageRuns(pix, p_begin, p_count,
                 [&](int64_t i, int64_t n, int64_t q0, int64_t q1) {
                   f.transpose(f.dy + (n * s.c_out + first) * pix + q0, pix,
                               count, q1 - q0, dst + i * width, width);
                 });
    ZeroTail(p_count, count, width, dst);
  }
};

// B of a grad_input, W'^T, packed straight from w: B(p, j) = w[co][cl][t]
// for reduction step p = (co, t) (t < kk, the taps kh, kw) and lane j = cl,
// the values TransposeWeights' wt holds, without making wt. The panel's
// columns [first, first + count) of one output channel are one contiguous
// count x kk block of w, which lands transposed in kk consecutive rows of
// the panel. (Transposing the whole of w first and then gathering each
// panel's columns kk * cog floats apart read the weights twice and wrote
// them once more: 13 % and 6 % of a 512-channel 4 x 4 grad_input's time on
// one core, docs/benchmarks.md.)
struct GradInputWeights {
  const float* w;  // the group's first output channel
  int64_t cig;     // input channels per group
  int64_t kk;      // taps per kernel

  static void Pack(const void* ctx, int64_t first, int count, int width,
                   int64_t p_begin, int64_t p_count, float* dst) {
    const GradInputWeights& f = *static_cast<const GradInputWeights*>(ctx);
    const int64_t p_end = p_begin + p_count;
    if (f.kk == 1) {  // a row of the panel is a run of w
      for (int64_t co = p_begin; co < p_end; ++co) {
        CopyRun(dst + (co - p_begin) * width, f.w + co * f.cig + first, count);
      }
      ZeroTail(p_count, count, width, dst);
      return;
    }
    for (int64_t co = p_begin / f.kk; co * f.kk < p_end; ++co) {
      const int64_t t0 = std::max<int64_t>(0, p_begin - co * f.kk);
      const int64_t t1 = std::min<int64_t>(f.kk, p_end - co * f.kk);
      cpu_internal::TransposeCopy(
          f.w + (co * f.cig + first) * f.kk + t0, f.kk, count, t1 - t0,
          dst + (co * f.kk + t0 - p_begin) * width, width);
    }
    ZeroTail(p_count, count, width, dst);
  }
};

// B of one class of a strided grad_input (GradInputByClassImages):
// reduction step p = (co, i) is the class's i-th kept tap tap[i] (of taps
// per output channel), B(p, j) = w[co][j][tap[i]], the kept columns of
// w^T. Packed either straight from w, one float every kk (a gather), or,
// with `by_tap`, from wc[co][t][j] = w[co][j][t] (ClassWeightsByTap), where
// each row of the panel is a run (so is w's for a 1 x 1 kernel). Image
// groups each pack B again; the gather cost a 3 x 3 grad_input 64 -> 128
// 32px 6 - 8 % over the runs on one core and two, and a 256 -> 512 8px
// one on two cores 4 - 8 %, while with one group (256 -> 512 8px on one
// core) the transpose cost 1.4 - 3.7 % more than it saved.
struct ClassWeights {
  const float* w;  // the group's first output channel, in w's or wc's order
  int64_t cig;     // input channels per group
  int64_t kk;      // taps per kernel
  const int64_t* tap;
  int64_t taps;
  bool by_tap;

  static void Pack(const void* ctx, int64_t first, int count, int width,
                   int64_t p_begin, int64_t p_count, float* dst) {
    const ClassWeights& f = *static_cast<const ClassWeights*>(ctx);
    for (int64_t p = p_begin; p < p_begin + p_count; ++p) {
      const int64_t co = p / f.taps;
      const int64_t t = f.tap[p % f.taps];
      float* d = dst + (p - p_begin) * width;
      if (f.by_tap || f.kk == 1) {
        CopyRun(d, f.w + (co * f.kk + t) * f.cig + first, count);
      } else {
        const float* src = f.w + (co * f.cig + first) * f.kk + t;
        for (int v = 0; v < count; ++v) d[v] = src[v * f.kk];
      }
    }
    ZeroTail(p_count, count, width, dst);
  }
};

// Scratch floats, left uninitialised (every element is written before it
// is read), reused between calls (scratch.h).
using Floats = ScratchFloats;

int64_t Threads(ThreadPool* pool) {
  return pool == nullptr ? 1 : pool->num_threads();
}

// Images per lowered product: small images are batched as column blocks of
// one product (kMinProductCols columns at least), which amortises the
// GEMM's packing; every output keeps its own reduction, so the bits do not
// depend on the batching.
constexpr int64_t kMinProductCols = 512;
int64_t ImagesPerProduct(int64_t cols_per_image, int64_t n) {
  int64_t nb = kMinProductCols / (cols_per_image > 0 ? cols_per_image : 1);
  if (nb < 1) nb = 1;
  return nb < n ? nb : n;
}

// How the n images of a forward or grad_input are split into products of
// `fmas_per_image` multiply-adds each: returns the images per product and
// sets *per_batch when the products run one per task (with enough of them,
// or small ones) rather than each spread over the pool. Per-task products
// take an equal share of the images per thread: the GEMM packs each k
// block just before using it, so a longer product costs no more memory,
// and packs its weights once per product.
int64_t BatchImages(int64_t cols_per_image, int64_t fmas_per_image, int64_t n,
                    ThreadPool* pool, bool* per_batch) {
  const int64_t threads = Threads(pool);
  const int64_t nb = ImagesPerProduct(cols_per_image, n);
  *per_batch = (n + nb - 1) / nb >= 2 * threads ||
               nb * fmas_per_image < kMinParallelFmas;
  if (!*per_batch) return nb;
  return std::max(nb, (n + threads - 1) / threads);
}

c::MatMulShape RowMajor(int64_t rows, int64_t cols, int64_t depth) {
  c::MatMulShape m;
  m.rows = rows;
  m.cols = cols;
  m.depth = depth;
  m.a_row = depth;
  m.a_depth = 1;
  m.b_depth = cols;
  m.b_col = 1;
  m.c_row = cols;
  m.c_col = 1;
  return m;
}

// Indirect products: the lowered matrix is never packed; the GEMM reads it
// in place from a zero-padded (for grad_input also zero-stuffed) copy of x
// or dy, a row start per output and an offset per reduction step
// (GemmPacking::a_base, gemm.h), with the output channels (or input
// channels) as the micro-kernel's vector lanes; the terms and their order
// are those of the packed paths, so are the bits. Packing a panel costs
// about a cycle per element for a spatial kernel (a gather of short rows)
// and much less for a 1 x 1 one (whole rows), while an indirect product
// computes all the lanes of a panel (32; 16 when there are at most 16
// lane channels, 8 when at most 8) however few channels it has; so every
// spatial convolution runs indirect (but for the short forwards of
// UseIndirectForward), and a 1 x 1 one where its lane
// channels number kIndirectMinLanes or more (measured on the zoo: LeNet-5's
// 6-channel convolutions gain a third, MobileNet-v2's narrow pointwise ones
// lose a few percent indirect).
constexpr int64_t kIndirectMinLanes = 16;
bool UseIndirect(const sp::Conv2dShape& s, int64_t lane_channels) {
  return s.k_h * s.k_w > 1 || lane_channels >= kIndirectMinLanes;
}

// A forward whose reduction is short (fewer than kPackedMaxDepth steps: a
// network's stem, 3 input channels x 3 x 3 taps, or a narrow pointwise
// expansion) and whose output channels are many runs packed (a 1 x 1 one
// at stride 1 without padding as PointwiseProducts) where UseIndirect
// would pick the indirect product: with so few multiply-adds
// per output, the indirect product's transposed write-back (a pixel per
// row, a channel per lane, into NCHW planes) costs more than packing
// im2col(x) (one row per tap, copied in runs when the stride is 1) and
// writing each output row straight into its plane. Measured with cpu_bench
// on one core, batch 8 (docs/benchmarks.md, "Short forwards packed"): a
// 3 -> 64 3 x 3 stem at 32 px 0.62 -> 1.05 of the GEMM of its shape,
// 3 -> 32 at 64 px 0.70 -> 1.00, a 1 x 1 8 -> 48 at 16 px 0.74 -> 1.04;
// packed, a 1 x 1 32 -> 64 lost (0.91 -> 0.80), and with 16 or fewer
// output channels or a stride of 2 (a gather per element) packing did not
// help or lost.
constexpr int64_t kPackedMaxDepth = 32;
constexpr int64_t kPackedMinRows = 32;
bool UseIndirectForward(const sp::Conv2dShape& s, int64_t cog) {
  const int64_t depth = s.c_in / s.groups * s.k_h * s.k_w;
  if (depth < kPackedMaxDepth && cog >= kPackedMinRows && s.stride_w == 1) {
    return false;
  }
  return UseIndirect(s, cog);
}

// Whether no element is infinite or NaN. An element's exponent bits plus
// one exponent step reach the sign bit only when they are all ones, so the
// test is one and, add and or per element (four at a time with SSE2), and
// one branch per 1,024 elements.
bool AllFinite(const float* v, int64_t n) {
  constexpr uint32_t kExponent = 0x7f800000u, kStep = 0x00800000u;
  for (int64_t b = 0; b < n; b += 1024) {
    const int64_t e = std::min<int64_t>(n, b + 1024);
    int64_t i = b;
    uint32_t any = 0;
#if defined(__SSE2__)
    __m128i acc = _mm_setzero_si128();
    const __m128i exponent = _mm_set1_epi32(static_cast<int>(kExponent));
    const __m128i step = _mm_set1_epi32(static_cast<int>(kStep));
    for (; i + 4 <= e; i += 4) {
      const __m128i bits =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i));
      acc =
          _mm_or_si128(acc, _mm_add_epi32(_mm_and_si128(bits, exponent), step));
    }
    any = static_cast<uint32_t>(_mm_movemask_ps(_mm_castsi128_ps(acc)));
#endif
    for (; i < e; ++i) {
      uint32_t bits;
      std::memcpy(&bits, v + i, sizeof(bits));
      any |= ((bits & kExponent) + kStep) >> 31;
    }
    if (any != 0) return false;
  }
  return true;
}

// wt[g][cl][(j, t)] = w[g][j][cl][t] for j < cog, cl < cig, t < kk: each
// run of kk taps moves whole (a fixed-size copy for 3 x 3 kernels, a
// transposing copy for 1 x 1 ones), the planes of cl split over the pool.
void TransposeWeights(const float* w, int64_t groups, int64_t cog, int64_t cig,
                      int64_t kk, float* wt, ThreadPool* pool) {
  if (kk == 1) {
    for (int64_t g = 0; g < groups; ++g) {
      cpu_internal::TransposeCopy(w + g * cog * cig, cig, cog, cig,
                                  wt + g * cig * cog, cog);
    }
    return;
  }
  const int64_t depth = cog * kk;
  auto rows = [&](int64_t r0, int64_t r1) {  // rows (g, cl) of wt
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t g = r / cig, cl = r % cig;
      const float* src = w + (g * cog * cig + cl) * kk;
      float* dst = wt + r * depth;
      if (kk == 9) {
        for (int64_t j = 0; j < cog; ++j) {
          std::memcpy(dst + j * 9, src + j * cig * 9, 9 * sizeof(float));
        }
      } else {
        for (int64_t j = 0; j < cog; ++j) {
          CopyRun(dst + j * kk, src + j * cig * kk, kk);
        }
      }
    }
  };
  const int64_t n = groups * cig;
  if (n * depth < (int64_t{1} << 15)) pool = nullptr;  // small: not worth it
  ParallelForBlocks(pool, n, std::max<int64_t>(1, n / 8), rows);
}

// Per-thread tables of the indirect products, reused between calls.
std::vector<int64_t>& Table(int which) {
  thread_local std::vector<int64_t> tables[3];
  return tables[which];
}

// dst[i][top + sh * r][left + sw * c] = src[i][r][c] for planes i of h x w,
// wherever that lands inside dst's hp x wp planes; +0.0f everywhere else.
// With AVX-512, where every float of src lands inside dst (a zero-padded
// copy, or a grid with stride holes), each plane is written once, sixteen
// floats at a time, by loads that expand src's next floats into the lanes
// of the plane's copy (cpu_internal::ExpandPlanesAvx512) with the masks of
// one plane, made here; otherwise each plane is zeroed and then each row
// copied in. Pure data movement. Measured on one core, each call alternating
// with the zeroing and row copies (docs/benchmarks.md, "... padded copies by
// expanding loads"): the 3 x 3 stride-2 8 -> 16 forward at 32 px and the
// 16-channel 3 x 3 forward at 16 px (batch 8) +9 - 10 %, which spent 18 %
// of their time on the copy; ResNet-18's 64 - 512-channel 3 x 3 layers at
// batch 32 +2 - 4.5 % forward, +1 - 3 % grad_input, +2 - 4 % grad_weight.
void SpreadPlanes(const float* src, int64_t planes, int64_t h, int64_t w,
                  int64_t sh, int64_t sw, int64_t top, int64_t left, int64_t hp,
                  int64_t wp, float* dst, CpuIsa isa, ThreadPool* pool) {
  // A copy: worth splitting from a few hundred KiB on.
  if (planes * hp * wp < (int64_t{1} << 15)) pool = nullptr;
  if (h > 0 && w > 0 && top >= 0 && left >= 0 && top + sh * (h - 1) < hp &&
      left + sw * (w - 1) < wp && OnAvx512(isa)) {
    const int64_t plane = hp * wp;
    const int64_t chunks = (plane + 15) / 16;
    absl::InlinedVector<uint16_t, 128> masks(chunks, 0);
    for (int64_t r = 0; r < h; ++r) {
      for (int64_t c = 0; c < w; ++c) {
        const int64_t q = (top + sh * r) * wp + left + sw * c;
        masks[q / 16] |= static_cast<uint16_t>(1u << (q % 16));
      }
    }
    ParallelForBlocks(pool, planes, std::max<int64_t>(1, planes / 8),
                      [&](int64_t i0, int64_t i1) {
                        cpu_internal::ExpandPlanesAvx512(
                            src + i0 * h * w, i1 - i0, h * w, masks.data(),
                            chunks, dst + i0 * plane, plane);
                      });
    return;
  }
  auto plane = [&](int64_t i) {
    const float* sp = src + i * h * w;
    float* dp = dst + i * hp * wp;
    std::memset(dp, 0, hp * wp * sizeof(float));
    // Columns c in [c0, c1) land inside [0, wp).
    const int64_t c0 = left >= 0 ? 0 : (-left + sw - 1) / sw;
    const int64_t c1 = std::min<int64_t>(w, (wp - 1 - left) / sw + 1);
    for (int64_t r = 0; r < h; ++r) {
      const int64_t row = top + sh * r;
      if (row < 0) continue;
      if (row >= hp) break;
      float* d = dp + row * wp + left;
      const float* sr = sp + r * w;
      if (sw == 1) {
        if (c1 > c0) std::memcpy(d + c0, sr + c0, (c1 - c0) * sizeof(float));
      } else {
        for (int64_t c = c0; c < c1; ++c) d[c * sw] = sr[c];
      }
    }
  };
  ParallelFor(pool, planes, plane);
}

// Four floats of d from s[0 .. 8): s[0], s[2], s[4], s[6].
#if defined(__SSE__)
inline void StoreEven4(const float* s, float* d) {
  _mm_storeu_ps(d, _mm_shuffle_ps(_mm_loadu_ps(s), _mm_loadu_ps(s + 4),
                                  _MM_SHUFFLE(2, 0, 2, 0)));
}
#endif

// d[c] = s[2 * c] for c < n, where s holds len >= 2 * n - 1 floats: four
// at a time from two loads and a shuffle while the loads stay inside s,
// 16 per iteration where they can (a 32-pixel row's run).
inline void GatherEven(const float* __restrict s, int64_t len,
                       float* __restrict d, int64_t n) {
  int64_t c = 0;
#if defined(__SSE__)
  for (; c + 16 <= n && 2 * c + 32 <= len; c += 16) {
    StoreEven4(s + 2 * c, d + c);
    StoreEven4(s + 2 * c + 8, d + c + 4);
    StoreEven4(s + 2 * c + 16, d + c + 8);
    StoreEven4(s + 2 * c + 24, d + c + 12);
  }
  for (; c + 4 <= n && 2 * c + 8 <= len; c += 4) StoreEven4(s + 2 * c, d + c);
#endif
  for (; c < n; ++c) d[c] = s[2 * c];
}

// GatherEven over `rows` rows (cpu_internal::GatherEvenRowsAvx512's
// contract), for the ISAs without a gather of their own.
void GatherEvenRows(const float* src, int64_t src_stride, int64_t rows,
                    int64_t len, float* dst, int64_t dst_stride, int64_t n) {
  for (int64_t i = 0; i < rows; ++i, src += src_stride, dst += dst_stride) {
    GatherEven(src, len, dst, n);
  }
}

using GatherEvenRowsFn = void (*)(const float*, int64_t, int64_t, int64_t,
                                  float*, int64_t, int64_t);
// The gather for `isa`: with AVX-512 sixteen floats per two-register
// permute, where GatherEven's SSE shuffles move four.
GatherEvenRowsFn GatherEvenRowsFor(CpuIsa isa) {
  return OnAvx512(isa) ? &cpu_internal::GatherEvenRowsAvx512 : &GatherEvenRows;
}

// Forward of a 1 x 1 convolution without padding at a column stride of
// 2 (StridedPointwiseForward), B = its lowered matrix for images n0 ..:
// rows cl, columns (image, oh, ow), each run of an output row, in all the
// slab's rows, gathered by `gather` (GatherEvenRowsFor); ForwardB's values.
struct EvenColumnsB {
  const float* x;  // image n0, the group's first input plane
  int64_t image_floats, plane, w, row_step, out_w, pix;
  GatherEvenRowsFn gather;

  static void Pack(const void* ctx, int64_t first, int count, int width,
                   int64_t p_begin, int64_t p_count, float* dst) {
    const EvenColumnsB& f = *static_cast<const EvenColumnsB*>(ctx);
    ForColumnRuns(
        first, count, f.pix / f.out_w, f.out_w,
        [&](int64_t v0, int64_t len, int64_t image, int64_t oh, int64_t ow0) {
          const float* src = f.x + image * f.image_floats + oh * f.row_step +
                             2 * ow0 + p_begin * f.plane;
          f.gather(src, f.plane, p_count, f.w - 2 * ow0, dst + v0, width, len);
        });
    ZeroTail(p_count, count, width, dst);
  }
};

// CopyRun over `rows` rows (cpu_internal::CopyRowsAvx512's contract).
void CopyRows(const float* src, int64_t src_stride, int64_t rows, float* dst,
              int64_t dst_stride, int64_t n) {
  for (int64_t i = 0; i < rows; ++i, src += src_stride, dst += dst_stride) {
    CopyRun(dst, src, n);
  }
}

using CopyRowsFn = void (*)(const float*, int64_t, int64_t, float*, int64_t,
                            int64_t);
// The row copy for `isa`: with AVX-512 inline vector moves, where CopyRows
// calls libc's memcpy once per row (a packed panel's row: 32 floats).
// Measured against CopyRows on the Xeon build machine, calls alternating,
// one thread: pointwise forwards 48 -> 12 (16 px, batch 8 and 32) 1.12 -
// 1.33, 16 -> 96 and 24 -> 144 1.03, grad_inputs 8 -> 48 1.21, 32 -> 192
// 1.16, 16 -> 96 1.13, the other shapes tried 1.00 - 1.07.
CopyRowsFn CopyRowsFor(CpuIsa isa) {
  return OnAvx512(isa) ? &cpu_internal::CopyRowsAvx512 : &CopyRows;
}

// B(k, (image, p)) = b[image * b_image + k * pix + p]: the B of a
// pointwise convolution's products over several images, each image's
// block a row-major matrix; copied in runs of an image's row.
struct ImageBlocksB {
  const float* b;
  int64_t b_image, pix;
  CopyRowsFn copy;

  static void Pack(const void* ctx, int64_t first, int count, int width,
                   int64_t p_begin, int64_t p_count, float* dst) {
    const ImageBlocksB& f = *static_cast<const ImageBlocksB*>(ctx);
    ForColumnRuns(
        first, count, 1, f.pix,
        [&](int64_t v0, int64_t len, int64_t image, int64_t, int64_t p0) {
          const float* src = f.b + image * f.b_image + p_begin * f.pix + p0;
          f.copy(src, f.pix, p_count, dst + v0, width, len);
        });
    ZeroTail(p_count, count, width, dst);
  }
};

// The output pixels of a batch as rows: start = image * image_stride +
// oh * row_step + ow * col_step.
void PixelRows(int64_t n, int64_t out_h, int64_t out_w, int64_t image_stride,
               int64_t row_step, int64_t col_step, std::vector<int64_t>* t) {
  t->resize(n * out_h * out_w);
  int64_t* p = t->data();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t oh = 0; oh < out_h; ++oh) {
      for (int64_t ow = 0; ow < out_w; ++ow) {
        *p++ = i * image_stride + oh * row_step + ow * col_step;
      }
    }
  }
}

// The taps (channel, kh, kw) of a reduction in order: offset = channel *
// plane + kh * row_step + kw * col_step.
void TapOffsets(int64_t channels, int64_t k_h, int64_t k_w, int64_t plane,
                int64_t row_step, int64_t col_step, std::vector<int64_t>* t) {
  t->resize(channels * k_h * k_w);
  int64_t* p = t->data();
  for (int64_t ch = 0; ch < channels; ++ch) {
    for (int64_t kh = 0; kh < k_h; ++kh) {
      for (int64_t kw = 0; kw < k_w; ++kw) {
        *p++ = ch * plane + kh * row_step + kw * col_step;
      }
    }
  }
}

// x as the indirect forward and grad_weight read it: hp x wp planes
// holding every tap (tap (oh, kh) is row oh * sh + kh * dh), a zero-padded
// copy, or x itself when x holds every tap (no padding on the top and
// left, none read past the bottom and right); each output pixel's start
// (*pixels) and each tap's offset (*taps) in them.
class IndirectInput {
 public:
  IndirectInput(const sp::Conv2dShape& s, const float* x, CpuIsa isa,
                ThreadPool* pool, std::vector<int64_t>* pixels,
                std::vector<int64_t>* taps)
      : copy_(CopySize(s, &hp_, &wp_, &in_place_)), planes_(x) {
    if (!in_place_) {
      SpreadPlanes(x, s.n * s.c_in, s.h, s.w, 1, 1, s.pad_top, s.pad_left, hp_,
                   wp_, copy_.data(), isa, pool);
      planes_ = copy_.data();
    }
    PixelRows(s.n, sp::Conv2dOutH(s), sp::Conv2dOutW(s), s.c_in * plane(),
              s.stride_h * wp_, s.stride_w, pixels);
    TapOffsets(s.c_in / s.groups, s.k_h, s.k_w, plane(), s.dilation_h * wp_,
               s.dilation_w, taps);
  }

  // Group g's first plane.
  const float* group(const sp::Conv2dShape& s, int64_t g) const {
    return planes_ + g * (s.c_in / s.groups) * plane();
  }
  int64_t plane() const { return hp_ * wp_; }

  // The floats of the zero-padded copy of one image (0: read in place).
  static int64_t CopyPerImage(sp::Conv2dShape s) {
    s.n = 1;
    int64_t hp, wp;
    bool in_place;
    return CopySize(s, &hp, &wp, &in_place);
  }

 private:
  static int64_t CopySize(const sp::Conv2dShape& s, int64_t* hp, int64_t* wp,
                          bool* in_place) {
    *hp = (sp::Conv2dOutH(s) - 1) * s.stride_h + (s.k_h - 1) * s.dilation_h + 1;
    *wp = (sp::Conv2dOutW(s) - 1) * s.stride_w + (s.k_w - 1) * s.dilation_w + 1;
    *in_place = s.pad_top == 0 && s.pad_left == 0 && *hp <= s.h && *wp <= s.w;
    if (!*in_place) return s.n * s.c_in * *hp * *wp;
    *hp = s.h;
    *wp = s.w;
    return 0;
  }

  int64_t hp_ = 0, wp_ = 0;
  bool in_place_ = false;
  Floats copy_;
  const float* planes_;
};

// A product of `rows` x `cols`, depth `depth`, with an indirect A and B
// given as B(p, j) = b[j * b_col + p].
c::MatMulShape IndirectShape(int64_t rows, int64_t cols, int64_t depth,
                             int64_t b_col) {
  c::MatMulShape m;
  m.rows = rows;
  m.cols = cols;
  m.depth = depth;
  m.b_depth = 1;
  m.b_col = b_col;
  return m;
}

// The packing of an indirect product: A(i, p) = a_base[rows[i] +
// taps[p]], row i of C at c + c_rows[i].
GemmPacking IndirectPacking(const float* a_base,
                            const std::vector<int64_t>& rows,
                            const std::vector<int64_t>& taps,
                            const std::vector<int64_t>& c_rows) {
  GemmPacking packing;
  packing.a_base = a_base;
  packing.a_rows = rows.data();
  packing.a_offsets = taps.data();
  packing.c_rows = c_rows.data();
  return packing;
}

// One indirect product per group g of `groups`: A = a_base + g * a_group
// read through rows and taps, B = b + g * b_group (B(p, j) = b[j * m.b_col
// + p]), C = c + g * c_group through c_rows; the chunks k_bounds, if any.
// b_packed (one group only): B packed already (PackGemmB).
void IndirectGroups(int64_t groups, const c::MatMulShape& m,
                    const float* a_base, int64_t a_group,
                    const std::vector<int64_t>& rows,
                    const std::vector<int64_t>& taps,
                    const std::vector<int64_t>& c_rows, const float* b,
                    int64_t b_group, float* c, int64_t c_group, bool stream_c,
                    int64_t chunk, CpuIsa isa, ThreadPool* pool,
                    const int64_t* k_bounds = nullptr, int64_t k_blocks = 0,
                    const PackedGemmB* b_packed = nullptr) {
  for (int64_t g = 0; g < groups; ++g) {
    GemmPacking packing =
        IndirectPacking(a_base + g * a_group, rows, taps, c_rows);
    packing.k_bounds = k_bounds;
    packing.k_blocks = k_blocks;
    packing.stream_c = stream_c;
    if (groups == 1) packing.b_packed = b_packed;
    GemmPacked(m, nullptr, b + g * b_group, c + g * c_group, chunk, packing,
               isa, pool);
  }
}

// Image groups of the indirect forward and grad_input (stride 1, and by
// class). Their A is a zero-padded copy of the input (x, or dy spread onto
// its grid), read once per column panel, and a strided grad_input's class
// planes are written, then merged into dx. Made for the whole batch at once
// these leave L2 (a 64-channel 32 x 32 layer's copy is 9.5 MiB at batch 32)
// and are written to and read back from memory; made and consumed about
// kImageGroupBytes at a time, they stay in L2, at the price of packing the
// weights once per group. So on one thread groups are formed only where
// that repacking moves no more than the copy itself (large planes, few
// channels). Measured on one core with a 2 MiB L2 at batch 32
// (docs/benchmarks.md, cpu_bench table (f)): 64-channel 32 x 32 3 x 3
// forward +5 %, grad_input +14 %; 128-channel 16 x 16 +1 % and +6 %. (With
// the weights packed once for all groups, ShareWeights, groups of 8 images
// on one thread were measured again for the 64 - 512-channel layers: 0.93 -
// 1.05 of one product's speed, so the rule stands.)
//
// On a pool the groups run side by side, each a product on one thread
// (its copy in that core's L2; nothing shared but the read-only inputs),
// as many on every thread. Where the L2-sized groups would repack too much
// (large weights, small planes), each thread still runs one group, given
// an image for every thread and at least kMinGroupRows product rows per
// group (the weights, packed once per group, then cost under 1 / (2 *
// kMinGroupRows) of its FLOPs); otherwise one product of the whole batch
// is split over the pool. On two threads against the whole batch split
// over them (table (f)): 64-channel 32 x 32 3 x 3 forward +10 - 21 %,
// grad_input +11 - 28 %; 3 x 3 stride-2 64 -> 128 +16 - 31 %; 1 x 1
// stride-2 grad_input x1.6 - 2.3; 16-channel 16 x 16 x1.5 - 1.8; one group
// per thread for the 256- and 512-channel layers (three alternating
// rounds, docs/benchmarks.md): 8 x 8 forward +4 - 17 %, 4 x 4 forward
// +6 - 16 %, 3 x 3 stride-2 256 -> 512 forward +17 - 23 %, grad_input
// (W'^T packed from w by each group) 8 x 8 +5 - 8 %, 4 x 4 +9 - 12 %.
// The rows of the products are only partitioned: every output's chain,
// and so every bit, is unchanged.
constexpr int64_t kImageGroupBytes = int64_t{1} << 20;
constexpr int64_t kMinGroupRows = 256;

std::atomic<int64_t>& ImageGroupForTesting() {
  static std::atomic<int64_t> images{0};
  return images;
}

// The number of image groups (ForImageGroups; 1: one product of the whole
// batch) for a batch of n whose padded copy takes copy_per_image floats per
// image (0: read in place) and whose products have rows_per_image rows per
// image, with weight_floats weights to pack, to run on `pool`.
int64_t PlanImageGroups(int64_t n, int64_t copy_per_image,
                        int64_t rows_per_image, int64_t weight_floats,
                        ThreadPool* pool) {
  const int64_t threads = Threads(pool);
  const int64_t forced = ImageGroupForTesting().load(std::memory_order_relaxed);
  if (forced > 0) return (n + forced - 1) / forced;
  if (copy_per_image <= 0) return 1;  // nothing to keep warm
  const int64_t per = std::max<int64_t>(
      1, kImageGroupBytes /
             (copy_per_image * static_cast<int64_t>(sizeof(float))));
  // L2-sized groups, as many on every thread; else one per thread.
  const int64_t groups =
      ((n + per - 1) / per + threads - 1) / threads * threads;
  if (groups <= n && weight_floats * groups <= n * copy_per_image) {
    return groups;
  }
  if (threads > n || n / threads * rows_per_image < kMinGroupRows) {
    return 1;
  }
  return threads;
}

// fn(g, n0, pool) for each of `groups` groups of consecutive images of s
// (n / groups images each, give or take one), from image n0 (g: s with g.n
// the group's size), with the pool its product may use: on a pool of
// several threads the groups run side by side, each on one thread; else
// one after another, each on `pool`.
template <class Fn>
void ForImageGroups(const sp::Conv2dShape& s, int64_t groups, ThreadPool* pool,
                    const Fn& fn) {
  const auto group = [&](int64_t i, ThreadPool* product_pool) {
    const int64_t n0 = i * s.n / groups;
    sp::Conv2dShape g = s;
    g.n = (i + 1) * s.n / groups - n0;
    fn(g, n0, product_pool);
  };
  if (groups > 1 && Threads(pool) > 1) {
    ParallelFor(pool, groups, [&](int64_t i) { group(i, nullptr); });
    return;
  }
  for (int64_t i = 0; i < groups; ++i) group(i, pool);
}

// ForwardIndirect for the images of s (a group of the batch).
// stream_y: y past the caches (GemmPacking::stream_c); w_packed: w packed
// already (PackGemmB), or null.
void ForwardIndirectImages(const sp::Conv2dShape& s, const float* x,
                           const float* w, const PackedGemmB* w_packed,
                           float* y, bool stream_y, int64_t chunk, CpuIsa isa,
                           ThreadPool* pool) {
  const int64_t out_h = sp::Conv2dOutH(s);
  const int64_t out_w = sp::Conv2dOutW(s);
  const int64_t pix = out_h * out_w;
  const int64_t cig = s.c_in / s.groups;
  const int64_t cog = s.c_out / s.groups;
  const int64_t depth = cig * s.k_h * s.k_w;
  std::vector<int64_t>& rows = Table(0);
  std::vector<int64_t>& taps = Table(1);
  std::vector<int64_t>& c_rows = Table(2);
  const IndirectInput in(s, x, isa, pool, &rows, &taps);
  PixelRows(s.n, 1, pix, s.c_out * pix, 0, 1, &c_rows);
  c::MatMulShape m = IndirectShape(s.n * pix, cog, depth, depth);
  m.c_col = pix;
  IndirectGroups(s.groups, m, in.group(s, 0), cig * in.plane(), rows, taps,
                 c_rows, w, cog * depth, y, cog * pix, stream_y, chunk, isa,
                 pool, nullptr, 0, w_packed);
}

std::atomic<bool>& SharedWeightsForTesting() {
  static std::atomic<bool> on{true};
  return on;
}

// Whether the image groups of s read weights packed once for them all: with
// several groups and one convolution group (a grouped convolution has a B
// per group, packed by each image group).
bool ShareWeights(const sp::Conv2dShape& s, int64_t image_groups) {
  return image_groups > 1 && s.groups == 1 &&
         SharedWeightsForTesting().load(std::memory_order_relaxed);
}

// w packed once (PackGemmB) for the image groups of s's forward, where they
// share it (ShareWeights): each group is a product of its own and would pack
// the whole of w (9.4 MiB at 512 channels, 3 x 3, read from beyond L2 by
// every core at once). On two threads at batch 32 (docs/benchmarks.md,
// "... weights packed once for the image groups"; cpu_bench table (f)'s
// own/shared): 3 x 3 forwards at 512, 256 and 128 channels +3 %, +3 %,
// +1 %, stride 2 256 -> 512 +6 %; grad_inputs (PackGradInputWeights) +5 %,
// +3 %, +2 %; the 64- and 16-channel layers' many small groups within
// noise. Left empty otherwise.
void PackForwardWeights(const sp::Conv2dShape& s, int64_t image_groups,
                        const float* x, const float* w, CpuIsa isa,
                        ThreadPool* pool, PackedGemmB* out) {
  if (!ShareWeights(s, image_groups)) return;
  const int64_t pix = sp::Conv2dOutH(s) * sp::Conv2dOutW(s);
  const int64_t depth = s.c_in * s.k_h * s.k_w;
  // The smallest group's product: its rows pick the micro-kernel.
  c::MatMulShape m =
      IndirectShape(s.n / image_groups * pix, s.c_out, depth, depth);
  m.c_col = pix;
  GemmPacking packing;
  packing.a_base = x;  // an indirect product's micro-kernel; A is not read
  PackGemmB(m, w, packing, isa, pool, out);
}

// forward: y^T[(n, oh, ow), co] = im2col(x)^T x W^T, A read from the
// zero-padded x; by image groups.
void ForwardIndirect(const sp::Conv2dShape& s, const float* x, const float* w,
                     float* y, int64_t chunk, CpuIsa isa, ThreadPool* pool) {
  const int64_t groups = PlanImageGroups(s.n, IndirectInput::CopyPerImage(s),
                                         sp::Conv2dOutH(s) * sp::Conv2dOutW(s),
                                         sp::Conv2dWeightSize(s), pool);
  const int64_t x_image = s.c_in * s.h * s.w;
  const int64_t y_image = s.c_out * sp::Conv2dOutH(s) * sp::Conv2dOutW(s);
  const bool stream_y = StreamOutput(s.n * y_image, y, x, nullptr);
  PackedGemmB w_packed;
  PackForwardWeights(s, groups, x, w, isa, pool, &w_packed);
  ForImageGroups(s, groups, pool,
                 [&](const sp::Conv2dShape& g, int64_t n0, ThreadPool* gp) {
                   ForwardIndirectImages(g, x + n0 * x_image, w, &w_packed,
                                         y + n0 * y_image, stream_y, chunk, isa,
                                         gp);
                 });
}

// GradInputIndirect for the images of s (a group of the batch), B packed
// from w (GradInputWeights) or, where w is null, from wt
// (wt[g][ci][(co_l, kh, kw)], TransposeWeights), or read from w_packed
// (PackGemmB, one group) where that is non-null; stream_dx: dx past the
// caches (GemmPacking::stream_c).
void GradInputIndirectImages(const sp::Conv2dShape& s, const float* dy,
                             const float* w, const float* wt,
                             const PackedGemmB* w_packed, float* dx,
                             bool stream_dx, int64_t chunk, CpuIsa isa,
                             ThreadPool* pool) {
  const int64_t out_h = sp::Conv2dOutH(s);
  const int64_t out_w = sp::Conv2dOutW(s);
  const int64_t hw = s.h * s.w;
  const int64_t cig = s.c_in / s.groups;
  const int64_t cog = s.c_out / s.groups;
  const int64_t kk = s.k_h * s.k_w;
  const int64_t depth = cog * kk;
  // Tap (ih, kh) reads dy row (ih + pad_top - kh * dh) / sh where that
  // divides and lies in [0, OH): grid row ih + pad_top - kh * dh + off_h,
  // dy row r at grid row off_h + r * sh.
  const int64_t off_h = (s.k_h - 1) * s.dilation_h;
  const int64_t off_w = (s.k_w - 1) * s.dilation_w;
  const int64_t hd = s.h + s.pad_top + off_h;
  const int64_t wd = s.w + s.pad_left + off_w;
  const Floats grid(s.n * s.c_out * hd * wd);
  SpreadPlanes(dy, s.n * s.c_out, out_h, out_w, s.stride_h, s.stride_w, off_h,
               off_w, hd, wd, grid.data(), isa, pool);
  std::vector<int64_t>& rows = Table(0);
  std::vector<int64_t>& taps = Table(1);
  std::vector<int64_t>& c_rows = Table(2);
  PixelRows(s.n, s.h, s.w, s.c_out * hd * wd, wd, 1, &rows);
  const int64_t first = (s.pad_top + off_h) * wd + s.pad_left + off_w;
  for (int64_t& r : rows) r += first;
  TapOffsets(cog, s.k_h, s.k_w, hd * wd, -s.dilation_h * wd, -s.dilation_w,
             &taps);
  PixelRows(s.n, 1, hw, s.c_in * hw, 0, 1, &c_rows);
  c::MatMulShape m = IndirectShape(s.n * hw, cig, depth, depth);
  m.c_col = hw;
  if (w == nullptr) {
    IndirectGroups(s.groups, m, grid.data(), cog * hd * wd, rows, taps, c_rows,
                   wt, cig * depth, dx, cig * hw, stream_dx, chunk, isa, pool);
    return;
  }
  for (int64_t g = 0; g < s.groups; ++g) {
    const GradInputWeights f{w + g * cog * cig * kk, cig, kk};
    GemmPacking packing =
        IndirectPacking(grid.data() + g * cog * hd * wd, rows, taps, c_rows);
    packing.pack_b = &GradInputWeights::Pack;
    packing.pack_b_like_matrix = true;
    packing.ctx = &f;
    packing.stream_c = stream_dx;
    if (s.groups == 1) packing.b_packed = w_packed;
    GemmPacked(m, nullptr, nullptr, dx + g * cig * hw, chunk, packing, isa,
               pool);
  }
}

// W'^T packed once (PackGemmB, from w by GradInputWeights) for the image
// groups of s's grad_input, where they share it (ShareWeights); left empty
// otherwise.
void PackGradInputWeights(const sp::Conv2dShape& s, int64_t image_groups,
                          const float* dy, const float* w, CpuIsa isa,
                          ThreadPool* pool, PackedGemmB* out) {
  if (!ShareWeights(s, image_groups)) return;
  const int64_t hw = s.h * s.w;
  const int64_t kk = s.k_h * s.k_w;
  const int64_t depth = s.c_out * kk;
  // The smallest group's product: its rows pick the micro-kernel.
  c::MatMulShape m =
      IndirectShape(s.n / image_groups * hw, s.c_in, depth, depth);
  m.c_col = hw;
  const GradInputWeights f{w, s.c_in, kk};
  GemmPacking packing;
  packing.a_base = dy;  // an indirect product's micro-kernel; A is not read
  packing.pack_b = &GradInputWeights::Pack;
  packing.ctx = &f;
  PackGemmB(m, nullptr, packing, isa, pool, out);
}

// grad_input: dx^T[(n, ih, iw), ci] = gather(dy)^T x W'^T, A read from dy
// spread onto a zero grid (stride holes and borders are zeros), B = W'^T
// packed from w (GradInputWeights), or from wt where image groups each
// pack it; by image groups.
void GradInputIndirect(const sp::Conv2dShape& s, const float* dy,
                       const float* w, float* dx, int64_t chunk, CpuIsa isa,
                       ThreadPool* pool) {
  // The grid's planes (GradInputIndirectImages).
  const int64_t hd = s.h + s.pad_top + (s.k_h - 1) * s.dilation_h;
  const int64_t wd = s.w + s.pad_left + (s.k_w - 1) * s.dilation_w;
  const int64_t groups = PlanImageGroups(s.n, s.c_out * hd * wd, s.h * s.w,
                                         sp::Conv2dWeightSize(s), pool);
  const int64_t dy_image = s.c_out * sp::Conv2dOutH(s) * sp::Conv2dOutW(s);
  const int64_t dx_image = s.c_in * s.h * s.w;
  // Several image groups read B packed once, here (ShareWeights), or else
  // pack it once each: where a thread runs several (L2-sized groups, small
  // weights), from wt, transposed once here, the GEMM's own vector packing
  // being cheaper than each group transposing w.
  const int64_t cig = s.c_in / s.groups;
  const int64_t cog = s.c_out / s.groups;
  const int64_t kk = s.k_h * s.k_w;
  PackedGemmB w_packed;
  PackGradInputWeights(s, groups, dy, w, isa, pool, &w_packed);
  const bool from_wt = w_packed.data == nullptr && groups > Threads(pool);
  const Floats wt(from_wt ? s.groups * cig * cog * kk : 0);
  if (from_wt) TransposeWeights(w, s.groups, cog, cig, kk, wt.data(), pool);
  const bool stream_dx = StreamOutput(s.n * dx_image, dx, dy, nullptr);
  ForImageGroups(s, groups, pool,
                 [&](const sp::Conv2dShape& g, int64_t n0, ThreadPool* gp) {
                   GradInputIndirectImages(
                       g, dy + n0 * dy_image, from_wt ? nullptr : w,
                       from_wt ? wt.data() : nullptr, &w_packed,
                       dx + n0 * dx_image, stream_dx, chunk, isa, gp);
                 });
}

// dy spread onto the grid the strided grad_input reads by class: dy row r
// at grid row r + top (the most negative row read is -(KH - 1) * dh / sh),
// h x w planes; likewise columns.
struct ClassGrid {
  explicit ClassGrid(const sp::Conv2dShape& s)
      : top(((s.k_h - 1) * s.dilation_h + s.stride_h - 1) / s.stride_h),
        left(((s.k_w - 1) * s.dilation_w + s.stride_w - 1) / s.stride_w),
        h(top + (s.h - 1 + s.pad_top) / s.stride_h + 2),
        w(left + (s.w - 1 + s.pad_left) / s.stride_w + 2) {}
  const int64_t top, left, h, w;
};

// Strided grad_input's classes along one axis (GradInputByClass): the dx
// positions p + stride * a < size of class p.
int64_t ClassSize(int64_t size, int64_t p, int64_t stride) {
  return (size - p + stride - 1) / stride;
}

// The kernel offsets k of an axis whose taps reach class p, in increasing
// order: p + pad - k * dilation a multiple of the stride (the other taps
// of the class's pixels fall into stride holes).
absl::InlinedVector<int64_t, 8> ClassTaps(int64_t p, int64_t pad,
                                          int64_t k_size, int64_t dilation,
                                          int64_t stride) {
  absl::InlinedVector<int64_t, 8> taps;
  for (int64_t k = 0; k < k_size; ++k) {
    if ((p + pad - k * dilation) % stride == 0) taps.push_back(k);
  }
  return taps;
}

// dx from the stride classes' planes (GradInputByClass): class (ph, pw)
// holds, for every (image, channel), its rows_a x cols_b pixels (ph + sh *
// a, pw + sw * b), the classes one after the other in (ph, pw) order. Each
// dx row interleaves the rows of its sw classes; with SSE and sw = 2, four
// floats of each at a time, and with `stream` (a large dx, StreamOutput in
// lane_kernels.h) non-temporal stores where a dx row is 16-byte aligned,
// fenced before each task ends (3 x 3 s2 64 -> 128 32px, batch 32: +1 - 6 %
// on one core, +5 % on two). Pure data movement.
void MergeClasses(const sp::Conv2dShape& s, const float* planes, float* dx,
                  bool stream, ThreadPool* pool) {
  const int64_t sh = s.stride_h, sw = s.stride_w;
  const int64_t images = s.n * s.c_in;
  // Where class (ph, pw)'s planes start, and each one's size.
  absl::InlinedVector<const float*, 16> start;
  absl::InlinedVector<int64_t, 16> plane_size, cols;
  const float* at = planes;
  for (int64_t ph = 0; ph < sh && ph < s.h; ++ph) {
    for (int64_t pw = 0; pw < sw && pw < s.w; ++pw) {
      const int64_t rows_a = ClassSize(s.h, ph, sh);
      const int64_t cols_b = ClassSize(s.w, pw, sw);
      start.push_back(at);
      plane_size.push_back(rows_a * cols_b);
      cols.push_back(cols_b);
      at += images * rows_a * cols_b;
    }
  }
  const int64_t classes_w = std::min(sw, s.w);
  ParallelForBlocks(
      pool, images,
      std::max<int64_t>(1, 16384 / std::max<int64_t>(1, s.h * s.w)),
      [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          for (int64_t ih = 0; ih < s.h; ++ih) {
            const int64_t first = (ih % sh) * classes_w;
            const int64_t a = ih / sh;
            float* d = dx + (i * s.h + ih) * s.w;
            const float* r0 =
                start[first] + i * plane_size[first] + a * cols[first];
            if (classes_w == 1) {
              CopyRun(d, r0, s.w);
              continue;
            }
            int64_t b = 0;
            if (sw == 2 && classes_w == 2) {
              const float* r1 = start[first + 1] + i * plane_size[first + 1] +
                                a * cols[first + 1];
              const int64_t pairs = cols[first + 1];  // w / 2
#if defined(__SSE__)
              if (stream && reinterpret_cast<uintptr_t>(d) % 16 == 0) {
                for (; b + 4 <= pairs; b += 4) {
                  const __m128 e = _mm_loadu_ps(r0 + b);
                  const __m128 o = _mm_loadu_ps(r1 + b);
                  _mm_stream_ps(d + 2 * b, _mm_unpacklo_ps(e, o));
                  _mm_stream_ps(d + 2 * b + 4, _mm_unpackhi_ps(e, o));
                }
              }
              for (; b + 4 <= pairs; b += 4) {
                const __m128 e = _mm_loadu_ps(r0 + b);
                const __m128 o = _mm_loadu_ps(r1 + b);
                _mm_storeu_ps(d + 2 * b, _mm_unpacklo_ps(e, o));
                _mm_storeu_ps(d + 2 * b + 4, _mm_unpackhi_ps(e, o));
              }
#endif
              for (; b < pairs; ++b) {
                d[2 * b] = r0[b];
                d[2 * b + 1] = r1[b];
              }
              if (cols[first] > pairs) d[2 * b] = r0[b];  // odd w
              continue;
            }
            for (int64_t pw = 0; pw < classes_w; ++pw) {
              const float* r = start[first + pw] + i * plane_size[first + pw] +
                               a * cols[first + pw];
              for (int64_t c = 0; c < cols[first + pw]; ++c) {
                d[pw + sw * c] = r[c];
              }
            }
          }
        }
#if defined(__SSE__)
        if (stream) _mm_sfence();
#endif
      });
}

// grad_input with a stride above 1: the stride holes are left out. A
// canonical chain starts from +0.0f and so never holds -0.0f, and adding
// fma(0, w, acc) for a finite w leaves any other acc unchanged, so a hole
// term changes nothing unless some weight is infinite or NaN (0 * Inf is
// NaN); the caller checks that. The dx pixels fall into stride_h x
// stride_w classes by (ih mod sh, iw mod sw); within a class every pixel
// has the same hole taps, so each class is one indirect product over its
// kept taps only, in sequence order, with each canonical chunk of the full
// sequence (holes included) as one block (GemmPacking::k_bounds): the
// chunks' partials, and so the bits, are those of the full reduction. A
// kept tap reads dy row a + (ph + pad_top - kh * dh) / sh for class pixel
// row ih = ph + sh * a (exact division), so dy is only padded, not
// spread onto a grid of holes (and a 1 x 1 kernel without top or left
// padding reads dy in place). In dx a class's pixels are sw floats apart,
// so the GEMM writes them back one float per store. With two or more
// classes that have terms, or a large dx, each class writes its own
// planes instead, [n][c_in] of its rows x columns, where a tile's pixels
// are adjacent (4 x 4 blocks per store), and MergeClasses interleaves them
// into dx. A single class with terms (a 1 x 1 kernel's) into a small dx
// writes dx directly, after one contiguous zeroing of the holes' pixels;
// in an image group (`grouped`: dx a group's, in L2) it does so whatever
// dx's size, unless dx's planes are a multiple of 4 KiB (their columns'
// stores would compete for the same L1 sets). Measured at batch 32 on one
// core: 1 x 1 s2 grad_input 64 -> 128 32px (merged) +9 %, 128 -> 256 16px
// and 256 -> 512 8px (direct) +16 % and +7 % over the whole batch merged;
// 3 x 3 s2 64 -> 128 32px +12 %.
void GradInputByClassImages(const sp::Conv2dShape& s, const float* dy,
                            const float* w, bool by_tap, float* dx, bool stream,
                            int64_t chunk, CpuIsa isa, ThreadPool* pool,
                            bool grouped) {
  const int64_t out_h = sp::Conv2dOutH(s);
  const int64_t out_w = sp::Conv2dOutW(s);
  const int64_t hw = s.h * s.w;
  const int64_t cig = s.c_in / s.groups;
  const int64_t cog = s.c_out / s.groups;
  const int64_t kk = s.k_h * s.k_w;
  const int64_t depth = cog * kk;
  const int64_t sh = s.stride_h, sw = s.stride_w;
  const ClassGrid cg(s);
  // A 1 x 1 kernel with no padding on the top and left reads dy only inside
  // its planes (class (0, 0)'s pixel (a, b) reads dy[a][b], the other
  // classes nothing): the products then read dy in place, not a padded
  // copy.
  const bool in_place =
      s.k_h == 1 && s.k_w == 1 && s.pad_top == 0 && s.pad_left == 0;
  const int64_t gt = in_place ? 0 : cg.top, gl = in_place ? 0 : cg.left;
  const int64_t gh = in_place ? out_h : cg.h, gw = in_place ? out_w : cg.w;
  const Floats grid(in_place ? 0 : s.n * s.c_out * gh * gw);
  if (!in_place) {
    SpreadPlanes(dy, s.n * s.c_out, out_h, out_w, 1, 1, gt, gl, gh, gw,
                 grid.data(), isa, pool);
  }
  const float* grid_base = in_place ? dy : grid.data();
  const int64_t chunks = (depth + c::kChunk - 1) / c::kChunk;
  std::vector<int64_t>& rows = Table(0);
  std::vector<int64_t>& taps = Table(1);
  std::vector<int64_t>& c_rows = Table(2);
  std::vector<int64_t> kept, bounds(chunks + 1), class_taps;
  // Per row class ph and column class pw, the kernel rows and columns it
  // keeps; a class has terms when it keeps one of each.
  std::vector<absl::InlinedVector<int64_t, 8>> row_taps, col_taps;
  for (int64_t ph = 0; ph < sh && ph < s.h; ++ph) {
    row_taps.push_back(ClassTaps(ph, s.pad_top, s.k_h, s.dilation_h, sh));
  }
  for (int64_t pw = 0; pw < sw && pw < s.w; ++pw) {
    col_taps.push_back(ClassTaps(pw, s.pad_left, s.k_w, s.dilation_w, sw));
  }
  int64_t with_terms = 0, classes = 0;
  for (const auto& kh : row_taps) {
    for (const auto& kw : col_taps) {
      ++classes;
      if (cog > 0 && !kh.empty() && !kw.empty()) ++with_terms;
    }
  }
  const int64_t dx_size = s.n * s.c_in * hw;
  const bool merge = with_terms >= 2 ||
                     (grouped ? hw % 1024 == 0 : dx_size >= (int64_t{1} << 18));
  if (!merge && with_terms < classes) {
    ParallelForBlocks(pool, dx_size, int64_t{1} << 16,
                      [&](int64_t b, int64_t e) { ZeroRun(dx + b, e - b); });
  }
  // merge: the classes' planes, one after the other in (ph, pw) order.
  const Floats planes(merge ? dx_size : 0);
  float* class_at = planes.data();
  for (int64_t ph = 0; ph < sh && ph < s.h; ++ph) {
    for (int64_t pw = 0; pw < sw && pw < s.w; ++pw) {
      // The class's kept taps (co_l, kh, kw), in order.
      kept.clear();
      taps.clear();
      class_taps.clear();
      for (const int64_t kh : row_taps[ph]) {
        for (const int64_t kw : col_taps[pw]) {
          class_taps.push_back(kh * s.k_w + kw);
        }
      }
      for (int64_t j = 0; j < cog; ++j) {
        for (const int64_t kh : row_taps[ph]) {
          const int64_t th = ph + s.pad_top - kh * s.dilation_h;
          for (const int64_t kw : col_taps[pw]) {
            const int64_t tw = pw + s.pad_left - kw * s.dilation_w;
            kept.push_back((j * s.k_h + kh) * s.k_w + kw);
            taps.push_back(j * gh * gw + th / sh * gw + tw / sw);
          }
        }
      }
      const int64_t depth_kept = static_cast<int64_t>(kept.size());
      for (int64_t b = 0, i = 0; b <= chunks; ++b) {
        while (i < depth_kept && kept[i] < b * c::kChunk) ++i;
        bounds[b] = i;
      }
      // Its pixels (n, ph + sh * a, pw + sw * b), at (n, a, b) of its
      // planes.
      const int64_t rows_a = ClassSize(s.h, ph, sh);
      const int64_t cols_b = ClassSize(s.w, pw, sw);
      const int64_t plane = rows_a * cols_b;
      float* const out = merge ? class_at : dx;
      if (merge) class_at += s.n * s.c_in * plane;
      if (depth_kept == 0) {  // every term a hole: +0.0f (dx: zeroed above)
        if (merge) {
          ParallelForBlocks(
              pool, s.n * s.c_in * plane, int64_t{1} << 16,
              [&](int64_t b, int64_t e) { ZeroRun(out + b, e - b); });
        }
        continue;
      }
      rows.resize(s.n * plane);
      c_rows.resize(rows.size());
      for (int64_t i = 0, n = 0; n < s.n; ++n) {
        for (int64_t a = 0; a < rows_a; ++a) {
          for (int64_t b = 0; b < cols_b; ++b, ++i) {
            rows[i] = n * s.c_out * gh * gw + (a + gt) * gw + b + gl;
            c_rows[i] =
                merge ? n * s.c_in * plane + a * cols_b + b
                      : n * s.c_in * hw + (ph + sh * a) * s.w + pw + sw * b;
          }
        }
      }
      c::MatMulShape m = IndirectShape(static_cast<int64_t>(rows.size()), cig,
                                       depth_kept, depth_kept);
      const int64_t channel = merge ? plane : hw;
      m.c_col = channel;
      for (int64_t g = 0; g < s.groups; ++g) {
        const ClassWeights f{w + g * cog * cig * kk,
                             cig,
                             kk,
                             class_taps.data(),
                             static_cast<int64_t>(class_taps.size()),
                             by_tap};
        GemmPacking packing =
            IndirectPacking(grid_base + g * cog * gh * gw, rows, taps, c_rows);
        packing.k_bounds = bounds.data();
        packing.k_blocks = chunks;
        packing.pack_b = &ClassWeights::Pack;
        packing.pack_b_like_matrix = true;
        packing.ctx = &f;
        GemmPacked(m, nullptr, nullptr, out + g * cig * channel, chunk, packing,
                   isa, pool);
      }
    }
  }
  if (merge) MergeClasses(s, planes.data(), dx, stream, pool);
}

// wc[g][co][t][cl] = w[g][co][cl][t]: each output channel's cig x kk block
// transposed, so a class's B rows are runs (ClassWeights), the blocks
// split over the pool.
void ClassWeightsByTap(const float* w, int64_t blocks, int64_t cig, int64_t kk,
                       float* wc, ThreadPool* pool) {
  const int64_t size = cig * kk;
  if (blocks * size < (int64_t{1} << 15)) pool = nullptr;  // small
  ParallelForBlocks(pool, blocks, std::max<int64_t>(1, blocks / 8),
                    [&](int64_t b0, int64_t b1) {
                      for (int64_t b = b0; b < b1; ++b) {
                        cpu_internal::TransposeCopy(w + b * size, kk, cig, kk,
                                                    wc + b * size, cig);
                      }
                    });
}

// GradInputByClassImages by image groups (PlanImageGroups); with several
// groups, B packed from wc (ClassWeightsByTap), transposed once here.
void GradInputByClass(const sp::Conv2dShape& s, const float* dy, const float* w,
                      float* dx, int64_t chunk, CpuIsa isa, ThreadPool* pool) {
  const ClassGrid cg(s);
  const int64_t dy_image = s.c_out * sp::Conv2dOutH(s) * sp::Conv2dOutW(s);
  const int64_t dx_image = s.c_in * s.h * s.w;
  // Per image: dy's padded grid, and the classes' planes (dx's size).
  const int64_t groups =
      PlanImageGroups(s.n, s.c_out * cg.h * cg.w + dx_image, s.h * s.w,
                      sp::Conv2dWeightSize(s), pool);
  const int64_t kk = s.k_h * s.k_w;
  const int64_t cig = s.c_in / s.groups;
  const bool by_tap = kk > 1 && groups > 1;
  const bool stream = StreamOutput(s.n * dx_image, dx, dy, nullptr);
  const Floats wc(by_tap ? s.c_out * cig * kk : 0);
  if (by_tap) ClassWeightsByTap(w, s.c_out, cig, kk, wc.data(), pool);
  ForImageGroups(s, groups, pool,
                 [&](const sp::Conv2dShape& g, int64_t n0, ThreadPool* gp) {
                   GradInputByClassImages(
                       g, dy + n0 * dy_image, by_tap ? wc.data() : w, by_tap,
                       dx + n0 * dx_image, stream, chunk, isa, gp, groups > 1);
                 });
}

// grad_weight: dw^T[(cl, kh, kw), co] = im2col(x)[tap, (n, pix)] x
// dy^T[(n, pix), co], A read from the zero-padded x, B packed from dy.
void GradWeightIndirect(const sp::Conv2dShape& s, const float* x,
                        const float* dy, float* dw, int64_t chunk, CpuIsa isa,
                        ThreadPool* pool) {
  const int64_t out_h = sp::Conv2dOutH(s);
  const int64_t out_w = sp::Conv2dOutW(s);
  const int64_t pix = out_h * out_w;
  const int64_t cig = s.c_in / s.groups;
  const int64_t cog = s.c_out / s.groups;
  const int64_t taps_n = cig * s.k_h * s.k_w;
  std::vector<int64_t>& taps = Table(0);
  std::vector<int64_t>& steps = Table(1);
  const IndirectInput in(s, x, isa, pool, &steps, &taps);
  const TapRanges ow_range(s.w, out_w, s.k_w, s.stride_w, s.pad_left,
                           s.dilation_w);
  c::MatMulShape m = IndirectShape(taps_n, cog, s.n * pix, 0);
  m.c_row = 1;
  m.c_col = taps_n;
  for (int64_t g = 0; g < s.groups; ++g) {
    const GradWeightOperands f{
        &s,        x + g * cig * s.h * s.w, dy + g * cog * pix, out_h, out_w,
        &ow_range, TransposeCopyFor(isa)};
    GemmPacking packing;
    packing.a_base = in.group(s, g);
    packing.a_rows = taps.data();
    packing.a_offsets = steps.data();
    packing.pack_b = &GradWeightOperands::PackDy;
    packing.pack_b_whole = true;  // dy^T: the size of dy
    packing.ctx = &f;
    GemmPacked(m, nullptr, nullptr, dw + g * cog * taps_n, chunk, packing, isa,
               pool);
  }
}

// Whether a convolution's lowered matrices are its tensors themselves: a
// 1 x 1 kernel at stride 1 without padding, where each image's x and dy
// (channels x pixels, row-major) are the B of its forward and grad_input
// products, and y and dx their C.
bool Pointwise(const sp::Conv2dShape& s) {
  return Unpadded1x1(s) && s.stride_h == 1 && s.stride_w == 1;
}

// Whether a forward is a 1 x 1 convolution without padding at a column
// stride of 2 and with at least 16 output columns, which runs packed with
// EvenColumnsB (B's rows gathered four floats from two loads and a
// shuffle, sixteen per permute with AVX-512, where ForwardB moves one
// float at a time) rather than indirect
// (whose tiles, pixels by output channels, are transposed into the output
// planes, which costs most where the reduction is short). Measured with
// cpu_bench on one core (AVX-512), batch 8, against the indirect product,
// as fractions of the GEMM of each shape (docs/benchmarks.md, "1 x 1
// stride-2 forwards packed"): 8 -> 16 channels at 32 px 0.69 - 0.73 ->
// 0.82 - 0.87, 64 -> 128 at 32 px 0.94 - 0.96 -> 0.97 - 0.98, 128 -> 256
// at 32 px 0.81 - 0.88 -> 0.95 - 0.96; with 8 output columns (128 -> 256
// at 16 px) 0.99 - 1.00 -> 0.98, with 4 (256 -> 512 at 8 px) 0.99 -> 0.92.
bool StridedPointwiseForward(const sp::Conv2dShape& s) {
  return Unpadded1x1(s) && s.stride_w == 2 && sp::Conv2dOutW(s) >= 16;
}

// The products of a Pointwise convolution as plain GEMMs, per group: C[i][g]
// = A[g] x B[i][g], A[g] rows x depth at a + g * rows * depth, B[i][g]
// depth x pix at b + i * b_image + g * depth * pix, C[i][g] rows x pix at c
// + i * c_image + g * rows * pix, all row-major; images split over the pool
// as BatchImages splits the packed products, the images of a batch one
// product whose columns are theirs side by side (B copied in runs of an
// image's row, ImageBlocksB; each image's columns landing in its own C
// block), a batch of one image a plain GEMM. The reduction runs over the
// channels in order, as the lowered product's depth does, so the bits are
// those of the packed and indirect paths; but B is copied in whole runs and
// C's rows are written straight into their planes, where the packed path's
// per-tap packer (and the indirect path's transposed write-back) cost up to
// half the time of a narrow MobileNet-v2 layer (docs/benchmarks.md,
// "Pointwise convolutions as plain products"). One product per image
// padded its last column panel: a 16 x 16 plane is 256 columns, 6 panels
// of 48 on 8-row AVX-512 tiles, 11 % of them empty; a batch of them pads
// under 1 % (the 8 -> 48 grad_input 0.87 -> 0.94 - 0.97 of its GEMM;
// docs/benchmarks.md, "..., pointwise products over several images").
void PointwiseProducts(int64_t n, int64_t groups, int64_t rows, int64_t depth,
                       int64_t pix, const float* a, const float* b,
                       int64_t b_image, float* c, int64_t c_image,
                       int64_t chunk, CpuIsa isa, ThreadPool* pool) {
  bool per_batch = false;
  const int64_t nb = BatchImages(pix, rows * pix * depth, n, pool, &per_batch);
  const int64_t batches = (n + nb - 1) / nb;
  ThreadPool* inner = per_batch ? nullptr : pool;
  const c::MatMulShape m = RowMajor(rows, pix, depth);
  auto batch = [&](int64_t bi) {
    const int64_t end = std::min(n, (bi + 1) * nb);
    if (end - bi * nb > 1) {
      const int64_t i0 = bi * nb;
      c::MatMulShape mj = RowMajor(rows, (end - i0) * pix, depth);
      mj.c_row = pix;
      for (int64_t g = 0; g < groups; ++g) {
        const ImageBlocksB f{b + i0 * b_image + g * depth * pix, b_image, pix,
                             CopyRowsFor(isa)};
        GemmPacking packing;
        packing.pack_b = &ImageBlocksB::Pack;
        packing.pack_b_like_matrix = true;  // as the GEMM takes a matrix B
        packing.ctx = &f;
        packing.c_block = pix;
        packing.c_block_stride = c_image;
        GemmPacked(mj, a + g * rows * depth, nullptr,
                   c + i0 * c_image + g * rows * pix, chunk, packing, isa,
                   inner);
      }
      return;
    }
    for (int64_t i = bi * nb; i < end; ++i) {
      for (int64_t g = 0; g < groups; ++g) {
        Gemm(m, a + g * rows * depth, b + i * b_image + g * depth * pix,
             c + i * c_image + g * rows * pix, chunk, isa, inner);
      }
    }
  };
  if (per_batch) {
    ParallelFor(pool, batches, batch);
  } else {
    for (int64_t bi = 0; bi < batches; ++bi) batch(bi);
  }
}

}  // namespace

namespace cpu_internal {
void SetConvImageGroupForTesting(int64_t images) {
  ImageGroupForTesting().store(images, std::memory_order_relaxed);
}
void SetConvSharedWeightsForTesting(bool on) {
  SharedWeightsForTesting().store(on, std::memory_order_relaxed);
}
}  // namespace cpu_internal

void Conv2dForwardGemm(const sp::Conv2dShape& s, const float* x, const float* w,
                       float* y, int64_t chunk, CpuIsa isa, ThreadPool* pool) {
  const int64_t out_h = sp::Conv2dOutH(s);
  const int64_t out_w = sp::Conv2dOutW(s);
  const int64_t pix = out_h * out_w;
  const int64_t cig = s.c_in / s.groups;
  const int64_t cog = s.c_out / s.groups;
  const int64_t depth = cig * s.k_h * s.k_w;
  if (pix == 0 || cog == 0 || s.n == 0) return;
  if (cig == 1 && s.groups > 1 && s.k_h * s.k_w <= c::kChunk) {
    // Depthwise: one chain of at most one chunk per output, no GEMM.
    DepthwiseConv2dForward(s, x, w, y, isa, pool);
    return;
  }
  if (StridedPointwiseForward(s)) {
    // y[co, (image, oh, ow)] = W[co, cl] x x[cl, (image, oh * sh, 2 * ow)]
    // per group, each image's columns landing in its own output block.
    c::MatMulShape m = RowMajor(cog, s.n * pix, cig);
    m.c_row = pix;
    for (int64_t g = 0; g < s.groups; ++g) {
      const EvenColumnsB f{x + g * cig * s.h * s.w,
                           s.c_in * s.h * s.w,
                           s.h * s.w,
                           s.w,
                           s.stride_h * s.w,
                           out_w,
                           pix,
                           GatherEvenRowsFor(isa)};
      GemmPacking packing;
      packing.pack_b = &EvenColumnsB::Pack;
      // Gathered once where several row super-blocks read it.
      packing.pack_b_like_matrix = true;
      packing.ctx = &f;
      packing.c_block = pix;
      packing.c_block_stride = s.c_out * pix;
      GemmPacked(m, w + g * cog * cig, nullptr, y + g * cog * pix, chunk,
                 packing, isa, pool);
    }
    return;
  }
  if (UseIndirectForward(s, cog)) {
    ForwardIndirect(s, x, w, y, chunk, isa, pool);
    return;
  }
  if (Pointwise(s)) {
    // y[i][g] = W[g] x x[i][g].
    PointwiseProducts(s.n, s.groups, cog, cig, pix, w, x, s.c_in * pix, y,
                      s.c_out * pix, chunk, isa, pool);
    return;
  }
  // Batches write disjoint outputs.
  bool per_batch = false;
  const int64_t nb = BatchImages(pix, cog * pix * depth, s.n, pool, &per_batch);
  const int64_t batches = (s.n + nb - 1) / nb;
  ThreadPool* inner = per_batch ? nullptr : pool;
  const TapRanges ow_range(s.w, out_w, s.k_w, s.stride_w, s.pad_left,
                           s.dilation_w);
  auto batch = [&](int64_t b) {
    const int64_t n0 = b * nb;
    const int64_t count = std::min(nb, s.n - n0);
    // y[co, (image, oh, ow)] = W[co, (cl, kh, kw)] x im2col(x), B packed
    // from x, each image's columns landing in its own output block.
    c::MatMulShape m = RowMajor(cog, count * pix, depth);
    m.c_row = pix;
    for (int64_t g = 0; g < s.groups; ++g) {
      const ForwardB f{&s,    x + (n0 * s.c_in + g * cig) * s.h * s.w,
                       out_h, out_w,
                       cig,   &ow_range};
      GemmPacking packing;
      packing.pack_b = &ForwardB::Pack;
      packing.ctx = &f;
      packing.c_block = pix;
      packing.c_block_stride = s.c_out * pix;
      GemmPacked(m, w + g * cog * depth, nullptr,
                 y + (n0 * s.c_out + g * cog) * pix, chunk, packing, isa,
                 inner);
    }
  };
  if (per_batch) {
    ParallelFor(pool, batches, batch);
  } else {
    for (int64_t b = 0; b < batches; ++b) batch(b);
  }
}

namespace {

// Whether a grad_weight runs packed (dy as A, im2col(x)^T as B, the taps
// on the lanes) where UseIndirect would pick the indirect product: a 1 x 1
// kernel without padding at a column stride of 2 with at least
// kPackedStridedMinTaps input channels per group. The indirect product
// packs only dy^T but its micro-kernel, each step's broadcasts read in
// place from as many planes of x at a column stride of 2, is slower than
// the GEMM's over packed panels, which the packed product runs after
// packing dy's rows and x's even columns transposed (TransposeCopyEven).
// Measured with cpu_bench on one core (AVX-512, docs/benchmarks.md, "1 x 1
// stride-2 grad_weights packed; table (e) paired"), as fractions of the
// GEMM of each shape at batch 8: 64 -> 128 at 32 px 0.65 - 0.71 -> 0.80 -
// 0.86, 256 -> 512 at 8 px 0.64 - 0.78 -> 0.90 - 0.93; with 8 input
// channels (8 lanes of 32) packed lost, 2.9 -> 1.6.
constexpr int64_t kPackedStridedMinTaps = 32;
bool PackedStridedPointwiseGradWeight(const sp::Conv2dShape& s) {
  return Unpadded1x1(s) && s.stride_w == 2 &&
         s.c_in / s.groups >= kPackedStridedMinTaps;
}

// Whether such a packed grad_weight reads dy in place as an indirect A
// (row co at dy's plane co, step (n, oh, ow) at image n's pixel) instead
// of packing it: with at most kInPlaceDyMaxTaps taps, B has few column
// panels, each packed A panel would be read by few tiles, and packing it
// (a transposing copy of all of dy) costs more than reading dy's rows in
// place. Measured on the Xeon build machine (AVX-512), calls alternating
// with the packed A, time ratio packed / in place at batch 8 and 32
// (docs/benchmarks.md, "dy in place for the strided 1 x 1
// grad_weights"), one thread: 64 -> 128 at 32 px 1.10 - 1.15, 128 -> 256
// at 16 px 1.01 - 1.05, 32 -> 64 at 16 px 1.17 - 1.42; two threads 1.08 -
// 1.25. With 256 taps (256 -> 512 at 8 px: each A panel read by eight
// column panels) 0.94 - 0.98 on one thread, so there dy stays packed.
constexpr int64_t kInPlaceDyMaxTaps = 128;

// grad_weight of a conv that is not depthwise, over the images of s.
void GradWeightImages(const sp::Conv2dShape& s, const float* x, const float* dy,
                      float* dw, int64_t chunk, CpuIsa isa, ThreadPool* pool) {
  const int64_t out_h = sp::Conv2dOutH(s);
  const int64_t out_w = sp::Conv2dOutW(s);
  const int64_t pix = out_h * out_w;
  const int64_t cig = s.c_in / s.groups;
  const int64_t cog = s.c_out / s.groups;
  const int64_t taps = cig * s.k_h * s.k_w;
  const int64_t depth = s.n * pix;  // (n, oh, ow)
  if (!PackedStridedPointwiseGradWeight(s) && UseIndirect(s, cog)) {
    GradWeightIndirect(s, x, dy, dw, chunk, isa, pool);
    return;
  }
  // Few output channels, or a strided 1 x 1 kernel with many input
  // channels: dw[co, tap] = dy[co, (n, pix)] x
  // im2col(x)^T[(n, pix), tap], both operands packed straight from dy and x
  // (fma(dy, x, acc) equals the indirect path's fma(x, dy, acc) bit for
  // bit), the taps as the micro-kernel's lanes; for a strided 1 x 1 kernel
  // with few taps dy is not packed but read in place (kInPlaceDyMaxTaps).
  const c::MatMulShape m = RowMajor(cog, taps, depth);
  const TapRanges ow_range(s.w, out_w, s.k_w, s.stride_w, s.pad_left,
                           s.dilation_w);
  // dy in place (A(co, (n, q)) = dy[n][co][q] of the group's planes).
  const bool dy_in_place =
      PackedStridedPointwiseGradWeight(s) && taps <= kInPlaceDyMaxTaps;
  std::vector<int64_t>& dy_rows = Table(0);
  std::vector<int64_t>& dy_steps = Table(1);
  if (dy_in_place) {
    dy_rows.resize(cog);
    for (int64_t co = 0; co < cog; ++co) dy_rows[co] = co * pix;
    dy_steps.resize(depth);
    for (int64_t n = 0, k = 0; n < s.n; ++n) {
      for (int64_t q = 0; q < pix; ++q, ++k) {
        dy_steps[k] = n * s.c_out * pix + q;
      }
    }
  }
  for (int64_t g = 0; g < s.groups; ++g) {
    const GradWeightOperands f{
        &s,        x + g * cig * s.h * s.w, dy + g * cog * pix, out_h, out_w,
        &ow_range, TransposeCopyFor(isa)};
    GemmPacking packing;
    packing.pack_b = &GradWeightOperands::PackTaps;
    packing.ctx = &f;
    if (dy_in_place) {  // m's A strides are then not read
      packing.a_base = f.dy;
      packing.a_rows = dy_rows.data();
      packing.a_offsets = dy_steps.data();
    } else {
      packing.pack_a = &GradWeightOperands::PackDy;
    }
    GemmPacked(m, nullptr, nullptr, dw + g * cog * taps, chunk, packing, isa,
               pool);
  }
}

// grad_weight's reduction runs over (n, oh, ow) in canonical chunks combined
// by the pairwise tree (kernels/canonical/reduce.h), whose first split is at
// the largest power of two of chunks below their count. Where that split
// falls between images and halves the batch, and likewise at every level
// down to `parts` subtrees, each subtree is the grad_weight of its images
// alone, and dw is their sum by the same tree: the parts can run side by
// side, each on one thread with its x, dy and packed operands in that
// core's cache, where one product split over the pool shares its packed dy
// between cores. Requires parts a power of two, and each part at least
// kMinTreePartChunks chunks: the parts' dw (one each, then summed) must be
// small next to their work. Measured on two threads at batch 32 (cpu_bench
// table (f)): parts of 16 and more chunks +2 - 48 % (64-channel 32 x 32,
// 3 x 3 and 1 x 1 stride-2 64 -> 128, 16-channel 16 x 16; 128-channel
// 16 x 16 even), parts of 4 chunks (256-channel 8 x 8) 4 - 14 % slower.
constexpr int64_t kMinTreePartChunks = 16;

bool SplitsIntoSubtrees(int64_t n, int64_t pix, int64_t parts) {
  if (parts == 1) return true;
  const int64_t chunks = c::NumChunks(n * pix);
  if (n % 2 != 0 || chunks < 2 * kMinTreePartChunks) return false;
  if (c::TreeSplit(chunks) * c::kChunk != n / 2 * pix) return false;
  return SplitsIntoSubtrees(n / 2, pix, parts / 2);
}

// The number of subtree parts to run a grad_weight on `pool` as (1: one
// product over the pool).
int64_t GradWeightParts(const sp::Conv2dShape& s, int64_t chunk,
                        ThreadPool* pool) {
  const int64_t threads = Threads(pool);
  if (chunk != c::kChunk || threads < 2 || (threads & (threads - 1)) != 0) {
    return 1;
  }
  const int64_t forced = ImageGroupForTesting().load(std::memory_order_relaxed);
  if (forced >= s.n) return 1;
  const int64_t pix = sp::Conv2dOutH(s) * sp::Conv2dOutW(s);
  return SplitsIntoSubtrees(s.n, pix, threads) ? threads : 1;
}

// Whether a grad_input is a 1 x 1 convolution's at stride 2 x 2 without
// padding and with at least 16 output columns, which runs as
// PointwiseStride2GradInput rather than by class (GradInputByClass: an
// indirect product whose lanes are the input channels, its tiles
// transposed into class planes or straight into dx at stride 2). Measured
// with cpu_bench on one core of the Xeon build machine (docs/benchmarks.md,
// "Xeon, 2026-12-07 (evening)"), against the GEMM of the shape: batch 8,
// 8 -> 16 at 32 px 0.88 -> 1.22 - 1.74, 64 -> 128 at 32 px 2.08 - 2.11 ->
// 2.67 - 2.84; batch 32 (table (f)), 64 -> 128 63 - 66 -> 84 - 90 GFLOP/s
// on one thread and 123 - 127 -> 155 - 170 on two. With 4 output columns
// (256 -> 512 at 8 px: products 16 pixels wide) it lost, 104 - 106 -> 89 -
// 90 GFLOP/s on one thread and 186 - 196 -> 108 - 153 on two.
constexpr int64_t kSpreadMinColumns = 16;
bool PointwiseStride2(const sp::Conv2dShape& s) {
  return Unpadded1x1(s) && s.stride_h == 2 && s.stride_w == 2 &&
         sp::Conv2dOutW(s) >= kSpreadMinColumns;
}

// dx's planes (h x w) from the class planes of their even pixels (ch x cw
// = ceil(h / 2) x ceil(w / 2)): row r of plane p is, for an even r, cls's
// row r / 2 of plane p at the even columns and +0.0f at the odd ones, and
// +0.0f for an odd r. Pure data movement, four class floats per two
// stores.
void SpreadEven(const float* cls, int64_t planes, int64_t ch, int64_t cw,
                int64_t h, int64_t w, float* dx) {
  for (int64_t p = 0; p < planes; ++p) {
    const float* src = cls + p * ch * cw;
    float* dst = dx + p * h * w;
    for (int64_t r = 0; r < h; ++r, dst += w) {
      if (r % 2 != 0) {
        std::memset(dst, 0, w * sizeof(float));
        continue;
      }
      const float* row = src + (r / 2) * cw;
      int64_t b = 0;
#if defined(__SSE__)
      const __m128 zero = _mm_setzero_ps();
      for (; 2 * b + 8 <= w; b += 4) {
        const __m128 v = _mm_loadu_ps(row + b);
        _mm_storeu_ps(dst + 2 * b, _mm_unpacklo_ps(v, zero));
        _mm_storeu_ps(dst + 2 * b + 4, _mm_unpackhi_ps(v, zero));
      }
#endif
      for (int64_t c = 2 * b; c < w; ++c) {
        dst[c] = c % 2 == 0 ? row[c / 2] : 0.0f;
      }
    }
  }
}

// grad_input of a 1 x 1 convolution at stride 2 x 2 without padding (and
// finite weights): only dx's pixels (2a, 2b) have terms, dx[ci, (2a, 2b)]
// = sum over co of w[co, ci] dy[co, (a, b)] in co's order, and every other
// pixel is +0.0f (its canonical chain has only hole terms, fma(0, w, acc)
// with a finite w, which leave +0.0f as it is). So per image group the
// products W^T x dy[image] of a stride-1 pointwise grad_input
// (PointwiseProducts: the same terms in the same order, so the same bits),
// each row of output channels a run of whole vectors along the pixels,
// into class planes that stay in L2, then spread onto dx's even pixels
// (SpreadEven), which writes each of dx's lines once.
void PointwiseStride2GradInput(const sp::Conv2dShape& s, const float* dy,
                               const float* w, float* dx, int64_t chunk,
                               CpuIsa isa, ThreadPool* pool) {
  const int64_t out_h = sp::Conv2dOutH(s);
  const int64_t out_w = sp::Conv2dOutW(s);
  const int64_t pix = out_h * out_w;
  const int64_t cig = s.c_in / s.groups;
  const int64_t cog = s.c_out / s.groups;
  const Floats wt(s.groups * cig * cog);
  TransposeWeights(w, s.groups, cog, cig, 1, wt.data(), pool);
  const int64_t dy_image = s.c_out * pix;
  const int64_t cls_image = s.c_in * pix;
  const int64_t dx_image = s.c_in * s.h * s.w;
  const int64_t groups = PlanImageGroups(s.n, cls_image + dx_image, pix,
                                         s.groups * cig * cog, pool);
  ForImageGroups(s, groups, pool,
                 [&](const sp::Conv2dShape& g, int64_t n0, ThreadPool* gp) {
                   const Floats cls(g.n * cls_image);
                   PointwiseProducts(g.n, s.groups, cig, cog, pix, wt.data(),
                                     dy + n0 * dy_image, dy_image, cls.data(),
                                     cls_image, chunk, isa, gp);
                   const int64_t planes = g.n * s.c_in;
                   auto spread = [&](int64_t p0, int64_t p1) {
                     SpreadEven(cls.data() + p0 * pix, p1 - p0, out_h, out_w,
                                s.h, s.w, dx + n0 * dx_image + p0 * s.h * s.w);
                   };
                   ParallelForBlocks(gp, planes,
                                     std::max<int64_t>(1, planes / 8), spread);
                 });
}

}  // namespace

void Conv2dGradWeightGemm(const sp::Conv2dShape& s, const float* x,
                          const float* dy, float* dw, int64_t chunk, CpuIsa isa,
                          ThreadPool* pool) {
  const int64_t cig = s.c_in / s.groups;
  const int64_t depth = s.n * sp::Conv2dOutH(s) * sp::Conv2dOutW(s);
  if (depth == 0) {  // empty reduction: +0.0f
    for (int64_t i = 0; i < sp::Conv2dWeightSize(s); ++i) dw[i] = 0.0f;
    return;
  }
  if (cig == 1 && s.groups > 1) {
    // Depthwise: vectorised across channels, no GEMM.
    DepthwiseConv2dGradWeight(s, x, dy, dw, chunk, isa, pool);
    return;
  }
  const int64_t parts = GradWeightParts(s, chunk, pool);
  if (parts == 1) {
    GradWeightImages(s, x, dy, dw, chunk, isa, pool);
    return;
  }
  // Part i's images into sums[i] (part 0: dw), then the perfect tree over
  // the parts: ((0 + 1) + (2 + 3)) + ...
  const int64_t size = sp::Conv2dWeightSize(s);
  const Floats extra((parts - 1) * size);
  std::vector<float*> sums(parts, dw);
  for (int64_t i = 1; i < parts; ++i) sums[i] = extra.data() + (i - 1) * size;
  const int64_t images = s.n / parts;  // parts divides the batch
  const int64_t x_image = s.c_in * s.h * s.w;
  const int64_t dy_image = s.c_out * sp::Conv2dOutH(s) * sp::Conv2dOutW(s);
  ForImageGroups(s, parts, pool,
                 [&](const sp::Conv2dShape& g, int64_t n0, ThreadPool* gp) {
                   GradWeightImages(g, x + n0 * x_image, dy + n0 * dy_image,
                                    sums[n0 / images], chunk, isa, gp);
                 });
  for (int64_t step = 1; step < parts; step *= 2) {
    ParallelForBlocks(pool, size, int64_t{1} << 14,
                      [&](int64_t begin, int64_t end) {
                        for (int64_t i = 0; i < parts; i += 2 * step) {
                          float* left = sums[i];
                          const float* right = sums[i + step];
                          for (int64_t e = begin; e < end; ++e) {
                            left[e] = left[e] + right[e];
                          }
                        }
                      });
  }
}

void Conv2dGradInputGemm(const sp::Conv2dShape& s, const float* dy,
                         const float* w, float* dx, int64_t chunk, CpuIsa isa,
                         ThreadPool* pool) {
  const int64_t out_h = sp::Conv2dOutH(s);
  const int64_t out_w = sp::Conv2dOutW(s);
  const int64_t pix = out_h * out_w;
  const int64_t hw = s.h * s.w;
  const int64_t cig = s.c_in / s.groups;
  const int64_t cog = s.c_out / s.groups;
  const int64_t kk = s.k_h * s.k_w;
  const int64_t depth = cog * kk;  // (co, kh, kw)
  if (hw == 0 || s.n == 0) return;
  if (cig == 1 && s.groups > 1 && depth <= c::kChunk) {
    // Depthwise: one chain of at most one chunk per output, no GEMM.
    DepthwiseConv2dGradInput(s, dy, w, dx, isa, pool);
    return;
  }
  // A strided one without the stride holes (a packed B would hold their
  // zeros: for a 1 x 1 kernel and stride 2, three columns in four): a wide
  // enough 1 x 1 one at stride 2 x 2 as pointwise products spread onto dx,
  // every other by class, however narrow.
  if ((s.stride_h > 1 || s.stride_w > 1) &&
      AllFinite(w, s.groups * cig * depth)) {
    if (PointwiseStride2(s)) {
      PointwiseStride2GradInput(s, dy, w, dx, chunk, isa, pool);
      return;
    }
    GradInputByClass(s, dy, w, dx, chunk, isa, pool);
    return;
  }
  const bool pointwise = Pointwise(s);
  if (!pointwise && UseIndirect(s, cig)) {
    GradInputIndirect(s, dy, w, dx, chunk, isa, pool);
    return;
  }
  // wt[g][cl][(co_l, kh, kw)] = w[g * cog + co_l, cl, kh, kw].
  const Floats wt(s.groups * cig * depth);
  TransposeWeights(w, s.groups, cog, cig, kk, wt.data(), pool);
  if (pointwise) {
    // dx[i][g] = W[g]^T x dy[i][g], W[g]^T (cig x cog) = wt[g].
    PointwiseProducts(s.n, s.groups, cig, cog, hw, wt.data(), dy, s.c_out * pix,
                      dx, s.c_in * hw, chunk, isa, pool);
    return;
  }
  const std::vector<int64_t> oh_of =
      TapSources(s.h, out_h, s.k_h, s.stride_h, s.pad_top, s.dilation_h);
  const std::vector<int64_t> ow_of =
      TapSources(s.w, out_w, s.k_w, s.stride_w, s.pad_left, s.dilation_w);
  bool per_batch = false;
  const int64_t nb = BatchImages(hw, cig * hw * depth, s.n, pool, &per_batch);
  const int64_t batches = (s.n + nb - 1) / nb;
  ThreadPool* inner = per_batch ? nullptr : pool;
  auto batch = [&](int64_t b) {
    const int64_t n0 = b * nb;
    const int64_t count = std::min(nb, s.n - n0);
    // dx[ci, (image, ih, iw)] = W'[ci, (co, kh, kw)] x gather(dy), B packed
    // from dy, each image's columns landing in its own dx block.
    c::MatMulShape m = RowMajor(cig, count * hw, depth);
    m.c_row = hw;
    for (int64_t g = 0; g < s.groups; ++g) {
      const GradInputB f{&s,          dy + (n0 * s.c_out + g * cog) * pix,
                         out_h,       out_w,
                         cog,         oh_of.data(),
                         ow_of.data()};
      GemmPacking packing;
      packing.pack_b = &GradInputB::Pack;
      packing.ctx = &f;
      packing.c_block = hw;
      packing.c_block_stride = s.c_in * hw;
      GemmPacked(m, wt.data() + g * cig * depth, nullptr,
                 dx + (n0 * s.c_in + g * cig) * hw, chunk, packing, isa, inner);
    }
  };
  if (per_batch) {
    ParallelFor(pool, batches, batch);
  } else {
    for (int64_t b = 0; b < batches; ++b) batch(b);
  }
}

}  // namespace lockstep::kernels
