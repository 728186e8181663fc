#include "kernels/random/init.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/canonical/float_bits.h"
#include "kernels/random/philox.h"

namespace lockstep::canonical {
namespace {

// Compares bit patterns; reports the first differing index in hex.
void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b,
                    size_t n) {
  ASSERT_GE(a.size(), n);
  ASSERT_GE(b.size(), n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(LsFloatToBits(a[i]), LsFloatToBits(b[i]))
        << "first difference at index " << i << std::hex << ": 0x"
        << LsFloatToBits(a[i]) << " vs 0x" << LsFloatToBits(b[i]);
  }
}

TEST(InitTest, GlorotLimitRoundingSequence) {
  // sqrt(6 / 8) written step by step in float.
  EXPECT_EQ(LsFloatToBits(GlorotUniformLimit(3, 5)),
            LsFloatToBits(std::sqrt(6.0f / 8.0f)));
  EXPECT_EQ(LsFloatToBits(GlorotUniformLimit(784, 128)),
            LsFloatToBits(std::sqrt(6.0f / 912.0f)));
  // fan_in + fan_out = 2^24 + 1 converts (round to nearest even) to 2^24.
  EXPECT_EQ(LsFloatToBits(GlorotUniformLimit(16777216, 1)),
            LsFloatToBits(std::sqrt(6.0f / 16777216.0f)));
  EXPECT_EQ(GlorotUniformLimit(1, 5), 1.0f);
}

TEST(InitTest, HeLimitRoundingSequence) {
  EXPECT_EQ(LsFloatToBits(HeUniformLimit(6)), LsFloatToBits(1.0f));
  EXPECT_EQ(LsFloatToBits(HeUniformLimit(3)), LsFloatToBits(std::sqrt(2.0f)));
  EXPECT_EQ(LsFloatToBits(HeUniformLimit(300)),
            LsFloatToBits(std::sqrt(6.0f / 300.0f)));
}

TEST(InitTest, GlorotValuesFollowTheWrittenFormula) {
  constexpr int64_t kN = 5000;
  std::vector<float> w(kN);
  ASSERT_TRUE(
      GlorotUniform(77, kStreamParameterBase + 3, 300, 100, w.data(), kN).ok());
  const float limit = std::sqrt(6.0f / 400.0f);
  for (int64_t i = 0; i < kN; ++i) {
    const uint32_t bits = PhiloxBits(77, kStreamParameterBase + 3, i);
    const float u = static_cast<float>(bits >> 8) * 0x1.0p-24f;
    const float d = limit - (-limit);
    const float p = d * u;
    const float expected = -limit + p;
    ASSERT_EQ(LsFloatToBits(w[i]), LsFloatToBits(expected))
        << "index " << i << std::hex << " got 0x" << LsFloatToBits(w[i])
        << " want 0x" << LsFloatToBits(expected);
    ASSERT_GE(w[i], -limit);
    ASSERT_LT(w[i], limit);
  }
}

TEST(InitTest, HeValuesInRangeAndCentred) {
  constexpr int64_t kN = 1 << 16;
  std::vector<float> w(kN);
  ASSERT_TRUE(HeUniform(5, kStreamParameterBase, 64, w.data(), kN).ok());
  const float limit = HeUniformLimit(64);
  double sum = 0.0;
  float lo = limit, hi = -limit;
  for (float v : w) {
    ASSERT_GE(v, -limit);
    ASSERT_LT(v, limit);
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  // Mean of 65536 uniforms on [-L, L): sd = L / sqrt(3 * 65536) ~ 0.0023 L.
  EXPECT_LT(std::fabs(sum / kN), 0.015 * limit);
  EXPECT_LT(lo, -0.99f * limit);
  EXPECT_GT(hi, 0.99f * limit);
}

TEST(InitTest, ReproducibleAndPrefixStable) {
  std::vector<float> a(1000), b(1000), c(10);
  ASSERT_TRUE(GlorotUniform(9, 1, 10, 20, a.data(), 1000).ok());
  ASSERT_TRUE(GlorotUniform(9, 1, 10, 20, b.data(), 1000).ok());
  ASSERT_TRUE(GlorotUniform(9, 1, 10, 20, c.data(), 10).ok());
  ExpectSameBits(a, b, 1000);
  ExpectSameBits(a, c, 10);
}

TEST(InitTest, SeedsAndStreamsDiffer) {
  constexpr int64_t kN = 256;
  std::vector<float> base(kN), other_seed(kN), other_stream(kN);
  ASSERT_TRUE(HeUniform(1, 10, 8, base.data(), kN).ok());
  ASSERT_TRUE(HeUniform(2, 10, 8, other_seed.data(), kN).ok());
  ASSERT_TRUE(HeUniform(1, 11, 8, other_stream.data(), kN).ok());
  int same_seed = 0, same_stream = 0;
  for (int64_t i = 0; i < kN; ++i) {
    same_seed += base[i] == other_seed[i];
    same_stream += base[i] == other_stream[i];
  }
  EXPECT_LT(same_seed, 3);
  EXPECT_LT(same_stream, 3);
}

TEST(InitTest, FillUniformArbitraryInterval) {
  constexpr int64_t kN = 4096;
  std::vector<float> v(kN);
  ASSERT_TRUE(FillUniform(3, 4, 0.25f, 3.0f, v.data(), kN).ok());
  for (int64_t i = 0; i < kN; ++i) {
    const float u = PhiloxUniform01(3, 4, i);
    const float expected = 0.25f + (3.0f - 0.25f) * u;
    ASSERT_EQ(LsFloatToBits(v[i]), LsFloatToBits(expected)) << i;
    ASSERT_GE(v[i], 0.25f);
    ASSERT_LT(v[i], 3.0f);
  }
}

TEST(InitTest, ZerosAndConstant) {
  std::vector<float> v(100, 7.0f);
  ASSERT_TRUE(FillZeros(v.data(), 100).ok());
  for (float x : v) ASSERT_EQ(LsFloatToBits(x), 0u);  // +0, not -0.
  ASSERT_TRUE(FillConstant(-0.0f, v.data(), 100).ok());
  for (float x : v) ASSERT_EQ(LsFloatToBits(x), 0x80000000u);
  ASSERT_TRUE(FillConstant(0.125f, v.data(), 50).ok());
  for (int i = 0; i < 50; ++i) ASSERT_EQ(v[i], 0.125f);
  for (int i = 50; i < 100; ++i) ASSERT_EQ(LsFloatToBits(v[i]), 0x80000000u);
}

TEST(InitTest, InvalidArgumentsLeaveBufferUntouched) {
  std::vector<float> v(4, 42.0f);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(GlorotUniform(1, 1, 0, 5, v.data(), 4).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GlorotUniform(1, 1, 5, -1, v.data(), 4).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HeUniform(1, 1, 0, v.data(), 4).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HeUniform(1, 1, 4, v.data(), -1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HeUniform(1, 1, 4, nullptr, 4).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FillUniform(1, 1, 1.0f, 1.0f, v.data(), 4).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FillUniform(1, 1, -inf, 1.0f, v.data(), 4).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FillUniform(1, 1, -3e38f, 3e38f, v.data(), 4).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FillZeros(nullptr, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FillConstant(1.0f, v.data(), -2).code(),
            absl::StatusCode::kInvalidArgument);
  for (float x : v) EXPECT_EQ(x, 42.0f);
  EXPECT_TRUE(HeUniform(1, 1, 4, nullptr, 0).ok());
}

}  // namespace
}  // namespace lockstep::canonical
