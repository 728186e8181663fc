#include "kernels/cpu/conv_gemm.h"

#include <cstdint>
#include <vector>

#include "kernels/canonical/reduce.h"
#include "kernels/cpu/gemm.h"
#include "kernels/ops/dense.h"

namespace lockstep::kernels {
namespace {

namespace c = ::lockstep::canonical;
namespace sp = ::lockstep::spatial;

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
      for (int64_t kw = 0; kw < s.k_w; ++kw) {
        float* row = dst + ((cl * s.k_h + kh) * s.k_w + kw) * row_stride;
        for (int64_t oh = 0; oh < out_h; ++oh) {
          const int64_t ih = oh * s.stride_h - s.pad_top + kh * s.dilation_h;
          const bool row_in = ih >= 0 && ih < s.h;
          for (int64_t ow = 0; ow < out_w; ++ow) {
            const int64_t iw = ow * s.stride_w - s.pad_left + kw * s.dilation_w;
            row[oh * out_w + ow] =
                (row_in && iw >= 0 && iw < s.w) ? plane[ih * s.w + iw] : 0.0f;
          }
        }
      }
    }
  });
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
                       float* y, CpuIsa isa, ThreadPool* pool) {
  const int64_t pix = sp::Conv2dOutH(s) * sp::Conv2dOutW(s);
  const int64_t cig = s.c_in / s.groups;
  const int64_t cog = s.c_out / s.groups;
  const int64_t depth = cig * s.k_h * s.k_w;
  if (pix == 0 || cog == 0 || s.n == 0) return;
  const c::MatMulShape m = RowMajor(cog, pix, depth);
  // Images write disjoint outputs: small per-image products run one image
  // per task, large ones spread each product over the pool instead.
  const bool per_image = cog * pix * depth < kMinParallelFmas;
  ThreadPool* inner = per_image ? nullptr : pool;
  auto image = [&](int64_t n) {
    std::vector<float> col(depth * pix);
    for (int64_t g = 0; g < s.groups; ++g) {
      Im2col(s, x + (n * s.c_in + g * cig) * s.h * s.w, col.data(), pix, inner);
      CanonicalGemm(m, w + g * cog * depth, col.data(),
                    y + (n * s.c_out + g * cog) * pix, isa, inner);
    }
  };
  if (per_image) {
    ParallelFor(pool, s.n, image);
  } else {
    for (int64_t n = 0; n < s.n; ++n) image(n);
  }
}

void Conv2dGradWeightGemm(const sp::Conv2dShape& s, const float* x,
                          const float* dy, float* dw, CpuIsa isa,
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
  std::vector<float> col(taps * depth);  // [taps][(n, pix)]
  std::vector<float> dyg(cog * depth);   // [cog][(n, pix)]
  c::MatMulShape m;
  m.rows = cog;
  m.cols = taps;
  m.depth = depth;
  m.a_row = depth;
  m.a_depth = 1;
  m.b_depth = 1;
  m.b_col = depth;
  m.c_row = taps;
  m.c_col = 1;
  for (int64_t g = 0; g < s.groups; ++g) {
    for (int64_t n = 0; n < s.n; ++n) {
      Im2col(s, x + (n * s.c_in + g * cig) * s.h * s.w, col.data() + n * pix,
             depth, pool);
      for (int64_t i = 0; i < cog; ++i) {
        const float* src = dy + (n * s.c_out + g * cog + i) * pix;
        float* dst = dyg.data() + i * depth + n * pix;
        for (int64_t p = 0; p < pix; ++p) dst[p] = src[p];
      }
    }
    CanonicalGemm(m, dyg.data(), col.data(), dw + g * cog * taps, isa, pool);
  }
}

void Conv2dGradInputGemm(const sp::Conv2dShape& s, const float* dy,
                         const float* w, float* dx, CpuIsa isa,
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
  std::vector<float> wt(s.groups * cig * depth);
  for (int64_t g = 0; g < s.groups; ++g) {
    for (int64_t cl = 0; cl < cig; ++cl) {
      for (int64_t j = 0; j < cog; ++j) {
        for (int64_t t = 0; t < kk; ++t) {
          wt[(g * cig + cl) * depth + j * kk + t] =
              w[((g * cog + j) * cig + cl) * kk + t];
        }
      }
    }
  }
  const c::MatMulShape m = RowMajor(cig, hw, depth);
  const bool per_image = cig * hw * depth < kMinParallelFmas;
  ThreadPool* inner = per_image ? nullptr : pool;
  ThreadPool* gather_pool = depth * hw < (int64_t{1} << 16) ? nullptr : inner;
  auto image = [&](int64_t n) {
    // gat[(co_l, kh, kw)][(ih, iw)]: the dy tap dx[ih, iw] reads, or zero.
    std::vector<float> gat(depth * hw);
    for (int64_t g = 0; g < s.groups; ++g) {
      ParallelFor(gather_pool, cog, [&](int64_t j) {
        const float* plane = dy + (n * s.c_out + g * cog + j) * pix;
        for (int64_t kh = 0; kh < s.k_h; ++kh) {
          for (int64_t kw = 0; kw < s.k_w; ++kw) {
            float* row = gat.data() + (j * kk + kh * s.k_w + kw) * hw;
            for (int64_t ih = 0; ih < s.h; ++ih) {
              const int64_t th = ih + s.pad_top - kh * s.dilation_h;
              const int64_t oh = th / s.stride_h;
              const bool row_in = th >= 0 && th % s.stride_h == 0 && oh < out_h;
              for (int64_t iw = 0; iw < s.w; ++iw) {
                const int64_t tw = iw + s.pad_left - kw * s.dilation_w;
                const int64_t ow = tw / s.stride_w;
                const bool in =
                    row_in && tw >= 0 && tw % s.stride_w == 0 && ow < out_w;
                row[ih * s.w + iw] = in ? plane[oh * out_w + ow] : 0.0f;
              }
            }
          }
        }
      });
      CanonicalGemm(m, wt.data() + g * cig * depth, gat.data(),
                    dx + (n * s.c_in + g * cig) * hw, isa, inner);
    }
  };
  if (per_image) {
    ParallelFor(pool, s.n, image);
  } else {
    for (int64_t n = 0; n < s.n; ++n) image(n);
  }
}

}  // namespace lockstep::kernels
