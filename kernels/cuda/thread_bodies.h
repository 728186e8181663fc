// Per-thread bodies of the CANONICAL CUDA kernels.
//
// Every op is written as an LS_HD function
//
//   XxxThread(shape, <pointers>, int64_t thread, int64_t num_threads)
//
// that walks the op's outputs grid-stride (thread, thread + num_threads, ...)
// and computes each one with the op's existing element function from
// kernels/ops/ or kernels/spatial/. A CUDA kernel is a thin __global__
// wrapper that passes thread = blockIdx.x * blockDim.x + threadIdx.x and
// num_threads = gridDim.x * blockDim.x (canonical_kernels.cu); the host
// emulation (emulation.h) calls the same bodies for every thread id of a
// launch configuration. Because each output is a pure function of the
// inputs, any partition of the outputs over threads gives the CPU backend's
// bits: no atomics, no shared accumulators, no cross-thread reductions.
//
// KernelParams carries one launch: which body, how many work items, the
// (device or host) buffers and the op's shape. RunThread dispatches on it.
//
// Thread-safety: pure functions; threads write disjoint outputs.
#ifndef LOCKSTEP_KERNELS_CUDA_THREAD_BODIES_H_
#define LOCKSTEP_KERNELS_CUDA_THREAD_BODIES_H_

#include <cstdint>

#include "kernels/canonical/hd.h"
#include "kernels/canonical/reduce.h"
#include "kernels/ops/activations.h"
#include "kernels/ops/dense.h"
#include "kernels/ops/dropout.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/graph_data.h"
#include "kernels/ops/graph_elementwise.h"
#include "kernels/ops/matmul.h"
#include "kernels/ops/movement.h"
#include "kernels/ops/norm.h"
#include "kernels/ops/optimizers.h"
#include "kernels/ops/softmax_xent.h"
#include "kernels/spatial/conv2d.h"
#include "kernels/spatial/pool2d.h"
#include "kernels/spatial/resize_bilinear.h"

namespace lockstep::kernels::cuda {

namespace c = ::lockstep::canonical;
namespace sp = ::lockstep::spatial;

// One kind of launch. Some ops take two launches (softmax_xent: per-row or
// per-example work, then a second pass).
enum class DeviceOp : int32_t {
  kMatMul = 0,            // in {a, b}, out {c}; work rows * cols
  kBiasAdd,               // in {x, b}, out {y}; work numel
  kBiasAddGrad,           // in {dy}, out {db}; work C
  kRelu,                  // in {x}, out {y}; work numel
  kReluGrad,              // in {x, dy}, out {dx}; work numel
  kAdd,                   // in {a, b}, out {y}; work numel
  kCopyWords,             // in {x}, out {y}; work numel of 4-byte words
  kCopyBytes,             // in {x}, out {y}; work bytes
  kSoftmaxExampleLoss,    // in {logits, labels}, out {losses [N]}; work N
  kSoftmaxMeanLoss,       // in {losses [N]}, out {loss [1]}; work 1
  kSoftmaxRowStats,       // in {logits}, out {stats [N, 2]}; work N
  kSoftmaxGrad,           // in {logits, labels, stats}, out {dlogits}
  kSgd,                   // in {g}, out {w (in place)}; work numel
  kMomentum,              // in {g}, out {w, v (in place)}
  kAdam,                  // in {g}, out {w, m, v (in place)}
  kConv2dForward,         // in {x, w}, out {y}
  kConv2dGradInput,       // in {dy, w}, out {dx}
  kConv2dGradWeight,      // in {x, dy}, out {dw}
  kMaxPool2dForward,      // in {x}, out {y}
  kMaxPool2dGrad,         // in {x, dy}, out {dx}
  kAvgPool2dForward,      // in {x}, out {y}
  kAvgPool2dGrad,         // in {dy}, out {dx}
  kGlobalAvgPoolForward,  // in {x}, out {y}
  kGlobalAvgPoolGrad,     // in {dy}, out {dx}
  kResizeForward,         // in {x}, out {y}
  kResizeGrad,            // in {dy}, out {dx}
  kActivation,            // in {x}, out {y}; work numel
  kActivationGrad,        // in {x, dy}, out {dx}; work numel
  kSoftmaxLast,           // in {x}, out {y}; work rows (one row per item)
  kSoftmaxLastGrad,       // in {x, dy}, out {dx}; work rows
  kLayerNorm,             // in {x, gamma, beta}, out {y}; work rows
  kLayerNormGradInput,    // in {x, gamma, dy}, out {dx}; work rows
  kLayerNormStats,        // in {x}, out {stats [rows, 2]}; work rows
  kLayerNormGradParams,   // in {x, dy, stats}, out {dgamma, dbeta}; work D
  kBatchNorm,             // in {x, gamma, beta}, out {y, running}; work C
  kBatchNormGradInput,    // in {x, gamma, dy, running}, out {dx}; work C
  kBatchNormGradParams,   // in {x, dy, running}, out {dgamma, dbeta}; work C
  kSumSquares,            // in {g}, out {s [1]}; work 1 (one reduction)
  kScale,                 // in {g}, out {y}; work numel
  kEmbedding,             // in {ids, w}, out {y}; work numel of y
  kEmbeddingGrad,         // in {offsets, order, dy}, out {dw}; work V * D
  kDropout,               // in {x}, out {y, mask}; work numel
  kDropoutGrad,           // in {mask, dy}, out {dx}; work numel
  kBatchedMatMul,         // in {a, b}, out {c}; work batch * rows * cols
  kTranspose,             // in {x}, out {y}; work numel
  // Graph primitives of op set v3 (shape in KernelParams::graph).
  kGather,           // in {x, ids}, out {y}; work numel of y
  kGatherGrad,       // in {offsets, order, dy}, out {dx}; work numel of dx
  kSliceGrad,        // in {source [V], dy}, out {dx}; work numel of dx
  kBlockCopy,        // in {src}, out {dst}; work rows * width (words)
  kBinary,           // in {a, b}, out {y}; work numel of y
  kCompare,          // in {a, b}, out {y}; work numel of y
  kWhere,            // in {cond, a, b}, out {y}; work numel of y
  kBinaryGradTerms,  // in {a, b, dy}, out {ta, tb}; work numel of dy
  kWhereGradTerms,   // in {cond, dy}, out {ta, tb}; work numel of dy
  kUnary,            // in {x}, out {y}; work numel
  kUnaryGrad,        // in {x, dy}, out {dx}; work numel
  kSumTo,            // in {t, out_base, term_offset}, out {x}; work numel of x
  kReduceGrad,       // in {dy}, out {dx}; work numel of dx
  // Block-level, not a per-thread body: the tiled GEMM of tiled_gemm.h
  // (shape in batched_matmul; out[1] the tree scratch, or none).
  kTiledMatMul,          // in {a, b}, out {c, scratch}; work tiles
  kConv2dIm2Col,         // in {x}, out {col}; work N * K * P (conv2d forward's
                         // lowered matrix, groups == 1, for kTiledMatMul)
  kConv2dGradInputCol,   // in {dy}, out {col}; work N * C_out KH KW * H W
  kConv2dGradWeightCol,  // in {x}, out {col}; work K * N * P
  kTreeSumParts,         // in {parts [tree_parts, work]}, out {y}; work
                         // outputs (tree_nan: each y canonical-NaN'd)
  // Training-mode batch norm with every channel's reductions split into
  // their canonical chunks (BnChunksThread; the chunks' sums are combined
  // by kTreeSumParts into stats [4, C]: sum x, dot (d, d), then the two
  // gradient reductions).
  kBnChunks,                // in {x, stats, gamma | dy, dy}, out {parts}; work
                            // chunks * C (BnChunkMode in bn_mode)
  kBnOutput,                // in {x, gamma, beta, stats}, out {y}; work numel
  kBnRunning,               // in {stats}, out {running}; work C
  kBnGradInput,             // in {x, gamma, dy, stats}, out {dx}; work numel
  kSumSquaresChunks,        // in {g}, out {parts [chunks]}; work chunks
  kConv2dGradWeightChunks,  // in {x, dy}, out {parts [chunks, weights]};
                            // work chunks * weights
  kNumOps,
};

inline constexpr int kMaxKernelBuffers = 4;

// The shape of one graph-primitive launch.
struct GraphParams {
  c::BroadcastShape bcast;  // the elementwise ops, kReduceGrad (dy, dx)
  int kind = 0;             // BinaryKind / UnaryKind / CompareKind value
  c::GatherShape gather;    // kGather, kGatherGrad, kSliceGrad
  // kSumTo: x[j] = canonical sum of t[out_base[j] + term_offset[k]], k < n
  // (identity: x[j] = t[j]); MEAN divides by `count`.
  int64_t sum_n = 0;
  bool identity = false;
  bool mean = false;  // kSumTo, kReduceGrad
  float count = 1.0f;
  // kBlockCopy: dst[dst_off + r * dst_row + j] = src[src_off + r * src_row
  // + j] for r < rows, j < width.
  int64_t rows = 0, width = 0, src_row = 0, dst_row = 0, src_off = 0,
          dst_off = 0;
};

// Everything one launch needs, passed to the __global__ wrapper by value
// (trivially copyable, well under the 4 KiB parameter limit). Only the shape
// fields of `op` are read.
struct KernelParams {
  DeviceOp op = DeviceOp::kNumOps;
  int64_t work = 0;  // number of work items (outputs, rows, leaves)
  const void* in[kMaxKernelBuffers] = {nullptr, nullptr, nullptr, nullptr};
  void* out[kMaxKernelBuffers] = {nullptr, nullptr, nullptr, nullptr};
  c::MatMulShape matmul;
  c::BiasShape bias;
  c::SoftmaxShape softmax;
  c::AdamScalars adam = {};
  float learning_rate = 0.0f;  // sgd, momentum
  float momentum = 0.0f;       // momentum
  sp::Conv2dShape conv;
  sp::Pool2dShape pool;
  sp::GlobalPool2dShape global_pool;
  sp::ResizeBilinearShape resize;
  c::Activation activation = c::Activation::kSigmoid;
  c::RowShape rows;
  c::ChannelShape channels;
  float scale = 1.0f;  // kScale
  c::EmbeddingShape embedding;
  c::DropoutParams dropout;
  c::BatchedMatMulShape batched_matmul;
  c::TransposeShape transpose;
  GraphParams graph;
  int64_t tree_parts = 0;  // kTreeSumParts: partial sums per output
  bool tree_nan = false;   // kTreeSumParts: CanonicalNanOf each output
  int bn_mode = 0;         // kBnChunks: a BnChunkMode
  // kTiledMatMul: the tiled GEMM configuration that runs it (tiled_gemm.h,
  // WithGemmConfig; the planner sets kPlannedGemmConfig or
  // kFewTilesGemmConfig).
  int gemm_config = 0;
};

// ---- dense family ---------------------------------------------------------

// c[i * c_row + j * c_col] = MatMulElement(i, j) for outputs (i, j) in
// row-major order, partitioned grid-stride.
LS_HD_INLINE void MatMulThread(const c::MatMulShape& s, const float* a,
                               const float* b, float* out, int64_t thread,
                               int64_t num_threads) {
  const int64_t total = s.rows * s.cols;
  for (int64_t idx = thread; idx < total; idx += num_threads) {
    const int64_t i = idx / s.cols;
    const int64_t j = idx % s.cols;
    out[i * s.c_row + j * s.c_col] = c::MatMulElement(s, a, b, i, j);
  }
}

// The batched product (matmul.*): output (t, i, j) in row-major order.
LS_HD_INLINE void BatchedMatMulThread(const c::BatchedMatMulShape& s,
                                      const float* a, const float* b,
                                      float* out, int64_t thread,
                                      int64_t num_threads) {
  const int64_t per = s.m.rows * s.m.cols;
  const int64_t total = s.batch * per;
  for (int64_t idx = thread; idx < total; idx += num_threads) {
    const int64_t t = idx / per;
    const int64_t i = (idx % per) / s.m.cols;
    const int64_t j = idx % s.m.cols;
    out[c::BatchedMatMulOffset(s, t, i, j)] =
        c::BatchedMatMulElement(s, a, b, t, i, j);
  }
}

// transpose: y[o] = x[TransposeSource(o)], 32-bit words.
LS_HD_INLINE void TransposeThread(const c::TransposeShape& s, const uint32_t* x,
                                  uint32_t* y, int64_t thread,
                                  int64_t num_threads) {
  for (int64_t o = thread; o < s.numel; o += num_threads) {
    y[o] = x[c::TransposeSource(s, o)];
  }
}

LS_HD_INLINE void BiasAddThread(const c::BiasShape& s, const float* x,
                                const float* b, float* y, int64_t thread,
                                int64_t num_threads) {
  const int64_t total = s.n * s.c * s.spatial;
  for (int64_t i = thread; i < total; i += num_threads) {
    y[i] = c::BiasAddElement(s, x, b, i);
  }
}

LS_HD_INLINE void BiasAddGradThread(const c::BiasShape& s, const float* dy,
                                    float* db, int64_t thread,
                                    int64_t num_threads) {
  for (int64_t ch = thread; ch < s.c; ch += num_threads) {
    db[ch] = c::BiasAddGradElement(s, dy, ch);
  }
}

LS_HD_INLINE void ReluThread(const float* x, float* y, int64_t count,
                             int64_t thread, int64_t num_threads) {
  for (int64_t i = thread; i < count; i += num_threads) {
    y[i] = c::ReluElement(x[i]);
  }
}

LS_HD_INLINE void ReluGradThread(const float* x, const float* dy, float* dx,
                                 int64_t count, int64_t thread,
                                 int64_t num_threads) {
  for (int64_t i = thread; i < count; i += num_threads) {
    dx[i] = c::ReluGradElement(x[i], dy[i]);
  }
}

// y = a + b, one element per call of the body's AddForward.
LS_HD_INLINE void AddThread(const float* a, const float* b, float* y,
                            int64_t count, int64_t thread,
                            int64_t num_threads) {
  for (int64_t i = thread; i < count; i += num_threads) {
    c::AddForward(a + i, b + i, y + i, 1);
  }
}

// Bit copies (flatten, add.grad): integer moves, never float arithmetic.
LS_HD_INLINE void CopyWordsThread(const uint32_t* x, uint32_t* y, int64_t count,
                                  int64_t thread, int64_t num_threads) {
  for (int64_t i = thread; i < count; i += num_threads) y[i] = x[i];
}
LS_HD_INLINE void CopyBytesThread(const unsigned char* x, unsigned char* y,
                                  int64_t count, int64_t thread,
                                  int64_t num_threads) {
  for (int64_t i = thread; i < count; i += num_threads) y[i] = x[i];
}

// losses[i] = SoftmaxXentExampleLoss(i), one example per work item.
LS_HD_INLINE void SoftmaxExampleLossThread(const c::SoftmaxShape& s,
                                           const float* logits,
                                           const int32_t* labels, float* losses,
                                           int64_t thread,
                                           int64_t num_threads) {
  for (int64_t i = thread; i < s.n; i += num_threads) {
    losses[i] = c::SoftmaxXentExampleLoss(s, logits, labels, i);
  }
}

// loss = CanonicalSum(losses, N) / float(N), as SoftmaxXentForward ends.
// One work item: thread 0 computes it (the sum has a fixed order anyway).
LS_HD_INLINE void SoftmaxMeanLossThread(const c::SoftmaxShape& s,
                                        const float* losses, float* loss,
                                        int64_t thread, int64_t num_threads) {
  if (thread != 0) return;
  const float total = c::CanonicalSum(losses, s.n, 1);
  loss[0] = total / static_cast<float>(s.n);
}

// stats[2 i] = max, stats[2 i + 1] = sum of exponentials of row i.
LS_HD_INLINE void SoftmaxRowStatsThread(const c::SoftmaxShape& s,
                                        const float* logits, float* stats,
                                        int64_t thread, int64_t num_threads) {
  for (int64_t i = thread; i < s.n; i += num_threads) {
    const c::SoftmaxRowStats st = c::SoftmaxRowStatsOf(logits + i * s.c, s.c);
    stats[2 * i] = st.max;
    stats[2 * i + 1] = st.sum;
  }
}

// dlogits[i, j] from the row's stats; one element per work item.
LS_HD_INLINE void SoftmaxGradThread(const c::SoftmaxShape& s,
                                    const float* logits, const int32_t* labels,
                                    const float* stats, float* dlogits,
                                    int64_t thread, int64_t num_threads) {
  const int64_t total = s.n * s.c;
  for (int64_t idx = thread; idx < total; idx += num_threads) {
    const int64_t i = idx / s.c;
    const int64_t j = idx % s.c;
    c::SoftmaxRowStats st;
    st.max = stats[2 * i];
    st.sum = stats[2 * i + 1];
    dlogits[idx] =
        c::SoftmaxXentGradElement(s, logits + i * s.c, labels[i], st, j);
  }
}

// The optimizers call the bodies' own loops on one element at a time, so
// the per-element operation sequence is the CPU's source text.
LS_HD_INLINE void SgdThread(float* w, const float* g, int64_t count, float lr,
                            int64_t thread, int64_t num_threads) {
  for (int64_t i = thread; i < count; i += num_threads) {
    c::SgdUpdate(w + i, g + i, 1, lr);
  }
}

LS_HD_INLINE void MomentumThread(float* w, float* v, const float* g,
                                 int64_t count, float lr, float mu,
                                 int64_t thread, int64_t num_threads) {
  for (int64_t i = thread; i < count; i += num_threads) {
    c::MomentumUpdate(w + i, v + i, g + i, 1, lr, mu);
  }
}

// s: computed once on the host (AdamScalarsOf), as the CPU kernel does.
LS_HD_INLINE void AdamThread(const c::AdamScalars& s, float* w, float* m,
                             float* v, const float* g, int64_t count,
                             int64_t thread, int64_t num_threads) {
  for (int64_t i = thread; i < count; i += num_threads) {
    c::AdamElement(s, &w[i], &m[i], &v[i], g[i]);
  }
}

// ---- spatial --------------------------------------------------------------

LS_HD_INLINE void Conv2dForwardThread(const sp::Conv2dShape& s, const float* x,
                                      const float* w, float* y, int64_t thread,
                                      int64_t num_threads) {
  const int64_t total = sp::Conv2dOutputSize(s);
  for (int64_t i = thread; i < total; i += num_threads) {
    y[i] = sp::Conv2dForwardElement(s, x, w, i);
  }
}

// The x value that tap q = (ci, kh, kw) of output pixel pix of image n
// reads in a conv2d with groups == 1, +0.0f where it falls on padding:
// Conv2dForwardElement's and Conv2dGradWeightElement's x operand.
LS_HD_INLINE float Conv2dInputTap(const sp::Conv2dShape& s, const float* x,
                                  int64_t n, int64_t q, int64_t pix) {
  const int64_t out_w = sp::Conv2dOutW(s);
  const int64_t kw = q % s.k_w;
  const int64_t kh = (q / s.k_w) % s.k_h;
  const int64_t ci = q / (s.k_w * s.k_h);
  const int64_t ih = (pix / out_w) * s.stride_h - s.pad_top + kh * s.dilation_h;
  const int64_t iw =
      (pix % out_w) * s.stride_w - s.pad_left + kw * s.dilation_w;
  return (ih >= 0 && ih < s.h && iw >= 0 && iw < s.w)
             ? x[((n * s.c_in + ci) * s.h + ih) * s.w + iw]
             : 0.0f;
}

// The lowered matrix of a conv2d forward with groups == 1: col[n, q, pix] =
// Conv2dInputTap(n, q, pix) (Conv2dForwardElement's taps, in its order),
// K = C_in KH KW taps, P = H_out W_out pixels. y[n, :, :] is then the
// product col[n]^T (P x K) times w^T (K x C_out) with the same chain terms.
LS_HD_INLINE void Conv2dIm2ColThread(const sp::Conv2dShape& s, const float* x,
                                     float* col, int64_t thread,
                                     int64_t num_threads) {
  const int64_t pixels = sp::Conv2dOutH(s) * sp::Conv2dOutW(s);
  const int64_t taps = s.c_in * s.k_h * s.k_w;
  const int64_t total = s.n * taps * pixels;
  for (int64_t o = thread; o < total; o += num_threads) {
    const int64_t pix = o % pixels;
    const int64_t q = (o / pixels) % taps;
    const int64_t n = o / (pixels * taps);
    col[o] = Conv2dInputTap(s, x, n, q, pix);
  }
}

// conv2d grad_weight's lowered x operand, groups == 1: col[q, n, pix] =
// Conv2dInputTap(n, q, pix), so that row q runs over Conv2dGradWeightElement's
// sequence s = (n, oh, ow) in its order: dw (C_out x K) is then the product
// dy' (C_out x N P) times col^T (N P x K), dy'[co, (n, pix)] = dy[n, co, pix].
LS_HD_INLINE void Conv2dGradWeightColThread(const sp::Conv2dShape& s,
                                            const float* x, float* col,
                                            int64_t thread,
                                            int64_t num_threads) {
  const int64_t pixels = sp::Conv2dOutH(s) * sp::Conv2dOutW(s);
  const int64_t taps = s.c_in * s.k_h * s.k_w;
  const int64_t total = taps * s.n * pixels;
  for (int64_t o = thread; o < total; o += num_threads) {
    const int64_t pix = o % pixels;
    const int64_t n = (o / pixels) % s.n;
    const int64_t q = o / (pixels * s.n);
    col[o] = Conv2dInputTap(s, x, n, q, pix);
  }
}

// conv2d grad_input's lowered matrix, groups == 1: col[n, t, (ih, iw)] =
// the dy value tap t = (co, kh, kw) of input pixel (ih, iw) reads, +0.0f
// where no output pixel lands there (Conv2dGradInputElement's taps, in its
// order), T = C_out KH KW. dx[n, :, :] is then the product col[n]^T
// (H W x T) times w'^T (T x C_in), w'[ci, t] = w[co, ci, kh, kw], with the
// element function's chain terms fma(dy tap, w tap, acc).
LS_HD_INLINE void Conv2dGradInputColThread(const sp::Conv2dShape& s,
                                           const float* dy, float* col,
                                           int64_t thread,
                                           int64_t num_threads) {
  const int64_t out_h = sp::Conv2dOutH(s);
  const int64_t out_w = sp::Conv2dOutW(s);
  const int64_t pixels = s.h * s.w;
  const int64_t taps = s.c_out * s.k_h * s.k_w;
  const int64_t total = s.n * taps * pixels;
  for (int64_t o = thread; o < total; o += num_threads) {
    const int64_t pix = o % pixels;
    const int64_t q = (o / pixels) % taps;
    const int64_t n = o / (pixels * taps);
    const int64_t kw = q % s.k_w;
    const int64_t kh = (q / s.k_w) % s.k_h;
    const int64_t co = q / (s.k_w * s.k_h);
    const int64_t th = pix / s.w + s.pad_top - kh * s.dilation_h;
    const int64_t tw = pix % s.w + s.pad_left - kw * s.dilation_w;
    const int64_t oh = th / s.stride_h;
    const int64_t ow = tw / s.stride_w;
    const bool in = th >= 0 && th % s.stride_h == 0 && oh < out_h && tw >= 0 &&
                    tw % s.stride_w == 0 && ow < out_w;
    col[o] = in ? dy[((n * s.c_out + co) * out_h + oh) * out_w + ow] : 0.0f;
  }
}

// y[o] = the canonical pairwise tree over parts[0 * outputs + o],
// parts[1 * outputs + o], ... (`count` values): each part the sum of a run
// of whole canonical chunks, runs of the same power-of-two length except
// the last, which reproduces the tree over the chunks themselves
// (TreeAccumulator is a binary counter, and a run of 2^L chunks is the
// finished subtree of level L).
LS_HD_INLINE void TreeSumPartsThread(const float* parts, int64_t count,
                                     int64_t outputs, bool canonical_nan,
                                     float* y, int64_t thread,
                                     int64_t num_threads) {
  for (int64_t o = thread; o < outputs; o += num_threads) {
    c::TreeAccumulator tree;
    for (int64_t e = 0; e < count; ++e) tree.Push(parts[e * outputs + o]);
    y[o] = canonical_nan ? c::norm_internal::CanonicalNanOf(tree.Result())
                         : tree.Result();
  }
}

LS_HD_INLINE void Conv2dGradInputThread(const sp::Conv2dShape& s,
                                        const float* dy, const float* w,
                                        float* dx, int64_t thread,
                                        int64_t num_threads) {
  const int64_t total = sp::Conv2dInputSize(s);
  for (int64_t i = thread; i < total; i += num_threads) {
    dx[i] = sp::Conv2dGradInputElement(s, dy, w, i);
  }
}

LS_HD_INLINE void Conv2dGradWeightThread(const sp::Conv2dShape& s,
                                         const float* x, const float* dy,
                                         float* dw, int64_t thread,
                                         int64_t num_threads) {
  const int64_t total = sp::Conv2dWeightSize(s);
  for (int64_t i = thread; i < total; i += num_threads) {
    dw[i] = sp::Conv2dGradWeightElement(s, x, dy, i);
  }
}

LS_HD_INLINE void MaxPool2dForwardThread(const sp::Pool2dShape& s,
                                         const float* x, float* y,
                                         int64_t thread, int64_t num_threads) {
  const int64_t total = sp::Pool2dOutputSize(s);
  for (int64_t i = thread; i < total; i += num_threads) {
    y[i] = sp::MaxPool2dForwardElement(s, x, i);
  }
}

LS_HD_INLINE void MaxPool2dGradThread(const sp::Pool2dShape& s, const float* x,
                                      const float* dy, float* dx,
                                      int64_t thread, int64_t num_threads) {
  const int64_t total = sp::Pool2dInputSize(s);
  for (int64_t i = thread; i < total; i += num_threads) {
    dx[i] = sp::MaxPool2dGradElement(s, x, dy, i);
  }
}

LS_HD_INLINE void AvgPool2dForwardThread(const sp::Pool2dShape& s,
                                         const float* x, float* y,
                                         int64_t thread, int64_t num_threads) {
  const int64_t total = sp::Pool2dOutputSize(s);
  for (int64_t i = thread; i < total; i += num_threads) {
    y[i] = sp::AvgPool2dForwardElement(s, x, i);
  }
}

LS_HD_INLINE void AvgPool2dGradThread(const sp::Pool2dShape& s, const float* dy,
                                      float* dx, int64_t thread,
                                      int64_t num_threads) {
  const int64_t total = sp::Pool2dInputSize(s);
  for (int64_t i = thread; i < total; i += num_threads) {
    dx[i] = sp::AvgPool2dGradElement(s, dy, i);
  }
}

LS_HD_INLINE void GlobalAvgPoolForwardThread(const sp::GlobalPool2dShape& s,
                                             const float* x, float* y,
                                             int64_t thread,
                                             int64_t num_threads) {
  const int64_t total = sp::GlobalPool2dOutputSize(s);
  for (int64_t i = thread; i < total; i += num_threads) {
    y[i] = sp::GlobalAvgPool2dForwardElement(s, x, i);
  }
}

LS_HD_INLINE void GlobalAvgPoolGradThread(const sp::GlobalPool2dShape& s,
                                          const float* dy, float* dx,
                                          int64_t thread, int64_t num_threads) {
  const int64_t total = sp::GlobalPool2dInputSize(s);
  for (int64_t i = thread; i < total; i += num_threads) {
    dx[i] = sp::GlobalAvgPool2dGradElement(s, dy, i);
  }
}

LS_HD_INLINE void ResizeForwardThread(const sp::ResizeBilinearShape& s,
                                      const float* x, float* y, int64_t thread,
                                      int64_t num_threads) {
  const int64_t total = sp::ResizeBilinearOutputSize(s);
  for (int64_t i = thread; i < total; i += num_threads) {
    y[i] = sp::ResizeBilinearForwardElement(s, x, i);
  }
}

LS_HD_INLINE void ResizeGradThread(const sp::ResizeBilinearShape& s,
                                   const float* dy, float* dx, int64_t thread,
                                   int64_t num_threads) {
  const int64_t total = sp::ResizeBilinearInputSize(s);
  for (int64_t i = thread; i < total; i += num_threads) {
    dx[i] = sp::ResizeBilinearGradElement(s, dy, i);
  }
}

// ---- op set v2 ------------------------------------------------------------

LS_HD_INLINE void ActivationThread(c::Activation a, const float* x, float* y,
                                   int64_t count, int64_t thread,
                                   int64_t num_threads) {
  for (int64_t i = thread; i < count; i += num_threads) {
    y[i] = c::ActivationForwardElement(a, x[i]);
  }
}

LS_HD_INLINE void ActivationGradThread(c::Activation a, const float* x,
                                       const float* dy, float* dx,
                                       int64_t count, int64_t thread,
                                       int64_t num_threads) {
  for (int64_t i = thread; i < count; i += num_threads) {
    dx[i] = c::ActivationGradElement(a, x[i], dy[i]);
  }
}

// One whole row per work item: each row's reductions stay in one thread.
LS_HD_INLINE void SoftmaxLastThread(const c::RowShape& s, const float* x,
                                    float* y, int64_t thread,
                                    int64_t num_threads) {
  for (int64_t r = thread; r < s.rows; r += num_threads) {
    c::SoftmaxLastForwardRow(s, x, y, r);
  }
}

LS_HD_INLINE void SoftmaxLastGradThread(const c::RowShape& s, const float* x,
                                        const float* dy, float* dx,
                                        int64_t thread, int64_t num_threads) {
  for (int64_t r = thread; r < s.rows; r += num_threads) {
    c::SoftmaxLastGradRow(s, x, dy, dx, r);
  }
}

LS_HD_INLINE void LayerNormThread(const c::RowShape& s, const float* x,
                                  const float* gamma, const float* beta,
                                  float* y, int64_t thread,
                                  int64_t num_threads) {
  for (int64_t r = thread; r < s.rows; r += num_threads) {
    c::LayerNormForwardRow(s, x, gamma, beta, y, r);
  }
}

LS_HD_INLINE void LayerNormGradInputThread(const c::RowShape& s, const float* x,
                                           const float* gamma, const float* dy,
                                           float* dx, int64_t thread,
                                           int64_t num_threads) {
  for (int64_t r = thread; r < s.rows; r += num_threads) {
    c::LayerNormGradInputRow(s, x, gamma, dy, dx, r);
  }
}

// stats[2r] = mean, stats[2r + 1] = rstd of row r.
LS_HD_INLINE void LayerNormStatsThread(const c::RowShape& s, const float* x,
                                       float* stats, int64_t thread,
                                       int64_t num_threads) {
  for (int64_t r = thread; r < s.rows; r += num_threads) {
    const c::LayerNormRowStats st = c::LayerNormStatsOf(s, x + r * s.d);
    stats[2 * r] = st.mean;
    stats[2 * r + 1] = st.rstd;
  }
}

LS_HD_INLINE void LayerNormGradParamsThread(const c::RowShape& s,
                                            const float* x, const float* dy,
                                            const float* stats, float* dgamma,
                                            float* dbeta, int64_t thread,
                                            int64_t num_threads) {
  const c::LayerNormRowStats* st =
      reinterpret_cast<const c::LayerNormRowStats*>(stats);
  for (int64_t j = thread; j < s.d; j += num_threads) {
    c::LayerNormGradParamsColumn(s, x, dy, st, dgamma, dbeta, j);
  }
}

// One whole channel per work item (batch_norm.*).
LS_HD_INLINE void BatchNormThread(const c::ChannelShape& s, const float* x,
                                  const float* gamma, const float* beta,
                                  float* y, float* running, int64_t thread,
                                  int64_t num_threads) {
  for (int64_t ch = thread; ch < s.c; ch += num_threads) {
    c::BatchNormForwardChannel(s, x, gamma, beta, y, running, ch);
  }
}

LS_HD_INLINE void BatchNormGradInputThread(const c::ChannelShape& s,
                                           const float* x, const float* gamma,
                                           const float* dy,
                                           const float* running, float* dx,
                                           int64_t thread,
                                           int64_t num_threads) {
  for (int64_t ch = thread; ch < s.c; ch += num_threads) {
    c::BatchNormGradInputChannel(s, x, gamma, dy, running, dx, ch);
  }
}

LS_HD_INLINE void BatchNormGradParamsThread(const c::ChannelShape& s,
                                            const float* x, const float* dy,
                                            const float* running, float* dgamma,
                                            float* dbeta, int64_t thread,
                                            int64_t num_threads) {
  for (int64_t ch = thread; ch < s.c; ch += num_threads) {
    c::BatchNormGradParamsChannel(s, x, dy, running, dgamma, dbeta, ch);
  }
}

LS_HD_INLINE void SumSquaresThread(const float* g, float* s, int64_t count,
                                   int64_t thread) {
  if (thread == 0) s[0] = c::CanonicalDot(g, 1, g, 1, count);
}

// ---- chunked reductions ---------------------------------------------------
//
// A canonical reduction is its chunks' chains (each kChunk terms from +0.0f
// in term order) pushed into the pairwise tree in chunk order, so the
// chains can run on threads of their own and one thread per result then
// pushes them (kTreeSumParts): the same bits as one thread doing both, with
// as many threads busy as there are chunks.

// The chunks of a reduction of `terms` terms.
LS_HD_INLINE int64_t ChunksOf(int64_t terms) {
  return (terms + c::kChunk - 1) / c::kChunk;
}

// parts[q] = chunk q's chain of CanonicalDot(g, 1, g, 1, count).
LS_HD_INLINE void SumSquaresChunksThread(const float* g, float* parts,
                                         int64_t count, int64_t thread,
                                         int64_t num_threads) {
  const int64_t chunks = ChunksOf(count);
  for (int64_t q = thread; q < chunks; q += num_threads) {
    const int64_t begin = q * c::kChunk;
    const int64_t n = count - begin < c::kChunk ? count - begin : c::kChunk;
    parts[q] = c::ChainDot(g + begin, 1, g + begin, 1, n);
  }
}

// parts[q * W + i] = chunk q's chain of dw[i] (Conv2dGradWeightChunk),
// W = Conv2dWeightSize: the one-thread-per-output grad_weight's
// reductions (small or grouped convolutions) over threads of their own.
LS_HD_INLINE void Conv2dGradWeightChunksThread(const sp::Conv2dShape& s,
                                               const float* x, const float* dy,
                                               float* parts, int64_t thread,
                                               int64_t num_threads) {
  const int64_t weights = sp::Conv2dWeightSize(s);
  const int64_t work =
      ChunksOf(s.n * sp::Conv2dOutH(s) * sp::Conv2dOutW(s)) * weights;
  for (int64_t w = thread; w < work; w += num_threads) {
    parts[w] = sp::Conv2dGradWeightChunk(s, x, dy, w % weights, w / weights);
  }
}

// What a kBnChunks launch reduces per channel c (terms t = n * spatial + k
// in the order of BatchNormStatsOf's loops; d = x - mean, xhat = d * rstd,
// g = dy * gamma[c]; stats [4, C] as kTreeSumParts leaves them).
enum BnChunkMode : int {
  kBnSumX = 0,        // in {x}: sum x                   -> parts [chunks, C]
  kBnSumSqDev = 1,    // in {x, stats}: dot (d, d)       -> parts [chunks, C]
  kBnGradParams = 2,  // in {x, stats, dy}: dot (dy, xhat), sum dy
                      //                              -> parts [2, chunks, C]
  kBnGradInput = 3,   // in {x, stats, gamma, dy}: sum g, dot (g, xhat)
                      //                              -> parts [2, chunks, C]
};

// The channel statistics of training mode from stats [4, C]: row 0 the
// canonical sum of x, row 1 the canonical dot (d, d).
LS_HD_INLINE c::BatchNormChannelStats BnStatsOf(const c::ChannelShape& s,
                                                const float* stats,
                                                int64_t ch) {
  return c::BatchNormStatsFrom(s, c::BatchNormMeanOf(s, stats[ch]),
                               stats[s.c + ch]);
}

// Work item w = q * C + ch: chunk q of channel ch's reduction(s) for
// `mode`, each chain exactly as GatherChain runs it.
LS_HD_INLINE void BnChunksThread(const c::ChannelShape& s, int mode,
                                 const float* x, const float* stats,
                                 const float* a, const float* b, float* parts,
                                 int64_t thread, int64_t num_threads) {
  const int64_t terms = s.n * s.spatial;
  const int64_t work = ChunksOf(terms) * s.c;
  for (int64_t w = thread; w < work; w += num_threads) {
    const int64_t q = w / s.c;
    const int64_t ch = w % s.c;
    const int64_t begin = q * c::kChunk;
    const int64_t end = terms - begin < c::kChunk ? terms : begin + c::kChunk;
    int64_t n = begin / s.spatial;
    int64_t k = begin % s.spatial;
    float acc0 = 0.0f;
    float acc1 = 0.0f;
    if (mode == kBnSumX) {
      for (int64_t t = begin; t < end; ++t) {
        acc0 = acc0 + x[c::norm_internal::ChannelIndex(s, ch, n, k)];
        if (++k == s.spatial) {
          k = 0;
          ++n;
        }
      }
      parts[q * s.c + ch] = acc0;
    } else if (mode == kBnSumSqDev) {
      const float mean = c::BatchNormMeanOf(s, stats[ch]);
      for (int64_t t = begin; t < end; ++t) {
        const float d = x[c::norm_internal::ChannelIndex(s, ch, n, k)] - mean;
        acc0 = c::LsFma(d, d, acc0);
        if (++k == s.spatial) {
          k = 0;
          ++n;
        }
      }
      parts[q * s.c + ch] = acc0;
    } else if (mode == kBnGradParams) {
      const c::BatchNormChannelStats st = BnStatsOf(s, stats, ch);
      const float* dy = a;
      for (int64_t t = begin; t < end; ++t) {
        const int64_t i = c::norm_internal::ChannelIndex(s, ch, n, k);
        acc0 = c::LsFma(dy[i], (x[i] - st.mean) * st.rstd, acc0);
        acc1 = acc1 + dy[i];
        if (++k == s.spatial) {
          k = 0;
          ++n;
        }
      }
      parts[q * s.c + ch] = acc0;
      parts[work + q * s.c + ch] = acc1;
    } else {  // kBnGradInput
      const c::BatchNormChannelStats st = BnStatsOf(s, stats, ch);
      const float* gamma = a;
      const float* dy = b;
      for (int64_t t = begin; t < end; ++t) {
        const int64_t i = c::norm_internal::ChannelIndex(s, ch, n, k);
        const float g = dy[i] * gamma[ch];
        acc0 = acc0 + g;
        acc1 = c::LsFma(g, (x[i] - st.mean) * st.rstd, acc1);
        if (++k == s.spatial) {
          k = 0;
          ++n;
        }
      }
      parts[q * s.c + ch] = acc0;
      parts[work + q * s.c + ch] = acc1;
    }
  }
}

// y in element order from the statistics (training mode).
LS_HD_INLINE void BnOutputThread(const c::ChannelShape& s, const float* x,
                                 const float* gamma, const float* beta,
                                 const float* stats, float* y, int64_t thread,
                                 int64_t num_threads) {
  const int64_t total = s.n * s.c * s.spatial;
  for (int64_t i = thread; i < total; i += num_threads) {
    const int64_t ch = (i / s.spatial) % s.c;
    y[i] = c::BatchNormOutputOf(x[i], gamma[ch], beta[ch],
                                BnStatsOf(s, stats, ch));
  }
}

// The running statistics of each channel (training mode).
LS_HD_INLINE void BnRunningThread(const c::ChannelShape& s, const float* stats,
                                  float* running, int64_t thread,
                                  int64_t num_threads) {
  for (int64_t ch = thread; ch < s.c; ch += num_threads) {
    c::BatchNormUpdateRunning(s, running, ch, BnStatsOf(s, stats, ch));
  }
}

// dx in element order (training mode): stats rows 2 and 3 hold the
// canonical sum of g and dot (g, xhat).
LS_HD_INLINE void BnGradInputThread(const c::ChannelShape& s, const float* x,
                                    const float* gamma, const float* dy,
                                    const float* stats, float* dx,
                                    int64_t thread, int64_t num_threads) {
  const int64_t total = s.n * s.c * s.spatial;
  const float m = static_cast<float>(s.n * s.spatial);
  for (int64_t i = thread; i < total; i += num_threads) {
    const int64_t ch = (i / s.spatial) % s.c;
    const float a = stats[2 * s.c + ch] / m;
    const float b = stats[3 * s.c + ch] / m;
    dx[i] = c::BatchNormGradInputOf(x[i], dy[i], gamma[ch],
                                    BnStatsOf(s, stats, ch), a, b);
  }
}

LS_HD_INLINE void ScaleThread(const float* g, float* y, int64_t count,
                              float scale, int64_t thread,
                              int64_t num_threads) {
  for (int64_t i = thread; i < count; i += num_threads) y[i] = g[i] * scale;
}

LS_HD_INLINE void EmbeddingThread(const c::EmbeddingShape& s,
                                  const int32_t* ids, const float* w, float* y,
                                  int64_t thread, int64_t num_threads) {
  const int64_t total = s.positions * s.dim;
  for (int64_t i = thread; i < total; i += num_threads) {
    y[i] = c::EmbeddingForwardElement(s, ids, w, i);
  }
}

// offsets [V + 1] and order [P]: the host's SortPositionsById.
LS_HD_INLINE void EmbeddingGradThread(const c::EmbeddingShape& s,
                                      const int64_t* offsets,
                                      const int64_t* order, const float* dy,
                                      float* dw, int64_t thread,
                                      int64_t num_threads) {
  const int64_t total = s.vocab * s.dim;
  for (int64_t i = thread; i < total; i += num_threads) {
    dw[i] = c::EmbeddingGradFlatElement(s, offsets, order, dy, i);
  }
}

LS_HD_INLINE void DropoutThread(const c::DropoutParams& p, const float* x,
                                float* y, float* mask, int64_t count,
                                int64_t thread, int64_t num_threads) {
  for (int64_t i = thread; i < count; i += num_threads) {
    mask[i] = c::DropoutMaskElement(p, i);
    y[i] = x[i] * mask[i];
  }
}

LS_HD_INLINE void DropoutGradThread(const float* mask, const float* dy,
                                    float* dx, int64_t count, int64_t thread,
                                    int64_t num_threads) {
  for (int64_t i = thread; i < count; i += num_threads) dx[i] = dy[i] * mask[i];
}

// ---- graph primitives of op set v3 -----------------------------------------

// gather.forward, slice.forward: y[o] = x[GatherSourceOffset(o)], words.
LS_HD_INLINE void GatherThread(const c::GatherShape& s, const uint32_t* x,
                               const int32_t* ids, uint32_t* y, int64_t thread,
                               int64_t num_threads) {
  const int64_t total = s.a * s.p * s.b;
  for (int64_t o = thread; o < total; o += num_threads) {
    y[o] = x[c::GatherSourceOffset(s, ids, o)];
  }
}

// gather.grad: offsets [V + 1] and order [P] are the host's
// SortPositionsById (EMBEDDING's sorted segment sum).
LS_HD_INLINE void GatherGradThread(const c::GatherShape& s,
                                   const int64_t* offsets, const int64_t* order,
                                   const float* dy, float* dx, int64_t thread,
                                   int64_t num_threads) {
  const int64_t total = s.a * s.v * s.b;
  for (int64_t o = thread; o < total; o += num_threads) {
    dx[o] = c::GatherGradElement(s, offsets, order, dy, o);
  }
}

// slice.grad: source[v] is the position p with idx[p] == v, or -1 (the
// positions are distinct): dx[a, v, b] = dy[a, p, b], else +0.0f. Words.
LS_HD_INLINE void SliceGradThread(const c::GatherShape& s,
                                  const int64_t* source, const uint32_t* dy,
                                  uint32_t* dx, int64_t thread,
                                  int64_t num_threads) {
  const int64_t total = s.a * s.v * s.b;
  for (int64_t o = thread; o < total; o += num_threads) {
    const int64_t b = o % s.b;
    const int64_t v = (o / s.b) % s.v;
    const int64_t a = o / (s.b * s.v);
    const int64_t p = source[v];
    dx[o] = p < 0 ? 0u : dy[(a * s.p + p) * s.b + b];
  }
}

// concat.*: one part's block of rows moved into (or out of) the whole.
LS_HD_INLINE void BlockCopyThread(const GraphParams& g, const uint32_t* src,
                                  uint32_t* dst, int64_t thread,
                                  int64_t num_threads) {
  const int64_t total = g.rows * g.width;
  for (int64_t i = thread; i < total; i += num_threads) {
    const int64_t r = i / g.width;
    const int64_t j = i - r * g.width;
    dst[g.dst_off + r * g.dst_row + j] = src[g.src_off + r * g.src_row + j];
  }
}

LS_HD_INLINE void BinaryThread(const c::BroadcastShape& s, c::BinaryKind k,
                               const float* a, const float* b, float* y,
                               int64_t thread, int64_t num_threads) {
  for (int64_t o = thread; o < s.numel; o += num_threads) {
    y[o] = c::BinaryElement(k, a[c::BroadcastOffset(s, 0, o)],
                            b[c::BroadcastOffset(s, 1, o)]);
  }
}

LS_HD_INLINE void CompareThread(const c::BroadcastShape& s, c::CompareKind k,
                                const float* a, const float* b, float* y,
                                int64_t thread, int64_t num_threads) {
  for (int64_t o = thread; o < s.numel; o += num_threads) {
    y[o] = c::CompareElement(k, a[c::BroadcastOffset(s, 0, o)],
                             b[c::BroadcastOffset(s, 1, o)]);
  }
}

LS_HD_INLINE void WhereThread(const c::BroadcastShape& s, const float* cond,
                              const uint32_t* a, const uint32_t* b, uint32_t* y,
                              int64_t thread, int64_t num_threads) {
  for (int64_t o = thread; o < s.numel; o += num_threads) {
    y[o] = c::WhereElement(cond[c::BroadcastOffset(s, 0, o)],
                           a[c::BroadcastOffset(s, 1, o)],
                           b[c::BroadcastOffset(s, 2, o)]);
  }
}

// binary.grad's unreduced terms, y-shaped: ta for a, tb for b (kSumTo
// reduces each to its operand's shape).
LS_HD_INLINE void BinaryGradTermsThread(const c::BroadcastShape& s,
                                        c::BinaryKind k, const float* a,
                                        const float* b, const float* dy,
                                        float* ta, float* tb, int64_t thread,
                                        int64_t num_threads) {
  for (int64_t o = thread; o < s.numel; o += num_threads) {
    c::BinaryGradTerms(k, a[c::BroadcastOffset(s, 0, o)],
                       b[c::BroadcastOffset(s, 1, o)], dy[o], ta + o, tb + o);
  }
}

LS_HD_INLINE void WhereGradTermsThread(const c::BroadcastShape& s,
                                       const float* cond, const float* dy,
                                       float* ta, float* tb, int64_t thread,
                                       int64_t num_threads) {
  for (int64_t o = thread; o < s.numel; o += num_threads) {
    const float k = cond[c::BroadcastOffset(s, 0, o)];
    ta[o] = c::WhereGradTerm(k, dy[o], 0);
    tb[o] = c::WhereGradTerm(k, dy[o], 1);
  }
}

LS_HD_INLINE void UnaryThread(c::UnaryKind k, const float* x, float* y,
                              int64_t count, int64_t thread,
                              int64_t num_threads) {
  for (int64_t i = thread; i < count; i += num_threads) {
    y[i] = c::UnaryElement(k, x[i]);
  }
}

LS_HD_INLINE void UnaryGradThread(c::UnaryKind k, const float* x,
                                  const float* dy, float* dx, int64_t count,
                                  int64_t thread, int64_t num_threads) {
  for (int64_t i = thread; i < count; i += num_threads) {
    dx[i] = c::UnaryGradElement(k, x[i], dy[i]);
  }
}

// The broadcast-gradient reduction and REDUCE: one canonical sum
// (SumToElement) per output of x, then MEAN's division.
LS_HD_INLINE void SumToThread(const GraphParams& g, const float* t,
                              const int64_t* out_base,
                              const int64_t* term_offset, float* x,
                              int64_t count, int64_t thread,
                              int64_t num_threads) {
  for (int64_t j = thread; j < count; j += num_threads) {
    const float sum =
        g.identity ? t[j]
                   : c::SumToElement(t, out_base[j], term_offset, g.sum_n);
    x[j] = g.mean ? c::ReduceMeanElement(sum, g.count) : sum;
  }
}

LS_HD_INLINE void ReduceGradThread(const GraphParams& g, const float* dy,
                                   float* dx, int64_t thread,
                                   int64_t num_threads) {
  for (int64_t o = thread; o < g.bcast.numel; o += num_threads) {
    dx[o] = c::ReduceGradElement(g.mean, dy[c::BroadcastOffset(g.bcast, 0, o)],
                                 g.count);
  }
}

// ---- dispatch -------------------------------------------------------------

// Runs thread `thread` of `num_threads` of the launch `p`.
LS_HD_INLINE void RunThread(const KernelParams& p, int64_t thread,
                            int64_t num_threads) {
  const float* i0 = static_cast<const float*>(p.in[0]);
  const float* i1 = static_cast<const float*>(p.in[1]);
  const float* i2 = static_cast<const float*>(p.in[2]);
  float* o0 = static_cast<float*>(p.out[0]);
  float* o1 = static_cast<float*>(p.out[1]);
  float* o2 = static_cast<float*>(p.out[2]);
  const float* i3 = static_cast<const float*>(p.in[3]);
  const int64_t t = thread;
  const int64_t nt = num_threads;
  switch (p.op) {
    case DeviceOp::kMatMul:
      MatMulThread(p.matmul, i0, i1, o0, t, nt);
      break;
    case DeviceOp::kBiasAdd:
      BiasAddThread(p.bias, i0, i1, o0, t, nt);
      break;
    case DeviceOp::kBiasAddGrad:
      BiasAddGradThread(p.bias, i0, o0, t, nt);
      break;
    case DeviceOp::kRelu:
      ReluThread(i0, o0, p.work, t, nt);
      break;
    case DeviceOp::kReluGrad:
      ReluGradThread(i0, i1, o0, p.work, t, nt);
      break;
    case DeviceOp::kAdd:
      AddThread(i0, i1, o0, p.work, t, nt);
      break;
    case DeviceOp::kCopyWords:
      CopyWordsThread(static_cast<const uint32_t*>(p.in[0]),
                      static_cast<uint32_t*>(p.out[0]), p.work, t, nt);
      break;
    case DeviceOp::kCopyBytes:
      CopyBytesThread(static_cast<const unsigned char*>(p.in[0]),
                      static_cast<unsigned char*>(p.out[0]), p.work, t, nt);
      break;
    case DeviceOp::kSoftmaxExampleLoss:
      SoftmaxExampleLossThread(p.softmax, i0,
                               static_cast<const int32_t*>(p.in[1]), o0, t, nt);
      break;
    case DeviceOp::kSoftmaxMeanLoss:
      SoftmaxMeanLossThread(p.softmax, i0, o0, t, nt);
      break;
    case DeviceOp::kSoftmaxRowStats:
      SoftmaxRowStatsThread(p.softmax, i0, o0, t, nt);
      break;
    case DeviceOp::kSoftmaxGrad:
      SoftmaxGradThread(p.softmax, i0, static_cast<const int32_t*>(p.in[1]), i2,
                        o0, t, nt);
      break;
    case DeviceOp::kSgd:
      SgdThread(o0, i0, p.work, p.learning_rate, t, nt);
      break;
    case DeviceOp::kMomentum:
      MomentumThread(o0, o1, i0, p.work, p.learning_rate, p.momentum, t, nt);
      break;
    case DeviceOp::kAdam:
      AdamThread(p.adam, o0, o1, o2, i0, p.work, t, nt);
      break;
    case DeviceOp::kConv2dForward:
      Conv2dForwardThread(p.conv, i0, i1, o0, t, nt);
      break;
    case DeviceOp::kConv2dGradInput:
      Conv2dGradInputThread(p.conv, i0, i1, o0, t, nt);
      break;
    case DeviceOp::kConv2dIm2Col:
      Conv2dIm2ColThread(p.conv, i0, o0, t, nt);
      break;
    case DeviceOp::kConv2dGradInputCol:
      Conv2dGradInputColThread(p.conv, i0, o0, t, nt);
      break;
    case DeviceOp::kConv2dGradWeightCol:
      Conv2dGradWeightColThread(p.conv, i0, o0, t, nt);
      break;
    case DeviceOp::kTreeSumParts:
      TreeSumPartsThread(i0, p.tree_parts, p.work, p.tree_nan, o0, t, nt);
      break;
    case DeviceOp::kBnChunks:
      BnChunksThread(p.channels, p.bn_mode, i0, i1, i2, i3, o0, t, nt);
      break;
    case DeviceOp::kBnOutput:
      BnOutputThread(p.channels, i0, i1, i2, i3, o0, t, nt);
      break;
    case DeviceOp::kBnRunning:
      BnRunningThread(p.channels, i0, o0, t, nt);
      break;
    case DeviceOp::kBnGradInput:
      BnGradInputThread(p.channels, i0, i1, i2, i3, o0, t, nt);
      break;
    case DeviceOp::kSumSquaresChunks:
      SumSquaresChunksThread(i0, o0, p.rows.d, t, nt);
      break;
    case DeviceOp::kConv2dGradWeightChunks:
      Conv2dGradWeightChunksThread(p.conv, i0, i1, o0, t, nt);
      break;
    case DeviceOp::kConv2dGradWeight:
      Conv2dGradWeightThread(p.conv, i0, i1, o0, t, nt);
      break;
    case DeviceOp::kMaxPool2dForward:
      MaxPool2dForwardThread(p.pool, i0, o0, t, nt);
      break;
    case DeviceOp::kMaxPool2dGrad:
      MaxPool2dGradThread(p.pool, i0, i1, o0, t, nt);
      break;
    case DeviceOp::kAvgPool2dForward:
      AvgPool2dForwardThread(p.pool, i0, o0, t, nt);
      break;
    case DeviceOp::kAvgPool2dGrad:
      AvgPool2dGradThread(p.pool, i0, o0, t, nt);
      break;
    case DeviceOp::kGlobalAvgPoolForward:
      GlobalAvgPoolForwardThread(p.global_pool, i0, o0, t, nt);
      break;
    case DeviceOp::kGlobalAvgPoolGrad:
      GlobalAvgPoolGradThread(p.global_pool, i0, o0, t, nt);
      break;
    case DeviceOp::kResizeForward:
      ResizeForwardThread(p.resize, i0, o0, t, nt);
      break;
    case DeviceOp::kResizeGrad:
      ResizeGradThread(p.resize, i0, o0, t, nt);
      break;
    case DeviceOp::kActivation:
      ActivationThread(p.activation, i0, o0, p.work, t, nt);
      break;
    case DeviceOp::kActivationGrad:
      ActivationGradThread(p.activation, i0, i1, o0, p.work, t, nt);
      break;
    case DeviceOp::kSoftmaxLast:
      SoftmaxLastThread(p.rows, i0, o0, t, nt);
      break;
    case DeviceOp::kSoftmaxLastGrad:
      SoftmaxLastGradThread(p.rows, i0, i1, o0, t, nt);
      break;
    case DeviceOp::kLayerNorm:
      LayerNormThread(p.rows, i0, i1, i2, o0, t, nt);
      break;
    case DeviceOp::kLayerNormGradInput:
      LayerNormGradInputThread(p.rows, i0, i1, i2, o0, t, nt);
      break;
    case DeviceOp::kLayerNormStats:
      LayerNormStatsThread(p.rows, i0, o0, t, nt);
      break;
    case DeviceOp::kLayerNormGradParams:
      LayerNormGradParamsThread(p.rows, i0, i1, i2, o0, o1, t, nt);
      break;
    case DeviceOp::kBatchNorm:
      BatchNormThread(p.channels, i0, i1, i2, o0, o1, t, nt);
      break;
    case DeviceOp::kBatchNormGradInput:
      BatchNormGradInputThread(p.channels, i0, i1, i2, i3, o0, t, nt);
      break;
    case DeviceOp::kBatchNormGradParams:
      BatchNormGradParamsThread(p.channels, i0, i1, i2, o0, o1, t, nt);
      break;
    case DeviceOp::kSumSquares:
      // p.work is 1 (one reduction); the element count is in rows.d.
      SumSquaresThread(i0, o0, p.rows.d, t);
      break;
    case DeviceOp::kScale:
      ScaleThread(i0, o0, p.work, p.scale, t, nt);
      break;
    case DeviceOp::kEmbedding:
      EmbeddingThread(p.embedding, static_cast<const int32_t*>(p.in[0]), i1, o0,
                      t, nt);
      break;
    case DeviceOp::kEmbeddingGrad:
      EmbeddingGradThread(p.embedding, static_cast<const int64_t*>(p.in[0]),
                          static_cast<const int64_t*>(p.in[1]), i2, o0, t, nt);
      break;
    case DeviceOp::kDropout:
      DropoutThread(p.dropout, i0, o0, o1, p.work, t, nt);
      break;
    case DeviceOp::kDropoutGrad:
      DropoutGradThread(i0, i1, o0, p.work, t, nt);
      break;
    case DeviceOp::kBatchedMatMul:
      BatchedMatMulThread(p.batched_matmul, i0, i1, o0, t, nt);
      break;
    case DeviceOp::kTranspose:
      TransposeThread(p.transpose, static_cast<const uint32_t*>(p.in[0]),
                      static_cast<uint32_t*>(p.out[0]), t, nt);
      break;
    case DeviceOp::kGather:
      GatherThread(p.graph.gather, static_cast<const uint32_t*>(p.in[0]),
                   static_cast<const int32_t*>(p.in[1]),
                   static_cast<uint32_t*>(p.out[0]), t, nt);
      break;
    case DeviceOp::kGatherGrad:
      GatherGradThread(p.graph.gather, static_cast<const int64_t*>(p.in[0]),
                       static_cast<const int64_t*>(p.in[1]), i2, o0, t, nt);
      break;
    case DeviceOp::kSliceGrad:
      SliceGradThread(p.graph.gather, static_cast<const int64_t*>(p.in[0]),
                      static_cast<const uint32_t*>(p.in[1]),
                      static_cast<uint32_t*>(p.out[0]), t, nt);
      break;
    case DeviceOp::kBlockCopy:
      BlockCopyThread(p.graph, static_cast<const uint32_t*>(p.in[0]),
                      static_cast<uint32_t*>(p.out[0]), t, nt);
      break;
    case DeviceOp::kBinary:
      BinaryThread(p.graph.bcast, static_cast<c::BinaryKind>(p.graph.kind), i0,
                   i1, o0, t, nt);
      break;
    case DeviceOp::kCompare:
      CompareThread(p.graph.bcast, static_cast<c::CompareKind>(p.graph.kind),
                    i0, i1, o0, t, nt);
      break;
    case DeviceOp::kWhere:
      WhereThread(p.graph.bcast, i0, static_cast<const uint32_t*>(p.in[1]),
                  static_cast<const uint32_t*>(p.in[2]),
                  static_cast<uint32_t*>(p.out[0]), t, nt);
      break;
    case DeviceOp::kBinaryGradTerms:
      BinaryGradTermsThread(p.graph.bcast,
                            static_cast<c::BinaryKind>(p.graph.kind), i0, i1,
                            i2, o0, o1, t, nt);
      break;
    case DeviceOp::kWhereGradTerms:
      WhereGradTermsThread(p.graph.bcast, i0, i1, o0, o1, t, nt);
      break;
    case DeviceOp::kUnary:
      UnaryThread(static_cast<c::UnaryKind>(p.graph.kind), i0, o0, p.work, t,
                  nt);
      break;
    case DeviceOp::kUnaryGrad:
      UnaryGradThread(static_cast<c::UnaryKind>(p.graph.kind), i0, i1, o0,
                      p.work, t, nt);
      break;
    case DeviceOp::kSumTo:
      SumToThread(p.graph, i0, static_cast<const int64_t*>(p.in[1]),
                  static_cast<const int64_t*>(p.in[2]), o0, p.work, t, nt);
      break;
    case DeviceOp::kReduceGrad:
      ReduceGradThread(p.graph, i0, o0, t, nt);
      break;
    case DeviceOp::kTiledMatMul:  // whole blocks: TiledGemmBlock
    case DeviceOp::kNumOps:
      break;
  }
}

}  // namespace lockstep::kernels::cuda

#endif  // LOCKSTEP_KERNELS_CUDA_THREAD_BODIES_H_
