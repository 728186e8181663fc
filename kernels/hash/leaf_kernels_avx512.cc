// AVX-512 leaf kernels. Built with -mavx512f -mfma on x86-64 (see BUILD);
// only called after fingerprint.cc has checked __builtin_cpu_supports
// ("avx512f").
//
// Self-contained for the same reason as leaf_kernels_avx2.cc: everything here
// has internal linkage and no shared inline header is included, so no
// AVX-512-encoded copy of a shared function can reach another path. The
// fused multiply-adds give the bits of stats_portable.h's sum_sq + d * d,
// because the square of a float is exact in float64.
#include "kernels/hash/leaf_kernels.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__FMA__)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace lockstep::hash::internal {
namespace {

constexpr int kLanes = 64;
constexpr uint32_t kInfBits = 0x7f800000U;

uint64_t Avx512Hash64(const void* data, size_t len) {
  return XXH3_64bits(data, len);
}

uint32_t Bits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof(u));
  return u;
}

double Fold(double lanes[kLanes]) {
  for (int w = kLanes / 2; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j) lanes[j] = lanes[j] + lanes[j + w];
  }
  return lanes[0];
}

// The reference loop of stats_portable.h (non-finite values add +0.0), used
// for the rare block that holds NaN or Inf.
LeafStats ScalarBlockStats(const float* x, size_t n) {
  double sum[kLanes];
  double sum_sq[kLanes];
  for (int j = 0; j < kLanes; ++j) sum[j] = sum_sq[j] = 0.0;
  LeafStats out{0.0, 0.0, 0, 0, 0};
  for (size_t k = 0; k < n; ++k) {
    const int j = static_cast<int>(k & (kLanes - 1));
    const uint32_t a = Bits(x[k]) & 0x7fffffffU;
    if (a < kInfBits) {
      const double d = static_cast<double>(x[k]);
      sum[j] = sum[j] + d;
      sum_sq[j] = sum_sq[j] + d * d;
      if (a > out.max_abs_bits) out.max_abs_bits = a;
    } else if (a == kInfBits) {
      ++out.inf_count;
    } else {
      ++out.nan_count;
    }
  }
  out.sum = Fold(sum);
  out.sum_sq = Fold(sum_sq);
  return out;
}

// 16 floats (lanes 16v .. 16v+15 of a row) into two sum and two sum-of-
// squares vectors; the halves are converted straight from memory
// (vcvtps2pd with a memory operand).
__attribute__((always_inline)) inline void Accumulate16(
    const float* p, const __m512i abs_mask, __m512d& s_lo, __m512d& s_hi,
    __m512d& q_lo, __m512d& q_hi, __m512i& max_bits) {
  const __m512i b = _mm512_loadu_si512(p);
  max_bits = _mm512_max_epu32(max_bits, _mm512_and_si512(b, abs_mask));
  const __m512d lo = _mm512_cvtps_pd(_mm256_loadu_ps(p));
  const __m512d hi = _mm512_cvtps_pd(_mm256_loadu_ps(p + 8));
  s_lo = _mm512_add_pd(s_lo, lo);
  s_hi = _mm512_add_pd(s_hi, hi);
  q_lo = _mm512_fmadd_pd(lo, lo, q_lo);
  q_hi = _mm512_fmadd_pd(hi, hi, q_hi);
}

// One row of 64 floats per iteration: s<i>/q<i> hold lanes 8i .. 8i+7, so
// each lane's additions run in increasing k as the definition requires,
// with 16 independent accumulators. Non-finite values are added like any
// other; if the maximum |x| bit pattern shows one, the block is recomputed
// by the masking reference loop. Meanwhile the next leaf is prefetched, one
// cache line per 64 bytes summed, so the DRAM reads for the next hash
// overlap this loop.
LeafStats Avx512BlockStats(const float* x, size_t n, const void* prefetch,
                           size_t prefetch_bytes) {
  const char* pf = static_cast<const char*>(prefetch);
  const char* const pf_end = pf == nullptr ? nullptr : pf + prefetch_bytes;
  const size_t rows = n / kLanes;
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  __m512d s0 = _mm512_setzero_pd(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0,
          s6 = s0, s7 = s0;
  __m512d q0 = s0, q1 = s0, q2 = s0, q3 = s0, q4 = s0, q5 = s0, q6 = s0,
          q7 = s0;
  __m512i max_bits = _mm512_setzero_si512();
  const float* p = x;
  for (size_t r = 0; r < rows; ++r, p += kLanes) {
    if (pf < pf_end) {
      // One cache line per 64 bytes summed: the whole next leaf.
      _mm_prefetch(pf, _MM_HINT_T0);
      _mm_prefetch(pf + 64, _MM_HINT_T0);
      _mm_prefetch(pf + 128, _MM_HINT_T0);
      _mm_prefetch(pf + 192, _MM_HINT_T0);
      pf += 256;
    }
    Accumulate16(p, abs_mask, s0, s1, q0, q1, max_bits);
    Accumulate16(p + 16, abs_mask, s2, s3, q2, q3, max_bits);
    Accumulate16(p + 32, abs_mask, s4, s5, q4, q5, max_bits);
    Accumulate16(p + 48, abs_mask, s6, s7, q6, q7, max_bits);
  }
  double sum[kLanes];
  double sum_sq[kLanes];
  const __m512d sv[8] = {s0, s1, s2, s3, s4, s5, s6, s7};
  const __m512d qv[8] = {q0, q1, q2, q3, q4, q5, q6, q7};
  for (int i = 0; i < 8; ++i) {
    _mm512_storeu_pd(sum + 8 * i, sv[i]);
    _mm512_storeu_pd(sum_sq + 8 * i, qv[i]);
  }
  uint32_t lane_max[16];
  _mm512_storeu_si512(lane_max, max_bits);
  uint32_t max_abs = 0;
  for (int i = 0; i < 16; ++i) {
    if (lane_max[i] > max_abs) max_abs = lane_max[i];
  }
  // Tail: rows * 64 is in lane 0.
  for (size_t k = rows * kLanes; k < n; ++k) {
    const int j = static_cast<int>(k & (kLanes - 1));
    const uint32_t a = Bits(x[k]) & 0x7fffffffU;
    if (a > max_abs) max_abs = a;
    const double d = static_cast<double>(x[k]);
    sum[j] = sum[j] + d;
    sum_sq[j] = sum_sq[j] + d * d;
  }
  if (max_abs >= kInfBits) return ScalarBlockStats(x, n);
  return LeafStats{Fold(sum), Fold(sum_sq), max_abs, 0, 0};
}

}  // namespace

const LeafKernels* Avx512LeafKernels() {
  static constexpr LeafKernels kKernels = {"avx512", &Avx512Hash64,
                                           &Avx512BlockStats};
  return &kKernels;
}

}  // namespace lockstep::hash::internal

#else  // no AVX-512 unit in this build

namespace lockstep::hash::internal {
const LeafKernels* Avx512LeafKernels() { return nullptr; }
}  // namespace lockstep::hash::internal

#endif
