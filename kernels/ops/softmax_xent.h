// CANONICAL softmax cross-entropy with mean over the batch.
//
// logits [N, C] float32, labels [N] int32 class indices. Per example i, with
// row = logits[i, :] and y = labels[i]:
//
//   m     = max_j row[j]            sequential over j = 0 .. C-1 from row[0],
//                                   replaced only when row[j] > m (exact)
//   e_j   = CanonicalExp(row[j] - m)             (one rounding, then exp)
//   s     = canonical sum over j of e_j          (reduce.h rule, index j)
//   loss_i = CanonicalLog(s) - (row[y] - m)      (two roundings: - then -)
//
//   loss  = (canonical sum over i of loss_i) / float(N)   (IEEE division)
//
// Gradient (softmax - onehot) / N, per element:
//   p    = e_j / s                                (IEEE division)
//   t    = p - 1.0f if j == y, else p             (one rounding or none)
//   g    = t / float(N)                           (IEEE division)
//
// N <= 2^24 so float(N) is exact. NaN in a row makes that example's loss and
// gradients NaN (through exp and the sum); +Inf logits give NaN (Inf - Inf).
//
// Header-only, LS_HD. Preconditions (checked on the host before any compute,
// see kernels/ops/validate.h): n >= 1, c >= 1, 0 <= labels[i] < c.
#ifndef LOCKSTEP_KERNELS_OPS_SOFTMAX_XENT_H_
#define LOCKSTEP_KERNELS_OPS_SOFTMAX_XENT_H_

#include <cstdint>

#include "kernels/canonical/gather.h"
#include "kernels/canonical/hd.h"
#include "kernels/canonical/reduce.h"
#include "kernels/math/portable_math.h"

namespace lockstep::canonical {

// The largest batch whose size converts to float exactly.
inline constexpr int64_t kMaxSoftmaxBatch = int64_t{1} << 24;

struct SoftmaxShape {
  int64_t n = 0;  // examples
  int64_t c = 0;  // classes
};

// Per-row max and canonical sum of exponentials.
struct SoftmaxRowStats {
  float max;
  float sum;
};

// term(j) = CanonicalExp(row[j] - m).
struct SoftmaxExpTerm {
  const float* row;
  float max;
  LS_HD_INLINE float operator()(int64_t j) const {
    const float z = row[j] - max;
    return CanonicalExp(z);
  }
};

LS_HD_INLINE SoftmaxRowStats SoftmaxRowStatsOf(const float* row, int64_t c) {
  float m = row[0];
  for (int64_t j = 1; j < c; ++j) {
    if (row[j] > m) m = row[j];
  }
  SoftmaxRowStats st;
  st.max = m;
  st.sum = CanonicalSumOf(c, SoftmaxExpTerm{row, m});
  return st;
}

// loss_i from row i (of logits) and the row's stats.
LS_HD_INLINE float SoftmaxXentLossFrom(const float* row, int32_t label,
                                       const SoftmaxRowStats& st) {
  const float z = row[label] - st.max;
  return CanonicalLog(st.sum) - z;
}

// loss_i for example i.
LS_HD_INLINE float SoftmaxXentExampleLoss(const SoftmaxShape& s,
                                          const float* logits,
                                          const int32_t* labels, int64_t i) {
  const float* row = logits + i * s.c;
  return SoftmaxXentLossFrom(row, labels[i], SoftmaxRowStatsOf(row, s.c));
}

// The mean of the per-example losses losses[0 .. n).
LS_HD_INLINE float SoftmaxXentMeanLoss(const SoftmaxShape& s,
                                       const float* losses) {
  const float total = CanonicalSum(losses, s.n, 1);
  return total / static_cast<float>(s.n);
}

// Host driver. scratch: n floats (per-example losses). Returns the mean loss.
LS_HD_INLINE float SoftmaxXentForward(const SoftmaxShape& s,
                                      const float* logits,
                                      const int32_t* labels, float* scratch) {
  for (int64_t i = 0; i < s.n; ++i) {
    scratch[i] = SoftmaxXentExampleLoss(s, logits, labels, i);
  }
  return SoftmaxXentMeanLoss(s, scratch);
}

// d loss / d logits[i, j] from e = CanonicalExp(logits[i, j] - max) and the
// row's sum.
LS_HD_INLINE float SoftmaxXentGradFromExp(const SoftmaxShape& s, float e,
                                          float sum, bool is_label) {
  const float p = e / sum;
  const float t = is_label ? p - 1.0f : p;
  return t / static_cast<float>(s.n);
}

// d loss / d logits[i, j], given the row's stats.
LS_HD_INLINE float SoftmaxXentGradElement(const SoftmaxShape& s,
                                          const float* row, int32_t label,
                                          const SoftmaxRowStats& st,
                                          int64_t j) {
  return SoftmaxXentGradFromExp(s, CanonicalExp(row[j] - st.max), st.sum,
                                j == label);
}

// One example's gradient row (stats computed once per row).
LS_HD_INLINE void SoftmaxXentGradRow(const SoftmaxShape& s, const float* logits,
                                     const int32_t* labels, int64_t i,
                                     float* dlogits) {
  const float* row = logits + i * s.c;
  const SoftmaxRowStats st = SoftmaxRowStatsOf(row, s.c);
  float* out = dlogits + i * s.c;
  for (int64_t j = 0; j < s.c; ++j) {
    out[j] = SoftmaxXentGradElement(s, row, labels[i], st, j);
  }
}

// exp_row(v, n) replaces v[j] by CanonicalExp(v[j]) for j < n: the spec's
// one at a time, or the CPU's vectorised exp (the same bits).
struct XentScalarExpRow {
  LS_HD_INLINE void operator()(float* v, int64_t n) const {
    for (int64_t j = 0; j < n; ++j) v[j] = CanonicalExp(v[j]);
  }
};

// SoftmaxRowStatsOf with the exps kept: out[j] = CanonicalExp(row[j] - max)
// by exp_row, summed through the same chain (the same bits).
template <typename ExpRow>
LS_HD_INLINE SoftmaxRowStats SoftmaxRowExpsOnce(const float* row, int64_t c,
                                                float* out,
                                                const ExpRow& exp_row) {
  float m = row[0];
  for (int64_t j = 1; j < c; ++j) {
    if (row[j] > m) m = row[j];
  }
  for (int64_t j = 0; j < c; ++j) out[j] = row[j] - m;
  exp_row(out, c);
  GatherChain chain;
  for (int64_t j = 0; j < c; ++j) chain.Add(out[j]);
  SoftmaxRowStats st;
  st.max = m;
  st.sum = chain.Finish();
  return st;
}

// SoftmaxXentGradRow with each exp computed once: the row's x - max, then
// its exps, wait in the output row between the sum and the outputs. The
// same operations on the same values in the same order, so the same bits;
// dlogits must not overlap logits.
template <typename ExpRow = XentScalarExpRow>
LS_HD_INLINE void SoftmaxXentGradRowOnce(const SoftmaxShape& s,
                                         const float* logits,
                                         const int32_t* labels, int64_t i,
                                         float* dlogits,
                                         const ExpRow& exp_row = {}) {
  const float* row = logits + i * s.c;
  float* out = dlogits + i * s.c;
  const float sum = SoftmaxRowExpsOnce(row, s.c, out, exp_row).sum;
  for (int64_t j = 0; j < s.c; ++j) {
    out[j] = SoftmaxXentGradFromExp(s, out[j], sum, j == labels[i]);
  }
}

// SoftmaxXentExampleLoss with the row's exps computed by exp_row into
// scratch (s.c floats): the same operations on the same values in the same
// order, so the same bits.
template <typename ExpRow = XentScalarExpRow>
LS_HD_INLINE float SoftmaxXentExampleLossOnce(const SoftmaxShape& s,
                                              const float* logits,
                                              const int32_t* labels, int64_t i,
                                              float* scratch,
                                              const ExpRow& exp_row = {}) {
  const float* row = logits + i * s.c;
  return SoftmaxXentLossFrom(row, labels[i],
                             SoftmaxRowExpsOnce(row, s.c, scratch, exp_row));
}

LS_HD_INLINE void SoftmaxXentGrad(const SoftmaxShape& s, const float* logits,
                                  const int32_t* labels, float* dlogits) {
  for (int64_t i = 0; i < s.n; ++i) {
    SoftmaxXentGradRow(s, logits, labels, i, dlogits);
  }
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_OPS_SOFTMAX_XENT_H_
