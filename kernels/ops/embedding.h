// CANONICAL embedding lookup (a gather) and its backward (a scatter-add).
//
//   embedding.forward      y[p, d] = w[ids[p], d]                 a copy
//   embedding.grad_weight  dw[v, d] = canonical sum, over the positions p
//                          with ids[p] == v taken in increasing p, of
//                          dy[p, d]
//
// p runs over the flattened positions of ids (row-major: for token inputs
// [N, T], p = n * T + t). The backward is the classic scatter-add site:
// frameworks add dy rows into dw with atomics, in thread arrival order. The
// canonical order is the sorted segment reduction: each row v sums ITS
// terms (only the positions naming v, nothing else) in increasing position
// order, as one canonical reduction of kernels/canonical/reduce.h (chains
// of 256 terms from +0.0f, then the pairwise tree over the chain partials).
// A row no position names is +0.0f.
//
// The segments come from a stable counting sort of the positions by id
// (SortPositionsById): order[offsets[v] .. offsets[v + 1]) lists the
// positions of id v in increasing order. The CPU and CUDA backends both
// build it on the host (the ids are validated there anyway) and then run
// the same per-element / per-row bodies below.
//
// Header-only and LS_HD like the other op bodies. Preconditions: ids in
// [0, vocab) (ValidateEmbedding checks it), pointers sized as the shape
// says, outputs not aliasing inputs.
#ifndef LOCKSTEP_KERNELS_OPS_EMBEDDING_H_
#define LOCKSTEP_KERNELS_OPS_EMBEDDING_H_

#include <cstdint>

#include "kernels/canonical/hd.h"
#include "kernels/canonical/reduce.h"

namespace lockstep::canonical {

// Largest vocabulary (rows of w): ids are int32, and the sort's offsets
// array has vocab + 1 entries.
inline constexpr int64_t kMaxEmbeddingVocab = int64_t{1} << 24;

struct EmbeddingShape {
  int64_t positions = 0;  // number of ids (the product of ids' dims)
  int64_t vocab = 0;      // rows of w
  int64_t dim = 0;        // columns of w
};

// y[p, d] for flat output index `index` = p * dim + d.
LS_HD_INLINE float EmbeddingForwardElement(const EmbeddingShape& s,
                                           const int32_t* ids, const float* w,
                                           int64_t index) {
  const int64_t p = index / s.dim;
  const int64_t d = index - p * s.dim;
  return w[static_cast<int64_t>(ids[p]) * s.dim + d];
}

// Stable counting sort of the positions by id. offsets has vocab + 1
// entries, order has `positions`. Host code (sequential, O(P + V)).
inline void SortPositionsById(const EmbeddingShape& s, const int32_t* ids,
                              int64_t* offsets, int64_t* order) {
  for (int64_t v = 0; v <= s.vocab; ++v) offsets[v] = 0;
  for (int64_t p = 0; p < s.positions; ++p) ++offsets[ids[p] + 1];
  for (int64_t v = 0; v < s.vocab; ++v) offsets[v + 1] += offsets[v];
  // offsets[v] is now where v's segment starts; fill with a moving cursor
  // that is restored afterwards.
  for (int64_t p = 0; p < s.positions; ++p) order[offsets[ids[p]]++] = p;
  for (int64_t v = s.vocab; v > 0; --v) offsets[v] = offsets[v - 1];
  offsets[0] = 0;
}

// dw[v, d]: the canonical sum of dy[order[k], d] for k in [begin, end).
LS_HD_INLINE float EmbeddingGradElement(const EmbeddingShape& s,
                                        const int64_t* order, int64_t begin,
                                        int64_t end, const float* dy,
                                        int64_t d) {
  TreeAccumulator tree;
  float acc = 0.0f;
  int64_t in_chain = 0;
  for (int64_t k = begin; k < end; ++k) {
    acc = acc + dy[order[k] * s.dim + d];
    if (++in_chain == kChunk) {
      tree.Push(acc);
      acc = 0.0f;
      in_chain = 0;
    }
  }
  if (in_chain > 0) tree.Push(acc);
  return tree.Result();
}

// dw for flat index = v * dim + d (one GPU thread per element).
LS_HD_INLINE float EmbeddingGradFlatElement(const EmbeddingShape& s,
                                            const int64_t* offsets,
                                            const int64_t* order,
                                            const float* dy, int64_t index) {
  const int64_t v = index / s.dim;
  const int64_t d = index - v * s.dim;
  return EmbeddingGradElement(s, order, offsets[v], offsets[v + 1], dy, d);
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_OPS_EMBEDDING_H_
