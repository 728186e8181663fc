// Per-thread body of the device fingerprint kernel.
//
// A tensor's fingerprint (kernels/hash/SPEC.md) hashes its bytes in 64 KiB
// leaves with XXH3-64 and combines the leaf hashes on the host with
// hash::CombineLeafHashes. On the device, leaf l is hashed by one thread:
// LeafHashThread walks the leaves grid-stride and writes 8 bytes per leaf,
// so only NumLeaves(size) * 8 bytes cross the bus. The hash is
// xxh3_portable.h's Xxh3Hash64, compiled from the same source for the host
// (tests, emulation) and the device.
//
// Thread-safety: pure function; threads write disjoint leaf hashes.
#ifndef LOCKSTEP_KERNELS_CUDA_LEAF_HASH_H_
#define LOCKSTEP_KERNELS_CUDA_LEAF_HASH_H_

#include <cstdint>

#include "kernels/canonical/hd.h"
#include "kernels/hash/stats_portable.h"
#include "kernels/hash/xxh3_portable.h"

namespace lockstep::kernels::cuda {

// Must equal hash::kLeafBytes (checked by leaf_hash_test and at the
// device fingerprint's call site).
inline constexpr uint64_t kDeviceLeafBytes = 64 * 1024;

LS_HD_INLINE uint64_t NumDeviceLeaves(uint64_t size) {
  return (size + kDeviceLeafBytes - 1) / kDeviceLeafBytes;
}

// leaf_hashes[l] = XXH3-64 of bytes [l * 64 KiB, min(size, (l + 1) * 64 KiB))
// for the leaves l = thread, thread + num_threads, ...
LS_HD_INLINE void LeafHashThread(const unsigned char* bytes, uint64_t size,
                                 uint64_t* leaf_hashes, int64_t thread,
                                 int64_t num_threads) {
  const int64_t leaves = static_cast<int64_t>(NumDeviceLeaves(size));
  for (int64_t l = thread; l < leaves; l += num_threads) {
    const uint64_t begin = static_cast<uint64_t>(l) * kDeviceLeafBytes;
    const uint64_t rest = size - begin;
    const uint64_t len = rest < kDeviceLeafBytes ? rest : kDeviceLeafBytes;
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
    const uint64_t rest = size - begin;
    const uint64_t len = rest < kDeviceLeafBytes ? rest : kDeviceLeafBytes;
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

}  // namespace lockstep::kernels::cuda

#endif  // LOCKSTEP_KERNELS_CUDA_LEAF_HASH_H_
