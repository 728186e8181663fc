// Tensor summary statistics: the exact definition, as host+device code.
//
// A fingerprint says *whether* two tensors differ; these statistics say by how
// much, so a divergence report comes with a magnitude. They are defined
// exactly (docs/fingerprints.md, section 8, statistics version 2), so every
// backend computes the same bits and the values themselves can be compared
// across runs:
//
//   The float32 elements are cut into blocks of kStatsBlockElems = 16384
//   (one 64 KiB fingerprint leaf). Inside a block, element k goes to lane
//   k mod 64; each lane keeps two float64 accumulators starting at +0.0 and,
//   in increasing k, for every *finite* x adds (double)x to `sum` and
//   (double)x * (double)x (exact: a float's square fits a double, so a fused
//   multiply-add gives the same bits) to `sum_sq`. The 64 lanes are folded
//   by the halving tree lane[j] = lane[j] + lane[j + w] for
//   w = 32, 16, 8, 4, 2, 1 (j < w). Block results are added in block order
//   to totals starting at +0.0. max_abs is the largest |x| over finite x
//   (+0.0 if none); NaN and ±Inf are only counted.
//
// 64 independent lanes make the CPU code throughput-bound rather than bound
// by the latency of dependent adds (AVX-512: eight 8-wide double vectors per
// accumulator; AVX2: four passes of four 4-wide vectors over each 4 KiB
// chunk in L1) and map onto a warp on the GPU (kernels/cuda/leaf_hash.h: lane t
// of 16 owns chains 4t .. 4t + 3 and takes both rows of each 512-byte load
// in order; the halving tree is then a shuffle tree), while the order of
// every floating-point addition stays fixed. Skipping a non-finite element
// is the same as adding +0.0, because a lane never holds -0.0 (it starts at
// +0.0 and +0.0 + -0.0 = +0.0).
//
// This file is the reference; the AVX2 and AVX-512 leaf kernels are tested
// against it. Thread-safety: pure functions.
#ifndef LOCKSTEP_KERNELS_HASH_STATS_PORTABLE_H_
#define LOCKSTEP_KERNELS_HASH_STATS_PORTABLE_H_

#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <cstring>
#endif

#include "kernels/canonical/float_bits.h"
#include "kernels/canonical/hd.h"

namespace lockstep::hash::portable {

// Elements per statistics block (one 64 KiB leaf of float32).
inline constexpr int64_t kStatsBlockElems = 16384;
// Independent accumulation lanes per block.
inline constexpr int kStatsLanes = 64;
// Version of this statistics definition; it arrived with format version 2
// (docs/fingerprints.md, changelog). Version 1 had 16 lanes per block.
inline constexpr int kStatsVersion = 2;
// |x| bit patterns at or above this are Inf (equal) or NaN (above).
inline constexpr uint32_t kF32InfBits = 0x7f800000U;

// Statistics of one block, or the running totals over blocks.
struct StatsPartial {
  double sum;             // float64 sum of the finite elements
  double sum_sq;          // float64 sum of their squares
  uint32_t max_abs_bits;  // bit pattern of the largest finite |x|
  int64_t nan_count;
  int64_t inf_count;
};

LS_HD_INLINE StatsPartial EmptyStatsPartial() {
  StatsPartial p;
  p.sum = 0.0;
  p.sum_sq = 0.0;
  p.max_abs_bits = 0;
  p.nan_count = 0;
  p.inf_count = 0;
  return p;
}

using ::lockstep::canonical::LsBitsToFloat;
using ::lockstep::canonical::LsFloatToBits;

// Folds kStatsLanes lane values by the halving tree (w = 32, 16, .., 1);
// returns lane 0.
LS_HD_INLINE double FoldLanes(double lanes[kStatsLanes]) {
  for (int w = kStatsLanes / 2; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j) lanes[j] = lanes[j] + lanes[j + w];
  }
  return lanes[0];
}

// One element into its lane: a non-finite value contributes +0.0.
LS_HD_INLINE void StatsStep(float x, double* sum, double* sum_sq,
                            uint32_t* max_finite, bool* any_nonfinite) {
  const uint32_t abs_bits = LsFloatToBits(x) & 0x7fffffffU;
  const bool finite = abs_bits < kF32InfBits;
  const double d = finite ? static_cast<double>(x) : 0.0;
  *sum = *sum + d;
  *sum_sq = *sum_sq + d * d;
  const uint32_t a = finite ? abs_bits : 0U;
  *max_finite = a > *max_finite ? a : *max_finite;
  *any_nonfinite = *any_nonfinite || !finite;
}

// Statistics of one block x[0 .. n). REQUIRES: 0 <= n <= kStatsBlockElems;
// x readable for n floats. x[0] is in-block index 0 (lane 0).
//
// Branch-free per element (a non-finite element contributes +0.0, which
// equals skipping it, see above); NaN/Inf are counted in a second pass only
// when the block holds any.
LS_HD_INLINE StatsPartial StatsOfBlock(const float* x, int64_t n) {
  double sum[kStatsLanes];
  double sum_sq[kStatsLanes];
  for (int j = 0; j < kStatsLanes; ++j) {
    sum[j] = 0.0;
    sum_sq[j] = 0.0;
  }
  uint32_t max_finite = 0;
  bool any_nonfinite = false;
  for (int64_t k = 0; k < n; k += kStatsLanes) {
    const int m = n - k < kStatsLanes ? static_cast<int>(n - k) : kStatsLanes;
    for (int j = 0; j < m; ++j) {
      StatsStep(x[k + j], &sum[j], &sum_sq[j], &max_finite, &any_nonfinite);
    }
  }
  StatsPartial p = EmptyStatsPartial();
  p.sum = FoldLanes(sum);
  p.sum_sq = FoldLanes(sum_sq);
  p.max_abs_bits = max_finite;
  if (any_nonfinite) {
    for (int64_t k = 0; k < n; ++k) {
      const uint32_t abs_bits = LsFloatToBits(x[k]) & 0x7fffffffU;
      if (abs_bits == kF32InfBits) {
        ++p.inf_count;
      } else if (abs_bits > kF32InfBits) {
        ++p.nan_count;
      }
    }
  }
  return p;
}

// Adds the next block's partial to the running totals (block order).
LS_HD_INLINE void AddBlockStats(StatsPartial* total, const StatsPartial& b) {
  total->sum = total->sum + b.sum;
  total->sum_sq = total->sum_sq + b.sum_sq;
  if (b.max_abs_bits > total->max_abs_bits) {
    total->max_abs_bits = b.max_abs_bits;
  }
  total->nan_count += b.nan_count;
  total->inf_count += b.inf_count;
}

}  // namespace lockstep::hash::portable

#endif  // LOCKSTEP_KERNELS_HASH_STATS_PORTABLE_H_
