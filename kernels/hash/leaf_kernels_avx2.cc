// AVX2 leaf kernels. Built with -mavx2 -mfma on x86-64 (see BUILD); only
// called after fingerprint.cc has checked __builtin_cpu_supports("avx2") and
// ("fma").
//
// Keep this unit self-contained: everything it defines has internal linkage
// (anonymous namespace, xxHash's XXH_INLINE_ALL makes its functions static),
// and it includes no header with shared inline functions, so no AVX2-encoded
// copy of a shared function can end up in the baseline path. -ffp-contract=off
// applies as everywhere; the one fused multiply-add below is written out and
// gives the bits of stats_portable.h's sum_sq + d * d, because the square of
// a float is exact in float64.
#include "kernels/hash/leaf_kernels.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace lockstep::hash::internal {
namespace {

constexpr int kLanes = 64;
constexpr uint32_t kInfBits = 0x7f800000U;

uint64_t Avx2Hash64(const void* data, size_t len) {
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

// 8 floats (lanes 8v .. 8v+7 of a row) into two sum and two sum-of-squares
// vectors.
__attribute__((always_inline)) inline void Accumulate8(
    const float* p, const __m256i abs_mask, __m256d& s_lo, __m256d& s_hi,
    __m256d& q_lo, __m256d& q_hi, __m256i& max_bits) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  max_bits = _mm256_max_epu32(max_bits, _mm256_and_si256(b, abs_mask));
  const __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(p));
  const __m256d hi = _mm256_cvtps_pd(_mm_loadu_ps(p + 4));
  s_lo = _mm256_add_pd(s_lo, lo);
  s_hi = _mm256_add_pd(s_hi, hi);
  q_lo = _mm256_fmadd_pd(lo, lo, q_lo);
  q_hi = _mm256_fmadd_pd(hi, hi, q_hi);
}

// Accumulates lanes [first, first + 16) over the `rows` full rows of the
// block (row r = x[64r .. 64r + 64)) into sum/sum_sq[first ..], adding
// every element, finite or not, and returns the running maximum of the
// |x| bit patterns. Four sum and four sum-of-squares accumulators of 4
// doubles stay in registers beside the mask, the maximum and the
// temporaries (AVX2 has 16): a pass over 32 lanes needs 16 accumulators
// alone, and those the compiler then spills put a store-to-load round trip
// into their chains (a third slower in cache). Keep function calls and
// accumulator arrays out of this loop for the same reason. While it runs,
// one cache line from `*pf` on is prefetched per row, up to pf_end, and
// `*pf` is advanced past them.
uint32_t QuarterRows(const float* x, size_t rows, int first, double* sum,
                     double* sum_sq, const char** pf, const char* pf_end) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
  __m256d q0 = s0, q1 = s0, q2 = s0, q3 = s0;
  __m256i max_bits = _mm256_setzero_si256();
  const float* p = x + first;
  const char* next = *pf;  // a local: through *pf, a store per row
  for (size_t r = 0; r < rows; ++r, p += kLanes) {
    if (next < pf_end) {
      _mm_prefetch(next, _MM_HINT_T0);
      next += 64;
    }
    Accumulate8(p, abs_mask, s0, s1, q0, q1, max_bits);
    Accumulate8(p + 8, abs_mask, s2, s3, q2, q3, max_bits);
  }
  *pf = next;
  _mm256_storeu_pd(sum + first, s0);
  _mm256_storeu_pd(sum + first + 4, s1);
  _mm256_storeu_pd(sum + first + 8, s2);
  _mm256_storeu_pd(sum + first + 12, s3);
  _mm256_storeu_pd(sum_sq + first, q0);
  _mm256_storeu_pd(sum_sq + first + 4, q1);
  _mm256_storeu_pd(sum_sq + first + 8, q2);
  _mm256_storeu_pd(sum_sq + first + 12, q3);
  uint32_t lane_max[8];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lane_max), max_bits);
  uint32_t m = 0;
  for (int i = 0; i < 8; ++i) {
    if (lane_max[i] > m) m = lane_max[i];
  }
  return m;
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

// Four passes over the block, lanes 0..15, 16..31, 32..47, 48..63, each
// lane's additions in increasing k as the definition requires. Called after
// the hash, the block is in cache, and the passes prefetch the next leaf,
// one cache line per 64 bytes summed, so the DRAM reads for the next hash
// overlap this loop. Called for statistics alone (prefetch == nullptr), the
// block may still be in DRAM, where passes that read one cache line in four
// do not start the hardware's DRAM streams (1.35 x slower than with the
// sequential load of every line that then comes first).
// Non-finite values are added like any other here; if the maximum |x| bit
// pattern shows one, the block is recomputed by the masking reference loop.
LeafStats Avx2BlockStats(const float* x, size_t n, const void* prefetch,
                         size_t prefetch_bytes) {
  const size_t rows = n / kLanes;
  double sum[kLanes];
  double sum_sq[kLanes];
  const char* pf = static_cast<const char*>(prefetch);
  const char* const pf_end = pf == nullptr ? nullptr : pf + prefetch_bytes;
  if (pf == nullptr) {
    // Statistics alone: one sequential load per cache line first, which the
    // hardware prefetchers turn into a DRAM stream.
    const char* const b = reinterpret_cast<const char*>(x);
    __m256i touch = _mm256_setzero_si256();
    for (size_t off = 0; off < rows * kLanes * sizeof(float); off += 64) {
      touch = _mm256_or_si256(
          touch, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + off)));
    }
    __asm__ volatile("" : : "x"(touch));
  }
  uint32_t max_abs = 0;
  for (int first = 0; first < kLanes; first += 16) {
    const uint32_t m = QuarterRows(x, rows, first, sum, sum_sq, &pf, pf_end);
    if (m > max_abs) max_abs = m;
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

// Hash, then statistics while the leaf is in cache.
LeafHashStats Avx2HashAndStats(const float* x, size_t n, const void* prefetch,
                               size_t prefetch_bytes) {
  LeafHashStats r;
  r.hash = Avx2Hash64(x, n * sizeof(float));
  r.stats = Avx2BlockStats(x, n, prefetch, prefetch_bytes);
  return r;
}

}  // namespace

const LeafKernels* Avx2LeafKernels() {
  static constexpr LeafKernels kKernels = {"avx2", &Avx2Hash64, &Avx2BlockStats,
                                           &Avx2HashAndStats};
  return &kKernels;
}

}  // namespace lockstep::hash::internal

#else  // no AVX2+FMA unit in this build

namespace lockstep::hash::internal {
const LeafKernels* Avx2LeafKernels() { return nullptr; }
}  // namespace lockstep::hash::internal

#endif
