#include "kernels/cpu/conv_gemm.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/canonical/reduce.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/scratch.h"
#include "kernels/ops/dense.h"

namespace lockstep::kernels {
namespace {

namespace c = ::lockstep::canonical;
namespace sp = ::lockstep::spatial;

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

// im2col of the group's cig input planes (x_group points at the first):
// dst[r * row_stride + oh * OW + ow], r = (cl * KH + kh) * KW + kw, holds
// the zero-padded x tap that y[oh, ow] reads.
void Im2col(const sp::Conv2dShape& s, const float* x_group, float* dst,
            int64_t row_stride, ThreadPool* pool) {
  const int64_t out_h = sp::Conv2dOutH(s);
  const int64_t out_w = sp::Conv2dOutW(s);
  const int64_t cig = s.c_in / s.groups;
  if (cig * s.k_h * s.k_w * out_h * out_w < (int64_t{1} << 16)) pool = nullptr;
  ParallelFor(pool, cig, [&](int64_t cl) {
    const float* plane = x_group + cl * s.h * s.w;
    for (int64_t kh = 0; kh < s.k_h; ++kh) {
      const int64_t off_h = kh * s.dilation_h - s.pad_top;
      for (int64_t kw = 0; kw < s.k_w; ++kw) {
        const int64_t off_w = kw * s.dilation_w - s.pad_left;
        int64_t ow_lo, ow_hi;
        TapRange(s.w, out_w, s.stride_w, off_w, &ow_lo, &ow_hi);
        float* row = dst + ((cl * s.k_h + kh) * s.k_w + kw) * row_stride;
        for (int64_t oh = 0; oh < out_h; ++oh) {
          float* r = row + oh * out_w;
          const int64_t ih = oh * s.stride_h + off_h;
          if (ih < 0 || ih >= s.h) {
            for (int64_t ow = 0; ow < out_w; ++ow) r[ow] = 0.0f;
            continue;
          }
          const float* src = plane + ih * s.w;
          for (int64_t ow = 0; ow < ow_lo; ++ow) r[ow] = 0.0f;
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
            r[ow] = src[ow * s.stride_w + off_w];
          }
          for (int64_t ow = ow_hi; ow < out_w; ++ow) r[ow] = 0.0f;
        }
      }
    }
  });
}

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

}  // namespace

void Conv2dForwardGemm(const sp::Conv2dShape& s, const float* x, const float* w,
                       float* y, int64_t chunk, CpuIsa isa, ThreadPool* pool) {
  const int64_t pix = sp::Conv2dOutH(s) * sp::Conv2dOutW(s);
  const int64_t cig = s.c_in / s.groups;
  const int64_t cog = s.c_out / s.groups;
  const int64_t depth = cig * s.k_h * s.k_w;
  if (pix == 0 || cog == 0 || s.n == 0) return;
  const int64_t nb = ImagesPerProduct(pix, s.n);
  const int64_t batches = (s.n + nb - 1) / nb;
  // Batches write disjoint outputs: with enough of them, or small ones, one
  // batch per task; otherwise each product is spread over the pool.
  const bool per_batch =
      batches >= 2 * Threads(pool) || cog * nb * pix * depth < kMinParallelFmas;
  ThreadPool* inner = per_batch ? nullptr : pool;
  auto batch = [&](int64_t b) {
    const int64_t n0 = b * nb;
    const int64_t count = std::min(nb, s.n - n0);
    const int64_t cols = count * pix;  // (image, oh, ow)
    const Floats col(depth * cols);
    const Floats out(count > 1 ? cog * cols : 0);
    const c::MatMulShape m = RowMajor(cog, cols, depth);
    for (int64_t g = 0; g < s.groups; ++g) {
      for (int64_t i = 0; i < count; ++i) {
        Im2col(s, x + ((n0 + i) * s.c_in + g * cig) * s.h * s.w,
               col.data() + i * pix, cols, inner);
      }
      float* y_group = y + (n0 * s.c_out + g * cog) * pix;
      if (count == 1) {
        Gemm(m, w + g * cog * depth, col.data(), y_group, chunk, isa, inner);
        continue;
      }
      Gemm(m, w + g * cog * depth, col.data(), out.data(), chunk, isa, inner);
      for (int64_t i = 0; i < count; ++i) {
        for (int64_t co = 0; co < cog; ++co) {
          const float* src = out.data() + co * cols + i * pix;
          float* dst = y_group + (i * s.c_out + co) * pix;
          for (int64_t p = 0; p < pix; ++p) dst[p] = src[p];
        }
      }
    }
  };
  if (per_batch) {
    ParallelFor(pool, batches, batch);
  } else {
    for (int64_t b = 0; b < batches; ++b) batch(b);
  }
}

void Conv2dGradWeightGemm(const sp::Conv2dShape& s, const float* x,
                          const float* dy, float* dw, int64_t chunk, CpuIsa isa,
                          ThreadPool* pool) {
  const int64_t pix = sp::Conv2dOutH(s) * sp::Conv2dOutW(s);
  const int64_t cig = s.c_in / s.groups;
  const int64_t cog = s.c_out / s.groups;
  const int64_t taps = cig * s.k_h * s.k_w;
  const int64_t depth = s.n * pix;  // (n, oh, ow)
  if (depth == 0) {                 // empty reduction: +0.0f
    for (int64_t i = 0; i < sp::Conv2dWeightSize(s); ++i) dw[i] = 0.0f;
    return;
  }
  // Two orientations of the same products (fma(dy, x, acc) equals
  // fma(x, dy, acc) bit for bit):
  //   dw[co, tap]   = dy[co, (n, pix)] x col[tap, (n, pix)]^T
  //   dw^T[tap, co] = col[tap, (n, pix)] x dy^T[(n, pix), co]
  // The second reads both operands along rows when the GEMM packs them;
  // the first keeps more of the micro-kernel's columns busy when there are
  // few output channels.
  const bool transposed = cog >= 32;
  const Floats col(taps * depth);  // [taps][(n, pix)]
  const Floats dyg(cog * depth);   // [cog][(n, pix)] or [(n, pix)][cog]
  c::MatMulShape m;
  m.depth = depth;
  m.a_row = depth;
  m.a_depth = 1;
  if (transposed) {
    m.rows = taps;
    m.cols = cog;
    m.b_depth = cog;
    m.b_col = 1;
    m.c_row = 1;
    m.c_col = taps;
  } else {
    m.rows = cog;
    m.cols = taps;
    m.b_depth = 1;
    m.b_col = depth;
    m.c_row = taps;
    m.c_col = 1;
  }
  for (int64_t g = 0; g < s.groups; ++g) {
    for (int64_t n = 0; n < s.n; ++n) {
      Im2col(s, x + (n * s.c_in + g * cig) * s.h * s.w, col.data() + n * pix,
             depth, pool);
      for (int64_t i = 0; i < cog; ++i) {
        const float* src = dy + (n * s.c_out + g * cog + i) * pix;
        if (transposed) {
          float* dst = dyg.data() + n * pix * cog + i;
          for (int64_t p = 0; p < pix; ++p) dst[p * cog] = src[p];
        } else {
          float* dst = dyg.data() + i * depth + n * pix;
          for (int64_t p = 0; p < pix; ++p) dst[p] = src[p];
        }
      }
    }
    if (transposed) {
      Gemm(m, col.data(), dyg.data(), dw + g * cog * taps, chunk, isa, pool);
    } else {
      Gemm(m, dyg.data(), col.data(), dw + g * cog * taps, chunk, isa, pool);
    }
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
  // wt[g][cl][(co_l, kh, kw)] = w[g * cog + co_l, cl, kh, kw].
  const Floats wt(s.groups * cig * depth);
  for (int64_t g = 0; g < s.groups; ++g) {
    for (int64_t cl = 0; cl < cig; ++cl) {
      for (int64_t j = 0; j < cog; ++j) {
        for (int64_t t = 0; t < kk; ++t) {
          wt.data()[(g * cig + cl) * depth + j * kk + t] =
              w[((g * cog + j) * cig + cl) * kk + t];
        }
      }
    }
  }
  const std::vector<int64_t> oh_of =
      TapSources(s.h, out_h, s.k_h, s.stride_h, s.pad_top, s.dilation_h);
  const std::vector<int64_t> ow_of =
      TapSources(s.w, out_w, s.k_w, s.stride_w, s.pad_left, s.dilation_w);
  const int64_t nb = ImagesPerProduct(hw, s.n);
  const int64_t batches = (s.n + nb - 1) / nb;
  const bool per_batch =
      batches >= 2 * Threads(pool) || cig * nb * hw * depth < kMinParallelFmas;
  ThreadPool* inner = per_batch ? nullptr : pool;
  auto batch = [&](int64_t b) {
    const int64_t n0 = b * nb;
    const int64_t count = std::min(nb, s.n - n0);
    const int64_t cols = count * hw;  // (image, ih, iw)
    ThreadPool* gather_pool =
        depth * cols < (int64_t{1} << 16) ? nullptr : inner;
    // gat[(co_l, kh, kw)][(image, ih, iw)]: the dy tap dx[ih, iw] reads, or
    // zero.
    const Floats gat(depth * cols);
    const Floats out(count > 1 ? cig * cols : 0);
    const c::MatMulShape m = RowMajor(cig, cols, depth);
    for (int64_t g = 0; g < s.groups; ++g) {
      ParallelFor(gather_pool, cog, [&](int64_t j) {
        for (int64_t i = 0; i < count; ++i) {
          const float* plane = dy + ((n0 + i) * s.c_out + g * cog + j) * pix;
          for (int64_t kh = 0; kh < s.k_h; ++kh) {
            for (int64_t kw = 0; kw < s.k_w; ++kw) {
              float* row =
                  gat.data() + (j * kk + kh * s.k_w + kw) * cols + i * hw;
              const int64_t* ow_map = ow_of.data() + kw * s.w;
              for (int64_t ih = 0; ih < s.h; ++ih) {
                float* r = row + ih * s.w;
                const int64_t oh = oh_of[kh * s.h + ih];
                if (oh < 0) {
                  for (int64_t iw = 0; iw < s.w; ++iw) r[iw] = 0.0f;
                  continue;
                }
                const float* src = plane + oh * out_w;
                for (int64_t iw = 0; iw < s.w; ++iw) {
                  const int64_t ow = ow_map[iw];
                  r[iw] = ow >= 0 ? src[ow] : 0.0f;
                }
              }
            }
          }
        }
      });
      float* dx_group = dx + (n0 * s.c_in + g * cig) * hw;
      if (count == 1) {
        Gemm(m, wt.data() + g * cig * depth, gat.data(), dx_group, chunk, isa,
             inner);
        continue;
      }
      Gemm(m, wt.data() + g * cig * depth, gat.data(), out.data(), chunk, isa,
           inner);
      for (int64_t i = 0; i < count; ++i) {
        for (int64_t cl = 0; cl < cig; ++cl) {
          const float* src = out.data() + cl * cols + i * hw;
          float* dst = dx_group + (i * s.c_in + cl) * hw;
          for (int64_t p = 0; p < hw; ++p) dst[p] = src[p];
        }
      }
    }
  };
  if (per_batch) {
    ParallelFor(pool, batches, batch);
  } else {
    for (int64_t b = 0; b < batches; ++b) batch(b);
  }
}

}  // namespace lockstep::kernels
