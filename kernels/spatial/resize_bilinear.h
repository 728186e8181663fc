// CANONICAL bilinear resize (align_corners = false, half-pixel centres, as
// TensorFlow's half_pixel_centers = true and PyTorch's align_corners = False),
// forward and backward. The backward pass is a gather: one input pixel per
// call, no scatter, no atomics.
//
// Layouts: x and dx [N, C, IH, IW]; y and dy [N, C, OH, OW]; dense,
// row-major, float32.
//
// The arithmetic (kernels/spatial/SPEC.md, "resize_bilinear"), per axis
// (in = input size, out = output size, o = output coordinate), in float32
// with one rounding per line:
//   scale = float(in) / float(out)
//   c     = (float(o) + 0.5f) * scale
//   src   = c - 0.5f;  if (src < 0) src = 0
//   i0    = floor(src) (at most in - 1);  i1 = min(i0 + 1, in - 1)
//   l1    = src - float(i0)               (exact)
//   l0    = 1.0f - l1
// Tap (a, b), a, b in {0, 1}, reads x[ia, jb] with weight
//   w_ab = l_a(row) * l_b(col)            (one rounding)
// Forward:  y = fma(w11, x11, fma(w10, x10, fma(w01, x01, fma(w00, x00, 0)))).
// Backward: dx[p] = canonical reduction, over output pixels (oh, ow) in
// row-major order and within each over taps (0,0), (0,1), (1,0), (1,1), of
// fma(dy[oh, ow], w_ab, acc) for every tap that reads p (at the border two
// taps of one output can read the same p: both terms count). The weights are
// computed by the same function in both directions, so they are the same
// bits. Chunks of the reduction count only the terms that exist.
//
// Preconditions for every function here: the shape passed
// ValidateResizeBilinearShape (kernels/spatial/validate.h), and every
// pointer holds the number of floats the *Size() helpers give. Inputs and
// outputs must not overlap. Thread-safety: pure functions of their arguments.
#ifndef LOCKSTEP_KERNELS_SPATIAL_RESIZE_BILINEAR_H_
#define LOCKSTEP_KERNELS_SPATIAL_RESIZE_BILINEAR_H_

#include <cstdint>

#include "kernels/canonical/gather.h"
#include "kernels/canonical/hd.h"

namespace lockstep::spatial {

struct ResizeBilinearShape {
  int64_t n = 1;
  int64_t c = 1;
  int64_t in_h = 1;
  int64_t in_w = 1;
  int64_t out_h = 1;
  int64_t out_w = 1;
};

LS_HD_INLINE int64_t ResizeBilinearInputSize(const ResizeBilinearShape& s) {
  return s.n * s.c * s.in_h * s.in_w;
}
LS_HD_INLINE int64_t ResizeBilinearOutputSize(const ResizeBilinearShape& s) {
  return s.n * s.c * s.out_h * s.out_w;
}

// The two source taps of output coordinate o along one axis and their
// weights l0 (for i0) and l1 (for i1).
struct BilinearAxisTaps {
  int64_t i0;
  int64_t i1;
  float l0;
  float l1;
};

// REQUIRES: 1 <= in, out <= 2^23 and 0 <= o < out (so every int -> float
// conversion and o + 0.5 are exact).
LS_HD_INLINE BilinearAxisTaps BilinearAxis(int64_t in, int64_t out, int64_t o) {
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  const float centre = (static_cast<float>(o) + 0.5f) * scale;
  float src = centre - 0.5f;
  if (src < 0.0f) src = 0.0f;
  // src >= 0, so truncation is floor. floor(src) <= in - 1 always holds for
  // in < 2^23; the clamp only keeps the index in range unconditionally.
  int64_t i0 = static_cast<int64_t>(src);
  if (i0 > in - 1) i0 = in - 1;
  BilinearAxisTaps t;
  t.i0 = i0;
  t.i1 = i0 + 1 < in ? i0 + 1 : in - 1;
  t.l1 = src - static_cast<float>(i0);
  t.l0 = 1.0f - t.l1;
  return t;
}

// The weight of the tap at (row weight ly, column weight lx): one product.
// Forward and backward both call this, so both see the same bits.
LS_HD_INLINE float BilinearTapWeight(float ly, float lx) { return ly * lx; }

// Smallest o in [0, out] whose tap i0 is >= target (out if none). i0 is
// non-decreasing in o: every step of BilinearAxis is monotone.
LS_HD_INLINE int64_t BilinearFirstOutputAtOrAfter(int64_t in, int64_t out,
                                                  int64_t target) {
  int64_t lo = 0;
  int64_t hi = out;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (BilinearAxis(in, out, mid).i0 >= target) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// The output with row taps ty and column taps tx, from the input plane xp.
LS_HD_INLINE float ResizeBilinearForwardAt(const ResizeBilinearShape& s,
                                           const float* xp,
                                           const BilinearAxisTaps& ty,
                                           const BilinearAxisTaps& tx) {
  float acc = 0.0f;
  acc = canonical::LsFma(BilinearTapWeight(ty.l0, tx.l0),
                         xp[ty.i0 * s.in_w + tx.i0], acc);
  acc = canonical::LsFma(BilinearTapWeight(ty.l0, tx.l1),
                         xp[ty.i0 * s.in_w + tx.i1], acc);
  acc = canonical::LsFma(BilinearTapWeight(ty.l1, tx.l0),
                         xp[ty.i1 * s.in_w + tx.i0], acc);
  acc = canonical::LsFma(BilinearTapWeight(ty.l1, tx.l1),
                         xp[ty.i1 * s.in_w + tx.i1], acc);
  return acc;
}

// y[index], index = ((n * C + c) * OH + oh) * OW + ow.
LS_HD_INLINE float ResizeBilinearForwardElement(const ResizeBilinearShape& s,
                                                const float* x, int64_t index) {
  const int64_t ow = index % s.out_w;
  const int64_t rest = index / s.out_w;
  const int64_t oh = rest % s.out_h;
  const int64_t plane = rest / s.out_h;
  return ResizeBilinearForwardAt(s, x + plane * s.in_h * s.in_w,
                                 BilinearAxis(s.in_h, s.out_h, oh),
                                 BilinearAxis(s.in_w, s.out_w, ow));
}

// dx at (ih, iw) from the output-gradient plane dyp: row_taps(oh) and
// col_taps(ow) give an output's taps (BilinearAxis), oh_begin and ow_begin
// the first outputs that can read row ih and column iw.
template <typename RowTaps, typename ColTaps>
LS_HD_INLINE float ResizeBilinearGradAt(const ResizeBilinearShape& s,
                                        const float* dyp, int64_t ih,
                                        int64_t iw, int64_t oh_begin,
                                        int64_t ow_begin,
                                        const RowTaps& row_taps,
                                        const ColTaps& col_taps) {
  canonical::GatherChain chain;
  for (int64_t oh = oh_begin; oh < s.out_h; ++oh) {
    const BilinearAxisTaps ty = row_taps(oh);
    if (ty.i0 > ih) break;
    const bool row0 = ty.i0 == ih;
    const bool row1 = ty.i1 == ih;
    if (!row0 && !row1) continue;
    for (int64_t ow = ow_begin; ow < s.out_w; ++ow) {
      const BilinearAxisTaps tx = col_taps(ow);
      if (tx.i0 > iw) break;
      const bool col0 = tx.i0 == iw;
      const bool col1 = tx.i1 == iw;
      if (!col0 && !col1) continue;
      const float g = dyp[oh * s.out_w + ow];
      if (row0 && col0) chain.Fma(g, BilinearTapWeight(ty.l0, tx.l0));
      if (row0 && col1) chain.Fma(g, BilinearTapWeight(ty.l0, tx.l1));
      if (row1 && col0) chain.Fma(g, BilinearTapWeight(ty.l1, tx.l0));
      if (row1 && col1) chain.Fma(g, BilinearTapWeight(ty.l1, tx.l1));
    }
  }
  return chain.Finish();
}

// dx[index], index = ((n * C + c) * IH + ih) * IW + iw.
LS_HD_INLINE float ResizeBilinearGradElement(const ResizeBilinearShape& s,
                                             const float* dy, int64_t index) {
  const int64_t iw = index % s.in_w;
  const int64_t rest = index / s.in_w;
  const int64_t ih = rest % s.in_h;
  const int64_t plane = rest / s.in_h;
  // Outputs that can read row ih have i0 in {ih - 1, ih}; they form one
  // contiguous run because i0 is non-decreasing. Same for columns.
  return ResizeBilinearGradAt(
      s, dy + plane * s.out_h * s.out_w, ih, iw,
      BilinearFirstOutputAtOrAfter(s.in_h, s.out_h, ih - 1),
      BilinearFirstOutputAtOrAfter(s.in_w, s.out_w, iw - 1),
      [&](int64_t oh) { return BilinearAxis(s.in_h, s.out_h, oh); },
      [&](int64_t ow) { return BilinearAxis(s.in_w, s.out_w, ow); });
}

// Host loop drivers: every output element, in flat index order.

inline void ResizeBilinearForward(const ResizeBilinearShape& s, const float* x,
                                  float* y) {
  const int64_t count = ResizeBilinearOutputSize(s);
  for (int64_t i = 0; i < count; ++i) {
    y[i] = ResizeBilinearForwardElement(s, x, i);
  }
}

inline void ResizeBilinearGrad(const ResizeBilinearShape& s, const float* dy,
                               float* dx) {
  const int64_t count = ResizeBilinearInputSize(s);
  for (int64_t i = 0; i < count; ++i) {
    dx[i] = ResizeBilinearGradElement(s, dy, i);
  }
}

}  // namespace lockstep::spatial

#endif  // LOCKSTEP_KERNELS_SPATIAL_RESIZE_BILINEAR_H_
