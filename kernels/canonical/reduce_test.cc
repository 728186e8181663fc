// Tests of the canonical reduction rule (reduce.h) against a direct,
// recursive transcription of the spec:
//
//   partials p[j] = sequential chain over chunk j (256 terms) from +0.0f
//   T(p, 1) = p[0];  T(p, m) = T(p, h) + T(p + h, m - h), h = largest power
//   of two strictly below m;  n == 0 gives +0.0f.
//
// Every comparison is on bit patterns.
#include "kernels/canonical/reduce.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace lockstep::canonical {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

std::string Hex(float f) {
  return absl::StrFormat("0x%08x (%.9g)", Bits(f), f);
}

// ---- Spec transcription (deliberately independent of reduce.h) ----------

float SpecTree(const float* p, int64_t m) {
  if (m == 1) return p[0];
  int64_t h = 1;
  while (h * 2 < m) h *= 2;
  return SpecTree(p, h) + SpecTree(p + h, m - h);
}

float SpecSum(const std::vector<float>& x, int64_t stride) {
  const int64_t n = static_cast<int64_t>((x.size() + stride - 1) / stride);
  if (n == 0) return 0.0f;
  std::vector<float> partials;
  for (int64_t begin = 0; begin < n; begin += 256) {
    float acc = 0.0f;
    for (int64_t i = begin; i < n && i < begin + 256; ++i) {
      acc = acc + x[i * stride];
    }
    partials.push_back(acc);
  }
  return SpecTree(partials.data(), static_cast<int64_t>(partials.size()));
}

float SpecDot(const std::vector<float>& a, const std::vector<float>& b) {
  const int64_t n = static_cast<int64_t>(a.size());
  if (n == 0) return 0.0f;
  std::vector<float> partials;
  for (int64_t begin = 0; begin < n; begin += 256) {
    float acc = 0.0f;
    for (int64_t i = begin; i < n && i < begin + 256; ++i) {
      acc = std::fma(a[i], b[i], acc);
    }
    partials.push_back(acc);
  }
  return SpecTree(partials.data(), static_cast<int64_t>(partials.size()));
}

// Values spread over many binades and both signs, so that a different
// grouping of the additions almost surely changes the rounded result.
std::vector<float> WideRandom(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-20, 20);
  std::vector<float> v(n);
  for (auto& x : v) x = std::ldexp(mant(gen), expo(gen));
  return v;
}

const int64_t kSizes[] = {0,   1,   2,    255,  256,  257,  511,
                          512, 513, 1000, 4096, 5000, 65537};

TEST(ReduceTest, CanonicalSumMatchesSpecBitForBit) {
  for (int64_t n : kSizes) {
    const std::vector<float> x = WideRandom(n, 1000 + n);
    const float got = CanonicalSum(x.data(), n, 1);
    const float want = SpecSum(x, 1);
    EXPECT_EQ(Bits(got), Bits(want))
        << "n=" << n << " got " << Hex(got) << " want " << Hex(want);
  }
}

TEST(ReduceTest, StridedCanonicalSumMatchesSpec) {
  for (int64_t n : kSizes) {
    const int64_t stride = 3;
    std::vector<float> x = WideRandom(n * stride, 7 + n);
    const float got = CanonicalSum(x.data(), n, stride);
    const float want = SpecSum(x, stride);
    EXPECT_EQ(Bits(got), Bits(want))
        << "n=" << n << " got " << Hex(got) << " want " << Hex(want);
  }
}

TEST(ReduceTest, CanonicalDotMatchesSpecBitForBit) {
  for (int64_t n : kSizes) {
    const std::vector<float> a = WideRandom(n, 2000 + n);
    const std::vector<float> b = WideRandom(n, 3000 + n);
    const float got = CanonicalDot(a.data(), 1, b.data(), 1, n);
    const float want = SpecDot(a, b);
    EXPECT_EQ(Bits(got), Bits(want))
        << "n=" << n << " got " << Hex(got) << " want " << Hex(want);
  }
}

TEST(ReduceTest, StridedDotMatchesSpec) {
  // a read with stride 2, b with stride 5 (a column of a row-major matrix).
  for (int64_t n : {1, 300, 1000}) {
    const std::vector<float> a_store = WideRandom(2 * n, 11);
    const std::vector<float> b_store = WideRandom(5 * n, 12);
    std::vector<float> a(n), b(n);
    for (int64_t i = 0; i < n; ++i) {
      a[i] = a_store[2 * i];
      b[i] = b_store[5 * i];
    }
    const float got = CanonicalDot(a_store.data(), 2, b_store.data(), 5, n);
    EXPECT_EQ(Bits(got), Bits(SpecDot(a, b))) << "n=" << n;
  }
}

TEST(ReduceTest, TreeAccumulatorAndTreeCombineMatchRecursiveTree) {
  // Every partial count from 1 to 300 (covers all ragged shapes up to 2^8+).
  for (int64_t m = 1; m <= 300; ++m) {
    const std::vector<float> p = WideRandom(m, 5000 + m);
    TreeAccumulator t;
    for (float v : p) t.Push(v);
    const float want = SpecTree(p.data(), m);
    EXPECT_EQ(Bits(t.Result()), Bits(want)) << "m=" << m;
    EXPECT_EQ(Bits(TreeCombine(p.data(), m)), Bits(want)) << "m=" << m;
  }
  TreeAccumulator empty;
  EXPECT_EQ(Bits(empty.Result()), 0u);
}

TEST(ReduceTest, TreeShapeForSmallCounts) {
  // The grouping the header documents, checked with values where each
  // grouping gives a different result: 2^24 absorbs a lone 1.0f (ties to
  // even) but not a 2.0f.
  const float big = 16777216.0f;  // 2^24
  // m = 3: (p0 + p1) + p2.
  {
    const float p[] = {big, 1.0f, 1.0f};
    EXPECT_EQ(TreeCombine(p, 3), big);  // (2^24 + 1) + 1 = 2^24 + 1 = 2^24
  }
  // m = 4: (p0 + p1) + (p2 + p3).
  {
    const float p[] = {big, 0.0f, 1.0f, 1.0f};
    EXPECT_EQ(TreeCombine(p, 4), big + 2.0f);
  }
  // m = 5: ((p0 + p1) + (p2 + p3)) + p4.
  {
    const float p[] = {1.0f, 1.0f, big, 0.0f, 1.0f};
    // (2 + 2^24) + 1: 2^24 + 3 rounds to even 2^24 + 4.
    EXPECT_EQ(TreeCombine(p, 5), big + 4.0f);
  }
}

TEST(ReduceTest, GroupingDiffersFromNaiveLeftToRight) {
  // Chunk 0 holds 2^24 then zeros; chunk 1 holds 1, 1, zeros. Left to
  // right, each 1 is absorbed by 2^24 (RNE ties to even); the canonical
  // rule adds 1 + 1 = 2 in chunk 1 first, and 2^24 + 2 is exact.
  std::vector<float> x(512, 0.0f);
  x[0] = 16777216.0f;
  x[256] = 1.0f;
  x[257] = 1.0f;
  float naive = 0.0f;
  for (float v : x) naive = naive + v;
  const float canonical = CanonicalSum(x.data(), 512, 1);
  EXPECT_EQ(naive, 16777216.0f);
  EXPECT_EQ(canonical, 16777218.0f);
  EXPECT_NE(Bits(naive), Bits(canonical));
}

TEST(ReduceTest, ChainsStartFromPositiveZero) {
  // +0.0f + -0.0f = +0.0f, so a sum of negative zeros is +0.0f.
  const float x[] = {-0.0f, -0.0f};
  EXPECT_EQ(Bits(CanonicalSum(x, 2, 1)), 0x00000000u);
  EXPECT_EQ(Bits(CanonicalSum(x, 0, 1)), 0x00000000u);
  const float one[] = {1.0f};
  const float negzero[] = {-0.0f};
  EXPECT_EQ(Bits(CanonicalDot(one, 1, negzero, 1, 1)), 0x00000000u);
}

TEST(ReduceTest, DotUsesOneRoundingPerTerm) {
  // (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 is not a float; with the running sum
  // at -1 the fma keeps the 2^-24, a multiply-then-add would lose it.
  const float e = std::ldexp(1.0f, -12);
  const float a[] = {1.0f, 1.0f + e};
  const float b[] = {-1.0f, 1.0f + e};
  const float want = std::ldexp(1.0f, -11) + std::ldexp(1.0f, -24);
  EXPECT_EQ(Bits(CanonicalDot(a, 1, b, 1, 2)), Bits(want));
  float unfused = 0.0f;
  for (int i = 0; i < 2; ++i) {
    const float prod = a[i] * b[i];
    unfused = unfused + prod;
  }
  EXPECT_NE(Bits(unfused), Bits(want));
}

TEST(ReduceTest, SubnormalsAreKept) {
  // Sum of two smallest subnormals: 2 * 2^-149, not flushed to zero.
  const float tiny = std::ldexp(1.0f, -149);
  const float x[] = {tiny, tiny};
  EXPECT_EQ(Bits(CanonicalSum(x, 2, 1)), 0x00000002u);
}

TEST(ReduceTest, NumChunksAndTreeSplit) {
  EXPECT_EQ(NumChunks(0), 0);
  EXPECT_EQ(NumChunks(1), 1);
  EXPECT_EQ(NumChunks(256), 1);
  EXPECT_EQ(NumChunks(257), 2);
  EXPECT_EQ(TreeSplit(2), 1);
  EXPECT_EQ(TreeSplit(3), 2);
  EXPECT_EQ(TreeSplit(4), 2);
  EXPECT_EQ(TreeSplit(5), 4);
  EXPECT_EQ(TreeSplit(257), 256);
}

}  // namespace
}  // namespace lockstep::canonical
