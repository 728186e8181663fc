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

// The section 8 fold of 64 lanes (w = 32, 16, 8, 4, 2, 1), lanes[j] +
// lanes[j + w] four lanes per vector: the same additions of the same values
// as the scalar tree, in registers.
double Fold(const double lanes[kLanes]) {
  __m256d v[8];
  for (int i = 0; i < 8; ++i) {
    v[i] = _mm256_add_pd(_mm256_loadu_pd(lanes + 4 * i),
                         _mm256_loadu_pd(lanes + 32 + 4 * i));
  }
  for (int i = 0; i < 4; ++i) v[i] = _mm256_add_pd(v[i], v[i + 4]);
  for (int i = 0; i < 2; ++i) v[i] = _mm256_add_pd(v[i], v[i + 2]);
  v[0] = _mm256_add_pd(v[0], v[1]);
  const __m128d h =
      _mm_add_pd(_mm256_castpd256_pd128(v[0]), _mm256_extractf128_pd(v[0], 1));
  return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

// The reference fold, for the scalar loop below.
double ScalarFold(double lanes[kLanes]) {
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

// Sums lanes [first, first + 16) of the `rows` full rows at x (row r =
// x[64r .. 64r + 64)) into sum/sum_sq[first ..], starting from their
// values with `onto`, else from +0.0, adding every element, finite or not;
// the |x| bit patterns go into the running maximum max_bits. Four sum and
// four sum-of-squares accumulators of 4 doubles stay in registers beside the
// mask, the maximum and the temporaries (AVX2 has 16): a pass over 32 lanes
// needs 16 accumulators alone, and those the compiler then spills put a
// store-to-load round trip into their chains (a third slower in cache). Keep
// function calls and accumulator arrays out of this loop for the same reason.
// While it runs, one cache line from `*pf` on is prefetched per row, up to
// pf_end, and `*pf` is advanced past them.
__attribute__((always_inline)) inline void QuarterRows(
    const float* x, size_t rows, int first, bool onto, double* sum,
    double* sum_sq, __m256i& max_bits, const char** pf, const char* pf_end) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
  __m256d q0 = s0, q1 = s0, q2 = s0, q3 = s0;
  if (onto) {
    s0 = _mm256_loadu_pd(sum + first);
    s1 = _mm256_loadu_pd(sum + first + 4);
    s2 = _mm256_loadu_pd(sum + first + 8);
    s3 = _mm256_loadu_pd(sum + first + 12);
    q0 = _mm256_loadu_pd(sum_sq + first);
    q1 = _mm256_loadu_pd(sum_sq + first + 4);
    q2 = _mm256_loadu_pd(sum_sq + first + 8);
    q3 = _mm256_loadu_pd(sum_sq + first + 12);
  }
  const float* p = x + first;
  // The rows that prefetch a line come first, in a loop of their own: a
  // test per row of whether lines are left made the passes a fifth slower.
  const char* next = *pf;  // a local: through *pf, a store per row
  const size_t lines =
      next < pf_end ? (static_cast<size_t>(pf_end - next) + 63) / 64 : 0;
  const size_t prefetching = lines < rows ? lines : rows;
  size_t r = 0;
  for (; r < prefetching; ++r, p += kLanes, next += 64) {
    _mm_prefetch(next, _MM_HINT_T0);
    Accumulate8(p, abs_mask, s0, s1, q0, q1, max_bits);
    Accumulate8(p + 8, abs_mask, s2, s3, q2, q3, max_bits);
  }
  for (; r < rows; ++r, p += kLanes) {
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
}

// The last count < 64 elements of a block, t[0 .. count), whose in-block
// lanes are 0 .. count - 1, added onto the lanes as a row padded with +0.0:
// adding +0.0 leaves a lane as it is (a lane never holds -0.0, section 8)
// and the maximum too. Where the scalar loop it replaces read each lane back
// from the passes' vector stores, this is four more passes of one row.
__attribute__((always_inline)) inline void TailRow(const float* t, size_t count,
                                                   double* sum, double* sum_sq,
                                                   __m256i& max_bits) {
  if (count == 0) return;
  alignas(32) float row[kLanes] = {};
  __builtin_memcpy(row, t, count * sizeof(float));
  const char* none = nullptr;
  for (int first = 0; first < kLanes; first += 16) {
    QuarterRows(row, 1, first, true, sum, sum_sq, max_bits, &none, nullptr);
  }
}

// The largest of the eight lanes.
uint32_t MaxLane(const __m256i max_bits) {
  __m128i v = _mm_max_epu32(_mm256_castsi256_si128(max_bits),
                            _mm256_extracti128_si256(max_bits, 1));
  v = _mm_max_epu32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm_max_epu32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(v));
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
  out.sum = ScalarFold(sum);
  out.sum_sq = ScalarFold(sum_sq);
  return out;
}

// Four passes over the block, lanes 0..15, 16..31, 32..47, 48..63, each
// lane's additions in increasing k as the definition requires. Called for
// statistics alone (prefetch == nullptr), the block may still be in DRAM,
// where passes that read one cache line in four do not start the
// hardware's DRAM streams (1.35 x slower than with the sequential load of
// every line that then comes first). Called after the hash of a short leaf
// (HashAndStats below), the passes prefetch the next leaf, one cache line
// per 64 bytes summed.
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
  __m256i max_bits = _mm256_setzero_si256();
  for (int first = 0; first < kLanes; first += 16) {
    QuarterRows(x, rows, first, false, sum, sum_sq, max_bits, &pf, pf_end);
  }
  TailRow(x + rows * kLanes, n - rows * kLanes, sum, sum_sq, max_bits);
  const uint32_t max_abs = MaxLane(max_bits);
  if (max_abs >= kInfBits) return ScalarBlockStats(x, n);
  return LeafStats{Fold(sum), Fold(sum_sq), max_abs, 0, 0};
}

// ---- XXH3-64, long inputs, interleaved with the statistics. ----
//
// XXH3-64 of more than 240 bytes (xxHash's XXH3_hashLong_64b with the
// default secret; docs/fingerprints.md): eight u64 accumulators (two ymm)
// take every 64-byte stripe; 16 stripes make a 1024-byte block, after which
// the accumulators are scrambled; the last block's full stripes but its
// last are accumulated, then the input's last 64 bytes with secret offset
// 121; the accumulators are merged with secret offset 11.
//
// The statistics' 64 lanes need 32 accumulators of 4 doubles, twice
// AVX2's registers, so they cannot ride along with the hash's loads as on
// AVX-512. Instead the leaf goes in chunks of 4 KiB (4 blocks, 16 rows):
// the hash reads a chunk from memory, then QuarterRows sums the same rows
// from L1 in four passes, the lanes kept in memory between chunks. Every
// line is read from DRAM once, and the DRAM reads run on during the
// statistics: the hash prefetches the next chunk as it goes (one line per
// stripe, a chunk ahead), and the statistics passes prefetch the next
// chunk again (or the caller's next leaf after the last chunk). Measured on
// a Zen 2 core (docs/benchmarks.md, "AMD EPYC (Zen 2, AVX2), 2026-12-06:
// the leaf in 4 KiB chunks"): 12 GB/s from DRAM, as fast as a read loop,
// where hashing the whole leaf and then summing it ran at 7.8 GB/s;
// without either prefetch 9.7 - 10.2 GB/s, with 2 or 8 KiB chunks, or the
// hash's prefetch 3 or 6 KiB ahead, slower. The prefetches stay T0: with
// PREFETCHNTA cold tensors streamed at 17.9 GB/s instead of 15.0, but a
// training step's kernels, which read many of the tensors just hashed
// again, ran up to 14 % slower ("…, 2026-12-06: the two vCPUs' distance").
constexpr size_t kStripeBytes = 64;
constexpr size_t kBlockBytes = 1024;  // 16 stripes, 4 statistics rows
constexpr size_t kRowBytes = 256;     // 64 floats: one statistics row
constexpr size_t kChunkBlocks = 4;
constexpr size_t kChunkBytes = kChunkBlocks * kBlockBytes;
constexpr size_t kLastStripeSecret = 192 - 64 - 7;
constexpr size_t kMergeSecret = 11;
constexpr size_t kScrambleSecret = 192 - 64;

// The accumulators as two sums each half: products (with the initial
// values and the data settled before) and the data of the stripes since,
// summed unswapped; Settle forms the accumulators (acc[i ^ 1] += data[i]
// distributes over the additions mod 2^64).
struct Accumulators {
  __m256i products0, products1;
  __m256i data0, data1;
};

__attribute__((always_inline)) inline __m256i SwapHalves(const __m256i v) {
  return _mm256_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2));
}

__attribute__((always_inline)) inline void Settle(Accumulators& a) {
  a.products0 = _mm256_add_epi64(a.products0, SwapHalves(a.data0));
  a.products1 = _mm256_add_epi64(a.products1, SwapHalves(a.data1));
  a.data0 = a.data1 = _mm256_setzero_si256();
}

__attribute__((always_inline)) inline void AccumulateHalf(const __m256i data,
                                                          const uint8_t* secret,
                                                          __m256i& products,
                                                          __m256i& sums) {
  const __m256i key =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(secret));
  const __m256i data_key = _mm256_xor_si256(data, key);
  const __m256i data_key_hi =
      _mm256_shuffle_epi32(data_key, _MM_SHUFFLE(2, 3, 0, 1));
  products =
      _mm256_add_epi64(products, _mm256_mul_epu32(data_key, data_key_hi));
  sums = _mm256_add_epi64(sums, data);
}

// accumulate_512: the 64-byte stripe at p.
__attribute__((always_inline)) inline void AccumulateStripe(
    Accumulators& a, const uint8_t* p, const uint8_t* secret) {
  AccumulateHalf(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
                 secret, a.products0, a.data0);
  AccumulateHalf(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)),
                 secret + 32, a.products1, a.data1);
}

__attribute__((always_inline)) inline __m256i ScrambleHalf(
    __m256i acc, const uint8_t* key_p) {
  const __m256i prime32 = _mm256_set1_epi32(static_cast<int>(XXH_PRIME32_1));
  const __m256i key =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(key_p));
  const __m256i k =
      _mm256_xor_si256(_mm256_xor_si256(acc, _mm256_srli_epi64(acc, 47)), key);
  const __m256i lo = _mm256_mul_epu32(k, prime32);
  const __m256i hi = _mm256_mul_epu32(_mm256_srli_epi64(k, 32), prime32);
  return _mm256_add_epi64(lo, _mm256_slli_epi64(hi, 32));
}

// The block's 16 stripes, then scramble; meanwhile the lines a chunk
// ahead are prefetched (a hint: past the end of the input it fetches
// nothing useful, and never faults).
__attribute__((always_inline)) inline void HashBlock(Accumulators& a,
                                                     const uint8_t* p) {
  for (size_t s = 0; s < kBlockBytes / kStripeBytes; ++s) {
    _mm_prefetch(
        reinterpret_cast<const char*>(p) + kChunkBytes + kStripeBytes * s,
        _MM_HINT_T0);
    AccumulateStripe(a, p + kStripeBytes * s, XXH3_kSecret + 8 * s);
  }
  Settle(a);
  a.products0 = ScrambleHalf(a.products0, XXH3_kSecret + kScrambleSecret);
  a.products1 = ScrambleHalf(a.products1, XXH3_kSecret + kScrambleSecret + 32);
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
uint64_t MergeAccs(Accumulators& a, size_t len) {
  Settle(a);
  alignas(32) uint64_t acc[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(acc), a.products0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(acc + 4), a.products1);
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

// Rows [0, rows) of x added to the lanes sum/sum_sq, four passes of 16
// lanes, their |x| bits to max_bits; prefetches [pf, pf_end) meanwhile.
__attribute__((always_inline)) inline void StatsRows(
    const float* x, size_t rows, bool onto, double* sum, double* sum_sq,
    __m256i& max_bits, const char* pf, const char* pf_end) {
  for (int first = 0; first < kLanes; first += 16) {
    QuarterRows(x, rows, first, onto, sum, sum_sq, max_bits, &pf, pf_end);
  }
}

// XXH3-64 of the leaf x[0 .. n) (4n > 240 bytes) and its statistics, a
// chunk at a time (see above); `prefetch` is the caller's next leaf.
LeafHashStats HashStatsLong(const float* x, size_t n, const void* prefetch,
                            size_t prefetch_bytes) {
  const size_t len = n * sizeof(float);
  const auto* in = reinterpret_cast<const uint8_t*>(x);
  Accumulators a{_mm256_setr_epi64x(XXH_PRIME32_3, XXH_PRIME64_1, XXH_PRIME64_2,
                                    XXH_PRIME64_3),
                 _mm256_setr_epi64x(XXH_PRIME64_4, XXH_PRIME32_2, XXH_PRIME64_5,
                                    XXH_PRIME32_1),
                 _mm256_setzero_si256(), _mm256_setzero_si256()};
  double sum[kLanes];
  double sum_sq[kLanes];
  bool onto = false;  // whether sum and sum_sq hold rows yet
  __m256i max_bits = _mm256_setzero_si256();
  const size_t full_blocks = (len - 1) / kBlockBytes;
  const uint8_t* p = in;
  const uint8_t* summed = in;  // rows before it are in the lanes
  const char* const leaf_end = reinterpret_cast<const char*>(in + len);
  for (size_t b = 0; b < full_blocks; ++b, p += kBlockBytes) {
    HashBlock(a, p);
    if ((b + 1) % kChunkBlocks == 0) {
      // The next chunk, which the hash has started to fetch.
      const char* pf = reinterpret_cast<const char*>(p + kBlockBytes);
      const char* pf_end =
          pf + kChunkBytes < leaf_end ? pf + kChunkBytes : leaf_end;
      StatsRows(reinterpret_cast<const float*>(summed),
                (p + kBlockBytes - summed) / kRowBytes, onto, sum, sum_sq,
                max_bits, pf, pf_end);
      onto = true;
      summed = p + kBlockBytes;
    }
  }
  const size_t stripes = (len - full_blocks * kBlockBytes - 1) / kStripeBytes;
  for (size_t s = 0; s < stripes; ++s) {
    AccumulateStripe(a, p + kStripeBytes * s, XXH3_kSecret + 8 * s);
  }
  AccumulateStripe(a, in + len - kStripeBytes,
                   XXH3_kSecret + kLastStripeSecret);
  const size_t rows = (in + len - summed) / kRowBytes;
  // Meanwhile the next leaf's first chunk.
  const char* next = static_cast<const char*>(prefetch);
  const size_t next_bytes =
      prefetch_bytes < kChunkBytes ? prefetch_bytes : kChunkBytes;
  // Zero rows still set the lanes (to +0.0) unless they hold rows already.
  StatsRows(reinterpret_cast<const float*>(summed), rows, onto, sum, sum_sq,
            max_bits, next, next == nullptr ? nullptr : next + next_bytes);
  // In-block index rows * 64 of the remainder is lane 0.
  const float* t = reinterpret_cast<const float*>(summed) + rows * kLanes;
  TailRow(t, x + n - t, sum, sum_sq, max_bits);
  const uint32_t max_abs = MaxLane(max_bits);
  LeafHashStats r;
  r.hash = MergeAccs(a, len);
  r.stats = max_abs >= kInfBits
                ? ScalarBlockStats(x, n)
                : LeafStats{Fold(sum), Fold(sum_sq), max_abs, 0, 0};
  return r;
}

// Leaves of up to 60 floats (240 bytes, XXH3's short paths) take the two
// separate kernels.
LeafHashStats Avx2HashAndStats(const float* x, size_t n, const void* prefetch,
                               size_t prefetch_bytes) {
  if (n * sizeof(float) > 240) {
    return HashStatsLong(x, n, prefetch, prefetch_bytes);
  }
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
