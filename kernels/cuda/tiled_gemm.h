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
//     per output; none when depth <= 256, where the chain is the result).
//   - K = 0 writes ScaleProduct(+0.0f, scale), as CanonicalDot of no terms.
//
// So the bits depend only on each output's chunk sequence, never on BK, the
// tile shape, the number of blocks or the thread order: GemmTile is a
// template so that the tests run other tile shapes and check exactly that.
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

// A tile of kBM x kBN outputs, kBK-deep slices, each thread a kTM x kTN
// micro-tile: (kBM / kTM) * (kBN / kTN) threads per block.
template <int kBM_, int kBN_, int kBK_, int kTM_, int kTN_>
struct GemmTile {
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

// What the device runs: 64 x 64 tiles, 256 threads of 4 x 4 outputs,
// 16-deep slices (8 KiB of shared memory).
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
      // Merge with the perfect subtrees this chunk completes.
      int level = 0;
      while ((chunk >> level) & 1) {
        v = scratch[level * plane + o] + v;
        ++level;
      }
      if (!last) {
        scratch[level * plane + o] = v;
        continue;
      }
      // Fold the larger subtrees still held, smallest first.
      for (++level; (chunk >> level) != 0; ++level) {
        if ((chunk >> level) & 1) v = scratch[level * plane + o] + v;
      }
      out[c::BatchedMatMulOffset(s, t, i, j)] = c::ScaleProduct(v, s.scale);
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

#if !defined(__CUDACC__)
// The host emulation of a launch of `num_blocks` blocks: each block in turn
// runs TiledGemmBlock with every phase run for thread 0, 1, ..., kThreads-1
// (or in reverse order: a phase whose threads depended on each other would
// then give other bits) before the next phase starts.
template <class T>
void EmulateTiledGemm(const c::BatchedMatMulShape& s, const float* a,
                      const float* b, float* out, float* scratch,
                      int64_t num_blocks, bool reverse_threads = false) {
  auto sh = std::make_unique<GemmShared<T>>();
  std::vector<GemmThreadState<T>> state(T::kThreads, GemmThreadState<T>{});
  for (int64_t block = 0; block < num_blocks; ++block) {
    TiledGemmBlock<T>(
        s, a, b, out, scratch, *sh, block, num_blocks, [&](auto&& phase) {
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
