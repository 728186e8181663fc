// Element functions of the graph data primitives (kernels/graph_ops.h) that
// are more than a word copy: the source offset of a gather output and the
// gather gradient's canonical sorted segment sum (EMBEDDING's,
// kernels/ops/embedding.h). Header-only, LS_HD: the CPU kernels
// (kernels/cpu/graph_data_kernels.cc) and the CUDA per-thread bodies
// (kernels/cuda/thread_bodies.h) call the same definitions.
#ifndef LOCKSTEP_KERNELS_OPS_GRAPH_DATA_H_
#define LOCKSTEP_KERNELS_OPS_GRAPH_DATA_H_

#include <cstdint>

#include "kernels/canonical/hd.h"
#include "kernels/ops/embedding.h"

namespace lockstep::canonical {

// x (or dx) [A, V, B], indices [P], y (or dy) [A, P, B].
struct GatherShape {
  int64_t a = 0, v = 0, p = 0, b = 0;
};

// The offset in x of y element o (row-major over [A, P, B]).
LS_HD_INLINE int64_t GatherSourceOffset(const GatherShape& s,
                                        const int32_t* ids, int64_t o) {
  const int64_t b = o % s.b;
  const int64_t r = o / s.b;
  const int64_t p = r % s.p;
  const int64_t a = r / s.p;
  return (a * s.v + ids[p]) * s.b + b;
}

// gather.grad's dx element o (row-major over [A, V, B]): the canonical sum
// of dy[a, p, b] over the positions p with idx[p] == v in increasing p
// (+0.0f where none). offsets [V + 1] and order [P] are
// SortPositionsById's for the shape {P, V, B}.
LS_HD_INLINE float GatherGradElement(const GatherShape& s,
                                     const int64_t* offsets,
                                     const int64_t* order, const float* dy,
                                     int64_t o) {
  const int64_t b = o % s.b;
  const int64_t r = o / s.b;
  const int64_t v = r % s.v;
  const int64_t a = r / s.v;
  const EmbeddingShape e{s.p, s.v, s.b};
  return EmbeddingGradElement(e, order, offsets[v], offsets[v + 1],
                              dy + a * s.p * s.b, b);
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_OPS_GRAPH_DATA_H_
