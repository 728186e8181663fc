// AVX-512 leaf kernels. Built with -mavx512f -mavx512dq -mfma on x86-64 (see
// BUILD); only called after fingerprint.cc has checked
// __builtin_cpu_supports for "avx512f", "avx512dq" and "fma".
//
// Self-contained for the same reason as leaf_kernels_avx2.cc: everything here
// has internal linkage and no shared inline header is included, so no
// AVX-512-encoded copy of a shared function can reach another path. The
// fused multiply-adds give the bits of stats_portable.h's sum_sq + d * d,
// because the square of a float is exact in float64.
#include "kernels/hash/leaf_kernels.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__FMA__)

#include <immintrin.h>

#include <cmath>
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

// Layout shared by XXH3 and the statistics: a 64-byte stripe is 16 lanes.
constexpr size_t kStripeBytes = 64;
constexpr size_t kBlockBytes = 1024;  // 16 stripes
constexpr size_t kRowBytes = 256;     // 64 floats: one statistics row
constexpr size_t kLastStripeSecret = 192 - 64 - 7;
constexpr size_t kMergeSecret = 11;
constexpr size_t kScrambleSecret = 192 - 64;

// The 64 statistics lanes of a block: s<i>/q<i> hold the sums and sums of
// squares of lanes 8i .. 8i+7, so each lane's additions run in increasing k
// as the definition requires, with 16 independent accumulators. Non-finite
// values are added like any other; if the sums show one (FinishStats), the
// block is recomputed by the masking reference loop.
struct StatsRegs {
  __m512d s0, s1, s2, s3, s4, s5, s6, s7;
  __m512d q0, q1, q2, q3, q4, q5, q6, q7;
  __m512i max_bits;
};

__attribute__((always_inline)) inline void InitStats(StatsRegs& st) {
  st.s0 = _mm512_setzero_pd();
  st.s1 = st.s2 = st.s3 = st.s4 = st.s5 = st.s6 = st.s7 = st.s0;
  st.q0 = st.q1 = st.q2 = st.q3 = st.q4 = st.q5 = st.q6 = st.q7 = st.s0;
  st.max_bits = _mm512_setzero_si512();
}

// 16 floats `v` (lanes 16j .. 16j+15 of a row; lo/hi: its halves) into
// two sum and two sum-of-squares vectors, and their magnitudes into
// max_bits by vrangeps (imm 0x0B: the larger magnitude, sign cleared), one
// instruction where a mask and an integer maximum were two. For finite
// floats that is the largest |x| bit pattern exactly (±0 and subnormals
// included); a quiet NaN, though, is skipped by vrangeps as if absent, so
// a block's NaN and Inf are found from its sums instead (FinishStats).
__attribute__((always_inline)) inline void AddStripe(
    const __m512i v, const __m256 lo_f, const __m256 hi_f, __m512d& s_lo,
    __m512d& s_hi, __m512d& q_lo, __m512d& q_hi, __m512i& max_bits) {
  max_bits = _mm512_castps_si512(_mm512_range_ps(_mm512_castsi512_ps(max_bits),
                                                 _mm512_castsi512_ps(v), 0x0B));
  const __m512d lo = _mm512_cvtps_pd(lo_f);
  const __m512d hi = _mm512_cvtps_pd(hi_f);
  s_lo = _mm512_add_pd(s_lo, lo);
  s_hi = _mm512_add_pd(s_hi, hi);
  q_lo = _mm512_fmadd_pd(lo, lo, q_lo);
  q_hi = _mm512_fmadd_pd(hi, hi, q_hi);
}

__attribute__((always_inline)) inline void AddStripeToLanes(
    const __m512i v, const __m256 lo, const __m256 hi, int j, StatsRegs& st) {
  switch (j) {
    case 0:
      AddStripe(v, lo, hi, st.s0, st.s1, st.q0, st.q1, st.max_bits);
      break;
    case 1:
      AddStripe(v, lo, hi, st.s2, st.s3, st.q2, st.q3, st.max_bits);
      break;
    case 2:
      AddStripe(v, lo, hi, st.s4, st.s5, st.q4, st.q5, st.max_bits);
      break;
    default:
      AddStripe(v, lo, hi, st.s6, st.s7, st.q6, st.q7, st.max_bits);
      break;
  }
}

// The statistics of stripe `j` (0..3) of a row, already loaded as `v` from
// p: the halves are converted straight from memory (vcvtps2pd with a memory
// operand; the line is in L1 now, and this costs no shuffle).
__attribute__((always_inline)) inline void LaneStats(const __m512i v,
                                                     const uint8_t* p, int j,
                                                     StatsRegs& st) {
  const float* f = reinterpret_cast<const float*>(p);
  AddStripeToLanes(v, _mm256_loadu_ps(f), _mm256_loadu_ps(f + 8), j, st);
}

// The last `count` floats of a block from p on (count < 16 * (4 - j)),
// starting in stripe j of a row: whole stripes, then a partial one loaded
// under a mask, the missing floats as +0.0. Adding +0.0 is the same as not
// adding (a lane never holds -0.0; stats_portable.h), and 0 never raises
// the maximum.
__attribute__((always_inline)) inline void TailStats(const uint8_t* p,
                                                     size_t count, int j,
                                                     StatsRegs& st) {
  for (; count >= 16; count -= 16, p += kStripeBytes, ++j) {
    LaneStats(_mm512_loadu_si512(p), p, j, st);
  }
  if (count == 0) return;
  const __m512i v =
      _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1U << count) - 1), p);
  const __m512 f = _mm512_castsi512_ps(v);
  AddStripeToLanes(
      v, _mm512_castps512_ps256(f),
      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)), j, st);
}

// Folds eight lane vectors (lanes 0 .. 63) by the halving tree of
// stats_portable.h, in registers: w = 32, 16 and 8 add whole vectors,
// w = 4, 2 and 1 halves of the last.
__attribute__((always_inline)) inline double FoldLanes(__m512d v0, __m512d v1,
                                                       __m512d v2, __m512d v3,
                                                       __m512d v4, __m512d v5,
                                                       __m512d v6, __m512d v7) {
  const __m512d a0 = _mm512_add_pd(v0, v4);  // w = 32
  const __m512d a1 = _mm512_add_pd(v1, v5);
  const __m512d a2 = _mm512_add_pd(v2, v6);
  const __m512d a3 = _mm512_add_pd(v3, v7);
  const __m512d b0 = _mm512_add_pd(a0, a2);  // w = 16
  const __m512d b1 = _mm512_add_pd(a1, a3);
  const __m512d c = _mm512_add_pd(b0, b1);  // w = 8
  const __m256d d = _mm256_add_pd(_mm512_castpd512_pd256(c),
                                  _mm512_extractf64x4_pd(c, 1));  // w = 4
  const __m128d e = _mm_add_pd(_mm256_castpd256_pd128(d),
                               _mm256_extractf128_pd(d, 1));   // w = 2
  return _mm_cvtsd_f64(_mm_add_sd(e, _mm_unpackhi_pd(e, e)));  // w = 1
}

// The block's statistics from its lanes; x[0 .. n) is the block, recomputed
// by the masking loop if it holds NaN or Inf. The lanes added every element
// unmasked, so a NaN or Inf made its lane's sum, and with it the folded sum,
// NaN or ±Inf, while finite elements cannot take it there (|x| < 2^128 and
// at most 2^14 of them: the sum stays far below the float64 range).
__attribute__((always_inline)) inline LeafStats FinishStats(const StatsRegs& st,
                                                            const float* x,
                                                            size_t n) {
  const double sum =
      FoldLanes(st.s0, st.s1, st.s2, st.s3, st.s4, st.s5, st.s6, st.s7);
  if (!std::isfinite(sum)) return ScalarBlockStats(x, n);
  return LeafStats{
      sum, FoldLanes(st.q0, st.q1, st.q2, st.q3, st.q4, st.q5, st.q6, st.q7),
      _mm512_reduce_max_epu32(st.max_bits), 0, 0};
}

// Statistics alone (ComputeStats, and leaves too short for XXH3's long
// path): one row of 64 floats per iteration, no software prefetch (the
// hash's loops prefetch: Ahead below).
LeafStats BlockStats(const float* x, size_t n) {
  StatsRegs st;
  InitStats(st);
  const size_t rows = n / kLanes;
  const uint8_t* p = reinterpret_cast<const uint8_t*>(x);
  for (size_t r = 0; r < rows; ++r, p += kRowBytes) {
    for (int j = 0; j < 4; ++j) {
      LaneStats(_mm512_loadu_si512(p + kStripeBytes * j), p + kStripeBytes * j,
                j, st);
    }
  }
  TailStats(p, n - rows * kLanes, 0, st);
  return FinishStats(st, x, n);
}

// The lines 4 KiB ahead of the row being hashed, one per stripe, into L2
// (PREFETCHT1): through the leaf, then the first 4 KiB of the caller's
// next leaf, then none, so a leaf in cache fetches nothing it will not
// read. The hardware's stream prefetchers alone kept up on some days and
// not on others: on the Xeon build machine (docs/benchmarks.md, "Xeon,
// 2026-12-07: prefetching 4 KiB ahead") hash + statistics from DRAM ran
// at 0.53 - 0.61 of a read loop without this, 0.84 - 0.97 with it; an L2
// prefetch 24 KiB ahead had cost a fifth on a day when the read loop ran
// at 18 - 22 GB/s ("Xeon, 2026-12-04: no software prefetch"). The
// "avx512-stream" kernels (AMD) do not prefetch: measured there without.
constexpr size_t kAheadBytes = 4096;

class Ahead {
 public:
  // No prefetch at all.
  Ahead() = default;
  // For the leaf in[0 .. len), then next[0 .. next_bytes) (next may be
  // null).
  Ahead(const uint8_t* in, size_t len, const void* next, size_t next_bytes)
      : at_(reinterpret_cast<const char*>(in) + kAheadBytes),
        end_(reinterpret_cast<const char*>(in) + len),
        next_(static_cast<const char*>(next)),
        next_end_(next_ == nullptr
                      ? nullptr
                      : next_ + (next_bytes < kAheadBytes ? next_bytes
                                                          : kAheadBytes)) {
    // A leaf of at most 4 KiB: in cache or not, its next lines are the
    // caller's next leaf's, which a short leaf (the last) does not have.
    if (at_ >= end_) at_ = end_ = next_ = next_end_ = nullptr;
  }

  // The four lines of the next row ahead.
  __attribute__((always_inline)) void Row() {
    if (at_ >= end_) {
      if (next_ == nullptr) return;
      at_ = next_;
      end_ = next_end_;
      next_ = nullptr;
      if (at_ >= end_) return;
    }
    _mm_prefetch(at_, _MM_HINT_T1);
    _mm_prefetch(at_ + 64, _MM_HINT_T1);
    _mm_prefetch(at_ + 128, _MM_HINT_T1);
    _mm_prefetch(at_ + 192, _MM_HINT_T1);
    at_ += kRowBytes;
  }

 private:
  const char* at_ = nullptr;
  const char* end_ = nullptr;
  const char* next_ = nullptr;
  const char* next_end_ = nullptr;
};

// ---- XXH3-64, long inputs, fused with the statistics. ----
//
// XXH3-64 of more than 240 bytes (xxHash's XXH3_hashLong_64b with the
// default secret; docs/fingerprints.md): eight u64 accumulators (one zmm)
// take every 64-byte stripe; 16 stripes make a 1024-byte block, after which
// the accumulators are scrambled; the last block's full stripes but its
// last are accumulated, then the input's last 64 bytes with secret offset
// 121; the accumulators are merged with secret offset 11. Each stripe of a
// float32 leaf is also 16 statistics lanes, so both consume the same load.

// The XXH3 accumulators held as two sums: the initial values and products
// (and data settled before), and the data of the stripes since, summed
// unswapped; Settle forms the accumulators.
struct Accumulators {
  __m512i products;
  __m512i data;
};

// acc[i ^ 1] += data[i]: swap the 64-bit halves of each 128-bit lane.
__attribute__((always_inline)) inline __m512i SwapHalves(const __m512i v) {
  return _mm512_shuffle_epi32(v, _MM_PERM_BADC);
}

// The accumulators with every stripe's data added in.
__attribute__((always_inline)) inline __m512i Settle(const Accumulators& a) {
  return _mm512_add_epi64(a.products, SwapHalves(a.data));
}

// accumulate_512: one stripe into the accumulators. Its data is added to
// the swapped lanes (acc[i ^ 1] += data[i]), and a lane permutation
// distributes over the 64-bit additions (mod 2^64, in any order), so the
// stripes' data are summed as they come and swapped once per block
// (Settle): one shuffle per 1024 bytes instead of one per stripe, the
// same accumulators.
__attribute__((always_inline)) inline Accumulators AccumulateStripe(
    Accumulators acc, const __m512i data, const uint8_t* secret) {
  const __m512i key = _mm512_loadu_si512(secret);
  const __m512i data_key = _mm512_xor_si512(data, key);
  // The high halves into the low ones, for the 32x32-bit products; a
  // shuffle rather than a shift, which would compete with the multiply for
  // its port on Intel cores.
  const __m512i data_key_hi = _mm512_shuffle_epi32(data_key, _MM_PERM_CDAB);
  const __m512i product = _mm512_mul_epu32(data_key, data_key_hi);
  acc.products = _mm512_add_epi64(acc.products, product);
  acc.data = _mm512_add_epi64(acc.data, data);
  return acc;
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

// Stripe `j` (0..3) of a row: hashed and, with kStats, summed. With
// kStream (REQUIRES p 64-byte aligned) the stripe is read by a
// non-temporal load (vmovntdqa); the statistics' conversions then read the
// same line again by ordinary loads (in cache no slower than with an
// ordinary first load, docs/benchmarks.md).
template <bool kStats, bool kStream>
__attribute__((always_inline)) inline Accumulators HashStripe(
    Accumulators acc, const uint8_t* p, const uint8_t* secret, int j,
    StatsRegs& st) {
  const __m512i v = kStream ? _mm512_stream_load_si512(const_cast<uint8_t*>(p))
                            : _mm512_loadu_si512(p);
  if (kStats) LaneStats(v, p, j, st);
  return AccumulateStripe(acc, v, secret);
}

// A statistics row: four stripes, secret offsets from `secret` on.
template <bool kStats, bool kStream>
__attribute__((always_inline)) inline Accumulators HashRow(
    Accumulators acc, const uint8_t* p, const uint8_t* secret, StatsRegs& st) {
  acc = HashStripe<kStats, kStream>(acc, p, secret, 0, st);
  acc = HashStripe<kStats, kStream>(acc, p + 64, secret + 8, 1, st);
  acc = HashStripe<kStats, kStream>(acc, p + 128, secret + 16, 2, st);
  return HashStripe<kStats, kStream>(acc, p + 192, secret + 24, 3, st);
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
// kStream (REQUIRES in 64-byte aligned): the whole stripes are read by
// non-temporal loads (HashStripe); the overlapping last stripe and the
// statistics' tail by ordinary ones.
// `ahead` prefetches a row ahead of each row hashed.
template <bool kStats, bool kStream>
uint64_t HashLong(const uint8_t* in, size_t len, LeafStats* stats,
                  Ahead ahead) {
  Accumulators acc{
      _mm512_setr_epi64(XXH_PRIME32_3, XXH_PRIME64_1, XXH_PRIME64_2,
                        XXH_PRIME64_3, XXH_PRIME64_4, XXH_PRIME32_2,
                        XXH_PRIME64_5, XXH_PRIME32_1),
      _mm512_setzero_si512()};
  StatsRegs st;
  InitStats(st);
  const size_t full_blocks = (len - 1) / kBlockBytes;
  const uint8_t* p = in;
  for (size_t b = 0; b < full_blocks; ++b) {
    for (size_t r = 0; r < kBlockBytes / kRowBytes; ++r, p += kRowBytes) {
      ahead.Row();
      acc = HashRow<kStats, kStream>(acc, p, XXH3_kSecret + 32 * r, st);
    }
    acc = Accumulators{Scramble(Settle(acc)), _mm512_setzero_si512()};
  }
  // The last block: its full stripes but the last, by rows, then the
  // remaining 0..3 stripes of the last row.
  const size_t stripes = (len - full_blocks * kBlockBytes - 1) / kStripeBytes;
  const size_t rows = stripes / 4;
  for (size_t r = 0; r < rows; ++r, p += kRowBytes) {
    ahead.Row();
    acc = HashRow<kStats, kStream>(acc, p, XXH3_kSecret + 32 * r, st);
  }
  const int rest = static_cast<int>(stripes % 4);
  for (int j = 0; j < rest; ++j, p += kStripeBytes) {
    acc = HashStripe<kStats, kStream>(acc, p, XXH3_kSecret + 32 * rows + 8 * j,
                                      j, st);
  }
  // The last stripe: the input's last 64 bytes (overlapping the stripes
  // already taken unless len % 64 == 0).
  const uint8_t* last = in + len - kStripeBytes;
  const __m512i last_data = _mm512_loadu_si512(last);
  acc = AccumulateStripe(acc, last_data, XXH3_kSecret + kLastStripeSecret);
  if (kStats) {
    // p is at float index 16 * (stripes taken), in lane 16 * rest; 1 .. 16
    // floats are left.
    const size_t n = len / sizeof(float);
    TailStats(p, n - static_cast<size_t>(p - in) / sizeof(float), rest, st);
    *stats = FinishStats(st, reinterpret_cast<const float*>(in), n);
  }
  return MergeAccs(Settle(acc), len);
}

// Clears the upper halves of the vector registers before returning to
// code built without AVX. GCC 12 leaves the vzeroupper out at the end of
// the inlined fused kernel; without it every SSE instruction of the caller
// and the next call's first vector instruction paid a state transition
// (about 150 ns per call measured on a 64-float leaf).
__attribute__((always_inline)) inline void LeaveAvx512() { _mm256_zeroupper(); }

// The prefetch of a table's HashLong: the "avx512" table's prefetches
// (Ahead), the "avx512-stream" table's none, aligned leaf or not.
template <bool kStream>
Ahead TableAhead(const uint8_t* in, size_t len, const void* next = nullptr,
                 size_t next_bytes = 0) {
  return kStream ? Ahead() : Ahead(in, len, next, next_bytes);
}

// Whether a leaf at p can be read by non-temporal loads (kStream).
bool Aligned64(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 63) == 0;
}

// The tables' entries: each ends with LeaveAvx512. kStream: the
// "avx512-stream" table's, which read 64-byte-aligned leaves by
// non-temporal loads and others as the "avx512" table does.

template <bool kStream>
uint64_t Avx512Hash64(const void* data, size_t len) {
  const auto* in = static_cast<const uint8_t*>(data);
  const Ahead ahead = TableAhead<kStream>(in, len);
  uint64_t h;
  if (len <= 240) {
    h = XXH3_64bits(data, len);
  } else if (kStream && Aligned64(in)) {
    h = HashLong<false, true>(in, len, nullptr, ahead);
  } else {
    h = HashLong<false, false>(in, len, nullptr, ahead);
  }
  LeaveAvx512();
  return h;
}

LeafStats Avx512BlockStats(const float* x, size_t n, const void* /*prefetch*/,
                           size_t /*prefetch_bytes*/) {
  const LeafStats s = BlockStats(x, n);
  LeaveAvx512();
  return s;
}

// One read of the leaf for both; leaves of up to 60 floats (240 bytes,
// XXH3's short paths) take the two separate kernels.
template <bool kStream>
LeafHashStats Avx512HashAndStats(const float* x, size_t n, const void* prefetch,
                                 size_t prefetch_bytes) {
  LeafHashStats r;
  const size_t len = n * sizeof(float);
  const auto* in = reinterpret_cast<const uint8_t*>(x);
  const Ahead ahead = TableAhead<kStream>(in, len, prefetch, prefetch_bytes);
  if (len <= 240) {
    r.hash = XXH3_64bits(x, len);
    r.stats = BlockStats(x, n);
  } else if (kStream && Aligned64(in)) {
    r.hash = HashLong<true, true>(in, len, &r.stats, ahead);
  } else {
    r.hash = HashLong<true, false>(in, len, &r.stats, ahead);
  }
  LeaveAvx512();
  return r;
}

}  // namespace

const LeafKernels* Avx512LeafKernels() {
  static constexpr LeafKernels kKernels = {"avx512", &Avx512Hash64<false>,
                                           &Avx512BlockStats,
                                           &Avx512HashAndStats<false>};
  return &kKernels;
}

const LeafKernels* Avx512StreamLeafKernels() {
  static constexpr LeafKernels kKernels = {"avx512-stream", &Avx512Hash64<true>,
                                           &Avx512BlockStats,
                                           &Avx512HashAndStats<true>};
  return &kKernels;
}

}  // namespace lockstep::hash::internal

#else  // no AVX-512 unit in this build

namespace lockstep::hash::internal {
const LeafKernels* Avx512LeafKernels() { return nullptr; }
const LeafKernels* Avx512StreamLeafKernels() { return nullptr; }
}  // namespace lockstep::hash::internal

#endif
