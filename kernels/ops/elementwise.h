// CANONICAL bias_add, relu, residual add and flatten (copy).
//
// Elementwise ops are one IEEE operation per element (or none), so they have
// no index order; bias_add.grad is a reduction with canonical index order
// (n, s) where s runs over the flattened spatial positions (h, w):
//
//   bias_add.forward  y[n, c, s] = x[n, c, s] + b[c]            one rounding
//   bias_add.grad     db[c] = canonical sum over (n, s) of dy[n, c, s]
//   relu.forward      y = x > 0 ? x : (x is NaN ? x : +0.0f)   no rounding
//   relu.grad         dx = x > 0 ? dy : +0.0f     (x == 0 and NaN x give 0)
//   add.forward       y = a + b                                 one rounding
//   add.grad          da = dy, db = dy                          copies
//   flatten           y = x (row-major copy)                    copies
//
// Header-only, LS_HD; *Element functions compute one output (a GPU thread),
// the other functions are host loop drivers. Preconditions: valid pointers
// and sizes (validated on the host); outputs do not alias inputs except where
// stated.
#ifndef LOCKSTEP_KERNELS_OPS_ELEMENTWISE_H_
#define LOCKSTEP_KERNELS_OPS_ELEMENTWISE_H_

#include <cstdint>

#include "kernels/canonical/gather.h"
#include "kernels/canonical/hd.h"

namespace lockstep::canonical {

// x viewed as [n, c, spatial]; spatial = 1 for a [n, c] tensor.
struct BiasShape {
  int64_t n = 0;
  int64_t c = 0;
  int64_t spatial = 1;
};

LS_HD_INLINE float BiasAddElement(const BiasShape& s, const float* x,
                                  const float* b, int64_t index) {
  const int64_t c = (index / s.spatial) % s.c;
  return x[index] + b[c];
}

LS_HD_INLINE void BiasAddForward(const BiasShape& s, const float* x,
                                 const float* b, float* y) {
  const int64_t total = s.n * s.c * s.spatial;
  for (int64_t i = 0; i < total; ++i) y[i] = BiasAddElement(s, x, b, i);
}

// db[c]: sum over (n, s), n outer, of dy[(n * C + c) * S + s].
LS_HD_INLINE float BiasAddGradElement(const BiasShape& s, const float* dy,
                                      int64_t c) {
  return CanonicalSum2D(dy + c * s.spatial, s.n, s.c * s.spatial, s.spatial, 1);
}

LS_HD_INLINE void BiasAddGrad(const BiasShape& s, const float* dy, float* db) {
  for (int64_t c = 0; c < s.c; ++c) db[c] = BiasAddGradElement(s, dy, c);
}

// x for x > 0 and for NaN (which propagates with its bits), else +0 (also
// for -0). One compare and a select: no branch, so loops vectorise.
LS_HD_INLINE float ReluElement(float x) { return x <= 0.0f ? 0.0f : x; }

LS_HD_INLINE float ReluGradElement(float x, float dy) {
  return x > 0.0f ? dy : 0.0f;
}

LS_HD_INLINE void ReluForward(const float* x, float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) y[i] = ReluElement(x[i]);
}

LS_HD_INLINE void ReluGrad(const float* x, const float* dy, float* dx,
                           int64_t count) {
  for (int64_t i = 0; i < count; ++i) dx[i] = ReluGradElement(x[i], dy[i]);
}

// y may alias a or b.
LS_HD_INLINE void AddForward(const float* a, const float* b, float* y,
                             int64_t count) {
  for (int64_t i = 0; i < count; ++i) y[i] = a[i] + b[i];
}

// Copies count floats (flatten, add.grad). Exact: bits are moved unchanged.
LS_HD_INLINE void CopyFloats(const float* x, float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) y[i] = x[i];
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_OPS_ELEMENTWISE_H_
