// bias_add, relu, add, copy: exact-integer family (bit for bit vs float64
// reference), random inputs within a stated bound, canonical order of the
// bias gradient, finite differences, special values.
#include "kernels/ops/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/canonical/reduce.h"
#include "kernels/ops/reference.h"
#include "kernels/testing/float_test_util.h"

namespace lockstep::canonical {
namespace {

using ::lockstep::testing::BitsEqual;
using ::lockstep::testing::BitsEqualRounded;
using ::lockstep::testing::CanonicalSumBound;
using ::lockstep::testing::FloatBits;
using ::lockstep::testing::RandomFloats;
using ::lockstep::testing::SmallInts;
using ::lockstep::testing::WithinBound;

std::vector<float> BiasFwd(const BiasShape& s, const std::vector<float>& x,
                           const std::vector<float>& b) {
  std::vector<float> y(x.size(), -1.0f);
  BiasAddForward(s, x.data(), b.data(), y.data());
  return y;
}
std::vector<float> BiasGrad(const BiasShape& s, const std::vector<float>& dy) {
  std::vector<float> db(s.c, -1.0f);
  BiasAddGrad(s, dy.data(), db.data());
  return db;
}

const BiasShape kBiasShapes[] = {
    {2, 3, 1},      // [N, C]
    {4, 5, 6},      // [N, C, H*W]
    {3, 2, 100},    // N*HW = 300 > 256: two chunks
    {300, 3, 1},    // [N, C] with N > 256
    {5, 4, 7 * 9},  // N*HW = 315
    {0, 3, 4},      // empty batch: db = +0
};

TEST(BiasAddTest, ExactIntegerFamilyBitForBit) {
  uint32_t seed = 1;
  for (const BiasShape& s : kBiasShapes) {
    SCOPED_TRACE(absl::StrFormat("n=%d c=%d spatial=%d", s.n, s.c, s.spatial));
    const std::vector<float> x = SmallInts(s.n * s.c * s.spatial, seed++);
    const std::vector<float> b = SmallInts(s.c, seed++);
    EXPECT_TRUE(BitsEqualRounded(
        BiasFwd(s, x, b), reference::BiasAdd(x, b, s.n, s.c, s.spatial)));
    EXPECT_TRUE(BitsEqualRounded(
        BiasGrad(s, x), reference::BiasAddGrad(x, s.n, s.c, s.spatial)));
  }
}

TEST(BiasAddTest, RandomWithinBound) {
  // Forward is one rounding: |error| <= u |x + b|. Grad: the canonical-sum
  // bound over N * spatial terms.
  double worst = 0.0, ratio = 0.0;
  uint32_t seed = 50;
  for (const BiasShape& s : kBiasShapes) {
    const std::vector<float> x = RandomFloats(s.n * s.c * s.spatial, seed++);
    const std::vector<float> b = RandomFloats(s.c, seed++);
    const std::vector<double> ref =
        reference::BiasAdd(x, b, s.n, s.c, s.spatial);
    std::vector<double> bound(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      bound[i] = std::fabs(ref[i]) * ::lockstep::testing::kFloatU;
    }
    EXPECT_TRUE(WithinBound(BiasFwd(s, x, b), ref, bound));

    std::vector<float> absx = x;
    for (float& v : absx) v = std::fabs(v);
    std::vector<double> gb = reference::BiasAddGrad(absx, s.n, s.c, s.spatial);
    for (double& v : gb) v = CanonicalSumBound(s.n * s.spatial, v);
    EXPECT_TRUE(WithinBound(BiasGrad(s, x),
                            reference::BiasAddGrad(x, s.n, s.c, s.spatial), gb,
                            &ratio));
    worst = std::max(worst, ratio);
  }
  std::cout << "bias_add.grad: worst |error| / bound = " << worst << "\n";
}

TEST(BiasAddTest, GradIsCanonicalSumInNHWOrder) {
  // db[c] == CanonicalSum over the gathered (n, h, w) sequence, bit for bit,
  // on wide-range values where the grouping matters.
  const BiasShape s{7, 3, 50};  // 350 terms per channel
  std::vector<float> dy = RandomFloats(s.n * s.c * s.spatial, 77);
  for (size_t i = 0; i < dy.size(); ++i)
    dy[i] = std::ldexp(dy[i], (i * 5) % 29 - 14);
  std::vector<float> want(s.c);
  for (int64_t c = 0; c < s.c; ++c) {
    std::vector<float> seq;
    for (int64_t n = 0; n < s.n; ++n)
      for (int64_t p = 0; p < s.spatial; ++p)
        seq.push_back(dy[(n * s.c + c) * s.spatial + p]);
    want[c] = CanonicalSum(seq.data(), static_cast<int64_t>(seq.size()), 1);
  }
  EXPECT_TRUE(BitsEqual(BiasGrad(s, dy), want));
}

TEST(BiasAddTest, GradientsMatchFiniteDifferences) {
  // L = sum r * (x + b): dL/db[c] = sum over (n, s) of r = bias_add.grad(r).
  const BiasShape s{3, 4, 5};
  const std::vector<float> x = RandomFloats(s.n * s.c * s.spatial, 1);
  std::vector<float> b = RandomFloats(s.c, 2);
  const std::vector<float> r = RandomFloats(x.size(), 3);
  auto loss = [&]() {
    const std::vector<double> y = reference::BiasAdd(x, b, s.n, s.c, s.spatial);
    double l = 0.0;
    for (size_t i = 0; i < y.size(); ++i) l += r[i] * y[i];
    return l;
  };
  const std::vector<float> db = BiasGrad(s, r);
  for (int64_t c = 0; c < s.c; ++c) {
    const float orig = b[c];
    const float plus = orig + 0x1p-8f, minus = orig - 0x1p-8f;
    b[c] = plus;
    const double lp = loss();
    b[c] = minus;
    const double lm = loss();
    b[c] = orig;
    EXPECT_NEAR(db[c], (lp - lm) / (static_cast<double>(plus) - minus), 1e-5);
  }
}

TEST(ReluTest, ExactFamilyAndSpecialValues) {
  std::vector<float> x = SmallInts(1000, 5);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  x.insert(x.end(), {-0.0f, 0.0f, nan, -nan, inf, -inf, 0x1p-149f, -0x1p-149f});
  const std::vector<float> dy = SmallInts(x.size(), 6);
  std::vector<float> y(x.size()), dx(x.size());
  ReluForward(x.data(), y.data(), static_cast<int64_t>(x.size()));
  ReluGrad(x.data(), dy.data(), dx.data(), static_cast<int64_t>(x.size()));

  std::vector<float> xs(x.begin(), x.begin() + 1000);
  std::vector<float> dys(dy.begin(), dy.begin() + 1000);
  EXPECT_TRUE(BitsEqualRounded(std::vector<float>(y.begin(), y.begin() + 1000),
                               reference::Relu(xs)));
  EXPECT_TRUE(
      BitsEqualRounded(std::vector<float>(dx.begin(), dx.begin() + 1000),
                       reference::ReluGrad(xs, dys)));

  const size_t k = 1000;
  EXPECT_EQ(FloatBits(y[k + 0]), 0u);  // -0 -> +0
  EXPECT_EQ(FloatBits(y[k + 1]), 0u);
  EXPECT_EQ(FloatBits(y[k + 2]), FloatBits(nan));  // NaN kept, same bits
  EXPECT_EQ(FloatBits(y[k + 3]), FloatBits(-nan));
  EXPECT_EQ(y[k + 4], inf);
  EXPECT_EQ(FloatBits(y[k + 5]), 0u);
  EXPECT_EQ(FloatBits(y[k + 6]), 1u);  // subnormal kept
  EXPECT_EQ(FloatBits(y[k + 7]), 0u);
  // Gradient: x == 0 (either sign) and NaN give +0; x > 0 passes dy.
  EXPECT_EQ(FloatBits(dx[k + 0]), 0u);
  EXPECT_EQ(FloatBits(dx[k + 1]), 0u);
  EXPECT_EQ(FloatBits(dx[k + 2]), 0u);
  EXPECT_EQ(FloatBits(dx[k + 4]), FloatBits(dy[k + 4]));
  EXPECT_EQ(FloatBits(dx[k + 6]), FloatBits(dy[k + 6]));
}

TEST(ReluTest, GradientMatchesFiniteDifferences) {
  // Points at least 0.05 away from the kink at 0.
  std::vector<float> x = RandomFloats(200, 9);
  for (float& v : x) v = v + (v >= 0 ? 0.05f : -0.05f);
  const std::vector<float> r = RandomFloats(x.size(), 10);
  std::vector<float> dx(x.size());
  ReluGrad(x.data(), r.data(), dx.data(), static_cast<int64_t>(x.size()));
  for (size_t e = 0; e < x.size(); ++e) {
    auto l = [&](float v) {
      std::vector<float> one = {v};
      return r[e] * reference::Relu(one)[0];
    };
    const float plus = x[e] + 0x1p-8f, minus = x[e] - 0x1p-8f;
    const double fd =
        (l(plus) - l(minus)) / (static_cast<double>(plus) - minus);
    EXPECT_NEAR(dx[e], fd, 1e-6) << "x[" << e << "] = " << x[e];
  }
}

TEST(AddTest, ExactFamilyRandomBoundAndCopies) {
  const std::vector<float> a = SmallInts(777, 11), b = SmallInts(777, 12);
  std::vector<float> y(a.size());
  AddForward(a.data(), b.data(), y.data(), static_cast<int64_t>(a.size()));
  EXPECT_TRUE(BitsEqualRounded(y, reference::Add(a, b)));

  // Random: one rounding, |error| <= u |a + b|.
  const std::vector<float> ra = RandomFloats(777, 13),
                           rb = RandomFloats(777, 14);
  AddForward(ra.data(), rb.data(), y.data(), static_cast<int64_t>(ra.size()));
  const std::vector<double> ref = reference::Add(ra, rb);
  std::vector<double> bound(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    bound[i] = std::fabs(ref[i]) * ::lockstep::testing::kFloatU;
  }
  EXPECT_TRUE(WithinBound(y, ref, bound));

  // add.grad / flatten: bit copies, NaN payloads included.
  std::vector<float> src = ra;
  uint32_t payload = 0x7fc12345u;
  std::memcpy(&src[3], &payload, sizeof(payload));
  std::vector<float> dst(src.size(), 0.0f);
  CopyFloats(src.data(), dst.data(), static_cast<int64_t>(src.size()));
  EXPECT_TRUE(BitsEqual(dst, src));
}

TEST(AddTest, OutputMayAliasInput) {
  std::vector<float> a = SmallInts(10, 15);
  const std::vector<float> b = SmallInts(10, 16);
  const std::vector<double> ref = reference::Add(a, b);
  AddForward(a.data(), b.data(), a.data(), 10);
  EXPECT_TRUE(BitsEqualRounded(a, ref));
}

}  // namespace
}  // namespace lockstep::canonical
