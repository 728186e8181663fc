// CANONICAL softmax over the last axis and layer normalisation over the last
// axis.
//
// Both view the input as rows [R, D] (D = the last dimension, R = every
// other dimension multiplied out). "sum" is the canonical sum of
// kernels/canonical/reduce.h over the index order stated, "dot" the
// canonical dot product (fma chain per 256-term chunk, then the pairwise
// tree); every other operation is one IEEE rounding, left to right, no
// contraction. A NaN result is the canonical NaN.
//
// softmax.forward  in {x} out {y}, per row:
//   m   = max_j x[j]    sequential from x[0], replaced only when x[j] > m
//   e_j = exp(x[j] - m)
//   s   = sum over j = 0 .. D-1 of e_j
//   y_j = e_j / s
// softmax.grad     in {x, dy} out {dx}, per row (y recomputed as above):
//   g   = dot over j of (y_j, dy_j)
//   dx_j = y_j * (dy_j - g)
//   The CPU kernel may take a third input, y: softmax.forward's output for
//   the same x, which it then reads instead of recomputing (the same bits;
//   the caller guarantees that y is that forward's).
// Causal (attrs.causal; x's last two dimensions equal, [.., T, T]): row r is
// query position i = r mod T and only its first n = i + 1 entries take
// part: m, s, g and the y_j, dx_j above run over j = 0 .. i exactly as for
// a row of length n, and y_j = dx_j = +0 for j > i.
//
// layer_norm.forward  in {x, gamma [D], beta [D]} out {y}, per row:
//   mean = (sum over j of x[j]) / D
//   d_j  = x[j] - mean
//   var  = (dot over j of (d_j, d_j)) / D
//   rstd = 1 / sqrt(var + eps)                          (eps: OpAttrs.epsilon)
//   xhat_j = d_j * rstd
//   y_j  = xhat_j * gamma[j] + beta[j]
// layer_norm.grad_input  in {x, gamma, dy} out {dx}, per row:
//   g_j  = dy_j * gamma[j]
//   a    = (sum over j of g_j) / D
//   b    = (dot over j of (g_j, xhat_j)) / D
//   dx_j = ((g_j - a) - xhat_j * b) * rstd
// layer_norm.grad_params  in {x, dy} out {dgamma [D], dbeta [D]}, per j:
//   dgamma[j] = dot over rows r = 0 .. R-1 of (dy[r, j], xhat[r, j])
//   dbeta[j]  = sum over rows r of dy[r, j]
//
// batch_norm.* views x as [N, C, S] (S = H*W, 1 for [N, C]) and reduces,
// per channel c, over M = N*S elements in the order (n, s), n outer.
// running is [2, C]: row 0 the running mean, row 1 the running variance.
// batch_norm.forward  in {x, gamma [C], beta [C]} out {y, running (in/out)}
//   training (attrs.batch_norm_eval false), per channel:
//     mean = (sum of x) / M;  d = x - mean;  vs = dot of (d, d)
//     rstd = 1 / sqrt(vs / M + eps);  xhat = d * rstd
//     y = xhat * gamma[c] + beta[c]
//     running_mean = (1 - mom) * running_mean + mom * mean
//     running_var  = (1 - mom) * running_var + mom * (vs / (M - 1))
//     (1 - mom is one rounding; M >= 2 is required)
//   eval: rstd = 1 / sqrt(running_var + eps);
//     y = ((x - running_mean) * rstd) * gamma[c] + beta[c]; running unchanged
// batch_norm.grad_input  in {x, gamma, dy, running} out {dx}
//   training: g = dy * gamma[c]; a = (sum of g) / M; b = (dot of (g, xhat)) / M
//             dx = ((g - a) - xhat * b) * rstd          (batch statistics)
//   eval:     dx = (dy * gamma[c]) * rstd                (running statistics)
// batch_norm.grad_params in {x, dy, running} out {dgamma [C], dbeta [C]}
//   dgamma[c] = dot over (n, s) of (dy, xhat);  dbeta[c] = sum over (n, s) of
//   dy (xhat from the batch statistics in training, the running ones in eval)
// Saved statistics (the CPU kernels): batch_norm.forward may take a third
//   output saved [2, C] (row 0 the means, row 1 rstd; written in training,
//   untouched in eval), and both gradients one more input, last, the saved
//   tensor of the forward of the same x: in training they take mean and
//   rstd from it instead of reducing x again (eval ignores it). The results
//   keep their bits, because saved holds exactly what the gradients would
//   compute; the caller guarantees that x has not changed since the forward.
//   layer_norm.* likewise: layer_norm.forward may take a second output
//   saved [2, R] (row 0 every row's mean, row 1 its rstd), and
//   layer_norm.grad_input and layer_norm.grad_params one more input, last,
//   that tensor, in {x, gamma, dy, saved} and {x, dy, saved}.
// Both gradients in one call (the CPU kernels): batch_norm.grad_params with
//   saved may take gamma as a fifth input and write dx as a third output,
//   in {x, dy, running, saved, gamma} out {dgamma, dbeta, dx}: dx is
//   batch_norm.grad_input's, its sums formed in the same read of x and dy
//   as dgamma's and dbeta's, every output with the bits of its own op.
//
// D <= 2^24 so float(D) is exact. Header-only, LS_HD.
#ifndef LOCKSTEP_KERNELS_OPS_NORM_H_
#define LOCKSTEP_KERNELS_OPS_NORM_H_

#include <cstdint>

#include "kernels/canonical/float_bits.h"
#include "kernels/canonical/gather.h"
#include "kernels/canonical/hd.h"
#include "kernels/math/portable_math.h"

namespace lockstep::canonical {

// x viewed as [rows, d].
struct RowShape {
  int64_t rows = 0;
  int64_t d = 0;
  float epsilon = 1e-5f;  // layer_norm only
  bool causal = false;    // softmax only: rows of [.., d, d] score matrices
};

// The entries of row r that take part (all d, or r mod d + 1 when causal).
LS_HD_INLINE int64_t RowLength(const RowShape& s, int64_t r) {
  return s.causal ? r % s.d + 1 : s.d;
}

namespace norm_internal {

LS_HD_INLINE float CanonicalNanOf(float v) {
  return v != v ? LsBitsToFloat(kCanonicalNanBits) : v;
}

LS_HD_INLINE float RowMax(const float* row, int64_t d) {
  float m = row[0];
  for (int64_t j = 1; j < d; ++j) {
    if (row[j] > m) m = row[j];
  }
  return m;
}

}  // namespace norm_internal

// ---- softmax -------------------------------------------------------------

struct SoftmaxLastStats {
  float max;
  float sum;
};

LS_HD_INLINE SoftmaxLastStats SoftmaxLastStatsOf(const float* row, int64_t d) {
  SoftmaxLastStats st;
  st.max = norm_internal::RowMax(row, d);
  GatherChain chain;
  for (int64_t j = 0; j < d; ++j) chain.Add(CanonicalExp(row[j] - st.max));
  st.sum = chain.Finish();
  return st;
}

LS_HD_INLINE float SoftmaxLastElement(const float* row,
                                      const SoftmaxLastStats& st, int64_t j) {
  return norm_internal::CanonicalNanOf(CanonicalExp(row[j] - st.max) / st.sum);
}

// One row of y.
LS_HD_INLINE void SoftmaxLastForwardRow(const RowShape& s, const float* x,
                                        float* y, int64_t r) {
  const float* row = x + r * s.d;
  const int64_t n = RowLength(s, r);
  const SoftmaxLastStats st = SoftmaxLastStatsOf(row, n);
  for (int64_t j = 0; j < n; ++j) {
    y[r * s.d + j] = SoftmaxLastElement(row, st, j);
  }
  for (int64_t j = n; j < s.d; ++j) y[r * s.d + j] = 0.0f;
}

// One row of dx.
LS_HD_INLINE void SoftmaxLastGradRow(const RowShape& s, const float* x,
                                     const float* dy, float* dx, int64_t r) {
  const float* row = x + r * s.d;
  const float* drow = dy + r * s.d;
  const int64_t n = RowLength(s, r);
  const SoftmaxLastStats st = SoftmaxLastStatsOf(row, n);
  GatherChain dot;
  for (int64_t j = 0; j < n; ++j) {
    dot.Fma(SoftmaxLastElement(row, st, j), drow[j]);
  }
  const float g = dot.Finish();
  for (int64_t j = 0; j < n; ++j) {
    const float y = SoftmaxLastElement(row, st, j);
    dx[r * s.d + j] = norm_internal::CanonicalNanOf(y * (drow[j] - g));
  }
  for (int64_t j = n; j < s.d; ++j) dx[r * s.d + j] = 0.0f;
}

// exp_row(v, n) replaces v[j] by CanonicalExp(v[j]) for j < n: the spec's
// one at a time, or the CPU's vectorised exp (the same bits).
struct ScalarExpRow {
  LS_HD_INLINE void operator()(float* v, int64_t n) const {
    for (int64_t j = 0; j < n; ++j) v[j] = CanonicalExp(v[j]);
  }
};

// The two rows above with each exp computed once instead of two or three
// times: the row's x - max, then its exps, wait in the output row (y, or
// dx) between the passes. The same operations on the same values in the
// same order, so the same bits. The output must not overlap x or dy.

// out[j] = softmax(row)[j] for j < n: exp(row[j] - max), then each over
// their canonical sum. out[n ..] is not written.
template <typename ExpRow>
LS_HD_INLINE void SoftmaxYInto(const float* row, int64_t n, float* out,
                               const ExpRow& exp_row) {
  const float max = norm_internal::RowMax(row, n);
  for (int64_t j = 0; j < n; ++j) out[j] = row[j] - max;
  exp_row(out, n);
  GatherChain chain;
  for (int64_t j = 0; j < n; ++j) chain.Add(out[j]);
  const float sum = chain.Finish();
  for (int64_t j = 0; j < n; ++j) {
    out[j] = norm_internal::CanonicalNanOf(out[j] / sum);
  }
}

template <typename ExpRow = ScalarExpRow>
LS_HD_INLINE void SoftmaxLastForwardRowOnce(const RowShape& s, const float* x,
                                            float* y, int64_t r,
                                            const ExpRow& exp_row = {}) {
  float* out = y + r * s.d;
  const int64_t n = RowLength(s, r);
  SoftmaxYInto(x + r * s.d, n, out, exp_row);
  for (int64_t j = n; j < s.d; ++j) out[j] = 0.0f;
}

// One row of dx from the row's y (the softmax of the same x, as
// SoftmaxLastForwardRow writes it): g = the dot of (y, dy), then dx. y may
// be dx itself (SoftmaxLastGradRowOnce below); dx must not overlap dy.
LS_HD_INLINE void SoftmaxLastGradFromYRow(const RowShape& s, const float* y,
                                          const float* dy, float* dx,
                                          int64_t r) {
  const float* yrow = y + r * s.d;
  const float* drow = dy + r * s.d;
  float* out = dx + r * s.d;
  const int64_t n = RowLength(s, r);
  GatherChain dot;
  for (int64_t j = 0; j < n; ++j) dot.Fma(yrow[j], drow[j]);
  const float g = dot.Finish();
  for (int64_t j = 0; j < n; ++j) {
    out[j] = norm_internal::CanonicalNanOf(yrow[j] * (drow[j] - g));
  }
  for (int64_t j = n; j < s.d; ++j) out[j] = 0.0f;
}

// y into the dx row (its padding is left to the from-y row, which zeroes
// it), then dx from it in place.
template <typename ExpRow = ScalarExpRow>
LS_HD_INLINE void SoftmaxLastGradRowOnce(const RowShape& s, const float* x,
                                         const float* dy, float* dx, int64_t r,
                                         const ExpRow& exp_row = {}) {
  SoftmaxYInto(x + r * s.d, RowLength(s, r), dx + r * s.d, exp_row);
  SoftmaxLastGradFromYRow(s, dx, dy, dx, r);
}

LS_HD_INLINE void SoftmaxLastForward(const RowShape& s, const float* x,
                                     float* y) {
  for (int64_t r = 0; r < s.rows; ++r) SoftmaxLastForwardRow(s, x, y, r);
}

LS_HD_INLINE void SoftmaxLastGrad(const RowShape& s, const float* x,
                                  const float* dy, float* dx) {
  for (int64_t r = 0; r < s.rows; ++r) SoftmaxLastGradRow(s, x, dy, dx, r);
}

// ---- layer norm ----------------------------------------------------------

struct LayerNormRowStats {
  float mean;
  float rstd;
};

// A row's statistics from its two reductions: sum = the canonical sum of
// the row, var_sum = the canonical dot of (d, d), d = x - mean (below, and
// the CPU's lane kernels, kernels/cpu/lane_kernels.h). LayerNormMeanOf is
// also grad_input's a and b (the means of g and of g * xhat).
LS_HD_INLINE float LayerNormMeanOf(const RowShape& s, float sum) {
  return sum / static_cast<float>(s.d);
}
LS_HD_INLINE LayerNormRowStats LayerNormStatsFrom(const RowShape& s, float mean,
                                                  float var_sum) {
  LayerNormRowStats st;
  st.mean = mean;
  const float var = var_sum / static_cast<float>(s.d);
  st.rstd = 1.0f / CanonicalSqrt(var + s.epsilon);
  return st;
}

LS_HD_INLINE LayerNormRowStats LayerNormStatsOf(const RowShape& s,
                                                const float* row) {
  GatherChain sum;
  for (int64_t j = 0; j < s.d; ++j) sum.Add(row[j]);
  const float mean = LayerNormMeanOf(s, sum.Finish());
  GatherChain sq;
  for (int64_t j = 0; j < s.d; ++j) {
    const float dj = row[j] - mean;
    sq.Fma(dj, dj);
  }
  return LayerNormStatsFrom(s, mean, sq.Finish());
}

LS_HD_INLINE float LayerNormXhat(const LayerNormRowStats& st, float x) {
  return (x - st.mean) * st.rstd;
}

// Row r of y from the row's statistics.
LS_HD_INLINE void LayerNormApplyRow(const RowShape& s, const float* x,
                                    const float* gamma, const float* beta,
                                    float* y, int64_t r,
                                    const LayerNormRowStats& st) {
  const float* row = x + r * s.d;
  for (int64_t j = 0; j < s.d; ++j) {
    const float xhat = LayerNormXhat(st, row[j]);
    y[r * s.d + j] = norm_internal::CanonicalNanOf(xhat * gamma[j] + beta[j]);
  }
}

LS_HD_INLINE void LayerNormForwardRow(const RowShape& s, const float* x,
                                      const float* gamma, const float* beta,
                                      float* y, int64_t r) {
  LayerNormApplyRow(s, x, gamma, beta, y, r, LayerNormStatsOf(s, x + r * s.d));
}

// Row r of dx from the row's statistics and its two reductions: sum_g = the
// canonical sum of g = dy * gamma, dot_gx = the canonical dot of (g, xhat).
LS_HD_INLINE void LayerNormGradInputApplyRow(const RowShape& s, const float* x,
                                             const float* gamma,
                                             const float* dy, float* dx,
                                             int64_t r,
                                             const LayerNormRowStats& st,
                                             float sum_g, float dot_gx) {
  const float* row = x + r * s.d;
  const float* drow = dy + r * s.d;
  const float a = LayerNormMeanOf(s, sum_g);
  const float b = LayerNormMeanOf(s, dot_gx);
  for (int64_t j = 0; j < s.d; ++j) {
    const float g = drow[j] * gamma[j];
    const float xhat = LayerNormXhat(st, row[j]);
    dx[r * s.d + j] =
        norm_internal::CanonicalNanOf(((g - a) - xhat * b) * st.rstd);
  }
}

LS_HD_INLINE void LayerNormGradInputRow(const RowShape& s, const float* x,
                                        const float* gamma, const float* dy,
                                        float* dx, int64_t r) {
  const float* row = x + r * s.d;
  const float* drow = dy + r * s.d;
  const LayerNormRowStats st = LayerNormStatsOf(s, row);
  GatherChain sum_g;
  GatherChain dot_gx;
  for (int64_t j = 0; j < s.d; ++j) {
    const float g = drow[j] * gamma[j];
    sum_g.Add(g);
    dot_gx.Fma(g, LayerNormXhat(st, row[j]));
  }
  LayerNormGradInputApplyRow(s, x, gamma, dy, dx, r, st, sum_g.Finish(),
                             dot_gx.Finish());
}

// dgamma[j] and dbeta[j] for one column j, given every row's stats.
LS_HD_INLINE void LayerNormGradParamsColumn(const RowShape& s, const float* x,
                                            const float* dy,
                                            const LayerNormRowStats* stats,
                                            float* dgamma, float* dbeta,
                                            int64_t j) {
  GatherChain dg;
  GatherChain db;
  for (int64_t r = 0; r < s.rows; ++r) {
    const float d = dy[r * s.d + j];
    dg.Fma(d, LayerNormXhat(stats[r], x[r * s.d + j]));
    db.Add(d);
  }
  dgamma[j] = norm_internal::CanonicalNanOf(dg.Finish());
  dbeta[j] = norm_internal::CanonicalNanOf(db.Finish());
}

LS_HD_INLINE void LayerNormForward(const RowShape& s, const float* x,
                                   const float* gamma, const float* beta,
                                   float* y) {
  for (int64_t r = 0; r < s.rows; ++r) {
    LayerNormForwardRow(s, x, gamma, beta, y, r);
  }
}

LS_HD_INLINE void LayerNormGradInput(const RowShape& s, const float* x,
                                     const float* gamma, const float* dy,
                                     float* dx) {
  for (int64_t r = 0; r < s.rows; ++r) {
    LayerNormGradInputRow(s, x, gamma, dy, dx, r);
  }
}

// stats: scratch of s.rows entries.
LS_HD_INLINE void LayerNormGradParams(const RowShape& s, const float* x,
                                      const float* dy, LayerNormRowStats* stats,
                                      float* dgamma, float* dbeta) {
  for (int64_t r = 0; r < s.rows; ++r) {
    stats[r] = LayerNormStatsOf(s, x + r * s.d);
  }
  for (int64_t j = 0; j < s.d; ++j) {
    LayerNormGradParamsColumn(s, x, dy, stats, dgamma, dbeta, j);
  }
}

// ---- batch norm ----------------------------------------------------------

struct ChannelShape {
  int64_t n = 0;
  int64_t c = 0;
  int64_t spatial = 1;
  float epsilon = 1e-5f;
  float momentum = 0.1f;
  bool eval = false;
};

// Per-channel normalisation: xhat = (x - mean) * rstd.
struct BatchNormChannelStats {
  float mean;
  float rstd;
  float var_sum;  // training only: dot of (d, d)
};

namespace norm_internal {

LS_HD_INLINE int64_t ChannelIndex(const ChannelShape& s, int64_t c, int64_t n,
                                  int64_t k) {
  return (n * s.c + c) * s.spatial + k;
}

}  // namespace norm_internal

// The statistics of a channel from its two training-mode reductions: sum =
// the canonical sum of its x, var_sum = the canonical dot of (d, d), d =
// x - mean (below, and the CPU's lane kernels, kernels/cpu/lane_kernels.h).
LS_HD_INLINE float BatchNormMeanOf(const ChannelShape& s, float sum) {
  return sum / static_cast<float>(s.n * s.spatial);
}
LS_HD_INLINE BatchNormChannelStats BatchNormStatsFrom(const ChannelShape& s,
                                                      float mean,
                                                      float var_sum) {
  const float m = static_cast<float>(s.n * s.spatial);
  BatchNormChannelStats st;
  st.mean = mean;
  st.var_sum = var_sum;
  st.rstd = 1.0f / CanonicalSqrt(var_sum / m + s.epsilon);
  return st;
}
LS_HD_INLINE BatchNormChannelStats BatchNormEvalStats(const ChannelShape& s,
                                                      const float* running,
                                                      int64_t c) {
  BatchNormChannelStats st;
  st.mean = running[c];
  st.rstd = 1.0f / CanonicalSqrt(running[s.c + c] + s.epsilon);
  st.var_sum = 0.0f;
  return st;
}

LS_HD_INLINE BatchNormChannelStats BatchNormStatsOf(const ChannelShape& s,
                                                    const float* x,
                                                    const float* running,
                                                    int64_t c) {
  if (s.eval) return BatchNormEvalStats(s, running, c);
  GatherChain sum;
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t k = 0; k < s.spatial; ++k) {
      sum.Add(x[norm_internal::ChannelIndex(s, c, n, k)]);
    }
  }
  const float mean = BatchNormMeanOf(s, sum.Finish());
  GatherChain sq;
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t k = 0; k < s.spatial; ++k) {
      const float d = x[norm_internal::ChannelIndex(s, c, n, k)] - mean;
      sq.Fma(d, d);
    }
  }
  return BatchNormStatsFrom(s, mean, sq.Finish());
}

// One element of y from x, the channel's gamma and beta and statistics.
LS_HD_INLINE float BatchNormOutputOf(float x, float gamma, float beta,
                                     const BatchNormChannelStats& st) {
  const float xhat = (x - st.mean) * st.rstd;
  return norm_internal::CanonicalNanOf(xhat * gamma + beta);
}

// Training mode: channel c of the running statistics, updated from the
// channel's statistics.
LS_HD_INLINE void BatchNormUpdateRunning(const ChannelShape& s, float* running,
                                         int64_t c,
                                         const BatchNormChannelStats& st) {
  const float m = static_cast<float>(s.n * s.spatial);
  const float keep = 1.0f - s.momentum;
  const float unbiased = st.var_sum / (m - 1.0f);
  running[c] = keep * running[c] + s.momentum * st.mean;
  running[s.c + c] = keep * running[s.c + c] + s.momentum * unbiased;
}

// Channel c of y, and (training) channel c of the running statistics, from
// the channel's statistics.
LS_HD_INLINE void BatchNormApplyChannel(const ChannelShape& s, const float* x,
                                        const float* gamma, const float* beta,
                                        float* y, float* running, int64_t c,
                                        const BatchNormChannelStats& st) {
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t k = 0; k < s.spatial; ++k) {
      const int64_t i = norm_internal::ChannelIndex(s, c, n, k);
      y[i] = BatchNormOutputOf(x[i], gamma[c], beta[c], st);
    }
  }
  if (!s.eval) BatchNormUpdateRunning(s, running, c, st);
}

// Channel c of y, and (training) channel c of the running statistics.
LS_HD_INLINE void BatchNormForwardChannel(const ChannelShape& s, const float* x,
                                          const float* gamma, const float* beta,
                                          float* y, float* running, int64_t c) {
  BatchNormApplyChannel(s, x, gamma, beta, y, running, c,
                        BatchNormStatsOf(s, x, running, c));
}

// Eval mode's dx for channel c.
LS_HD_INLINE void BatchNormGradInputEvalChannel(
    const ChannelShape& s, const float* gamma, const float* dy, float* dx,
    int64_t c, const BatchNormChannelStats& st) {
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t k = 0; k < s.spatial; ++k) {
      const int64_t i = norm_internal::ChannelIndex(s, c, n, k);
      dx[i] = norm_internal::CanonicalNanOf((dy[i] * gamma[c]) * st.rstd);
    }
  }
}

// Training mode's dx of one element from x, dy, the channel's gamma and
// statistics, and a = sum_g / m, b = dot_gx / m (below).
LS_HD_INLINE float BatchNormGradInputOf(float x, float dy, float gamma,
                                        const BatchNormChannelStats& st,
                                        float a, float b) {
  const float g = dy * gamma;
  const float xhat = (x - st.mean) * st.rstd;
  return norm_internal::CanonicalNanOf(((g - a) - xhat * b) * st.rstd);
}

// Training mode's dx for channel c from its statistics and its two
// reductions: sum_g = the canonical sum of g = dy * gamma[c], dot_gx = the
// canonical dot of (g, xhat).
LS_HD_INLINE void BatchNormGradInputApplyChannel(
    const ChannelShape& s, const float* x, const float* gamma, const float* dy,
    float* dx, int64_t c, const BatchNormChannelStats& st, float sum_g,
    float dot_gx) {
  const float m = static_cast<float>(s.n * s.spatial);
  const float a = sum_g / m;
  const float b = dot_gx / m;
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t k = 0; k < s.spatial; ++k) {
      const int64_t i = norm_internal::ChannelIndex(s, c, n, k);
      dx[i] = BatchNormGradInputOf(x[i], dy[i], gamma[c], st, a, b);
    }
  }
}

LS_HD_INLINE void BatchNormGradInputChannel(const ChannelShape& s,
                                            const float* x, const float* gamma,
                                            const float* dy,
                                            const float* running, float* dx,
                                            int64_t c) {
  const BatchNormChannelStats st = BatchNormStatsOf(s, x, running, c);
  if (s.eval) {
    BatchNormGradInputEvalChannel(s, gamma, dy, dx, c, st);
    return;
  }
  GatherChain sum_g;
  GatherChain dot_gx;
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t k = 0; k < s.spatial; ++k) {
      const int64_t i = norm_internal::ChannelIndex(s, c, n, k);
      const float g = dy[i] * gamma[c];
      sum_g.Add(g);
      dot_gx.Fma(g, (x[i] - st.mean) * st.rstd);
    }
  }
  BatchNormGradInputApplyChannel(s, x, gamma, dy, dx, c, st, sum_g.Finish(),
                                 dot_gx.Finish());
}

LS_HD_INLINE void BatchNormGradParamsChannel(const ChannelShape& s,
                                             const float* x, const float* dy,
                                             const float* running,
                                             float* dgamma, float* dbeta,
                                             int64_t c) {
  const BatchNormChannelStats st = BatchNormStatsOf(s, x, running, c);
  GatherChain dg;
  GatherChain db;
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t k = 0; k < s.spatial; ++k) {
      const int64_t i = norm_internal::ChannelIndex(s, c, n, k);
      dg.Fma(dy[i], (x[i] - st.mean) * st.rstd);
      db.Add(dy[i]);
    }
  }
  dgamma[c] = norm_internal::CanonicalNanOf(dg.Finish());
  dbeta[c] = norm_internal::CanonicalNanOf(db.Finish());
}

LS_HD_INLINE void BatchNormForward(const ChannelShape& s, const float* x,
                                   const float* gamma, const float* beta,
                                   float* y, float* running) {
  for (int64_t c = 0; c < s.c; ++c) {
    BatchNormForwardChannel(s, x, gamma, beta, y, running, c);
  }
}

LS_HD_INLINE void BatchNormGradInput(const ChannelShape& s, const float* x,
                                     const float* gamma, const float* dy,
                                     const float* running, float* dx) {
  for (int64_t c = 0; c < s.c; ++c) {
    BatchNormGradInputChannel(s, x, gamma, dy, running, dx, c);
  }
}

LS_HD_INLINE void BatchNormGradParams(const ChannelShape& s, const float* x,
                                      const float* dy, const float* running,
                                      float* dgamma, float* dbeta) {
  for (int64_t c = 0; c < s.c; ++c) {
    BatchNormGradParamsChannel(s, x, dy, running, dgamma, dbeta, c);
  }
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_OPS_NORM_H_
