// The per-leaf kernels of every instruction set this CPU has, bit for bit
// against libxxhash's XXH3_64bits and the statistics reference
// (stats_portable.h). Tested here, below the public API, because the
// public statistics only show sqrt(sum_sq) and totals over blocks, which can
// hide a lane-order mistake; a leaf's sum_sq bits cannot.
#include "kernels/hash/leaf_kernels.h"

#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/hash/fingerprint.h"
#include "kernels/hash/stats_portable.h"

namespace lockstep::hash::internal {
namespace {

// The kernel tables this build and CPU can run.
std::vector<const LeafKernels*> AvailableKernels() {
  std::vector<const LeafKernels*> k = {&BaselineLeafKernels()};
  if (IsaAvailable(HashIsa::kAvx2)) k.push_back(Avx2LeafKernels());
  if (IsaAvailable(HashIsa::kAvx512)) k.push_back(Avx512LeafKernels());
  if (IsaAvailable(HashIsa::kAvx512Stream)) {
    k.push_back(Avx512StreamLeafKernels());
  }
  return k;
}

// `bytes` bytes whose first is 64-byte aligned (the avx512-stream kernels
// read such leaves by non-temporal loads, others as avx512 does).
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t bytes) : storage_(bytes + 63) {}
  uint8_t* data() {
    const auto p = reinterpret_cast<uintptr_t>(storage_.data());
    return storage_.data() + ((64 - p % 64) % 64);
  }

 private:
  std::vector<uint8_t> storage_;
};

uint64_t Bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof(u));
  return u;
}

float FloatFromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// "" when equal, else the first differing field.
std::string StatsDiff(const portable::StatsPartial& want,
                      const LeafStats& got) {
  if (Bits(want.sum) != Bits(got.sum)) {
    return absl::StrFormat("sum: want %a got %a", want.sum, got.sum);
  }
  if (Bits(want.sum_sq) != Bits(got.sum_sq)) {
    return absl::StrFormat("sum_sq: want %a got %a", want.sum_sq, got.sum_sq);
  }
  if (want.max_abs_bits != got.max_abs_bits) {
    return absl::StrFormat("max_abs: want %08x got %08x", want.max_abs_bits,
                           got.max_abs_bits);
  }
  if (want.nan_count != got.nan_count || want.inf_count != got.inf_count) {
    return absl::StrFormat("counts: want nan %d inf %d, got nan %d inf %d",
                           want.nan_count, want.inf_count, got.nan_count,
                           got.inf_count);
  }
  return "";
}

// Finite floats of similar magnitude (so that the float64 sums of their
// squares round, and an element added to the wrong lane or in the wrong
// order shows in the bits) with the finite special values: ±0, subnormals
// of either sign, the smallest normal value. With `nonfinite`, also NaN
// (quiet and signalling payloads, either sign) and ±Inf.
std::vector<float> TestFloats(size_t n, uint64_t seed, bool nonfinite) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& f : x) {
    f = normal(rng);
    const uint32_t sign = (rng() & 1) ? 0x80000000U : 0U;
    switch (rng() % 48) {
      case 0:
        f = FloatFromBits(sign);
        break;
      case 1:
        f = FloatFromBits(sign | (1 + static_cast<uint32_t>(rng() % 0x7fffff)));
        break;
      case 2:
        f = FloatFromBits(sign | 0x00800000U);
        break;
      case 3:
        if (nonfinite) {
          f = FloatFromBits(sign | 0x7f800001U |
                            static_cast<uint32_t>(rng() % 0x7fffff));
        }
        break;
      case 4:
        if (nonfinite) f = FloatFromBits(sign | 0x7f800000U);
        break;
      default:
        break;
    }
  }
  return x;
}

// Byte lengths that reach every branch of XXH3-64: each short-input class
// (1..240 bytes), then around every stripe (64 bytes) and block (1024
// bytes) boundary of a leaf, up to the full 64 KiB leaf.
std::vector<size_t> ByteLengths() {
  std::vector<size_t> sizes;
  for (size_t n = 1; n <= 1100; ++n) sizes.push_back(n);
  for (size_t block = 2; block <= 64; ++block) {
    for (int d : {-65, -64, -63, -17, -4, -1, 0, 1, 4, 17, 63, 64, 65}) {
      const size_t n = block * 1024 + d;
      if (n <= kLeafBytes) sizes.push_back(n);
    }
  }
  return sizes;
}

// Float counts around every stripe (16 floats), row (64) and block (256)
// boundary of a leaf, up to the whole leaf (16384).
std::vector<size_t> FloatCounts() {
  std::vector<size_t> counts;
  for (size_t n = 0; n <= 600; ++n) counts.push_back(n);
  for (size_t k = 3; k <= 64; ++k) {
    for (int d = -20; d <= 20; ++d) {
      if (k * 256 + d <= 16384) counts.push_back(k * 256 + d);
    }
  }
  return counts;
}

TEST(LeafKernelsTest, Hash64EqualsLibxxhashOnEveryLengthAndAlignment) {
  std::mt19937_64 rng(3);
  AlignedBuffer buffer(kLeafBytes + 64);
  uint8_t* const bytes = buffer.data();
  for (size_t i = 0; i < kLeafBytes + 64; ++i) {
    bytes[i] = static_cast<uint8_t>(rng() >> 56);
  }
  for (const LeafKernels* k : AvailableKernels()) {
    for (size_t len : ByteLengths()) {
      // 0 and 64: 64-byte aligned.
      for (size_t start : {0, 1, 7, 36, 64}) {
        // Every start on lengths up to 4 KiB and around block ends.
        if (start != 0 && len > 4096 && len % 1024 > 128) continue;
        const uint8_t* p = bytes + start;
        ASSERT_EQ(k->hash64(p, len), XXH3_64bits(p, len))
            << k->name << " len " << len << " start " << start;
      }
    }
  }
}

// hash_and_stats: the AVX-512 kernel computes both from the same loads.
TEST(LeafKernelsTest, HashAndStatsEqualLibxxhashAndReference) {
  for (bool nonfinite : {false, true}) {
    const std::vector<float> data =
        TestFloats(16384, 11 + nonfinite, nonfinite);
    AlignedBuffer buffer(4 * (16384 + 16));
    float* const shifted = reinterpret_cast<float*>(buffer.data());
    for (size_t n : FloatCounts()) {
      const uint64_t want_hash = XXH3_64bits(data.data(), 4 * n);
      const portable::StatsPartial want =
          portable::StatsOfBlock(data.data(), static_cast<int64_t>(n));
      // In floats: 4-byte aligned; 0 and 16 also 64-byte aligned.
      for (size_t start : {0, 1, 3, 15, 16}) {
        if (start != 0 && n > 1024 && n % 256 > 20 && n % 256 < 236) continue;
        std::memcpy(shifted + start, data.data(), 4 * n);
        const float* x = shifted + start;
        for (const LeafKernels* k : AvailableKernels()) {
          const LeafHashStats got = k->hash_and_stats(x, n, nullptr, 0);
          ASSERT_EQ(got.hash, want_hash) << k->name << " n " << n << " start "
                                         << start << " nonfinite " << nonfinite;
          ASSERT_EQ(StatsDiff(want, got.stats), "")
              << k->name << " n " << n << " start " << start << " nonfinite "
              << nonfinite;
          // The statistics alone give the same.
          ASSERT_EQ(StatsDiff(want, k->block_stats(x, n, nullptr, 0)), "")
              << k->name << " n " << n << " start " << start;
        }
      }
    }
  }
}

// One NaN, Inf or largest finite value wherever it lies: in a full row, in
// the last row's leftover stripes, in the last (whole or partial) stripe.
// NaN and Inf send the statistics to the masking loop; the largest finite
// values stay on the vector path.
TEST(LeafKernelsTest, HashAndStatsWithOneExtremeValue) {
  for (size_t n :
       {size_t{16384}, size_t{16384 - 4}, size_t{1003}, size_t{61}}) {
    const std::vector<float> clean = TestFloats(n, 90 + n, false);
    for (size_t at :
         {size_t{0}, size_t{15}, size_t{16}, n - 33, n - 17, n - 16, n - 1}) {
      for (uint32_t v : {0x7fc00000U, 0xff800001U, 0x7f800000U, 0xff800000U,
                         0x7f7fffffU, 0xff7fffffU}) {
        std::vector<float> x = clean;
        x[at] = FloatFromBits(v);
        const portable::StatsPartial want =
            portable::StatsOfBlock(x.data(), static_cast<int64_t>(n));
        for (const LeafKernels* k : AvailableKernels()) {
          const LeafHashStats got = k->hash_and_stats(x.data(), n, nullptr, 0);
          EXPECT_EQ(got.hash, XXH3_64bits(x.data(), 4 * n))
              << k->name << " n " << n << " at " << at;
          EXPECT_EQ(StatsDiff(want, got.stats), "")
              << k->name << " n " << n << " at " << at << " value "
              << absl::StrFormat("%08x", v);
        }
      }
    }
  }
}

// The prefetch hint changes nothing, whatever it points at.
TEST(LeafKernelsTest, PrefetchIsOnlyAHint) {
  const std::vector<float> x = TestFloats(16384, 5, false);
  const std::vector<float> next = TestFloats(16384, 6, false);
  for (const LeafKernels* k : AvailableKernels()) {
    const LeafHashStats a = k->hash_and_stats(x.data(), x.size(), nullptr, 0);
    const LeafHashStats b =
        k->hash_and_stats(x.data(), x.size(), next.data(), 4 * next.size());
    EXPECT_EQ(a.hash, b.hash) << k->name;
    EXPECT_EQ(Bits(a.stats.sum_sq), Bits(b.stats.sum_sq)) << k->name;
    EXPECT_EQ(Bits(a.stats.sum), Bits(b.stats.sum)) << k->name;
  }
}

}  // namespace
}  // namespace lockstep::hash::internal
