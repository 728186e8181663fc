// GatherChain: the canonical reduction rule for terms produced one at a time.
//
// kernels/canonical/reduce.h evaluates sums and dot products over strided
// arrays. The spatial ops (convolution taps, pooling windows, the gathers
// that replace scatter-style backward passes) produce their terms by index
// arithmetic instead, one term at a time, in the op's canonical order.
// GatherChain applies exactly the same rule to such a stream:
//
//   terms t_0, t_1, ..., t_{n-1} in canonical order
//   chunk j = terms [256 j, 256 j + 256), a sequential chain from +0.0f:
//     Fma(a, b):  acc = fma(a, b, acc)      (dot-product terms)
//     Add(x):     acc = acc + x             (sum terms)
//   the chunk partials are combined by the pairwise tree of reduce.h
//   (TreeAccumulator), and n == 0 gives +0.0f.
//
// Feeding a[i], b[i] of an array to Fma() in order gives the same bits as
// CanonicalDot(a, 1, b, 1, n); feeding x[i] to Add() gives CanonicalSum
// (gather_test.cc checks both at every chunk boundary).
//
// Ownership and threading: a GatherChain is a small value object (about
// 0.8 KB, mostly the tree's stack); one per output element, owned by the
// thread computing that element. Not thread-safe; never shared.
//
// LS_HD: compiled by the host compiler and by nvcc; no STL, no exceptions.
#ifndef LOCKSTEP_KERNELS_CANONICAL_GATHER_H_
#define LOCKSTEP_KERNELS_CANONICAL_GATHER_H_

#include <cstdint>

#include "kernels/canonical/hd.h"
#include "kernels/canonical/reduce.h"

namespace lockstep::canonical {

class GatherChain {
 public:
  // Appends the dot-product term a * b: acc = fma(a, b, acc).
  LS_HD_INLINE void Fma(float a, float b) {
    acc_ = LsFma(a, b, acc_);
    Step();
  }

  // Appends the sum term x: acc = acc + x (one IEEE addition).
  LS_HD_INLINE void Add(float x) {
    acc_ = acc_ + x;
    Step();
  }

  // Number of terms appended so far.
  LS_HD_INLINE int64_t count() const { return count_; }

  // Closes the last (possibly short) chunk and returns the canonical value of
  // the reduction; +0.0f when no term was appended. Call once: afterwards the
  // chain is finished and must not be appended to.
  LS_HD_INLINE float Finish() {
    if (in_chunk_ > 0) {
      tree_.Push(acc_);
      acc_ = 0.0f;
      in_chunk_ = 0;
    }
    return tree_.Result();
  }

 private:
  LS_HD_INLINE void Step() {
    ++count_;
    if (++in_chunk_ == kChunk) {
      tree_.Push(acc_);
      acc_ = 0.0f;
      in_chunk_ = 0;
    }
  }

  float acc_ = 0.0f;      // the running chain of the current chunk
  int64_t in_chunk_ = 0;  // terms in the current chunk, 0 .. kChunk - 1
  int64_t count_ = 0;     // terms appended in total
  TreeAccumulator tree_;
};

// Canonical sum of term(0), term(1), ..., term(n - 1). `term` is any
// callable float(int64_t) usable on the device (a functor with an LS_HD
// operator()); it is called exactly once per index, in increasing order.
template <typename TermFn>
LS_HD_INLINE float CanonicalSumOf(int64_t n, const TermFn& term) {
  GatherChain chain;
  for (int64_t t = 0; t < n; ++t) chain.Add(term(t));
  return chain.Finish();
}

// Canonical sum over t = o * inner + i (o outer, i inner, both increasing)
// of x[o * outer_stride + i * inner_stride]; outer * inner terms in all.
LS_HD_INLINE float CanonicalSum2D(const float* x, int64_t outer,
                                  int64_t outer_stride, int64_t inner,
                                  int64_t inner_stride) {
  GatherChain chain;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      chain.Add(x[o * outer_stride + i * inner_stride]);
    }
  }
  return chain.Finish();
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_CANONICAL_GATHER_H_
