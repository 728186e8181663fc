// The lane kernels of lane_kernels.h, shared by the per-ISA translation
// units (lane_kernels_scalar.cc, lane_kernels_avx2.cc,
// lane_kernels_avx512.cc). Not a public header.
//
// Each includer defines LS_LANE_ISA_NS to a name of its own before including
// this file, so every function here (compiled with that unit's -m flags)
// lives in a distinct namespace and the linker can never pick a copy built
// for another ISA; for the same reason nothing here calls an inline function
// or template of a shared header on floats. The vector type V supplies:
//   T (floats), M (lane mask), I (int32 lanes), kWidth,
//   Zero(), Set1(f), Load(p), Store(p, v), Add(a, b), Sub(a, b), Mul(a, b),
//   Div(a, b), Fma(a, b, c)   a * b + c rounded once,
//   Replaces(best, v)    v > best, or v is NaN and best is not,
//   Select(m, a, b)      b where m, else a (bit copies); SelectI likewise,
//   Set1I(k), StoreI(p, v),
//   Transpose(rows)      rows[kWidth] as a kWidth x kWidth matrix, in place,
//   LoadTransposed(p, stride, rows)   rows[j] lane l = p[l * stride + j]:
//                        kWidth loads and Transpose in one.
#ifndef LS_LANE_ISA_NS
#error "define LS_LANE_ISA_NS before including lane_kernels_impl.h"
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/lane_kernels.h"
#include "kernels/cpu/thread_pool.h"

namespace lockstep::kernels::cpu_internal::LS_LANE_ISA_NS {

// Length of one canonical chain (canonical::kChunk; part of the canonical
// arithmetic, checked against it in lane_kernels.cc).
inline constexpr int64_t kLaneChunk = 256;
// Tasks smaller than this many elements run on the calling thread.
inline constexpr int64_t kMinParallelElements = int64_t{1} << 15;

inline int64_t MinI(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t MaxI(int64_t a, int64_t b) { return a > b ? a : b; }

// v into p: with `stream`, a non-temporal store where p is aligned to the
// vector (V::Fence after the pass orders them), else an ordinary one.
template <class V>
void StoreOut(float* p, typename V::T v, bool stream) {
  if (stream &&
      reinterpret_cast<uintptr_t>(p) % (sizeof(float) * V::kWidth) == 0) {
    V::Stream(p, v);
  } else {
    V::Store(p, v);
  }
}

template <class F>
void For(ThreadPool* pool, int64_t n, F& f) {
  ParallelForRaw(
      pool, n, [](void* ctx, int64_t i) { (*static_cast<F*>(ctx))(i); }, &f);
}

// Owned scratch memory (no std::vector: see the file comment).
template <class E>
class Scratch {
 public:
  explicit Scratch(int64_t count)
      : p_(static_cast<E*>(std::malloc(
            static_cast<size_t>(count > 0 ? count : 1) * sizeof(E)))) {}
  ~Scratch() { std::free(p_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  E* get() const { return p_; }

 private:
  E* p_;
};

// The width-1 vector: the scalar ISA's, and every ISA's tails.
struct ScalarLanes {
  using T = float;
  using M = bool;
  using I = int32_t;
  static constexpr int kWidth = 1;
  static T Zero() { return 0.0f; }
  static T Load(const float* p) { return *p; }
  static void Store(float* p, T v) { *p = v; }
  static void Stream(float* p, T v) { *p = v; }
  static void Fence() {}
  static T Add(T a, T b) { return a + b; }
  static T Sub(T a, T b) { return a - b; }
  static T Mul(T a, T b) { return a * b; }
  static T Div(T a, T b) { return a / b; }
  static T Fma(T a, T b, T c) { return __builtin_fmaf(a, b, c); }
  static T Sqrt(T a) { return __builtin_sqrtf(a); }
  static T Set1(float v) { return v; }
  static M Replaces(T best, T v) {
    return v > best || (v != v && best == best);
  }
  static T Select(M m, T a, T b) { return m ? b : a; }
  static M Greater(T a, T b) { return a > b; }
  static M AndM(M a, M b) { return a && b; }
  static I SelectI(M m, I a, I b) { return m ? b : a; }
  static I Set1I(int32_t k) { return k; }
  static void StoreI(int32_t* p, I v) { *p = v; }
  static void Transpose(T*) {}
  static void LoadTransposed(const float* p, int64_t, T* r) { r[0] = *p; }
};

// The canonical pairwise tree (canonical::TreeAccumulator) on whole
// vectors: every lane's reduction has the same number of chunks, hence the
// same tree.
template <class V>
struct TreeNodes;

template <class V>
class VecTree {
 public:
  using T = typename V::T;
  void Push(T v) { PushNode(v, 1); }
  // Pushes a finished subtree of `size` chunks (a power of two) as Push
  // would have merged it: exact when the tree's nodes all cover at least
  // `size` chunks (or `size` is below the last node's, as when a cut-off
  // tree's nodes are appended in order).
  void PushNode(T v, int64_t size) {
    while (depth_ > 0 && size_[depth_ - 1] == size) {
      v = V::Add(value_[depth_ - 1], v);
      size *= 2;
      --depth_;
    }
    value_[depth_] = v;
    size_[depth_] = size;
    ++depth_;
  }
  // The nodes, as plain data, and back: a tree built over an aligned run of
  // chunks appended to the tree of the chunks before it.
  void Save(TreeNodes<V>* out) const;
  void Append(const TreeNodes<V>& in);
  T Result() const {
    if (depth_ == 0) return V::Zero();
    T acc = value_[depth_ - 1];
    for (int d = depth_ - 2; d >= 0; --d) acc = V::Add(value_[d], acc);
    return acc;
  }

 private:
  T value_[64];
  int64_t size_[64];
  int depth_ = 0;
};

// A VecTree's nodes, largest first.
template <class V>
struct TreeNodes {
  int depth;
  int64_t size[64];
  float value[64 * V::kWidth];
};

template <class V>
void VecTree<V>::Save(TreeNodes<V>* out) const {
  out->depth = depth_;
  for (int d = 0; d < depth_; ++d) {
    alignas(64) float buf[V::kWidth];
    V::Store(buf, value_[d]);
    std::memcpy(out->value + d * V::kWidth, buf, sizeof(buf));
    out->size[d] = size_[d];
  }
}

template <class V>
void VecTree<V>::Append(const TreeNodes<V>& in) {
  for (int d = 0; d < in.depth; ++d) {
    alignas(64) float buf[V::kWidth];
    std::memcpy(buf, in.value + d * V::kWidth, sizeof(buf));
    PushNode(V::Load(buf), in.size[d]);
  }
}

// Lanes [0, lanes) of a vector from p, +0.0f in the others (p is read only
// there); and the inverse store.
template <class V>
typename V::T LoadLanes(const float* p, int lanes) {
  alignas(64) float buf[V::kWidth];
  for (int l = 0; l < V::kWidth; ++l) buf[l] = l < lanes ? p[l] : 0.0f;
  return V::Load(buf);
}
template <class V>
void StoreLanes(float* p, typename V::T v, int lanes) {
  alignas(64) float buf[V::kWidth];
  V::Store(buf, v);
  for (int l = 0; l < lanes; ++l) p[l] = buf[l];
}

// r[j] lane l = p[l * stride + j] for the first `lanes` lanes, +0.0f in
// the lanes past them (kPartial): one LoadTransposed for a whole block,
// the loads and Transpose for a partial one.
template <class V, bool kPartial>
__attribute__((always_inline)) inline void LoadRowsTransposed(
    const float* p, int64_t stride, int lanes, typename V::T* r) {
  if constexpr (kPartial) {
    for (int l = 0; l < V::kWidth; ++l) {
      r[l] = l < lanes ? V::Load(p + l * stride) : V::Zero();
    }
    V::Transpose(r);
  } else {
    V::LoadTransposed(p, stride, r);
  }
}

// ---------------------------------------------------------------------------
// Layout changes between W planes and one interleaved array.

// dst[q * W + l] = src[l * stride + q] for q < count, l < W: W x W blocks
// transposed in registers, the rest one float at a time.
template <class V>
void Interleave(const float* src, int64_t stride, int64_t count, float* dst) {
  using T = typename V::T;
  constexpr int W = V::kWidth;
  int64_t q = 0;
  for (; q + W <= count; q += W) {
    T r[W];
    V::LoadTransposed(src + q, stride, r);
    for (int j = 0; j < W; ++j) V::Store(dst + (q + j) * W, r[j]);
  }
  for (; q < count; ++q) {
    for (int l = 0; l < W; ++l) dst[q * W + l] = src[l * stride + q];
  }
}

// The inverse: dst[l * stride + q] = src[q * W + l].
template <class V>
void Deinterleave(const float* src, int64_t count, float* dst, int64_t stride) {
  using T = typename V::T;
  constexpr int W = V::kWidth;
  int64_t q = 0;
  for (; q + W <= count; q += W) {
    T r[W];
    V::LoadTransposed(src + q * W, W, r);
    for (int l = 0; l < W; ++l) V::Store(dst + l * stride + q, r[l]);
  }
  for (; q < count; ++q) {
    for (int l = 0; l < W; ++l) dst[l * stride + q] = src[q * W + l];
  }
}

// ---------------------------------------------------------------------------
// bias_add.grad

// a[i] = a[i] + b[i] for i < width (in lanes of V, then one at a time).
template <class V>
void AddInto(float* a, const float* b, int64_t width) {
  constexpr int W = V::kWidth;
  int64_t i = 0;
  for (; i + W <= width; i += W) {
    V::Store(a + i, V::Add(V::Load(a + i), V::Load(b + i)));
  }
  for (; i < width; ++i) a[i] = a[i] + b[i];
}

// The canonical pairwise tree over whole rows of `width` chunk partials
// (one per output): canonical::TreeAccumulator, elementwise.
class RowTree {
 public:
  RowTree(int64_t width, int64_t chunks) : width_(width), levels_(1) {
    while ((int64_t{1} << (levels_ - 1)) < chunks) ++levels_;
    storage_ = static_cast<float*>(std::malloc(
        static_cast<size_t>(MaxI(1, levels_ * width)) * sizeof(float)));
  }
  ~RowTree() { std::free(storage_); }
  RowTree(const RowTree&) = delete;
  RowTree& operator=(const RowTree&) = delete;

  // Pushes the chunk partials v[0 .. width) (clobbers v).
  void Push(float* v) {
    int64_t size = 1;
    while (depth_ > 0 && size_[depth_ - 1] == size) {
      float* left = Level(depth_ - 1);  // v = left + v
      for (int64_t i = 0; i < width_; ++i) left[i] = left[i] + v[i];
      std::memcpy(v, left, static_cast<size_t>(width_) * sizeof(float));
      size *= 2;
      --depth_;
    }
    std::memcpy(Level(depth_), v, static_cast<size_t>(width_) * sizeof(float));
    size_[depth_] = size;
    ++depth_;
  }
  // The trees' values into out[0 .. width); +0.0f when nothing was pushed.
  void Result(float* out) const {
    if (depth_ == 0) {
      for (int64_t i = 0; i < width_; ++i) out[i] = 0.0f;
      return;
    }
    std::memcpy(out, Level(depth_ - 1),
                static_cast<size_t>(width_) * sizeof(float));
    for (int d = depth_ - 2; d >= 0; --d) {
      const float* left = Level(d);  // acc = left + acc
      for (int64_t i = 0; i < width_; ++i) out[i] = left[i] + out[i];
    }
  }

 private:
  float* Level(int d) const { return storage_ + d * width_; }
  int64_t width_;
  int levels_;
  float* storage_;
  int64_t size_[64];
  int depth_ = 0;
};

// Channels [c0, c1) with spatial == 1: row n holds every channel's term n,
// contiguous, so whole rows are added into the chunk's partials (lanes =
// channels), four rows per pass over the partials.
template <class V>
void BiasGradRows(const LaneBiasGeometry& g, const float* dy, float* db,
                  int64_t c0, int64_t c1) {
  using T = typename V::T;
  constexpr int W = V::kWidth;
  const int64_t width = c1 - c0;
  const int64_t chunks = (g.n + kLaneChunk - 1) / kLaneChunk;
  Scratch<float> partial(width);
  float* acc = partial.get();
  RowTree tree(width, chunks);
  for (int64_t n0 = 0; n0 < g.n; n0 += kLaneChunk) {
    const int64_t n1 = MinI(g.n, n0 + kLaneChunk);
    for (int64_t i = 0; i < width; ++i) acc[i] = 0.0f;
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) {
      const float* r0 = dy + n * g.c + c0;
      const float* r1 = r0 + g.c;
      const float* r2 = r1 + g.c;
      const float* r3 = r2 + g.c;
      int64_t i = 0;
      for (; i + W <= width; i += W) {
        T a = V::Load(acc + i);
        a = V::Add(a, V::Load(r0 + i));
        a = V::Add(a, V::Load(r1 + i));
        a = V::Add(a, V::Load(r2 + i));
        a = V::Add(a, V::Load(r3 + i));
        V::Store(acc + i, a);
      }
      for (; i < width; ++i) {
        acc[i] = (((acc[i] + r0[i]) + r1[i]) + r2[i]) + r3[i];
      }
    }
    for (; n < n1; ++n) AddInto<V>(acc, dy + n * g.c + c0, width);
    if (chunks == 1) break;  // the tree of one chunk is the chunk
    tree.Push(acc);
  }
  if (chunks == 1) {
    std::memcpy(db + c0, acc, static_cast<size_t>(width) * sizeof(float));
  } else {
    tree.Result(db + c0);
  }
}

// Channels c0 .. c0 + lanes - 1 with spatial > 1: lane l reads the
// contiguous run dy[(n * C + c0 + l) * S + i], i = 0 .. S - 1, per n; W x W
// blocks are transposed so that each vector holds one term of every lane.
// With kPartial, lanes < W: the lanes past them hold zeros, never stored.
template <class V, bool kPartial = false>
void BiasGradPlanes(const LaneBiasGeometry& g, const float* dy, float* db,
                    int64_t c0, int lanes = V::kWidth) {
  using T = typename V::T;
  constexpr int W = V::kWidth;
  const int64_t s = g.spatial;
  VecTree<V> tree;
  T acc = V::Zero();
  int64_t left = kLaneChunk;  // terms left in the current chunk
  for (int64_t n = 0; n < g.n; ++n) {
    const float* base = dy + (n * g.c + c0) * s;
    int64_t i = 0;
    for (; i + W <= s; i += W) {
      T r[W];
      LoadRowsTransposed<V, kPartial>(base + i, s, lanes, r);
      if (left > W) {
        for (int l = 0; l < W; ++l) acc = V::Add(acc, r[l]);
        left -= W;
        continue;
      }
      for (int l = 0; l < W; ++l) {
        acc = V::Add(acc, r[l]);
        if (--left == 0) {
          tree.Push(acc);
          acc = V::Zero();
          left = kLaneChunk;
        }
      }
    }
    for (; i < s; ++i) {
      alignas(64) float terms[W];
      for (int l = 0; l < W; ++l) {
        terms[l] = !kPartial || l < lanes ? base[l * s + i] : 0.0f;
      }
      acc = V::Add(acc, V::Load(terms));
      if (--left == 0) {
        tree.Push(acc);
        acc = V::Zero();
        left = kLaneChunk;
      }
    }
  }
  if (left != kLaneChunk) tree.Push(acc);
  if (kPartial) {
    StoreLanes<V>(db + c0, tree.Result(), lanes);
  } else {
    V::Store(db + c0, tree.Result());
  }
}

template <class V>
void BiasGrad(const LaneBiasGeometry& g, const float* dy, float* db,
              ThreadPool* pool) {
  constexpr int W = V::kWidth;
  if (g.n * g.c * g.spatial < kMinParallelElements) pool = nullptr;
  if (g.spatial == 1) {
    // Tasks: ranges of channels, each a few KiB of every row.
    constexpr int64_t kRange = 512;
    const int64_t tasks = (g.c + kRange - 1) / kRange;
    auto task = [&](int64_t t) {
      BiasGradRows<V>(g, dy, db, t * kRange, MinI(g.c, (t + 1) * kRange));
    };
    For(pool, tasks, task);
    return;
  }
  // Tasks: blocks of W channels; one more, a partial block, takes the
  // channels left over.
  const int64_t blocks = g.c / W;
  const int64_t rest = blocks * W;
  auto task = [&](int64_t t) {
    if (t < blocks) {
      BiasGradPlanes<V>(g, dy, db, t * W);
      return;
    }
    BiasGradPlanes<V, true>(g, dy, db, rest, static_cast<int>(g.c - rest));
  };
  For(pool, blocks + (rest < g.c ? 1 : 0), task);
}

// ---------------------------------------------------------------------------
// max_pool2d: lanes = W planes, interleaved, so that every lane has the same
// window geometry (the same padding) and each tap is one vector load.

// Every output of the W interleaved planes in buf (element q of lane l at
// buf[q * W + l]): the winners' values into out (interleaved likewise), or
// with kIndex their in-plane offsets into at.
template <class V, bool kIndex>
void PoolInterleaved(const LanePoolGeometry& g, const float* buf, float* out,
                     int32_t* at) {
  using T = typename V::T;
  using I = typename V::I;
  constexpr int W = V::kWidth;
  for (int64_t oh = 0; oh < g.out_h; ++oh) {
    const int64_t h0 = oh * g.stride_h - g.pad_top;
    const int64_t ih_begin = h0 + MaxI(0, -h0);
    const int64_t ih_end = h0 + MinI(g.k_h, g.h - h0);
    for (int64_t ow = 0; ow < g.out_w; ++ow) {
      const int64_t w0 = ow * g.stride_w - g.pad_left;
      const int64_t iw_begin = w0 + MaxI(0, -w0);
      const int64_t iw_end = w0 + MinI(g.k_w, g.w - w0);
      // The first real tap starts as the winner; the rest in (kh, kw)
      // order: a later tap wins if strictly greater, or if it is the first
      // NaN.
      int64_t q = ih_begin * g.w + iw_begin;
      T best = V::Load(buf + q * W);
      I best_at = V::Set1I(static_cast<int32_t>(q));
      for (int64_t ih = ih_begin; ih < ih_end; ++ih) {
        for (int64_t iw = ih == ih_begin ? iw_begin + 1 : iw_begin; iw < iw_end;
             ++iw) {
          q = ih * g.w + iw;
          const T v = V::Load(buf + q * W);
          const typename V::M m = V::Replaces(best, v);
          best = V::Select(m, best, v);
          if constexpr (kIndex) {
            best_at = V::SelectI(m, best_at, V::Set1I(static_cast<int32_t>(q)));
          }
        }
      }
      const int64_t o = oh * g.out_w + ow;
      if constexpr (kIndex) {
        V::StoreI(at + o * W, best_at);
      } else {
        V::Store(out + o * W, best);
      }
    }
  }
}

// Work units: blocks of W planes, then the planes left over one by one;
// unit_fn(first plane, whether it is a block) for each, spread over the pool
// in tasks of about kMinParallelElements elements.
template <class V, class F>
void ForPlaneUnits(int64_t planes, int64_t per_plane, ThreadPool* pool,
                   F& unit_fn) {
  constexpr int W = V::kWidth;
  const int64_t blocks = planes / W;
  const int64_t units = blocks + (planes - blocks * W);
  const int64_t per_unit = MaxI(1, per_plane * W);
  const int64_t per_task = MaxI(1, kMinParallelElements / per_unit);
  const int64_t tasks = (units + per_task - 1) / per_task;
  if (tasks < 2) pool = nullptr;
  auto task = [&](int64_t t) {
    const int64_t u1 = MinI(units, (t + 1) * per_task);
    for (int64_t u = t * per_task; u < u1; ++u) {
      if (u < blocks) {
        unit_fn(u * W, true);
      } else {
        unit_fn(blocks * W + (u - blocks), false);
      }
    }
  };
  For(pool, tasks, task);
}

template <class V>
void MaxPoolForward(const LanePoolGeometry& g, const float* x, float* y,
                    ThreadPool* pool) {
  constexpr int W = V::kWidth;
  const int64_t in_plane = g.h * g.w;
  const int64_t out_plane = g.out_h * g.out_w;
  auto unit_fn = [&](int64_t p, bool block) {
    if (!block || W == 1) {
      PoolInterleaved<ScalarLanes, false>(g, x + p * in_plane,
                                          y + p * out_plane, nullptr);
      return;
    }
    Scratch<float> in(in_plane * W);
    Scratch<float> out(out_plane * W);
    Interleave<V>(x + p * in_plane, in_plane, in_plane, in.get());
    PoolInterleaved<V, false>(g, in.get(), out.get(), nullptr);
    Deinterleave<V>(out.get(), out_plane, y + p * out_plane, out_plane);
  };
  ForPlaneUnits<V>(g.planes, in_plane + out_plane * g.k_h * g.k_w, pool,
                   unit_fn);
}

// dx plane p = 0, then dy added into dx[winner] window by window in (oh, ow)
// order: each dx element gets its terms in the canonical order, as one
// chain from +0.0f. at[o * stride] is window o's winner.
inline void ScatterPlane(const LanePoolGeometry& g, const int32_t* at,
                         int64_t stride, const float* dy_plane,
                         float* dx_plane) {
  const int64_t out_plane = g.out_h * g.out_w;
  std::memset(dx_plane, 0, static_cast<size_t>(g.h * g.w) * sizeof(float));
  for (int64_t o = 0; o < out_plane; ++o) {
    float& d = dx_plane[at[o * stride]];
    d = d + dy_plane[o];
  }
}

template <class V>
void MaxPoolGrad(const LanePoolGeometry& g, const float* x, const float* dy,
                 float* dx, ThreadPool* pool) {
  constexpr int W = V::kWidth;
  const int64_t in_plane = g.h * g.w;
  const int64_t out_plane = g.out_h * g.out_w;
  auto unit_fn = [&](int64_t p, bool block) {
    if (!block || W == 1) {
      Scratch<int32_t> at(out_plane);
      PoolInterleaved<ScalarLanes, true>(g, x + p * in_plane, nullptr,
                                         at.get());
      ScatterPlane(g, at.get(), 1, dy + p * out_plane, dx + p * in_plane);
      return;
    }
    Scratch<float> in(in_plane * W);
    Scratch<int32_t> at(out_plane * W);
    Interleave<V>(x + p * in_plane, in_plane, in_plane, in.get());
    PoolInterleaved<V, true>(g, in.get(), nullptr, at.get());
    for (int l = 0; l < W; ++l) {
      ScatterPlane(g, at.get() + l, W, dy + (p + l) * out_plane,
                   dx + (p + l) * in_plane);
    }
  };
  ForPlaneUnits<V>(g.planes, 2 * in_plane + out_plane * g.k_h * g.k_w, pool,
                   unit_fn);
}

// ---------------------------------------------------------------------------
// avg_pool2d: lanes = W planes, interleaved as for max_pool2d.

// The real taps of output window (oh, ow): rows [*ih0, *ih1), columns
// [*iw0, *iw1); returns the window's divisor (KH * KW with
// count_include_pad, else the number of real taps).
inline int64_t AvgWindow(const LanePoolGeometry& g, int64_t oh, int64_t ow,
                         int64_t* ih0, int64_t* ih1, int64_t* iw0,
                         int64_t* iw1) {
  const int64_t h0 = oh * g.stride_h - g.pad_top;
  const int64_t w0 = ow * g.stride_w - g.pad_left;
  *ih0 = MaxI(h0, 0);
  *ih1 = MinI(h0 + g.k_h, g.h);
  *iw0 = MaxI(w0, 0);
  *iw1 = MinI(w0 + g.k_w, g.w);
  return g.count_include_pad ? g.k_h * g.k_w : (*ih1 - *ih0) * (*iw1 - *iw0);
}

// Every output of the W interleaved planes in buf: each lane adds its
// window's real taps in (kh, kw) order from +0.0f (kChunked: in chunks of
// 256 combined by the canonical tree, for windows of more than 256 taps),
// then divides once by the divisor.
template <class V, bool kChunked>
void AvgInterleaved(const LanePoolGeometry& g, const float* buf, float* out) {
  using T = typename V::T;
  constexpr int W = V::kWidth;
  for (int64_t oh = 0; oh < g.out_h; ++oh) {
    for (int64_t ow = 0; ow < g.out_w; ++ow) {
      int64_t ih0, ih1, iw0, iw1;
      const int64_t divisor = AvgWindow(g, oh, ow, &ih0, &ih1, &iw0, &iw1);
      T acc = V::Zero();
      if constexpr (!kChunked) {
        for (int64_t ih = ih0; ih < ih1; ++ih) {
          const float* row = buf + ih * g.w * W;
          for (int64_t iw = iw0; iw < iw1; ++iw) {
            acc = V::Add(acc, V::Load(row + iw * W));
          }
        }
      } else {
        VecTree<V> tree;
        int64_t left = kLaneChunk;
        for (int64_t ih = ih0; ih < ih1; ++ih) {
          const float* row = buf + ih * g.w * W;
          for (int64_t iw = iw0; iw < iw1; ++iw) {
            acc = V::Add(acc, V::Load(row + iw * W));
            if (--left == 0) {
              tree.Push(acc);
              acc = V::Zero();
              left = kLaneChunk;
            }
          }
        }
        if (left != kLaneChunk) tree.Push(acc);
        acc = tree.Result();
      }
      V::Store(out + (oh * g.out_w + ow) * W,
               V::Div(acc, V::Set1(static_cast<float>(divisor))));
    }
  }
}

template <class V>
void AvgPoolForward(const LanePoolGeometry& g, const float* x, float* y,
                    ThreadPool* pool) {
  constexpr int W = V::kWidth;
  const int64_t in_plane = g.h * g.w;
  const int64_t out_plane = g.out_h * g.out_w;
  const bool chunked = g.k_h * g.k_w > kLaneChunk;
  auto unit_fn = [&](int64_t p, bool block) {
    if (!block || W == 1) {
      if (chunked) {
        AvgInterleaved<ScalarLanes, true>(g, x + p * in_plane,
                                          y + p * out_plane);
      } else {
        AvgInterleaved<ScalarLanes, false>(g, x + p * in_plane,
                                           y + p * out_plane);
      }
      return;
    }
    Scratch<float> in(in_plane * W);
    Scratch<float> out(out_plane * W);
    Interleave<V>(x + p * in_plane, in_plane, in_plane, in.get());
    if (chunked) {
      AvgInterleaved<V, true>(g, in.get(), out.get());
    } else {
      AvgInterleaved<V, false>(g, in.get(), out.get());
    }
    Deinterleave<V>(out.get(), out_plane, y + p * out_plane, out_plane);
  };
  ForPlaneUnits<V>(g.planes, in_plane + out_plane * g.k_h * g.k_w, pool,
                   unit_fn);
}

// dx of the W interleaved planes: zero, then window by window in (oh, ow)
// order dy / divisor added into every real tap of the window, so each dx
// element gets its terms in the canonical order as one chain from +0.0f.
template <class V>
void AvgGradInterleaved(const LanePoolGeometry& g, const float* dy_buf,
                        float* dx_buf) {
  using T = typename V::T;
  constexpr int W = V::kWidth;
  std::memset(dx_buf, 0, static_cast<size_t>(g.h * g.w * W) * sizeof(float));
  for (int64_t oh = 0; oh < g.out_h; ++oh) {
    for (int64_t ow = 0; ow < g.out_w; ++ow) {
      int64_t ih0, ih1, iw0, iw1;
      const int64_t divisor = AvgWindow(g, oh, ow, &ih0, &ih1, &iw0, &iw1);
      const T term = V::Div(V::Load(dy_buf + (oh * g.out_w + ow) * W),
                            V::Set1(static_cast<float>(divisor)));
      for (int64_t ih = ih0; ih < ih1; ++ih) {
        float* row = dx_buf + ih * g.w * W;
        for (int64_t iw = iw0; iw < iw1; ++iw) {
          V::Store(row + iw * W, V::Add(V::Load(row + iw * W), term));
        }
      }
    }
  }
}

template <class V>
void AvgPoolGrad(const LanePoolGeometry& g, const float* dy, float* dx,
                 ThreadPool* pool) {
  constexpr int W = V::kWidth;
  const int64_t in_plane = g.h * g.w;
  const int64_t out_plane = g.out_h * g.out_w;
  auto unit_fn = [&](int64_t p, bool block) {
    if (!block || W == 1) {
      AvgGradInterleaved<ScalarLanes>(g, dy + p * out_plane, dx + p * in_plane);
      return;
    }
    Scratch<float> dy_buf(out_plane * W);
    Scratch<float> dx_buf(in_plane * W);
    Interleave<V>(dy + p * out_plane, out_plane, out_plane, dy_buf.get());
    AvgGradInterleaved<V>(g, dy_buf.get(), dx_buf.get());
    Deinterleave<V>(dx_buf.get(), in_plane, dx + p * in_plane, in_plane);
  };
  ForPlaneUnits<V>(g.planes, 2 * in_plane + out_plane * (1 + g.k_h * g.k_w),
                   pool, unit_fn);
}

// ---------------------------------------------------------------------------
// resize_bilinear (kernels/spatial/resize_bilinear.h), lanes = image planes
// (n, c) interleaved as for the pools: every plane has the same taps, so
// each lane runs the spec's sequence for its plane with the geometry's
// branches taken once for all of them.
//   forward   y = fma(w11, x11, fma(w10, x10, fma(w01, x01, fma(w00, x00,
//             0)))), w_ab = l_a(row) * l_b(col)
//   grad      dx[ih, iw] = the gather chain (canonical::GatherChain: fma
//             chains of 256 existing terms, then the tree) over outputs
//             (oh, ow) in row-major order and within each over the taps
//             (0,0), (0,1), (1,0), (1,1) that read (ih, iw).

template <class V>
void ResizeForwardInterleaved(const LaneResizeGeometry& g, const float* x_buf,
                              float* y_buf) {
  using T = typename V::T;
  constexpr int W = V::kWidth;
  for (int64_t oh = 0; oh < g.out_h; ++oh) {
    const spatial::BilinearAxisTaps& ty = g.rows[oh];
    const float* r0 = x_buf + ty.i0 * g.in_w * W;
    const float* r1 = x_buf + ty.i1 * g.in_w * W;
    for (int64_t ow = 0; ow < g.out_w; ++ow) {
      const spatial::BilinearAxisTaps& tx = g.cols[ow];
      T acc = V::Zero();
      acc = V::Fma(V::Set1(ty.l0 * tx.l0), V::Load(r0 + tx.i0 * W), acc);
      acc = V::Fma(V::Set1(ty.l0 * tx.l1), V::Load(r0 + tx.i1 * W), acc);
      acc = V::Fma(V::Set1(ty.l1 * tx.l0), V::Load(r1 + tx.i0 * W), acc);
      acc = V::Fma(V::Set1(ty.l1 * tx.l1), V::Load(r1 + tx.i1 * W), acc);
      V::Store(y_buf + (oh * g.out_w + ow) * W, acc);
    }
  }
}

template <class V>
void ResizeGradInterleaved(const LaneResizeGeometry& g, const float* dy_buf,
                           float* dx_buf) {
  using T = typename V::T;
  constexpr int W = V::kWidth;
  for (int64_t ih = 0; ih < g.in_h; ++ih) {
    for (int64_t iw = 0; iw < g.in_w; ++iw) {
      T acc = V::Zero();
      int64_t in_chunk = 0;
      VecTree<V> tree;
      auto term = [&](T dy, float w) {
        acc = V::Fma(dy, V::Set1(w), acc);
        if (++in_chunk == kLaneChunk) {
          tree.Push(acc);
          acc = V::Zero();
          in_chunk = 0;
        }
      };
      for (int64_t oh = g.row_first[ih]; oh < g.out_h; ++oh) {
        const spatial::BilinearAxisTaps& ty = g.rows[oh];
        if (ty.i0 > ih) break;
        const bool row0 = ty.i0 == ih;
        const bool row1 = ty.i1 == ih;
        if (!row0 && !row1) continue;
        for (int64_t ow = g.col_first[iw]; ow < g.out_w; ++ow) {
          const spatial::BilinearAxisTaps& tx = g.cols[ow];
          if (tx.i0 > iw) break;
          const bool col0 = tx.i0 == iw;
          const bool col1 = tx.i1 == iw;
          if (!col0 && !col1) continue;
          const T dy = V::Load(dy_buf + (oh * g.out_w + ow) * W);
          if (row0 && col0) term(dy, ty.l0 * tx.l0);
          if (row0 && col1) term(dy, ty.l0 * tx.l1);
          if (row1 && col0) term(dy, ty.l1 * tx.l0);
          if (row1 && col1) term(dy, ty.l1 * tx.l1);
        }
      }
      if (in_chunk > 0) tree.Push(acc);
      V::Store(dx_buf + (ih * g.in_w + iw) * W, tree.Result());
    }
  }
}

// kGrad false: y from x; true: dx from dy. Blocks of W planes interleaved
// (the planes left over one by one, as one-lane vectors).
template <class V, bool kGrad>
void ResizePlanes(const LaneResizeGeometry& g, const float* in, float* out,
                  ThreadPool* pool) {
  constexpr int W = V::kWidth;
  const int64_t in_plane = kGrad ? g.out_h * g.out_w : g.in_h * g.in_w;
  const int64_t out_plane = kGrad ? g.in_h * g.in_w : g.out_h * g.out_w;
  auto run = [&](auto lanes, const float* src, float* dst) {
    using L = decltype(lanes);
    if constexpr (kGrad) {
      ResizeGradInterleaved<L>(g, src, dst);
    } else {
      ResizeForwardInterleaved<L>(g, src, dst);
    }
  };
  auto unit_fn = [&](int64_t p, bool block) {
    if (!block || W == 1) {
      run(ScalarLanes{}, in + p * in_plane, out + p * out_plane);
      return;
    }
    Scratch<float> src(in_plane * W);
    Scratch<float> dst(out_plane * W);
    Interleave<V>(in + p * in_plane, in_plane, in_plane, src.get());
    run(V{}, src.get(), dst.get());
    Deinterleave<V>(dst.get(), out_plane, out + p * out_plane, out_plane);
  };
  ForPlaneUnits<V>(g.planes, 2 * (in_plane + out_plane), pool, unit_fn);
}

template <class V>
void ResizeBilinear(const LaneResizeGeometry& g, const float* in, float* out,
                    bool grad, ThreadPool* pool) {
  if (grad) {
    ResizePlanes<V, true>(g, in, out, pool);
  } else {
    ResizePlanes<V, false>(g, in, out, pool);
  }
}

// ---------------------------------------------------------------------------
// batch_norm's per-channel chains (training mode, kernels/ops/norm.h):
// BiasGradPlanes' walk, lanes = channels c0 .. c0 + W - 1, with two sources
// (x and dy) and the terms of the spec.

// Calls term.Step(x, dy) with one vector per term (lane l: channel c0 + l)
// in the canonical (n, spatial) order, and term.Close() after every
// kLaneChunk terms and after the last (short) chunk. Without kDy, dy is not
// read and Step gets x twice. With kPartial only lanes [0, lanes) are read;
// the others get +0.0f. Terms [t0, t1) of the n * spatial only (default:
// all), t0 a multiple of kLaneChunk: that run of chunks.
template <class V, bool kDy, bool kPartial, class Term>
void WalkChannels(const LaneBiasGeometry& g, const float* x, const float* dy,
                  int64_t c0, int lanes, Term& term, int64_t t0 = 0,
                  int64_t t1 = -1) {
  using T = typename V::T;
  constexpr int W = V::kWidth;
  const int64_t s = g.spatial;
  if (t1 < 0) t1 = g.n * s;
  if (s == 0 || t0 >= t1) return;
  int64_t left = kLaneChunk;  // terms left in the current chunk
  if (s == 1) {
    // A batch row holds one term of every channel: the lanes' terms are
    // neighbours, one vector load (the real lanes only when partial).
    for (int64_t n = t0; n < t1; ++n) {
      const int64_t offset = n * g.c + c0;
      const T vx =
          kPartial ? LoadLanes<V>(x + offset, lanes) : V::Load(x + offset);
      T vd = vx;
      if constexpr (kDy) {
        vd = kPartial ? LoadLanes<V>(dy + offset, lanes) : V::Load(dy + offset);
      }
      term.Step(vx, vd);
      if (--left == 0) {
        term.Close();
        left = kLaneChunk;
      }
    }
    if (left != kLaneChunk) term.Close();
    return;
  }
  for (int64_t n = t0 / s; n * s < t1; ++n) {
    const int64_t offset = (n * g.c + c0) * s;
    int64_t i = n * s < t0 ? t0 - n * s : 0;
    const int64_t end = MinI(s, t1 - n * s);
    for (; i + W <= end; i += W) {
      T rx[W];
      T rd[kDy ? W : 1];
      LoadRowsTransposed<V, kPartial>(x + offset + i, s, lanes, rx);
      if constexpr (kDy) {
        LoadRowsTransposed<V, kPartial>(dy + offset + i, s, lanes, rd);
      }
      for (int j = 0; j < W; ++j) {
        term.Step(rx[j], kDy ? rd[j] : rx[j]);
        if (--left == 0) {
          term.Close();
          left = kLaneChunk;
        }
      }
    }
    for (; i < end; ++i) {
      alignas(64) float lx[W];
      alignas(64) float ld[W];
      for (int l = 0; l < W; ++l) {
        const bool real = !kPartial || l < lanes;
        lx[l] = real ? x[offset + l * s + i] : 0.0f;
        ld[l] = kDy && real ? dy[offset + l * s + i] : 0.0f;
      }
      term.Step(V::Load(lx), V::Load(kDy ? ld : lx));
      if (--left == 0) {
        term.Close();
        left = kLaneChunk;
      }
    }
  }
  if (left != kLaneChunk) term.Close();
}

// sum: chain x (BiasGradPlanes' terms).
template <class V>
struct SumTerm {
  using T = typename V::T;
  static constexpr int kTrees = 1;
  T acc = V::Zero();
  VecTree<V> tree;
  VecTree<V>& Tree(int) { return tree; }
  void Step(T x, T) { acc = V::Add(acc, x); }
  void Close() {
    tree.Push(acc);
    acc = V::Zero();
  }
};

// var_sum: chain fma(d, d), d = x - mean.
template <class V>
struct VarSumTerm {
  using T = typename V::T;
  static constexpr int kTrees = 1;
  T mean;
  T acc = V::Zero();
  VecTree<V> tree;
  VecTree<V>& Tree(int) { return tree; }
  void Step(T x, T) {
    const T d = V::Sub(x, mean);
    acc = V::Fma(d, d, acc);
  }
  void Close() {
    tree.Push(acc);
    acc = V::Zero();
  }
};

// g = dy * scale (dy when unscaled), xhat = (x - mean) * rstd:
// dot = chain fma(g, xhat), sum = chain g.
template <class V>
struct GradTerm {
  using T = typename V::T;
  T mean, rstd, scale;
  bool scaled;
  static constexpr int kTrees = 2;
  T dot = V::Zero();
  T sum = V::Zero();
  VecTree<V> dot_tree;
  VecTree<V> sum_tree;
  VecTree<V>& Tree(int i) { return i == 0 ? dot_tree : sum_tree; }
  void Step(T x, T dy) {
    const T g = scaled ? V::Mul(dy, scale) : dy;
    sum = V::Add(sum, g);
    dot = V::Fma(g, V::Mul(V::Sub(x, mean), rstd), dot);
  }
  void Close() {
    dot_tree.Push(dot);
    sum_tree.Push(sum);
    dot = V::Zero();
    sum = V::Zero();
  }
};

// GradTerm scaled (trees 0, 1: batch_norm.grad_input's dot and sum) and
// unscaled (trees 2, 3: grad_params') from one walk: xhat and each chain
// with the operations of its own pass, in its order, so the bits of two
// walks.
template <class V>
struct GradBothTerm {
  using T = typename V::T;
  T mean, rstd, scale;
  static constexpr int kTrees = 4;
  T dot = V::Zero();
  T sum = V::Zero();
  T param_dot = V::Zero();
  T param_sum = V::Zero();
  VecTree<V> trees[kTrees];
  VecTree<V>& Tree(int i) { return trees[i]; }
  void Step(T x, T dy) {
    const T xhat = V::Mul(V::Sub(x, mean), rstd);
    const T g = V::Mul(dy, scale);
    sum = V::Add(sum, g);
    dot = V::Fma(g, xhat, dot);
    param_sum = V::Add(param_sum, dy);
    param_dot = V::Fma(dy, xhat, param_dot);
  }
  void Close() {
    trees[0].Push(dot);
    trees[1].Push(sum);
    trees[2].Push(param_dot);
    trees[3].Push(param_sum);
    dot = sum = param_dot = param_sum = V::Zero();
  }
};

// Runs block.Run<V, kPartial>(c0, lanes) over blocks of W channels and, as
// one partial block, the channels left over, on the pool.
template <class V, class Block>
void ForChannelBlocks(const LaneBiasGeometry& g, ThreadPool* pool,
                      Block& block) {
  constexpr int W = V::kWidth;
  if (g.n * g.c * g.spatial < kMinParallelElements) pool = nullptr;
  const int64_t blocks = g.c / W;
  const int64_t rest = blocks * W;
  auto task = [&](int64_t t) {
    if (t < blocks) {
      block.template Run<V, false>(t * W, W);
      return;
    }
    block.template Run<V, true>(rest, static_cast<int>(g.c - rest));
  };
  For(pool, blocks + (rest < g.c ? 1 : 0), task);
}

// One block of channels of BatchNormVarSum.
struct VarSumBlock {
  const LaneBiasGeometry& g;
  const float* x;
  const float* mean;
  float* var_sum;
  template <class V, bool kPartial>
  void Run(int64_t c0, int lanes) {
    VarSumTerm<V> term;
    term.mean = LoadLanes<V>(mean + c0, lanes);
    WalkChannels<V, false, kPartial>(g, x, nullptr, c0, lanes, term);
    StoreLanes<V>(var_sum + c0, term.tree.Result(), lanes);
  }
};

template <class V>
void BatchNormVarSum(const LaneBiasGeometry& g, const float* x,
                     const float* mean, float* var_sum, ThreadPool* pool) {
  VarSumBlock block{g, x, mean, var_sum};
  ForChannelBlocks<V>(g, pool, block);
}

// grad_norm.sum_squares' chunk partials: the tensor's full chunks of
// kLaneChunk terms as the channels of a [1, chunks, kLaneChunk] batch, each
// lane one chunk's chain fma(x, x, acc) from +0.0f in index order
// (canonical::CanonicalDot's chain), W chunks side by side.
template <class V>
struct SquareTerm {
  using T = typename V::T;
  static constexpr int kTrees = 1;
  T acc = V::Zero();
  VecTree<V> tree;
  VecTree<V>& Tree(int) { return tree; }
  void Step(T x, T) { acc = V::Fma(x, x, acc); }
  void Close() {
    tree.Push(acc);
    acc = V::Zero();
  }
};

struct SquareChunksBlock {
  const LaneBiasGeometry& g;
  const float* x;
  float* partials;
  template <class V, bool kPartial>
  void Run(int64_t c0, int lanes) {
    SquareTerm<V> term;
    WalkChannels<V, false, kPartial>(g, x, nullptr, c0, lanes, term);
    // One chunk per channel: the tree holds that chunk's partial alone.
    StoreLanes<V>(partials + c0, term.tree.Result(), lanes);
  }
};

template <class V>
void SquareChunks(const float* x, int64_t chunks, float* partials,
                  ThreadPool* pool) {
  const LaneBiasGeometry g{1, chunks, kLaneChunk};
  SquareChunksBlock block{g, x, partials};
  ForChannelBlocks<V>(g, pool, block);
}

// One block of channels of BatchNormGradChains.
struct GradChainsBlock {
  const LaneBiasGeometry& g;
  const float* x;
  const float* dy;
  const float* mean;
  const float* rstd;
  const float* scale;
  float* dot;
  float* sum;
  template <class V, bool kPartial>
  void Run(int64_t c0, int lanes) {
    GradTerm<V> term;
    term.mean = LoadLanes<V>(mean + c0, lanes);
    term.rstd = LoadLanes<V>(rstd + c0, lanes);
    term.scaled = scale != nullptr;
    term.scale = term.scaled ? LoadLanes<V>(scale + c0, lanes) : V::Zero();
    WalkChannels<V, true, kPartial>(g, x, dy, c0, lanes, term);
    StoreLanes<V>(dot + c0, term.dot_tree.Result(), lanes);
    StoreLanes<V>(sum + c0, term.sum_tree.Result(), lanes);
  }
};

template <class V>
void BatchNormGradChains(const LaneBiasGeometry& g, const float* x,
                         const float* dy, const float* mean, const float* rstd,
                         const float* scale, float* dot, float* sum,
                         ThreadPool* pool) {
  GradChainsBlock block{g, x, dy, mean, rstd, scale, dot, sum};
  ForChannelBlocks<V>(g, pool, block);
}

// ---------------------------------------------------------------------------
// batch_norm's elementwise passes: lanes = neighbouring elements of one
// (n, channel) run, each with the spec's operations in the spec's order and
// the channel's constants broadcast.

// v, or the canonical NaN `nan` where v is NaN (Replaces(+inf, v) holds
// exactly for NaN v).
template <class V>
typename V::T CanonicalNanOf(typename V::T v, float nan) {
  return V::Select(V::Replaces(V::Set1(__builtin_inff()), v), v, V::Set1(nan));
}

// y = CanonicalNanOf(((x - mean) * rstd) * gamma + beta).
struct BatchNormApplyOp {
  const float* x;
  const float* mean;
  const float* rstd;
  const float* gamma;
  const float* beta;
  float* y;
  float nan;
  bool stream;  // StoreOut
  template <class V>
  void Run(int64_t ch, int64_t i, int64_t end) const {
    using T = typename V::T;
    constexpr int W = V::kWidth;
    const T m = V::Set1(mean[ch]);
    const T r = V::Set1(rstd[ch]);
    const T ga = V::Set1(gamma[ch]);
    const T be = V::Set1(beta[ch]);
    for (; i + W <= end; i += W) {
      const T xhat = V::Mul(V::Sub(V::Load(x + i), m), r);
      StoreOut<V>(y + i, CanonicalNanOf<V>(V::Add(V::Mul(xhat, ga), be), nan),
                  stream);
    }
    if constexpr (W > 1) {
      if (i < end) Run<ScalarLanes>(ch, i, end);
    }
  }
};

// dx = CanonicalNanOf(((g - a) - xhat * b) * rstd), g = dy * gamma,
// xhat = (x - mean) * rstd.
struct BatchNormGradInputApplyOp {
  const float* x;
  const float* dy;
  const float* mean;
  const float* rstd;
  const float* gamma;
  const float* a;
  const float* b;
  float* dx;
  float nan;
  bool stream;  // StoreOut
  template <class V>
  void Run(int64_t ch, int64_t i, int64_t end) const {
    using T = typename V::T;
    constexpr int W = V::kWidth;
    const T m = V::Set1(mean[ch]);
    const T r = V::Set1(rstd[ch]);
    const T ga = V::Set1(gamma[ch]);
    const T av = V::Set1(a[ch]);
    const T bv = V::Set1(b[ch]);
    for (; i + W <= end; i += W) {
      const T gv = V::Mul(V::Load(dy + i), ga);
      const T xhat = V::Mul(V::Sub(V::Load(x + i), m), r);
      const T v = V::Mul(V::Sub(V::Sub(gv, av), V::Mul(xhat, bv)), r);
      StoreOut<V>(dx + i, CanonicalNanOf<V>(v, nan), stream);
    }
    if constexpr (W > 1) {
      if (i < end) Run<ScalarLanes>(ch, i, end);
    }
  }
};

// Every pass of batch_norm's training mode over the channels [c0, c0 +
// lanes) (BatchNormTrainingLanes, lane_kernels.h).
template <class V, bool kPartial>
void BatchNormTrainingBlock(const LaneBiasGeometry& g,
                            const BatchNormLaneArgs& a, float nan, int64_t c0,
                            int lanes) {
  const bool forward = a.pass == BatchNormLanePass::kForward;
  if (forward || !a.stats_given) {
    BiasGradPlanes<V, kPartial>(g, a.x, a.mean, c0, lanes);
    a.math(a.ctx, BatchNormLaneStep::kMean, c0, lanes);
    VarSumBlock var{g, a.x, a.mean, a.var_sum};
    var.template Run<V, kPartial>(c0, lanes);
    a.math(a.ctx, BatchNormLaneStep::kStats, c0, lanes);
  }
  const int64_t s = g.spatial;
  if (forward) {
    const BatchNormApplyOp op{a.x,    a.mean, a.rstd, a.gamma,
                              a.beta, a.out,  nan,    a.stream_out};
    for (int64_t n = 0; n < g.n; ++n) {
      for (int64_t ch = c0; ch < c0 + lanes; ++ch) {
        const int64_t begin = (n * g.c + ch) * s;
        op.template Run<V>(ch, begin, begin + s);
      }
    }
    if (op.stream) V::Fence();
    return;
  }
  const bool both = a.pass == BatchNormLanePass::kGradBoth;
  const bool input = a.pass == BatchNormLanePass::kGradInput || both;
  if (both) {
    GradBothTerm<V> term;
    term.mean = LoadLanes<V>(a.mean + c0, lanes);
    term.rstd = LoadLanes<V>(a.rstd + c0, lanes);
    term.scale = LoadLanes<V>(a.gamma + c0, lanes);
    WalkChannels<V, true, kPartial>(g, a.x, a.dy, c0, lanes, term);
    float* const results[] = {a.dot, a.sum, a.param_dot, a.param_sum};
    for (int k = 0; k < GradBothTerm<V>::kTrees; ++k) {
      StoreLanes<V>(results[k] + c0, term.trees[k].Result(), lanes);
    }
  } else {
    GradChainsBlock chains{
        g, a.x, a.dy, a.mean, a.rstd, input ? a.gamma : nullptr, a.dot, a.sum};
    chains.template Run<V, kPartial>(c0, lanes);
  }
  a.math(a.ctx, BatchNormLaneStep::kChains, c0, lanes);
  if (!input) return;
  const BatchNormGradInputApplyOp op{a.x,     a.dy,        a.mean, a.rstd,
                                     a.gamma, a.sum,       a.dot,  a.out,
                                     nan,     a.stream_out};
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t ch = c0; ch < c0 + lanes; ++ch) {
      const int64_t begin = (n * g.c + ch) * s;
      op.template Run<V>(ch, begin, begin + s);
    }
  }
  if (op.stream) V::Fence();
}

// The chains of Term over every block of W channels (the last one maybe
// partial), each block's terms cut into runs of `run_chunks` chunks (a
// power of two), every (block, run) a task on the pool; then, per block on
// the calling thread, the runs' trees appended in order (VecTree::Append:
// the bits of one walk) and finish(c0, lanes, results[Term::kTrees]).
// init(term, c0, lanes) sets a task's term up.
template <class V, bool kDy, class Term, class Init, class Finish>
void ChainsByRuns(const LaneBiasGeometry& g, const float* x, const float* dy,
                  int64_t run_chunks, ThreadPool* pool, const Init& init,
                  const Finish& finish) {
  using T = typename V::T;
  constexpr int W = V::kWidth;
  constexpr int K = Term::kTrees;
  const int64_t blocks = (g.c + W - 1) / W;
  const int64_t total = g.n * g.spatial;
  const int64_t run_terms = run_chunks * kLaneChunk;
  const int64_t runs = MaxI(1, (total + run_terms - 1) / run_terms);
  Scratch<TreeNodes<V>> nodes(blocks * runs * K);
  auto task = [&](int64_t i) {
    const int64_t c0 = (i / runs) * W;
    const int lanes = static_cast<int>(MinI(W, g.c - c0));
    const int64_t t0 = (i % runs) * run_terms;
    const int64_t t1 = MinI(total, t0 + run_terms);
    Term term;
    init(term, c0, lanes);
    if (lanes == W) {
      WalkChannels<V, kDy, false>(g, x, dy, c0, lanes, term, t0, t1);
    } else {
      WalkChannels<V, kDy, true>(g, x, dy, c0, lanes, term, t0, t1);
    }
    for (int k = 0; k < K; ++k) term.Tree(k).Save(&nodes.get()[i * K + k]);
  };
  For(pool, blocks * runs, task);
  for (int64_t b = 0; b < blocks; ++b) {
    T results[K];
    for (int k = 0; k < K; ++k) {
      VecTree<V> tree;
      for (int64_t r = 0; r < runs; ++r) {
        tree.Append(nodes.get()[(b * runs + r) * K + k]);
      }
      results[k] = tree.Result();
    }
    const int64_t c0 = b * W;
    finish(c0, static_cast<int>(MinI(W, g.c - c0)), results);
  }
}

// op.Run<V>(ch, begin, end) over every (n, channel) run of the elements, in
// tasks of about kMinParallelElements elements.
template <class V, class Op>
void ApplyOverRuns(const LaneBiasGeometry& g, const Op& op, ThreadPool* pool) {
  const int64_t rows = g.n * g.c;
  const int64_t per_task = MaxI(1, kMinParallelElements / MaxI(1, g.spatial));
  auto task = [&](int64_t t) {
    const int64_t r1 = MinI(rows, (t + 1) * per_task);
    for (int64_t r = t * per_task; r < r1; ++r) {
      const int64_t begin = r * g.spatial;
      op.template Run<V>(r % g.c, begin, begin + g.spatial);
    }
    if (op.stream) V::Fence();  // StoreOut's stores, before the task ends
  };
  For(pool, (rows + per_task - 1) / per_task, task);
}

// BatchNormTrainingBlock's passes, each over every channel at once and on
// the whole pool: the chains cut into runs of `run_chunks` chunks
// (ChainsByRuns), the elementwise passes into runs of rows. For fewer
// channel blocks than the pool has threads (or too few to balance): the
// same bits as the blocks, with every thread busy.
template <class V>
void BatchNormTrainingByRuns(const LaneBiasGeometry& g,
                             const BatchNormLaneArgs& a, float nan,
                             int64_t run_chunks, ThreadPool* pool) {
  using T = typename V::T;
  const bool forward = a.pass == BatchNormLanePass::kForward;
  if (forward || !a.stats_given) {
    auto none = [](auto&, int64_t, int) {};
    ChainsByRuns<V, false, SumTerm<V>>(
        g, a.x, nullptr, run_chunks, pool, none,
        [&](int64_t c0, int lanes, const T* r) {
          StoreLanes<V>(a.mean + c0, r[0], lanes);
          a.math(a.ctx, BatchNormLaneStep::kMean, c0, lanes);
        });
    ChainsByRuns<V, false, VarSumTerm<V>>(
        g, a.x, nullptr, run_chunks, pool,
        [&](VarSumTerm<V>& term, int64_t c0, int lanes) {
          term.mean = LoadLanes<V>(a.mean + c0, lanes);
        },
        [&](int64_t c0, int lanes, const T* r) {
          StoreLanes<V>(a.var_sum + c0, r[0], lanes);
          a.math(a.ctx, BatchNormLaneStep::kStats, c0, lanes);
        });
  }
  if (forward) {
    const BatchNormApplyOp op{a.x,    a.mean, a.rstd, a.gamma,
                              a.beta, a.out,  nan,    a.stream_out};
    ApplyOverRuns<V>(g, op, pool);
    return;
  }
  const bool both = a.pass == BatchNormLanePass::kGradBoth;
  const bool input = a.pass == BatchNormLanePass::kGradInput || both;
  const float* scale = input ? a.gamma : nullptr;
  // The chains' results (the terms' trees in order), then math(kChains).
  float* const results[] = {a.dot, a.sum, a.param_dot, a.param_sum};
  auto finish = [&](int64_t c0, int lanes, const T* r) {
    for (int k = 0; k < (both ? 4 : 2); ++k) {
      StoreLanes<V>(results[k] + c0, r[k], lanes);
    }
    a.math(a.ctx, BatchNormLaneStep::kChains, c0, lanes);
  };
  if (both) {
    ChainsByRuns<V, true, GradBothTerm<V>>(
        g, a.x, a.dy, run_chunks, pool,
        [&](GradBothTerm<V>& term, int64_t c0, int lanes) {
          term.mean = LoadLanes<V>(a.mean + c0, lanes);
          term.rstd = LoadLanes<V>(a.rstd + c0, lanes);
          term.scale = LoadLanes<V>(scale + c0, lanes);
        },
        finish);
  } else {
    ChainsByRuns<V, true, GradTerm<V>>(
        g, a.x, a.dy, run_chunks, pool,
        [&](GradTerm<V>& term, int64_t c0, int lanes) {
          term.mean = LoadLanes<V>(a.mean + c0, lanes);
          term.rstd = LoadLanes<V>(a.rstd + c0, lanes);
          term.scaled = scale != nullptr;
          term.scale =
              term.scaled ? LoadLanes<V>(scale + c0, lanes) : V::Zero();
        },
        finish);
  }
  if (!input) return;
  const BatchNormGradInputApplyOp op{a.x,     a.dy,        a.mean, a.rstd,
                                     a.gamma, a.sum,       a.dot,  a.out,
                                     nan,     a.stream_out};
  ApplyOverRuns<V>(g, op, pool);
}

// Runs of chunks for BatchNormTrainingByRuns when the blocks of W channels
// leave threads idle, else 0: powers of two, cut until there are about 4
// tasks per thread (or a run is one chunk).
template <class V>
int64_t RunChunksFor(const LaneBiasGeometry& g, ThreadPool* pool) {
  constexpr int W = V::kWidth;
  const int64_t threads = pool == nullptr ? 1 : pool->num_threads();
  const int64_t blocks = (g.c + W - 1) / W;
  if (threads < 2 || blocks >= 4 * threads ||
      (blocks >= threads && blocks % threads == 0)) {
    return 0;
  }
  const int64_t chunks = (g.n * g.spatial + kLaneChunk - 1) / kLaneChunk;
  if (chunks < 2) return 0;
  int64_t run = 1;
  while (run < chunks) run *= 2;
  while (run > 1 && blocks * ((chunks + run - 1) / run) < 4 * threads) {
    run /= 2;
  }
  return run;
}

// Tasks: blocks of W channels, the last one maybe partial.
template <class V>
void BatchNormTraining(const LaneBiasGeometry& g, const BatchNormLaneArgs& a,
                       float nan, ThreadPool* pool) {
  constexpr int W = V::kWidth;
  if (g.n * g.c * g.spatial < kMinParallelElements) pool = nullptr;
  if (const int64_t run = RunChunksFor<V>(g, pool); run > 0) {
    BatchNormTrainingByRuns<V>(g, a, nan, run, pool);
    return;
  }
  auto task = [&](int64_t t) {
    const int64_t c0 = t * W;
    const int lanes = static_cast<int>(MinI(W, g.c - c0));
    if (lanes == W) {
      BatchNormTrainingBlock<V, false>(g, a, nan, c0, lanes);
    } else {
      BatchNormTrainingBlock<V, true>(g, a, nan, c0, lanes);
    }
  };
  For(pool, (g.c + W - 1) / W, task);
}

// ---------------------------------------------------------------------------
// global_avg_pool

// y[p] = canonical sum of plane p / area: the sums are bias_add.grad's with
// one batch row (lanes = planes, the plane's terms in (h, w) order), then
// one division per output.
template <class V>
void GlobalPoolForward(const LaneGlobalGeometry& g, const float* x, float* y,
                       ThreadPool* pool) {
  constexpr int W = V::kWidth;
  BiasGrad<V>(LaneBiasGeometry{1, g.planes, g.area}, x, y, pool);
  const float area = static_cast<float>(g.area);
  const typename V::T d = V::Set1(area);
  int64_t i = 0;
  for (; i + W <= g.planes; i += W) V::Store(y + i, V::Div(V::Load(y + i), d));
  for (; i < g.planes; ++i) y[i] = y[i] / area;
}

// dx plane p = dy[p] / area, the one quotient stored area times.
template <class V>
void GlobalPoolGrad(const LaneGlobalGeometry& g, const float* dy, float* dx,
                    ThreadPool* pool) {
  constexpr int W = V::kWidth;
  const float area = static_cast<float>(g.area);
  const int64_t per_task = MaxI(1, kMinParallelElements / MaxI(1, g.area));
  const int64_t tasks = (g.planes + per_task - 1) / per_task;
  if (tasks < 2) pool = nullptr;
  auto task = [&](int64_t t) {
    const int64_t p1 = MinI(g.planes, (t + 1) * per_task);
    for (int64_t p = t * per_task; p < p1; ++p) {
      const float q = dy[p] / area;
      const typename V::T v = V::Set1(q);
      float* plane = dx + p * g.area;
      int64_t i = 0;
      for (; i + W <= g.area; i += W) V::Store(plane + i, v);
      for (; i < g.area; ++i) plane[i] = q;
    }
  };
  For(pool, tasks, task);
}

// ---------------------------------------------------------------------------
// Elementwise rows, one element per lane: out[i] = f(x[i]) (MapRow) or
// f(x[i], dy[i]) (MapRow2) for i < n, whole vectors first, then the tail
// as one more vector over padded copies (+0.0f in the lanes past n, whose
// results are dropped). out may be x or dy: each vector is read before it
// is written.

template <class V, class F>
void MapRow(const float* x, float* out, int64_t n, const F& f) {
  constexpr int W = V::kWidth;
  int64_t i = 0;
  // Two vectors per iteration: f (erf, exp, tanh) is a long dependency
  // chain, and with two independent ones side by side the compiler can
  // interleave them (on AVX2 it does, with -fschedule-insns: BUILD).
  for (; i + 2 * W <= n; i += 2 * W) {
    const typename V::T a = f(V::Load(x + i));
    const typename V::T b = f(V::Load(x + i + W));
    V::Store(out + i, a);
    V::Store(out + i + W, b);
  }
  for (; i + W <= n; i += W) V::Store(out + i, f(V::Load(x + i)));
  if (i < n) {
    alignas(64) float pad[W];
    for (int l = 0; l < W; ++l) pad[l] = i + l < n ? x[i + l] : 0.0f;
    V::Store(pad, f(V::Load(pad)));
    for (int64_t l = 0; i + l < n; ++l) out[i + l] = pad[l];
  }
}

template <class V, class F>
void MapRow2(const float* x, const float* dy, float* out, int64_t n,
             const F& f) {
  constexpr int W = V::kWidth;
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    const typename V::T a = f(V::Load(x + i), V::Load(dy + i));
    const typename V::T b = f(V::Load(x + i + W), V::Load(dy + i + W));
    V::Store(out + i, a);
    V::Store(out + i + W, b);
  }
  for (; i + W <= n; i += W) {
    V::Store(out + i, f(V::Load(x + i), V::Load(dy + i)));
  }
  if (i < n) {
    alignas(64) float px[W];
    alignas(64) float pd[W];
    for (int l = 0; l < W; ++l) {
      px[l] = i + l < n ? x[i + l] : 0.0f;
      pd[l] = i + l < n ? dy[i + l] : 0.0f;
    }
    V::Store(px, f(V::Load(px), V::Load(pd)));
    for (int64_t l = 0; i + l < n; ++l) out[i + l] = px[l];
  }
}

// `make(V{})` (the address of a function template's instance for V) for a
// vector ISA, null for the scalar set: the LaneKernelSet entries only the
// vector ISAs fill. The template `make` names is instantiated only for
// them.
template <class V, class Fn, class Make>
Fn VectorOnly(const Make& make) {
  if constexpr (V::kWidth > 1) {
    return make(V{});
  } else {
    return nullptr;
  }
}

// ---------------------------------------------------------------------------
// exp and erf: y[i] = canonical::CanonicalExp(x[i]) or CanonicalErf(x[i])
// with V::Exp / V::Erf (vector ISAs only); the tail is one more vector over
// a padded copy.

enum class MathFn { kExp, kErf };

template <class V, MathFn kFn>
typename V::T Apply(typename V::T v) {
  if constexpr (kFn == MathFn::kExp) {
    return V::Exp(v);
  } else {
    return V::Erf(v);
  }
}

template <class V, MathFn kFn>
void MathRow(const float* x, float* y, int64_t n) {
  MapRow<V>(x, y, n, [](typename V::T v) { return Apply<V, kFn>(v); });
}

// ---------------------------------------------------------------------------
// layer_norm's elementwise passes over [rows, d] (kernels/ops/norm.h), lanes
// = neighbouring elements of one row, the row's constants broadcast and
// gamma / beta loaded per column; the spec's operations in its order:
//   kApply      y = CanonicalNan(((x - mean) * rstd) * gamma + beta)
//   kScaleDy    out = dy * gamma
//   kGradApply  dx = CanonicalNan(((dy * gamma - a) - ((x - mean) * rstd) *
//               b) * rstd)
//   kXhat       out = (x - mean) * rstd

template <class V>
void LayerNormRowPass(const LayerNormRowsArgs& a, int64_t r, int64_t j,
                      int64_t end) {
  using T = typename V::T;
  constexpr int W = V::kWidth;
  const int64_t base = r * a.d;
  const float* x = a.x + base;
  const float* dy = a.dy + base;
  float* out = a.out + base;
  switch (a.pass) {
    case LayerNormRowsPass::kApply: {
      const T m = V::Set1(a.mean[r]);
      const T rs = V::Set1(a.rstd[r]);
      for (; j + W <= end; j += W) {
        const T xhat = V::Mul(V::Sub(V::Load(x + j), m), rs);
        const T y =
            V::Add(V::Mul(xhat, V::Load(a.gamma + j)), V::Load(a.beta + j));
        V::Store(out + j, CanonicalNanOf<V>(y, a.nan));
      }
      break;
    }
    case LayerNormRowsPass::kScaleDy:
      for (; j + W <= end; j += W) {
        V::Store(out + j, V::Mul(V::Load(dy + j), V::Load(a.gamma + j)));
      }
      break;
    case LayerNormRowsPass::kGradApply: {
      const T m = V::Set1(a.mean[r]);
      const T rs = V::Set1(a.rstd[r]);
      const T av = V::Set1(a.a[r]);
      const T bv = V::Set1(a.b[r]);
      for (; j + W <= end; j += W) {
        const T g = V::Mul(V::Load(dy + j), V::Load(a.gamma + j));
        const T xhat = V::Mul(V::Sub(V::Load(x + j), m), rs);
        const T v = V::Mul(V::Sub(V::Sub(g, av), V::Mul(xhat, bv)), rs);
        V::Store(out + j, CanonicalNanOf<V>(v, a.nan));
      }
      break;
    }
    case LayerNormRowsPass::kXhat: {
      const T m = V::Set1(a.mean[r]);
      const T rs = V::Set1(a.rstd[r]);
      for (; j + W <= end; j += W) {
        V::Store(out + j, V::Mul(V::Sub(V::Load(x + j), m), rs));
      }
      break;
    }
  }
  if constexpr (W > 1) {
    if (j < end) LayerNormRowPass<ScalarLanes>(a, r, j, end);
  }
}

template <class V>
void LayerNormRows(const LayerNormRowsArgs& a, ThreadPool* pool) {
  if (a.rows * a.d < kMinParallelElements) pool = nullptr;
  const int64_t per_task = MaxI(1, kMinParallelElements / MaxI(1, a.d));
  const int64_t tasks = (a.rows + per_task - 1) / per_task;
  auto task = [&](int64_t t) {
    const int64_t r1 = MinI(a.rows, (t + 1) * per_task);
    for (int64_t r = t * per_task; r < r1; ++r) {
      LayerNormRowPass<V>(a, r, 0, a.d);
    }
  };
  For(pool, tasks, task);
}

// ---------------------------------------------------------------------------
// softmax over the last axis (kernels/ops/norm.h's SoftmaxLastForwardRowOnce
// and SoftmaxLastGradRowOnce), lanes = rows r0 .. r0 + W - 1 for the row
// reductions (bias_add.grad's walk over a [1, rows, d] image, W x W blocks
// transposed in registers), row layout for the elementwise passes:
//   max  m = row[0], then m = row[j] where row[j] > m, j < n (each lane's
//        own length n: d, or r mod d + 1 when causal)
//   out[j] = exp(row[j] - m) for j < n, +0.0f after (the vector exp)
//   sum  the canonical sum of out[0 .. d): the terms past n are +0.0f and
//        every chain and tree node before them is >= +0.0f or NaN (sums of
//        exps), so adding them changes no bit (a node + (+0.0f) is the
//        node; a tree over trailing +0.0f chunks groups the real chunks as
//        the shorter tree does)
//   stats    (softmax_xent) the max and the sum stored, out left holding
//            the exps
//   forward  y[j] = CanonicalNan(out[j] / sum), j < n
//   grad     y[j] likewise; g = the canonical dot of (y, dy) over j < n
//            (lanes past their length keep their chain, so dy there is
//            never read into it); dx[j] = CanonicalNan(y[j] * (dy[j] - g))

// Per lane: whether term j is inside the lane's row (j < length).
template <class V>
typename V::M InRow(typename V::T length, int64_t j) {
  return V::Greater(length, V::Set1(static_cast<float>(j)));
}

template <class V>
struct RowMaxTerm {
  using T = typename V::T;
  T length;
  T m = V::Zero();
  int64_t j = 0;
  void Step(T x, T) {
    if (j == 0) {
      m = x;
    } else {
      m = V::Select(V::AndM(InRow<V>(length, j), V::Greater(x, m)), m, x);
    }
    ++j;
  }
  void Close() {}
};

template <class V>
struct RowDotTerm {
  using T = typename V::T;
  T length;
  T acc = V::Zero();
  VecTree<V> tree;
  int64_t j = 0;
  void Step(T y, T dy) {
    acc = V::Select(InRow<V>(length, j), acc, V::Fma(y, dy, acc));
    ++j;
  }
  void Close() {
    tree.Push(acc);
    acc = V::Zero();
  }
};

struct SoftmaxBlock {
  const LaneBiasGeometry& g;  // {1, rows, d}
  const LaneSoftmaxArgs& a;
  template <class V, bool kPartial>
  void Run(int64_t r0, int lanes) {
    using T = typename V::T;
    constexpr int W = V::kWidth;
    const int64_t d = g.spatial;
    alignas(64) float len[W];
    // The walks below stop at the longest lane's length: the terms past it
    // (a causal block's upper triangle, up to half of every row) change no
    // lane's max, sum or dot. The max and the dot pass over every term past
    // a lane's length; the sum adds +0.0f there to a chain >= +0.0f or NaN;
    // and the chunks past it, walked, only closed +0.0f partials into the
    // trees, which change no node (no chain from +0.0f ends at -0.0f).
    int64_t longest = 0;
    for (int l = 0; l < W; ++l) {
      const int64_t r = r0 + (l < lanes ? l : 0);
      const int64_t n = a.causal ? r % d + 1 : d;
      len[l] = static_cast<float>(n);
      longest = MaxI(longest, n);
    }
    const T length = V::Load(len);
    if (a.x_is_y) {  // softmax.grad from the forward's y
      Grad<V, kPartial>(a.x, r0, lanes, length, len, longest);
      for (int l = 0; l < lanes; ++l) {
        float* out = a.out + (r0 + l) * d;
        for (int64_t j = static_cast<int64_t>(len[l]); j < d; ++j) out[j] = 0;
      }
      return;
    }
    RowMaxTerm<V> max_term{length};
    WalkChannels<V, false, kPartial>(g, a.x, nullptr, r0, lanes, max_term, 0,
                                     longest);
    alignas(64) float max[W];
    V::Store(max, max_term.m);
    for (int l = 0; l < lanes; ++l) {
      const int64_t n = static_cast<int64_t>(len[l]);
      const float* row = a.x + (r0 + l) * d;
      float* out = a.out + (r0 + l) * d;
      const T m = V::Set1(max[l]);
      int64_t j = 0;
      for (; j + W <= n; j += W) {
        V::Store(out + j, V::Exp(V::Sub(V::Load(row + j), m)));
      }
      if (j < n) {
        alignas(64) float pad[W];
        for (int q = 0; q < W; ++q) pad[q] = j + q < n ? row[j + q] : 0.0f;
        V::Store(pad, V::Exp(V::Sub(V::Load(pad), m)));
        for (int64_t q = 0; j + q < n; ++q) out[j + q] = pad[q];
      }
      for (j = n; j < d; ++j) out[j] = 0.0f;
    }
    SumTerm<V> sum_term;
    WalkChannels<V, false, kPartial>(g, a.out, nullptr, r0, lanes, sum_term, 0,
                                     longest);
    const T sums = sum_term.tree.Result();
    if (a.row_max != nullptr) {
      StoreLanes<V>(a.row_max + r0, max_term.m, lanes);
      StoreLanes<V>(a.row_sum + r0, sums, lanes);
      return;
    }
    alignas(64) float sum[W];
    V::Store(sum, sums);
    for (int l = 0; l < lanes; ++l) {
      Normalize<V>(a.out + (r0 + l) * d, static_cast<int64_t>(len[l]), sum[l]);
    }
    if (a.dy == nullptr) return;
    Grad<V, kPartial>(a.out, r0, lanes, length, len, longest);
  }

  // The grad's rows r0 .. r0 + lanes from y's: g = the canonical dot of (y,
  // dy) per row, then out = CanonicalNan(y * (dy - g)) over each row's
  // length (y may be out).
  template <class V, bool kPartial>
  void Grad(const float* y, int64_t r0, int lanes, typename V::T length,
            const float* len, int64_t longest) const {
    constexpr int W = V::kWidth;
    const int64_t d = g.spatial;
    RowDotTerm<V> dot_term{length};
    WalkChannels<V, true, kPartial>(g, y, a.dy, r0, lanes, dot_term, 0,
                                    longest);
    alignas(64) float dot[W];
    V::Store(dot, dot_term.tree.Result());
    for (int l = 0; l < lanes; ++l) {
      const int64_t row = (r0 + l) * d;
      GradOut<V>(a.dy + row, y + row, a.out + row, static_cast<int64_t>(len[l]),
                 dot[l]);
    }
  }

  // out[j] = CanonicalNan(out[j] / sum) for j < n.
  template <class V>
  void Normalize(float* out, int64_t n, float sum) const {
    constexpr int W = V::kWidth;
    const typename V::T s = V::Set1(sum);
    int64_t j = 0;
    for (; j + W <= n; j += W) {
      V::Store(out + j, CanonicalNanOf<V>(V::Div(V::Load(out + j), s), a.nan));
    }
    if constexpr (W > 1) {
      if (j < n) Normalize<ScalarLanes>(out + j, n - j, sum);
    }
  }

  // out[j] = CanonicalNan(y[j] * (dy[j] - g)) for j < n (y may be out).
  template <class V>
  void GradOut(const float* dy, const float* y, float* out, int64_t n,
               float g) const {
    constexpr int W = V::kWidth;
    const typename V::T gv = V::Set1(g);
    int64_t j = 0;
    for (; j + W <= n; j += W) {
      const typename V::T v =
          V::Mul(V::Load(y + j), V::Sub(V::Load(dy + j), gv));
      V::Store(out + j, CanonicalNanOf<V>(v, a.nan));
    }
    if constexpr (W > 1) {
      if (j < n) GradOut<ScalarLanes>(dy + j, y + j, out + j, n - j, g);
    }
  }
};

template <class V>
void SoftmaxRows(const LaneSoftmaxArgs& a, ThreadPool* pool) {
  const LaneBiasGeometry g{1, a.rows, a.d};
  SoftmaxBlock block{g, a};
  ForChannelBlocks<V>(g, pool, block);
}

// ---------------------------------------------------------------------------
// adam.update / adamw.update (kernels/ops/optimizers.h's AdamElement), one
// element per lane, the spec's operations in its order (decay first when
// decoupled); the tail one element at a time with the same code.

template <class V>
void AdamRun(const LaneAdamScalars& s, float* w, float* m, float* v,
             const float* g, int64_t i, int64_t n) {
  using T = typename V::T;
  constexpr int W = V::kWidth;
  const T beta1 = V::Set1(s.beta1), beta2 = V::Set1(s.beta2);
  const T c1 = V::Set1(s.c1), c2 = V::Set1(s.c2);
  const T bc1 = V::Set1(s.bc1), bc2 = V::Set1(s.bc2);
  const T eps = V::Set1(s.eps), lr = V::Set1(s.lr), decay = V::Set1(s.decay);
  for (; i + W <= n; i += W) {
    T wv = V::Load(w + i);
    if (s.decoupled) wv = V::Mul(wv, decay);
    const T gv = V::Load(g + i);
    const T mn = V::Add(V::Mul(beta1, V::Load(m + i)), V::Mul(c1, gv));
    const T q = V::Mul(gv, gv);
    const T vn = V::Add(V::Mul(beta2, V::Load(v + i)), V::Mul(c2, q));
    V::Store(m + i, mn);
    V::Store(v + i, vn);
    const T mh = V::Div(mn, bc1);
    const T vh = V::Div(vn, bc2);
    const T d = V::Add(V::Sqrt(vh), eps);
    const T u = V::Mul(lr, V::Div(mh, d));
    V::Store(w + i, V::Sub(wv, u));
  }
  if constexpr (W > 1) {
    if (i < n) AdamRun<ScalarLanes>(s, w, m, v, g, i, n);
  }
}

template <class V>
void Adam(const LaneAdamScalars& s, float* w, float* m, float* v,
          const float* g, int64_t n) {
  AdamRun<V>(s, w, m, v, g, 0, n);
}

// ---------------------------------------------------------------------------
// gelu (erf form), kernels/ops/activations.h:
//   y  = CanonicalNan((0.5 * x) * (1 + erf(x * inv_sqrt2)))
//   dx = CanonicalNan(dy * (0.5 * (1 + erf(x * inv_sqrt2))
//                           + x * (inv_sqrt2pi * exp(-0.5 * (x * x)))))
// one vector at a time (vector ISAs only); the tail is one more vector over
// padded copies.

template <class V>
typename V::T GeluFromErf(typename V::T x, typename V::T erf,
                          const LaneGeluConstants& k) {
  const typename V::T y =
      V::Mul(V::Mul(V::Set1(0.5f), x), V::Add(V::Set1(1.0f), erf));
  return CanonicalNanOf<V>(y, k.nan);
}

template <class V>
typename V::T GeluOf(typename V::T x, const LaneGeluConstants& k) {
  return GeluFromErf<V>(x, V::Erf(V::Mul(x, V::Set1(k.inv_sqrt2))), k);
}

template <class V>
typename V::T GeluGradFromErf(typename V::T x, typename V::T dy,
                              typename V::T erf, const LaneGeluConstants& k) {
  using T = typename V::T;
  const T e = V::Exp(V::Mul(V::Set1(-0.5f), V::Mul(x, x)));
  const T cdf = V::Mul(V::Set1(0.5f), V::Add(V::Set1(1.0f), erf));
  const T pdf = V::Mul(V::Set1(k.inv_sqrt2pi), e);
  const T d = V::Add(cdf, V::Mul(x, pdf));
  const T dx = V::Mul(dy, d);
  return CanonicalNanOf<V>(dx, k.nan);
}

template <class V>
typename V::T GeluGradOf(typename V::T x, typename V::T dy,
                         const LaneGeluConstants& k) {
  return GeluGradFromErf<V>(x, dy, V::Erf(V::Mul(x, V::Set1(k.inv_sqrt2))), k);
}

// Whether V has ErfBelowOne and NotBelowOne (the AVX2 lanes, which say so
// with kHasErfBelowOne): V::Erf's |x| < 1 branch alone, and the mask of
// the lanes outside it.
template <class V, class = void>
struct HasErfBelowOne : std::false_type {};
template <class V>
struct HasErfBelowOne<V, std::void_t<decltype(V::kHasErfBelowOne)>>
    : std::bool_constant<V::kHasErfBelowOne> {};

// GELU's erf block by block: fn(i, x, e) for every whole vector x = x[i ..]
// of x[0 .. n), with e its erf at x * inv_sqrt2; returns where the whole
// vectors end, for the caller's MapRow over the rest (0 where V has no
// ErfBelowOne: all of it). Within a block of up to kGeluBlock floats every
// vector first gets the erf's |u| < 1 branch alone, without the other
// branch's division and exp that V::Erf computes on every lane and
// discards. The lanes outside it (|u| >= 1 and NaN: a few percent of
// gpt_block's fc outputs) are then gathered, W at a time, and given the
// whole V::Erf, two vectors at once so that the two chains interleave. Each
// lane's erf comes from its own branch's operations either way, so the
// bits are V::Erf's. (Taken only by pairs of vectors wholly within the
// short branch, as before, it left gpt_block's gelu.forward at 4.4 ms on
// the Zen 2 host; lane by lane, 2.5 ms.)
template <class V, class F>
int64_t GeluBlocks(const float* x, int64_t n, const LaneGeluConstants& k,
                   const F& fn) {
  int64_t i = 0;
  if constexpr (HasErfBelowOne<V>::value) {
    using T = typename V::T;
    constexpr int W = V::kWidth;
    constexpr int64_t kGeluBlock = 64 * W;
    alignas(64) float erf[kGeluBlock];
    int32_t outside[kGeluBlock];
    alignas(64) float gathered[2 * W];
    const T inv_sqrt2 = V::Set1(k.inv_sqrt2);
    for (int64_t len; (len = std::min(kGeluBlock, (n - i) / W * W)) > 0;
         i += len) {
      const float* xb = x + i;
      int64_t count = 0;
      for (int64_t j = 0; j < len; j += W) {
        const T u = V::Mul(V::Load(xb + j), inv_sqrt2);
        V::Store(erf + j, V::ErfBelowOne(u));
        for (unsigned m = V::NotBelowOne(u); m != 0; m &= m - 1) {
          outside[count++] = static_cast<int32_t>(j + __builtin_ctz(m));
        }
      }
      for (int64_t s = 0; s < count; s += 2 * W) {
        // A short last group repeats its last lane (its results dropped).
        const int64_t g = std::min<int64_t>(2 * W, count - s);
        for (int64_t r = 0; r < 2 * W; ++r) {
          gathered[r] = xb[outside[s + std::min(r, g - 1)]];
        }
        V::Store(gathered, V::Erf(V::Mul(V::Load(gathered), inv_sqrt2)));
        if (g > W) {
          V::Store(gathered + W,
                   V::Erf(V::Mul(V::Load(gathered + W), inv_sqrt2)));
        }
        for (int64_t r = 0; r < g; ++r) erf[outside[s + r]] = gathered[r];
      }
      for (int64_t j = 0; j < len; j += W) {
        fn(i + j, V::Load(xb + j), V::Load(erf + j));
      }
    }
  }
  return i;
}

template <class V>
void GeluRow(const float* x, float* y, int64_t n, const LaneGeluConstants& k) {
  using T = typename V::T;
  const int64_t i = GeluBlocks<V>(x, n, k, [y, &k](int64_t i, T xv, T e) {
    V::Store(y + i, GeluFromErf<V>(xv, e, k));
  });
  MapRow<V>(x + i, y + i, n - i, [&k](T v) { return GeluOf<V>(v, k); });
}

template <class V>
void GeluGradRow(const float* x, const float* dy, float* dx, int64_t n,
                 const LaneGeluConstants& k) {
  using T = typename V::T;
  const int64_t i = GeluBlocks<V>(x, n, k, [dy, dx, &k](int64_t i, T xv, T e) {
    V::Store(dx + i, GeluGradFromErf<V>(xv, V::Load(dy + i), e, k));
  });
  MapRow2<V>(x + i, dy + i, dx + i, n - i,
             [&k](T v, T d) { return GeluGradOf<V>(v, d, k); });
}

// ---------------------------------------------------------------------------
// sigmoid, tanh, silu, gelu (tanh form), kernels/ops/activations.h, one
// element per lane around V::Exp and V::Tanh:
//   sigmoid  s = 1 / (1 + exp(-x));  y = s;  d = s * (1 - s)
//   tanh     t = tanh(x);  y = t;  d = 1 - t * t
//   silu     y = x * s;  d = s * (1 + x * (1 - s))
//   gelu_tanh  t = tanh(sqrt2_over_pi * (x + cubic * ((x * x) * x)));
//            y = (0.5 * x) * (1 + t);
//            d = 0.5 * (1 + t) + ((0.5 * x) * (1 - t * t)) *
//                (sqrt2_over_pi * (1 + cubic3 * (x * x)))
//   y = CanonicalNan(y), dx = CanonicalNan(dy * d).

template <class V>
typename V::T SigmoidOf(typename V::T x) {
  const typename V::T one = V::Set1(1.0f);
  return V::Div(one, V::Add(one, V::Exp(V::Neg(x))));
}

template <class V>
typename V::T GeluTanhOfArg(typename V::T x, const LaneActivationConstants& k) {
  const typename V::T cube = V::Mul(V::Mul(x, x), x);
  return V::Tanh(V::Mul(V::Set1(k.sqrt2_over_pi),
                        V::Add(x, V::Mul(V::Set1(k.cubic), cube))));
}

template <class V, LaneActivation kAct>
typename V::T ActivationOf(typename V::T x, const LaneActivationConstants& k) {
  using T = typename V::T;
  const T one = V::Set1(1.0f);
  T y;
  if constexpr (kAct == LaneActivation::kSigmoid) {
    y = SigmoidOf<V>(x);
  } else if constexpr (kAct == LaneActivation::kTanh) {
    y = V::Tanh(x);
  } else if constexpr (kAct == LaneActivation::kSilu) {
    y = V::Mul(x, SigmoidOf<V>(x));
  } else {
    const T t = GeluTanhOfArg<V>(x, k);
    y = V::Mul(V::Mul(V::Set1(0.5f), x), V::Add(one, t));
  }
  return CanonicalNanOf<V>(y, k.nan);
}

template <class V, LaneActivation kAct>
typename V::T ActivationGradOf(typename V::T x, typename V::T dy,
                               const LaneActivationConstants& k) {
  using T = typename V::T;
  const T one = V::Set1(1.0f);
  T d;
  if constexpr (kAct == LaneActivation::kSigmoid) {
    const T s = SigmoidOf<V>(x);
    d = V::Mul(s, V::Sub(one, s));
  } else if constexpr (kAct == LaneActivation::kTanh) {
    const T t = V::Tanh(x);
    d = V::Sub(one, V::Mul(t, t));
  } else if constexpr (kAct == LaneActivation::kSilu) {
    const T s = SigmoidOf<V>(x);
    d = V::Mul(s, V::Add(one, V::Mul(x, V::Sub(one, s))));
  } else {
    const T t = GeluTanhOfArg<V>(x, k);
    const T half = V::Set1(0.5f);
    const T du = V::Mul(V::Set1(k.sqrt2_over_pi),
                        V::Add(one, V::Mul(V::Set1(k.cubic3), V::Mul(x, x))));
    d = V::Add(V::Mul(half, V::Add(one, t)),
               V::Mul(V::Mul(V::Mul(half, x), V::Sub(one, V::Mul(t, t))), du));
  }
  return CanonicalNanOf<V>(V::Mul(dy, d), k.nan);
}

template <class V, LaneActivation kAct>
void ActivationRowOf(const float* x, float* y, int64_t n,
                     const LaneActivationConstants& k) {
  MapRow<V>(x, y, n,
            [&k](typename V::T v) { return ActivationOf<V, kAct>(v, k); });
}

template <class V, LaneActivation kAct>
void ActivationGradRowOf(const float* x, const float* dy, float* dx, int64_t n,
                         const LaneActivationConstants& k) {
  MapRow2<V>(x, dy, dx, n, [&k](typename V::T v, typename V::T d) {
    return ActivationGradOf<V, kAct>(v, d, k);
  });
}

template <class V>
void ActivationRow(LaneActivation kind, const float* x, float* y, int64_t n,
                   const LaneActivationConstants& k) {
  switch (kind) {
    case LaneActivation::kSigmoid:
      return ActivationRowOf<V, LaneActivation::kSigmoid>(x, y, n, k);
    case LaneActivation::kTanh:
      return ActivationRowOf<V, LaneActivation::kTanh>(x, y, n, k);
    case LaneActivation::kSilu:
      return ActivationRowOf<V, LaneActivation::kSilu>(x, y, n, k);
    case LaneActivation::kGeluTanh:
      return ActivationRowOf<V, LaneActivation::kGeluTanh>(x, y, n, k);
  }
}

template <class V>
void ActivationGradRow(LaneActivation kind, const float* x, const float* dy,
                       float* dx, int64_t n, const LaneActivationConstants& k) {
  switch (kind) {
    case LaneActivation::kSigmoid:
      return ActivationGradRowOf<V, LaneActivation::kSigmoid>(x, dy, dx, n, k);
    case LaneActivation::kTanh:
      return ActivationGradRowOf<V, LaneActivation::kTanh>(x, dy, dx, n, k);
    case LaneActivation::kSilu:
      return ActivationGradRowOf<V, LaneActivation::kSilu>(x, dy, dx, n, k);
    case LaneActivation::kGeluTanh:
      return ActivationGradRowOf<V, LaneActivation::kGeluTanh>(x, dy, dx, n, k);
  }
}

// ---------------------------------------------------------------------------
// relu: y = x <= 0 ? +0 : x (a NaN passes with its bits, -0 gives +0), and
// dx = x > 0 ? dy : +0 (NaN x gives +0), kernels/ops/elementwise.h.
// Replaces(+0, x) holds for x > 0 and for NaN x; Replaces(+inf, x) for NaN
// x only.

template <class V>
typename V::T ReluOf(typename V::T x) {
  return V::Select(V::Replaces(V::Zero(), x), V::Zero(), x);
}

template <class V>
typename V::T ReluGradOf(typename V::T x, typename V::T dy) {
  const typename V::T kept =
      V::Select(V::Replaces(V::Zero(), x), V::Zero(), dy);
  return V::Select(V::Replaces(V::Set1(__builtin_inff()), x), kept, V::Zero());
}

// With `stream`, StoreOut's non-temporal stores.
template <class V>
void ReluRow(const float* x, float* y, int64_t n, bool stream) {
  constexpr int W = V::kWidth;
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    StoreOut<V>(y + i, ReluOf<V>(V::Load(x + i)), stream);
  }
  for (; i < n; ++i) y[i] = ReluOf<ScalarLanes>(x[i]);
  if (stream) V::Fence();
}

template <class V>
void ReluGradRow(const float* x, const float* dy, float* dx, int64_t n,
                 bool stream) {
  constexpr int W = V::kWidth;
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    StoreOut<V>(dx + i, ReluGradOf<V>(V::Load(x + i), V::Load(dy + i)), stream);
  }
  for (; i < n; ++i) dx[i] = ReluGradOf<ScalarLanes>(x[i], dy[i]);
  if (stream) V::Fence();
}

// Floats from Philox bits (kernels/random/philox.h, kernels/ops/dropout.h),
// one element per lane, the spec's operations:
//   dropout   m = (bits >> 8) >= threshold ? scale : 0;  mask = m;
//             y = x * m  (the comparison on exact floats: both < 2^24)
//   uniform   u = float(bits >> 8) * 2^-24;  r = a + (b - a) * u;
//             r >= b: below_b (BitsToUniform);  out = fma(scale, r, add)
template <class V>
void DropoutRow(const uint32_t* bits, uint32_t threshold, float scale,
                const float* x, float* y, float* mask, int64_t n) {
  using T = typename V::T;
  constexpr int W = V::kWidth;
  const T t = V::Set1(static_cast<float>(threshold));
  const T sc = V::Set1(scale);
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const T m =
        V::Select(V::GreaterEqual(V::U24ToFloat(bits + i), t), V::Zero(), sc);
    V::Store(mask + i, m);
    V::Store(y + i, V::Mul(V::Load(x + i), m));
  }
  if (i < n) {
    alignas(64) uint32_t pb[W] = {};
    alignas(64) float px[W] = {};
    alignas(64) float py[W];
    alignas(64) float pm[W];
    for (int l = 0; i + l < n; ++l) {
      pb[l] = bits[i + l];
      px[l] = x[i + l];
    }
    DropoutRow<V>(pb, threshold, scale, px, py, pm, W);
    for (int64_t l = 0; i + l < n; ++l) {
      mask[i + l] = pm[l];
      y[i + l] = py[l];
    }
  }
}

template <class V>
void UniformFmaRow(const uint32_t* bits, const LaneUniformArgs& k,
                   const float* add, float* out, int64_t n) {
  using T = typename V::T;
  constexpr int W = V::kWidth;
  const T a = V::Set1(k.a);
  const T b = V::Set1(k.b);
  const T d = V::Set1(k.b - k.a);
  const T below = V::Set1(k.below_b);
  const T scale = V::Set1(k.scale);
  const T unit = V::Set1(0x1.0p-24f);
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const T u = V::Mul(V::U24ToFloat(bits + i), unit);
    T r = V::Add(a, V::Mul(d, u));
    r = V::Select(V::GreaterEqual(r, b), r, below);
    V::Store(out + i, V::Fma(scale, r, V::Load(add + i)));
  }
  if (i < n) {
    alignas(64) uint32_t pb[W] = {};
    alignas(64) float pa[W] = {};
    alignas(64) float po[W];
    for (int l = 0; i + l < n; ++l) {
      pb[l] = bits[i + l];
      pa[l] = add[i + l];
    }
    UniformFmaRow<V>(pb, k, pa, po, W);
    for (int64_t l = 0; i + l < n; ++l) out[i + l] = po[l];
  }
}

// Philox blocks first, first + 1, ... of `stream`, W at a time
// (V::PhiloxBlocks), words in block order; stops before a group whose
// counters' low words would wrap and returns the blocks written, a
// multiple of W (the caller computes the rest).
template <class V>
int64_t PhiloxBlocksRun(uint64_t seed, uint64_t stream, uint64_t first,
                        int64_t blocks, uint32_t* out) {
  constexpr int W = V::kWidth;
  int64_t b = 0;
  for (; b + W <= blocks; b += W) {
    const uint64_t f = first + static_cast<uint64_t>(b);
    if (static_cast<uint32_t>(f) > 0xFFFFFFFFu - (W - 1)) break;
    V::PhiloxBlocks(seed, stream, f, out + 4 * b);
  }
  return b;
}

template <class V>
const LaneKernelSet& KernelSet() {
  static const LaneKernelSet set = {
      &BiasGrad<V>,
      &MaxPoolForward<V>,
      &MaxPoolGrad<V>,
      &AvgPoolForward<V>,
      &AvgPoolGrad<V>,
      &GlobalPoolForward<V>,
      &GlobalPoolGrad<V>,
      &BatchNormVarSum<V>,
      &BatchNormGradChains<V>,
      &BatchNormTraining<V>,
      VectorOnly<V, decltype(LaneKernelSet::exp)>(
          [](auto v) { return &MathRow<decltype(v), MathFn::kExp>; }),
      VectorOnly<V, decltype(LaneKernelSet::erf)>(
          [](auto v) { return &MathRow<decltype(v), MathFn::kErf>; }),
      VectorOnly<V, decltype(LaneKernelSet::gelu)>(
          [](auto v) { return &GeluRow<decltype(v)>; }),
      VectorOnly<V, decltype(LaneKernelSet::gelu_grad)>(
          [](auto v) { return &GeluGradRow<decltype(v)>; }),
      VectorOnly<V, decltype(LaneKernelSet::softmax)>(
          [](auto v) { return &SoftmaxRows<decltype(v)>; }),
      &LayerNormRows<V>,
      &Adam<V>,
      &ReluRow<V>,
      &ReluGradRow<V>,
      &SquareChunks<V>,
      VectorOnly<V, decltype(LaneKernelSet::activation)>(
          [](auto v) { return &ActivationRow<decltype(v)>; }),
      VectorOnly<V, decltype(LaneKernelSet::activation_grad)>(
          [](auto v) { return &ActivationGradRow<decltype(v)>; }),
      VectorOnly<V, decltype(LaneKernelSet::philox_blocks)>(
          [](auto v) { return &PhiloxBlocksRun<decltype(v)>; }),
      &ResizeBilinear<V>,
      VectorOnly<V, decltype(LaneKernelSet::dropout)>(
          [](auto v) { return &DropoutRow<decltype(v)>; }),
      VectorOnly<V, decltype(LaneKernelSet::uniform_fma)>(
          [](auto v) { return &UniformFmaRow<decltype(v)>; })};
  return set;
}

}  // namespace lockstep::kernels::cpu_internal::LS_LANE_ISA_NS
