#include "kernels/spatial/pool2d.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kernels/canonical/reduce.h"
#include "kernels/spatial/reference.h"
#include "kernels/spatial/test_util.h"
#include "kernels/spatial/validate.h"

namespace lockstep::spatial {
namespace {

using ::lockstep::spatial::testing::Bits;
using ::lockstep::spatial::testing::BitsEqual;
using ::lockstep::spatial::testing::EvaluateShuffled;
using ::lockstep::spatial::testing::FromBits;
using ::lockstep::spatial::testing::RandomFloats;
using ::lockstep::spatial::testing::RandomInts;
using ::lockstep::spatial::testing::ReductionBound;
using ::lockstep::spatial::testing::RoundToFloat;
using ::lockstep::spatial::testing::WithinBound;
using ::lockstep::testing::IsOk;

Pool2dShape Pool(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k_h,
                 int64_t k_w, int64_t stride_h, int64_t stride_w,
                 int64_t pad_top = 0, int64_t pad_bottom = 0,
                 int64_t pad_left = 0, int64_t pad_right = 0) {
  Pool2dShape s;
  s.n = n;
  s.c = c;
  s.h = h;
  s.w = w;
  s.k_h = k_h;
  s.k_w = k_w;
  s.stride_h = stride_h;
  s.stride_w = stride_w;
  s.pad_top = pad_top;
  s.pad_bottom = pad_bottom;
  s.pad_left = pad_left;
  s.pad_right = pad_right;
  return s;
}

struct PoolCase {
  std::string name;
  Pool2dShape shape;
};

// Test names print the case name rather than the struct's bytes.
void PrintTo(const PoolCase& c, std::ostream* os) { *os << c.name; }

std::vector<PoolCase> Cases() {
  return {
      {"k2_s2_tiling", Pool(2, 3, 6, 8, 2, 2, 2, 2)},
      {"k3_s2_pad1_overlapping", Pool(1, 2, 7, 9, 3, 3, 2, 2, 1, 1, 1, 1)},
      {"k3x2_s1x3_asymmetric_pad", Pool(2, 1, 5, 10, 3, 2, 1, 3, 2, 0, 1, 1)},
      {"k2_s1_pad1", Pool(1, 2, 5, 4, 2, 2, 1, 1, 1, 1, 1, 1)},
      {"k4x3_s3x2_not_tiling", Pool(1, 1, 9, 7, 4, 3, 3, 2, 1, 2, 2, 0)},
      {"window_is_whole_input", Pool(1, 2, 5, 3, 5, 3, 1, 1)},
      // 400 taps per window and 400 windows over the centre: both the
      // forward sums and the gathers span two chunks.
      {"long_windows_k20", Pool(1, 1, 39, 39, 20, 20, 1, 1)},
      // The same with 512-tap windows (a power of two: exact divisions).
      {"long_windows_k16x32", Pool(1, 1, 31, 63, 16, 32, 1, 1)},
  };
}

// Upper bound on the windows covering one input element.
int64_t MaxWindowsPerInput(const Pool2dShape& s) {
  return ((s.k_h + s.stride_h - 1) / s.stride_h) *
         ((s.k_w + s.stride_w - 1) / s.stride_w);
}

bool IsPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// True when every average-pool divisor is a power of two (divisions exact).
bool DyadicDivisors(const Pool2dShape& s) {
  for (int64_t oh = 0; oh < Pool2dOutH(s); ++oh)
    for (int64_t ow = 0; ow < Pool2dOutW(s); ++ow)
      if (!IsPowerOfTwo(AvgPool2dDivisor(s, oh, ow))) return false;
  return true;
}

std::vector<float> MaxForward(const Pool2dShape& s,
                              const std::vector<float>& x) {
  std::vector<float> y(Pool2dOutputSize(s));
  MaxPool2dForward(s, x.data(), y.data());
  return y;
}
std::vector<float> MaxGrad(const Pool2dShape& s, const std::vector<float>& x,
                           const std::vector<float>& dy) {
  std::vector<float> dx(Pool2dInputSize(s));
  MaxPool2dGrad(s, x.data(), dy.data(), dx.data());
  return dx;
}
std::vector<float> AvgForward(const Pool2dShape& s,
                              const std::vector<float>& x) {
  std::vector<float> y(Pool2dOutputSize(s));
  AvgPool2dForward(s, x.data(), y.data());
  return y;
}
std::vector<float> AvgGrad(const Pool2dShape& s, const std::vector<float>& dy) {
  std::vector<float> dx(Pool2dInputSize(s));
  AvgPool2dGrad(s, dy.data(), dx.data());
  return dx;
}

// The spec written out as scatter-built term lists: each window, in (n, c,
// oh, ow) order, appends its terms to the lists of the inputs it feeds; each
// list is then reduced by reduce.h's CanonicalSum.
std::vector<float> OracleMaxGrad(const Pool2dShape& s,
                                 const std::vector<float>& x,
                                 const std::vector<float>& dy) {
  std::vector<std::vector<float>> terms(Pool2dInputSize(s));
  const int64_t out_h = Pool2dOutH(s), out_w = Pool2dOutW(s);
  reference::ForEachPoolWindow(s, [&](int64_t plane, int64_t oh, int64_t ow,
                                      const std::vector<int64_t>& taps) {
    const float* xp = x.data() + plane * s.h * s.w;
    terms[plane * s.h * s.w + reference::MaxPoolWinner(xp, taps)].push_back(
        dy[(plane * out_h + oh) * out_w + ow]);
  });
  std::vector<float> dx(terms.size());
  for (size_t i = 0; i < terms.size(); ++i) {
    dx[i] = canonical::CanonicalSum(terms[i].data(), terms[i].size(), 1);
  }
  return dx;
}

std::vector<float> OracleAvgForward(const Pool2dShape& s,
                                    const std::vector<float>& x) {
  std::vector<float> y(Pool2dOutputSize(s));
  const int64_t out_h = Pool2dOutH(s), out_w = Pool2dOutW(s);
  std::vector<float> window;
  reference::ForEachPoolWindow(s, [&](int64_t plane, int64_t oh, int64_t ow,
                                      const std::vector<int64_t>& taps) {
    window.clear();
    for (int64_t t : taps) window.push_back(x[plane * s.h * s.w + t]);
    const float divisor = static_cast<float>(
        s.count_include_pad ? s.k_h * s.k_w
                            : static_cast<int64_t>(taps.size()));
    y[(plane * out_h + oh) * out_w + ow] =
        canonical::CanonicalSum(window.data(), window.size(), 1) / divisor;
  });
  return y;
}

std::vector<float> OracleAvgGrad(const Pool2dShape& s,
                                 const std::vector<float>& dy) {
  std::vector<std::vector<float>> terms(Pool2dInputSize(s));
  const int64_t out_h = Pool2dOutH(s), out_w = Pool2dOutW(s);
  reference::ForEachPoolWindow(s, [&](int64_t plane, int64_t oh, int64_t ow,
                                      const std::vector<int64_t>& taps) {
    const float divisor = static_cast<float>(
        s.count_include_pad ? s.k_h * s.k_w
                            : static_cast<int64_t>(taps.size()));
    const float term = dy[(plane * out_h + oh) * out_w + ow] / divisor;
    for (int64_t t : taps) terms[plane * s.h * s.w + t].push_back(term);
  });
  std::vector<float> dx(terms.size());
  for (size_t i = 0; i < terms.size(); ++i) {
    dx[i] = canonical::CanonicalSum(terms[i].data(), terms[i].size(), 1);
  }
  return dx;
}

// Distinct values (multiples of 1/8, shuffled): no ties, and a finite
// difference step of 1/64 cannot change any window's winner.
std::vector<float> DistinctValues(int64_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>(i - n / 2) * 0.125f;
  }
  std::mt19937 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

double Loss(const std::vector<float>& y, const std::vector<float>& r) {
  double l = 0.0;
  for (size_t j = 0; j < y.size(); ++j) l += static_cast<double>(r[j]) * y[j];
  return l;
}

// Central differences of sum r * f(x) against the gathered gradient, on
// about 40 coordinates.
template <typename Forward>
void CheckFiniteDifferences(const std::vector<float>& x,
                            const std::vector<float>& r,
                            const std::vector<float>& grad, float step,
                            Forward&& forward) {
  const size_t every = x.size() / 40 + 1;
  for (size_t i = 0; i < x.size(); i += every) {
    std::vector<float> plus = x, minus = x;
    plus[i] += step;
    minus[i] -= step;
    const double fd =
        (Loss(forward(plus), r) - Loss(forward(minus), r)) / (2.0 * step);
    EXPECT_NEAR(fd, grad[i], 1e-4 * (1.0 + std::fabs(grad[i])))
        << "x[" << i << "]";
  }
}

class Pool2dCaseTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(Pool2dCaseTest, ShapeIsValid) {
  EXPECT_THAT(ValidatePool2dShape(GetParam().shape), IsOk());
}

// ---- max pooling ----

TEST_P(Pool2dCaseTest, MaxPoolMatchesFloat64Reference) {
  const Pool2dShape& s = GetParam().shape;
  const std::vector<float> x = RandomFloats(Pool2dInputSize(s), 1);
  const std::vector<float> dy = RandomFloats(Pool2dOutputSize(s), 2);
  // The forward is a copy: exact.
  EXPECT_TRUE(
      BitsEqual(MaxForward(s, x),
                RoundToFloat(reference::MaxPool2dForward(s, x.data()))));
  EXPECT_TRUE(WithinBound(MaxGrad(s, x, dy),
                          reference::MaxPool2dGrad(s, x.data(), dy.data()),
                          ReductionBound(MaxWindowsPerInput(s))));
}

// Integers in [-8, 8] tie constantly, so this also checks the first-maximum
// rule against the reference's std::max_element.
TEST_P(Pool2dCaseTest, MaxPoolExactIntegersBitForBit) {
  const Pool2dShape& s = GetParam().shape;
  const std::vector<float> x = RandomInts(Pool2dInputSize(s), 3);
  const std::vector<float> dy = RandomInts(Pool2dOutputSize(s), 4);
  EXPECT_TRUE(
      BitsEqual(MaxForward(s, x),
                RoundToFloat(reference::MaxPool2dForward(s, x.data()))));
  EXPECT_TRUE(BitsEqual(
      MaxGrad(s, x, dy),
      RoundToFloat(reference::MaxPool2dGrad(s, x.data(), dy.data()))));
}

TEST_P(Pool2dCaseTest, MaxPoolGradMatchesSpecOracleBitForBit) {
  const Pool2dShape& s = GetParam().shape;
  // Big dy values spread over many binades so additions really round.
  const std::vector<float> x = RandomInts(Pool2dInputSize(s), 5);
  std::vector<float> dy = RandomFloats(Pool2dOutputSize(s), 6);
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = std::ldexp(dy[i], i % 23);
  EXPECT_TRUE(BitsEqual(MaxGrad(s, x, dy), OracleMaxGrad(s, x, dy)));
}

TEST_P(Pool2dCaseTest, MaxPoolShuffledElementOrderGivesSameBits) {
  const Pool2dShape& s = GetParam().shape;
  const std::vector<float> x = RandomInts(Pool2dInputSize(s), 7);
  const std::vector<float> dy = RandomFloats(Pool2dOutputSize(s), 8);
  EXPECT_TRUE(BitsEqual(EvaluateShuffled(Pool2dOutputSize(s), 1,
                                         [&](int64_t i) {
                                           return MaxPool2dForwardElement(
                                               s, x.data(), i);
                                         }),
                        MaxForward(s, x)));
  EXPECT_TRUE(BitsEqual(EvaluateShuffled(Pool2dInputSize(s), 2,
                                         [&](int64_t i) {
                                           return MaxPool2dGradElement(
                                               s, x.data(), dy.data(), i);
                                         }),
                        MaxGrad(s, x, dy)));
}

TEST_P(Pool2dCaseTest, MaxPoolGradMatchesFiniteDifferences) {
  const Pool2dShape& s = GetParam().shape;
  const std::vector<float> x = DistinctValues(Pool2dInputSize(s), 9);
  const std::vector<float> r = RandomFloats(Pool2dOutputSize(s), 10);
  CheckFiniteDifferences(
      x, r, MaxGrad(s, x, r), 1.0f / 64,
      [&](const std::vector<float>& v) { return MaxForward(s, v); });
}

// ---- average pooling (both divisor rules) ----

class AvgPool2dCaseTest
    : public ::testing::TestWithParam<std::tuple<PoolCase, bool>> {
 protected:
  Pool2dShape shape() const {
    Pool2dShape s = std::get<0>(GetParam()).shape;
    s.count_include_pad = std::get<1>(GetParam());
    return s;
  }
};

TEST_P(AvgPool2dCaseTest, MatchesFloat64Reference) {
  const Pool2dShape s = shape();
  const std::vector<float> x = RandomFloats(Pool2dInputSize(s), 11);
  const std::vector<float> dy = RandomFloats(Pool2dOutputSize(s), 12);
  EXPECT_TRUE(WithinBound(AvgForward(s, x),
                          reference::AvgPool2dForward(s, x.data()),
                          ReductionBound(s.k_h * s.k_w, /*extra=*/1)))
      << "forward";
  EXPECT_TRUE(WithinBound(AvgGrad(s, dy),
                          reference::AvgPool2dGrad(s, dy.data()),
                          ReductionBound(MaxWindowsPerInput(s), /*extra=*/1)))
      << "grad";
}

// Integer inputs: the window sums are exact, so the forward is one correctly
// rounded division on both sides. (The reference rounds twice, S / d to
// double then to float, but that can only differ when S / d has a run of
// 28 equal bits past float precision, and the divisors here have binary
// expansions of period <= 20.) The backward divides before summing, so it is
// exact only when every divisor is a power of two.
TEST_P(AvgPool2dCaseTest, ExactIntegersBitForBit) {
  const Pool2dShape s = shape();
  const std::vector<float> x = RandomInts(Pool2dInputSize(s), 13);
  const std::vector<float> dy = RandomInts(Pool2dOutputSize(s), 14);
  EXPECT_TRUE(BitsEqual(AvgForward(s, x),
                        RoundToFloat(reference::AvgPool2dForward(s, x.data()))))
      << "forward";
  if (DyadicDivisors(s)) {
    EXPECT_TRUE(BitsEqual(AvgGrad(s, dy),
                          RoundToFloat(reference::AvgPool2dGrad(s, dy.data()))))
        << "grad";
  }
}

TEST_P(AvgPool2dCaseTest, MatchesSpecOracleBitForBit) {
  const Pool2dShape s = shape();
  const std::vector<float> x = RandomFloats(Pool2dInputSize(s), 15);
  const std::vector<float> dy = RandomFloats(Pool2dOutputSize(s), 16);
  EXPECT_TRUE(BitsEqual(AvgForward(s, x), OracleAvgForward(s, x))) << "forward";
  EXPECT_TRUE(BitsEqual(AvgGrad(s, dy), OracleAvgGrad(s, dy))) << "grad";
}

TEST_P(AvgPool2dCaseTest, ShuffledElementOrderGivesSameBits) {
  const Pool2dShape s = shape();
  const std::vector<float> x = RandomFloats(Pool2dInputSize(s), 17);
  const std::vector<float> dy = RandomFloats(Pool2dOutputSize(s), 18);
  EXPECT_TRUE(BitsEqual(EvaluateShuffled(Pool2dOutputSize(s), 3,
                                         [&](int64_t i) {
                                           return AvgPool2dForwardElement(
                                               s, x.data(), i);
                                         }),
                        AvgForward(s, x)));
  EXPECT_TRUE(BitsEqual(EvaluateShuffled(Pool2dInputSize(s), 4,
                                         [&](int64_t i) {
                                           return AvgPool2dGradElement(
                                               s, dy.data(), i);
                                         }),
                        AvgGrad(s, dy)));
}

TEST_P(AvgPool2dCaseTest, GradMatchesFiniteDifferences) {
  const Pool2dShape s = shape();
  const std::vector<float> x = RandomFloats(Pool2dInputSize(s), 19);
  const std::vector<float> r = RandomFloats(Pool2dOutputSize(s), 20);
  // Linear in x: a large step is exact up to rounding noise.
  CheckFiniteDifferences(
      x, r, AvgGrad(s, r), 0.5f,
      [&](const std::vector<float>& v) { return AvgForward(s, v); });
}

std::string CaseName(const ::testing::TestParamInfo<PoolCase>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Shapes, Pool2dCaseTest, ::testing::ValuesIn(Cases()),
                         CaseName);

INSTANTIATE_TEST_SUITE_P(
    Shapes, AvgPool2dCaseTest,
    ::testing::Combine(::testing::ValuesIn(Cases()), ::testing::Bool()),
    [](const ::testing::TestParamInfo<std::tuple<PoolCase, bool>>& info) {
      return std::get<0>(info.param).name +
             (std::get<1>(info.param) ? "_include_pad" : "_exclude_pad");
    });

// ---- max pooling: ties, signed zeros, NaN ----

// Every element ties. Without padding each window's winner is its top-left
// tap; with padding 1 it is its top-left REAL tap (max(oh - 1, 0),
// max(ow - 1, 0)), so rows 0..3 win 2, 1, 1, 1 windows per axis.
TEST(MaxPool2dTiesTest, GradientGoesToFirstMaximum) {
  {
    const Pool2dShape s = Pool(1, 1, 4, 4, 2, 2, 1, 1);
    const std::vector<float> x(16, 3.0f), dy(9, 1.0f);
    const std::vector<float> dx = MaxGrad(s, x, dy);
    for (int64_t ih = 0; ih < 4; ++ih)
      for (int64_t iw = 0; iw < 4; ++iw)
        EXPECT_EQ(dx[ih * 4 + iw], (ih < 3 && iw < 3) ? 1.0f : 0.0f)
            << ih << "," << iw;
  }
  {
    const Pool2dShape s = Pool(1, 1, 4, 4, 2, 2, 1, 1, 1, 1, 1, 1);
    ASSERT_EQ(Pool2dOutH(s), 5);
    const std::vector<float> x(16, 3.0f), dy(25, 1.0f);
    const std::vector<float> dx = MaxGrad(s, x, dy);
    const float per_axis[4] = {2.0f, 1.0f, 1.0f, 1.0f};
    for (int64_t ih = 0; ih < 4; ++ih)
      for (int64_t iw = 0; iw < 4; ++iw)
        EXPECT_EQ(dx[ih * 4 + iw], per_axis[ih] * per_axis[iw])
            << ih << "," << iw;
  }
  {
    // A tie between two non-adjacent maxima in one window: row-major order
    // puts (0, 2) before (1, 0).
    const Pool2dShape s = Pool(1, 1, 2, 3, 2, 3, 1, 1);
    const std::vector<float> x = {1.0f, 0.0f, 7.0f, 7.0f, 2.0f, 7.0f};
    const std::vector<float> dy = {5.0f};
    EXPECT_EQ(MaxGrad(s, x, dy),
              (std::vector<float>{0.0f, 0.0f, 5.0f, 0.0f, 0.0f, 0.0f}));
  }
}

// -0.0 and +0.0 compare equal: the first one wins and its bits are the
// output.
TEST(MaxPool2dTiesTest, SignedZerosTieAndTheFirstBitsAreCopied) {
  const Pool2dShape s = Pool(1, 1, 2, 2, 2, 2, 1, 1);
  const std::vector<float> dy = {1.0f};
  const std::vector<float> neg_first = {-0.0f, 0.0f, -0.0f, 0.0f};
  EXPECT_EQ(Bits(MaxForward(s, neg_first)[0]), 0x80000000u);
  EXPECT_EQ(MaxGrad(s, neg_first, dy),
            (std::vector<float>{1.0f, 0.0f, 0.0f, 0.0f}));
  const std::vector<float> pos_first = {0.0f, -0.0f, -1.0f, -0.0f};
  EXPECT_EQ(Bits(MaxForward(s, pos_first)[0]), 0u);
}

// The first NaN in (kh, kw) order wins outright; its payload is copied.
TEST(MaxPool2dNanTest, FirstNanWinsAndKeepsItsPayload) {
  const float nan_a = FromBits(0x7fc00001u);
  const float nan_b = FromBits(0xffc00002u);
  const Pool2dShape s = Pool(1, 1, 2, 2, 2, 2, 1, 1);
  const std::vector<float> dy = {2.0f};

  const std::vector<float> x = {1.0f, nan_a, 7.0f, nan_b};
  EXPECT_EQ(Bits(MaxForward(s, x)[0]), 0x7fc00001u);
  EXPECT_EQ(MaxGrad(s, x, dy), (std::vector<float>{0.0f, 2.0f, 0.0f, 0.0f}));

  const std::vector<float> first = {nan_b, 9.0f, nan_a, 1.0f};
  EXPECT_EQ(Bits(MaxForward(s, first)[0]), 0xffc00002u);
  EXPECT_EQ(MaxGrad(s, first, dy),
            (std::vector<float>{2.0f, 0.0f, 0.0f, 0.0f}));

  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> infs = {-inf, -inf, -inf, -inf};
  EXPECT_EQ(MaxForward(s, infs)[0], -inf);
  EXPECT_EQ(MaxGrad(s, infs, dy), (std::vector<float>{2.0f, 0.0f, 0.0f, 0.0f}));
}

// Padding is never a candidate: all-negative inputs with padding still pool
// to a real element (a zero pad would win otherwise).
TEST(MaxPool2dPaddingTest, PaddingIsNotAValue) {
  const Pool2dShape s = Pool(1, 1, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1);
  const std::vector<float> x = {-4.0f, -3.0f, -2.0f, -1.0f};
  EXPECT_EQ(MaxForward(s, x), x);  // every window holds one real tap
}

// ---- average pooling: divisor rules ----

TEST(AvgPool2dDivisorTest, IncludeAndExcludePad) {
  Pool2dShape s = Pool(1, 1, 3, 3, 2, 2, 2, 2, 1, 0, 1, 0);  // out 2x2
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  s.count_include_pad = true;
  EXPECT_EQ(AvgForward(s, x),
            (std::vector<float>{1.0f / 4, 5.0f / 4, 11.0f / 4, 28.0f / 4}));
  s.count_include_pad = false;
  EXPECT_EQ(AvgForward(s, x),
            (std::vector<float>{1.0f, 5.0f / 2, 11.0f / 2, 28.0f / 4}));
  // Backward divides each window's dy by the same divisor.
  const std::vector<float> dy = {1.0f, 1.0f, 1.0f, 1.0f};
  EXPECT_EQ(AvgGrad(s, dy), (std::vector<float>{1.0f, 0.5f, 0.5f, 0.5f, 0.25f,
                                                0.25f, 0.5f, 0.25f, 0.25f}));
}

// ---- global average pooling ----

GlobalPool2dShape Global(int64_t n, int64_t c, int64_t h, int64_t w) {
  GlobalPool2dShape s;
  s.n = n;
  s.c = c;
  s.h = h;
  s.w = w;
  return s;
}

std::vector<float> GlobalForward(const GlobalPool2dShape& s,
                                 const std::vector<float>& x) {
  std::vector<float> y(GlobalPool2dOutputSize(s));
  GlobalAvgPool2dForward(s, x.data(), y.data());
  return y;
}
std::vector<float> GlobalGrad(const GlobalPool2dShape& s,
                              const std::vector<float>& dy) {
  std::vector<float> dx(GlobalPool2dInputSize(s));
  GlobalAvgPool2dGrad(s, dy.data(), dx.data());
  return dx;
}

TEST(GlobalAvgPool2dTest, MatchesReferenceOracleAndFiniteDifferences) {
  // 4x4 (dyadic), 3x5 (divisor 15), 30x30 (900 terms: four chunks).
  for (const GlobalPool2dShape& s :
       {Global(2, 3, 4, 4), Global(1, 2, 3, 5), Global(1, 2, 30, 30)}) {
    SCOPED_TRACE(::testing::Message() << s.h << "x" << s.w);
    ASSERT_THAT(ValidateGlobalPool2dShape(s), IsOk());
    const int64_t area = s.h * s.w;
    const std::vector<float> x = RandomFloats(GlobalPool2dInputSize(s), 21);
    const std::vector<float> dy = RandomFloats(GlobalPool2dOutputSize(s), 22);
    const std::vector<float> y = GlobalForward(s, x);
    const std::vector<float> dx = GlobalGrad(s, dy);

    EXPECT_TRUE(WithinBound(y, reference::GlobalAvgPool2dForward(s, x.data()),
                            ReductionBound(area, /*extra=*/1)));
    EXPECT_TRUE(
        WithinBound(dx, reference::GlobalAvgPool2dGrad(s, dy.data()), 2.0));

    // The spec: CanonicalSum over the plane, then one division.
    std::vector<float> oracle_y(y.size()), oracle_dx(dx.size());
    for (int64_t p = 0; p < s.n * s.c; ++p) {
      oracle_y[p] = canonical::CanonicalSum(x.data() + p * area, area, 1) /
                    static_cast<float>(area);
    }
    for (size_t i = 0; i < dx.size(); ++i) {
      oracle_dx[i] = dy[i / area] / static_cast<float>(area);
    }
    EXPECT_TRUE(BitsEqual(y, oracle_y));
    EXPECT_TRUE(BitsEqual(dx, oracle_dx));

    EXPECT_TRUE(BitsEqual(
        EvaluateShuffled(y.size(), 5,
                         [&](int64_t i) {
                           return GlobalAvgPool2dForwardElement(s, x.data(), i);
                         }),
        y));
    EXPECT_TRUE(BitsEqual(EvaluateShuffled(dx.size(), 6,
                                           [&](int64_t i) {
                                             return GlobalAvgPool2dGradElement(
                                                 s, dy.data(), i);
                                           }),
                          dx));

    CheckFiniteDifferences(x, dy, dx, 0.5f, [&](const std::vector<float>& v) {
      return GlobalForward(s, v);
    });

    if (IsPowerOfTwo(area)) {
      const std::vector<float> xi = RandomInts(x.size(), 23);
      const std::vector<float> dyi = RandomInts(dy.size(), 24);
      EXPECT_TRUE(BitsEqual(
          GlobalForward(s, xi),
          RoundToFloat(reference::GlobalAvgPool2dForward(s, xi.data()))));
      EXPECT_TRUE(BitsEqual(
          GlobalGrad(s, dyi),
          RoundToFloat(reference::GlobalAvgPool2dGrad(s, dyi.data()))));
    }
  }
}

}  // namespace
}  // namespace lockstep::spatial
