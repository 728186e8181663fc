// CANONICAL 2-D pooling: max_pool2d, avg_pool2d and global average pooling,
// forward and backward. Backward passes are gathers (one input element per
// call, no scatter, no atomics).
//
// Layouts: x and dx [N, C, H, W]; y and dy [N, C, OH, OW] (global pooling:
// [N, C]); dense, row-major, float32.
//
// The arithmetic (kernels/spatial/SPEC.md, "pooling"):
//  * A window's taps run in (kh, kw) row-major order; taps in the padding do
//    not exist (max pooling never sees them, average pooling does not add
//    them). Validation guarantees every window has at least one real tap.
//  * max_pool2d: the winner is the FIRST tap holding the maximum (strict >
//    replaces); the first NaN tap, if any, wins outright. y is a bit copy of
//    the winner. dx[p] = canonical sum, over the windows containing p in
//    (oh, ow) order, of dy[oh, ow] for the windows whose winner is p (the
//    argmax is recomputed with the same rule).
//  * avg_pool2d: y = (canonical sum of the real taps) / divisor, one IEEE
//    division; divisor = KH * KW when count_include_pad, else the number of
//    real taps. dx[p] = canonical sum, over the windows containing p in
//    (oh, ow) order, of (dy[oh, ow] / divisor(oh, ow)).
//  * global average pool: y[n, c] = CanonicalSum over (h, w) / (H * W);
//    dx[n, c, h, w] = dy[n, c] / (H * W); the divisor is the float H * W.
// Canonical sums use the rule of kernels/canonical/reduce.h; chunks count the
// terms that exist (real taps, or windows whose winner is p).
//
// Preconditions for every function here: the shape passed
// ValidatePool2dShape / ValidateGlobalPool2dShape (kernels/spatial/
// validate.h), and every pointer holds the number of floats the *Size()
// helpers give. Inputs and outputs must not overlap. Thread-safety: pure
// functions of their arguments.
#ifndef LOCKSTEP_KERNELS_SPATIAL_POOL2D_H_
#define LOCKSTEP_KERNELS_SPATIAL_POOL2D_H_

#include <cstdint>

#include "kernels/canonical/hd.h"
#include "kernels/canonical/reduce.h"
#include "kernels/canonical/gather.h"

namespace lockstep::spatial {

// Geometry of a max or average pooling. Output size per axis (floor mode):
// (in + pad_lo + pad_hi - k) / stride + 1. Every pad must be < its kernel
// extent, so every window holds at least one real (non-padding) tap.
struct Pool2dShape {
  int64_t n = 1;
  int64_t c = 1;
  int64_t h = 1;
  int64_t w = 1;
  int64_t k_h = 1;
  int64_t k_w = 1;
  int64_t stride_h = 1;
  int64_t stride_w = 1;
  int64_t pad_top = 0;
  int64_t pad_bottom = 0;
  int64_t pad_left = 0;
  int64_t pad_right = 0;
  // Average pooling only: divide by KH * KW (true, PyTorch's default) or by
  // the number of real taps in the window (false, TensorFlow's "SAME").
  bool count_include_pad = true;
};

LS_HD_INLINE int64_t Pool2dOutH(const Pool2dShape& s) {
  return (s.h + s.pad_top + s.pad_bottom - s.k_h) / s.stride_h + 1;
}
LS_HD_INLINE int64_t Pool2dOutW(const Pool2dShape& s) {
  return (s.w + s.pad_left + s.pad_right - s.k_w) / s.stride_w + 1;
}
LS_HD_INLINE int64_t Pool2dInputSize(const Pool2dShape& s) {
  return s.n * s.c * s.h * s.w;
}
LS_HD_INLINE int64_t Pool2dOutputSize(const Pool2dShape& s) {
  return s.n * s.c * Pool2dOutH(s) * Pool2dOutW(s);
}

// The windows along one axis whose taps cover input coordinate i, as the
// inclusive range [*lo, *hi] (empty when *lo > *hi). Window o covers
// o * stride - pad_lo .. o * stride - pad_lo + k - 1.
LS_HD_INLINE void PoolWindowsCovering(int64_t i, int64_t pad_lo, int64_t k,
                                      int64_t stride, int64_t out, int64_t* lo,
                                      int64_t* hi) {
  const int64_t t = i + pad_lo;  // >= 0; o covers i iff t-k+1 <= o*stride <= t
  const int64_t a = t - k + 1;
  *lo = a <= 0 ? 0 : (a + stride - 1) / stride;
  const int64_t last = t / stride;
  *hi = last < out - 1 ? last : out - 1;
}

// The winner of max-pool window (oh, ow) of one (n, c) plane (H * W floats):
// its offset ih * W + iw in the plane. Taps in (kh, kw) row-major order,
// padding skipped; the first real tap starts as the winner, a later tap
// replaces it only if strictly greater, and the first NaN tap wins at once.
LS_HD_INLINE int64_t MaxPool2dWindowArgmax(const Pool2dShape& s,
                                           const float* plane, int64_t oh,
                                           int64_t ow) {
  const int64_t h0 = oh * s.stride_h - s.pad_top;
  const int64_t w0 = ow * s.stride_w - s.pad_left;
  int64_t best_at = -1;
  float best = 0.0f;
  for (int64_t kh = 0; kh < s.k_h; ++kh) {
    const int64_t ih = h0 + kh;
    if (ih < 0 || ih >= s.h) continue;
    for (int64_t kw = 0; kw < s.k_w; ++kw) {
      const int64_t iw = w0 + kw;
      if (iw < 0 || iw >= s.w) continue;
      const int64_t at = ih * s.w + iw;
      const float v = plane[at];
      if (v != v) return at;  // NaN: best is never NaN here, so it is first
      if (best_at < 0 || v > best) {
        best = v;
        best_at = at;
      }
    }
  }
  return best_at;
}

// y[index], index = ((n * C + c) * OH + oh) * OW + ow: a bit copy of the
// window's winner.
LS_HD_INLINE float MaxPool2dForwardElement(const Pool2dShape& s, const float* x,
                                           int64_t index) {
  const int64_t out_h = Pool2dOutH(s);
  const int64_t out_w = Pool2dOutW(s);
  const int64_t ow = index % out_w;
  const int64_t rest = index / out_w;
  const int64_t oh = rest % out_h;
  const int64_t plane = rest / out_h;  // n * C + c
  const float* x_plane = x + plane * s.h * s.w;
  return x_plane[MaxPool2dWindowArgmax(s, x_plane, oh, ow)];
}

// dx[index], index = ((n * C + c) * H + ih) * W + iw. Needs the forward
// input x to recompute each window's winner.
LS_HD_INLINE float MaxPool2dGradElement(const Pool2dShape& s, const float* x,
                                        const float* dy, int64_t index) {
  const int64_t out_h = Pool2dOutH(s);
  const int64_t out_w = Pool2dOutW(s);
  const int64_t iw = index % s.w;
  const int64_t rest = index / s.w;
  const int64_t ih = rest % s.h;
  const int64_t plane = rest / s.h;
  const float* x_plane = x + plane * s.h * s.w;
  const float* dy_plane = dy + plane * out_h * out_w;
  const int64_t self = ih * s.w + iw;
  int64_t oh_lo, oh_hi, ow_lo, ow_hi;
  PoolWindowsCovering(ih, s.pad_top, s.k_h, s.stride_h, out_h, &oh_lo, &oh_hi);
  PoolWindowsCovering(iw, s.pad_left, s.k_w, s.stride_w, out_w, &ow_lo, &ow_hi);
  canonical::GatherChain chain;
  for (int64_t oh = oh_lo; oh <= oh_hi; ++oh) {
    for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
      if (MaxPool2dWindowArgmax(s, x_plane, oh, ow) == self) {
        chain.Add(dy_plane[oh * out_w + ow]);
      }
    }
  }
  return chain.Finish();
}

// The divisor of average-pool window (oh, ow): KH * KW when
// count_include_pad, else the number of its real taps (>= 1).
LS_HD_INLINE int64_t AvgPool2dDivisor(const Pool2dShape& s, int64_t oh,
                                      int64_t ow) {
  if (s.count_include_pad) return s.k_h * s.k_w;
  const int64_t h0 = oh * s.stride_h - s.pad_top;
  const int64_t w0 = ow * s.stride_w - s.pad_left;
  const int64_t h_begin = h0 < 0 ? 0 : h0;
  const int64_t h_end = h0 + s.k_h < s.h ? h0 + s.k_h : s.h;
  const int64_t w_begin = w0 < 0 ? 0 : w0;
  const int64_t w_end = w0 + s.k_w < s.w ? w0 + s.k_w : s.w;
  return (h_end - h_begin) * (w_end - w_begin);
}

// y[index] = (canonical sum of the window's real taps, (kh, kw) order)
//            / float(divisor).
LS_HD_INLINE float AvgPool2dForwardElement(const Pool2dShape& s, const float* x,
                                           int64_t index) {
  const int64_t out_h = Pool2dOutH(s);
  const int64_t out_w = Pool2dOutW(s);
  const int64_t ow = index % out_w;
  const int64_t rest = index / out_w;
  const int64_t oh = rest % out_h;
  const int64_t plane = rest / out_h;
  const float* x_plane = x + plane * s.h * s.w;
  const int64_t h0 = oh * s.stride_h - s.pad_top;
  const int64_t w0 = ow * s.stride_w - s.pad_left;
  canonical::GatherChain chain;
  for (int64_t kh = 0; kh < s.k_h; ++kh) {
    const int64_t ih = h0 + kh;
    if (ih < 0 || ih >= s.h) continue;
    for (int64_t kw = 0; kw < s.k_w; ++kw) {
      const int64_t iw = w0 + kw;
      if (iw < 0 || iw >= s.w) continue;
      chain.Add(x_plane[ih * s.w + iw]);
    }
  }
  return chain.Finish() / static_cast<float>(AvgPool2dDivisor(s, oh, ow));
}

// dx[index] = canonical sum over the windows covering the element, (oh, ow)
// order, of dy[oh, ow] / float(divisor(oh, ow)).
LS_HD_INLINE float AvgPool2dGradElement(const Pool2dShape& s, const float* dy,
                                        int64_t index) {
  const int64_t out_h = Pool2dOutH(s);
  const int64_t out_w = Pool2dOutW(s);
  const int64_t iw = index % s.w;
  const int64_t rest = index / s.w;
  const int64_t ih = rest % s.h;
  const int64_t plane = rest / s.h;
  const float* dy_plane = dy + plane * out_h * out_w;
  int64_t oh_lo, oh_hi, ow_lo, ow_hi;
  PoolWindowsCovering(ih, s.pad_top, s.k_h, s.stride_h, out_h, &oh_lo, &oh_hi);
  PoolWindowsCovering(iw, s.pad_left, s.k_w, s.stride_w, out_w, &ow_lo, &ow_hi);
  canonical::GatherChain chain;
  for (int64_t oh = oh_lo; oh <= oh_hi; ++oh) {
    for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
      chain.Add(dy_plane[oh * out_w + ow] /
                static_cast<float>(AvgPool2dDivisor(s, oh, ow)));
    }
  }
  return chain.Finish();
}

// Global average pooling: x [N, C, H, W] -> y [N, C].
struct GlobalPool2dShape {
  int64_t n = 1;
  int64_t c = 1;
  int64_t h = 1;
  int64_t w = 1;
};

LS_HD_INLINE int64_t GlobalPool2dInputSize(const GlobalPool2dShape& s) {
  return s.n * s.c * s.h * s.w;
}
LS_HD_INLINE int64_t GlobalPool2dOutputSize(const GlobalPool2dShape& s) {
  return s.n * s.c;
}

// y[index], index = n * C + c: CanonicalSum over the plane in (h, w) order,
// then one IEEE division by float(H * W).
LS_HD_INLINE float GlobalAvgPool2dForwardElement(const GlobalPool2dShape& s,
                                                 const float* x,
                                                 int64_t index) {
  const int64_t area = s.h * s.w;
  return canonical::CanonicalSum(x + index * area, area, 1) /
         static_cast<float>(area);
}

// dx[index] = dy[index / (H * W)] / float(H * W).
LS_HD_INLINE float GlobalAvgPool2dGradElement(const GlobalPool2dShape& s,
                                              const float* dy, int64_t index) {
  const int64_t area = s.h * s.w;
  return dy[index / area] / static_cast<float>(area);
}

// Host loop drivers: every output element, in flat index order.

inline void MaxPool2dForward(const Pool2dShape& s, const float* x, float* y) {
  const int64_t count = Pool2dOutputSize(s);
  for (int64_t i = 0; i < count; ++i) y[i] = MaxPool2dForwardElement(s, x, i);
}

// x is the forward input (winners are recomputed from it).
inline void MaxPool2dGrad(const Pool2dShape& s, const float* x, const float* dy,
                          float* dx) {
  const int64_t count = Pool2dInputSize(s);
  for (int64_t i = 0; i < count; ++i) dx[i] = MaxPool2dGradElement(s, x, dy, i);
}

inline void AvgPool2dForward(const Pool2dShape& s, const float* x, float* y) {
  const int64_t count = Pool2dOutputSize(s);
  for (int64_t i = 0; i < count; ++i) y[i] = AvgPool2dForwardElement(s, x, i);
}

inline void AvgPool2dGrad(const Pool2dShape& s, const float* dy, float* dx) {
  const int64_t count = Pool2dInputSize(s);
  for (int64_t i = 0; i < count; ++i) dx[i] = AvgPool2dGradElement(s, dy, i);
}

inline void GlobalAvgPool2dForward(const GlobalPool2dShape& s, const float* x,
                                   float* y) {
  const int64_t count = GlobalPool2dOutputSize(s);
  for (int64_t i = 0; i < count; ++i) {
    y[i] = GlobalAvgPool2dForwardElement(s, x, i);
  }
}

inline void GlobalAvgPool2dGrad(const GlobalPool2dShape& s, const float* dy,
                                float* dx) {
  const int64_t count = GlobalPool2dInputSize(s);
  for (int64_t i = 0; i < count; ++i) {
    dx[i] = GlobalAvgPool2dGradElement(s, dy, i);
  }
}

}  // namespace lockstep::spatial

#endif  // LOCKSTEP_KERNELS_SPATIAL_POOL2D_H_
