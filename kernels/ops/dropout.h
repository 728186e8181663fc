// CANONICAL dropout: a Philox mask from the job seed, fingerprinted.
//
//   threshold = uint32(rate * 2^24)           exact (a power-of-two scaling)
//   scale     = 1.0f / (1.0f - rate)          two roundings, once per call
//   keep(i)   = (PhiloxBits(seed, stream, i) >> 8) >= threshold
//   dropout.forward   mask[i] = keep(i) ? scale : +0.0f
//                     y[i]    = x[i] * mask[i]          one rounding
//   dropout.grad      dx[i]   = dy[i] * mask[i]         one rounding
//
// i is the flat (row-major) element index. The executor draws a fresh mask
// for every layer and step: seed = the job seed, stream = kDropoutStreamBase
// + (layer index << 24) + step (docs/canonical-arithmetic.md 3.14). The
// mask is an output, fingerprinted like an activation, and the backward
// reads it instead of drawing again. Integer decisions and one IEEE
// multiply per element: the same bits on every device.
//
// Header-only and LS_HD like the other op bodies.
#ifndef LOCKSTEP_KERNELS_OPS_DROPOUT_H_
#define LOCKSTEP_KERNELS_OPS_DROPOUT_H_

#include <cstdint>

#include "kernels/canonical/hd.h"
#include "kernels/random/philox.h"

namespace lockstep::canonical {

// "DROP" in the high word; the low bits hold (layer << 24) + step.
inline constexpr uint64_t kDropoutStreamBase = 0x44524F5000000000ull;

struct DropoutParams {
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint32_t threshold = 0;  // uint32(rate * 2^24)
  float scale = 1.0f;      // 1 / (1 - rate)
};

// rate in [0, 1) (validated by the caller).
LS_HD_INLINE DropoutParams DropoutParamsOf(float rate, uint64_t seed,
                                           uint64_t stream) {
  DropoutParams p;
  p.seed = seed;
  p.stream = stream;
  p.threshold = static_cast<uint32_t>(rate * 16777216.0f);
  p.scale = 1.0f / (1.0f - rate);
  return p;
}

// The mask value for the element whose Philox bits are `bits`.
LS_HD_INLINE float DropoutMaskOfBits(const DropoutParams& p, uint32_t bits) {
  return (bits >> 8) >= p.threshold ? p.scale : 0.0f;
}

LS_HD_INLINE float DropoutMaskElement(const DropoutParams& p, int64_t i) {
  return DropoutMaskOfBits(
      p, PhiloxBits(p.seed, p.stream, static_cast<uint64_t>(i)));
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_OPS_DROPOUT_H_
