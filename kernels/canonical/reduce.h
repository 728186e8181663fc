// The canonical reduction rule: the one order in which Lockstep adds floats.
//
// Every sum in CANONICAL mode (dot products, weight and bias gradients,
// pooling sums, the loss) is evaluated like this, over the op's canonical
// index order i = 0 .. n-1 (written down per op in
// docs/canonical-arithmetic.md):
//
//   1. Chunks. The index range is cut into consecutive chunks of
//      kChunk = 256 terms (the last one may be shorter). Each chunk is a
//      strictly sequential chain starting from +0.0f:
//        sums:          acc = acc + x[i]
//        dot products:  acc = fma(a[i], b[i], acc)
//   2. Tree. The chunk partials p[0 .. m-1] are combined by
//        T(p, m) = p[0]                                   if m == 1
//        T(p, m) = T(p, h) + T(p + h, m - h)              otherwise,
//      where h is the largest power of two strictly below m.
//      (m = 3 gives (p0 + p1) + p2; m = 4 gives (p0 + p1) + (p2 + p3).)
//   3. n == 0 gives +0.0f.
//
// Chunks can run in parallel (GPU warps, CPU threads) and each chain can be
// vectorised across independent outputs, yet every backend produces the same
// bits because the grouping of additions is fixed by n alone.
//
// All functions here are header-only and LS_HD, so the CPU backend, the CUDA
// backend and the host tests of device code share this exact source.
#ifndef LOCKSTEP_KERNELS_CANONICAL_REDUCE_H_
#define LOCKSTEP_KERNELS_CANONICAL_REDUCE_H_

#include <cstddef>
#include <cstdint>

#include "kernels/canonical/hd.h"

namespace lockstep::canonical {

// Length of one sequential chain. Changing it changes results: it is part of
// the canonical-arithmetic version (kernels/canonical/version.h).
inline constexpr int64_t kChunk = 256;

// Number of chunks a reduction of n terms has (0 for n == 0).
LS_HD_INLINE int64_t NumChunks(int64_t n) { return (n + kChunk - 1) / kChunk; }

// Largest power of two strictly below m (m >= 2).
LS_HD_INLINE int64_t TreeSplit(int64_t m) {
  int64_t h = 1;
  while (h * 2 < m) h *= 2;
  return h;
}

// Accumulates chunk partials, in order, into the canonical pairwise tree.
//
// T(p, m) splits at the largest power of two below m, so every left subtree
// is perfect and the ragged part is always on the right. Pushing partials
// like a binary counter (merging two perfect subtrees of equal size as soon
// as they exist) and folding the remaining stack from the right at the end
// therefore groups the additions exactly as T does, using O(log m) space.
class TreeAccumulator {
 public:
  LS_HD_INLINE void Push(float v) {
    int64_t size = 1;
    while (depth_ > 0 && size_[depth_ - 1] == size) {
      v = value_[depth_ - 1] + v;
      size *= 2;
      --depth_;
    }
    value_[depth_] = v;
    size_[depth_] = size;
    ++depth_;
  }
  // The tree's value; +0.0f when nothing was pushed.
  LS_HD_INLINE float Result() const {
    if (depth_ == 0) return 0.0f;
    float acc = value_[depth_ - 1];
    for (int d = depth_ - 2; d >= 0; --d) acc = value_[d] + acc;
    return acc;
  }

 private:
  float value_[64];
  int64_t size_[64];
  int depth_ = 0;
};

// Combines m chunk partials p[0 .. m-1] with the canonical pairwise tree.
LS_HD_INLINE float TreeCombine(const float* p, int64_t m) {
  TreeAccumulator t;
  for (int64_t i = 0; i < m; ++i) t.Push(p[i]);
  return t.Result();
}

// Sequential chain of plain adds over x[0], x[stride], ... (count terms),
// starting from +0.0f. One chunk of a canonical sum.
LS_HD_INLINE float ChainSum(const float* x, int64_t count, int64_t stride) {
  float acc = 0.0f;
  for (int64_t i = 0; i < count; ++i) acc = acc + x[i * stride];
  return acc;
}

// Sequential fma chain over a[i*sa] * b[i*sb] (count terms) from +0.0f.
// One chunk of a canonical dot product.
LS_HD_INLINE float ChainDot(const float* a, int64_t sa, const float* b,
                            int64_t sb, int64_t count) {
  float acc = 0.0f;
  for (int64_t i = 0; i < count; ++i) acc = LsFma(a[i * sa], b[i * sb], acc);
  return acc;
}

// Canonical sum of n terms x[i * stride].
LS_HD_INLINE float CanonicalSum(const float* x, int64_t n, int64_t stride) {
  if (n <= kChunk) return ChainSum(x, n, stride);
  TreeAccumulator t;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t count = (n - begin < kChunk) ? (n - begin) : kChunk;
    t.Push(ChainSum(x + begin * stride, count, stride));
  }
  return t.Result();
}

// Canonical dot product of n terms a[i * sa] * b[i * sb].
LS_HD_INLINE float CanonicalDot(const float* a, int64_t sa, const float* b,
                                int64_t sb, int64_t n) {
  if (n <= kChunk) return ChainDot(a, sa, b, sb, n);
  TreeAccumulator t;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t count = (n - begin < kChunk) ? (n - begin) : kChunk;
    t.Push(ChainDot(a + begin * sa, sa, b + begin * sb, sb, count));
  }
  return t.Result();
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_CANONICAL_REDUCE_H_
