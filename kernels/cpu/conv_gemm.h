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
// The lowered matrices are never materialised. Two ways, the same terms in
// the same order, so the same bits:
// - Indirect (every kernel larger than 1 x 1, and 1 x 1 kernels whose
//   channels on the micro-kernel's vector lanes number 16 or more: c_out /
//   groups for forward and grad_weight, c_in / groups for grad_input): the
//   products are transposed so those channels are the columns, and the
//   lowered matrix is the GEMM's A, read in place (GemmPacking::a_base,
//   gemm.h) from a zero-padded copy of x (none when x holds every tap) or,
//   for grad_input, from a padded dy (spread onto a zero grid with its
//   stride holes, or, with a stride above 1 and finite weights, one product
//   per stride class without the holes): a row start per output pixel (or
//   tap) and an offset per reduction step. Nothing of it is packed.
//     forward      y^T[(n, pix), co] = im2col(x)^T x W^T
//     grad_input   dx^T[(n, ih, iw), ci] = gather(dy)^T x W'^T (W'^T
//                  packed straight from w, each output channel's block of
//                  w transposed into its taps' rows of a panel; where image
//                  groups each pack it, from a transposed copy of w made
//                  once)
//     grad_weight  dw^T[(ci, kh, kw), co] = im2col(x) x dy^T (dy packed)
// - Packed (1 x 1 kernels with fewer channels, grad_weights of 1 x 1
//   kernels without padding at a column stride of 2 with 32 or more input
//   channels per group (dy as A, read in place where there are at most
//   128 taps, x's even columns transposed as B), and
//   forwards of fewer than 32 reduction steps into 32 or more output
//   channels at stride 1, such as a network's stem): the GEMM's panel packers
//   (GemmPacked) write each k block of a packed panel straight from x or
//   dy, with the zeros at padding taps and stride holes, in the layout the
//   GEMM would have packed from the lowered matrix; small images are
//   batched as the columns of one product, each image's outputs written to
//   its own block of y or dx, one product per thread.
// - Plain (1 x 1 kernels at stride 1 without padding: grad_input, and the
//   forward where it would run packed): each image's x or dy is the B of
//   its product and y or dx its C as they are, one Gemm per image and
//   group. The grad_input of a 1 x 1 kernel at stride 2 x 2 without
//   padding, with finite weights and 16 or more output columns, runs these
//   products too, into the planes of dx's even pixels (the only ones with
//   terms), spread onto dx with zeros at every other pixel, a group of
//   images at a time.
// Depthwise convolutions (groups == c_in) skip the GEMM: forward and
// grad_input with at most 256 terms per output run each output's one-chunk
// chain directly and grad_weight runs each output's chunks and tree, all
// vectorised across channels (DepthwiseConv2d*, gemm.h).
// On one thread, the indirect forward and grad_input make that copy and run
// their products for a group of images at a time where the weights are small
// beside the copy (about 1 MiB of it per group, so it is read back from L2).
// On a pool the groups run side by side, one product per thread, and where
// the weights are large, each thread takes one group of the batch.
// Scratch memory: the padded x or the dy grid of the indirect paths; the
// even pixels' planes of a stride-2 1 x 1 grad_input's image group; the
// GEMM's packed weights and one slab (at most 1,024 reduction steps) of its
// other packed panels at a time.
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

namespace cpu_internal {
// Tests only: the indirect forward and grad_input run at most
// `images` images per product, whatever their sizes (0: the default image
// groups of conv_gemm.cc), and with `images` at least the batch, grad_weight
// runs one product (no subtree parts). Not for concurrent use with other
// calls.
void SetConvImageGroupForTesting(int64_t images);
// Tests and benchmarks only: false makes each image group of the indirect
// forward and grad_input pack the weights itself, as a product on its own
// would, instead of reading them packed once for all groups (the default,
// true). The same bits either way. Not for concurrent use with other calls.
void SetConvSharedWeightsForTesting(bool on);
}  // namespace cpu_internal

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_CPU_CONV_GEMM_H_
