// CANONICAL bias_add.grad, batch_norm's channel reductions, the pooling
// ops (max_pool2d, avg_pool2d, global_avg_pool; forward and backward),
// resize_bilinear, softmax's and layer_norm's row and column reductions,
// GELU, sigmoid, tanh, silu and grad_norm.sum_squares, vectorised ACROSS
// outputs, the way
// the GEMM is (gemm.h): each vector lane computes a different output element
// and runs that element's canonical sequence of operations unchanged, so the
// bits equal the scalar spec code (canonical::BiasAddGrad, the spatial::
// *Pool2d* loops of kernels/spatial/pool2d.h) for every ISA and thread count.
//
//   bias_add.grad   lanes = channels. Each lane adds its channel's terms in
//                   the canonical (n, spatial) order: chunks of 256 from
//                   +0.0f, then the pairwise tree (kernels/canonical/
//                   reduce.h), elementwise over the lanes (the chunking
//                   depends on the term count alone). With spatial == 1 a
//                   batch row holds one term of every channel; with
//                   spatial > 1 a channel's terms are contiguous, and blocks
//                   of lanes x lanes terms are transposed in registers.
//   batch_norm      lanes = channels, walked as bias_add.grad's with x and
//                   dy side by side: the variance's dot of (x - mean) with
//                   itself, and the backward passes' sum of g = dy * scale
//                   with the dot of (g, xhat), each lane one chain of fmas
//                   or adds per chunk of 256, then the tree. The channels
//                   past the last full block run as one partial block. In
//                   training mode one task runs every pass of its block of
//                   channels, the elementwise ones (y, and dx from the
//                   reductions) included, lanes = neighbouring elements of
//                   a channel's run there.
//   max_pool2d      lanes = image planes (n, c): a block of planes is
//                   interleaved (transposed in registers), so every lane has
//                   the same window geometry and each tap is one vector
//                   load. Each lane visits its window's real taps in
//                   (kh, kw) order with the spec's rule (a later tap wins
//                   only if strictly greater; the first NaN wins).
//   resize_bilinear  lanes = image planes, interleaved as for max_pool2d:
//                   forward's four fmas per output, and grad's gather chain
//                   per dx element (the outputs that read it in row-major
//                   order, their taps in (a, b) order, chunks of 256 terms
//                   and the tree), the geometry's branches taken once for
//                   every lane. gauntlet's grad 0.20 -> 0.013 ms.
//   max_pool2d.grad each window's winner is found once (as above), then the
//                   windows are walked in (oh, ow) order adding dy into
//                   dx[winner]: every dx element receives its terms in the
//                   canonical order as one chain from +0.0f, which is the
//                   canonical sum while no element can be covered by more
//                   than 256 windows (otherwise the spec loop runs).
//   avg_pool2d      lanes = image planes, interleaved as for max_pool2d.
//                   Each lane adds its window's real taps in (kh, kw) order
//                   from +0.0f (chunks of 256 and the tree for windows of
//                   more than 256 taps), then divides once by the window's
//                   divisor (KH * KW, or the real-tap count without
//                   count_include_pad).
//   avg_pool2d.grad each window's term dy / divisor is computed once and the
//                   windows are walked in (oh, ow) order adding it into every
//                   real tap's dx: one chain from +0.0f per dx element in the
//                   canonical order, under the same 256-window condition as
//                   max_pool2d.grad.
//   global_avg_pool lanes = image planes: bias_add.grad's sum with one batch
//                   row (a plane's H * W terms in (h, w) order, chunks of 256
//                   and the tree; W x W blocks transposed in registers), then
//                   one division by float(H * W).
//   global_avg_pool.grad  dx plane p is the one quotient dy[p] / float(H * W)
//                   stored H * W times.
//   softmax         lanes = rows for the row reductions (the max, the
//                   exps' sum, grad's dot of (y, dy)), blocks of rows x
//                   lanes transposed in registers as for bias_add.grad;
//                   each lane keeps its row's own length (causal rows) and
//                   its chain skips the terms past it. The exps and the
//                   elementwise outputs in row layout. softmax_xent takes
//                   its rows' max and sum from the same kernel.
//   layer_norm      the row statistics and grad_input's row sums and dots
//                   are batch_norm's chains with the rows as channels of a
//                   [1, rows, d] image; grad_params' column chains are
//                   batch_norm's with the columns as channels of a
//                   [rows, d, 1] batch, over xhat (formed once per element)
//                   and dy; the elementwise passes (y, g = dy * gamma, dx,
//                   xhat) lanes = neighbouring elements of a row.
//   gelu            each lane one element, the whole of the spec's
//                   expression around the vector erf and exp.
//   sigmoid, tanh, silu, gelu (tanh form)  each lane one element, the
//                   spec's expression around the vector exp and a vector
//                   tanh (CanonicalTanh's polynomial and exp branches both
//                   computed, each lane's selected). 8-12x the scalar loop
//                   (norm_mlp's step 0.22 -> 0.13 ms, docs/benchmarks.md).
//   Philox bits     lanes = Philox4x32-10 blocks (PhiloxBitsLanes): 16 or 8
//                   consecutive counters per vector, ten rounds on the
//                   vector's 32-bit lanes, the words transposed back into
//                   index order; dropout.forward's masks and the synthetic
//                   dataset's noise take their bits from it, and turn them
//                   into floats on the vector too (DropoutApplyLanes,
//                   UniformFmaLanes: the bits' top 24 as exact floats).
//   grad_norm.sum_squares  lanes = chunks: the tensor's full chunks of 256
//                   as the channels of a [1, chunks, 256] batch, each lane
//                   one chunk's fma chain (batch_norm's walk, blocks
//                   transposed in registers); the short last chunk and the
//                   tree on the calling thread. A single chain per chunk
//                   waits on each fma's latency; side by side the chunks run
//                   about 10x faster in cache (0.85 -> 0.32 ms of
//                   gpt_tiny's 8 ms step, docs/benchmarks.md).
//
// Each ISA (isa.h) has its own translation unit built with its own -m flags
// (lane_kernels_{scalar,avx2,avx512}.cc, sharing lane_kernels_impl.h); the
// functions below pick one at run time. The pool splits outputs (channel
// ranges, blocks of planes), never a reduction.
//
// Preconditions: shapes validated (kernels/ops/validate.h,
// kernels/spatial/validate.h), pointers hold the sizes the shapes imply,
// outputs do not overlap inputs. Thread-safety: reentrant; concurrent calls
// must not share outputs.
#ifndef LOCKSTEP_KERNELS_CPU_LANE_KERNELS_H_
#define LOCKSTEP_KERNELS_CPU_LANE_KERNELS_H_

#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ops/dropout.h"
#include "kernels/ops/elementwise.h"
#include "kernels/spatial/pool2d.h"
#include "kernels/spatial/resize_bilinear.h"

namespace lockstep::canonical {
struct AdamScalars;  // kernels/ops/optimizers.h
}  // namespace lockstep::canonical

namespace lockstep::kernels {

// db[c] = canonical sum over (n, i) of dy[(n * C + c) * S + i].
void BiasAddGradLanes(const canonical::BiasShape& s, const float* dy, float* db,
                      CpuIsa isa, ThreadPool* pool);

// y = max_pool2d(x).
void MaxPool2dForwardLanes(const spatial::Pool2dShape& s, const float* x,
                           float* y, CpuIsa isa, ThreadPool* pool);

// dx = max_pool2d.grad(x, dy); x is the forward input.
void MaxPool2dGradLanes(const spatial::Pool2dShape& s, const float* x,
                        const float* dy, float* dx, CpuIsa isa,
                        ThreadPool* pool);

// y = avg_pool2d(x).
void AvgPool2dForwardLanes(const spatial::Pool2dShape& s, const float* x,
                           float* y, CpuIsa isa, ThreadPool* pool);

// dx = avg_pool2d.grad(dy).
void AvgPool2dGradLanes(const spatial::Pool2dShape& s, const float* dy,
                        float* dx, CpuIsa isa, ThreadPool* pool);

// y = global_avg_pool(x).
void GlobalAvgPool2dForwardLanes(const spatial::GlobalPool2dShape& s,
                                 const float* x, float* y, CpuIsa isa,
                                 ThreadPool* pool);

// dx = global_avg_pool.grad(dy).
void GlobalAvgPool2dGradLanes(const spatial::GlobalPool2dShape& s,
                              const float* dy, float* dx, CpuIsa isa,
                              ThreadPool* pool);

// batch_norm's per-channel reductions in training mode (kernels/ops/norm.h),
// over x and dy of shape [n, c, spatial] in the canonical (n, spatial)
// order, lanes = channels (bias_add.grad's walk, W x W blocks transposed in
// registers); the channel sums themselves are BiasAddGradLanes.
//   var_sum[ch] = canonical dot of (d, d), d = x - mean[ch]
void BatchNormVarSumLanes(const canonical::BiasShape& s, const float* x,
                          const float* mean, float* var_sum, CpuIsa isa,
                          ThreadPool* pool);
//   g = dy * scale[ch] (dy itself when scale is null),
//   xhat = (x - mean[ch]) * rstd[ch]:
//   dot[ch] = canonical dot of (g, xhat), sum[ch] = canonical sum of g
void BatchNormGradChainsLanes(const canonical::BiasShape& s, const float* x,
                              const float* dy, const float* mean,
                              const float* rstd, const float* scale, float* dot,
                              float* sum, CpuIsa isa, ThreadPool* pool);

// batch_norm in training mode over x (and dy) of shape [n, c, spatial],
// every pass over one block of channels (the lanes of one vector) in one
// task, so that the block's data stays in cache from one pass to the next;
// the blocks run on the pool. Per block, each pass with the spec's
// operations in the spec's order (kernels/ops/norm.h):
//   the channel sums (bias_add.grad's walk) into mean[], then
//   math(kMean) (which turns them into the means); the variances' dots into
//   var_sum[], then math(kStats) (which sets rstd[]); then
//   kForward    y = ((x - mean) * rstd) * gamma + beta
//   kGradInput  dot[] and sum[] = the dot of (g, xhat) and the sum of g,
//               g = dy * gamma, xhat = (x - mean) * rstd; math(kChains)
//               (which turns them into b = dot / m and a = sum / m); then
//               dx = ((g - a) - xhat * b) * rstd
//   kGradParams dot[] and sum[] likewise with g = dy; math(kChains).
//   kGradBoth   kGradInput, whose walk over x and dy also forms kGradParams'
//               dot and sum, into param_dot[] and param_sum[] (before
//               math(kChains), which sees kGradInput's): batch_norm's two
//               gradients from one read of x and dy for their sums, each
//               chain with its own operations in its own order, so each
//               result has the bits of its own pass.
// With stats_given (the grad passes only), mean[] and rstd[] already hold
// the batch statistics of x (what kForward computed from the same x): the
// channel sums, the variances' dots, math(kMean) and math(kStats) are
// skipped, and the results keep their bits.
// NaN results of y and dx are the canonical NaN. math runs the caller's
// scalar arithmetic on the block's channels [c0, c0 + count), on the
// task's thread; mean, var_sum, rstd, dot, sum, param_dot and param_sum
// hold c floats each.
enum class BatchNormLanePass { kForward, kGradInput, kGradParams, kGradBoth };
enum class BatchNormLaneStep { kMean, kStats, kChains };
struct BatchNormLaneArgs {
  BatchNormLanePass pass;
  const float* x;
  const float* dy;     // the grad passes
  const float* gamma;  // kForward, kGradInput, kGradBoth
  const float* beta;   // kForward
  float* out;          // y or dx
  float* mean;
  float* var_sum;
  float* rstd;
  float* dot;
  float* sum;
  void (*math)(void* ctx, BatchNormLaneStep step, int64_t c0, int64_t count);
  void* ctx;
  bool stats_given = false;    // the grad passes
  float* param_dot = nullptr;  // kGradBoth
  float* param_sum = nullptr;  // kGradBoth
  bool stream_out = false;     // out with non-temporal stores (StreamOutput)
};
void BatchNormTrainingLanes(const canonical::BiasShape& s,
                            const BatchNormLaneArgs& args, CpuIsa isa,
                            ThreadPool* pool);

// y[i] = canonical::CanonicalExp(x[i]) (kernels/math/portable_math.h) for
// i < n, vectorised with the spec's operations in the spec's order; y may
// be x. On the calling thread.
void CanonicalExpLanes(const float* x, float* y, int64_t n, CpuIsa isa);
// y[i] = canonical::CanonicalErf(x[i]) likewise.
void CanonicalErfLanes(const float* x, float* y, int64_t n, CpuIsa isa);
// gelu.forward (y may be x) and gelu.grad (dx may be dy) over n elements,
// kernels/ops/activations.h's GeluFromErf and GeluGradFrom around the
// vector erf and exp, every operation of the spec in its order on each
// lane, so the spec's bits. On the calling thread.
void GeluLanes(const float* x, float* y, int64_t n, CpuIsa isa);
void GeluGradLanes(const float* x, const float* dy, float* dx, int64_t n,
                   CpuIsa isa);

// sigmoid, tanh, silu and gelu (tanh form): forward (y may be x) and grad
// (dx may be dy) over n elements, kernels/ops/activations.h's
// ActivationForwardElement / ActivationGradElement with every operation
// of the spec in its order on each lane, around a vector CanonicalExp and
// a vector CanonicalTanh (both branches of its split on every lane, the
// lane's own selected), so the spec's bits. `kind` is any activation
// (gelu: GeluLanes). On the calling thread.
enum class LaneActivation { kSigmoid, kTanh, kSilu, kGeluTanh };
void ActivationLanes(LaneActivation kind, const float* x, float* y, int64_t n,
                     CpuIsa isa);
void ActivationGradLanes(LaneActivation kind, const float* x, const float* dy,
                         float* dx, int64_t n, CpuIsa isa);
// softmax.forward (dy null) and softmax.grad over the last axis of
// [rows, d] (causal: row r's first r mod d + 1 entries), kernels/ops/
// norm.h's bits; the row reductions with lanes = rows. out must not
// overlap x or dy. Returns false, doing nothing, where `isa` has no such
// kernel (the scalar ISA: the caller runs the spec's rows).
bool SoftmaxLanes(const float* x, const float* dy, float* out, int64_t rows,
                  int64_t d, bool causal, CpuIsa isa, ThreadPool* pool);
// softmax.grad from the forward's y (softmax of the same x) instead of x:
// dx with SoftmaxLanes' bits, without recomputing y. dx must not overlap y
// or dy. Returns false, doing nothing, where `isa` has no such kernel.
bool SoftmaxGradFromYLanes(const float* y, const float* dy, float* dx,
                           int64_t rows, int64_t d, bool causal, CpuIsa isa,
                           ThreadPool* pool);
// softmax_xent's row statistics (kernels/ops/softmax_xent.h's
// SoftmaxRowExpsOnce) for every row of [rows, d]: exps[r, j] =
// CanonicalExp(x[r, j] - max[r]), max[r] the row's max (a later entry wins
// only if strictly greater), sum[r] the canonical sum of the row's exps;
// lanes = rows, as SoftmaxLanes. exps must not overlap x. Returns false,
// doing nothing, where `isa` has no such kernel.
bool SoftmaxRowStatsLanes(const float* x, float* exps, float* max, float* sum,
                          int64_t rows, int64_t d, CpuIsa isa,
                          ThreadPool* pool);
enum class LayerNormRowsPass { kApply, kScaleDy, kGradApply, kXhat };
struct LayerNormRowsArgs {
  LayerNormRowsPass pass;
  int64_t rows, d;
  const float* x;
  const float* dy;
  const float* gamma;
  const float* beta;
  const float* mean;  // per row
  const float* rstd;  // per row
  const float* a;     // per row: sum_g / d (kGradApply)
  const float* b;     // per row: dot_gx / d (kGradApply)
  float* out;
  float nan;
};
// layer_norm's elementwise passes over x (and dy) of shape [rows, d],
// kernels/ops/norm.h's operations in its order, vectorised along the rows
// (the scalar ISA: one element at a time, the same code), rows spread over
// the pool; mean, rstd (and a, b) hold one float per row:
//   kApply      out = y = CanonicalNan(((x - mean) * rstd) * gamma + beta)
//               (LayerNormApplyRow)
//   kScaleDy    out = g = dy * gamma
//   kGradApply  out = dx (LayerNormGradInputApplyRow, a = sum_g / d,
//               b = dot_gx / d)
//   kXhat       out = (x - mean) * rstd (LayerNormXhat)
// out must not overlap the inputs.
void LayerNormRowsLanes(const LayerNormRowsArgs& args, CpuIsa isa,
                        ThreadPool* pool);

// adam.update and adamw.update over n elements (canonical::AdamUpdate's
// operations in its order, one element per lane; w, m, v updated in
// place). On the calling thread.
void AdamLanes(const canonical::AdamScalars& s, float* w, float* m, float* v,
               const float* g, int64_t n, CpuIsa isa);

// grad_norm.sum_squares: the canonical dot of (g, g) over n elements in
// index order (canonical::CanonicalDot(g, 1, g, 1, n), same bits): the
// full chunks' chains side by side, one per lane (and spread over the pool
// when large), the last short chunk on the calling thread, then the tree
// in chunk order.
float SumSquaresLanes(const float* g, int64_t n, CpuIsa isa, ThreadPool* pool);

// resize_bilinear.forward (y from x) and .grad (dx from dy) over
// [n, c, h, w] planes, lanes = planes (blocks of planes interleaved, as
// for the pools), each lane the spec's operations in its order
// (kernels/spatial/resize_bilinear.h), so the spec's bits. `rows`, `cols`:
// spatial::BilinearAxis of every output row and column; `row_first`,
// `col_first`: per input row and column, the first output whose tap i0 >=
// that coordinate - 1.
void ResizeBilinearLanes(const spatial::ResizeBilinearShape& s,
                         const spatial::BilinearAxisTaps* rows,
                         const spatial::BilinearAxisTaps* cols,
                         const int64_t* row_first, const int64_t* col_first,
                         const float* in, float* out, bool grad, CpuIsa isa,
                         ThreadPool* pool);

// out[k] = canonical::PhiloxBits(seed, stream, begin + k) for k < count
// (kernels/random/philox.h): the Philox4x32-10 blocks of the range 16
// (AVX-512) or 8 (AVX2) at a time, one per lane, the partial blocks at
// either end as the scalar code computes them. The same bits on every
// ISA. REQUIRES: begin + count does not overflow. On the calling thread.
void PhiloxBitsLanes(uint64_t seed, uint64_t stream, uint64_t begin,
                     int64_t count, uint32_t* out, CpuIsa isa);

// dropout.forward from the elements' Philox bits (kernels/ops/dropout.h):
// mask[i] = DropoutMaskOfBits(p, bits[i]) (p.scale where bits[i] >> 8 >=
// p.threshold, else 0; the threshold is below 2^24) and y[i] = x[i] *
// mask[i]. On the calling thread; the same bits on every ISA.
void DropoutApplyLanes(const canonical::DropoutParams& p, const uint32_t* bits,
                       const float* x, float* y, float* mask, int64_t n,
                       CpuIsa isa);

// out[i] = fma(scale, canonical::BitsToUniform(bits[i], a, b), add[i])
// (kernels/random/philox.h; a < b finite): the synthetic dataset's inputs
// from their noise bits. On the calling thread; the same bits on every
// ISA.
void UniformFmaLanes(const uint32_t* bits, float a, float b, float scale,
                     const float* add, float* out, int64_t n, CpuIsa isa);

// An output of at least this many floats (4 MiB), not also one of its
// op's inputs, is written with non-temporal stores: larger than a core's
// L2, it is evicted before anything reads it again, and an ordinary store
// first reads each line from memory. Measured on the Xeon of
// docs/benchmarks.md, 8 MiB, operands cold: relu.forward 1.19 -> 0.92 ms,
// and with a read of y after it 1.71 -> 1.52 ms. Which store writes a
// value changes no bit. Used by relu.forward / relu.grad, add.forward
// (cpu_backend.cc), batch norm's y and dx, a strided grad_input's merge,
// and the indirect convolutions' staged GEMM write-back
// (GemmPacking::stream_c; conv_gemm.cc).
inline constexpr int64_t kStreamOutputFloats = int64_t{1} << 20;

// Whether a pass writes its output of n floats at `out`, not also one of
// its inputs `in0` / `in1` (either may be null), with non-temporal stores:
// n at least kStreamOutputFloats, or the size a test set.
bool StreamOutput(int64_t n, const float* out, const float* in0,
                  const float* in1);

// relu.forward (y may be x) and relu.grad over n elements, the spec's bits,
// on `isa`'s vectors; with `stream`, non-temporal stores for y / dx (the
// caller decides for the whole tensor: kStreamOutputFloats). On the
// calling thread.
void ReluLanes(const float* x, float* y, int64_t n, CpuIsa isa,
               bool stream = false);
void ReluGradLanes(const float* x, const float* dy, float* dx, int64_t n,
                   CpuIsa isa, bool stream = false);

namespace cpu_internal {

// Tests only: StreamOutput's threshold in floats (0: kStreamOutputFloats;
// 1 streams every output). Not for concurrent use with kernel calls.
void SetStreamOutputFloatsForTesting(int64_t floats);

// Plain geometry handed to the ISA translation units (computed outside
// them, so that they call no inline function of a shared header).
struct LaneBiasGeometry {
  int64_t n, c, spatial;
};
// resize_bilinear over `planes` planes: the taps of every output row and
// column (spatial::BilinearAxis) and, per input row and column, the first
// output that can read it.
struct LaneResizeGeometry {
  int64_t planes;  // N * C
  int64_t in_h, in_w, out_h, out_w;
  const spatial::BilinearAxisTaps* rows;  // [out_h]
  const spatial::BilinearAxisTaps* cols;  // [out_w]
  const int64_t* row_first;               // [in_h]
  const int64_t* col_first;               // [in_w]
};
struct LanePoolGeometry {
  int64_t planes;  // N * C
  int64_t h, w, k_h, k_w, stride_h, stride_w, pad_top, pad_left;
  int64_t out_h, out_w;
  bool count_include_pad;  // avg_pool2d's divisor rule
};
struct LaneGlobalGeometry {
  int64_t planes;  // N * C
  int64_t area;    // H * W
};
// softmax over the last axis of [rows, d] (kernels/ops/norm.h): y = softmax
// (dy null) or dx = softmax.grad; out must not overlap x or dy.
// With row_max and row_sum set: the rows' statistics only (out = the exps,
// row_max / row_sum = each row's max and canonical sum of exps). With
// x_is_y: softmax.grad from x = the forward's y (not recomputed).
struct LaneSoftmaxArgs {
  const float* x;
  const float* dy;
  float* out;
  int64_t rows, d;
  bool causal;
  float nan;
  float* row_max = nullptr;
  float* row_sum = nullptr;
  bool x_is_y = false;
};
// adam.update's per-call scalars (canonical::AdamScalars).
struct LaneAdamScalars {
  float lr, beta1, beta2, eps, c1, c2, bc1, bc2, decay;
  bool decoupled;
};

// GELU's constants (kernels/ops/activations.h) and the canonical NaN.
struct LaneGeluConstants {
  float inv_sqrt2;
  float inv_sqrt2pi;
  float nan;
};

// UniformFmaLanes' constants: the range [a, b), the largest float below b,
// the fma's scale.
struct LaneUniformArgs {
  float a, b, below_b, scale;
};

// The tanh-form GELU's constants (kernels/ops/activations.h) and the
// canonical NaN.
struct LaneActivationConstants {
  float sqrt2_over_pi;
  float cubic;
  float cubic3;
  float nan;
};

// One set per ISA translation unit; call only when the ISA is supported.
struct LaneKernelSet {
  void (*bias_grad)(const LaneBiasGeometry& g, const float* dy, float* db,
                    ThreadPool* pool);
  void (*max_pool_forward)(const LanePoolGeometry& g, const float* x, float* y,
                           ThreadPool* pool);
  // Require h * w < 2^31; max_pool_grad also at most 256 windows covering
  // any element.
  void (*max_pool_grad)(const LanePoolGeometry& g, const float* x,
                        const float* dy, float* dx, ThreadPool* pool);
  void (*avg_pool_forward)(const LanePoolGeometry& g, const float* x, float* y,
                           ThreadPool* pool);
  // Requires at most 256 windows covering any element.
  void (*avg_pool_grad)(const LanePoolGeometry& g, const float* dy, float* dx,
                        ThreadPool* pool);
  void (*global_pool_forward)(const LaneGlobalGeometry& g, const float* x,
                              float* y, ThreadPool* pool);
  void (*global_pool_grad)(const LaneGlobalGeometry& g, const float* dy,
                           float* dx, ThreadPool* pool);
  void (*batch_norm_var_sum)(const LaneBiasGeometry& g, const float* x,
                             const float* mean, float* var_sum,
                             ThreadPool* pool);
  void (*batch_norm_grad_chains)(const LaneBiasGeometry& g, const float* x,
                                 const float* dy, const float* mean,
                                 const float* rstd, const float* scale,
                                 float* dot, float* sum, ThreadPool* pool);
  // `nan` is the canonical NaN every NaN result becomes.
  void (*batch_norm_training)(const LaneBiasGeometry& g,
                              const BatchNormLaneArgs& args, float nan,
                              ThreadPool* pool);
  // Null for the scalar set (the caller runs canonical::CanonicalExp and
  // CanonicalErf).
  void (*exp)(const float* x, float* y, int64_t n);
  void (*erf)(const float* x, float* y, int64_t n);
  // gelu.forward and gelu.grad; null for the scalar set (the caller runs
  // the spec's loops).
  void (*gelu)(const float* x, float* y, int64_t n, const LaneGeluConstants& k);
  void (*gelu_grad)(const float* x, const float* dy, float* dx, int64_t n,
                    const LaneGeluConstants& k);
  // softmax.forward and .grad; null for the scalar set.
  void (*softmax)(const LaneSoftmaxArgs& a, ThreadPool* pool);
  void (*layer_norm_rows)(const LayerNormRowsArgs& a, ThreadPool* pool);
  void (*adam)(const LaneAdamScalars& s, float* w, float* m, float* v,
               const float* g, int64_t n);
  // relu.forward's and relu.grad's loops (kernels/ops/elementwise.h).
  void (*relu)(const float* x, float* y, int64_t n, bool stream);
  void (*relu_grad)(const float* x, const float* dy, float* dx, int64_t n,
                    bool stream);
  // partials[k] = chain of fma(x[i], x[i], acc) from +0.0f over the chunk
  // i in [k * 256, (k + 1) * 256), for k < chunks.
  void (*square_chunks)(const float* x, int64_t chunks, float* partials,
                        ThreadPool* pool);
  // ActivationLanes / ActivationGradLanes; null for the scalar set (the
  // caller runs the spec's loops).
  void (*activation)(LaneActivation kind, const float* x, float* y, int64_t n,
                     const LaneActivationConstants& k);
  void (*activation_grad)(LaneActivation kind, const float* x, const float* dy,
                          float* dx, int64_t n,
                          const LaneActivationConstants& k);
  // Philox4x32-10 blocks first .. first + blocks - 1 of `stream` under
  // `seed`, out[4 * b + w] = word w of block first + b, a vector of blocks
  // at a time; returns how many it wrote (a multiple of the width; it
  // stops early before a group whose counters' low words would wrap).
  // Null for the scalar set.
  int64_t (*philox_blocks)(uint64_t seed, uint64_t stream, uint64_t first,
                           int64_t blocks, uint32_t* out);
  // resize_bilinear.forward (grad false: in = x, out = y) and .grad (true:
  // in = dy, out = dx).
  void (*resize_bilinear)(const LaneResizeGeometry& g, const float* in,
                          float* out, bool grad, ThreadPool* pool);
  // DropoutApplyLanes and UniformFmaLanes; null for the scalar set.
  void (*dropout)(const uint32_t* bits, uint32_t threshold, float scale,
                  const float* x, float* y, float* mask, int64_t n);
  void (*uniform_fma)(const uint32_t* bits, const LaneUniformArgs& k,
                      const float* add, float* out, int64_t n);
};
const LaneKernelSet& LaneKernelsScalar();
const LaneKernelSet& LaneKernelsAvx2();
const LaneKernelSet& LaneKernelsAvx512();

}  // namespace cpu_internal
}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_CPU_LANE_KERNELS_H_
