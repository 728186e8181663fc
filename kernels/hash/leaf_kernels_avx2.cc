// AVX2 leaf kernels. Built with -mavx2 on x86-64 (see BUILD); only called
// after fingerprint.cc has checked __builtin_cpu_supports("avx2").
//
// Keep this unit self-contained: everything it defines has internal linkage
// (anonymous namespace, xxHash's XXH_INLINE_ALL makes its functions static),
// and it includes no header with shared inline functions, so no AVX2-encoded
// copy of a shared function can end up in the baseline path. -mfma is not
// given, and -ffp-contract=off applies as everywhere: the statistics below
// add and multiply exactly as stats_portable.h does.
#include "kernels/hash/leaf_kernels.h"

#if defined(__x86_64__) && defined(__AVX2__)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace lockstep::hash::internal {
namespace {

constexpr int kLanes = 16;
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

// While the block (in cache: it was just hashed) is summed, one cache line
// of the next leaf is prefetched per 64 bytes processed, so the DRAM reads
// for the next hash overlap this compute-bound loop. (Measured on 256 MiB:
// prefetcht0 about 10 % faster than no prefetch, prefetcht1 about 5 %.)
LeafStats Avx2BlockStats(const float* x, size_t n, const void* prefetch,
                         size_t prefetch_bytes) {
  const char* pf = static_cast<const char*>(prefetch);
  const char* const pf_end = pf == nullptr ? nullptr : pf + prefetch_bytes;
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf_bits = _mm256_set1_epi32(static_cast<int>(kInfBits));
  // s<i>/q<i> hold lanes 4i .. 4i+3 of the sums and sums of squares.
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
  __m256d q0 = s0, q1 = s0, q2 = s0, q3 = s0;
  // Largest |x| bit pattern seen, non-finite values included.
  __m256i max_bits = _mm256_setzero_si256();
  size_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    if (pf < pf_end) {
      _mm_prefetch(pf, _MM_HINT_T0);
      pf += 64;
    }
    const __m256i b0 =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + k));
    const __m256i b1 =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + k + 8));
    const __m256i a0 = _mm256_and_si256(b0, abs_mask);
    const __m256i a1 = _mm256_and_si256(b1, abs_mask);
    max_bits = _mm256_max_epu32(max_bits, _mm256_max_epu32(a0, a1));
    // Non-finite elements become +0.0f, which leaves a lane unchanged.
    const __m256 v0 = _mm256_castsi256_ps(
        _mm256_and_si256(b0, _mm256_cmpgt_epi32(inf_bits, a0)));
    const __m256 v1 = _mm256_castsi256_ps(
        _mm256_and_si256(b1, _mm256_cmpgt_epi32(inf_bits, a1)));
    const __m256d d0 = _mm256_cvtps_pd(_mm256_castps256_ps128(v0));
    const __m256d d1 = _mm256_cvtps_pd(_mm256_extractf128_ps(v0, 1));
    const __m256d d2 = _mm256_cvtps_pd(_mm256_castps256_ps128(v1));
    const __m256d d3 = _mm256_cvtps_pd(_mm256_extractf128_ps(v1, 1));
    s0 = _mm256_add_pd(s0, d0);
    s1 = _mm256_add_pd(s1, d1);
    s2 = _mm256_add_pd(s2, d2);
    s3 = _mm256_add_pd(s3, d3);
    q0 = _mm256_add_pd(q0, _mm256_mul_pd(d0, d0));
    q1 = _mm256_add_pd(q1, _mm256_mul_pd(d1, d1));
    q2 = _mm256_add_pd(q2, _mm256_mul_pd(d2, d2));
    q3 = _mm256_add_pd(q3, _mm256_mul_pd(d3, d3));
  }
  double sum[kLanes];
  double sum_sq[kLanes];
  _mm256_storeu_pd(sum + 0, s0);
  _mm256_storeu_pd(sum + 4, s1);
  _mm256_storeu_pd(sum + 8, s2);
  _mm256_storeu_pd(sum + 12, s3);
  _mm256_storeu_pd(sum_sq + 0, q0);
  _mm256_storeu_pd(sum_sq + 4, q1);
  _mm256_storeu_pd(sum_sq + 8, q2);
  _mm256_storeu_pd(sum_sq + 12, q3);
  uint32_t lane_max[8];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lane_max), max_bits);
  uint32_t max_abs = 0;
  for (int i = 0; i < 8; ++i) {
    if (lane_max[i] > max_abs) max_abs = lane_max[i];
  }
  // Tail: k is a multiple of 16, so element k is in lane 0.
  for (; k < n; ++k) {
    const int j = static_cast<int>(k & (kLanes - 1));
    const uint32_t a = Bits(x[k]) & 0x7fffffffU;
    if (a > max_abs) max_abs = a;
    if (a < kInfBits) {
      const double d = static_cast<double>(x[k]);
      sum[j] = sum[j] + d;
      sum_sq[j] = sum_sq[j] + d * d;
    }
  }
  LeafStats out{Fold(sum), Fold(sum_sq), max_abs, 0, 0};
  if (max_abs >= kInfBits) {
    // Rare: the block holds NaN or Inf. Count them and take the maximum
    // over the finite values only.
    out.max_abs_bits = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t a = Bits(x[i]) & 0x7fffffffU;
      if (a < kInfBits) {
        if (a > out.max_abs_bits) out.max_abs_bits = a;
      } else if (a == kInfBits) {
        ++out.inf_count;
      } else {
        ++out.nan_count;
      }
    }
  }
  return out;
}

}  // namespace

const LeafKernels* Avx2LeafKernels() {
  static constexpr LeafKernels kKernels = {"avx2", &Avx2Hash64,
                                           &Avx2BlockStats};
  return &kKernels;
}

}  // namespace lockstep::hash::internal

#else  // no AVX2 unit in this build

namespace lockstep::hash::internal {
const LeafKernels* Avx2LeafKernels() { return nullptr; }
}  // namespace lockstep::hash::internal

#endif
