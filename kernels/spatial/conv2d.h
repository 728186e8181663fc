// CANONICAL 2-D convolution: forward, grad_input (dx), grad_weight (dw).
//
// Layouts: x and dx [N, C_in, H, W]; w and dw [C_out, C_in / groups, KH, KW]
// (OIHW); y and dy [N, C_out, OH, OW]; all dense, row-major, float32.
//
// The arithmetic (kernels/spatial/SPEC.md, "conv2d"): each of the three
// ops is an implicit GEMM whose reduction index runs over EVERY tap of a
// fixed sequence; a tap whose operand lies outside the tensor (zero padding
// in forward and dw, padding and stride holes in dx) reads +0.0f and still
// contributes fma(0, w, acc). The sequences are
//   y[n, co, oh, ow]  : (ci, kh, kw) over the group's C_in / groups channels,
//                       term fma(x_or_0, w[co, ci, kh, kw], acc)
//   dx[n, ci, ih, iw] : (co, kh, kw) over the group's C_out / groups channels,
//                       term fma(dy_or_0, w[co, ci, kh, kw], acc)
//   dw[co, ci, kh, kw]: (n, oh, ow), term fma(dy[n, co, oh, ow], x_or_0, acc)
// reduced with the canonical rule (GatherChain: chunks of 256, pairwise tree).
//
// Each op is split into an element function (one output element from its
// flat index; what a GPU thread calls) and a host loop driver over all
// outputs. Any order or partition of element calls gives the same bits.
//
// Preconditions for every function here: the shape passed
// ValidateConv2dShape (kernels/spatial/validate.h), and every pointer holds
// the number of floats the *Size() helpers below give. Inputs are read-only;
// outputs are written, never read; inputs and outputs must not overlap.
// Thread-safety: pure functions of their arguments.
#ifndef LOCKSTEP_KERNELS_SPATIAL_CONV2D_H_
#define LOCKSTEP_KERNELS_SPATIAL_CONV2D_H_

#include <cstdint>

#include "kernels/canonical/gather.h"
#include "kernels/canonical/hd.h"

namespace lockstep::spatial {

// Geometry of one convolution. Padding may be asymmetric (TensorFlow "SAME"
// padding is). Output size per axis: (in + pad_lo + pad_hi
//   - (dilation * (k - 1) + 1)) / stride + 1, rounded down (floor mode).
struct Conv2dShape {
  int64_t n = 1;      // batch
  int64_t c_in = 1;   // input channels
  int64_t h = 1;      // input height
  int64_t w = 1;      // input width
  int64_t c_out = 1;  // output channels
  int64_t k_h = 1;    // kernel height
  int64_t k_w = 1;    // kernel width
  int64_t stride_h = 1;
  int64_t stride_w = 1;
  int64_t pad_top = 0;  // zero rows above the input
  int64_t pad_bottom = 0;
  int64_t pad_left = 0;
  int64_t pad_right = 0;
  int64_t dilation_h = 1;
  int64_t dilation_w = 1;
  int64_t groups = 1;  // divides c_in and c_out; groups == c_in: depthwise
};

LS_HD_INLINE int64_t Conv2dOutH(const Conv2dShape& s) {
  return (s.h + s.pad_top + s.pad_bottom - (s.dilation_h * (s.k_h - 1) + 1)) /
             s.stride_h +
         1;
}
LS_HD_INLINE int64_t Conv2dOutW(const Conv2dShape& s) {
  return (s.w + s.pad_left + s.pad_right - (s.dilation_w * (s.k_w - 1) + 1)) /
             s.stride_w +
         1;
}
// Element counts of x (= dx), w (= dw) and y (= dy).
LS_HD_INLINE int64_t Conv2dInputSize(const Conv2dShape& s) {
  return s.n * s.c_in * s.h * s.w;
}
LS_HD_INLINE int64_t Conv2dWeightSize(const Conv2dShape& s) {
  return s.c_out * (s.c_in / s.groups) * s.k_h * s.k_w;
}
LS_HD_INLINE int64_t Conv2dOutputSize(const Conv2dShape& s) {
  return s.n * s.c_out * Conv2dOutH(s) * Conv2dOutW(s);
}

// y[index], index = ((n * C_out + co) * OH + oh) * OW + ow.
// Canonical sequence (ci, kh, kw), length (C_in / groups) * KH * KW.
LS_HD_INLINE float Conv2dForwardElement(const Conv2dShape& s, const float* x,
                                        const float* w, int64_t index) {
  const int64_t out_h = Conv2dOutH(s);
  const int64_t out_w = Conv2dOutW(s);
  const int64_t ow = index % out_w;
  int64_t rest = index / out_w;
  const int64_t oh = rest % out_h;
  rest /= out_h;
  const int64_t co = rest % s.c_out;
  const int64_t n = rest / s.c_out;
  const int64_t cig = s.c_in / s.groups;
  const int64_t cog = s.c_out / s.groups;
  const int64_t ci_begin = (co / cog) * cig;
  const float* w_row = w + co * cig * s.k_h * s.k_w;
  canonical::GatherChain chain;
  for (int64_t cl = 0; cl < cig; ++cl) {
    const float* x_plane = x + (n * s.c_in + ci_begin + cl) * s.h * s.w;
    for (int64_t kh = 0; kh < s.k_h; ++kh) {
      const int64_t ih = oh * s.stride_h - s.pad_top + kh * s.dilation_h;
      const bool row_in = ih >= 0 && ih < s.h;
      for (int64_t kw = 0; kw < s.k_w; ++kw) {
        const int64_t iw = ow * s.stride_w - s.pad_left + kw * s.dilation_w;
        const float xv =
            (row_in && iw >= 0 && iw < s.w) ? x_plane[ih * s.w + iw] : 0.0f;
        chain.Fma(xv, w_row[(cl * s.k_h + kh) * s.k_w + kw]);
      }
    }
  }
  return chain.Finish();
}

// dx[index], index = ((n * C_in + ci) * H + ih) * W + iw.
// Canonical sequence (co, kh, kw) over the C_out / groups output channels of
// ci's group, length (C_out / groups) * KH * KW. Tap (co, kh, kw) reads
// dy[n, co, oh, ow] where oh * stride_h = ih + pad_top - kh * dilation_h (and
// likewise for ow); when no such in-range (oh, ow) exists it reads +0.0f.
LS_HD_INLINE float Conv2dGradInputElement(const Conv2dShape& s, const float* dy,
                                          const float* w, int64_t index) {
  const int64_t out_h = Conv2dOutH(s);
  const int64_t out_w = Conv2dOutW(s);
  const int64_t iw = index % s.w;
  int64_t rest = index / s.w;
  const int64_t ih = rest % s.h;
  rest /= s.h;
  const int64_t ci = rest % s.c_in;
  const int64_t n = rest / s.c_in;
  const int64_t cig = s.c_in / s.groups;
  const int64_t cog = s.c_out / s.groups;
  const int64_t cl = ci % cig;  // ci's index inside its group
  const int64_t co_begin = (ci / cig) * cog;
  const int64_t kernel = s.k_h * s.k_w;
  canonical::GatherChain chain;
  for (int64_t j = 0; j < cog; ++j) {
    const int64_t co = co_begin + j;
    const float* dy_plane = dy + (n * s.c_out + co) * out_h * out_w;
    const float* w_taps = w + (co * cig + cl) * kernel;
    for (int64_t kh = 0; kh < s.k_h; ++kh) {
      const int64_t th = ih + s.pad_top - kh * s.dilation_h;
      const int64_t oh = th / s.stride_h;
      const bool row_in = th >= 0 && th % s.stride_h == 0 && oh < out_h;
      for (int64_t kw = 0; kw < s.k_w; ++kw) {
        const int64_t tw = iw + s.pad_left - kw * s.dilation_w;
        const int64_t ow = tw / s.stride_w;
        const bool in = row_in && tw >= 0 && tw % s.stride_w == 0 && ow < out_w;
        const float dyv = in ? dy_plane[oh * out_w + ow] : 0.0f;
        chain.Fma(dyv, w_taps[kh * s.k_w + kw]);
      }
    }
  }
  return chain.Finish();
}

// The output channel, input channel and kernel tap of weight `index` =
// ((co * (C_in / groups) + cl) * KH + kh) * KW + kw.
struct WeightTap {
  int64_t co, ci, kh, kw;
};
LS_HD_INLINE WeightTap WeightTapOf(const Conv2dShape& s, int64_t index) {
  const int64_t cig = s.c_in / s.groups;
  const int64_t cog = s.c_out / s.groups;
  WeightTap t;
  t.kw = index % s.k_w;
  int64_t rest = index / s.k_w;
  t.kh = rest % s.k_h;
  rest /= s.k_h;
  const int64_t cl = rest % cig;
  t.co = rest / cig;
  t.ci = (t.co / cog) * cig + cl;
  return t;
}

// dw[index], index = ((co * (C_in / groups) + cl) * KH + kh) * KW + kw.
// Canonical sequence (n, oh, ow), length N * OH * OW; the x operand is the
// zero-padded input, exactly the value the forward tap read.
LS_HD_INLINE float Conv2dGradWeightElement(const Conv2dShape& s, const float* x,
                                           const float* dy, int64_t index) {
  const int64_t out_h = Conv2dOutH(s);
  const int64_t out_w = Conv2dOutW(s);
  const WeightTap tap = WeightTapOf(s, index);
  const int64_t co = tap.co, ci = tap.ci, kh = tap.kh, kw = tap.kw;
  canonical::GatherChain chain;
  for (int64_t n = 0; n < s.n; ++n) {
    const float* x_plane = x + (n * s.c_in + ci) * s.h * s.w;
    const float* dy_plane = dy + (n * s.c_out + co) * out_h * out_w;
    for (int64_t oh = 0; oh < out_h; ++oh) {
      const int64_t ih = oh * s.stride_h - s.pad_top + kh * s.dilation_h;
      const bool row_in = ih >= 0 && ih < s.h;
      for (int64_t ow = 0; ow < out_w; ++ow) {
        const int64_t iw = ow * s.stride_w - s.pad_left + kw * s.dilation_w;
        const float xv =
            (row_in && iw >= 0 && iw < s.w) ? x_plane[ih * s.w + iw] : 0.0f;
        chain.Fma(dy_plane[oh * out_w + ow], xv);
      }
    }
  }
  return chain.Finish();
}

// Chunk q of Conv2dGradWeightElement(s, x, dy, index)'s canonical sequence
// (terms q * kChunk .. of (n, oh, ow)): its chain from +0.0f, which
// GatherChain pushes into the tree (so the chunks' chains, pushed in
// order, give the element's bits).
LS_HD_INLINE float Conv2dGradWeightChunk(const Conv2dShape& s, const float* x,
                                         const float* dy, int64_t index,
                                         int64_t q) {
  const int64_t out_h = Conv2dOutH(s);
  const int64_t out_w = Conv2dOutW(s);
  const WeightTap tap = WeightTapOf(s, index);
  const int64_t co = tap.co, ci = tap.ci, kh = tap.kh, kw = tap.kw;
  const int64_t terms = s.n * out_h * out_w;
  const int64_t begin = q * canonical::kChunk;
  const int64_t end =
      terms - begin < canonical::kChunk ? terms : begin + canonical::kChunk;
  const int64_t pixels = out_h * out_w;
  float acc = 0.0f;
  for (int64_t t = begin; t < end; ++t) {
    const int64_t n = t / pixels;
    const int64_t oh = (t % pixels) / out_w;
    const int64_t ow = t % out_w;
    const int64_t ih = oh * s.stride_h - s.pad_top + kh * s.dilation_h;
    const int64_t iw = ow * s.stride_w - s.pad_left + kw * s.dilation_w;
    const float xv = (ih >= 0 && ih < s.h && iw >= 0 && iw < s.w)
                         ? x[((n * s.c_in + ci) * s.h + ih) * s.w + iw]
                         : 0.0f;
    acc = canonical::LsFma(dy[(n * s.c_out + co) * pixels + oh * out_w + ow],
                           xv, acc);
  }
  return acc;
}

// Host loop drivers: every output element, in flat index order.

// y = conv2d(x, w). x: Conv2dInputSize, w: Conv2dWeightSize,
// y: Conv2dOutputSize floats.
inline void Conv2dForward(const Conv2dShape& s, const float* x, const float* w,
                          float* y) {
  const int64_t count = Conv2dOutputSize(s);
  for (int64_t i = 0; i < count; ++i) y[i] = Conv2dForwardElement(s, x, w, i);
}

// dx = d(sum dy * y) / dx. dy: Conv2dOutputSize, dx: Conv2dInputSize floats.
inline void Conv2dGradInput(const Conv2dShape& s, const float* dy,
                            const float* w, float* dx) {
  const int64_t count = Conv2dInputSize(s);
  for (int64_t i = 0; i < count; ++i) {
    dx[i] = Conv2dGradInputElement(s, dy, w, i);
  }
}

// dw = d(sum dy * y) / dw. dw: Conv2dWeightSize floats.
inline void Conv2dGradWeight(const Conv2dShape& s, const float* x,
                             const float* dy, float* dw) {
  const int64_t count = Conv2dWeightSize(s);
  for (int64_t i = 0; i < count; ++i) {
    dw[i] = Conv2dGradWeightElement(s, x, dy, i);
  }
}

}  // namespace lockstep::spatial

#endif  // LOCKSTEP_KERNELS_SPATIAL_CONV2D_H_
