// The GEMM driver and micro-kernel, shared by the per-ISA translation units
// (gemm_scalar.cc, gemm_avx2.cc, gemm_avx512.cc). Not a public header.
//
// Each includer defines LS_GEMM_ISA_NS to a name of its own before
// including this file, so that every function here (compiled with that
// unit's -m flags) lives in a distinct namespace and the linker can never
// pick an AVX-512 copy for the scalar path. The vector type V supplies:
//   T, kWidth, Zero(), Load(p), Store(p, v), Set1(x), Fma(a, b, c) (fused,
//   a * b + c), Add(a, b); the depthwise kernels' type also
//   Transpose(rows) (rows[kWidth] as a kWidth x kWidth matrix, in place) and
//   LoadTransposed(p, stride, rows) (rows[j] lane l = p[l * stride + j]:
//   kWidth loads and Transpose in one).
#ifndef LS_GEMM_ISA_NS
#error "define LS_GEMM_ISA_NS before including gemm_impl.h"
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/transpose_copy.h"
#include "kernels/ops/dense.h"
#include "kernels/spatial/conv2d.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include "kernels/cpu/x86_transpose.h"
#endif

namespace lockstep::kernels::cpu_internal::LS_GEMM_ISA_NS {

// 64-byte aligned scratch floats, reused between calls (scratch.h).
using AlignedFloats = ::lockstep::kernels::ScratchFloats;

template <class F>
void For(ThreadPool* pool, int64_t n, F& f) {
  ParallelForRaw(
      pool, n, [](void* ctx, int64_t i) { (*static_cast<F*>(ctx))(i); }, &f);
}

#if defined(__AVX2__) && defined(__FMA__)
// 8 float lanes: the AVX2 path's vector, and the AVX-512 path's for
// products at most 8 columns wide (there, built with AVX-512VL, an fma
// takes its A operand as an embedded broadcast from memory).
struct Avx2Vec {
  using T = __m256;
  static constexpr int kWidth = 8;
  static T Zero() { return _mm256_setzero_ps(); }
  static T Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static void Stream(float* p, T v) { _mm256_stream_ps(p, v); }
  static void Fence() { _mm_sfence(); }
  static T Set1(float x) { return _mm256_set1_ps(x); }
  static T Fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T Add(T a, T b) { return _mm256_add_ps(a, b); }
  // r[0 .. 8) as an 8 x 8 matrix (row i = r[i]), transposed in place.
  __attribute__((always_inline)) static void Transpose(T* r) {
    TransposeAvx2(r);
  }
  // r[i] = row i of the transpose of the 8 x 8 matrix whose row l is
  // p[l * stride ..].
  __attribute__((always_inline)) static void LoadTransposed(const float* p,
                                                            int64_t stride,
                                                            T* r) {
    LoadTransposeAvx2(p, stride, r);
  }
};
#endif

// Whether V stores an 8 x kWidth block of rows by columns from registers
// (V::StoreColumns8).
template <class V, class = void>
struct HasStoreColumns8 : std::false_type {};
template <class V>
struct HasStoreColumns8<V, std::void_t<decltype(&V::StoreColumns8)>>
    : std::true_type {};

template <class V, int MR, int NV>
class GemmDriver {
 public:
  using T = typename V::T;
  static constexpr int kW = V::kWidth;
  static constexpr int kNR = NV * kW;
  // Row tiles per task: a task reuses each packed B block over this many.
  static constexpr int64_t kRowTilesPerTask = 16;
  // A B packed whole of more floats than this (4 MiB: twice the L2 of the
  // hosts measured) is read from beyond L2 by every block of row tiles.
  static constexpr int64_t kStreamedBFloats = int64_t{1} << 20;
  // Column panels per task, at most (fewer when the pool needs more tasks).
  static constexpr int64_t kMaxPanelsPerTask = 8;
  // k block length of a single-chain product (chunk >= k).
  static constexpr int64_t kBlockK = 256;
  // A super-block of C: at most this many row tiles and column panels. Its
  // operands are packed a slab of whole k blocks (at most kSlabK terms) at
  // a time, so the packed operands in flight stay within a few MiB however
  // long the reduction is.
  static constexpr int64_t kSuperRowTiles = 64;
  static constexpr int64_t kSuperPanels = 16;
  static constexpr int64_t kSlabK = 1024;
  // Row tiles or column panels packed together, step by step (below).
  static constexpr int64_t kPackGroup = 16;
  // One cache line of floats.
  static constexpr int64_t kLinePad = 64 / sizeof(float);

  static void Run(const canonical::MatMulShape& s, const float* a,
                  const float* b, float* c, int64_t chunk,
                  const GemmPacking& packing, ThreadPool* pool) {
    const int64_t m = s.rows;
    const int64_t n = s.cols;
    const int64_t k = s.depth;
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {  // empty reduction: +0.0f (and no B to pack)
      if (packing.pack_b_into != nullptr) return;
      alignas(64) float zeros[MR * kNR] = {};
      for (int64_t t = 0; t * MR < m; ++t) {
        for (int64_t p = 0; p * kNR < n; ++p) {
          WriteTile(s, packing, zeros, t, p, c);
        }
      }
      return;
    }
    const int64_t m_tiles = (m + MR - 1) / MR;
    const int64_t n_panels = (n + kNR - 1) / kNR;
    // Blocking along k. In tree mode (chunk < k) a k block is one canonical
    // chunk: its chain starts from +0.0f and its partial enters the
    // canonical tree. Otherwise the whole of k is one chain, cut into
    // blocks of kBlockK whose accumulators are stored and reloaded between
    // slabs (exact), so the bits equal those of one unbroken chain.
    // With GemmPacking::k_bounds the chunks are the caller's (tree mode
    // whenever there are several).
    const bool bounded = packing.k_bounds != nullptr && chunk != kSingleChain;
    const bool tree = bounded ? packing.k_blocks > 1 : chunk < k;
    const bool use_bounds = bounded && tree;
    const int64_t kc = std::min(tree ? chunk : kBlockK, k);
    const int64_t num_blocks =
        use_bounds ? packing.k_blocks : (k + kc - 1) / kc;
    // First reduction step of block b (k for b = num_blocks).
    auto block_begin = [&](int64_t b) {
      return use_bounds ? packing.k_bounds[b] : std::min(b * kc, k);
    };
    int levels = 1;
    if (tree) {
      while ((int64_t{1} << levels) <= num_blocks) ++levels;
    }
    // Slabs of whole k blocks, packed together.
    const int64_t slab_blocks = std::max<int64_t>(1, kSlabK / kc);
    const int64_t num_slabs = (num_blocks + slab_blocks - 1) / slab_blocks;
    auto slab_begin = [&](int64_t slab) {
      return block_begin(std::min(num_blocks, slab * slab_blocks));
    };
    int64_t slab_k = 1;  // the longest slab
    for (int64_t i = 0; i < num_slabs; ++i) {
      slab_k = std::max(slab_k, slab_begin(i + 1) - slab_begin(i));
    }
    // An indirect A is read in place. A given as a matrix is packed whole,
    // once (it is typically a weight, reused by every super-block), and so
    // is a B given as a matrix (or a packer's weight, pack_b_like_matrix)
    // when more than one row super-block reuses it; a packer's operand, and
    // a B used by one row super-block, is packed one slab at a time. With
    // several slabs the next one is packed while the current one is multiplied
    // (two buffers), one pool barrier per slab.
    // B packed by PackGemmB for several products is read where it was
    // packed (a B packed whole: the same panels, the same values).
    const bool pack_b_only = packing.pack_b_into != nullptr;
    const PackedGemmB* b_pre = !pack_b_only && packing.b_packed != nullptr &&
                                       packing.b_packed->Fits(n, k, kNR)
                                   ? packing.b_packed
                                   : nullptr;
    const bool a_indirect = packing.a_base != nullptr;
    const bool a_whole =
        !pack_b_only && !a_indirect && packing.pack_a == nullptr;
    const bool a_slabs = !pack_b_only && !a_indirect && !a_whole;
    const bool b_whole =
        pack_b_only || b_pre != nullptr || packing.pack_b_whole ||
        ((packing.pack_b == nullptr || packing.pack_b_like_matrix) &&
         m_tiles > kSuperRowTiles);
    const int64_t super_tiles = std::min(m_tiles, kSuperRowTiles);
    const int64_t super_panels = std::min(n_panels, kSuperPanels);
    const int64_t buffers = num_slabs > 1 ? 2 : 1;
    // Distance between consecutive packed row tiles (whole A) and column
    // panels (whole B, or B's slab): their length and one cache line more
    // (kLinePad), so that the tiles' or panels' same steps, which the
    // by-steps packers (below) write side by side, do not all fall in one
    // L1 set. Without the line, AVX2's 6-row tiles of a 2,048-token x^T
    // were 48 KiB apart and its 16-column panels of a 1,024-step slab of
    // dy 64 KiB: multiples of 4 KiB.
    const int64_t a_tile = k * MR + kLinePad;
    const int64_t b_panel = k * kNR + kLinePad;
    const int64_t b_slab_panel = slab_k * kNR + kLinePad;
    const int64_t a_slab = a_slabs ? super_tiles * slab_k * MR : 0;
    const int64_t b_slab = b_whole ? 0 : super_panels * b_slab_panel;
    AlignedFloats a_packed(a_whole ? m_tiles * a_tile : buffers * a_slab);
    const int64_t b_floats = b_whole ? n_panels * b_panel : buffers * b_slab;
    if (pack_b_only) {
      PackedGemmB* out = packing.pack_b_into;
      out->data = std::make_unique<AlignedFloats>(b_floats);
      out->cols = n;
      out->depth = k;
      out->panel_width = kNR;
    }
    AlignedFloats b_own(b_pre != nullptr || pack_b_only ? 0 : b_floats);
    float* ap = a_packed.get();
    // B's panels are written at bw (where this call packs them) and read
    // at bp.
    float* bw = pack_b_only ? packing.pack_b_into->data->get() : b_own.get();
    const float* bp = b_pre != nullptr ? b_pre->data->get() : bw;
    const int64_t threads = pool == nullptr ? 1 : pool->num_threads();
    // An operand packed whole is cut into tasks of row tiles (column
    // panels) and, when they are fewer than 4 per thread, ranges of
    // reduction steps as well: a long reduction over few columns (a
    // convolution's grad_weight) packs on every thread.
    // pack(unit, first step, steps) for every unit and range.
    auto pack_whole = [&](int64_t units, const auto& pack) {
      int64_t pieces = 1;
      while (threads > 1 && units * pieces < 4 * threads &&
             k / (2 * pieces) >= 256) {
        pieces *= 2;
      }
      const int64_t step = (k + pieces - 1) / pieces;
      auto task = [&](int64_t i) {
        const int64_t p0 = (i % pieces) * step;
        const int64_t count = std::min(k, p0 + step) - p0;
        if (count > 0) pack(i / pieces, p0, count);
      };
      For(pool, units * pieces, task);
    };
    // An operand whose reduction steps are rows of memory (an A stored
    // transposed, as x is in a dense grad_weight; a row-major B: a dense
    // weight, or dy in grad_weight) is packed kPackGroup tiles or panels at
    // a time, step by step, so that each step reads one contiguous piece of
    // its row. Packed tile by tile, each tile read one cache line or two
    // from every row, rows a power-of-two multiple of 1 KiB apart in the
    // dense layers (lines that map to a few cache sets), and a third of a
    // one-thread grad_weight at 2,048 tokens went to packing on the AMD EPYC
    // host; step by step that product is 10 - 20 % faster there. Same values
    // in the same places either way. The tiles (panels) a group writes are
    // a line more than their length apart (a_tile, b_panel, b_slab_panel)
    // and the packers prefetch the rows ahead (PrefetchLines): with both,
    // the packing of that grad_weight went from 11 % of its samples to 8 %
    // on the Zen 2 host.
    const bool a_by_steps = a_whole && s.a_row == 1 && s.a_depth != 1;
    const bool b_by_steps =
        packing.pack_b == nullptr && s.b_col == 1 && s.b_depth != 1;
    if (a_whole && a_by_steps) {
      pack_whole((m_tiles + kPackGroup - 1) / kPackGroup,
                 [&](int64_t g, int64_t p0, int64_t count) {
                   const int64_t t0 = g * kPackGroup;
                   PackRowTilesBySteps(
                       s, a, t0, std::min(m_tiles, t0 + kPackGroup), p0, count,
                       ap + t0 * a_tile + p0 * MR, a_tile);
                 });
    } else if (a_whole) {
      pack_whole(m_tiles, [&](int64_t t, int64_t p0, int64_t count) {
        PackRows(s, a, t, p0, count, ap + t * a_tile + p0 * MR);
      });
    }
    if (b_pre != nullptr) {
      // packed already
    } else if (b_whole && b_by_steps) {
      pack_whole((n_panels + kPackGroup - 1) / kPackGroup,
                 [&](int64_t g, int64_t p0, int64_t count) {
                   const int64_t i0 = g * kPackGroup;
                   PackPanelsBySteps(
                       s, b, i0, std::min(n_panels, i0 + kPackGroup), p0, count,
                       bw + i0 * b_panel + p0 * kNR, b_panel);
                 });
    } else if (b_whole) {
      pack_whole(n_panels, [&](int64_t i, int64_t p0, int64_t count) {
        const int64_t j0 = i * kNR;
        const int cols = static_cast<int>(std::min<int64_t>(kNR, n - j0));
        float* dst = bw + i * b_panel + p0 * kNR;
        if (packing.pack_b != nullptr) {
          packing.pack_b(packing.ctx, j0, cols, kNR, p0, count, dst);
        } else {
          PackColumns(s, b, j0, cols, p0, count, dst);
        }
      });
    }
    if (pack_b_only) return;
    const int64_t per_tile = (tree ? levels : 1) * kSlot;
    // Per (panel, tile): the tree's slots, or the chain carried from one
    // slab to the next.
    const bool has_state = tree || num_slabs > 1;
    // Tiles [t0, t1) x panels [p0, p1), their share of slab `slab`: for each
    // panel and row tile, the slab's k blocks in order (each a tree
    // partial, or the chain continued); a single chain's last slab writes
    // C. Slab buffers are those of the super-block starting at (t_lo,
    // p_lo); slots(t, p) is the tile's state.
    auto multiply = [&](int64_t slab, int64_t t0, int64_t t1, int64_t p0,
                        int64_t p1, int64_t t_lo, int64_t p_lo,
                        const auto& slots) {
      const int64_t buf = slab % buffers;
      const int64_t begin = slab_begin(slab);
      const int64_t blk0 = slab * slab_blocks;
      const int64_t blk1 = std::min(num_blocks, blk0 + slab_blocks);
      const bool last = slab + 1 == num_slabs;
      alignas(64) float tile[MR * kNR];
      T acc[MR][NV];
      Zero(acc);  // (each tile sets it; this keeps GCC's warning quiet)
      const float* a_tile_rows[MR];
      for (int64_t p = p0; p < p1; ++p) {
        const float* b_slab_p =
            b_whole ? bp + p * b_panel + begin * kNR
                    : bp + buf * b_slab + (p - p_lo) * b_slab_panel;
        for (int64_t t = t0; t < t1; ++t) {
          const float* a_slab_t =
              a_whole ? ap + t * a_tile + begin * MR
                      : ap + buf * a_slab + (t - t_lo) * slab_k * MR;
          if (a_indirect) {
            // Rows past the last one read the last one (results dropped).
            for (int r = 0; r < MR; ++r) {
              a_tile_rows[r] =
                  packing.a_base +
                  packing.a_rows[std::min<int64_t>(t * MR + r, m - 1)];
            }
          }
          bool a_rows_unit = false;
          if (a_indirect) {
            a_rows_unit = true;
            for (int r = 1; r < MR; ++r) {
              a_rows_unit &= a_tile_rows[r] == a_tile_rows[0] + r;
            }
          }
          float* st = has_state ? slots(t, p) : nullptr;
          if (!tree) {
            if (slab == 0) {
              Zero(acc);
            } else {
              LoadAcc(st, acc);
            }
          }
          for (int64_t blk = blk0; blk < blk1; ++blk) {
            const int64_t off = block_begin(blk) - begin;
            const int64_t count = block_begin(blk + 1) - block_begin(blk);
            if (tree) Zero(acc);
            const float* b_blk = b_slab_p + off * kNR;
            if (a_indirect) {
              const int64_t* offsets = packing.a_offsets + block_begin(blk);
              if (a_rows_unit) {
                // Rows one float apart (adjacent output pixels of a
                // stride-1 convolution): every A load one base register and
                // a constant displacement, where the row starts would take
                // more general registers than are free.
                const float* row0 = a_tile_rows[0];
                Chain([row0, offsets](int64_t q,
                                      int r) { return row0[offsets[q] + r]; },
                      b_blk, count, acc);
              } else {
                Chain(
                    [&a_tile_rows, offsets](int64_t q, int r) {
                      return a_tile_rows[r][offsets[q]];
                    },
                    b_blk, count, acc);
              }
            } else {
              const float* a_blk = a_slab_t + off * MR;
              Chain([a_blk](int64_t q, int r) { return a_blk[q * MR + r]; },
                    b_blk, count, acc);
            }
            if (tree) PushPartial(st, blk, acc);
          }
          if (tree) continue;
          if (last) {
            if (!StoreTile(s, packing, acc, t, p, c) &&
                !StoreTileByColumns(s, packing, acc, t, p, c)) {
              StoreAcc(tile, acc);
              WriteTile(s, packing, tile, t, p, c);
            }
          } else {
            StoreAcc(st, acc);
          }
        }
      }
    };
    // The canonical tree of tiles [t0, t1) x panels [p0, p1), into C.
    auto fold = [&](int64_t t0, int64_t t1, int64_t p0, int64_t p1,
                    const auto& slots) {
      alignas(64) float tile[MR * kNR];
      T acc[MR][NV];
      Staging staging(s, packing, t0, t1);
      for (int64_t p = p0; p < p1; ++p) {
        for (int64_t t = t0; t < t1; ++t) {
          FoldTree(slots(t, p), num_blocks, acc);
          // (staging is only on for strided columns, never StoreTile's)
          if (StoreTile(s, packing, acc, t, p, c)) continue;
          if (!staging.on() && StoreTileByColumns(s, packing, acc, t, p, c)) {
            continue;
          }
          if (staging.StoreByColumns(acc, t, p)) continue;
          StoreAcc(tile, acc);
          staging.WriteTile(tile, t, p, c);
        }
        staging.Flush(p, c);
      }
    };
    // Tasks: a block of row tiles x a block of column panels of one
    // super-block. Within a task and slab, panels then row tiles, so one
    // panel's B slab stays in cache while the task's A slabs come from L2.
    struct TaskRange {
      int64_t t0, t1, p0, p1;
    };
    auto super_tasks = [&](int64_t t_lo, int64_t t_hi, int64_t p_lo,
                           int64_t p_hi, std::vector<TaskRange>* out) {
      const int64_t nt = t_hi - t_lo;
      const int64_t np = p_hi - p_lo;
      // Fewer panels per task, then fewer row tiles, until there are 4
      // tasks per thread (or single tiles). On one thread the tasks only
      // block for the caches, and where a B packed whole is too large for
      // L2 (kStreamedBFloats) every block of row tiles reads it from
      // beyond L2 again: there the blocks are twice as tall (and a staged
      // write-back, Staging, is off). Measured on the 512-channel
      // convolutions' image groups on two threads (one product per thread,
      // 9.4 MiB of packed weights; docs/benchmarks.md, "... weights packed
      // once for the image groups"): forward +2 - 4 %, grad_input +2 %,
      // 3 x 3 stride-2 256 -> 512 forward +2 - 5 %; the layers with
      // smaller weights, which keep 16-tile blocks, within noise.
      int64_t panels_per_task = kMaxPanelsPerTask;
      int64_t tiles_per_task =
          threads == 1 && b_whole && n_panels * b_panel > kStreamedBFloats
              ? 2 * kRowTilesPerTask
              : kRowTilesPerTask;
      auto tasks = [&] {
        return ((nt + tiles_per_task - 1) / tiles_per_task) *
               ((np + panels_per_task - 1) / panels_per_task);
      };
      while (panels_per_task > 1 && tasks() < 4 * threads) {
        panels_per_task /= 2;
      }
      while (threads > 1 && tiles_per_task > 1 && tasks() < 4 * threads) {
        tiles_per_task /= 2;
      }
      const int64_t row_blocks = (nt + tiles_per_task - 1) / tiles_per_task;
      const int64_t panel_blocks = (np + panels_per_task - 1) / panels_per_task;
      for (int64_t task = 0; task < row_blocks * panel_blocks; ++task) {
        TaskRange r;
        r.t0 = t_lo + (task % row_blocks) * tiles_per_task;
        r.t1 = std::min<int64_t>(t_hi, r.t0 + tiles_per_task);
        r.p0 = p_lo + (task / row_blocks) * panels_per_task;
        r.p1 = std::min<int64_t>(p_hi, r.p0 + panels_per_task);
        out->push_back(r);
      }
    };
    std::vector<TaskRange> ranges;
    if (!a_slabs && b_whole) {
      // Nothing is packed per slab: every task, of every super-block, runs
      // all its slabs and its tree on its own, with state of its own, in
      // one parallel loop.
      for (int64_t t_lo = 0; t_lo < m_tiles; t_lo += kSuperRowTiles) {
        for (int64_t p_lo = 0; p_lo < n_panels; p_lo += kSuperPanels) {
          super_tasks(t_lo, std::min(m_tiles, t_lo + kSuperRowTiles), p_lo,
                      std::min(n_panels, p_lo + kSuperPanels), &ranges);
        }
      }
      auto run = [&](int64_t i) {
        const TaskRange& r = ranges[i];
        const int64_t nt = r.t1 - r.t0;
        AlignedFloats own(has_state ? nt * (r.p1 - r.p0) * per_tile : 0);
        auto slots = [&](int64_t t, int64_t p) {
          return own.get() + ((p - r.p0) * nt + (t - r.t0)) * per_tile;
        };
        for (int64_t slab = 0; slab < num_slabs; ++slab) {
          multiply(slab, r.t0, r.t1, r.p0, r.p1, r.t0, r.p0, slots);
        }
        if (tree) fold(r.t0, r.t1, r.p0, r.p1, slots);
      };
      For(pool, static_cast<int64_t>(ranges.size()), run);
      return;
    }
    AlignedFloats state(has_state ? super_tiles * super_panels * per_tile : 0);
    for (int64_t t_lo = 0; t_lo < m_tiles; t_lo += kSuperRowTiles) {
      const int64_t t_hi = std::min(m_tiles, t_lo + kSuperRowTiles);
      for (int64_t p_lo = 0; p_lo < n_panels; p_lo += kSuperPanels) {
        const int64_t p_hi = std::min(n_panels, p_lo + kSuperPanels);
        const int64_t nt = t_hi - t_lo;
        const int64_t np = p_hi - p_lo;
        ranges.clear();
        super_tasks(t_lo, t_hi, p_lo, p_hi, &ranges);
        const int64_t tasks = static_cast<int64_t>(ranges.size());
        auto slots = [&](int64_t t, int64_t p) {
          return state.get() + ((p - p_lo) * nt + (t - t_lo)) * per_tile;
        };
        // Packs row tile t_lo + i (i < nt, packer-fed A only) or column
        // panel p_lo + i - nt of slab `slab`.
        const int64_t b_pack_tasks = b_whole ? 0
                                     : b_by_steps
                                         ? (np + kPackGroup - 1) / kPackGroup
                                         : np;
        const int64_t pack_tasks = (a_slabs ? nt : 0) + b_pack_tasks;
        auto pack = [&](int64_t slab, int64_t i) {
          const int64_t begin = slab_begin(slab);
          const int64_t count = slab_begin(slab + 1) - begin;
          const int64_t buf = slab % buffers;
          if (a_slabs) {
            if (i < nt) {
              const int64_t t = t_lo + i;
              packing.pack_a(
                  packing.ctx, t * MR,
                  static_cast<int>(std::min<int64_t>(MR, m - t * MR)), MR,
                  begin, count, ap + buf * a_slab + i * slab_k * MR);
              return;
            }
            i -= nt;
          }
          if (b_by_steps) {
            const int64_t i0 = i * kPackGroup;
            PackPanelsBySteps(
                s, b, p_lo + i0, std::min(p_hi, p_lo + i0 + kPackGroup), begin,
                count, bw + buf * b_slab + i0 * b_slab_panel, b_slab_panel);
            return;
          }
          const int64_t j0 = (p_lo + i) * kNR;
          const int cols = static_cast<int>(std::min<int64_t>(kNR, n - j0));
          float* dst = bw + buf * b_slab + i * b_slab_panel;
          if (packing.pack_b != nullptr) {
            packing.pack_b(packing.ctx, j0, cols, kNR, begin, count, dst);
          } else {
            PackColumns(s, b, j0, cols, begin, count, dst);
          }
        };
        // Phase ph packs slab ph (if any) and multiplies slab ph - 1 (if
        // any), as one parallel loop.
        for (int64_t ph = 0; ph <= num_slabs; ++ph) {
          const int64_t packs = ph < num_slabs ? pack_tasks : 0;
          const int64_t mults = ph > 0 ? tasks : 0;
          auto step = [&](int64_t i) {
            if (i < packs) {
              pack(ph, i);
            } else {
              const TaskRange& r = ranges[i - packs];
              multiply(ph - 1, r.t0, r.t1, r.p0, r.p1, t_lo, p_lo, slots);
            }
          };
          For(pool, packs + mults, step);
        }
        if (tree) {
          auto fold_task = [&](int64_t i) {
            const TaskRange& r = ranges[i];
            fold(r.t0, r.t1, r.p0, r.p1, slots);
          };
          For(pool, tasks, fold_task);
        }
      }
    }
  }

 private:
  static constexpr int64_t kSlot = MR * kNR;

  // Where row i of C starts (from c).
  static int64_t RowAt(const canonical::MatMulShape& s,
                       const GemmPacking& packing, int64_t i) {
    return packing.c_rows != nullptr ? packing.c_rows[i] : i * s.c_row;
  }

  // The write-back of a task's row tiles [t0, t1) of one column panel at a
  // time. Where C's columns are strided (a convolution's NCHW output: a row
  // per pixel, a plane per channel), a tile's column is only MR floats of
  // its plane; where the planes are also a multiple of 4 KiB apart (32 x 32
  // images and larger powers of two), the lines of a tile's columns all
  // compete for the same L1 sets and are fetched again for the next tile.
  // There the tiles are gathered column by column here instead, and each
  // column of the task's rows is written to its plane in one piece
  // (Flush): measured on a 64-channel 32 x 32 convolution, 5 % faster;
  // on smaller planes the extra copy costs more than it saves. Where the
  // vectors store a tile by columns (AVX-512's StoreColumns8), a whole
  // 8-row tile goes into the stage from registers (StoreByColumns), and
  // Flush copies each column's run by vectors where a memcpy call per run
  // cost more: 64-channel 32 x 32 forward +1 - 3 %, grad_input +1 - 2 %
  // (batch 8, one thread, old and new alternating). Otherwise each tile
  // goes straight to C (WriteTile). Pure data movement: the values and
  // where they land are the same either way.
  class Staging {
   public:
    Staging(const canonical::MatMulShape& s, const GemmPacking& packing,
            int64_t t0, int64_t t1)
        : s_(s),
          packing_(packing),
          i_begin_(t0 * MR),
          i_end_(std::min<int64_t>(s.rows, t1 * MR)),
          on_(s.c_col % kAliasFloats == 0 && packing.c_block <= 0 &&
              t1 - t0 <= kRowTilesPerTask && t1 - t0 > 1) {}

    bool on() const { return on_; }

    void WriteTile(const float* tile, int64_t t, int64_t p, float* c) {
      if (!on_) {
        GemmDriver::WriteTile(s_, packing_, tile, t, p, c);
        return;
      }
      const int64_t i0 = t * MR;
      const int64_t rows = std::min<int64_t>(MR, s_.rows - i0);
      const int64_t cols = std::min<int64_t>(kNR, s_.cols - p * kNR);
      TransposeCopy(tile, kNR, rows, cols, stage_ + (i0 - i_begin_), kStride);
    }

    // A whole 8-row tile into the stage from registers, column by column
    // (V::StoreColumns8), where WriteTile stores it to `tile` and
    // transposes that; false (nothing done) where it does not apply.
    __attribute__((always_inline)) bool StoreByColumns(const T (&acc)[MR][NV],
                                                       int64_t t, int64_t p) {
      if constexpr (MR != 8 || !HasStoreColumns8<V>::value) {
        return false;
      } else {
        if (!on_) return false;
        const int64_t i0 = t * MR;
        if (i0 + MR > s_.rows || (p + 1) * kNR > s_.cols) return false;
        StoreAccByColumns(acc, stage_ + (i0 - i_begin_), kStride);
        return true;
      }
    }

    // Panel p's staged columns to C: each run of rows adjacent in C (one
    // image's pixels) is contiguous in every column's plane.
    void Flush(int64_t p, float* c) {
      if (!on_) return;
      const int64_t j0 = p * kNR;
      const int64_t cols = std::min<int64_t>(kNR, s_.cols - j0);
      for (int64_t r0 = i_begin_; r0 < i_end_;) {
        const int64_t at = RowAt(s_, packing_, r0);
        int64_t r1 = r0 + 1;
        while (r1 < i_end_ && RowAt(s_, packing_, r1) == at + (r1 - r0)) ++r1;
        float* dst = c + j0 * s_.c_col + at;
        const float* src = stage_ + (r0 - i_begin_);
        for (int64_t j = 0; j < cols; ++j) {
          if (packing_.stream_c) {
            StreamRun(src + j * kStride, r1 - r0, dst + j * s_.c_col);
          } else if constexpr (HasStoreColumns8<V>::value) {
            CopyRunV(src + j * kStride, r1 - r0, dst + j * s_.c_col);
          } else {
            std::memcpy(dst + j * s_.c_col, src + j * kStride,
                        (r1 - r0) * sizeof(float));
          }
        }
        r0 = r1;
      }
      if (packing_.stream_c) V::Fence();
    }

   private:
    // n floats from src to dst, with non-temporal stores where dst is
    // aligned to the vector.
    static void StreamRun(const float* src, int64_t n, float* dst) {
      int64_t k = 0;
      for (; k < n && reinterpret_cast<uintptr_t>(dst + k) % sizeof(T) != 0;
           ++k) {
        dst[k] = src[k];
      }
      for (; k + kW <= n; k += kW) V::Stream(dst + k, V::Load(src + k));
      for (; k < n; ++k) dst[k] = src[k];
    }

    // n floats from src to dst by vectors, the rest one at a time.
    static void CopyRunV(const float* src, int64_t n, float* dst) {
      int64_t k = 0;
      for (; k + kW <= n; k += kW) V::Store(dst + k, V::Load(src + k));
      for (; k < n; ++k) dst[k] = src[k];
    }

    // Planes this many floats apart (4 KiB) share their L1 sets.
    static constexpr int64_t kAliasFloats = 1024;
    static constexpr int64_t kStride = kRowTilesPerTask * MR;
    const canonical::MatMulShape& s_;
    const GemmPacking& packing_;
    const int64_t i_begin_;
    const int64_t i_end_;
    const bool on_;
    alignas(64) float stage_[kNR * kStride];
  };

  // The by-steps packers read a strip of each step's row, the rows far
  // apart (a token's features: 1 - 4 KiB), so the hardware prefetchers,
  // which follow a stream within a 4 KiB page, fetched little of the next
  // rows ahead: each step's lines came on demand from L3 or DRAM. They
  // prefetch the strip of the row kPackAhead steps ahead.
  static constexpr int64_t kPackAhead = 8;
  static inline void PrefetchLines(const float* from, const float* to) {
    const uintptr_t line = 64;
    uintptr_t q = reinterpret_cast<uintptr_t>(from) & ~(line - 1);
    const uintptr_t end = reinterpret_cast<uintptr_t>(to);
    for (; q < end; q += line) {
      __builtin_prefetch(reinterpret_cast<const void*>(q), 0, 3);
    }
  }

  // PackRows of row tiles [t0, t1) for an A whose rows are adjacent floats
  // (a_row == 1), step by step: tile t0 + g at dst + g * tile_stride.
  static void PackRowTilesBySteps(const canonical::MatMulShape& s,
                                  const float* a, int64_t t0, int64_t t1,
                                  int64_t begin, int64_t count, float* dst,
                                  int64_t tile_stride) {
    const int64_t i_first = t0 * MR;
    const int64_t i_end = std::min<int64_t>(t1 * MR, s.rows);
    for (int64_t p = begin; p < begin + count; ++p) {
      const float* src = a + p * s.a_depth;
      if (p + kPackAhead < s.depth) {
        const float* ahead = src + kPackAhead * s.a_depth;
        PrefetchLines(ahead + i_first, ahead + i_end);
      }
      float* d = dst + (p - begin) * MR;
      for (int64_t t = t0; t < t1; ++t, d += tile_stride) {
        const int64_t i0 = t * MR;
        const int64_t rows = std::min<int64_t>(MR, s.rows - i0);
        if (rows == MR) {
          std::memcpy(d, src + i0, MR * sizeof(float));
          continue;
        }
        for (int64_t r = 0; r < rows; ++r) d[r] = src[i0 + r];
        for (int64_t r = rows; r < MR; ++r) d[r] = 0.0f;
      }
    }
  }

  // PackColumns of column panels [i0, i1) for a B whose columns are
  // adjacent floats (b_col == 1), step by step: panel i0 + g at dst + g *
  // panel_stride.
  static void PackPanelsBySteps(const canonical::MatMulShape& s, const float* b,
                                int64_t i0, int64_t i1, int64_t begin,
                                int64_t count, float* dst,
                                int64_t panel_stride) {
    const int64_t j_first = i0 * kNR;
    const int64_t j_end = std::min<int64_t>(i1 * kNR, s.cols);
    for (int64_t p = begin; p < begin + count; ++p) {
      const float* src = b + p * s.b_depth;
      if (p + kPackAhead < s.depth) {
        const float* ahead = src + kPackAhead * s.b_depth;
        PrefetchLines(ahead + j_first, ahead + j_end);
      }
      float* d = dst + (p - begin) * kNR;
      for (int64_t i = i0; i < i1; ++i, d += panel_stride) {
        const int64_t j0 = i * kNR;
        const int64_t cols = std::min<int64_t>(kNR, s.cols - j0);
        if (cols == kNR) {
#pragma GCC unroll 32
          for (int v = 0; v < NV; ++v) {
            V::Store(d + v * kW, V::Load(src + j0 + v * kW));
          }
          continue;
        }
        for (int64_t v = 0; v < cols; ++v) d[v] = src[j0 + v];
        for (int64_t v = cols; v < kNR; ++v) d[v] = 0.0f;
      }
    }
  }

  // Packs rows [t * MR, t * MR + MR) of the strided A over p in [begin,
  // begin + count): dst[(p - begin) * MR + r], zeros past the last row.
  static void PackRows(const canonical::MatMulShape& s, const float* a,
                       int64_t t, int64_t begin, int64_t count, float* dst) {
    const int64_t i0 = t * MR;
    const int rows = static_cast<int>(std::min<int64_t>(MR, s.rows - i0));
    const float* src[MR];
    for (int r = 0; r < rows; ++r) src[r] = a + (i0 + r) * s.a_row;
    int64_t p = begin;
    if constexpr (kW > 1 && MR <= kW) {
      if (s.a_depth == 1 && rows == MR) {
        // Rows contiguous along p (an activation or dy in a dense layer, a
        // score matrix): kW steps of the tile's rows are loaded kW floats
        // at a time and transposed in registers, instead of one float per
        // strided load. Each step's MR floats are stored as a whole vector
        // whose last kW - MR lanes spill into the next step's place, which
        // the next store overwrites; the range's last step is copied
        // exactly.
        const int64_t end = begin + count;
        for (; p + kW <= end; p += kW) {
          T v[kW];
#pragma GCC unroll 16
          for (int r = 0; r < kW; ++r) {
            v[r] = r < MR ? V::Load(src[r] + p) : V::Zero();
          }
          V::Transpose(v);
          float* d = dst + (p - begin) * MR;
#pragma GCC unroll 16
          for (int i = 0; i < kW - 1; ++i) V::Store(d + i * MR, v[i]);
          if (p + kW < end) {
            V::Store(d + (kW - 1) * MR, v[kW - 1]);
          } else {
            alignas(64) float last[kW];
            V::Store(last, v[kW - 1]);
            std::memcpy(d + (kW - 1) * MR, last, MR * sizeof(float));
          }
        }
      }
    }
    for (; p < begin + count; ++p) {
      float* d = dst + (p - begin) * MR;
      const int64_t off = p * s.a_depth;
      for (int r = 0; r < rows; ++r) d[r] = src[r][off];
      for (int r = rows; r < MR; ++r) d[r] = 0.0f;
    }
  }

  // Packs columns [j0, j0 + cols) of the strided B over p in [begin, begin
  // + count): dst[(p - begin) * kNR + v], zeros past the last column.
  static void PackColumns(const canonical::MatMulShape& s, const float* b,
                          int64_t j0, int cols, int64_t begin, int64_t count,
                          float* dst) {
    int64_t p = begin;
    if (s.b_depth == 1 && s.b_col != 1 && cols == kNR && kW > 1) {
      // A transposed B (a weight stored output-major: the convolutions'
      // W^T, a dense layer's): each column is contiguous along p, so
      // kW x kW blocks are loaded and transposed in registers, kW
      // consecutive floats per load and per store, instead of one float
      // per strided load.
      for (; p + kW <= begin + count; p += kW) {
        float* d = dst + (p - begin) * kNR;
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          T r[kW];
          V::LoadTransposed(b + p + (j0 + v * kW) * s.b_col, s.b_col, r);
#pragma GCC unroll 16
          for (int i = 0; i < kW; ++i) V::Store(d + i * kNR + v * kW, r[i]);
        }
      }
    }
    for (; p < begin + count; ++p) {
      const float* src = b + p * s.b_depth + j0 * s.b_col;
      float* d = dst + (p - begin) * kNR;
      if (s.b_col == 1 && cols == kNR) {
#pragma GCC unroll 32
        for (int v = 0; v < NV; ++v)
          V::Store(d + v * kW, V::Load(src + v * kW));
        continue;
      }
      if (s.b_col == 1) {
        for (int v = 0; v < cols; ++v) d[v] = src[v];
      } else {
        for (int v = 0; v < cols; ++v) d[v] = src[v * s.b_col];
      }
      for (int v = cols; v < kNR; ++v) d[v] = 0.0f;
    }
  }

  static inline void Zero(T (&acc)[MR][NV]) {
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 32
      for (int v = 0; v < NV; ++v) acc[r][v] = V::Zero();
    }
  }

  static inline void LoadAcc(const float* src, T (&acc)[MR][NV]) {
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 32
      for (int v = 0; v < NV; ++v) acc[r][v] = V::Load(src + r * kNR + v * kW);
    }
  }

  // acc = acc continued by a sequential fma chain over count steps, per
  // lane, with A(r, p) = a(p, r): a packed panel, or an indirect A read in
  // place (GemmPacking::a_base) through its row starts and step offsets.
  template <class AFn>
  __attribute__((always_inline)) static inline void Chain(const AFn& a,
                                                          const float* bp,
                                                          int64_t count,
                                                          T (&acc)[MR][NV]) {
    for (int64_t p = 0; p < count; ++p) {
      T bv[NV];
#pragma GCC unroll 32
      for (int v = 0; v < NV; ++v) bv[v] = V::Load(bp + v * kW);
#pragma GCC unroll 32
      for (int r = 0; r < MR; ++r) {
        const T av = V::Set1(a(p, r));
#pragma GCC unroll 32
        for (int v = 0; v < NV; ++v) acc[r][v] = V::Fma(av, bv[v], acc[r][v]);
      }
      bp += kNR;
    }
  }

  static inline void StoreAcc(float* dst, const T (&acc)[MR][NV]) {
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 32
      for (int v = 0; v < NV; ++v) V::Store(dst + r * kNR + v * kW, acc[r][v]);
    }
  }

  // acc = slot + acc (the earlier partial is the left operand, as in
  // canonical::TreeAccumulator).
  static inline void AddFrom(const float* slot, T (&acc)[MR][NV]) {
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 32
      for (int v = 0; v < NV; ++v) {
        acc[r][v] = V::Add(V::Load(slot + r * kNR + v * kW), acc[r][v]);
      }
    }
  }

  // The canonical tree over one tile's chunk partials, kept as
  // TreeAccumulator's binary counter, per lane: slot b holds a perfect
  // subtree of 2^b chunks. Pushing the partial of chunk `index` merges it
  // with the stored subtrees at the trailing one-bits of index.
  static inline void PushPartial(float* slots, int64_t index,
                                 T (&acc)[MR][NV]) {
    int level = 0;
    for (int64_t bits = index; bits & 1; bits >>= 1, ++level) {
      AddFrom(slots + level * kSlot, acc);
    }
    StoreAcc(slots + level * kSlot, acc);
  }

  // After `count` pushes: folds the remaining subtrees, from the smallest
  // (rightmost) up, into acc.
  static void FoldTree(const float* slots, int64_t count, T (&acc)[MR][NV]) {
    int level = 0;
    while (((count >> level) & 1) == 0) ++level;
    LoadAcc(slots + level * kSlot, acc);
    for (++level; (count >> level) != 0; ++level) {
      if ((count >> level) & 1) AddFrom(slots + level * kSlot, acc);
    }
  }

  // Stores the accumulators of a whole tile (row tile t, column panel p,
  // inside the matrix) straight into a C whose rows are contiguous (c_col
  // == 1; with column blocks, a tile inside one block) and returns true;
  // false, storing nothing, otherwise. Through the tile buffer (WriteTile,
  // a call) the accumulators were stored, reloaded and stored again, and
  // the registers live across the call were saved and restored: on a 256 x
  // 256 x 64 product, most of a 64-step tile's overhead; and a convolution's
  // products by image (C blocks of an image's pixels, 16 x 16 planes and
  // larger hold whole tiles) wrote every tile that way. Same values in the
  // same places.
  __attribute__((always_inline)) static inline bool StoreTile(
      const canonical::MatMulShape& s, const GemmPacking& packing,
      const T (&acc)[MR][NV], int64_t t, int64_t p, float* c) {
    const int64_t i0 = t * MR;
    const int64_t j0 = p * kNR;
    if (s.c_col != 1 || i0 + MR > s.rows || j0 + kNR > s.cols) return false;
    int64_t at = j0;  // column j0's offset in a row of C
    if (packing.c_block > 0) {
      const int64_t in_block = j0 % packing.c_block;
      if (in_block + kNR > packing.c_block) return false;
      at = (j0 / packing.c_block) * packing.c_block_stride + in_block;
    }
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r) {
      float* row = c + RowAt(s, packing, i0 + r) + at;
#pragma GCC unroll 32
      for (int v = 0; v < NV; ++v) V::Store(row + v * kW, acc[r][v]);
    }
    return true;
  }

  // A whole tile of a C whose columns are strided (s.c_col > 1, no column
  // blocks: a convolution's indirect forward or grad_input, a row per pixel
  // and a plane per channel) and whose rows are adjacent in C (pixels of
  // one image), on 8-row tiles of a vector type that stores them by columns
  // from registers (V::StoreColumns8): each column's eight values one run
  // of its plane, straight from the accumulators, instead of through the
  // tile buffer and WriteTile's transposing copy. False otherwise. Same
  // values in the same places. Measured on one core, alternating call by
  // call with the copy (docs/benchmarks.md, "... padded copies by expanding
  // loads"): the 3 x 3 stride-2 8 -> 16 forward at 32 px +10 %, the
  // 16-channel 3 x 3 forward and grad_input at 16 px +4 %; the ResNet-18
  // layers, whose tiles take hundreds of reduction steps, within noise.
  __attribute__((always_inline)) static inline bool StoreTileByColumns(
      const canonical::MatMulShape& s, const GemmPacking& packing,
      const T (&acc)[MR][NV], int64_t t, int64_t p, float* c) {
    if constexpr (MR != 8 || !HasStoreColumns8<V>::value) {
      return false;
    } else {
      const int64_t i0 = t * MR;
      const int64_t j0 = p * kNR;
      if (s.c_col == 1 || packing.c_block > 0 || i0 + MR > s.rows ||
          j0 + kNR > s.cols) {
        return false;
      }
      const int64_t at = RowAt(s, packing, i0);
      for (int r = 1; r < MR; ++r) {
        if (RowAt(s, packing, i0 + r) != at + r) return false;
      }
      StoreAccByColumns(acc, c + at + j0 * s.c_col, s.c_col);
      return true;
    }
  }

  // An 8-row tile's accumulators by columns (V::StoreColumns8): column j's
  // eight values at dst + j * stride, j < kNR. Only for MR == 8 and a V
  // with StoreColumns8 (StoreTileByColumns, Staging::StoreByColumns).
  __attribute__((always_inline)) static inline void StoreAccByColumns(
      const T (&acc)[MR][NV], float* dst, int64_t stride) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      T rows[MR];
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) rows[r] = acc[r][v];
      V::StoreColumns8(rows, dst + v * kW * stride, stride);
    }
  }

  // Copies the MR x kNR tile of row tile t, column panel p into C, clipped
  // to the matrix (and cut at C's column blocks, if any).
  static void WriteTile(const canonical::MatMulShape& s,
                        const GemmPacking& packing, const float* tile,
                        int64_t t, int64_t p, float* c) {
    const int64_t i0 = t * MR;
    const int64_t j0 = p * kNR;
    const int rows = static_cast<int>(std::min<int64_t>(MR, s.rows - i0));
    const int64_t cols = std::min<int64_t>(kNR, s.cols - j0);
    // Where each row of the tile starts in C.
    int64_t row_at[MR];
    for (int r = 0; r < rows; ++r) row_at[r] = RowAt(s, packing, i0 + r);
    if (packing.c_block <= 0) {
      WriteRun(s, tile, rows, row_at, 0, cols, c + j0 * s.c_col);
      return;
    }
    // Runs of columns within one block.
    for (int64_t v0 = 0; v0 < cols;) {
      const int64_t j = j0 + v0;
      const int64_t in_block = j % packing.c_block;
      const int64_t run =
          std::min<int64_t>(cols - v0, packing.c_block - in_block);
      WriteRun(s, tile, rows, row_at, v0, run,
               c + (j / packing.c_block) * packing.c_block_stride +
                   in_block * s.c_col);
      v0 += run;
    }
  }

  // Copies tile columns [v0, v0 + run) of the first `rows` rows to C, whose
  // column v0 is at `base` (row r at base + row_at[r]).
  static void WriteRun(const canonical::MatMulShape& s, const float* tile,
                       int rows, const int64_t* row_at, int64_t v0, int64_t run,
                       float* base) {
    if (s.c_col == 1) {
      if (v0 == 0 && run == kNR) {  // whole tile rows
        for (int r = 0; r < rows; ++r) {
#pragma GCC unroll 32
          for (int v = 0; v < NV; ++v) {
            V::Store(base + row_at[r] + v * kW,
                     V::Load(tile + r * kNR + v * kW));
          }
        }
        return;
      }
      for (int r = 0; r < rows; ++r) {
        std::memcpy(base + row_at[r], tile + r * kNR + v0, run * sizeof(float));
      }
      return;
    }
    // Runs of rows adjacent in C (one image's pixels: a tile whose rows
    // cross an image boundary has two), within which a tile column is
    // contiguous in C: a transposing copy each.
    for (int r0 = 0; r0 < rows;) {
      int r1 = r0 + 1;
      while (r1 < rows && row_at[r1] == row_at[r1 - 1] + 1) ++r1;
      TransposeCopy(tile + r0 * kNR + v0, kNR, r1 - r0, run, base + row_at[r0],
                    s.c_col);
      r0 = r1;
    }
  }
};

// ---------------------------------------------------------------------------
// Depthwise conv2d. The three kernels put kWidth neighbouring input channels
// in the lanes of a vector: a block of channel planes is interleaved
// (kWidth x kWidth blocks transposed in registers, V::Transpose), so every
// lane sees the same geometry and each tap of kWidth outputs is one vector
// load, whatever the stride, the dilation or the plane size. Each lane runs
// its output's canonical chain unchanged.

// dst[q * kWidth + l] = src[l * stride + q] for q < count, l < lanes, and
// +0.0f in the lanes l >= lanes (src is not read there).
template <class V>
void GatherLanes(const float* src, int64_t stride, int64_t count, int lanes,
                 float* dst) {
  using T = typename V::T;
  constexpr int kW = V::kWidth;
  int64_t q = 0;
  if (lanes == kW) {
    for (; q + kW <= count; q += kW) {
      T r[kW];
      V::LoadTransposed(src + q, stride, r);
#pragma GCC unroll 16
      for (int j = 0; j < kW; ++j) V::Store(dst + (q + j) * kW, r[j]);
    }
  } else {
    for (; q + kW <= count; q += kW) {
      T r[kW];
      for (int l = 0; l < kW; ++l) {
        r[l] = l < lanes ? V::Load(src + l * stride + q) : V::Zero();
      }
      V::Transpose(r);
      for (int j = 0; j < kW; ++j) V::Store(dst + (q + j) * kW, r[j]);
    }
  }
  for (; q < count; ++q) {
    float* d = dst + q * kW;
    for (int l = 0; l < lanes; ++l) d[l] = src[l * stride + q];
    for (int l = lanes; l < kW; ++l) d[l] = 0.0f;
  }
}

// The inverse for the real lanes: dst[l * stride + q] = src[q * kWidth + l]
// for q < count, l < lanes.
template <class V>
void ScatterLanes(const float* src, int64_t count, int lanes, float* dst,
                  int64_t stride) {
  using T = typename V::T;
  constexpr int kW = V::kWidth;
  int64_t q = 0;
  for (; q + kW <= count; q += kW) {
    T r[kW];
    V::LoadTransposed(src + q * kW, kW, r);
    if (lanes == kW) {
#pragma GCC unroll 16
      for (int l = 0; l < kW; ++l) V::Store(dst + l * stride + q, r[l]);
    } else {
      for (int l = 0; l < lanes; ++l) V::Store(dst + l * stride + q, r[l]);
    }
  }
  for (; q < count; ++q) {
    for (int l = 0; l < lanes; ++l) dst[l * stride + q] = src[q * kW + l];
  }
}

// Continues the chains of kOuts outputs over the taps (kh, kw) in order:
// acc[u] = fma(p[kh * tap_row + kw * tap_col + u * out_step], wt[kh * k_w +
// kw], acc[u]), each a vector of kWidth channels. Several outputs per pass
// keep that many independent chains in flight.
template <class V, int kOuts>
inline void TapChains(const float* p, int64_t k_h, int64_t k_w, int64_t tap_row,
                      int64_t tap_col, int64_t out_step, const float* wt,
                      typename V::T (&acc)[kOuts]) {
  constexpr int kW = V::kWidth;
  for (int64_t kh = 0; kh < k_h; ++kh) {
    for (int64_t kw = 0; kw < k_w; ++kw) {
      const typename V::T wv = V::Load(wt + (kh * k_w + kw) * kW);
      const float* tap = p + kh * tap_row + kw * tap_col;
#pragma GCC unroll 8
      for (int u = 0; u < kOuts; ++u) {
        acc[u] = V::Fma(V::Load(tap + u * out_step), wv, acc[u]);
      }
    }
  }
}

// Outputs per pass of the depthwise forward and grad_input loops.
inline constexpr int kDepthwiseOuts = 4;

// Depthwise conv2d forward (DepthwiseConv2dForward, gemm.h). A task is one
// image and one block of kWidth input channels: the block is interleaved
// into a zero-padded plane (rows x row_len positions of kWidth floats) that
// covers every tap of every output, then each output is one fma chain from
// +0.0f over the taps (kh, kw) in order, per lane; the outputs, interleaved
// likewise, are transposed back into y's planes.
template <class V>
void DepthwiseForward(const spatial::Conv2dShape& s, const float* x,
                      const float* w, float* y, ThreadPool* pool) {
  using T = typename V::T;
  constexpr int kW = V::kWidth;
  constexpr int kU = kDepthwiseOuts;
  const int64_t out_h = spatial::Conv2dOutH(s);
  const int64_t out_w = spatial::Conv2dOutW(s);
  const int64_t pix = out_h * out_w;
  const int64_t mult = s.c_out / s.groups;
  const int64_t kk = s.k_h * s.k_w;
  if (pix <= 0 || mult <= 0) return;
  const int64_t hw = s.h * s.w;
  const int64_t rows =
      (out_h - 1) * s.stride_h + (s.k_h - 1) * s.dilation_h + 1;
  const int64_t row_len =
      (out_w - 1) * s.stride_w + (s.k_w - 1) * s.dilation_w + 1;
  const int64_t plane_size = rows * row_len * kW;
  const int64_t flat_size = std::max(hw, pix) * kW;
  const int64_t blocks = (s.c_in + kW - 1) / kW;
  auto task = [&](int64_t i) {  // i = n * blocks + block
    const int64_t n = i / blocks;
    const int64_t c0 = i % blocks * kW;
    const int lanes = static_cast<int>(std::min<int64_t>(kW, s.c_in - c0));
    AlignedFloats buf(plane_size + flat_size + kk * kW);
    float* padded = buf.get();
    float* flat = padded + plane_size;  // x's block, then one y block
    float* wt = flat + flat_size;
    GatherLanes<V>(x + (n * s.c_in + c0) * hw, hw, hw, lanes, flat);
    // Padded column c holds input column c - pad_left: columns [lo, hi) of
    // a row inside the input are x's, the rest zeros.
    const int64_t lo = std::min<int64_t>(s.pad_left, row_len);
    const int64_t hi = std::clamp<int64_t>(s.pad_left + s.w, lo, row_len);
    for (int64_t r = 0; r < rows; ++r) {
      float* d = padded + r * row_len * kW;
      const int64_t ih = r - s.pad_top;
      if (ih < 0 || ih >= s.h) {
        std::fill(d, d + row_len * kW, 0.0f);
        continue;
      }
      std::fill(d, d + lo * kW, 0.0f);
      if (hi > lo) {
        std::copy(flat + (ih * s.w + lo - s.pad_left) * kW,
                  flat + (ih * s.w + hi - s.pad_left) * kW, d + lo * kW);
      }
      std::fill(d + hi * kW, d + row_len * kW, 0.0f);
    }
    const int64_t tap_row = s.dilation_h * row_len * kW;
    const int64_t tap_col = s.dilation_w * kW;
    const int64_t out_step = s.stride_w * kW;
    for (int64_t m = 0; m < mult; ++m) {
      // wt[t * kW + l] = w[((c0 + l) * mult + m) * kk + t]
      GatherLanes<V>(w + (c0 * mult + m) * kk, mult * kk, kk, lanes, wt);
      for (int64_t oh = 0; oh < out_h; ++oh) {
        const float* row0 = padded + oh * s.stride_h * row_len * kW;
        float* out = flat + oh * out_w * kW;
        int64_t ow = 0;
        for (; ow + kU <= out_w; ow += kU) {
          T acc[kU];
          for (int u = 0; u < kU; ++u) acc[u] = V::Zero();
          TapChains<V, kU>(row0 + ow * out_step, s.k_h, s.k_w, tap_row, tap_col,
                           out_step, wt, acc);
          for (int u = 0; u < kU; ++u) V::Store(out + (ow + u) * kW, acc[u]);
        }
        for (; ow < out_w; ++ow) {
          T acc[1] = {V::Zero()};
          TapChains<V, 1>(row0 + ow * out_step, s.k_h, s.k_w, tap_row, tap_col,
                          out_step, wt, acc);
          V::Store(out + ow * kW, acc[0]);
        }
      }
      ScatterLanes<V>(flat, pix, lanes, y + (n * s.c_out + c0 * mult + m) * pix,
                      mult * pix);
    }
  };
  if (s.n * s.c_in * mult * pix * kk < kMinParallelFmas) pool = nullptr;
  For(pool, s.n * blocks, task);
}

// Depthwise conv2d grad_input (DepthwiseConv2dGradInput, gemm.h). A task is
// one image and one block of kWidth input channels. The dy plane of each
// output channel j of the block is spread, interleaved, into a
// zero-stuffed, zero-padded plane in which the tap (kh, kw) of dx[ih, iw]
// sits at [ih + (KH-1-kh) dh, iw + (KW-1-kw) dw], so every tap, stride holes
// and padding included, is one vector load; each dx element is then one fma
// chain from +0.0f over its terms (j, kh, kw) in order, per lane.
template <class V>
void DepthwiseGradInput(const spatial::Conv2dShape& s, const float* dy,
                        const float* w, float* dx, ThreadPool* pool) {
  using T = typename V::T;
  constexpr int kW = V::kWidth;
  constexpr int kU = kDepthwiseOuts;
  const int64_t out_h = spatial::Conv2dOutH(s);
  const int64_t out_w = spatial::Conv2dOutW(s);
  const int64_t pix = out_h * out_w;
  const int64_t mult = s.c_out / s.groups;
  const int64_t kk = s.k_h * s.k_w;
  if (s.h <= 0 || s.w <= 0) return;
  const int64_t hw = s.h * s.w;
  const int64_t span_h = (s.k_h - 1) * s.dilation_h;
  const int64_t span_w = (s.k_w - 1) * s.dilation_w;
  const int64_t rows = s.h + span_h;
  const int64_t row_len = s.w + span_w;
  // The dy row / column each stuffed row / column holds, or -1.
  std::vector<int64_t> row_src(rows), col_src(row_len);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t th = r - span_h + s.pad_top;
    row_src[r] = th >= 0 && th % s.stride_h == 0 && th / s.stride_h < out_h
                     ? th / s.stride_h
                     : -1;
  }
  for (int64_t c = 0; c < row_len; ++c) {
    const int64_t tw = c - span_w + s.pad_left;
    col_src[c] = tw >= 0 && tw % s.stride_w == 0 && tw / s.stride_w < out_w
                     ? tw / s.stride_w
                     : -1;
  }
  const int64_t plane_size = rows * row_len * kW;
  const int64_t flat_size = std::max(hw, pix) * kW;
  const int64_t blocks = (s.c_in + kW - 1) / kW;
  auto task = [&](int64_t i) {  // i = n * blocks + block
    const int64_t n = i / blocks;
    const int64_t c0 = i % blocks * kW;
    const int lanes = static_cast<int>(std::min<int64_t>(kW, s.c_in - c0));
    AlignedFloats buf(mult * (plane_size + kk * kW) + flat_size);
    float* stuffed = buf.get();
    float* wt = stuffed + mult * plane_size;
    float* flat = wt + mult * kk * kW;  // one dy block, then dx's block
    for (int64_t j = 0; j < mult; ++j) {
      GatherLanes<V>(dy + (n * s.c_out + c0 * mult + j) * pix, mult * pix, pix,
                     lanes, flat);
      GatherLanes<V>(w + (c0 * mult + j) * kk, mult * kk, kk, lanes,
                     wt + j * kk * kW);
      float* plane_j = stuffed + j * plane_size;
      for (int64_t r = 0; r < rows; ++r) {
        float* d = plane_j + r * row_len * kW;
        if (row_src[r] < 0) {
          std::fill(d, d + row_len * kW, 0.0f);
          continue;
        }
        const float* sr = flat + row_src[r] * out_w * kW;
        for (int64_t c = 0; c < row_len; ++c) {
          V::Store(d + c * kW,
                   col_src[c] >= 0 ? V::Load(sr + col_src[c] * kW) : V::Zero());
        }
      }
    }
    const int64_t tap_row = -s.dilation_h * row_len * kW;
    const int64_t tap_col = -s.dilation_w * kW;
    for (int64_t ih = 0; ih < s.h; ++ih) {
      const float* base = stuffed + ((ih + span_h) * row_len + span_w) * kW;
      float* out = flat + ih * s.w * kW;
      int64_t iw = 0;
      for (; iw + kU <= s.w; iw += kU) {
        T acc[kU];
        for (int u = 0; u < kU; ++u) acc[u] = V::Zero();
        for (int64_t j = 0; j < mult; ++j) {
          TapChains<V, kU>(base + j * plane_size + iw * kW, s.k_h, s.k_w,
                           tap_row, tap_col, kW, wt + j * kk * kW, acc);
        }
        for (int u = 0; u < kU; ++u) V::Store(out + (iw + u) * kW, acc[u]);
      }
      for (; iw < s.w; ++iw) {
        T acc[1] = {V::Zero()};
        for (int64_t j = 0; j < mult; ++j) {
          TapChains<V, 1>(base + j * plane_size + iw * kW, s.k_h, s.k_w,
                          tap_row, tap_col, kW, wt + j * kk * kW, acc);
        }
        V::Store(out + iw * kW, acc[0]);
      }
    }
    ScatterLanes<V>(flat, hw, lanes, dx + (n * s.c_in + c0) * hw, hw);
  };
  if (s.n * s.c_in * hw * mult * kk < kMinParallelFmas) pool = nullptr;
  For(pool, s.n * blocks, task);
}

// Depthwise conv2d grad_weight (DepthwiseConv2dGradWeight, gemm.h): lanes =
// kWidth input channels, over channel-interleaved copies of x (zero-padded
// planes) and dy, so that one term of kWidth outputs is one fma of two
// vector loads. The copies are block-major: a channel block's x and dy are
// contiguous, so a task streams whole cache lines of its own block (with
// all channels of a pixel side by side, a task of one block read kWidth
// floats of every pixel's cpad, and on two threads each core pulled most
// of both copies' lines). Each output's terms (n, oh, ow) run in order in
// chunks of `chunk` from +0.0f, and the chunk partials enter the canonical tree
// as in GemmDriver (a binary counter of perfect subtrees per lane). A task is
// one (j, channel block) and up to kMaxTapsPerTask taps, all in registers.
template <class V>
void DepthwiseGradWeight(const spatial::Conv2dShape& s, const float* x,
                         const float* dy, float* dw, int64_t chunk,
                         ThreadPool* pool) {
  using T = typename V::T;
  constexpr int kW = V::kWidth;
  constexpr int kMaxTapsPerTask = 9;
  const int64_t out_h = spatial::Conv2dOutH(s);
  const int64_t out_w = spatial::Conv2dOutW(s);
  const int64_t pix = out_h * out_w;
  const int64_t mult = s.c_out / s.groups;
  const int64_t kk = s.k_h * s.k_w;
  const int64_t terms = s.n * pix;  // > 0 (the caller handles none)
  const int64_t hw = s.h * s.w;
  const int64_t blocks = (s.c_in + kW - 1) / kW;
  const int64_t cpad = blocks * kW;
  const int64_t rows =
      (out_h - 1) * s.stride_h + (s.k_h - 1) * s.dilation_h + 1;
  const int64_t row_len =
      (out_w - 1) * s.stride_w + (s.k_w - 1) * s.dilation_w + 1;
  // xt[b][n][r][c][l]: x[n, b * kW + l, r - top, c - left] or zero;
  // dyt[j][b][n][p][l]: dy[n, (b * kW + l) * mult + j, p] (zero for
  // channels >= c_in).
  AlignedFloats xt(s.n * rows * row_len * cpad);
  AlignedFloats dyt(mult * s.n * pix * cpad);
  // Per (image, channel block): the block interleaved in registers, then
  // placed in its block's copy.
  auto fill = [&](int64_t i) {
    const int64_t n = i / blocks;
    const int64_t b = i % blocks;
    const int64_t c0 = b * kW;
    const int lanes = static_cast<int>(std::min<int64_t>(kW, s.c_in - c0));
    AlignedFloats flat_buf(std::max(hw, pix) * kW);
    float* flat = flat_buf.get();
    GatherLanes<V>(x + (n * s.c_in + c0) * hw, hw, hw, lanes, flat);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t ih = r - s.pad_top;
      float* d = xt.get() + ((b * s.n + n) * rows + r) * row_len * kW;
      for (int64_t c = 0; c < row_len; ++c) {
        const int64_t iw = c - s.pad_left;
        const bool inside = ih >= 0 && ih < s.h && iw >= 0 && iw < s.w;
        V::Store(d + c * kW,
                 inside ? V::Load(flat + (ih * s.w + iw) * kW) : V::Zero());
      }
    }
    for (int64_t j = 0; j < mult; ++j) {
      GatherLanes<V>(dy + (n * s.c_out + c0 * mult + j) * pix, mult * pix, pix,
                     lanes, flat);
      float* d = dyt.get() + ((j * blocks + b) * s.n + n) * pix * kW;
      for (int64_t p = 0; p < pix; ++p) {
        V::Store(d + p * kW, V::Load(flat + p * kW));
      }
    }
  };
  For(pool, s.n * blocks, fill);

  const int64_t num_chunks = 1 + (terms - 1) / chunk;
  int levels = 1;
  while ((int64_t{1} << levels) <= num_chunks) ++levels;
  const int64_t tap_groups = (kk + kMaxTapsPerTask - 1) / kMaxTapsPerTask;
  const int64_t group_taps = (kk + tap_groups - 1) / tap_groups;
  auto task = [&](int64_t id) {  // (j, channel block, tap group)
    const int64_t g = id % tap_groups;
    const int64_t b = id / tap_groups % blocks;
    const int64_t j = id / tap_groups / blocks;
    const int64_t t0 = g * group_taps;
    const int nt = static_cast<int>(std::min<int64_t>(group_taps, kk - t0));
    int64_t offset[kMaxTapsPerTask];  // of each tap in xt, from (oh, ow)'s
    for (int t = 0; t < nt; ++t) {
      const int64_t kh = (t0 + t) / s.k_w;
      const int64_t kw = (t0 + t) % s.k_w;
      offset[t] = (kh * s.dilation_h * row_len + kw * s.dilation_w) * kW;
    }
    AlignedFloats slots(nt * levels * kW);
    T acc[kMaxTapsPerTask];
    for (int t = 0; t < nt; ++t) acc[t] = V::Zero();
    int64_t left = std::min(chunk, terms);  // terms left in this chunk
    int64_t index = 0;                      // chunks finished
    const float* dy_j = dyt.get() + (j * blocks + b) * s.n * pix * kW;
    const float* x_b = xt.get() + b * s.n * rows * row_len * kW;
    for (int64_t n = 0; n < s.n; ++n) {
      for (int64_t oh = 0; oh < out_h; ++oh) {
        const float* dyv_p = dy_j + (n * pix + oh * out_w) * kW;
        const float* x_p = x_b + ((n * rows + oh * s.stride_h) * row_len) * kW;
        for (int64_t ow = 0; ow < out_w; ++ow) {
          const T dyv = V::Load(dyv_p + ow * kW);
          const float* xb = x_p + ow * s.stride_w * kW;
          for (int t = 0; t < nt; ++t) {
            acc[t] = V::Fma(dyv, V::Load(xb + offset[t]), acc[t]);
          }
          if (--left == 0) {
            for (int t = 0; t < nt; ++t) {
              // PushPartial of GemmDriver, one vector.
              float* st = slots.get() + t * levels * kW;
              int level = 0;
              for (int64_t bits = index; bits & 1; bits >>= 1, ++level) {
                acc[t] = V::Add(V::Load(st + level * kW), acc[t]);
              }
              V::Store(st + level * kW, acc[t]);
              acc[t] = V::Zero();
            }
            ++index;
            left = std::min(chunk, terms - index * chunk);
          }
        }
      }
    }
    alignas(64) float lanes[kW];
    for (int t = 0; t < nt; ++t) {
      // FoldTree of GemmDriver over `index` (= num_chunks) partials.
      const float* st = slots.get() + t * levels * kW;
      int level = 0;
      while (((index >> level) & 1) == 0) ++level;
      T r = V::Load(st + level * kW);
      for (++level; (index >> level) != 0; ++level) {
        if ((index >> level) & 1) r = V::Add(V::Load(st + level * kW), r);
      }
      V::Store(lanes, r);
      for (int l = 0; l < kW && b * kW + l < s.c_in; ++l) {
        dw[((b * kW + l) * mult + j) * kk + t0 + t] = lanes[l];
      }
    }
  };
  if (s.n * s.c_out * pix * kk < kMinParallelFmas) pool = nullptr;
  For(pool, mult * blocks * tap_groups, task);
}

}  // namespace lockstep::kernels::cpu_internal::LS_GEMM_ISA_NS
