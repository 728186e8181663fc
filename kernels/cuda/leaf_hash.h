// Bodies of the device fingerprint kernels.
//
// A tensor's fingerprint (kernels/hash/SPEC.md) hashes its bytes in 64 KiB
// leaves with XXH3-64 and combines the leaf hashes with XXH3-128 over
// header || leaf hashes (hash::CombineLeafHashes); float32 tensors also get
// statistics (stats_portable.h). Two forms compute the same bits:
//
// - One thread per leaf (LeafHashThread, LeafHashAndStatsThread,
//   CombineLeavesThread): xxh3_portable.h and stats_portable.h called as
//   they are, byte loads. The reference.
// - One warp per leaf (LeafHashAndStatsWarp, CombineLeavesWarp, written on
//   warp.h's abstraction): what the device runs. 16-byte loads: 32 lanes
//   read 512 consecutive bytes (8 XXH3 stripes of 64 bytes, 4 lanes per
//   stripe), two such rows (one 1 KiB XXH3 block) per step. XXH3's large-input
//   accumulation adds every stripe's contribution to the 8 accumulators modulo
//   2^64 between two scrambles, so each lane sums the contributions of its
//   quarter stripes (lane % 4 owns accumulators 2q and 2q + 1), the 8 lanes of
//   a quarter add their sums by xor-shuffles at the end of each 1 KiB block,
//   and every lane scrambles its pair; the last partial block and the
//   overlapping last stripe are added the same way, and the final merge's four
//   products are added across the quarters. Inputs of at most 240 bytes take
//   XXH3's short paths in one lane. The statistics keep the definition's order:
//   lanes L and L + 16 (L < 16) hold chains 4L .. 4L + 3's next two
//   elements of each 512 bytes; lane L steps chains 4L, 4L + 1 and lane
//   L + 16 chains 4L + 2, 4L + 3, each through two floats of its own and
//   two of its partner's (one shuffle), so chain j sees elements j, j + 64,
//   j + 128, ... in order; the halving tree is shuffles between the chain
//   owners. The combination runs on two warps: one hashes header || leaf
//   hashes, the other loads the statistics partials and stages them in
//   shared memory for its lane 0, which adds them in leaf order.
//
// Thread-safety: pure functions; threads (warps) write disjoint leaves.
#ifndef LOCKSTEP_KERNELS_CUDA_LEAF_HASH_H_
#define LOCKSTEP_KERNELS_CUDA_LEAF_HASH_H_

#include <cstdint>

#include "kernels/canonical/float_bits.h"
#include "kernels/canonical/hd.h"
#include "kernels/cuda/launch_limits.h"
#include "kernels/cuda/warp.h"
#include "kernels/hash/stats_portable.h"
#include "kernels/hash/xxh3_portable.h"

namespace lockstep::kernels::cuda {

// Must equal hash::kLeafBytes (checked by leaf_hash_test and at the
// device fingerprint's call site).
inline constexpr uint64_t kDeviceLeafBytes = 64 * 1024;

LS_HD_INLINE uint64_t NumDeviceLeaves(uint64_t size) {
  return (size + kDeviceLeafBytes - 1) / kDeviceLeafBytes;
}

// Bytes of leaf l of a tensor of `size` bytes (kDeviceLeafBytes but for a
// short last leaf). REQUIRES: l < NumDeviceLeaves(size).
LS_HD_INLINE uint64_t DeviceLeafLen(uint64_t size, int64_t l) {
  const uint64_t rest = size - static_cast<uint64_t>(l) * kDeviceLeafBytes;
  return rest < kDeviceLeafBytes ? rest : kDeviceLeafBytes;
}

// leaf_hashes[l] = XXH3-64 of bytes [l * 64 KiB, min(size, (l + 1) * 64 KiB))
// for the leaves l = thread, thread + num_threads, ...
LS_HD_INLINE void LeafHashThread(const unsigned char* bytes, uint64_t size,
                                 uint64_t* leaf_hashes, int64_t thread,
                                 int64_t num_threads) {
  const int64_t leaves = static_cast<int64_t>(NumDeviceLeaves(size));
  for (int64_t l = thread; l < leaves; l += num_threads) {
    const uint64_t begin = static_cast<uint64_t>(l) * kDeviceLeafBytes;
    const uint64_t len = DeviceLeafLen(size, l);
    leaf_hashes[l] = hash::portable::Xxh3Hash64(bytes + begin, len);
  }
}

// LeafHashThread plus, per leaf, the statistics block of a float32 tensor:
// stats[l] = portable::StatsOfBlock of the leaf's floats (a 64 KiB leaf is
// exactly one statistics block), so the host adds the NumDeviceLeaves(size)
// partials in block order (hash::CombineBlockStats) and gets ComputeStats'
// bits. REQUIRES: size a multiple of 4; bytes 4-byte aligned.
LS_HD_INLINE void LeafHashAndStatsThread(const unsigned char* bytes,
                                         uint64_t size, uint64_t* leaf_hashes,
                                         hash::portable::StatsPartial* stats,
                                         int64_t thread, int64_t num_threads) {
  const int64_t leaves = static_cast<int64_t>(NumDeviceLeaves(size));
  for (int64_t l = thread; l < leaves; l += num_threads) {
    const uint64_t begin = static_cast<uint64_t>(l) * kDeviceLeafBytes;
    const uint64_t len = DeviceLeafLen(size, l);
    leaf_hashes[l] = hash::portable::Xxh3Hash64(bytes + begin, len);
    stats[l] = hash::portable::StatsOfBlock(
        reinterpret_cast<const float*>(bytes + begin),
        static_cast<int64_t>(len / 4));
  }
}

// The combination step of the device fingerprint, run by a single thread
// after the leaf kernel: *fingerprint = XXH3-128 of header || the leaf
// hashes as little-endian u64 (exactly hash::CombineLeafHashes' input),
// and, when stats is not null, *total = the statistics partials added in
// leaf order (hash::CombineBlockStats' sum). `scratch` holds the encoded
// header (hash::EncodeTensorHeader) in [0, header_len) and has room for
// 8 * leaves more bytes, which this overwrites.
LS_HD_INLINE void CombineLeavesThread(
    unsigned char* scratch, uint64_t header_len, const uint64_t* leaf_hashes,
    uint64_t leaves, const hash::portable::StatsPartial* stats,
    hash::portable::Hash128* fingerprint, hash::portable::StatsPartial* total) {
  unsigned char* p = scratch + header_len;
  for (uint64_t l = 0; l < leaves; ++l) {
    const uint64_t h = leaf_hashes[l];
    for (int b = 0; b < 8; ++b) {
      p[8 * l + b] = static_cast<unsigned char>((h >> (8 * b)) & 0xffU);
    }
  }
  *fingerprint = hash::portable::Xxh3Hash128(scratch, header_len + 8 * leaves);
  if (stats != nullptr) {
    hash::portable::StatsPartial t = hash::portable::EmptyStatsPartial();
    for (uint64_t l = 0; l < leaves; ++l) {
      hash::portable::AddBlockStats(&t, stats[l]);
    }
    *total = t;
  }
}

// ---- One warp per leaf. ----

// Bytes one warp loads at once: 32 lanes x 16 bytes (8 stripes).
inline constexpr uint64_t kWarpRowBytes = kWarpSize * 16;
// Inputs up to this length take XXH3's short paths (one lane).
inline constexpr uint64_t kXxh3ShortMax = 240;
// 1 KiB XXH3 blocks whose loads are issued together before any of them is
// used: one in the leaf kernel (its many warps per SM hide the latency;
// two take it from 74 to 96 registers, sm_90), two in the combination (one
// warp alone on its SM; four spill there).
inline constexpr int kLeafBlocksPerLoad = 1;
inline constexpr int kCombineBlocksPerLoad = 2;
// The leaf kernel for a tensor of few leaves, which leaves the device
// mostly idle, so the registers two blocks in flight take (97 against 74,
// sm_90) cost no occupancy there: on an H200 it hashed 16 leaves 7 - 13 %
// faster (docs/gpu.md). "Few": at most kFewLeavesPerSm per multiprocessor.
inline constexpr int kFewLeavesBlocksPerLoad = 2;
inline constexpr int64_t kFewLeavesPerSm = 8;

// The blocks per load of the leaf kernel for `leaves` leaves on a device
// of `multiprocessors` SMs (0: unknown, kLeafBlocksPerLoad). The bits do
// not depend on it.
LS_HD_INLINE int LeafBlocksPerLoadFor(uint64_t leaves,
                                      int64_t multiprocessors) {
  return multiprocessors > 0 && leaves <= static_cast<uint64_t>(
                                              kFewLeavesPerSm * multiprocessors)
             ? kFewLeavesBlocksPerLoad
             : kLeafBlocksPerLoad;
}
// Statistics partials one lane of the combination's statistics warp loads
// per batch: a batch is kWarpSize * kPartialsPerLane leaves in a row.
inline constexpr int kPartialsPerLane = 2;
// The combination kernel's block: warp 0 hashes header || leaf hashes
// (CombineLeafHashesWarp) while warp 1 adds the statistics partials
// (SumLeafStatsWarp).
inline constexpr int kCombineThreads = 2 * kWarpSize;

// The longest encoded tensor header (kernels/hash/SPEC.md, "Header": tag,
// dtype and rank bytes, then 8 bytes per dimension, at hash::kMaxRank = 64
// dimensions; plan.cc checks the two agree).
inline constexpr uint32_t kMaxHeaderBytes = 3 + 8 * 64;

// A tensor's encoded header by value: a kernel argument (520 bytes), so
// the combination writes the header in front of the leaf hashes itself
// and the host copies nothing to the device before a fingerprint's
// kernels (a copy from host memory would first wait for every kernel
// before it).
struct TensorHeaderArg {
  uint32_t len;  // <= kMaxHeaderBytes
  unsigned char bytes[kMaxHeaderBytes];
};

// What one lane holds while its warp hashes an input.
struct WarpHashLane {
  // Secret words of this lane's quarter stripe (q = lane % 4, stripe
  // lane / 4 of the warp's 8): key[c] for the 8 stripes of the block's
  // c-th 512 bytes, then the scramble, last-stripe and merge keys.
  uint64_t key[2][2];
  uint64_t scramble_key[2];
  uint64_t last_key[2];
  uint64_t merge_key[2];
  uint64_t merge_hi_key[2];
  uint64_t acc[2];  // accumulators 2q and 2q + 1
  uint64_t sum[2];  // their contributions since the last scramble
  // This lane's 16 bytes of each 512 loaded together (2 per 1 KiB block;
  // only the first 2 * kLeafBlocksPerLoad, or 2 * kFewLeavesBlocksPerLoad,
  // in the leaf kernel).
  uint64_t word[2 * kCombineBlocksPerLoad][2];
  // Statistics: the two floats of each 512 (of the block in use) this
  // lane takes from lane ^ 16.
  uint64_t other[2];
  uint64_t lo;  // merge result (the 64-bit hash, or XXH3-128's low)
  uint64_t hi;  // XXH3-128's high half
  // Statistics chains 4L, 4L + 1 (lane L < 16) or 4L + 2, 4L + 3 (lane
  // 16 + L).
  double chain_sum[2];
  double chain_sq[2];
  uint64_t max_finite;
  uint64_t nan_count;
  uint64_t inf_count;
  // The combination's statistics warp: the partials of leaves base +
  // kWarpSize * k + lane of two batches (one being added, the next in
  // flight), and lane 0's sequential totals.
  double part_sum[2][kPartialsPerLane];
  double part_sq[2][kPartialsPerLane];
  uint64_t part_max[2][kPartialsPerLane];
  uint64_t part_nan[2][kPartialsPerLane];
  uint64_t part_inf[2][kPartialsPerLane];
  double total_sum;
  double total_sq;
};

// One leaf's float64 statistics sums, as the statistics warp stages them
// for its lane 0 (one 16-byte load each).
struct alignas(16) StagedSums {
  double sum;
  double sum_sq;
};

// The statistics warp's staging memory (shared memory on the device): one
// batch of kWarpSize * kPartialsPerLane leaves, in leaf order.
struct PartialStage {
  StagedSums leaf[kWarpSize * kPartialsPerLane];
};

namespace warp_internal {

// Fixed-count loops over lane-local arrays are unrolled on the device, so
// the arrays stay in registers.
#if defined(__CUDA_ARCH__)
#define LS_WARP_UNROLL _Pragma("unroll")
#else
#define LS_WARP_UNROLL
#endif

namespace x = ::lockstep::hash::portable::xxh3_internal;

LS_HD_INLINE uint64_t InitialAcc(int i) {
  switch (i) {
    case 0:
      return x::kPrime32_3;
    case 1:
      return x::kPrime64_1;
    case 2:
      return x::kPrime64_2;
    case 3:
      return x::kPrime64_3;
    case 4:
      return x::kPrime64_4;
    case 5:
      return x::kPrime32_2;
    case 6:
      return x::kPrime64_5;
    default:
      return x::kPrime32_1;
  }
}

// The secret words a lane needs, read once per warp.
LS_HD_INLINE void LoadKeys(int lane, WarpHashLane& s) {
  const unsigned char* k = x::Secret();
  const uint64_t q = static_cast<uint64_t>(lane % 4);
  const uint64_t stripe = static_cast<uint64_t>(lane / 4);
  for (uint64_t c = 0; c < 2; ++c) {
    const uint64_t off = (8 * c + stripe) * 8 + 16 * q;
    s.key[c][0] = x::ReadLe64(k + off);
    s.key[c][1] = x::ReadLe64(k + off + 8);
  }
  const uint64_t scramble = x::kSecretSize - x::kStripeLen + 16 * q;
  s.scramble_key[0] = x::ReadLe64(k + scramble);
  s.scramble_key[1] = x::ReadLe64(k + scramble + 8);
  const uint64_t last = x::kSecretSize - 71 + 16 * q;
  s.last_key[0] = x::ReadLe64(k + last);
  s.last_key[1] = x::ReadLe64(k + last + 8);
  s.merge_key[0] = x::ReadLe64(k + 11 + 16 * q);
  s.merge_key[1] = x::ReadLe64(k + 11 + 16 * q + 8);
  const uint64_t hi = x::kSecretSize - 75 + 16 * q;
  s.merge_hi_key[0] = x::ReadLe64(k + hi);
  s.merge_hi_key[1] = x::ReadLe64(k + hi + 8);
}

// 16 bytes as two little-endian words. REQUIRES (device): p 16-byte
// aligned.
LS_HD_INLINE void Load16(const unsigned char* p, uint64_t word[2]) {
#if defined(__CUDA_ARCH__)
  const ulonglong2 v = *reinterpret_cast<const ulonglong2*>(p);
  word[0] = v.x;
  word[1] = v.y;
#else
  word[0] = x::ReadLe64(p);
  word[1] = x::ReadLe64(p + 8);
#endif
}

// 4 bytes as a little-endian word. REQUIRES (device): p 4-byte aligned.
LS_HD_INLINE uint32_t Load4(const unsigned char* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint32_t*>(p);
#else
  return x::ReadLe32(p);
#endif
}

// Words 2q and 2q + 1 of a stripe into accumulators 2q and 2q + 1
// (xxh3_internal::Accumulate restricted to one quarter).
LS_HD_INLINE void AccumulateQuarter(uint64_t sum[2], const uint64_t word[2],
                                    const uint64_t key[2]) {
  const uint64_t v0 = word[0] ^ key[0];
  const uint64_t v1 = word[1] ^ key[1];
  sum[0] += (v0 & 0xffffffffULL) * (v0 >> 32) + word[1];
  sum[1] += word[0] + (v1 & 0xffffffffULL) * (v1 >> 32);
}

LS_HD_INLINE void ScramblePair(uint64_t acc[2], const uint64_t key[2]) {
  LS_WARP_UNROLL
  for (int j = 0; j < 2; ++j) {
    uint64_t a = acc[j];
    a ^= a >> 47;
    a ^= key[j];
    a *= x::kPrime32_1;
    acc[j] = a;
  }
}

// Floats of the 16 bytes at `at` that lie inside [0, len) (len a multiple
// of 4).
LS_HD_INLINE int FloatsInside(uint64_t at, uint64_t len) {
  if (at >= len) return 0;
  return len - at >= 16 ? 4 : static_cast<int>((len - at) / 4);
}

// The first `n` (0..2) floats of a word (low half first) into the lane's
// chains 0 and 1 (StatsStep's arithmetic; the NaN / Inf counts are kept as
// they come, which gives the reference's two-pass counts).
LS_HD_INLINE void ChainSteps(uint64_t word, int n, WarpHashLane& s) {
  LS_WARP_UNROLL
  for (int i = 0; i < 2; ++i) {
    if (i >= n) continue;
    const uint32_t bits = static_cast<uint32_t>(word >> (32 * i));
    const uint32_t abs_bits = bits & 0x7fffffffU;
    const bool finite = abs_bits < hash::portable::kF32InfBits;
    const double d =
        finite ? static_cast<double>(canonical::LsBitsToFloat(bits)) : 0.0;
    s.chain_sum[i] = s.chain_sum[i] + d;
    s.chain_sq[i] = s.chain_sq[i] + d * d;
    const uint64_t a = finite ? abs_bits : 0U;
    s.max_finite = a > s.max_finite ? a : s.max_finite;
    s.nan_count += abs_bits > hash::portable::kF32InfBits ? 1 : 0;
    s.inf_count += abs_bits == hash::portable::kF32InfBits ? 1 : 0;
  }
}

struct AddU64 {
  LS_HD_INLINE uint64_t operator()(uint64_t a, uint64_t b) const {
    return a + b;
  }
};
struct MaxU64 {
  LS_HD_INLINE uint64_t operator()(uint64_t a, uint64_t b) const {
    return a > b ? a : b;
  }
};
struct AddF64 {
  LS_HD_INLINE double operator()(double a, double b) const { return a + b; }
};

// max_finite, nan_count and inf_count := their maximum, sums over the
// warp's lanes (integers: any order).
template <class W>
LS_HD_INLINE void ReduceCounts(W& w) {
  for (int m = 1; m < kWarpSize; m *= 2) {
    w.XorCombine(
        m, [](WarpHashLane& s) -> uint64_t& { return s.max_finite; }, MaxU64());
    w.XorCombine(
        m, [](WarpHashLane& s) -> uint64_t& { return s.nan_count; }, AddU64());
    w.XorCombine(
        m, [](WarpHashLane& s) -> uint64_t& { return s.inf_count; }, AddU64());
  }
}

// sum[0..1] := the sum over the 8 lanes of the same quarter (lane % 4).
template <class W>
LS_HD_INLINE void ReduceQuarterSums(W& w) {
  for (int m = 4; m < kWarpSize; m *= 2) {
    w.XorCombine(
        m, [](WarpHashLane& s) -> uint64_t& { return s.sum[0]; }, AddU64());
    w.XorCombine(
        m, [](WarpHashLane& s) -> uint64_t& { return s.sum[1]; }, AddU64());
  }
}

// One pass of a warp over in[0, len), len >= 1. With `hash` (len > 240):
// XXH3's large-input accumulation (xxh3_internal::LargeAccumulate), every
// lane ending with its quarter's two accumulators. With `stats`: the
// statistics chains over the len / 4 floats. kBlocks 1 KiB blocks are
// loaded at once (all their loads in flight together), then accumulated
// one after another. REQUIRES: in 16-byte aligned (device); len a multiple
// of 4 with stats.
template <int kBlocks, class W>
LS_HD_INLINE void LargeAccumulate(W& w, const unsigned char* in, uint64_t len,
                                  bool hash, bool stats) {
  static_assert(kBlocks >= 1 && kBlocks <= kCombineBlocksPerLoad,
                "WarpHashLane::word holds kCombineBlocksPerLoad blocks");
  constexpr int kRows = 2 * kBlocks;
  const uint64_t full_blocks = hash ? (len - 1) / x::kBlockLen : 0;
  const uint64_t last_len = len - full_blocks * x::kBlockLen;
  // Stripes accumulated with their block's keys: every stripe of the full
  // blocks, then those of the last block but its last (XXH3 treats the
  // input's last 64 bytes as a stripe of their own).
  const uint64_t stripes =
      hash ? full_blocks * x::kStripesPerBlock + (last_len - 1) / x::kStripeLen
           : 0;
  const uint64_t rows = (len + kWarpRowBytes - 1) / kWarpRowBytes;
  w.Each([&](int lane, WarpHashLane& s) {
    s.acc[0] = InitialAcc(2 * (lane % 4));
    s.acc[1] = InitialAcc(2 * (lane % 4) + 1);
    s.sum[0] = 0;
    s.sum[1] = 0;
    LS_WARP_UNROLL
    for (int i = 0; i < 2; ++i) {
      s.chain_sum[i] = 0.0;
      s.chain_sq[i] = 0.0;
    }
    s.max_finite = 0;
    s.nan_count = 0;
    s.inf_count = 0;
  });
  // kBlocks 1 KiB blocks (2 * kBlocks rows of 512 bytes) per step: all
  // their loads are in flight together; rows past the input load nothing.
  for (uint64_t g = 0; kRows * g < rows; ++g) {
    w.Each([&](int lane, WarpHashLane& s) {
      LS_WARP_UNROLL
      for (int c = 0; c < kRows; ++c) {
        const uint64_t r = kRows * g + c;
        const uint64_t at =
            r * kWarpRowBytes + 16 * static_cast<uint64_t>(lane);
        s.word[c][0] = 0;
        s.word[c][1] = 0;
        if (at + 16 <= len) {
          Load16(in + at, s.word[c]);
        } else if (stats) {
          // The input's last floats: only those inside it (len % 16 != 0).
          const int n = FloatsInside(at, len);
          LS_WARP_UNROLL
          for (int i = 0; i < 4; ++i) {
            if (i >= n) continue;
            const uint64_t v = Load4(in + at + 4 * i);
            s.word[c][i / 2] |= v << (32 * (i % 2));
          }
        }
      }
    });
    LS_WARP_UNROLL
    for (int i = 0; i < kBlocks; ++i) {
      const uint64_t b = kBlocks * g + i;
      if (2 * b >= rows) break;
      w.Each([&](int lane, WarpHashLane& s) {
        LS_WARP_UNROLL
        for (int c = 0; c < 2; ++c) {
          const uint64_t r = 2 * b + c;
          if (r * 8 + static_cast<uint64_t>(lane / 4) < stripes) {
            AccumulateQuarter(s.sum, s.word[2 * i + c], s.key[c]);
          }
        }
      });
      if (stats) {
        // Of each 512 bytes (128 floats), floats j and 64 + j are chain j's
        // next two elements: lane L < 16 holds floats 4L .. 4L + 3 and lane
        // 16 + L floats 64 + 4L .. 64 + 4L + 3. Lane L steps chains 4L and
        // 4L + 1 through its floats 0, 1, then lane 16 + L's floats 0, 1;
        // lane 16 + L steps chains 4L + 2 and 4L + 3 through lane L's
        // floats 2, 3, then its own floats 2, 3. So every lane takes one
        // word from its partner (one xor shuffle per 512 bytes), and chain
        // j sees elements j, j + 64, j + 128, ... in order.
        w.Each([&](int lane, WarpHashLane& s) {
          LS_WARP_UNROLL
          for (int c = 0; c < 2; ++c) {
            // A select: a lane-dependent index would put the array in
            // local memory.
            s.other[c] =
                lane < 16 ? s.word[2 * i + c][1] : s.word[2 * i + c][0];
          }
        });
        LS_WARP_UNROLL
        for (int c = 0; c < 2; ++c) {
          w.XorCombine(
              16, [c](WarpHashLane& s) -> uint64_t& { return s.other[c]; },
              [](uint64_t, uint64_t theirs) { return theirs; });
        }
        // Every block but a leaf's last lies wholly inside the input (a
        // warp-uniform test): two floats per step, no per-lane counts.
        const bool whole = (2 * b + 2) * kWarpRowBytes <= len;
        w.Each([&](int lane, WarpHashLane& s) {
          const bool low = lane < 16;
          LS_WARP_UNROLL
          for (int c = 0; c < 2; ++c) {
            // Selects, not branches: both halves of the warp run the same
            // instructions.
            const uint64_t first_word = low ? s.word[2 * i + c][0] : s.other[c];
            const uint64_t second_word =
                low ? s.other[c] : s.word[2 * i + c][1];
            if (whole) {
              ChainSteps(first_word, 2, s);
              ChainSteps(second_word, 2, s);
              continue;
            }
            const uint64_t row = (2 * b + c) * kWarpRowBytes;
            const int own =
                FloatsInside(row + 16 * static_cast<uint64_t>(lane), len);
            const int theirs =
                FloatsInside(row + 16 * static_cast<uint64_t>(lane ^ 16), len);
            ChainSteps(
                first_word,
                low ? (own < 2 ? own : 2) : (theirs > 2 ? theirs - 2 : 0), s);
            ChainSteps(
                second_word,
                low ? (theirs < 2 ? theirs : 2) : (own > 2 ? own - 2 : 0), s);
          }
        });
      }
      if (b < full_blocks) {  // a full block ends: scramble
        ReduceQuarterSums(w);
        w.Each([&](int, WarpHashLane& s) {
          s.acc[0] += s.sum[0];
          s.acc[1] += s.sum[1];
          s.sum[0] = 0;
          s.sum[1] = 0;
          ScramblePair(s.acc, s.scramble_key);
        });
      }
    }
  }
  if (!hash) return;
  // The last stripe (the input's last 64 bytes, unaligned in general).
  w.Each([&](int lane, WarpHashLane& s) {
    if (lane < 4) {
      const unsigned char* p = in + len - x::kStripeLen + 16 * lane;
      const uint64_t word[2] = {x::ReadLe64(p), x::ReadLe64(p + 8)};
      AccumulateQuarter(s.sum, word, s.last_key);
    }
  });
  ReduceQuarterSums(w);
  w.Each([&](int, WarpHashLane& s) {
    s.acc[0] += s.sum[0];
    s.acc[1] += s.sum[1];
  });
}

// FinalMerge on the accumulators spread over the quarters: every lane ends
// with s.lo = XXH3-64 (and, with `high`, s.hi = XXH3-128's high half).
template <class W>
LS_HD_INLINE void FinalMerge(W& w, uint64_t len, bool high) {
  w.Each([&](int, WarpHashLane& s) {
    s.lo = x::MulFold64(s.acc[0] ^ s.merge_key[0], s.acc[1] ^ s.merge_key[1]);
    s.hi = high ? x::MulFold64(s.acc[0] ^ s.merge_hi_key[0],
                               s.acc[1] ^ s.merge_hi_key[1])
                : 0;
  });
  for (int m = 1; m < 4; m *= 2) {
    w.XorCombine(
        m, [](WarpHashLane& s) -> uint64_t& { return s.lo; }, AddU64());
    if (high) {
      w.XorCombine(
          m, [](WarpHashLane& s) -> uint64_t& { return s.hi; }, AddU64());
    }
  }
  w.Each([&](int, WarpHashLane& s) {
    s.lo = x::Avalanche(len * x::kPrime64_1 + s.lo);
    s.hi = x::Avalanche(~(len * x::kPrime64_2) + s.hi);
  });
}

// The halving tree over the 64 chains (FoldLanes) and the reductions of
// max |x| and the counts; lane 0 ends with the block's statistics.
template <class W>
LS_HD_INLINE hash::portable::StatsPartial FoldStats(W& w) {
  // w = 32, 16, 8, 4: chain j (lane j / 4, or 16 + j / 4) += chain j + w
  // (w / 4 lanes up, same slot): masks 8, 4, 2, 1; then w = 2: chains 0, 1
  // (lane 0) += chains 2, 3 (lane 16): mask 16 (lanes outside the fold
  // hold values nobody reads).
  LS_WARP_UNROLL
  for (int m = 8; m >= 1; m /= 2) {
    LS_WARP_UNROLL
    for (int i = 0; i < 2; ++i) {
      w.XorCombine(
          m, [i](WarpHashLane& s) -> double& { return s.chain_sum[i]; },
          AddF64());
      w.XorCombine(
          m, [i](WarpHashLane& s) -> double& { return s.chain_sq[i]; },
          AddF64());
    }
  }
  LS_WARP_UNROLL
  for (int i = 0; i < 2; ++i) {
    w.XorCombine(
        16, [i](WarpHashLane& s) -> double& { return s.chain_sum[i]; },
        AddF64());
    w.XorCombine(
        16, [i](WarpHashLane& s) -> double& { return s.chain_sq[i]; },
        AddF64());
  }
  ReduceCounts(w);
  hash::portable::StatsPartial p = hash::portable::EmptyStatsPartial();
  w.Each([&](int lane, WarpHashLane& s) {
    if (lane != 0) return;
    // w = 1 inside lane 0.
    p.sum = s.chain_sum[0] + s.chain_sum[1];
    p.sum_sq = s.chain_sq[0] + s.chain_sq[1];
    p.max_abs_bits = static_cast<uint32_t>(s.max_finite);
    p.nan_count = static_cast<int64_t>(s.nan_count);
    p.inf_count = static_cast<int64_t>(s.inf_count);
  });
  return p;
}

// The combination's statistics warp. Batches of kPartialBatch leaves in a
// row: lane L loads the partials of leaves base + kWarpSize * k + L (k <
// kPartialsPerLane) into buffer kBuf; the next batch's loads are issued
// before the current batch is added, so lane 0's chain never waits on
// global memory.
inline constexpr uint64_t kPartialBatch = kWarpSize * kPartialsPerLane;

template <int kBuf, class W>
LS_HD_INLINE void LoadPartials(W& w, const hash::portable::StatsPartial* stats,
                               uint64_t leaves, uint64_t base) {
  w.Each([&](int lane, WarpHashLane& s) {
    LS_WARP_UNROLL
    for (int k = 0; k < kPartialsPerLane; ++k) {
      const uint64_t l = base + kWarpSize * k + static_cast<uint64_t>(lane);
      if (l < leaves) {
        s.part_sum[kBuf][k] = stats[l].sum;
        s.part_sq[kBuf][k] = stats[l].sum_sq;
        s.part_max[kBuf][k] = stats[l].max_abs_bits;
        s.part_nan[kBuf][k] = static_cast<uint64_t>(stats[l].nan_count);
        s.part_inf[kBuf][k] = static_cast<uint64_t>(stats[l].inf_count);
      } else {  // past the last leaf: neutral integers, floats never added
        s.part_sum[kBuf][k] = 0.0;
        s.part_sq[kBuf][k] = 0.0;
        s.part_max[kBuf][k] = 0;
        s.part_nan[kBuf][k] = 0;
        s.part_inf[kBuf][k] = 0;
      }
    }
  });
}

// Adds buffer kBuf's batch (leaves base .. base + kPartialBatch - 1 below
// `leaves`): the integers in every lane in any order; the float64 sums
// staged in leaf order and added by lane 0 one after another. kFull: the
// whole batch is below `leaves`, so lane 0's loop has a fixed count and
// its shared-memory loads can run ahead of the additions.
template <int kBuf, bool kFull, class W>
LS_HD_INLINE void AddPartials(W& w, PartialStage* stage, uint64_t leaves,
                              uint64_t base) {
  w.Each([&](int lane, WarpHashLane& s) {
    LS_WARP_UNROLL
    for (int k = 0; k < kPartialsPerLane; ++k) {
      const uint64_t m = s.part_max[kBuf][k];
      s.max_finite = m > s.max_finite ? m : s.max_finite;
      s.nan_count += s.part_nan[kBuf][k];
      s.inf_count += s.part_inf[kBuf][k];
      StagedSums& v = stage->leaf[kWarpSize * k + lane];
      v.sum = s.part_sum[kBuf][k];
      v.sum_sq = s.part_sq[kBuf][k];
    }
  });
  w.Sync();
  w.Each([&](int lane, WarpHashLane& s) {
    if (lane != 0) return;
    const uint64_t n = kFull ? kPartialBatch : leaves - base;
    LS_WARP_UNROLL
    for (uint64_t j = 0; j < kPartialBatch; ++j) {
      if (!kFull && j >= n) break;
      const StagedSums v = stage->leaf[j];
      s.total_sum = s.total_sum + v.sum;
      s.total_sq = s.total_sq + v.sum_sq;
    }
  });
  w.Sync();  // lane 0 is done with the stage before it is written again
}

template <int kBuf, class W>
LS_HD_INLINE void AddPartialsOf(W& w, PartialStage* stage, uint64_t leaves,
                                uint64_t base) {
  if (base + kPartialBatch <= leaves) {
    AddPartials<kBuf, true>(w, stage, leaves, base);
  } else {
    AddPartials<kBuf, false>(w, stage, leaves, base);
  }
}

}  // namespace warp_internal

// The warp form of LeafHashThread / LeafHashAndStatsThread: warp `warp` of
// `num_warps` hashes leaves warp, warp + num_warps, ... (64 KiB each) and
// writes leaf_hashes[l]; when `stats` is not null, also stats[l] (float32);
// when `combine_input` is not null, also the leaf hash as 8 little-endian
// bytes at combine_input + 8 * l (CombineLeavesWarp's input after the
// header). Call on every lane of the warp with uniform arguments.
// kBlocks: 1 KiB blocks loaded at once (kLeafBlocksPerLoad, or
// kFewLeavesBlocksPerLoad for few leaves; the same bits). REQUIRES: bytes
// 16-byte aligned (device); with stats, size a multiple of 4.
template <int kBlocks = kLeafBlocksPerLoad, class W>
LS_HD_INLINE void LeafHashAndStatsWarp(W& w, const unsigned char* bytes,
                                       uint64_t size, uint64_t* leaf_hashes,
                                       hash::portable::StatsPartial* stats,
                                       unsigned char* combine_input,
                                       int64_t warp, int64_t num_warps) {
  namespace wi = warp_internal;
  w.Each([](int lane, WarpHashLane& s) { wi::LoadKeys(lane, s); });
  const int64_t leaves = static_cast<int64_t>(NumDeviceLeaves(size));
  for (int64_t l = warp; l < leaves; l += num_warps) {
    const uint64_t begin = static_cast<uint64_t>(l) * kDeviceLeafBytes;
    const uint64_t len = DeviceLeafLen(size, l);
    const unsigned char* in = bytes + begin;
    uint64_t h = 0;
    hash::portable::StatsPartial p = hash::portable::EmptyStatsPartial();
    if (len <= kXxh3ShortMax) {
      // XXH3's short paths in lane 0; the statistics (at most 60 floats,
      // one per chain) by the warp's chain owners, as for any leaf:
      // StatsOfBlock's 128 accumulators in one thread would set the
      // register budget of the whole kernel.
      if (stats != nullptr) {
        wi::LargeAccumulate<kBlocks>(w, in, len, false, true);
        p = wi::FoldStats(w);
      }
      w.Each([&](int lane, WarpHashLane&) {
        if (lane == 0) h = hash::portable::Xxh3Hash64(in, len);
      });
    } else {
      wi::LargeAccumulate<kBlocks>(w, in, len, true, stats != nullptr);
      wi::FinalMerge(w, len, false);
      if (stats != nullptr) p = wi::FoldStats(w);
      w.Each([&](int lane, WarpHashLane& s) {
        if (lane == 0) h = s.lo;
      });
    }
    w.Each([&](int lane, WarpHashLane&) {
      if (lane != 0) return;
      leaf_hashes[l] = h;
      if (stats != nullptr) stats[l] = p;
      if (combine_input != nullptr) {
        for (int b = 0; b < 8; ++b) {
          combine_input[8 * l + b] =
              static_cast<unsigned char>((h >> (8 * b)) & 0xffU);
        }
      }
    });
  }
}

// ---- A block of warps per leaf. ----
//
// One warp per leaf issues its instructions one after another: on an H200
// a 64 KiB leaf took that warp about 15k instructions at one per 5 cycles
// (72 us for a 17-leaf tensor, the device otherwise idle; docs/gpu.md).
// LeafHashAndStatsBlock spreads each leaf over the kLeafBlockWarps warps
// of one block, in two phases (warp.h's Phase), the same bits:
//
// 1. Warps 0 .. kLeafHashWarps - 1 take the leaf's 1 KiB XXH3 blocks in
//    turn (warp i blocks i, i + kLeafHashWarps, ..., two loaded at once)
//    and write each one's contributions to the 8 accumulators (the sum
//    over its stripes modulo 2^64, AccumulateQuarter and ReduceQuarterSums
//    as in the one-warp form) to shared memory. The other kLeafStatsWarps warps
//    run the 64 statistics chains, one per lane: chain j steps through floats
//    j, j + 64, j + 128, ... of the leaf in order (4-byte loads, consecutive
//    across the lanes, the next kStatsRowsPerLoad rows in flight while the
//    current ones are stepped), and max |x| and the counts are reduced per
//    warp.
// 2. Warp 0 adds the contributions to the accumulators block after block,
//    with XXH3's scramble after every full block (the order the one-warp
//    form adds them in, so the same sums modulo 2^64), then the last
//    stripe, and merges; warp 1 folds the 64 chains by the halving tree
//    (chains j and j + 32 from shared memory, then shuffles) and combines
//    the two statistics warps' maxima and counts.
//
// Meant for tensors of few leaves, where the device would otherwise be
// mostly idle; each byte is read by a hashing and a statistics warp (the
// second read from cache).
inline constexpr int kLeafBlockWarps = 8;
inline constexpr int kLeafBlockThreads = kLeafBlockWarps * kWarpSize;
inline constexpr int kLeafHashWarps = 6;
inline constexpr int kLeafStatsWarps = kLeafBlockWarps - kLeafHashWarps;
inline constexpr int kStatsChains = 64;
static_assert(kLeafStatsWarps * kWarpSize == kStatsChains,
              "one statistics lane per chain");
static_assert(hash::portable::xxh3_internal::kBlockLen == 2 * kWarpRowBytes,
              "a warp loads one XXH3 block in two rows");
inline constexpr uint64_t kXxh3BlocksPerLeaf =
    kDeviceLeafBytes / hash::portable::xxh3_internal::kBlockLen;
// Rows of 64 floats whose loads a statistics lane issues together.
inline constexpr int kStatsRowsPerLoad = 8;

// The block's shared memory (5.1 KiB).
struct LeafBlockShared {
  uint64_t block_sum[kXxh3BlocksPerLeaf][8];
  double chain_sum[kStatsChains];
  double chain_sq[kStatsChains];
  uint64_t max_finite[kLeafStatsWarps];
  uint64_t nan_count[kLeafStatsWarps];
  uint64_t inf_count[kLeafStatsWarps];
};

// Which leaf kernel a device fingerprint runs: one warp per leaf
// (LeafHashAndStatsWarp), a block of kLeafBlockWarps warps per leaf
// (LeafHashAndStatsBlock), or the block form for tensors of at most
// kFewLeavesPerSm leaves per multiprocessor on a known device. The bits
// are the same. kWarp is the default (CurrentDeviceLeafKernel, plan.h):
// the block form's bits are proven on the host emulation, its speed has
// not yet been measured on a device (docs/gpu.md).
enum class DeviceLeafKernel { kWarp, kBlock, kAuto };

// Whether `kernel` runs LeafHashAndStatsBlock (true) or
// LeafHashAndStatsWarp for `leaves` leaves on a device of
// `multiprocessors` SMs (0: unknown).
LS_HD_INLINE bool UseLeafBlocksFor(DeviceLeafKernel kernel, uint64_t leaves,
                                   int64_t multiprocessors) {
  if (kernel == DeviceLeafKernel::kBlock) return true;
  return kernel == DeviceLeafKernel::kAuto && multiprocessors > 0 &&
         leaves <= static_cast<uint64_t>(kFewLeavesPerSm * multiprocessors);
}

// The block form of LeafHashAndStatsWarp: the block hashes leaves
// first_leaf, first_leaf + leaf_step, ... and writes leaf_hashes[l],
// stats[l] (float32, when stats is not null) and the leaf hash's 8
// little-endian bytes at combine_input + 8 * l (when not null). Call on
// every thread of the block (B: DeviceBlockWarp or EmulatedBlock of
// kLeafBlockWarps warps) with uniform arguments; `sh` is the block's own
// (shared memory on the device). REQUIRES: bytes 16-byte aligned
// (device); with stats, size a multiple of 4.
template <class B>
LS_HD_INLINE void LeafHashAndStatsBlock(B& block, LeafBlockShared& sh,
                                        const unsigned char* bytes,
                                        uint64_t size, uint64_t* leaf_hashes,
                                        hash::portable::StatsPartial* stats,
                                        unsigned char* combine_input,
                                        int64_t first_leaf, int64_t leaf_step) {
  namespace wi = warp_internal;
  namespace x = hash::portable::xxh3_internal;
  block.Phase([](auto& w, int) {
    w.Each([](int lane, WarpHashLane& s) { wi::LoadKeys(lane, s); });
  });
  const int64_t leaves = static_cast<int64_t>(NumDeviceLeaves(size));
  for (int64_t l = first_leaf; l < leaves; l += leaf_step) {
    const uint64_t begin = static_cast<uint64_t>(l) * kDeviceLeafBytes;
    const uint64_t len = DeviceLeafLen(size, l);
    const unsigned char* in = bytes + begin;
    const bool large = len > kXxh3ShortMax;
    const uint64_t full_blocks = large ? (len - 1) / x::kBlockLen : 0;
    // Stripes accumulated with their block's keys (LargeAccumulate), and
    // the blocks that hold them.
    const uint64_t stripes =
        large ? full_blocks * x::kStripesPerBlock +
                    (len - full_blocks * x::kBlockLen - 1) / x::kStripeLen
              : 0;
    const uint64_t hashed_blocks =
        (stripes + x::kStripesPerBlock - 1) / x::kStripesPerBlock;
    block.Phase([&](auto& w, int warp) {
      if (warp < kLeafHashWarps) {
        // Two of the warp's blocks per step (b and b + kLeafHashWarps),
        // their four rows' loads in flight together.
        for (uint64_t b0 = static_cast<uint64_t>(warp); b0 < hashed_blocks;
             b0 += 2 * kLeafHashWarps) {
          w.Each([&](int lane, WarpHashLane& s) {
            const uint64_t stripe = static_cast<uint64_t>(lane / 4);
            LS_WARP_UNROLL
            for (int c = 0; c < 4; ++c) {
              const uint64_t r = 2 * (b0 + (c / 2) * kLeafHashWarps) +
                                 static_cast<uint64_t>(c % 2);
              s.word[c][0] = 0;
              s.word[c][1] = 0;
              if (r * 8 + stripe < stripes) {
                wi::Load16(
                    in + r * kWarpRowBytes + 16 * static_cast<uint64_t>(lane),
                    s.word[c]);
              }
            }
          });
          LS_WARP_UNROLL
          for (int i = 0; i < 2; ++i) {
            const uint64_t b = b0 + static_cast<uint64_t>(i) * kLeafHashWarps;
            if (b >= hashed_blocks) break;
            w.Each([&](int lane, WarpHashLane& s) {
              s.sum[0] = 0;
              s.sum[1] = 0;
              const uint64_t stripe = static_cast<uint64_t>(lane / 4);
              LS_WARP_UNROLL
              for (int c = 0; c < 2; ++c) {
                if ((2 * b + static_cast<uint64_t>(c)) * 8 + stripe < stripes) {
                  wi::AccumulateQuarter(s.sum, s.word[2 * i + c], s.key[c]);
                }
              }
            });
            wi::ReduceQuarterSums(w);
            w.Each([&](int lane, WarpHashLane& s) {
              if (lane >= 4) return;
              sh.block_sum[b][2 * lane] = s.sum[0];
              sh.block_sum[b][2 * lane + 1] = s.sum[1];
            });
          }
        }
        return;
      }
      if (stats == nullptr) return;
      const int stats_warp = warp - kLeafHashWarps;
      const uint64_t floats = len / 4;
      const uint64_t rows = (floats + kStatsChains - 1) / kStatsChains;
      w.Each([&](int lane, WarpHashLane& s) {
        const uint64_t j = static_cast<uint64_t>(stats_warp * kWarpSize + lane);
        s.chain_sum[0] = 0.0;
        s.chain_sq[0] = 0.0;
        s.max_finite = 0;
        s.nan_count = 0;
        s.inf_count = 0;
        // Batches of kStatsRowsPerLoad rows in two register buffers: the
        // next batch's loads are issued before the current one is stepped.
        // A float past the leaf reads as +0.0, which adds nothing to a
        // chain (docs/fingerprints.md, section 8) and counts as neither
        // NaN nor Inf.
        uint32_t v[2][kStatsRowsPerLoad];
        const auto load = [&](uint32_t* dst, uint64_t r0) {
          LS_WARP_UNROLL
          for (int i = 0; i < kStatsRowsPerLoad; ++i) {
            const uint64_t k =
                (r0 + static_cast<uint64_t>(i)) * kStatsChains + j;
            dst[i] = k < floats ? wi::Load4(in + 4 * k) : 0U;
          }
        };
        const auto step = [&](const uint32_t* src) {
          LS_WARP_UNROLL
          for (int i = 0; i < kStatsRowsPerLoad; ++i) {
            wi::ChainSteps(src[i], 1, s);
          }
        };
        load(v[0], 0);
        for (uint64_t r0 = 0; r0 < rows; r0 += 2 * kStatsRowsPerLoad) {
          load(v[1], r0 + kStatsRowsPerLoad);
          step(v[0]);
          if (r0 + kStatsRowsPerLoad >= rows) break;
          load(v[0], r0 + 2 * kStatsRowsPerLoad);
          step(v[1]);
        }
      });
      wi::ReduceCounts(w);
      w.Each([&](int lane, WarpHashLane& s) {
        const int j = stats_warp * kWarpSize + lane;
        sh.chain_sum[j] = s.chain_sum[0];
        sh.chain_sq[j] = s.chain_sq[0];
        if (lane != 0) return;
        sh.max_finite[stats_warp] = s.max_finite;
        sh.nan_count[stats_warp] = s.nan_count;
        sh.inf_count[stats_warp] = s.inf_count;
      });
    });
    block.Phase([&](auto& w, int warp) {
      if (warp == 0) {
        uint64_t h = 0;
        if (large) {
          w.Each([&](int lane, WarpHashLane& s) {
            // This lane's quarter's accumulators 2q, 2q + 1 (every lane of
            // the quarter alike).
            const int q = lane % 4;
            s.acc[0] = wi::InitialAcc(2 * q);
            s.acc[1] = wi::InitialAcc(2 * q + 1);
            for (uint64_t b = 0; b < full_blocks; ++b) {
              s.acc[0] += sh.block_sum[b][2 * q];
              s.acc[1] += sh.block_sum[b][2 * q + 1];
              wi::ScramblePair(s.acc, s.scramble_key);
            }
            if (hashed_blocks > full_blocks) {  // the last block's stripes
              s.acc[0] += sh.block_sum[full_blocks][2 * q];
              s.acc[1] += sh.block_sum[full_blocks][2 * q + 1];
            }
            // The last stripe (the input's last 64 bytes, unaligned in
            // general).
            const unsigned char* p =
                in + len - x::kStripeLen + 16 * static_cast<uint64_t>(q);
            const uint64_t word[2] = {x::ReadLe64(p), x::ReadLe64(p + 8)};
            s.sum[0] = 0;
            s.sum[1] = 0;
            wi::AccumulateQuarter(s.sum, word, s.last_key);
            s.acc[0] += s.sum[0];
            s.acc[1] += s.sum[1];
          });
          wi::FinalMerge(w, len, false);
          w.Each([&](int lane, WarpHashLane& s) {
            if (lane == 0) h = s.lo;
          });
        } else {
          w.Each([&](int lane, WarpHashLane&) {
            if (lane == 0) h = hash::portable::Xxh3Hash64(in, len);
          });
        }
        w.Each([&](int lane, WarpHashLane&) {
          if (lane != 0) return;
          leaf_hashes[l] = h;
          if (combine_input != nullptr) {
            for (int b = 0; b < 8; ++b) {
              combine_input[8 * l + b] =
                  static_cast<unsigned char>((h >> (8 * b)) & 0xffU);
            }
          }
        });
        return;
      }
      if (warp != 1 || stats == nullptr) return;
      // The halving tree: w = 32 from shared memory (chain j += chain
      // j + 32, lane j), then w = 16 .. 1 by shuffles (lane j < w adds lane
      // j + w = j ^ w; the other lanes' values are never read).
      w.Each([&](int lane, WarpHashLane& s) {
        s.chain_sum[0] = sh.chain_sum[lane] + sh.chain_sum[lane + kWarpSize];
        s.chain_sq[0] = sh.chain_sq[lane] + sh.chain_sq[lane + kWarpSize];
      });
      for (int m = kWarpSize / 2; m >= 1; m /= 2) {
        w.XorCombine(
            m, [](WarpHashLane& s) -> double& { return s.chain_sum[0]; },
            wi::AddF64());
        w.XorCombine(
            m, [](WarpHashLane& s) -> double& { return s.chain_sq[0]; },
            wi::AddF64());
      }
      w.Each([&](int lane, WarpHashLane& s) {
        if (lane != 0) return;
        hash::portable::StatsPartial p = hash::portable::EmptyStatsPartial();
        p.sum = s.chain_sum[0];
        p.sum_sq = s.chain_sq[0];
        uint64_t max_finite = 0, nan_count = 0, inf_count = 0;
        for (int i = 0; i < kLeafStatsWarps; ++i) {
          max_finite =
              sh.max_finite[i] > max_finite ? sh.max_finite[i] : max_finite;
          nan_count += sh.nan_count[i];
          inf_count += sh.inf_count[i];
        }
        p.max_abs_bits = static_cast<uint32_t>(max_finite);
        p.nan_count = static_cast<int64_t>(nan_count);
        p.inf_count = static_cast<int64_t>(inf_count);
        stats[l] = p;
      });
    });
  }
}

// Whether the block form's leaf kernel also combines a tensor of `leaves`
// leaves whose encoded header is `header_len` bytes (CombineOneLeafInBlock):
// one leaf, and header || leaf hash short enough for XXH3-128's short path
// in one lane (kXxh3ShortMax, rank 28 and below), so no combination kernel
// is launched for it.
LS_HD_INLINE bool CombinesInLeafBlock(uint64_t leaves, uint32_t header_len) {
  return leaves == 1 && header_len + 8 <= kXxh3ShortMax;
}

// After LeafHashAndStatsBlock over a one-leaf tensor, with `input` + the
// header's length holding the leaf hash (LeafHashAndStatsBlock's
// combine_input): CombineLeavesWarp's results, in lane 0 of warp 0 after a
// block barrier (so warp 1's statistics partial is visible): the header
// written at input, *fingerprint = XXH3-128 of header || leaf hash (its
// short path, as CombineLeafHashesWarp takes it), and, when stats is not
// null, *total = stats[0] added to empty totals (as SumLeafStatsWarp adds
// a single partial). REQUIRES: CombinesInLeafBlock(1, header.len).
template <class B>
LS_HD_INLINE void CombineOneLeafInBlock(
    B& block, const TensorHeaderArg& header, unsigned char* input,
    const hash::portable::StatsPartial* stats,
    hash::portable::Hash128* fingerprint, hash::portable::StatsPartial* total) {
  block.Phase([&](auto& w, int warp) {
    if (warp != 0) return;
    w.Each([&](int lane, WarpHashLane&) {
      if (lane != 0) return;
      for (uint32_t i = 0; i < header.len; ++i) input[i] = header.bytes[i];
      *fingerprint = hash::portable::Xxh3Hash128(input, header.len + 8);
      if (stats == nullptr) return;
      hash::portable::StatsPartial t = hash::portable::EmptyStatsPartial();
      hash::portable::AddBlockStats(&t, stats[0]);
      *total = t;
    });
  });
}

// input[0, header.len) = the header's bytes, lane l writing bytes l,
// l + 32, ..., then Sync, so every lane reads all of them afterwards. Call
// on every lane of the warp with uniform arguments.
template <class W>
LS_HD_INLINE void PutHeaderWarp(W& w, const TensorHeaderArg& header,
                                unsigned char* input) {
  w.Each([&](int lane, WarpHashLane&) {
    for (uint32_t i = static_cast<uint32_t>(lane); i < header.len;
         i += kWarpSize) {
      input[i] = header.bytes[i];
    }
  });
  w.Sync();
}

// XXH3-128 of input[0, input_len) (header || leaf hashes: the header put
// there by PutHeaderWarp, the hashes by LeafHashAndStatsWarp),
// warp-cooperative: the accumulation loads
// kCombineBlocksPerLoad KiB at a time; lane 0 writes *fingerprint. Call on
// every lane of the warp with uniform arguments. REQUIRES: input 16-byte
// aligned (device).
template <class W>
LS_HD_INLINE void CombineLeafHashesWarp(W& w, const unsigned char* input,
                                        uint64_t input_len,
                                        hash::portable::Hash128* fingerprint) {
  namespace wi = warp_internal;
  hash::portable::Hash128 h;
  if (input_len <= kXxh3ShortMax) {
    w.Each([&](int lane, WarpHashLane&) {
      if (lane == 0) h = hash::portable::Xxh3Hash128(input, input_len);
    });
  } else {
    w.Each([](int lane, WarpHashLane& s) { wi::LoadKeys(lane, s); });
    wi::LargeAccumulate<kCombineBlocksPerLoad>(w, input, input_len, true,
                                               false);
    wi::FinalMerge(w, input_len, true);
    w.Each([&](int lane, WarpHashLane& s) {
      if (lane != 0) return;
      h.lo = s.lo;
      h.hi = s.hi;
    });
  }
  w.Each([&](int lane, WarpHashLane&) {
    if (lane == 0) *fingerprint = h;
  });
}

// *total = stats[0 .. leaves) added in leaf order (hash::CombineBlockStats'
// sum, CombineLeavesThread's bits): the float64 sum and sum of squares are
// lane 0's two sequential chains, in leaf order by definition; the warp
// only loads for it, kPartialBatch partials at a time (coalesced), one
// batch ahead, and stages each batch's sums in `stage` for lane 0. max |x|
// and the NaN / Inf counts are reduced across the lanes. Call on every
// lane of the warp with uniform arguments; `stage` is the warp's own
// (shared memory on the device).
template <class W>
LS_HD_INLINE void SumLeafStatsWarp(W& w,
                                   const hash::portable::StatsPartial* stats,
                                   uint64_t leaves, PartialStage* stage,
                                   hash::portable::StatsPartial* total) {
  namespace wi = warp_internal;
  w.Each([](int, WarpHashLane& s) {
    s.total_sum = 0.0;
    s.total_sq = 0.0;
    s.max_finite = 0;
    s.nan_count = 0;
    s.inf_count = 0;
  });
  if (leaves > 0) wi::LoadPartials<0>(w, stats, leaves, 0);
  // Two batches per turn, so each buffer is a fixed set of registers.
  for (uint64_t base = 0; base < leaves; base += 2 * wi::kPartialBatch) {
    const uint64_t next = base + wi::kPartialBatch;
    if (next < leaves) wi::LoadPartials<1>(w, stats, leaves, next);
    wi::AddPartialsOf<0>(w, stage, leaves, base);
    if (next >= leaves) break;
    if (next + wi::kPartialBatch < leaves) {
      wi::LoadPartials<0>(w, stats, leaves, next + wi::kPartialBatch);
    }
    wi::AddPartialsOf<1>(w, stage, leaves, next);
  }
  wi::ReduceCounts(w);
  w.Each([&](int lane, WarpHashLane& s) {
    if (lane != 0) return;
    hash::portable::StatsPartial t = hash::portable::EmptyStatsPartial();
    t.sum = s.total_sum;
    t.sum_sq = s.total_sq;
    t.max_abs_bits = static_cast<uint32_t>(s.max_finite);
    t.nan_count = static_cast<int64_t>(s.nan_count);
    t.inf_count = static_cast<int64_t>(s.inf_count);
    *total = t;
  });
}

// The warp form of CombineLeavesThread, after LeafHashAndStatsWarp wrote
// the leaf hashes at input + header.len: the header in front of them
// (PutHeaderWarp), *fingerprint = XXH3-128 of input[0, input_len)
// (CombineLeafHashesWarp) and, when stats is not null, *total = the
// `leaves` partials added in leaf order (SumLeafStatsWarp). Host (emulated
// warps) only: the device kernel runs the two parts on two warps of one
// block (kCombineThreads), the stage in shared memory; here they run one
// after the other on the same warp, with the same bits.
template <class W>
inline void CombineLeavesWarp(W& w, const TensorHeaderArg& header,
                              unsigned char* input, uint64_t input_len,
                              uint64_t leaves,
                              const hash::portable::StatsPartial* stats,
                              hash::portable::Hash128* fingerprint,
                              hash::portable::StatsPartial* total) {
  PutHeaderWarp(w, header, input);
  CombineLeafHashesWarp(w, input, input_len, fingerprint);
  if (stats != nullptr) {
    PartialStage stage;
    SumLeafStatsWarp(w, stats, leaves, &stage, total);
  }
}

}  // namespace lockstep::kernels::cuda

#undef LS_WARP_UNROLL

#endif  // LOCKSTEP_KERNELS_CUDA_LEAF_HASH_H_
