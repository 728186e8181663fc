// Float64 reference implementations of the spatial ops, for tests only.
//
// Written independently of the canonical kernels: forward passes loop over
// outputs, backward passes SCATTER (loop over outputs, add into every input
// they read), the way the textbook formulas read, and everything is
// accumulated in double. Max pooling's winner is found with std::max_element
// / std::find_if, not with the kernel's argmax. Resize coordinates are
// computed in double.
//
// Each result carries, per element, `value` (the float64 result) and
// `magnitude` (the float64 sum of |term| over its terms), so tests can bound
// the canonical float32 result by  |got - value| <= c * 2^-24 * magnitude.
//
// Host only (std::vector); not compiled by nvcc. Thread-safe (pure).
#ifndef LOCKSTEP_KERNELS_SPATIAL_REFERENCE_H_
#define LOCKSTEP_KERNELS_SPATIAL_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/spatial/conv2d.h"
#include "kernels/spatial/pool2d.h"
#include "kernels/spatial/resize_bilinear.h"

namespace lockstep::spatial::reference {

struct RefTensor {
  std::vector<double> value;
  std::vector<double> magnitude;

  explicit RefTensor(int64_t size)
      : value(static_cast<size_t>(size), 0.0),
        magnitude(static_cast<size_t>(size), 0.0) {}
  void Add(int64_t i, double term) {
    value[static_cast<size_t>(i)] += term;
    magnitude[static_cast<size_t>(i)] += std::fabs(term);
  }
  int64_t size() const { return static_cast<int64_t>(value.size()); }
};

// Calls f(n, co, oh, ow, cl, ci, kh, kw, ih, iw) for every (output, tap) pair
// of the convolution whose input position is inside x (padding skipped).
template <typename F>
void ForEachConvTap(const Conv2dShape& s, F&& f) {
  const int64_t out_h = Conv2dOutH(s), out_w = Conv2dOutW(s);
  const int64_t cig = s.c_in / s.groups, cog = s.c_out / s.groups;
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t co = 0; co < s.c_out; ++co)
      for (int64_t oh = 0; oh < out_h; ++oh)
        for (int64_t ow = 0; ow < out_w; ++ow)
          for (int64_t cl = 0; cl < cig; ++cl)
            for (int64_t kh = 0; kh < s.k_h; ++kh)
              for (int64_t kw = 0; kw < s.k_w; ++kw) {
                const int64_t ih =
                    oh * s.stride_h - s.pad_top + kh * s.dilation_h;
                const int64_t iw =
                    ow * s.stride_w - s.pad_left + kw * s.dilation_w;
                if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
                const int64_t ci = (co / cog) * cig + cl;
                f(n, co, oh, ow, cl, ci, kh, kw, ih, iw);
              }
}

inline RefTensor Conv2dForward(const Conv2dShape& s, const float* x,
                               const float* w) {
  const int64_t out_h = Conv2dOutH(s), out_w = Conv2dOutW(s);
  const int64_t cig = s.c_in / s.groups;
  RefTensor y(Conv2dOutputSize(s));
  ForEachConvTap(
      s, [&](int64_t n, int64_t co, int64_t oh, int64_t ow, int64_t cl,
             int64_t ci, int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
        const double xv = x[((n * s.c_in + ci) * s.h + ih) * s.w + iw];
        const double wv = w[((co * cig + cl) * s.k_h + kh) * s.k_w + kw];
        y.Add(((n * s.c_out + co) * out_h + oh) * out_w + ow, xv * wv);
      });
  return y;
}

// Scatter: every output adds dy * w into each input it read.
inline RefTensor Conv2dGradInput(const Conv2dShape& s, const float* dy,
                                 const float* w) {
  const int64_t out_h = Conv2dOutH(s), out_w = Conv2dOutW(s);
  const int64_t cig = s.c_in / s.groups;
  RefTensor dx(Conv2dInputSize(s));
  ForEachConvTap(
      s, [&](int64_t n, int64_t co, int64_t oh, int64_t ow, int64_t cl,
             int64_t ci, int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
        const double g = dy[((n * s.c_out + co) * out_h + oh) * out_w + ow];
        const double wv = w[((co * cig + cl) * s.k_h + kh) * s.k_w + kw];
        dx.Add(((n * s.c_in + ci) * s.h + ih) * s.w + iw, g * wv);
      });
  return dx;
}

inline RefTensor Conv2dGradWeight(const Conv2dShape& s, const float* x,
                                  const float* dy) {
  const int64_t out_h = Conv2dOutH(s), out_w = Conv2dOutW(s);
  const int64_t cig = s.c_in / s.groups;
  RefTensor dw(Conv2dWeightSize(s));
  ForEachConvTap(
      s, [&](int64_t n, int64_t co, int64_t oh, int64_t ow, int64_t cl,
             int64_t ci, int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
        const double g = dy[((n * s.c_out + co) * out_h + oh) * out_w + ow];
        const double xv = x[((n * s.c_in + ci) * s.h + ih) * s.w + iw];
        dw.Add(((co * cig + cl) * s.k_h + kh) * s.k_w + kw, g * xv);
      });
  return dw;
}

// Calls f(plane, oh, ow, taps) for every pooling window, where taps lists
// the window's real (non-padding) input offsets ih * W + iw in (kh, kw)
// order.
template <typename F>
void ForEachPoolWindow(const Pool2dShape& s, F&& f) {
  const int64_t out_h = Pool2dOutH(s), out_w = Pool2dOutW(s);
  std::vector<int64_t> taps;
  for (int64_t plane = 0; plane < s.n * s.c; ++plane)
    for (int64_t oh = 0; oh < out_h; ++oh)
      for (int64_t ow = 0; ow < out_w; ++ow) {
        taps.clear();
        for (int64_t kh = 0; kh < s.k_h; ++kh)
          for (int64_t kw = 0; kw < s.k_w; ++kw) {
            const int64_t ih = oh * s.stride_h - s.pad_top + kh;
            const int64_t iw = ow * s.stride_w - s.pad_left + kw;
            if (ih >= 0 && ih < s.h && iw >= 0 && iw < s.w) {
              taps.push_back(ih * s.w + iw);
            }
          }
        f(plane, oh, ow, taps);
      }
}

// The max-pool winner among `taps` of one plane: the first NaN if any, else
// the first maximum (std::max_element returns the first of equal maxima).
inline int64_t MaxPoolWinner(const float* plane,
                             const std::vector<int64_t>& taps) {
  auto nan = std::find_if(taps.begin(), taps.end(),
                          [&](int64_t t) { return std::isnan(plane[t]); });
  if (nan != taps.end()) return *nan;
  return *std::max_element(taps.begin(), taps.end(), [&](int64_t a, int64_t b) {
    return plane[a] < plane[b];
  });
}

// Max pooling forward is exact: the values themselves (as double).
inline RefTensor MaxPool2dForward(const Pool2dShape& s, const float* x) {
  RefTensor y(Pool2dOutputSize(s));
  const int64_t out_h = Pool2dOutH(s), out_w = Pool2dOutW(s);
  ForEachPoolWindow(s, [&](int64_t plane, int64_t oh, int64_t ow,
                           const std::vector<int64_t>& taps) {
    const float* xp = x + plane * s.h * s.w;
    y.Add((plane * out_h + oh) * out_w + ow, xp[MaxPoolWinner(xp, taps)]);
  });
  return y;
}

inline RefTensor MaxPool2dGrad(const Pool2dShape& s, const float* x,
                               const float* dy) {
  RefTensor dx(Pool2dInputSize(s));
  const int64_t out_h = Pool2dOutH(s), out_w = Pool2dOutW(s);
  ForEachPoolWindow(s, [&](int64_t plane, int64_t oh, int64_t ow,
                           const std::vector<int64_t>& taps) {
    const float* xp = x + plane * s.h * s.w;
    dx.Add(plane * s.h * s.w + MaxPoolWinner(xp, taps),
           dy[(plane * out_h + oh) * out_w + ow]);
  });
  return dx;
}

inline double AvgPoolDivisor(const Pool2dShape& s,
                             const std::vector<int64_t>& taps) {
  return s.count_include_pad ? static_cast<double>(s.k_h * s.k_w)
                             : static_cast<double>(taps.size());
}

inline RefTensor AvgPool2dForward(const Pool2dShape& s, const float* x) {
  RefTensor y(Pool2dOutputSize(s));
  const int64_t out_h = Pool2dOutH(s), out_w = Pool2dOutW(s);
  ForEachPoolWindow(s, [&](int64_t plane, int64_t oh, int64_t ow,
                           const std::vector<int64_t>& taps) {
    // The window sum, then one division.
    const double d = AvgPoolDivisor(s, taps);
    const float* xp = x + plane * s.h * s.w;
    double sum = 0.0, magnitude = 0.0;
    for (int64_t t : taps) {
      sum += xp[t];
      magnitude += std::fabs(xp[t]);
    }
    const size_t o = static_cast<size_t>((plane * out_h + oh) * out_w + ow);
    y.value[o] = sum / d;
    y.magnitude[o] = magnitude / d;
  });
  return y;
}

inline RefTensor AvgPool2dGrad(const Pool2dShape& s, const float* dy) {
  RefTensor dx(Pool2dInputSize(s));
  const int64_t out_h = Pool2dOutH(s), out_w = Pool2dOutW(s);
  ForEachPoolWindow(s, [&](int64_t plane, int64_t oh, int64_t ow,
                           const std::vector<int64_t>& taps) {
    const double d = AvgPoolDivisor(s, taps);
    const double g = dy[(plane * out_h + oh) * out_w + ow];
    for (int64_t t : taps) dx.Add(plane * s.h * s.w + t, g / d);
  });
  return dx;
}

inline RefTensor GlobalAvgPool2dForward(const GlobalPool2dShape& s,
                                        const float* x) {
  // The plane sum, then one division.
  RefTensor y(GlobalPool2dOutputSize(s));
  const int64_t area = s.h * s.w;
  for (int64_t i = 0; i < s.n * s.c * area; ++i) y.Add(i / area, x[i]);
  for (int64_t p = 0; p < y.size(); ++p) {
    y.value[p] /= static_cast<double>(area);
    y.magnitude[p] /= static_cast<double>(area);
  }
  return y;
}

inline RefTensor GlobalAvgPool2dGrad(const GlobalPool2dShape& s,
                                     const float* dy) {
  RefTensor dx(GlobalPool2dInputSize(s));
  const int64_t area = s.h * s.w;
  for (int64_t i = 0; i < dx.size(); ++i) {
    dx.Add(i, dy[i / area] / static_cast<double>(area));
  }
  return dx;
}

// One axis of the half-pixel bilinear mapping, in double.
struct RefAxis {
  int64_t i0, i1;
  double l0, l1;
};

inline RefAxis ResizeAxis(int64_t in, int64_t out, int64_t o) {
  double src = (static_cast<double>(o) + 0.5) * static_cast<double>(in) /
                   static_cast<double>(out) -
               0.5;
  src = std::max(src, 0.0);
  RefAxis a;
  a.i0 = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
  a.i1 = std::min(a.i0 + 1, in - 1);
  a.l1 = src - static_cast<double>(a.i0);
  a.l0 = 1.0 - a.l1;
  return a;
}

// Calls f(plane, out_index, in_offset, weight) for the four taps of every
// output pixel, outputs in flat order, taps in (0,0), (0,1), (1,0), (1,1).
template <typename F>
void ForEachResizeTap(const ResizeBilinearShape& s, F&& f) {
  for (int64_t plane = 0; plane < s.n * s.c; ++plane)
    for (int64_t oh = 0; oh < s.out_h; ++oh)
      for (int64_t ow = 0; ow < s.out_w; ++ow) {
        const RefAxis ry = ResizeAxis(s.in_h, s.out_h, oh);
        const RefAxis rx = ResizeAxis(s.in_w, s.out_w, ow);
        const int64_t o = (plane * s.out_h + oh) * s.out_w + ow;
        const int64_t ys[2] = {ry.i0, ry.i1}, xs[2] = {rx.i0, rx.i1};
        const double wy[2] = {ry.l0, ry.l1}, wx[2] = {rx.l0, rx.l1};
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b) {
            f(plane, o, ys[a] * s.in_w + xs[b], wy[a] * wx[b]);
          }
      }
}

inline RefTensor ResizeBilinearForward(const ResizeBilinearShape& s,
                                       const float* x) {
  RefTensor y(ResizeBilinearOutputSize(s));
  const int64_t area = s.in_h * s.in_w;
  ForEachResizeTap(
      s, [&](int64_t plane, int64_t o, int64_t in_offset, double weight) {
        y.Add(o, weight * x[plane * area + in_offset]);
      });
  return y;
}

inline RefTensor ResizeBilinearGrad(const ResizeBilinearShape& s,
                                    const float* dy) {
  RefTensor dx(ResizeBilinearInputSize(s));
  const int64_t area = s.in_h * s.in_w;
  ForEachResizeTap(
      s, [&](int64_t plane, int64_t o, int64_t in_offset, double weight) {
        dx.Add(plane * area + in_offset, weight * dy[o]);
      });
  return dx;
}

}  // namespace lockstep::spatial::reference

#endif  // LOCKSTEP_KERNELS_SPATIAL_REFERENCE_H_
