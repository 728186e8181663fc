// CANONICAL optimizer updates: SGD, momentum, Adam. Elementwise; every line
// below is exactly one IEEE float32 operation (no fma anywhere):
//
//   sgd.update       u = lr * g;  w = w - u
//
//   momentum.update  a = mu * v;  v = a + g;          (v = mu*v + g)
//                    u = lr * v;  w = w - u           (w = w - lr*v)
//
//   adam.update (step t >= 1; scalars computed once per call, AdamScalarsOf):
//     c1  = 1 - b1;  c2 = 1 - b2                     (float32)
//     bc1 = float(1.0 - PowInt(double(b1), t))       (float64, then one
//     bc2 = float(1.0 - PowInt(double(b2), t))        rounding to float32)
//   PowInt is binary exponentiation with IEEE float64 multiplies (below).
//   The bias corrections are the only float64 arithmetic in the canonical
//   ops: 1 - b^t cancels (b2 = 0.999: ~1000x), which float32 powers would
//   turn into ~1e-4 relative error; IEEE float64 multiplies are the same on
//   every CPU and GPU, so the result is still portable.
//   per element:
//     a = b1 * m;  b = c1 * g;      m = a + b
//     q = g * g;   a = b2 * v;  b = c2 * q;  v = a + b
//     mh = m / bc1;  vh = v / bc2                    (IEEE division)
//     d  = sqrt(vh);  d = d + eps                    (IEEE sqrt)
//     r  = mh / d;  u = lr * r;  w = w - u
//
//   adamw.update: Adam with decoupled weight decay (Loshchilov & Hutter,
//   PyTorch's AdamW): decay = 1 - lr * wd (two float32 roundings, once per
//   call); per element first  w = w * decay,  then the Adam lines above.
//
//   grad_norm.sum_squares  s = dot of (g, g) over the tensor in index order
//                          (the reduction rule: fma chains of 256, tree)
//   grad_norm.scale        g = g * scale                 (one rounding)
//   Global-norm clipping (the executor): total = canonical sum, in manifest
//   order of the parameters, of their sum_squares; norm = sqrt(total);
//   coef = max_norm / (norm + 1e-6); when coef < 1 every gradient is scaled
//   by coef, otherwise none is touched.
//
// Header-only, LS_HD. Preconditions: hyper-parameters validated on the host
// (kernels/ops/validate.h); w, v, m, g of equal length; g does not alias the
// state.
#ifndef LOCKSTEP_KERNELS_OPS_OPTIMIZERS_H_
#define LOCKSTEP_KERNELS_OPS_OPTIMIZERS_H_

#include <cstdint>

#include "kernels/canonical/hd.h"

#if !defined(__CUDACC__)
#include <cmath>
#endif

namespace lockstep::canonical {

LS_HD_INLINE float IeeeSqrt(float x) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

// base^e in float64 by binary exponentiation, exactly this sequence:
//   r = 1; b = base;
//   while e > 0: { if (e & 1) r = r * b;  e >>= 1;  if (e > 0) b = b * b; }
// (each * one IEEE float64 rounding). REQUIRES: e >= 0.
LS_HD_INLINE double PowInt(double base, int64_t e) {
  double r = 1.0;
  double b = base;
  while (e > 0) {
    if (e & 1) r = r * b;
    e >>= 1;
    if (e > 0) b = b * b;
  }
  return r;
}

LS_HD_INLINE void SgdUpdate(float* w, const float* g, int64_t count, float lr) {
  for (int64_t i = 0; i < count; ++i) {
    const float u = lr * g[i];
    w[i] = w[i] - u;
  }
}

LS_HD_INLINE void MomentumUpdate(float* w, float* v, const float* g,
                                 int64_t count, float lr, float mu) {
  for (int64_t i = 0; i < count; ++i) {
    const float a = mu * v[i];
    const float vn = a + g[i];
    v[i] = vn;
    const float u = lr * vn;
    w[i] = w[i] - u;
  }
}

struct AdamScalars {
  float lr, beta1, beta2, eps;
  float c1, c2;            // 1 - beta1, 1 - beta2
  float bc1, bc2;          // 1 - beta1^t, 1 - beta2^t (computed in float64)
  bool decoupled = false;  // adamw.update: w = w * decay first
  float decay = 1.0f;      // 1 - lr * weight_decay
};

LS_HD_INLINE AdamScalars AdamScalarsOf(float lr, float beta1, float beta2,
                                       float eps, int64_t step) {
  AdamScalars s;
  s.lr = lr;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.eps = eps;
  s.c1 = 1.0f - beta1;
  s.c2 = 1.0f - beta2;
  s.bc1 = static_cast<float>(1.0 - PowInt(static_cast<double>(beta1), step));
  s.bc2 = static_cast<float>(1.0 - PowInt(static_cast<double>(beta2), step));
  return s;
}

LS_HD_INLINE void AdamElement(const AdamScalars& s, float* w, float* m,
                              float* v, float g) {
  if (s.decoupled) *w = *w * s.decay;
  float a = s.beta1 * *m;
  float b = s.c1 * g;
  const float mn = a + b;
  const float q = g * g;
  a = s.beta2 * *v;
  b = s.c2 * q;
  const float vn = a + b;
  *m = mn;
  *v = vn;
  const float mh = mn / s.bc1;
  const float vh = vn / s.bc2;
  float d = IeeeSqrt(vh);
  d = d + s.eps;
  const float r = mh / d;
  const float u = s.lr * r;
  *w = *w - u;
}

LS_HD_INLINE AdamScalars AdamWScalarsOf(float lr, float beta1, float beta2,
                                        float eps, int64_t step,
                                        float weight_decay) {
  AdamScalars s = AdamScalarsOf(lr, beta1, beta2, eps, step);
  s.decoupled = true;
  const float t = lr * weight_decay;
  s.decay = 1.0f - t;
  return s;
}

LS_HD_INLINE void AdamUpdate(const AdamScalars& s, float* w, float* m, float* v,
                             const float* g, int64_t count) {
  for (int64_t i = 0; i < count; ++i) AdamElement(s, &w[i], &m[i], &v[i], g[i]);
}

LS_HD_INLINE void ScaleInPlace(float* g, int64_t count, float scale) {
  for (int64_t i = 0; i < count; ++i) g[i] = g[i] * scale;
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_OPS_OPTIMIZERS_H_
