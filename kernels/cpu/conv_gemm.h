// conv2d forward / grad_input / grad_weight on the GEMM (gemm.h): CANONICAL
// with chunk = canonical::kChunk, DETERMINISTIC with chunk = kSingleChain.
//
// Each op's canonical reduction (kernels/spatial/conv2d.h, SPEC.md) is a
// fixed sequence of taps in which out-of-range taps contribute fma(0, w,
// acc). Lowering it to a matrix product whose depth index walks exactly that
// sequence, with explicit zeros in the lowered matrix, gives the same terms
// in the same order, so with chunk = canonical::kChunk the GEMM reproduces
// the scalar bits (with kSingleChain every output is instead one fma chain
// over the same sequence: fixed, but not the canonical grouping):
//   forward      per (n, group): y[co, pix] = W[co, (ci, kh, kw)] x
//                im2col(x)[(ci, kh, kw), pix]
//   grad_weight  per group:      dw[co, (ci, kh, kw)] = dy[co, (n, pix)] x
//                im2col(x)^T[(n, pix), (ci, kh, kw)]
//   grad_input   per (n, group): dx[ci, (ih, iw)] = W'[ci, (co, kh, kw)] x
//                gather(dy)[(co, kh, kw), (ih, iw)]  (zero where the tap
//                falls on padding or a stride hole)
// The lowered matrices are never materialised: the GEMM's panel packers
// (GemmPacked, gemm.h) write each packed panel straight from x or dy, with
// the zeros at padding taps and stride holes, in the layout the GEMM would
// have packed from the lowered matrix, so the arithmetic is the same.
// Small images are batched: the columns of several images side by side in
// one product, each image's outputs written to its own block of y or dx
// (every output keeps its own reduction, so the bits do not change).
// Depthwise convolutions (groups == c_in) skip the GEMM: forward and
// grad_input with at most 256 terms per output run each output's one-chunk
// chain directly, vectorised across a row's outputs, and grad_weight runs
// each output's chunks and tree vectorised across channels
// (DepthwiseConv2d*, gemm.h).
// Scratch memory: the GEMM's packed weights and one k block (256 rows) of
// its other packed panels at a time, so even grad_weight, whose reduction
// runs over the whole batch, packs its im2col in cache-sized blocks.
//
// Preconditions: as the scalar drivers of kernels/spatial/conv2d.h (shape
// validated, sizes, no overlap). Thread-safety: reentrant.
#ifndef LOCKSTEP_KERNELS_CPU_CONV_GEMM_H_
#define LOCKSTEP_KERNELS_CPU_CONV_GEMM_H_

#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/spatial/conv2d.h"

namespace lockstep::kernels {

// chunk: canonical::kChunk (CANONICAL) or kSingleChain (DETERMINISTIC), as
// for Gemm (gemm.h).
void Conv2dForwardGemm(const spatial::Conv2dShape& s, const float* x,
                       const float* w, float* y, int64_t chunk, CpuIsa isa,
                       ThreadPool* pool);
void Conv2dGradInputGemm(const spatial::Conv2dShape& s, const float* dy,
                         const float* w, float* dx, int64_t chunk, CpuIsa isa,
                         ThreadPool* pool);
void Conv2dGradWeightGemm(const spatial::Conv2dShape& s, const float* x,
                          const float* dy, float* dw, int64_t chunk, CpuIsa isa,
                          ThreadPool* pool);

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_CPU_CONV_GEMM_H_
