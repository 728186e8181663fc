// CANONICAL dense (matmul) forward and backward.
//
// All three products are one strided matrix product
//
//   C(i, j) = sum over p = 0 .. k-1, in increasing p, of A(i, p) * B(p, j)
//
// evaluated with CanonicalDot (reduce.h): chunks of 256 fma chains from
// +0.0f, then the pairwise tree. A(i, p) = a[i * a_i + p * a_p], and so on,
// so transposes are only strides. Canonical reduction index per op:
//
//   dense.forward      y(m, n)  = sum_k  X(m, k) W(k, n)    index k
//   dense.grad_input   dX(m, k) = sum_n  dy(m, n) W(k, n)   index n
//   dense.grad_weight  dW(k, n) = sum_m  X(m, k) dy(m, n)   index m (batch)
//
// where X = op(x) is [M, K] and W = op(w) is [K, N] (transpose flags), and
// dX, dW are stored in the layouts of x and w.
//
// Header-only, LS_HD: MatMulElement computes one output and is what a GPU
// thread calls; MatMul is the host driver over all outputs. Preconditions:
// shapes and pointers valid (validated on the host, kernels/ops/validate.h);
// outputs do not alias inputs.
#ifndef LOCKSTEP_KERNELS_OPS_DENSE_H_
#define LOCKSTEP_KERNELS_OPS_DENSE_H_

#include <cstdint>

#include "kernels/canonical/hd.h"
#include "kernels/canonical/reduce.h"

namespace lockstep::canonical {

// C[rows, cols] = A[rows, depth] * B[depth, cols], all strided (elements).
struct MatMulShape {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t depth = 0;  // reduction length
  int64_t a_row = 0, a_depth = 0;
  int64_t b_depth = 0, b_col = 0;
  int64_t c_row = 0, c_col = 0;
};

LS_HD_INLINE float MatMulElement(const MatMulShape& s, const float* a,
                                 const float* b, int64_t i, int64_t j) {
  return CanonicalDot(a + i * s.a_row, s.a_depth, b + j * s.b_col, s.b_depth,
                      s.depth);
}

LS_HD_INLINE void MatMul(const MatMulShape& s, const float* a, const float* b,
                         float* c) {
  for (int64_t i = 0; i < s.rows; ++i) {
    for (int64_t j = 0; j < s.cols; ++j) {
      c[i * s.c_row + j * s.c_col] = MatMulElement(s, a, b, i, j);
    }
  }
}

// Logical dense shape: X = op(x) is [m, k], W = op(w) is [k, n].
struct DenseShape {
  int64_t m = 0;
  int64_t k = 0;
  int64_t n = 0;
  bool transpose_x = false;  // x stored as [k, m]
  bool transpose_w = false;  // w stored as [n, k]
};

// Strides of X(i, p) in x and of W(p, j) in w.
struct DenseStrides {
  int64_t x_m, x_k, w_k, w_n;
};
LS_HD_INLINE DenseStrides StridesOf(const DenseShape& d) {
  DenseStrides s;
  s.x_m = d.transpose_x ? 1 : d.k;
  s.x_k = d.transpose_x ? d.m : 1;
  s.w_k = d.transpose_w ? 1 : d.n;
  s.w_n = d.transpose_w ? d.k : 1;
  return s;
}

// y[m, n] = X W, reduction over k.
LS_HD_INLINE MatMulShape DenseForwardShape(const DenseShape& d) {
  const DenseStrides s = StridesOf(d);
  MatMulShape r;
  r.rows = d.m;
  r.cols = d.n;
  r.depth = d.k;
  r.a_row = s.x_m;
  r.a_depth = s.x_k;
  r.b_depth = s.w_k;
  r.b_col = s.w_n;
  r.c_row = d.n;
  r.c_col = 1;
  return r;
}

// dX(i, p) = sum_j dy(i, j) W(p, j): A = dy [m, n], B(j, p) = W(p, j);
// written at x's layout.
LS_HD_INLINE MatMulShape DenseGradInputShape(const DenseShape& d) {
  const DenseStrides s = StridesOf(d);
  MatMulShape r;
  r.rows = d.m;
  r.cols = d.k;
  r.depth = d.n;
  r.a_row = d.n;
  r.a_depth = 1;
  r.b_depth = s.w_n;
  r.b_col = s.w_k;
  r.c_row = s.x_m;
  r.c_col = s.x_k;
  return r;
}

// dW(p, j) = sum_i X(i, p) dy(i, j): A(p, i) = X(i, p), B = dy [m, n];
// written at w's layout.
LS_HD_INLINE MatMulShape DenseGradWeightShape(const DenseShape& d) {
  const DenseStrides s = StridesOf(d);
  MatMulShape r;
  r.rows = d.k;
  r.cols = d.n;
  r.depth = d.m;
  r.a_row = s.x_k;
  r.a_depth = s.x_m;
  r.b_depth = d.n;
  r.b_col = 1;
  r.c_row = s.w_k;
  r.c_col = s.w_n;
  return r;
}

LS_HD_INLINE void DenseForward(const DenseShape& d, const float* x,
                               const float* w, float* y) {
  MatMul(DenseForwardShape(d), x, w, y);
}
LS_HD_INLINE void DenseGradInput(const DenseShape& d, const float* dy,
                                 const float* w, float* dx) {
  MatMul(DenseGradInputShape(d), dy, w, dx);
}
LS_HD_INLINE void DenseGradWeight(const DenseShape& d, const float* x,
                                  const float* dy, float* dw) {
  MatMul(DenseGradWeightShape(d), x, dy, dw);
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_OPS_DENSE_H_
