#include "kernels/canonical/gather.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/canonical/reduce.h"
#include "kernels/testing/float_test_util.h"

namespace lockstep::canonical {
namespace {

using ::lockstep::testing::BitsEqual;
using ::lockstep::testing::RandomFloats;

uint32_t Bits(float f) { return ::lockstep::testing::FloatBits(f); }

// Lengths around every chunk boundary and several tree shapes (1, 2, 3, 4, 5
// and 17 chunks).
const int64_t kLengths[] = {0,   1,   2,   255,  256,  257,  511,
                            512, 513, 768, 1000, 1024, 1025, 4097};

TEST(GatherChainTest, FmaStreamEqualsCanonicalDot) {
  for (const int64_t n : kLengths) {
    const std::vector<float> a = RandomFloats(n, 1 + n);
    const std::vector<float> b = RandomFloats(n, 1000 + n);
    GatherChain chain;
    for (int64_t i = 0; i < n; ++i) chain.Fma(a[i], b[i]);
    EXPECT_EQ(chain.count(), n);
    const std::vector<float> got = {chain.Finish()};
    const std::vector<float> want = {
        CanonicalDot(a.data(), 1, b.data(), 1, n)};
    EXPECT_TRUE(BitsEqual(got, want)) << "n = " << n;
  }
}

TEST(GatherChainTest, AddStreamEqualsCanonicalSum) {
  for (const int64_t n : kLengths) {
    const std::vector<float> x = RandomFloats(n, 7 + n, -3.0f, 5.0f);
    GatherChain chain;
    for (int64_t i = 0; i < n; ++i) chain.Add(x[i]);
    const std::vector<float> got = {chain.Finish()};
    const std::vector<float> want = {CanonicalSum(x.data(), n, 1)};
    EXPECT_TRUE(BitsEqual(got, want)) << "n = " << n;
  }
}

// The grouping really is chunked: 1.0 followed by 511 terms of 2^-25. One
// long chain would round every tiny term away (1 + 2^-25 -> 1). Canonically
// chunk 1 = 1.0 (its 255 tiny terms do round away) and chunk 2 = 256 * 2^-25
// = 2^-17 exactly, so the result is 1 + 2^-17.
TEST(GatherChainTest, ChunkBoundaryChangesGrouping) {
  GatherChain chain;
  chain.Add(1.0f);
  for (int i = 1; i < 512; ++i) chain.Add(0x1p-25f);
  EXPECT_EQ(Bits(chain.Finish()), Bits(1.0f + 0x1p-17f));

  float sequential = 0.0f;
  sequential = sequential + 1.0f;
  for (int i = 1; i < 512; ++i) sequential = sequential + 0x1p-25f;
  EXPECT_EQ(Bits(sequential), Bits(1.0f));
}

TEST(GatherChainTest, EmptyIsPositiveZero) {
  GatherChain chain;
  EXPECT_EQ(Bits(chain.Finish()), 0u);
}

}  // namespace
}  // namespace lockstep::canonical
