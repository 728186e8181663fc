// The GEMM driver and micro-kernel, shared by the per-ISA translation units
// (gemm_scalar.cc, gemm_avx2.cc, gemm_avx512.cc). Not a public header.
//
// Each includer defines LS_GEMM_ISA_NS to a name of its own before
// including this file, so that every function here (compiled with that
// unit's -m flags) lives in a distinct namespace and the linker can never
// pick an AVX-512 copy for the scalar path. The vector type V supplies:
//   T, kWidth, Zero(), Load(p), Store(p, v), Set1(x), Fma(a, b, c) (fused,
//   a * b + c), Add(a, b).
#ifndef LS_GEMM_ISA_NS
#error "define LS_GEMM_ISA_NS before including gemm_impl.h"
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "kernels/cpu/thread_pool.h"
#include "kernels/ops/dense.h"

namespace lockstep::kernels::cpu_internal::LS_GEMM_ISA_NS {

// 64-byte aligned float storage (no std::vector: see the file comment).
class AlignedFloats {
 public:
  explicit AlignedFloats(int64_t count) {
    const size_t bytes =
        ((static_cast<size_t>(count) * sizeof(float) + 63) / 64) * 64;
    p_ = static_cast<float*>(std::aligned_alloc(64, bytes == 0 ? 64 : bytes));
  }
  ~AlignedFloats() { std::free(p_); }
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  float* get() const { return p_; }

 private:
  float* p_;
};

template <class F>
void For(ThreadPool* pool, int64_t n, F& f) {
  ParallelForRaw(
      pool, n, [](void* ctx, int64_t i) { (*static_cast<F*>(ctx))(i); }, &f);
}

template <class V, int MR, int NV>
class GemmDriver {
 public:
  using T = typename V::T;
  static constexpr int kW = V::kWidth;
  static constexpr int kNR = NV * kW;
  // Row tiles per task: a task reuses its packed B panel over this many.
  static constexpr int64_t kRowTilesPerTask = 16;

  static void Run(const canonical::MatMulShape& s, const float* a,
                  const float* b, float* c, int64_t chunk, ThreadPool* pool) {
    const int64_t m = s.rows;
    const int64_t n = s.cols;
    const int64_t k = s.depth;
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {  // empty reduction: +0.0f
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) c[i * s.c_row + j * s.c_col] = 0.0f;
      }
      return;
    }
    const int64_t m_tiles = (m + MR - 1) / MR;
    const int64_t n_panels = (n + kNR - 1) / kNR;
    AlignedFloats a_packed(m_tiles * k * MR);
    AlignedFloats b_packed(n_panels * k * kNR);
    float* ap = a_packed.get();
    float* bp = b_packed.get();

    auto pack_a = [&](int64_t t) {
      float* dst = ap + t * k * MR;
      for (int r = 0; r < MR; ++r) {
        const int64_t i = t * MR + r;
        if (i < m) {
          const float* src = a + i * s.a_row;
          for (int64_t p = 0; p < k; ++p) dst[p * MR + r] = src[p * s.a_depth];
        } else {
          for (int64_t p = 0; p < k; ++p) dst[p * MR + r] = 0.0f;
        }
      }
    };
    For(pool, m_tiles, pack_a);
    auto pack_b = [&](int64_t t) {
      float* dst = bp + t * k * kNR;
      const int64_t j0 = t * kNR;
      const int64_t cols = std::min<int64_t>(kNR, n - j0);
      for (int64_t p = 0; p < k; ++p) {
        const float* src = b + p * s.b_depth + j0 * s.b_col;
        float* d = dst + p * kNR;
        if (s.b_col == 1) {
          for (int64_t v = 0; v < cols; ++v) d[v] = src[v];
        } else {
          for (int64_t v = 0; v < cols; ++v) d[v] = src[v * s.b_col];
        }
        for (int64_t v = cols; v < kNR; ++v) d[v] = 0.0f;
      }
    };
    For(pool, n_panels, pack_b);

    const int64_t num_chunks = chunk >= k ? 1 : (k + chunk - 1) / chunk;
    int levels = 1;
    while ((int64_t{1} << levels) <= num_chunks) ++levels;
    const int64_t groups = (m_tiles + kRowTilesPerTask - 1) / kRowTilesPerTask;
    auto run = [&](int64_t task) {
      const int64_t panel = task / groups;
      const int64_t group = task % groups;
      AlignedFloats slots(levels * MR * kNR);
      alignas(64) float tile[MR * kNR];
      const int64_t t_end =
          std::min<int64_t>(m_tiles, (group + 1) * kRowTilesPerTask);
      const int64_t j0 = panel * kNR;
      const int64_t cols = std::min<int64_t>(kNR, n - j0);
      for (int64_t t = group * kRowTilesPerTask; t < t_end; ++t) {
        Tile(ap + t * k * MR, bp + panel * k * kNR, k, chunk, slots.get(),
             tile);
        const int64_t i0 = t * MR;
        const int rows = static_cast<int>(std::min<int64_t>(MR, m - i0));
        for (int r = 0; r < rows; ++r) {
          float* dst = c + (i0 + r) * s.c_row + j0 * s.c_col;
          const float* src = tile + r * kNR;
          if (s.c_col == 1) {
            for (int64_t v = 0; v < cols; ++v) dst[v] = src[v];
          } else {
            for (int64_t v = 0; v < cols; ++v) dst[v * s.c_col] = src[v];
          }
        }
      }
    };
    For(pool, n_panels * groups, run);
  }

 private:
  // acc = sequential fma chain over count steps from +0.0f, per lane.
  static inline void Chain(const float* ap, const float* bp, int64_t count,
                           T (&acc)[MR][NV]) {
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 32
      for (int v = 0; v < NV; ++v) acc[r][v] = V::Zero();
    }
    for (int64_t p = 0; p < count; ++p) {
      T bv[NV];
#pragma GCC unroll 32
      for (int v = 0; v < NV; ++v) bv[v] = V::Load(bp + v * kW);
#pragma GCC unroll 32
      for (int r = 0; r < MR; ++r) {
        const T av = V::Set1(ap[r]);
#pragma GCC unroll 32
        for (int v = 0; v < NV; ++v) acc[r][v] = V::Fma(av, bv[v], acc[r][v]);
      }
      ap += MR;
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

  // One MR x kNR tile of C into out: chunk chains, then the canonical tree.
  // The tree is TreeAccumulator's binary counter, per lane: pushing the
  // partial of chunk c merges it with the stored perfect subtrees at the
  // trailing one-bits of c; slot b holds the subtree of 2^b chunks.
  static void Tile(const float* ap, const float* bp, int64_t k, int64_t chunk,
                   float* slots, float* out) {
    T acc[MR][NV];
    if (k <= chunk) {
      Chain(ap, bp, k, acc);
      StoreAcc(out, acc);
      return;
    }
    constexpr int64_t kSlot = MR * kNR;
    int64_t c = 0;
    for (int64_t begin = 0; begin < k; begin += chunk, ++c) {
      const int64_t count = std::min(chunk, k - begin);
      Chain(ap + begin * MR, bp + begin * kNR, count, acc);
      int level = 0;
      for (int64_t bits = c; bits & 1; bits >>= 1, ++level) {
        AddFrom(slots + level * kSlot, acc);
      }
      StoreAcc(slots + level * kSlot, acc);
    }
    // Fold the remaining subtrees from the smallest (rightmost) up.
    int level = 0;
    while (((c >> level) & 1) == 0) ++level;
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 32
      for (int v = 0; v < NV; ++v) {
        acc[r][v] = V::Load(slots + level * kSlot + r * kNR + v * kW);
      }
    }
    for (++level; (c >> level) != 0; ++level) {
      if ((c >> level) & 1) AddFrom(slots + level * kSlot, acc);
    }
    StoreAcc(out, acc);
  }
};

}  // namespace lockstep::kernels::cpu_internal::LS_GEMM_ISA_NS
