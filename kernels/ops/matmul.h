// CANONICAL batched matrix product (the MATMUL layer).
//
//   matmul.forward  in {a, b}      out {y}         y = s * op(a) op(b)
//   matmul.grad     in {a, b, dy}  out {da, db}    da = s * dy op(b)^T,
//                                                  db = s * op(a)^T dy
//
// a is [B..., M, K] (or [B..., K, M] with transpose_a), b is [B..., K, N]
// (or [B..., N, K] with transpose_b), y is [B..., M, N]; the leading batch
// dimensions B... are equal (possibly none: one batch entry). Batch entry
// t of every operand starts at t * (its last two dimensions' product).
//
// Per batch entry the three products are exactly dense.forward,
// dense.grad_input and dense.grad_weight (kernels/ops/dense.h) with x = a,
// w = b, transpose_x = transpose_a, transpose_w = transpose_b: each output
// the canonical dot product (reduce.h) over k (forward), n (da) or m (db)
// in increasing index order. Then, when s != 1, one IEEE multiply by s per
// output (s = 1 skips it: D * 1 = D for every D the dot can produce).
// da and db are stored in the layouts of a and b.
//
// Header-only, LS_HD: BatchedMatMulElement is one output (a GPU thread's
// work).
#ifndef LOCKSTEP_KERNELS_OPS_MATMUL_H_
#define LOCKSTEP_KERNELS_OPS_MATMUL_H_

#include <cstdint>

#include "kernels/canonical/hd.h"
#include "kernels/ops/dense.h"

namespace lockstep::canonical {

// `batch` strided products: entry t reads a + t * a_batch and
// b + t * b_batch and writes c + t * c_batch.
struct BatchedMatMulShape {
  MatMulShape m;
  int64_t batch = 0;
  int64_t a_batch = 0, b_batch = 0, c_batch = 0;
  float scale = 1.0f;
};

LS_HD_INLINE float ScaleProduct(float d, float scale) {
  return scale == 1.0f ? d : d * scale;
}

LS_HD_INLINE float BatchedMatMulElement(const BatchedMatMulShape& s,
                                        const float* a, const float* b,
                                        int64_t t, int64_t i, int64_t j) {
  return ScaleProduct(
      MatMulElement(s.m, a + t * s.a_batch, b + t * s.b_batch, i, j), s.scale);
}

// Offset of output (i, j) of entry t in c.
LS_HD_INLINE int64_t BatchedMatMulOffset(const BatchedMatMulShape& s, int64_t t,
                                         int64_t i, int64_t j) {
  return t * s.c_batch + i * s.m.c_row + j * s.m.c_col;
}

LS_HD_INLINE void BatchedMatMul(const BatchedMatMulShape& s, const float* a,
                                const float* b, float* c) {
  for (int64_t t = 0; t < s.batch; ++t) {
    for (int64_t i = 0; i < s.m.rows; ++i) {
      for (int64_t j = 0; j < s.m.cols; ++j) {
        c[BatchedMatMulOffset(s, t, i, j)] =
            BatchedMatMulElement(s, a, b, t, i, j);
      }
    }
  }
}

// One call: the dense shape of one batch entry, the entry count, the scale.
struct MatMulDims {
  DenseShape d;
  int64_t batch = 0;
  float scale = 1.0f;
};

// One product of the call over every batch entry; the per-entry strides
// are the element counts of the operands' entries.
LS_HD_INLINE BatchedMatMulShape Batched(const MatMulShape& m,
                                        const MatMulDims& md, int64_t a_batch,
                                        int64_t b_batch, int64_t c_batch) {
  BatchedMatMulShape s;
  s.m = m;
  s.batch = md.batch;
  s.a_batch = a_batch;
  s.b_batch = b_batch;
  s.c_batch = c_batch;
  s.scale = md.scale;
  return s;
}

// The three products of one call. forward: a, b -> y; grad_a: dy, b -> da;
// grad_b: a, dy -> db.
LS_HD_INLINE BatchedMatMulShape MatMulForwardShape(const MatMulDims& md) {
  const DenseShape& d = md.d;
  return Batched(DenseForwardShape(d), md, d.m * d.k, d.k * d.n, d.m * d.n);
}
LS_HD_INLINE BatchedMatMulShape MatMulGradAShape(const MatMulDims& md) {
  const DenseShape& d = md.d;
  return Batched(DenseGradInputShape(d), md, d.m * d.n, d.k * d.n, d.m * d.k);
}
LS_HD_INLINE BatchedMatMulShape MatMulGradBShape(const MatMulDims& md) {
  const DenseShape& d = md.d;
  return Batched(DenseGradWeightShape(d), md, d.m * d.k, d.m * d.n, d.k * d.n);
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_OPS_MATMUL_H_
