// The tiled canonical GEMM: a block of threads computes a BM x BN tile of
// C = A B (of one batch entry), staging BK-deep slices of A and B through
// shared memory, and every output still gets exactly the bits of
// MatMulElement / BatchedMatMulElement (kernels/ops/dense.h, matmul.h).
//
// How the canonical order survives the tiling (kernels/canonical/reduce.h):
//
//   - BK divides kChunk (256), and slices start at multiples of BK, so a
//     slice never straddles a chunk boundary: the slices of chunk q are
//     [256 q, 256 q + BK), [256 q + BK, ...), up to the chunk's end (the
//     last slice of a ragged chunk is shorter, and only its valid terms
//     are computed: nothing is zero-padded into a chain).
//   - Each thread owns a TM x TN micro-tile of outputs and keeps one running
//     fma chain per output (GemmThreadState::acc). Within a chunk the
//     slices come in increasing k and each slice's terms in increasing k,
//     so each chain is ChainDot's: acc = fma(A(i, p), B(p, j), acc) from
//     +0.0f over the chunk's p in order.
//   - At the end of every chunk the chain's value is pushed into the
//     canonical pairwise tree of that output, exactly as TreeAccumulator
//     pushes it (a binary counter: the perfect subtree of 2^L chunks lives
//     in tree level L), and after the last chunk the levels still held are
//     folded from the smallest up, as TreeAccumulator::Result does. The
//     levels live in a global scratch buffer (GemmTreeLevels(depth) floats
//     per output; none when depth <= 256, where the chain is the result;
//     the pipelined form below lays them out per tile).
//   - K = 0 writes ScaleProduct(+0.0f, scale), as CanonicalDot of no terms.
//
// So the bits depend only on each output's chunk sequence, never on BK, the
// tile shape, the number of blocks or the thread order: GemmTile is a
// template so that the tests run other tile shapes and check exactly that.
// The same holds for the pipelined form (PipelinedGemmTile, below: double-
// buffered slices, float4 loads), and the device kernels are built for
// several configurations of both (GemmConfigTile, WithGemmConfig), of
// which the planner launches PlannedGemmTile, or FewTilesGemmTile for a
// product whose half-size tiles still number at most one per
// multiprocessor (PlanGemmConfig).
//
// The block's work is a fixed sequence of phases (load a slice, compute a
// slice, end a chunk), each a function of (thread, its state, the shared
// tile). TiledGemmBlock runs the sequence once, calling `each(phase)` for
// every phase; `each` runs the phase for every thread of the block and
// returns when all have finished it:
//
//   device (cuda_runtime.cu)   each = phase(threadIdx.x, state);
//                                     __syncthreads();
//   host (EmulateTiledGemm)    each = for every thread t: phase(t, state[t])
//
// which is exactly what __syncthreads guarantees. The loop bounds depend
// only on the block and the shape, so every thread of a block reaches
// every barrier. Blocks walk the tiles grid-stride (tile, tile +
// num_blocks, ...): any grid covers every tile, and blocks write disjoint
// outputs (and disjoint scratch).
//
// Header-only, LS_HD; the host emulator is host-only (not compiled by nvcc).
#ifndef LOCKSTEP_KERNELS_CUDA_TILED_GEMM_H_
#define LOCKSTEP_KERNELS_CUDA_TILED_GEMM_H_

#include <cstdint>
#include <type_traits>

#include "kernels/canonical/hd.h"
#include "kernels/canonical/reduce.h"
#include "kernels/ops/dense.h"
#include "kernels/ops/matmul.h"

#if !defined(__CUDACC__)
#include <memory>
#include <vector>
#endif

namespace lockstep::kernels::cuda {

namespace c = ::lockstep::canonical;

// Full unrolling of the fixed-count loops over a thread's micro-tile and
// vectors, so that its chains stay in registers on the device.
#if defined(__CUDACC__)
#define LS_GEMM_UNROLL _Pragma("unroll")
#define LS_GEMM_NO_UNROLL _Pragma("unroll 1")
#define LS_GEMM_UNROLL_8 _Pragma("unroll 8")
#else
#define LS_GEMM_UNROLL_8
#define LS_GEMM_UNROLL
#define LS_GEMM_NO_UNROLL
#endif

// A tile of kBM x kBN outputs, kBK-deep slices, each thread a kTM x kTN
// micro-tile: (kBM / kTM) * (kBN / kTN) threads per block.
template <int kBM_, int kBN_, int kBK_, int kTM_, int kTN_>
struct GemmTile {
  static constexpr bool kPipelined = false;
  static constexpr int kMinBlocksPerSm = 2;  // see PipelinedGemmTile
  static constexpr int kBM = kBM_;
  static constexpr int kBN = kBN_;
  static constexpr int kBK = kBK_;
  static constexpr int kTM = kTM_;
  static constexpr int kTN = kTN_;
  static constexpr int kThreadCols = kBN / kTN;
  static constexpr int kThreads = (kBM / kTM) * (kBN / kTN);
  static_assert(kBM % kTM == 0 && kBN % kTN == 0,
                "micro-tiles must cover the tile");
  static_assert(c::kChunk % kBK == 0,
                "a slice must never straddle a canonical chunk");
};

// The first device configuration, kept for comparison: 64 x 64 tiles, 256
// threads of 4 x 4 outputs, 16-deep slices (8 KiB of shared memory), one
// barrier after every load, compute and chunk-end phase. What the device
// runs is PlannedGemmTile (below).
using DeviceGemmTile = GemmTile<64, 64, 16, 4, 4>;

template <class T>
struct GemmShared {
  float a[T::kBK][T::kBM];  // a[kk][i] = A(i0 + i, k0 + kk)
  float b[T::kBK][T::kBN];  // b[kk][j] = B(k0 + kk, j0 + j)
};

template <class T>
struct GemmThreadState {
  float acc[T::kTM][T::kTN];  // the running chain of each output
};

// Tree levels kept per output: the bit width of (chunks - 1); 0 when the
// reduction has at most one chunk. Pushing chunk q (q < chunks - 1) writes
// level L = (trailing ones of q) <= bit width of (chunks - 2).
LS_HD_INLINE int GemmTreeLevels(int64_t depth) {
  int levels = 0;
  for (int64_t v = c::NumChunks(depth) - 1; v > 0; v >>= 1) ++levels;
  return levels;
}

// Floats of tree scratch a product needs (0: no scratch buffer).
LS_HD_INLINE int64_t GemmScratchFloats(const c::BatchedMatMulShape& s) {
  return GemmTreeLevels(s.m.depth) * s.batch * s.m.rows * s.m.cols;
}

template <class T>
LS_HD_INLINE int64_t GemmTileRows(const c::BatchedMatMulShape& s) {
  return (s.m.rows + T::kBM - 1) / T::kBM;
}
template <class T>
LS_HD_INLINE int64_t GemmTileCols(const c::BatchedMatMulShape& s) {
  return (s.m.cols + T::kBN - 1) / T::kBN;
}
// Number of tiles of the product: the launch's work items (blocks).
template <class T>
LS_HD_INLINE int64_t GemmTiles(const c::BatchedMatMulShape& s) {
  return s.batch * GemmTileRows<T>(s) * GemmTileCols<T>(s);
}

// Floats of tree scratch configuration T needs for s: GemmScratchFloats(s)
// (an output's levels at its own position), or for a pipelined tile (see
// PipelinedEndChunk) GemmTreeLevels(K) floats per output of every whole
// tile, edge tiles counted whole.
template <class T>
LS_HD_INLINE int64_t GemmTileScratchFloats(const c::BatchedMatMulShape& s) {
  if constexpr (T::kPipelined) {
    return GemmTreeLevels(s.m.depth) * GemmTiles<T>(s) * T::kBM * T::kBN;
  } else {
    return GemmScratchFloats(s);
  }
}

// ---- phases ----------------------------------------------------------------

// Loads A(i0 .. i0 + BM, k0 .. k0 + kcount) and B(k0 .., j0 .. j0 + BN) of
// the entry at a, b into shared memory. Rows, columns and terms outside the
// product are filled with +0.0f; no chain ever reads a term past kcount,
// and outputs outside the product are never written. Consecutive threads
// take consecutive addresses along the operand's unit stride.
template <class T>
LS_HD_INLINE void GemmLoadSlice(const c::MatMulShape& m, const float* a,
                                const float* b, int64_t i0, int64_t j0,
                                int64_t k0, int kcount, int thread,
                                GemmShared<T>& sh) {
  // Offsets from the slice's corner: A(i0, k0) and B(k0, j0).
  const float* ac = a + i0 * m.a_row + k0 * m.a_depth;
  const float* bc = b + k0 * m.b_depth + j0 * m.b_col;
  const int64_t rows = m.rows - i0;  // rows of the tile inside the product
  const int64_t cols = m.cols - j0;
  const bool a_k_fast = m.a_depth == 1;
  for (int e = thread; e < T::kBM * T::kBK; e += T::kThreads) {
    const int i = a_k_fast ? e / T::kBK : e % T::kBM;
    const int kk = a_k_fast ? e % T::kBK : e / T::kBM;
    sh.a[kk][i] =
        (i < rows && kk < kcount) ? ac[i * m.a_row + kk * m.a_depth] : 0.0f;
  }
  const bool b_j_fast = m.b_col == 1 || m.b_depth != 1;
  for (int e = thread; e < T::kBN * T::kBK; e += T::kThreads) {
    const int j = b_j_fast ? e % T::kBN : e / T::kBK;
    const int kk = b_j_fast ? e / T::kBN : e % T::kBK;
    sh.b[kk][j] =
        (j < cols && kk < kcount) ? bc[kk * m.b_depth + j * m.b_col] : 0.0f;
  }
}

// One term of every chain of the thread's micro-tile.
template <class T>
LS_HD_INLINE void GemmStep(const GemmShared<T>& sh, int kk, int r0, int c0,
                           GemmThreadState<T>& st) {
  float av[T::kTM];
  float bv[T::kTN];
  for (int r = 0; r < T::kTM; ++r) av[r] = sh.a[kk][r0 + r];
  for (int q = 0; q < T::kTN; ++q) bv[q] = sh.b[kk][c0 + q];
  for (int r = 0; r < T::kTM; ++r) {
    for (int q = 0; q < T::kTN; ++q) {
      st.acc[r][q] = c::LsFma(av[r], bv[q], st.acc[r][q]);
    }
  }
}

// Extends every chain of the micro-tile by the slice's kcount terms, in
// increasing k.
template <class T>
LS_HD_INLINE void GemmComputeSlice(const GemmShared<T>& sh, int kcount,
                                   int thread, GemmThreadState<T>& st) {
  const int r0 = (thread / T::kThreadCols) * T::kTM;
  const int c0 = (thread % T::kThreadCols) * T::kTN;
  if (kcount == T::kBK) {
    for (int kk = 0; kk < T::kBK; ++kk) GemmStep<T>(sh, kk, r0, c0, st);
  } else {
    for (int kk = 0; kk < kcount; ++kk) GemmStep<T>(sh, kk, r0, c0, st);
  }
}

// Pushes chunk `chunk`'s chain value v into one output's tree, whose level
// L lives at levels[L * plane]. Returns false after any chunk but the last;
// after the last (last = true), v is the folded tree and it returns true.
LS_HD_INLINE bool GemmTreePush(int64_t chunk, bool last, float* levels,
                               int64_t plane, float& v) {
  // Merge with the perfect subtrees this chunk completes.
  int level = 0;
  while ((chunk >> level) & 1) {
    v = levels[level * plane] + v;
    ++level;
  }
  if (!last) {
    levels[level * plane] = v;
    return false;
  }
  // Fold the larger subtrees still held, smallest first.
  for (++level; (chunk >> level) != 0; ++level) {
    if ((chunk >> level) & 1) v = levels[level * plane] + v;
  }
  return true;
}

// Chunk `chunk` of `chunks` is complete: pushes every chain into its
// output's tree (scratch level L of output o at scratch[L * plane + o]),
// resets the chains to +0.0f, and after the last chunk folds the tree and
// writes the scaled result.
template <class T>
LS_HD_INLINE void GemmEndChunk(const c::BatchedMatMulShape& s, int64_t t,
                               int64_t i0, int64_t j0, int64_t chunk,
                               int64_t chunks, int thread,
                               GemmThreadState<T>& st, float* scratch,
                               float* out) {
  const int r0 = (thread / T::kThreadCols) * T::kTM;
  const int c0 = (thread % T::kThreadCols) * T::kTN;
  const int64_t plane = s.batch * s.m.rows * s.m.cols;
  const bool last = chunk == chunks - 1;
  for (int r = 0; r < T::kTM; ++r) {
    for (int q = 0; q < T::kTN; ++q) {
      float v = st.acc[r][q];
      st.acc[r][q] = 0.0f;
      const int64_t i = i0 + r0 + r;
      const int64_t j = j0 + c0 + q;
      if (i >= s.m.rows || j >= s.m.cols) continue;
      const int64_t o = (t * s.m.rows + i) * s.m.cols + j;
      if (GemmTreePush(chunk, last, scratch + o, plane, v)) {
        out[c::BatchedMatMulOffset(s, t, i, j)] = c::ScaleProduct(v, s.scale);
      }
    }
  }
}

// K = 0: every output of the tile is the empty sum, scaled.
template <class T>
LS_HD_INLINE void GemmStoreEmpty(const c::BatchedMatMulShape& s, int64_t t,
                                 int64_t i0, int64_t j0, int thread,
                                 float* out) {
  const int r0 = (thread / T::kThreadCols) * T::kTM;
  const int c0 = (thread % T::kThreadCols) * T::kTN;
  for (int r = 0; r < T::kTM; ++r) {
    for (int q = 0; q < T::kTN; ++q) {
      const int64_t i = i0 + r0 + r;
      const int64_t j = j0 + c0 + q;
      if (i < s.m.rows && j < s.m.cols) {
        out[c::BatchedMatMulOffset(s, t, i, j)] =
            c::ScaleProduct(0.0f, s.scale);
      }
    }
  }
}

// ---- the block -------------------------------------------------------------

// Block `block` of `num_blocks`: every tile it owns, as a sequence of
// phases, each run by `each` for every thread (see the top of the file).
// out is c of the product; scratch holds GemmScratchFloats(s) floats (may
// be null when that is 0). States must start with every chain at +0.0f;
// they end that way.
template <class T, class EachThread>
LS_HD_INLINE void TiledGemmBlock(const c::BatchedMatMulShape& s, const float* a,
                                 const float* b, float* out, float* scratch,
                                 GemmShared<T>& sh, int64_t block,
                                 int64_t num_blocks, EachThread&& each) {
  const int64_t tile_rows = GemmTileRows<T>(s);
  const int64_t tile_cols = GemmTileCols<T>(s);
  const int64_t tiles = s.batch * tile_rows * tile_cols;
  const int64_t depth = s.m.depth;
  const int64_t chunks = c::NumChunks(depth);
  for (int64_t tile = block; tile < tiles; tile += num_blocks) {
    const int64_t t = tile / (tile_rows * tile_cols);
    const int64_t rest = tile - t * tile_rows * tile_cols;
    const int64_t i0 = (rest / tile_cols) * T::kBM;
    const int64_t j0 = (rest % tile_cols) * T::kBN;
    const float* at = a + t * s.a_batch;
    const float* bt = b + t * s.b_batch;
    if (chunks == 0) {
      each([&](int thread, GemmThreadState<T>&) {
        GemmStoreEmpty<T>(s, t, i0, j0, thread, out);
      });
      continue;
    }
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const int64_t begin = chunk * c::kChunk;
      const int64_t end = depth - begin < c::kChunk ? depth : begin + c::kChunk;
      for (int64_t k0 = begin; k0 < end; k0 += T::kBK) {
        const int kcount =
            static_cast<int>(end - k0 < T::kBK ? end - k0 : T::kBK);
        each([&](int thread, GemmThreadState<T>&) {
          GemmLoadSlice<T>(s.m, at, bt, i0, j0, k0, kcount, thread, sh);
        });
        each([&](int thread, GemmThreadState<T>& st) {
          GemmComputeSlice<T>(sh, kcount, thread, st);
        });
      }
      each([&](int thread, GemmThreadState<T>& st) {
        GemmEndChunk<T>(s, t, i0, j0, chunk, chunks, thread, st, scratch, out);
      });
    }
  }
}

// ---- the pipelined form ----------------------------------------------------
//
// The same chains, chunks and tree as above, scheduled as the usual SGEMM
// (PipelinedGemmBlock):
//
//   - Two shared slice buffers. Before the first slice a phase fetches
//     slice 0 into registers and stores it into buffer 0. Then phase s
//     fetches slice s + 1 from global memory into registers, computes slice
//     s from buffer s % 2, ends the chunk if slice s ends one, and stores
//     the registers into buffer (s + 1) % 2: one barrier per slice, and the
//     global loads are in flight while the fmas run. Phase s reads only
//     buffer s % 2 (written in phase s - 1 or the prologue) and writes only
//     the other one (last read in phase s - 1), so no buffer is read and
//     written by different threads within a phase.
//   - The A slice is stored k-major (a[kk][i]), as B's (b[kk][j]), so a
//     step of the chain reads kTM / 4 + kTN / 4 float4s of shared memory
//     and does kTM * kTN fmas. Thread (ty, tx) owns rows ty*4 + {0..3} of
//     each of the kTM / 4 row groups kBM * 4 / kTM apart, and columns
//     likewise: the 8 threads of a float4 phase read 128 consecutive bytes
//     (or one broadcast address). Rows are padded by 4 floats, so the
//     transposing stores of a k-fast operand (4 rows apart) hit 2 x 16
//     distinct banks.
//   - Global loads go by vectors of 4 elements along the operand's unit
//     stride: one float4 load when the vector is 16-byte aligned and whole
//     inside the product and the slice, else 4 scalar loads (+0.0f
//     outside), as GemmLoadSlice.
//   - A chunk's end is part of the compute phase (the push touches only the
//     thread's registers and scratch). The tree levels live in a scratch
//     layout of the tile's own (GemmTileScratchFloats, PipelinedEndChunk):
//     a warp's accesses to one level of one micro-tile element are 32
//     consecutive floats, and each slot belongs to one thread of one tile.
//
// Only the slices' k-order inside each chain and the chunk-end pushes
// matter for the bits, and those are the same as in TiledGemmBlock.
template <int kBM_, int kBN_, int kBK_, int kTM_, int kTN_,
          int kMinBlocksPerSm_ = 2>
struct PipelinedGemmTile {
  static constexpr bool kPipelined = true;
  // The kernel's __launch_bounds__ minimum of resident blocks per SM (2:
  // at most 128 registers per thread; 1: up to 255).
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
  static constexpr int kBM = kBM_;
  static constexpr int kBN = kBN_;
  static constexpr int kBK = kBK_;
  static constexpr int kTM = kTM_;
  static constexpr int kTN = kTN_;
  static constexpr int kThreadRows = kBM / kTM;
  static constexpr int kThreadCols = kBN / kTN;
  static constexpr int kThreads = kThreadRows * kThreadCols;
  static constexpr int kPad = 4;  // floats after every shared row
  // 4-element vectors of an A and a B slice each thread fetches.
  static constexpr int kAVecs = kBM * kBK / (4 * kThreads);
  static constexpr int kBVecs = kBN * kBK / (4 * kThreads);
  static_assert(kBM % kTM == 0 && kBN % kTN == 0,
                "micro-tiles must cover the tile");
  static_assert(kTM % 4 == 0 && kTN % 4 == 0 && kBK % 4 == 0,
                "micro-tiles and slices come in float4s");
  static_assert(kAVecs >= 1 && kAVecs * 4 * kThreads == kBM * kBK &&
                    kBVecs >= 1 && kBVecs * 4 * kThreads == kBN * kBK,
                "every thread fetches the same number of whole vectors");
  static_assert(c::kChunk % kBK == 0,
                "a slice must never straddle a canonical chunk");
};

template <class T>
struct alignas(16) PipelinedGemmShared {
  float a[2][T::kBK][T::kBM + T::kPad];  // a[buf][kk][i] = A(i0 + i, k0 + kk)
  float b[2][T::kBK][T::kBN + T::kPad];  // b[buf][kk][j] = B(k0 + kk, j0 + j)
};

template <class T>
struct PipelinedGemmThreadState {
  float acc[T::kTM][T::kTN];  // the running chain of each output
  float pa[T::kAVecs][4];     // the next A slice's vectors, fetched
  float pb[T::kBVecs][4];
  // In a whole tile of an aligned product (PipelinedFastOperands): where
  // each vector of slice 0 starts; slice k0's is k0 * depth stride on.
  const float* fa[T::kAVecs];
  const float* fb[T::kBVecs];
};

// The tile row of the micro-tile's row r of thread row ty, and the column
// of its column q of thread column tx.
template <class T>
LS_HD_INLINE int PipelinedRow(int ty, int r) {
  return (r / 4) * (T::kThreadRows * 4) + ty * 4 + r % 4;
}
template <class T>
LS_HD_INLINE int PipelinedCol(int tx, int q) {
  return (q / 4) * (T::kThreadCols * 4) + tx * 4 + q % 4;
}

// v[0..3] = p[0..3] (one 16-byte access on the device). REQUIRES: p 16-byte
// aligned.
LS_HD_INLINE void GemmLoad4(const float* p, float* v) {
#if defined(__CUDA_ARCH__)
  const float4 x = *reinterpret_cast<const float4*>(p);
  v[0] = x.x;
  v[1] = x.y;
  v[2] = x.z;
  v[3] = x.w;
#else
  for (int u = 0; u < 4; ++u) v[u] = p[u];
#endif
}
LS_HD_INLINE void GemmStore4(const float* v, float* p) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
#else
  for (int u = 0; u < 4; ++u) p[u] = v[u];
#endif
}

// The vector p[0], p[stride], p[2 stride], p[3 stride]: its first `valid`
// elements when `inside`, +0.0f for the rest (and all of it when not).
LS_HD_INLINE void GemmFetch4(const float* p, int64_t stride, bool inside,
                             int64_t valid, float* v) {
  if (inside && valid >= 4 && stride == 1 &&
      (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    GemmLoad4(p, v);
    return;
  }
  LS_GEMM_UNROLL
  for (int u = 0; u < 4; ++u) {
    v[u] = (inside && u < valid) ? p[u * stride] : 0.0f;
  }
}

// The operands' vector directions: A's vectors run along k when
// kAlongK = PipelinedAAlongK(m) (else along i), B's when PipelinedBAlongK(m)
// (else along j). The block body is instantiated for each combination, so
// the direction is a constant inside it.
LS_HD_INLINE bool PipelinedAAlongK(const c::MatMulShape& m) {
  return m.a_depth == 1;
}
LS_HD_INLINE bool PipelinedBAlongK(const c::MatMulShape& m) {
  return m.b_depth == 1 && m.b_col != 1;
}

// Where vector n of the thread's A slice vectors starts in the tile: (i, kk).
template <class T, bool kAlongK>
LS_HD_INLINE void PipelinedAVector(int thread, int n, int& i, int& kk) {
  const int v = thread + n * T::kThreads;
  if (kAlongK) {
    i = v / (T::kBK / 4);
    kk = (v % (T::kBK / 4)) * 4;
  } else {
    kk = v / (T::kBM / 4);
    i = (v % (T::kBM / 4)) * 4;
  }
}
// Likewise for B: (kk, j).
template <class T, bool kAlongK>
LS_HD_INLINE void PipelinedBVector(int thread, int n, int& kk, int& j) {
  const int v = thread + n * T::kThreads;
  if (kAlongK) {
    j = v / (T::kBK / 4);
    kk = (v % (T::kBK / 4)) * 4;
  } else {
    kk = v / (T::kBN / 4);
    j = (v % (T::kBN / 4)) * 4;
  }
}

// Fetches the thread's vectors of the slice A(i0 .., k0 .. k0 + kcount),
// B(k0 .., j0 ..) of the entry at a, b into its registers.
template <class T, bool kAAlongK, bool kBAlongK>
LS_HD_INLINE void PipelinedFetch(const c::MatMulShape& m, const float* a,
                                 const float* b, int64_t i0, int64_t j0,
                                 int64_t k0, int kcount, int thread,
                                 PipelinedGemmThreadState<T>& st) {
  const float* ac = a + i0 * m.a_row + k0 * m.a_depth;
  const float* bc = b + k0 * m.b_depth + j0 * m.b_col;
  const int64_t rows = m.rows - i0;
  const int64_t cols = m.cols - j0;
  LS_GEMM_UNROLL
  for (int n = 0; n < T::kAVecs; ++n) {
    int i, kk;
    PipelinedAVector<T, kAAlongK>(thread, n, i, kk);
    if (kAAlongK) {
      GemmFetch4(ac + i * m.a_row + kk, 1, i < rows, kcount - kk, st.pa[n]);
    } else {
      GemmFetch4(ac + i * m.a_row + kk * m.a_depth, m.a_row, kk < kcount,
                 rows - i, st.pa[n]);
    }
  }
  LS_GEMM_UNROLL
  for (int n = 0; n < T::kBVecs; ++n) {
    int kk, j;
    PipelinedBVector<T, kBAlongK>(thread, n, kk, j);
    if (kBAlongK) {
      GemmFetch4(bc + kk + j * m.b_col, 1, j < cols, kcount - kk, st.pb[n]);
    } else {
      GemmFetch4(bc + kk * m.b_depth + j * m.b_col, m.b_col, kk < kcount,
                 cols - j, st.pb[n]);
    }
  }
}

// Whether every vector of every whole slice of a whole tile is one aligned
// 16-byte load: unit stride along the vector, the other strides and the
// batch offsets multiples of 4 floats, both operands 16-byte aligned.
// Slices start at multiples of kBK and vectors at multiples of 4 along
// their direction, so then every vector's address is a multiple of 16.
template <bool kAAlongK, bool kBAlongK>
LS_HD_INLINE bool PipelinedFastOperands(const c::BatchedMatMulShape& s,
                                        const float* a, const float* b) {
  const c::MatMulShape& m = s.m;
  const bool a_ok =
      kAAlongK ? m.a_row % 4 == 0 : m.a_row == 1 && m.a_depth % 4 == 0;
  const bool b_ok =
      kBAlongK ? m.b_col % 4 == 0 : m.b_col == 1 && m.b_depth % 4 == 0;
  return a_ok && b_ok &&
         (s.batch == 1 || (s.a_batch % 4 == 0 && s.b_batch % 4 == 0)) &&
         (reinterpret_cast<uintptr_t>(a) & 15) == 0 &&
         (reinterpret_cast<uintptr_t>(b) & 15) == 0;
}

// Where the thread's vectors of slice 0 of the tile at (i0, j0) of the
// entry at a, b start (PipelinedGemmThreadState::fa, fb).
template <class T, bool kAAlongK, bool kBAlongK>
LS_HD_INLINE void PipelinedFastStart(const c::MatMulShape& m, const float* a,
                                     const float* b, int64_t i0, int64_t j0,
                                     int thread,
                                     PipelinedGemmThreadState<T>& st) {
  LS_GEMM_UNROLL
  for (int n = 0; n < T::kAVecs; ++n) {
    int i, kk;
    PipelinedAVector<T, kAAlongK>(thread, n, i, kk);
    st.fa[n] = a + (i0 + i) * m.a_row + kk * m.a_depth;
  }
  LS_GEMM_UNROLL
  for (int n = 0; n < T::kBVecs; ++n) {
    int kk, j;
    PipelinedBVector<T, kBAlongK>(thread, n, kk, j);
    st.fb[n] = b + kk * m.b_depth + (j0 + j) * m.b_col;
  }
}

// PipelinedFetch of the whole slice at k0 of a whole tile of an aligned
// product: the same vectors, loaded without checks.
template <class T, bool kAAlongK, bool kBAlongK>
LS_HD_INLINE void PipelinedFastFetch(const c::MatMulShape& m, int64_t k0,
                                     PipelinedGemmThreadState<T>& st) {
  const int64_t a_step = kAAlongK ? k0 : k0 * m.a_depth;
  const int64_t b_step = kBAlongK ? k0 : k0 * m.b_depth;
  LS_GEMM_UNROLL
  for (int n = 0; n < T::kAVecs; ++n) GemmLoad4(st.fa[n] + a_step, st.pa[n]);
  LS_GEMM_UNROLL
  for (int n = 0; n < T::kBVecs; ++n) GemmLoad4(st.fb[n] + b_step, st.pb[n]);
}

// Stores the thread's fetched vectors into shared buffer `buf`.
template <class T, bool kAAlongK, bool kBAlongK>
LS_HD_INLINE void PipelinedStore(int thread, int buf,
                                 const PipelinedGemmThreadState<T>& st,
                                 PipelinedGemmShared<T>& sh) {
  LS_GEMM_UNROLL
  for (int n = 0; n < T::kAVecs; ++n) {
    int i, kk;
    PipelinedAVector<T, kAAlongK>(thread, n, i, kk);
    if (kAAlongK) {
      LS_GEMM_UNROLL
      for (int u = 0; u < 4; ++u) sh.a[buf][kk + u][i] = st.pa[n][u];
    } else {
      GemmStore4(st.pa[n], &sh.a[buf][kk][i]);
    }
  }
  LS_GEMM_UNROLL
  for (int n = 0; n < T::kBVecs; ++n) {
    int kk, j;
    PipelinedBVector<T, kBAlongK>(thread, n, kk, j);
    if (kBAlongK) {
      LS_GEMM_UNROLL
      for (int u = 0; u < 4; ++u) sh.b[buf][kk + u][j] = st.pb[n][u];
    } else {
      GemmStore4(st.pb[n], &sh.b[buf][kk][j]);
    }
  }
}

// One term of every chain of the thread's micro-tile, from buffer `buf`.
template <class T>
LS_HD_INLINE void PipelinedStep(const PipelinedGemmShared<T>& sh, int buf,
                                int kk, int ty, int tx,
                                PipelinedGemmThreadState<T>& st) {
  float av[T::kTM];
  float bv[T::kTN];
  LS_GEMM_UNROLL
  for (int g = 0; g < T::kTM / 4; ++g) {
    GemmLoad4(&sh.a[buf][kk][g * (T::kThreadRows * 4) + ty * 4], av + 4 * g);
  }
  LS_GEMM_UNROLL
  for (int g = 0; g < T::kTN / 4; ++g) {
    GemmLoad4(&sh.b[buf][kk][g * (T::kThreadCols * 4) + tx * 4], bv + 4 * g);
  }
  LS_GEMM_UNROLL
  for (int r = 0; r < T::kTM; ++r) {
    LS_GEMM_UNROLL
    for (int q = 0; q < T::kTN; ++q) {
      st.acc[r][q] = c::LsFma(av[r], bv[q], st.acc[r][q]);
    }
  }
}

// Chunk `chunk` of `chunks` is complete: every chain of the micro-tile goes
// through GemmTreePush's steps, then restarts at +0.0f. Level L of element
// e = r * kTN + q of the thread's micro-tile lives at scratch[((tile *
// levels + L) * kTM * kTN + e) * kThreads + thread]: a warp's accesses are
// 32 consecutive floats. Elements outside the product go through the tree
// too (in their own slots) but are never written out. The tree's shape
// depends only on the chunk, so the steps go level by level, each a pass
// over the elements with independent loads. The chains are copied out of
// the registers first and the passes are loops that are only partly
// unrolled, which keeps this rare step from raising the register count of
// the fma loop.
template <class T>
LS_HD_INLINE void PipelinedEndChunk(const c::BatchedMatMulShape& s,
                                    int64_t tile, int64_t t, int64_t i0,
                                    int64_t j0, int64_t chunk, int64_t chunks,
                                    int thread, PipelinedGemmThreadState<T>& st,
                                    float* scratch, float* out) {
  constexpr int kElems = T::kTM * T::kTN;
  float v[kElems];
  LS_GEMM_UNROLL
  for (int r = 0; r < T::kTM; ++r) {
    LS_GEMM_UNROLL
    for (int q = 0; q < T::kTN; ++q) {
      v[r * T::kTN + q] = st.acc[r][q];
      st.acc[r][q] = 0.0f;
    }
  }
  const int64_t levels = GemmTreeLevels(s.m.depth);
  // Element 0 of level L is at mine + L * kElems * kThreads.
  float* mine = levels == 0
                    ? nullptr
                    : scratch + tile * levels * kElems * T::kThreads + thread;
  const auto add_level = [&](int level) {
    const float* l = mine + level * (kElems * T::kThreads);
    LS_GEMM_UNROLL_8
    for (int e = 0; e < kElems; ++e) v[e] = l[e * T::kThreads] + v[e];
  };
  // Merge with the perfect subtrees this chunk completes.
  int level = 0;
  while ((chunk >> level) & 1) add_level(level++);
  if (chunk != chunks - 1) {
    float* l = mine + level * (kElems * T::kThreads);
    LS_GEMM_UNROLL_8
    for (int e = 0; e < kElems; ++e) l[e * T::kThreads] = v[e];
    return;
  }
  // Fold the larger subtrees still held, smallest first.
  for (++level; (chunk >> level) != 0; ++level) {
    if ((chunk >> level) & 1) add_level(level);
  }
  const int ty = thread / T::kThreadCols;
  const int tx = thread % T::kThreadCols;
  LS_GEMM_NO_UNROLL
  for (int e = 0; e < kElems; ++e) {
    const int64_t i = i0 + PipelinedRow<T>(ty, e / T::kTN);
    const int64_t j = j0 + PipelinedCol<T>(tx, e % T::kTN);
    if (i < s.m.rows && j < s.m.cols) {
      out[c::BatchedMatMulOffset(s, t, i, j)] = c::ScaleProduct(v[e], s.scale);
    }
  }
}

// PipelinedGemmBlock with the operands' vector directions fixed.
template <class T, bool kAAlongK, bool kBAlongK, class EachThread>
LS_HD_INLINE void PipelinedGemmTiles(const c::BatchedMatMulShape& s,
                                     const float* a, const float* b, float* out,
                                     float* scratch, PipelinedGemmShared<T>& sh,
                                     int64_t block, int64_t num_blocks,
                                     EachThread&& each) {
  using State = PipelinedGemmThreadState<T>;
  const int64_t tile_rows = GemmTileRows<T>(s);
  const int64_t tile_cols = GemmTileCols<T>(s);
  const int64_t tiles = s.batch * tile_rows * tile_cols;
  const int64_t depth = s.m.depth;
  const int64_t chunks = c::NumChunks(depth);
  const int64_t slices = (depth + T::kBK - 1) / T::kBK;
  const bool fast_operands = PipelinedFastOperands<kAAlongK, kBAlongK>(s, a, b);
  for (int64_t tile = block; tile < tiles; tile += num_blocks) {
    const int64_t t = tile / (tile_rows * tile_cols);
    const int64_t rest = tile - t * tile_rows * tile_cols;
    const int64_t i0 = (rest / tile_cols) * T::kBM;
    const int64_t j0 = (rest % tile_cols) * T::kBN;
    const float* at = a + t * s.a_batch;
    const float* bt = b + t * s.b_batch;
    if (chunks == 0) {
      each([&](int thread, State&) {
        GemmStoreEmpty<T>(s, t, i0, j0, thread, out);
      });
      continue;
    }
    const int first = static_cast<int>(depth < T::kBK ? depth : T::kBK);
    // A whole tile of an aligned product fetches its whole slices unchecked.
    const bool fast =
        fast_operands && i0 + T::kBM <= s.m.rows && j0 + T::kBN <= s.m.cols;
    each([&](int thread, State& st) {
      if (fast) {
        PipelinedFastStart<T, kAAlongK, kBAlongK>(s.m, at, bt, i0, j0, thread,
                                                  st);
      }
      if (fast && first == T::kBK) {
        PipelinedFastFetch<T, kAAlongK, kBAlongK>(s.m, 0, st);
      } else {
        PipelinedFetch<T, kAAlongK, kBAlongK>(s.m, at, bt, i0, j0, 0, first,
                                              thread, st);
      }
      PipelinedStore<T, kAAlongK, kBAlongK>(thread, 0, st, sh);
    });
    for (int64_t slice = 0; slice < slices; ++slice) {
      const int64_t k0 = slice * T::kBK;
      const int kcount =
          static_cast<int>(depth - k0 < T::kBK ? depth - k0 : T::kBK);
      const int64_t k1 = k0 + T::kBK;
      const bool more = slice + 1 < slices;
      const int next =
          more ? static_cast<int>(depth - k1 < T::kBK ? depth - k1 : T::kBK)
               : 0;
      const bool chunk_end = (k0 + kcount) % c::kChunk == 0 || !more;
      const int64_t chunk = k0 / c::kChunk;
      const int buf = static_cast<int>(slice & 1);
      each([&](int thread, State& st) {
        if (more) {
          if (fast && next == T::kBK) {
            PipelinedFastFetch<T, kAAlongK, kBAlongK>(s.m, k1, st);
          } else {
            PipelinedFetch<T, kAAlongK, kBAlongK>(s.m, at, bt, i0, j0, k1, next,
                                                  thread, st);
          }
        }
        const int ty = thread / T::kThreadCols;
        const int tx = thread % T::kThreadCols;
        if (kcount == T::kBK) {
          LS_GEMM_UNROLL
          for (int kk = 0; kk < T::kBK; ++kk) {
            PipelinedStep<T>(sh, buf, kk, ty, tx, st);
          }
        } else {
          for (int kk = 0; kk < kcount; ++kk) {
            PipelinedStep<T>(sh, buf, kk, ty, tx, st);
          }
        }
        if (chunk_end) {
          PipelinedEndChunk<T>(s, tile, t, i0, j0, chunk, chunks, thread, st,
                               scratch, out);
        }
        if (more) {
          PipelinedStore<T, kAAlongK, kBAlongK>(thread, buf ^ 1, st, sh);
        }
      });
    }
  }
}

// Block `block` of `num_blocks` of the pipelined form: every tile it owns,
// as the phases described at the top of this section. Same contract as
// TiledGemmBlock.
template <class T, class EachThread>
LS_HD_INLINE void PipelinedGemmBlock(const c::BatchedMatMulShape& s,
                                     const float* a, const float* b, float* out,
                                     float* scratch, PipelinedGemmShared<T>& sh,
                                     int64_t block, int64_t num_blocks,
                                     EachThread&& each) {
  if (PipelinedAAlongK(s.m)) {
    if (PipelinedBAlongK(s.m)) {
      PipelinedGemmTiles<T, true, true>(s, a, b, out, scratch, sh, block,
                                        num_blocks, each);
    } else {
      PipelinedGemmTiles<T, true, false>(s, a, b, out, scratch, sh, block,
                                         num_blocks, each);
    }
  } else if (PipelinedBAlongK(s.m)) {
    PipelinedGemmTiles<T, false, true>(s, a, b, out, scratch, sh, block,
                                       num_blocks, each);
  } else {
    PipelinedGemmTiles<T, false, false>(s, a, b, out, scratch, sh, block,
                                        num_blocks, each);
  }
}

// ---- configurations --------------------------------------------------------

template <class T>
using GemmSharedOf =
    std::conditional_t<T::kPipelined, PipelinedGemmShared<T>, GemmShared<T>>;
template <class T>
using GemmStateOf =
    std::conditional_t<T::kPipelined, PipelinedGemmThreadState<T>,
                       GemmThreadState<T>>;

// TiledGemmBlock or PipelinedGemmBlock, whichever form T is.
template <class T, class EachThread>
LS_HD_INLINE void GemmBlock(const c::BatchedMatMulShape& s, const float* a,
                            const float* b, float* out, float* scratch,
                            GemmSharedOf<T>& sh, int64_t block,
                            int64_t num_blocks, EachThread&& each) {
  if constexpr (T::kPipelined) {
    PipelinedGemmBlock<T>(s, a, b, out, scratch, sh, block, num_blocks, each);
  } else {
    TiledGemmBlock<T>(s, a, b, out, scratch, sh, block, num_blocks, each);
  }
}

// The configurations built into the device kernels, all 256 threads per
// block (gpu_bench times each one):
//   0  DeviceGemmTile: 64 x 64, 4 x 4 per thread, BK 16, one barrier per
//      phase (the first kernel)
//   1  pipelined 128 x 128, 8 x 8 per thread, BK 8, one block per SM
//   2  pipelined 128 x 128, 8 x 8 per thread, BK 16, one block per SM
//   3  pipelined 128 x 64, 8 x 4 per thread, BK 16
//   4  pipelined 64 x 64, 4 x 4 per thread, BK 16
//   5  pipelined 128 x 64, 8 x 4 per thread, BK 16, one block per SM
template <int kConfig>
struct GemmConfigTile;
template <>
struct GemmConfigTile<0> {
  using type = DeviceGemmTile;
  static constexpr const char* kName = "64x64/4x4/bk16";
};
template <>
struct GemmConfigTile<1> {
  using type = PipelinedGemmTile<128, 128, 8, 8, 8, 1>;
  static constexpr const char* kName = "pipe 128x128/8x8/bk8/1blk";
};
template <>
struct GemmConfigTile<2> {
  using type = PipelinedGemmTile<128, 128, 16, 8, 8, 1>;
  static constexpr const char* kName = "pipe 128x128/8x8/bk16/1blk";
};
template <>
struct GemmConfigTile<3> {
  using type = PipelinedGemmTile<128, 64, 16, 8, 4>;
  static constexpr const char* kName = "pipe 128x64/8x4/bk16";
};
template <>
struct GemmConfigTile<4> {
  using type = PipelinedGemmTile<64, 64, 16, 4, 4>;
  static constexpr const char* kName = "pipe 64x64/4x4/bk16";
};
template <>
struct GemmConfigTile<5> {
  using type = PipelinedGemmTile<128, 64, 16, 8, 4, 1>;
  static constexpr const char* kName = "pipe 128x64/8x4/bk16/1blk";
};
inline constexpr int kGemmConfigs = 6;

// What the planner launches (kTiledMatMul): the one constant to switch.
inline constexpr int kPlannedGemmConfig = 3;
using PlannedGemmTile = GemmConfigTile<kPlannedGemmConfig>::type;

// What it launches instead for a product so small that even its tiles of
// half the rows number at most one per multiprocessor (an H100 has 132;
// LeNet-5's lowered forward at batch 64 is 64 planned tiles): twice as
// many blocks, each half the work. Larger products keep the planned tile,
// whose 8 x 4 micro-tiles do more multiply-adds per shared-memory load (a
// 1024^3 product, 128 planned tiles, ran 2 % faster on them than on 64 x
// 64 ones). The same threads per block, so the launch grid (GridFor) does
// not depend on the choice; the bits never do.
inline constexpr int kFewTilesGemmConfig = 4;
using FewTilesGemmTile = GemmConfigTile<kFewTilesGemmConfig>::type;
static_assert(FewTilesGemmTile::kThreads == PlannedGemmTile::kThreads,
              "both planned configurations run blocks of the same size");

// The configuration the planner launches for product s on a device of
// `multiprocessors` SMs (0: unknown, always kPlannedGemmConfig).
LS_HD_INLINE int PlanGemmConfig(const c::BatchedMatMulShape& s,
                                int64_t multiprocessors) {
  return 2 * GemmTiles<PlannedGemmTile>(s) <= multiprocessors
             ? kFewTilesGemmConfig
             : kPlannedGemmConfig;
}

// Calls f(GemmConfigTile<config>{}); false (and no call) when config is not
// in [kFirst, kGemmConfigs).
template <int kFirst = 0, class F>
bool WithGemmConfigEntry(int config, F&& f) {
  if constexpr (kFirst == kGemmConfigs) {
    return false;
  } else {
    if (config == kFirst) {
      f(GemmConfigTile<kFirst>{});
      return true;
    }
    return WithGemmConfigEntry<kFirst + 1>(config, f);
  }
}

// Calls f(Tile{}) with configuration `config`'s tile type; false (and no
// call) when config is not in [0, kGemmConfigs).
template <class F>
bool WithGemmConfig(int config, F&& f) {
  return WithGemmConfigEntry(
      config, [&](auto entry) { f(typename decltype(entry)::type{}); });
}

// GemmTileScratchFloats for configuration `config` (0 when unknown).
inline int64_t GemmConfigScratchFloats(int config,
                                       const c::BatchedMatMulShape& s) {
  int64_t floats = 0;
  WithGemmConfig(config, [&](auto tile) {
    floats = GemmTileScratchFloats<decltype(tile)>(s);
  });
  return floats;
}

// GemmTiles for configuration `config` (0 when unknown).
inline int64_t GemmConfigTiles(int config, const c::BatchedMatMulShape& s) {
  int64_t tiles = 0;
  WithGemmConfig(config,
                 [&](auto tile) { tiles = GemmTiles<decltype(tile)>(s); });
  return tiles;
}

// "?" when unknown.
inline const char* GemmConfigName(int config) {
  const char* name = "?";
  WithGemmConfigEntry(config,
                      [&](auto entry) { name = decltype(entry)::kName; });
  return name;
}

#if !defined(__CUDACC__)
// The host emulation of a launch of `num_blocks` blocks: each block in turn
// runs GemmBlock with every phase run for thread 0, 1, ..., kThreads-1
// (or in reverse order: a phase whose threads depended on each other would
// then give other bits) before the next phase starts.
template <class T>
void EmulateTiledGemm(const c::BatchedMatMulShape& s, const float* a,
                      const float* b, float* out, float* scratch,
                      int64_t num_blocks, bool reverse_threads = false) {
  auto sh = std::make_unique<GemmSharedOf<T>>();
  std::vector<GemmStateOf<T>> state(T::kThreads, GemmStateOf<T>{});
  for (int64_t block = 0; block < num_blocks; ++block) {
    GemmBlock<T>(s, a, b, out, scratch, *sh, block, num_blocks,
                 [&](auto&& phase) {
                   for (int k = 0; k < T::kThreads; ++k) {
                     const int t = reverse_threads ? T::kThreads - 1 - k : k;
                     phase(t, state[t]);
                   }
                 });
  }
}
#endif  // !defined(__CUDACC__)

}  // namespace lockstep::kernels::cuda

#endif  // LOCKSTEP_KERNELS_CUDA_TILED_GEMM_H_
