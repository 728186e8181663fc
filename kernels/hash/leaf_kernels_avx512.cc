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

// ---- XXH3-64, long inputs, fused with the statistics. ----
//
// XXH3-64 of more than 240 bytes (xxHash's XXH3_hashLong_64b with the
// default secret; docs/fingerprints.md): eight u64 accumulators (one zmm)
// take every 64-byte stripe; 16 stripes make a 1024-byte block, after which
// the accumulators are scrambled; the last block's full stripes but its
// last are accumulated, then the input's last 64 bytes with secret offset
// 121; the accumulators are merged with secret offset 11. Each stripe of a
// float32 leaf is also 16 statistics lanes, so both consume the same load.

constexpr size_t kStripeBytes = 64;
constexpr size_t kBlockBytes = 1024;  // 16 stripes
constexpr size_t kRowBytes = 256;     // 64 floats: one statistics row
constexpr size_t kLastStripeSecret = 192 - 64 - 7;
constexpr size_t kMergeSecret = 11;
constexpr size_t kScrambleSecret = 192 - 64;

// The 64 statistics lanes: s<i>/q<i> hold the sums and sums of squares of
// lanes 8i .. 8i+7.
struct StatsRegs {
  __m512d s0, s1, s2, s3, s4, s5, s6, s7;
  __m512d q0, q1, q2, q3, q4, q5, q6, q7;
  __m512i max_bits;
};

// accumulate_512: one stripe into the accumulators.
__attribute__((always_inline)) inline __m512i AccumulateStripe(
    __m512i acc, const __m512i data, const uint8_t* secret) {
  const __m512i key = _mm512_loadu_si512(secret);
  const __m512i data_key = _mm512_xor_si512(data, key);
  const __m512i data_key_hi = _mm512_srli_epi64(data_key, 32);
  const __m512i product = _mm512_mul_epu32(data_key, data_key_hi);
  // acc[i ^ 1] += data[i]: swap the 64-bit halves of each 128-bit lane.
  const __m512i data_swap = _mm512_shuffle_epi32(data, _MM_PERM_BADC);
  return _mm512_add_epi64(_mm512_add_epi64(acc, data_swap), product);
}

// scramble: acc = (acc ^ (acc >> 47) ^ secret[128 ..]) * PRIME32_1 (mod
// 2^64), the 64x32-bit product from two 32x32-bit ones.
__attribute__((always_inline)) inline __m512i Scramble(__m512i acc) {
  const __m512i prime32 = _mm512_set1_epi32(static_cast<int>(XXH_PRIME32_1));
  const __m512i key = _mm512_loadu_si512(XXH3_kSecret + kScrambleSecret);
  const __m512i k =
      _mm512_xor_si512(_mm512_xor_si512(acc, _mm512_srli_epi64(acc, 47)), key);
  const __m512i lo = _mm512_mul_epu32(k, prime32);
  const __m512i hi = _mm512_mul_epu32(_mm512_srli_epi64(k, 32), prime32);
  return _mm512_add_epi64(lo, _mm512_slli_epi64(hi, 32));
}

// The statistics of one loaded stripe (16 floats, lanes 16v .. 16v+15 of a
// row) into two sum and two sum-of-squares vectors. The low half is
// converted from the loaded register, the high half straight from memory
// (the line is in L1 now; a memory operand costs no shuffle).
__attribute__((always_inline)) inline void StripeStats(
    const __m512i v, const uint8_t* p, __m512d& s_lo, __m512d& s_hi,
    __m512d& q_lo, __m512d& q_hi, __m512i& max_bits) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  max_bits = _mm512_max_epu32(max_bits, _mm512_and_si512(v, abs_mask));
  const __m512d lo =
      _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_castsi512_ps(v)));
  const __m512d hi =
      _mm512_cvtps_pd(_mm256_loadu_ps(reinterpret_cast<const float*>(p + 32)));
  s_lo = _mm512_add_pd(s_lo, lo);
  s_hi = _mm512_add_pd(s_hi, hi);
  q_lo = _mm512_fmadd_pd(lo, lo, q_lo);
  q_hi = _mm512_fmadd_pd(hi, hi, q_hi);
}

// The statistics of stripe `j` (0..3) of a row, lanes 16j .. 16j+15.
__attribute__((always_inline)) inline void LaneStats(const __m512i v,
                                                     const uint8_t* p, int j,
                                                     StatsRegs& st) {
  switch (j) {
    case 0:
      StripeStats(v, p, st.s0, st.s1, st.q0, st.q1, st.max_bits);
      break;
    case 1:
      StripeStats(v, p, st.s2, st.s3, st.q2, st.q3, st.max_bits);
      break;
    case 2:
      StripeStats(v, p, st.s4, st.s5, st.q4, st.q5, st.max_bits);
      break;
    default:
      StripeStats(v, p, st.s6, st.s7, st.q6, st.q7, st.max_bits);
      break;
  }
}

// Stripe `j` (0..3) of a row: hashed and, with kStats, summed.
template <bool kStats>
__attribute__((always_inline)) inline __m512i HashStripe(__m512i acc,
                                                         const uint8_t* p,
                                                         const uint8_t* secret,
                                                         int j, StatsRegs& st) {
  const __m512i v = _mm512_loadu_si512(p);
  if (kStats) LaneStats(v, p, j, st);
  return AccumulateStripe(acc, v, secret);
}

// A statistics row: four stripes, secret offsets from `secret` on.
template <bool kStats>
__attribute__((always_inline)) inline __m512i HashRow(__m512i acc,
                                                      const uint8_t* p,
                                                      const uint8_t* secret,
                                                      StatsRegs& st) {
  acc = HashStripe<kStats>(acc, p, secret, 0, st);
  acc = HashStripe<kStats>(acc, p + 64, secret + 8, 1, st);
  acc = HashStripe<kStats>(acc, p + 128, secret + 16, 2, st);
  return HashStripe<kStats>(acc, p + 192, secret + 24, 3, st);
}

uint64_t MulFold64(uint64_t a, uint64_t b) {
  const unsigned __int128 m = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(m) ^ static_cast<uint64_t>(m >> 64);
}

uint64_t ReadLe64(const uint8_t* p) {
  uint64_t v;
  __builtin_memcpy(&v, p, sizeof(v));  // x86-64: little-endian
  return v;
}

// mergeAccs and the final avalanche of XXH3-64.
uint64_t MergeAccs(__m512i acc_vec, size_t len) {
  alignas(64) uint64_t acc[8];
  _mm512_store_si512(acc, acc_vec);
  const uint8_t* s = XXH3_kSecret + kMergeSecret;
  uint64_t r = static_cast<uint64_t>(len) * XXH_PRIME64_1;
  for (int i = 0; i < 4; ++i) {
    r += MulFold64(acc[2 * i] ^ ReadLe64(s + 16 * i),
                   acc[2 * i + 1] ^ ReadLe64(s + 16 * i + 8));
  }
  r ^= r >> 37;
  r *= 0x165667919E3779F9ULL;
  r ^= r >> 32;
  return r;
}

// XXH3-64 of in[0 .. len), len > 240, and, with kStats, the statistics of
// the len / 4 floats there (REQUIRES then len % 4 == 0 and len <= 64 KiB).
// While it runs, prefetch[0 .. prefetch_bytes) is prefetched, four cache
// lines per row, so that the next leaf's DRAM reads overlap this one.
template <bool kStats>
uint64_t HashLong(const uint8_t* in, size_t len, LeafStats* stats,
                  const void* prefetch, size_t prefetch_bytes) {
  const char* pf = static_cast<const char*>(prefetch);
  const char* const pf_end = pf == nullptr ? nullptr : pf + prefetch_bytes;
  __m512i acc = _mm512_setr_epi64(XXH_PRIME32_3, XXH_PRIME64_1, XXH_PRIME64_2,
                                  XXH_PRIME64_3, XXH_PRIME64_4, XXH_PRIME32_2,
                                  XXH_PRIME64_5, XXH_PRIME32_1);
  StatsRegs st;
  st.s0 = _mm512_setzero_pd();
  st.s1 = st.s2 = st.s3 = st.s4 = st.s5 = st.s6 = st.s7 = st.s0;
  st.q0 = st.q1 = st.q2 = st.q3 = st.q4 = st.q5 = st.q6 = st.q7 = st.s0;
  st.max_bits = _mm512_setzero_si512();
  const size_t full_blocks = (len - 1) / kBlockBytes;
  const uint8_t* p = in;
  for (size_t b = 0; b < full_blocks; ++b) {
    for (size_t r = 0; r < kBlockBytes / kRowBytes; ++r, p += kRowBytes) {
      if (kStats && pf < pf_end) {
        _mm_prefetch(pf, _MM_HINT_T0);
        _mm_prefetch(pf + 64, _MM_HINT_T0);
        _mm_prefetch(pf + 128, _MM_HINT_T0);
        _mm_prefetch(pf + 192, _MM_HINT_T0);
        pf += kRowBytes;
      }
      acc = HashRow<kStats>(acc, p, XXH3_kSecret + 32 * r, st);
    }
    acc = Scramble(acc);
  }
  // The last block: its full stripes but the last, by rows, then the
  // remaining 0..3 stripes of the last row.
  const size_t stripes = (len - full_blocks * kBlockBytes - 1) / kStripeBytes;
  const size_t rows = stripes / 4;
  for (size_t r = 0; r < rows; ++r, p += kRowBytes) {
    acc = HashRow<kStats>(acc, p, XXH3_kSecret + 32 * r, st);
  }
  const int rest = static_cast<int>(stripes % 4);
  for (int j = 0; j < rest; ++j, p += kStripeBytes) {
    acc = HashStripe<kStats>(acc, p, XXH3_kSecret + 32 * rows + 8 * j, j, st);
  }
  // The last stripe: the input's last 64 bytes (overlapping the stripes
  // already taken unless len % 64 == 0).
  const uint8_t* last = in + len - kStripeBytes;
  const __m512i last_data = _mm512_loadu_si512(last);
  acc = AccumulateStripe(acc, last_data, XXH3_kSecret + kLastStripeSecret);
  if (kStats) {
    // p is at float index 16 * (stripes taken), in lane 16 * rest. What
    // is left (1 .. 16 floats) is the last stripe when it is whole.
    const size_t tail_bytes = static_cast<size_t>(in + len - p);
    if (tail_bytes == kStripeBytes) {
      LaneStats(_mm512_loadu_si512(p), p, rest, st);
      p += kStripeBytes;
    }
    alignas(64) double sum[kLanes];
    alignas(64) double sum_sq[kLanes];
    const __m512d sv[8] = {st.s0, st.s1, st.s2, st.s3,
                           st.s4, st.s5, st.s6, st.s7};
    const __m512d qv[8] = {st.q0, st.q1, st.q2, st.q3,
                           st.q4, st.q5, st.q6, st.q7};
    for (int i = 0; i < 8; ++i) {
      _mm512_store_pd(sum + 8 * i, sv[i]);
      _mm512_store_pd(sum_sq + 8 * i, qv[i]);
    }
    uint32_t max_abs = _mm512_reduce_max_epu32(st.max_bits);
    const float* x = reinterpret_cast<const float*>(in);
    const size_t n = len / sizeof(float);
    for (size_t k = static_cast<size_t>(p - in) / sizeof(float); k < n; ++k) {
      const int j = static_cast<int>(k & (kLanes - 1));
      float f;
      __builtin_memcpy(&f, x + k, sizeof(f));
      const uint32_t a = Bits(f) & 0x7fffffffU;
      if (a > max_abs) max_abs = a;
      const double d = static_cast<double>(f);
      sum[j] = sum[j] + d;
      sum_sq[j] = sum_sq[j] + d * d;
    }
    if (max_abs >= kInfBits) {
      *stats = ScalarBlockStats(x, n);
    } else {
      *stats = LeafStats{Fold(sum), Fold(sum_sq), max_abs, 0, 0};
    }
  }
  return MergeAccs(acc, len);
}

uint64_t Avx512Hash64(const void* data, size_t len) {
  if (len <= 240) return XXH3_64bits(data, len);
  return HashLong<false>(static_cast<const uint8_t*>(data), len, nullptr,
                         nullptr, 0);
}

// One read of the leaf for both; leaves of up to 60 floats (240 bytes,
// XXH3's short paths) take the two separate kernels.
LeafHashStats Avx512HashAndStats(const float* x, size_t n, const void* prefetch,
                                 size_t prefetch_bytes) {
  LeafHashStats r;
  const size_t len = n * sizeof(float);
  if (len <= 240) {
    r.hash = XXH3_64bits(x, len);
    r.stats = Avx512BlockStats(x, n, prefetch, prefetch_bytes);
    return r;
  }
  r.hash = HashLong<true>(reinterpret_cast<const uint8_t*>(x), len, &r.stats,
                          prefetch, prefetch_bytes);
  return r;
}

}  // namespace

const LeafKernels* Avx512LeafKernels() {
  static constexpr LeafKernels kKernels = {
      "avx512", &Avx512Hash64, &Avx512BlockStats, &Avx512HashAndStats};
  return &kKernels;
}

}  // namespace lockstep::hash::internal

#else  // no AVX-512 unit in this build

namespace lockstep::hash::internal {
const LeafKernels* Avx512LeafKernels() { return nullptr; }
}  // namespace lockstep::hash::internal

#endif
