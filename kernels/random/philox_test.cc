#include "kernels/random/philox.h"

#include <cstdint>
#include <cstdio>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/canonical/float_bits.h"

namespace lockstep::canonical {
namespace {

struct Kat {
  int rounds;
  uint32_t ctr[4];
  uint32_t key[2];
  uint32_t expected[4];
};

// Random123 tests/kat_vectors (github.com/DEShawResearch/random123), the
// "philox4x32 7" and "philox4x32 10" lines: counter[4] key[2] -> output[4].
constexpr Kat kKats[] = {
    {10,
     {0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {10,
     {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {10,
     {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    {7,
     {0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}},
    {7,
     {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}},
    {7,
     {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}},
};

TEST(PhiloxTest, KnownAnswerVectors) {
  for (const Kat& kat : kKats) {
    PhiloxBlock ctr;
    PhiloxKey key;
    for (int i = 0; i < 4; ++i) ctr.v[i] = kat.ctr[i];
    key.k[0] = kat.key[0];
    key.k[1] = kat.key[1];
    const PhiloxBlock out = kat.rounds == 10
                                ? Philox4x32_10(ctr, key)
                                : Philox4x32R(kat.rounds, ctr, key);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(out.v[i], kat.expected[i])
          << "rounds " << kat.rounds << " ctr0 " << std::hex << kat.ctr[0]
          << " word " << i << ": got 0x" << out.v[i] << " want 0x"
          << kat.expected[i];
    }
  }
}

TEST(PhiloxTest, KeyAndCounterMapping) {
  const uint64_t seed = 0x299f31d0a4093822ull;
  const uint64_t stream = 0x0370734413198a2eull;
  // index / 4 = 0x05a308d3243f6a88 (index is 64-bit, so the block number
  // is below 2^62 and hi32(index / 4) below 2^30).
  const uint64_t block = 0x05a308d3243f6a88ull;
  const PhiloxKey key = PhiloxKeyFor(seed);
  EXPECT_EQ(key.k[0], 0xa4093822u);
  EXPECT_EQ(key.k[1], 0x299f31d0u);
  for (uint64_t lane = 0; lane < 4; ++lane) {
    const PhiloxBlock c = PhiloxCounterFor(stream, block * 4 + lane);
    EXPECT_EQ(c.v[0], 0x243f6a88u);
    EXPECT_EQ(c.v[1], 0x05a308d3u);
    EXPECT_EQ(c.v[2], 0x13198a2eu);
    EXPECT_EQ(c.v[3], 0x03707344u);
  }
  const PhiloxBlock ctr = {
      {0x243f6a88u, 0x05a308d3u, 0x13198a2eu, 0x03707344u}};
  const PhiloxKey k = {{0xa4093822u, 0x299f31d0u}};
  const PhiloxBlock out = Philox4x32_10(ctr, k);
  for (uint64_t lane = 0; lane < 4; ++lane) {
    EXPECT_EQ(PhiloxBits(seed, stream, block * 4 + lane), out.v[lane])
        << "lane " << lane;
  }
}

TEST(PhiloxTest, AllZeroSeedStreamIndexMatchesZeroKat) {
  EXPECT_EQ(PhiloxBits(0, 0, 0), 0x6627e8d5u);
  EXPECT_EQ(PhiloxBits(0, 0, 1), 0xe169c58du);
  EXPECT_EQ(PhiloxBits(0, 0, 2), 0xbc57ac4cu);
  EXPECT_EQ(PhiloxBits(0, 0, 3), 0x9b00dbd8u);
}

// Each element depends only on (seed, stream, index): filling in any order
// or in pieces gives the same bits as filling forwards.
TEST(PhiloxTest, IndexIndependenceAndDeterminism) {
  constexpr int kN = 4099;
  std::vector<uint32_t> forward(kN), backward(kN), strided(kN);
  for (int i = 0; i < kN; ++i) forward[i] = PhiloxBits(42, 7, i);
  for (int i = kN - 1; i >= 0; --i) backward[i] = PhiloxBits(42, 7, i);
  for (int start = 0; start < 13; ++start) {
    for (int i = start; i < kN; i += 13) strided[i] = PhiloxBits(42, 7, i);
  }
  for (int i = 0; i < kN; ++i) {
    ASSERT_EQ(forward[i], backward[i]) << "first difference at index " << i;
    ASSERT_EQ(forward[i], strided[i]) << "first difference at index " << i;
  }
}

TEST(PhiloxTest, SeedsStreamsAndIndicesDiffer) {
  std::set<uint32_t> seen;
  for (uint64_t seed : {0ull, 1ull, 1ull << 32}) {
    for (uint64_t stream : {0ull, 1ull, 1ull << 32}) {
      for (uint64_t index : {0ull, 1ull, 4ull, 1ull << 34}) {
        seen.insert(PhiloxBits(seed, stream, index));
      }
    }
  }
  // 36 draws of 32 bits: a collision would be a mapping bug.
  EXPECT_EQ(seen.size(), 36u);
}

TEST(PhiloxTest, Uniform01IsTop24BitsExactly) {
  EXPECT_EQ(BitsToUniform01(0u), 0.0f);
  EXPECT_EQ(BitsToUniform01(0xFFFFFFFFu), 1.0f - 0x1.0p-24f);
  EXPECT_EQ(BitsToUniform01(0x80000000u), 0.5f);
  EXPECT_EQ(BitsToUniform01(0x000000FFu), 0.0f);
  EXPECT_EQ(BitsToUniform01(0x00000100u), 0x1.0p-24f);
  for (uint32_t i = 0; i < 100000; ++i) {
    const uint32_t bits = PhiloxBits(3, 9, i);
    const float u = BitsToUniform01(bits);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    ASSERT_EQ(static_cast<uint32_t>(u * 0x1.0p24f), bits >> 8) << i;
  }
}

TEST(PhiloxTest, UniformRangeAndRoundingSequence) {
  for (uint32_t i = 0; i < 100000; ++i) {
    const uint32_t bits = PhiloxBits(11, 2, i);
    const float v = BitsToUniform(bits, -1.0f, 1.0f);
    ASSERT_GE(v, -1.0f);
    ASSERT_LT(v, 1.0f);
    // On [-1, 1) every step is exact: v = -1 + 2 * (bits >> 8) * 2^-24.
    ASSERT_EQ(v, -1.0f + static_cast<float>(bits >> 8) * 0x1.0p-23f);
    const float w = BitsToUniform(bits, 0.25f, 3.0f);
    const float u = BitsToUniform01(bits);
    const float d = 3.0f - 0.25f;
    const float p = d * u;
    ASSERT_EQ(LsFloatToBits(w), LsFloatToBits(0.25f + p)) << i;
  }
}

TEST(PhiloxTest, UniformNeverReturnsUpperBound) {
  // One-ulp interval: a + (b - a) * u rounds to b for u >= 1/2.
  const float a = 1.0f;
  const float b = 0x1.000002p0f;
  EXPECT_EQ(BitsToUniform(0xFFFFFFFFu, a, b), a);
  EXPECT_EQ(BitsToUniform(0u, a, b), a);
  EXPECT_EQ(BitsToUniform(0xFFFFFFFFu, -b, -a), -b);
  EXPECT_EQ(LsFloatToBits(BitsToUniform(0xFFFFFFFFu, -0x1.0p-149f, 0.0f)),
            LsFloatToBits(-0x1.0p-149f));
  for (uint32_t i = 0; i < 10000; ++i) {
    const float v = BitsToUniform(PhiloxBits(5, 5, i), a, b);
    ASSERT_TRUE(v == a) << i;
  }
}

TEST(PhiloxTest, UniformIsRoughlyUniform) {
  constexpr int kBins = 16;
  constexpr int kN = 1 << 18;
  int count[kBins] = {};
  for (int i = 0; i < kN; ++i) {
    ++count[static_cast<int>(PhiloxUniform01(1234, 0, i) * kBins)];
  }
  for (int b = 0; b < kBins; ++b) {
    // Expected 16384 per bin, sd ~ 124: 6 sd bounds.
    EXPECT_NEAR(count[b], kN / kBins, 750) << "bin " << b;
  }
}

}  // namespace
}  // namespace lockstep::canonical
