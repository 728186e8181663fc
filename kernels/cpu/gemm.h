// The CPU backend's register-blocked GEMM.
//
//   C(i, j) = sum over p = 0 .. depth-1 of A(i, p) * B(p, j)
//
// for the strided operands of canonical::MatMulShape (kernels/ops/dense.h),
// so every transpose combination of the dense ops is one call.
//
// Summation order. With chunk = canonical::kChunk (CANONICAL mode) every
// output is evaluated exactly like canonical::CanonicalDot: the p range is
// cut into chunks of 256, each a strictly sequential chain
// acc = fma(A(i, p), B(p, j), acc) from +0.0f in increasing p, and the chunk
// partials are combined with the canonical pairwise tree. The bits are
// therefore identical to the scalar MatMul for every shape, ISA and thread
// count. With chunk = kSingleChain (the DETERMINISTIC kernels) each output
// is one sequential fma chain over all of p: a different but fixed order.
//
// How. A and B are packed into zero-padded panels (MR rows x depth, and
// depth x NR columns), B (and an A given by a packer) one k block at a time
// for a super-block of C (at most 64 row tiles x 16 column panels), just
// before the micro-kernel consumes the block, so the packed operands stay in
// cache however long the reduction; a micro-kernel keeps an MR x NR tile of
// accumulators in vector registers, one lane per output column, so each lane
// runs its own sequential chain (vectorised ACROSS outputs, never along p). The
// pool splits the outputs (column panel x group of row tiles) over threads; no
// reduction is ever split. Each ISA (isa.h) has its own translation unit
// built with its own -m flags; explicit fma intrinsics, never mul + add.
//
// Implicit operands (GemmPacked). A caller whose operand is a function of
// other data (a convolution's im2col matrix) can hand the GEMM a packer that
// writes the packed panels straight from that data, in the layout the GEMM
// would have packed from the materialised matrix: the arithmetic, and so
// every bit, is that of Gemm over the materialised matrix. C may likewise be
// split into column blocks that land at a stride of their own (a batch of
// images' outputs side by side). A B that several products read (the
// weights of a convolution's image groups) can be packed once (PackGemmB)
// and read packed by each (GemmPacking::b_packed): the same panels, the
// same values.
//
// Preconditions: shapes valid, pointers hold the strided extents, C does not
// overlap A or B. Thread-safety: reentrant; concurrent calls must not share
// C.
#ifndef LOCKSTEP_KERNELS_CPU_GEMM_H_
#define LOCKSTEP_KERNELS_CPU_GEMM_H_

#include <cstdint>
#include <limits>
#include <memory>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ops/dense.h"
#include "kernels/spatial/conv2d.h"

namespace lockstep::kernels {

// chunk value for one sequential chain over the whole reduction.
inline constexpr int64_t kSingleChain = std::numeric_limits<int64_t>::max();

// Products with fewer multiply-adds than this run on the calling thread.
inline constexpr int64_t kMinParallelFmas = int64_t{1} << 18;

// C = A B with the given chunk length (canonical::kChunk or kSingleChain),
// on the given ISA (lowered to a supported one) and pool (null: the calling
// thread only).
void Gemm(const canonical::MatMulShape& s, const float* a, const float* b,
          float* c, int64_t chunk, CpuIsa isa, ThreadPool* pool);

// The CANONICAL product: chunk = canonical::kChunk.
inline void CanonicalGemm(const canonical::MatMulShape& s, const float* a,
                          const float* b, float* c, CpuIsa isa,
                          ThreadPool* pool) {
  Gemm(s, a, b, c, canonical::kChunk, isa, pool);
}

// Writes one k block of one packed panel of an operand: for p in
// [p_begin, p_begin + p_count) and v in [0, width), dst[(p - p_begin) *
// width + v] = A(first + v, p) (an A row tile) or B(p, first + v) (a B
// column panel), and +0.0f for v >= count. The GEMM packs each k block
// just before it consumes it, so the packed operands stay in cache however
// long the reduction. Called concurrently for different panels; ctx is
// shared, read-only.
using GemmPackFn = void (*)(const void* ctx, int64_t first, int count,
                            int width, int64_t p_begin, int64_t p_count,
                            float* dst);

struct PackedGemmB;

struct GemmPacking {
  GemmPackFn pack_a = nullptr;  // null: A from the strided shape
  GemmPackFn pack_b = nullptr;  // null: B from the strided shape
  const void* ctx = nullptr;
  // > 0: column j of C is at c + i * c_row + (j / c_block) * c_block_stride
  // + (j % c_block) * c_col; 0: at c + i * c_row + j * c_col.
  int64_t c_block = 0;
  int64_t c_block_stride = 0;
  // Indirect A (a_base non-null): A(i, p) = a_base[a_rows[i] +
  // a_offsets[p]], read in place, never packed (a and pack_a are not used):
  // a convolution's lowered matrix read straight from a padded tensor, each
  // row a start and each reduction step an offset from it.
  const float* a_base = nullptr;
  const int64_t* a_rows = nullptr;
  const int64_t* a_offsets = nullptr;
  // Non-null: row i of C starts at c + c_rows[i] instead of c + i * c_row
  // (the rows of a batch of images in NCHW tensors).
  const int64_t* c_rows = nullptr;
  // Non-null, with chunk != kSingleChain: the reduction's chunks are the
  // caller's, chunk b = steps [k_bounds[b], k_bounds[b + 1]) for b <
  // k_blocks (k_bounds[k_blocks] = depth; each at most chunk steps long, some
  // possibly empty), combined by the canonical tree when there are several.
  // For a reduction whose zero terms were left out: each chunk is the
  // subsequence of one canonical chunk of the full sequence.
  const int64_t* k_bounds = nullptr;
  int64_t k_blocks = 0;
  // True: B (pack_b's, or the strided one) is packed whole, once, before
  // any product (a B reused by many row tiles and reductions too long for
  // one slab: with A indirect or given as a matrix, the tasks then need no
  // per-slab packing and run without pool barriers between slabs).
  bool pack_b_whole = false;
  // True with pack_b: pack_b's B is a weight that every row super-block
  // reuses, so it is packed as a B given as a matrix is: whole, once, when
  // several row super-blocks read it; one slab at a time otherwise.
  bool pack_b_like_matrix = false;
  // True: C is a large output that nothing reads again before it leaves
  // the caches (kStreamOutputFloats, lane_kernels.h); where the write-back
  // is staged (a convolution's planes a multiple of 4 KiB apart), the
  // staged columns go to C with non-temporal stores.
  bool stream_c = false;
  // Non-null: B as PackGemmB packed it, shared read-only by several
  // products (a and b, pack_b and the B flags above are then not read for
  // B). Used where it has the panels this product's micro-kernel takes
  // (PackedGemmB::Fits), packed as usual otherwise: the same values either
  // way.
  const PackedGemmB* b_packed = nullptr;
  // Non-null: GemmPacked only packs B whole into *pack_b_into, in the
  // panels this shape's micro-kernel takes, and computes nothing (C is not
  // touched). Use PackGemmB.
  PackedGemmB* pack_b_into = nullptr;
};

// A product's B packed whole, once, for several products that read it: a
// convolution's image groups, each a product of its own on one thread,
// all with the same weights (each would otherwise pack the whole weight
// tensor: 9.4 MiB at 512 channels, 3 x 3, read from beyond L2 by every
// core at once). Thread-compatible; read-only while products use it, and
// destroyed on the thread that made it (ScratchFloats).
struct PackedGemmB {
  std::unique_ptr<ScratchFloats> data;
  int64_t cols = 0;
  int64_t depth = 0;
  int panel_width = 0;  // columns per panel: the micro-kernel's NR

  // Whether a product of cols x depth on NR-column panels can read it.
  bool Fits(int64_t product_cols, int64_t product_depth, int nr) const {
    return data != nullptr && cols == product_cols && depth == product_depth &&
           panel_width == nr;
  }
};

// Packs B of the product `s` (with `packing`'s B packer or strided B and
// its rows, which pick the micro-kernel as GemmPacked does) into *out, on
// the pool, for products of the same columns and depth whose rows pick the
// same micro-kernel. Leaves *out empty for an empty product.
void PackGemmB(const canonical::MatMulShape& s, const float* b,
               const GemmPacking& packing, CpuIsa isa, ThreadPool* pool,
               PackedGemmB* out);

// Gemm with packers and C blocks as `packing` says (a and b are not read
// where a packer replaces them and may be null).
void GemmPacked(const canonical::MatMulShape& s, const float* a, const float* b,
                float* c, int64_t chunk, const GemmPacking& packing, CpuIsa isa,
                ThreadPool* pool);

// Depthwise conv2d forward (groups == c_in, any channel multiplier) without
// a GEMM: each output is one fma chain from +0.0f over its taps (kh, kw) in
// the spec's order (docs/canonical-arithmetic.md 4.2), vectorised across
// input channels (a block of channel planes interleaved in registers, so
// every stride and plane size fills the vectors). With at most
// canonical::kChunk taps that is the canonical reduction (one chunk) and the
// single chain alike, so callers use it only when k_h * k_w <=
// canonical::kChunk.
void DepthwiseConv2dForward(const spatial::Conv2dShape& s, const float* x,
                            const float* w, float* y, CpuIsa isa,
                            ThreadPool* pool);

// Depthwise conv2d grad_input (groups == c_in) the same way: each dx element
// is one fma chain from +0.0f over its terms (j, kh, kw) in the spec's order
// (section 4.3, stride holes and padding reading +0.0f); callers use it
// only when (c_out / groups) * k_h * k_w <= canonical::kChunk.
void DepthwiseConv2dGradInput(const spatial::Conv2dShape& s, const float* dy,
                              const float* w, float* dx, CpuIsa isa,
                              ThreadPool* pool);

// Depthwise conv2d grad_weight (groups == c_in) without a GEMM: each dw
// element's terms (n, oh, ow) in the spec's order (section 4.4), in chunks
// of `chunk` (canonical::kChunk: CANONICAL, with the pairwise tree;
// kSingleChain: one chain), vectorised across input channels.
void DepthwiseConv2dGradWeight(const spatial::Conv2dShape& s, const float* x,
                               const float* dy, float* dw, int64_t chunk,
                               CpuIsa isa, ThreadPool* pool);

namespace cpu_internal {
// One per ISA translation unit (gemm_scalar.cc, gemm_avx2.cc,
// gemm_avx512.cc); call only when the ISA is supported.
void GemmScalar(const canonical::MatMulShape& s, const float* a, const float* b,
                float* c, int64_t chunk, const GemmPacking& packing,
                ThreadPool* pool);
void GemmAvx2(const canonical::MatMulShape& s, const float* a, const float* b,
              float* c, int64_t chunk, const GemmPacking& packing,
              ThreadPool* pool);
void GemmAvx512(const canonical::MatMulShape& s, const float* a, const float* b,
                float* c, int64_t chunk, const GemmPacking& packing,
                ThreadPool* pool);
void DepthwiseForwardScalar(const spatial::Conv2dShape& s, const float* x,
                            const float* w, float* y, ThreadPool* pool);
void DepthwiseForwardAvx2(const spatial::Conv2dShape& s, const float* x,
                          const float* w, float* y, ThreadPool* pool);
void DepthwiseForwardAvx512(const spatial::Conv2dShape& s, const float* x,
                            const float* w, float* y, ThreadPool* pool);
void DepthwiseGradInputScalar(const spatial::Conv2dShape& s, const float* dy,
                              const float* w, float* dx, ThreadPool* pool);
void DepthwiseGradInputAvx2(const spatial::Conv2dShape& s, const float* dy,
                            const float* w, float* dx, ThreadPool* pool);
void DepthwiseGradInputAvx512(const spatial::Conv2dShape& s, const float* dy,
                              const float* w, float* dx, ThreadPool* pool);
void DepthwiseGradWeightScalar(const spatial::Conv2dShape& s, const float* x,
                               const float* dy, float* dw, int64_t chunk,
                               ThreadPool* pool);
void DepthwiseGradWeightAvx2(const spatial::Conv2dShape& s, const float* x,
                             const float* dy, float* dw, int64_t chunk,
                             ThreadPool* pool);
void DepthwiseGradWeightAvx512(const spatial::Conv2dShape& s, const float* x,
                               const float* dy, float* dw, int64_t chunk,
                               ThreadPool* pool);
// dst[i * dst_stride + c] = src[i * src_stride + 2 * c] for i < rows, c < n,
// where each src row holds len >= 2 * n - 1 readable floats: sixteen floats
// of dst from two loads and one two-register permute, the loads masked
// where they would pass the row's len floats. Pure data movement (a 1 x 1
// stride-2 convolution's packer, conv_gemm.cc).
void GatherEvenRowsAvx512(const float* src, int64_t src_stride, int64_t rows,
                          int64_t len, float* dst, int64_t dst_stride,
                          int64_t n);
// dst[i * dst_stride + c] = src[i * src_stride + c] for i < rows, c < n:
// sixteen floats per load and store, the last ones under a mask. Pure data
// movement (a pointwise convolution's packer, conv_gemm.cc).
void CopyRowsAvx512(const float* src, int64_t src_stride, int64_t rows,
                    float* dst, int64_t dst_stride, int64_t n);
// dst[j * dst_stride + i] = src[i * src_stride + j] for i < rows, j < cols
// (cpu_internal::TransposeCopy's contract, transpose_copy.h): 16 x 16
// blocks through registers, each a load per row and a store per column of
// sixteen floats, with 32 shuffles where TransposeCopy's 4 x 4 SSE blocks
// take 128; the edges as TransposeCopy. Pure data movement (grad_weight's
// packers, conv_gemm.cc).
void TransposeCopyAvx512(const float* src, int64_t src_stride, int64_t rows,
                         int64_t cols, float* dst, int64_t dst_stride);
// For planes i < planes: dst[i * dst_plane + q], q < dst_plane, the next
// float of src's plane i (src + i * src_plane, read in order) where bit
// q % 16 of masks[q / 16] is set, else +0.0f; chunks = ceil(dst_plane /
// 16), and masks[chunks - 1] has no bit at or past dst_plane. Sixteen
// floats of dst per expanding load and store. Pure data movement (the
// zero-padded copies of conv_gemm.cc).
void ExpandPlanesAvx512(const float* src, int64_t planes, int64_t src_plane,
                        const uint16_t* masks, int64_t chunks, float* dst,
                        int64_t dst_plane);
}  // namespace cpu_internal

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_CPU_GEMM_H_
