// CANONICAL data movement: transpose (an axis permutation) and reshape.
//
//   transpose  in {x} out {y}   y[o_0, .., o_{r-1}] = x[i] with
//                               i_{perm[d]} = o_d (attrs.perm), so
//                               y.shape[d] = x.shape[perm[d]]
//   reshape    in {x} out {y}   y = x's elements in row-major order, under
//                               y's shape (same element count)
//
// Both move 32-bit words and never do float arithmetic, so they are exact;
// their gradients are the inverse movements (transpose by the inverse
// permutation; reshape back to x's shape).
//
// Header-only, LS_HD: TransposeSource maps one output index to its input
// index (a GPU thread's work).
#ifndef LOCKSTEP_KERNELS_OPS_MOVEMENT_H_
#define LOCKSTEP_KERNELS_OPS_MOVEMENT_H_

#include <cstdint>

#include "kernels/canonical/hd.h"

namespace lockstep::canonical {

inline constexpr int kMaxMovementRank = 8;

// y's dimensions and, per y axis d, the stride (elements) of x's axis
// perm[d].
struct TransposeShape {
  int rank = 0;
  int64_t numel = 0;
  int64_t out_dims[kMaxMovementRank] = {};
  int64_t src_strides[kMaxMovementRank] = {};
};

LS_HD_INLINE int64_t TransposeSource(const TransposeShape& s, int64_t o) {
  int64_t src = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    const int64_t dim = s.out_dims[d];
    src += (o % dim) * s.src_strides[d];
    o /= dim;
  }
  return src;
}

LS_HD_INLINE void Transpose(const TransposeShape& s, const uint32_t* x,
                            uint32_t* y) {
  for (int64_t o = 0; o < s.numel; ++o) y[o] = x[TransposeSource(s, o)];
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_OPS_MOVEMENT_H_
