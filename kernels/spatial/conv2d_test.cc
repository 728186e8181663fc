#include "kernels/spatial/conv2d.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
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
using ::lockstep::spatial::testing::RandomFloats;
using ::lockstep::spatial::testing::RandomInts;
using ::lockstep::spatial::testing::ReductionBound;
using ::lockstep::spatial::testing::RoundToFloat;
using ::lockstep::spatial::testing::WithinBound;
using ::lockstep::testing::IsOk;

struct ConvCase {
  std::string name;
  Conv2dShape shape;
};

// Test names print the case name rather than the struct's bytes.
void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

Conv2dShape Shape(int64_t n, int64_t c_in, int64_t h, int64_t w, int64_t c_out,
                  int64_t k_h, int64_t k_w) {
  Conv2dShape s;
  s.n = n;
  s.c_in = c_in;
  s.h = h;
  s.w = w;
  s.c_out = c_out;
  s.k_h = k_h;
  s.k_w = k_w;
  return s;
}

Conv2dShape WithStride(Conv2dShape s, int64_t sh, int64_t sw) {
  s.stride_h = sh;
  s.stride_w = sw;
  return s;
}

Conv2dShape WithPad(Conv2dShape s, int64_t top, int64_t bottom, int64_t left,
                    int64_t right) {
  s.pad_top = top;
  s.pad_bottom = bottom;
  s.pad_left = left;
  s.pad_right = right;
  return s;
}

Conv2dShape WithDilation(Conv2dShape s, int64_t dh, int64_t dw) {
  s.dilation_h = dh;
  s.dilation_w = dw;
  return s;
}

Conv2dShape WithGroups(Conv2dShape s, int64_t groups) {
  s.groups = groups;
  return s;
}

std::vector<ConvCase> Cases() {
  return {
      {"basic_3x3_pad1", WithPad(Shape(2, 3, 7, 5, 4, 3, 3), 1, 1, 1, 1)},
      {"stride_2x3_asymmetric_pad",
       WithPad(WithStride(Shape(1, 2, 9, 8, 3, 3, 2), 2, 3), 1, 2, 0, 1)},
      {"dilation_2_stride_2",
       WithDilation(
           WithPad(WithStride(Shape(2, 2, 10, 11, 2, 3, 3), 2, 2), 2, 2, 2, 2),
           2, 2)},
      {"nonsquare_dilation",
       WithDilation(
           WithPad(WithStride(Shape(1, 2, 8, 9, 3, 2, 3), 1, 2), 0, 1, 2, 0), 3,
           1)},
      {"grouped",
       WithGroups(WithPad(Shape(1, 4, 6, 7, 6, 2, 3), 1, 0, 0, 1), 2)},
      {"depthwise_stride_2",
       WithGroups(
           WithPad(WithStride(Shape(2, 3, 7, 7, 3, 3, 3), 2, 2), 1, 1, 1, 1),
           3)},
      {"pointwise_stride_2", WithStride(Shape(2, 5, 6, 5, 4, 1, 1), 2, 2)},
      {"padding_exceeds_kernel",
       WithPad(WithStride(Shape(1, 2, 3, 3, 2, 2, 2), 2, 2), 3, 3, 3, 3)},
      {"kernel_covers_input", Shape(1, 2, 4, 3, 2, 4, 3)},
      // Reductions longer than one chunk in all three ops: forward K = 270,
      // dx K = 261, dw K = 300.
      {"long_reductions", WithPad(Shape(3, 30, 10, 10, 29, 3, 3), 1, 1, 1, 1)},
  };
}

int64_t ForwardTerms(const Conv2dShape& s) {
  return (s.c_in / s.groups) * s.k_h * s.k_w;
}
int64_t GradInputTerms(const Conv2dShape& s) {
  return (s.c_out / s.groups) * s.k_h * s.k_w;
}
int64_t GradWeightTerms(const Conv2dShape& s) {
  return s.n * Conv2dOutH(s) * Conv2dOutW(s);
}

struct ConvData {
  std::vector<float> x, w, dy;
};

ConvData MakeData(const Conv2dShape& s, bool integers, uint32_t seed) {
  ConvData d;
  if (integers) {
    d.x = RandomInts(Conv2dInputSize(s), seed);
    d.w = RandomInts(Conv2dWeightSize(s), seed + 1);
    d.dy = RandomInts(Conv2dOutputSize(s), seed + 2);
  } else {
    d.x = RandomFloats(Conv2dInputSize(s), seed);
    d.w = RandomFloats(Conv2dWeightSize(s), seed + 1);
    d.dy = RandomFloats(Conv2dOutputSize(s), seed + 2);
  }
  return d;
}

std::vector<float> Forward(const Conv2dShape& s, const std::vector<float>& x,
                           const std::vector<float>& w) {
  std::vector<float> y(Conv2dOutputSize(s));
  Conv2dForward(s, x.data(), w.data(), y.data());
  return y;
}
std::vector<float> GradInput(const Conv2dShape& s, const std::vector<float>& dy,
                             const std::vector<float>& w) {
  std::vector<float> dx(Conv2dInputSize(s));
  Conv2dGradInput(s, dy.data(), w.data(), dx.data());
  return dx;
}
std::vector<float> GradWeight(const Conv2dShape& s, const std::vector<float>& x,
                              const std::vector<float>& dy) {
  std::vector<float> dw(Conv2dWeightSize(s));
  Conv2dGradWeight(s, x.data(), dy.data(), dw.data());
  return dw;
}

// The spec written out a second way, for bit-exact comparison with random
// (rounding) data: materialise the terms each element's canonical sequence
// holds, then hand them to the canonical reduction of reduce.h.
class SpecOracle {
 public:
  explicit SpecOracle(const Conv2dShape& s) : s_(s) {
    hp_ = s.h + s.pad_top + s.pad_bottom;
    wp_ = s.w + s.pad_left + s.pad_right;
  }

  // x with its zero padding materialised: [N, C_in, Hp, Wp].
  std::vector<float> Padded(const std::vector<float>& x) const {
    std::vector<float> p(s_.n * s_.c_in * hp_ * wp_, 0.0f);
    for (int64_t nc = 0; nc < s_.n * s_.c_in; ++nc)
      for (int64_t ih = 0; ih < s_.h; ++ih)
        for (int64_t iw = 0; iw < s_.w; ++iw) {
          p[(nc * hp_ + ih + s_.pad_top) * wp_ + iw + s_.pad_left] =
              x[(nc * s_.h + ih) * s_.w + iw];
        }
    return p;
  }

  // Forward: im2col row (ci, kh, kw) of the padded input . weight row.
  std::vector<float> Forward(const std::vector<float>& x,
                             const std::vector<float>& w) const {
    const std::vector<float> p = Padded(x);
    const int64_t oh_n = Conv2dOutH(s_), ow_n = Conv2dOutW(s_);
    const int64_t cig = s_.c_in / s_.groups, cog = s_.c_out / s_.groups;
    const int64_t k = ForwardTerms(s_);
    std::vector<float> y(Conv2dOutputSize(s_)), row(k);
    for (int64_t n = 0; n < s_.n; ++n)
      for (int64_t co = 0; co < s_.c_out; ++co)
        for (int64_t oh = 0; oh < oh_n; ++oh)
          for (int64_t ow = 0; ow < ow_n; ++ow) {
            for (int64_t cl = 0; cl < cig; ++cl)
              for (int64_t kh = 0; kh < s_.k_h; ++kh)
                for (int64_t kw = 0; kw < s_.k_w; ++kw) {
                  const int64_t ci = (co / cog) * cig + cl;
                  row[(cl * s_.k_h + kh) * s_.k_w + kw] =
                      p[((n * s_.c_in + ci) * hp_ + oh * s_.stride_h +
                         kh * s_.dilation_h) *
                            wp_ +
                        ow * s_.stride_w + kw * s_.dilation_w];
                }
            y[((n * s_.c_out + co) * oh_n + oh) * ow_n + ow] =
                canonical::CanonicalDot(row.data(), 1, w.data() + co * k, 1, k);
          }
    return y;
  }

  // dx: a table of the (co, kh, kw) terms of every input element, filled by
  // scattering dy (unfilled slots stay +0.0f), dotted with the weights.
  std::vector<float> GradInput(const std::vector<float>& dy,
                               const std::vector<float>& w) const {
    const int64_t oh_n = Conv2dOutH(s_), ow_n = Conv2dOutW(s_);
    const int64_t cig = s_.c_in / s_.groups, cog = s_.c_out / s_.groups;
    const int64_t k = GradInputTerms(s_);
    const int64_t size = Conv2dInputSize(s_);
    std::vector<float> table(size * k, 0.0f);
    std::vector<int> filled(size * k, 0);
    reference::ForEachConvTap(
        s_, [&](int64_t n, int64_t co, int64_t oh, int64_t ow, int64_t cl,
                int64_t ci, int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
          const int64_t slot =
              (((n * s_.c_in + ci) * s_.h + ih) * s_.w + iw) * k +
              ((co % cog) * s_.k_h + kh) * s_.k_w + kw;
          table[slot] = dy[((n * s_.c_out + co) * oh_n + oh) * ow_n + ow];
          ++filled[slot];
        });
    for (int f : filled) EXPECT_LE(f, 1) << "a dx term slot was hit twice";
    std::vector<float> dx(size), wvec(k);
    for (int64_t i = 0; i < size; ++i) {
      const int64_t ci = (i / (s_.h * s_.w)) % s_.c_in;
      const int64_t g = ci / cig, cl = ci % cig;
      for (int64_t j = 0; j < cog; ++j)
        for (int64_t t = 0; t < s_.k_h * s_.k_w; ++t) {
          wvec[j * s_.k_h * s_.k_w + t] =
              w[((g * cog + j) * cig + cl) * s_.k_h * s_.k_w + t];
        }
      dx[i] =
          canonical::CanonicalDot(table.data() + i * k, 1, wvec.data(), 1, k);
    }
    return dx;
  }

  // dw: dy over (n, oh, ow) . the padded input at the tap's positions.
  std::vector<float> GradWeight(const std::vector<float>& x,
                                const std::vector<float>& dy) const {
    const std::vector<float> p = Padded(x);
    const int64_t oh_n = Conv2dOutH(s_), ow_n = Conv2dOutW(s_);
    const int64_t cig = s_.c_in / s_.groups, cog = s_.c_out / s_.groups;
    const int64_t k = GradWeightTerms(s_);
    std::vector<float> dw(Conv2dWeightSize(s_)), a(k), b(k);
    for (int64_t co = 0; co < s_.c_out; ++co)
      for (int64_t cl = 0; cl < cig; ++cl)
        for (int64_t kh = 0; kh < s_.k_h; ++kh)
          for (int64_t kw = 0; kw < s_.k_w; ++kw) {
            const int64_t ci = (co / cog) * cig + cl;
            for (int64_t n = 0; n < s_.n; ++n)
              for (int64_t oh = 0; oh < oh_n; ++oh)
                for (int64_t ow = 0; ow < ow_n; ++ow) {
                  const int64_t t = (n * oh_n + oh) * ow_n + ow;
                  a[t] = dy[((n * s_.c_out + co) * oh_n + oh) * ow_n + ow];
                  b[t] = p[((n * s_.c_in + ci) * hp_ + oh * s_.stride_h +
                            kh * s_.dilation_h) *
                               wp_ +
                           ow * s_.stride_w + kw * s_.dilation_w];
                }
            dw[((co * cig + cl) * s_.k_h + kh) * s_.k_w + kw] =
                canonical::CanonicalDot(a.data(), 1, b.data(), 1, k);
          }
    return dw;
  }

 private:
  Conv2dShape s_;
  int64_t hp_, wp_;
};

class Conv2dCaseTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2dCaseTest, ShapeIsValid) {
  EXPECT_THAT(ValidateConv2dShape(GetParam().shape), IsOk());
}

TEST_P(Conv2dCaseTest, MatchesFloat64ReferenceWithinBound) {
  const Conv2dShape& s = GetParam().shape;
  const ConvData d = MakeData(s, /*integers=*/false, 11);
  EXPECT_TRUE(WithinBound(Forward(s, d.x, d.w),
                          reference::Conv2dForward(s, d.x.data(), d.w.data()),
                          ReductionBound(ForwardTerms(s))))
      << "forward";
  EXPECT_TRUE(
      WithinBound(GradInput(s, d.dy, d.w),
                  reference::Conv2dGradInput(s, d.dy.data(), d.w.data()),
                  ReductionBound(GradInputTerms(s))))
      << "grad_input";
  EXPECT_TRUE(
      WithinBound(GradWeight(s, d.x, d.dy),
                  reference::Conv2dGradWeight(s, d.x.data(), d.dy.data()),
                  ReductionBound(GradWeightTerms(s))))
      << "grad_weight";
}

// Integers in [-8, 8]: every product and partial sum is exact, so the result
// must equal the float64 reference bit for bit, whatever the order. A
// failure here is an indexing bug, not a rounding-order difference.
TEST_P(Conv2dCaseTest, ExactIntegersBitForBit) {
  const Conv2dShape& s = GetParam().shape;
  const ConvData d = MakeData(s, /*integers=*/true, 21);
  EXPECT_TRUE(BitsEqual(
      Forward(s, d.x, d.w),
      RoundToFloat(reference::Conv2dForward(s, d.x.data(), d.w.data()))))
      << "forward";
  EXPECT_TRUE(BitsEqual(
      GradInput(s, d.dy, d.w),
      RoundToFloat(reference::Conv2dGradInput(s, d.dy.data(), d.w.data()))))
      << "grad_input";
  EXPECT_TRUE(BitsEqual(
      GradWeight(s, d.x, d.dy),
      RoundToFloat(reference::Conv2dGradWeight(s, d.x.data(), d.dy.data()))))
      << "grad_weight";
}

// Random data (every addition rounds): the kernels must reproduce the spec's
// canonical order exactly, as materialised by SpecOracle.
TEST_P(Conv2dCaseTest, MatchesSpecOracleBitForBit) {
  const Conv2dShape& s = GetParam().shape;
  const ConvData d = MakeData(s, /*integers=*/false, 31);
  const SpecOracle oracle(s);
  EXPECT_TRUE(BitsEqual(Forward(s, d.x, d.w), oracle.Forward(d.x, d.w)))
      << "forward";
  EXPECT_TRUE(BitsEqual(GradInput(s, d.dy, d.w), oracle.GradInput(d.dy, d.w)))
      << "grad_input";
  EXPECT_TRUE(BitsEqual(GradWeight(s, d.x, d.dy), oracle.GradWeight(d.x, d.dy)))
      << "grad_weight";
}

// What a GPU grid does: element functions called in any order give the same
// bits as the host driver.
TEST_P(Conv2dCaseTest, ShuffledElementOrderGivesSameBits) {
  const Conv2dShape& s = GetParam().shape;
  const ConvData d = MakeData(s, /*integers=*/false, 41);
  EXPECT_TRUE(BitsEqual(EvaluateShuffled(Conv2dOutputSize(s), 1,
                                         [&](int64_t i) {
                                           return Conv2dForwardElement(
                                               s, d.x.data(), d.w.data(), i);
                                         }),
                        Forward(s, d.x, d.w)))
      << "forward";
  EXPECT_TRUE(BitsEqual(EvaluateShuffled(Conv2dInputSize(s), 2,
                                         [&](int64_t i) {
                                           return Conv2dGradInputElement(
                                               s, d.dy.data(), d.w.data(), i);
                                         }),
                        GradInput(s, d.dy, d.w)))
      << "grad_input";
  EXPECT_TRUE(BitsEqual(EvaluateShuffled(Conv2dWeightSize(s), 3,
                                         [&](int64_t i) {
                                           return Conv2dGradWeightElement(
                                               s, d.x.data(), d.dy.data(), i);
                                         }),
                        GradWeight(s, d.x, d.dy)))
      << "grad_weight";
}

// sum_j r_j * y_j(x, w) in float64.
double Loss(const std::vector<float>& y, const std::vector<float>& r) {
  double l = 0.0;
  for (size_t j = 0; j < y.size(); ++j) l += static_cast<double>(r[j]) * y[j];
  return l;
}

// Central differences of L = sum r * conv(x, w). The convolution is linear in
// each of x and w, so a large step is exact up to rounding noise.
TEST_P(Conv2dCaseTest, GradientsMatchFiniteDifferences) {
  const Conv2dShape& s = GetParam().shape;
  const ConvData d = MakeData(s, /*integers=*/false, 51);
  const std::vector<float>& r = d.dy;
  const std::vector<float> dx = GradInput(s, r, d.w);
  const std::vector<float> dw = GradWeight(s, d.x, r);
  const float step = 0.5f;
  for (int which = 0; which < 2; ++which) {
    const std::vector<float>& grad = which == 0 ? dx : dw;
    // Every coordinate of the small shapes, about 8 of the large one.
    const size_t every =
        Conv2dOutputSize(s) * ForwardTerms(s) > 20000 ? grad.size() / 8 + 1 : 1;
    for (size_t i = 0; i < grad.size(); i += every) {
      std::vector<float> plus_x = d.x, minus_x = d.x;
      std::vector<float> plus_w = d.w, minus_w = d.w;
      if (which == 0) {
        plus_x[i] += step;
        minus_x[i] -= step;
      } else {
        plus_w[i] += step;
        minus_w[i] -= step;
      }
      const double fd = (Loss(Forward(s, plus_x, plus_w), r) -
                         Loss(Forward(s, minus_x, minus_w), r)) /
                        (2.0 * step);
      EXPECT_NEAR(fd, grad[i], 2e-3 * (1.0 + std::fabs(grad[i])))
          << (which == 0 ? "dx[" : "dw[") << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Conv2dCaseTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<ConvCase>& info) {
                           return info.param.name;
                         });

// Spec choice: a padded tap is not skipped, it contributes fma(+0, w, acc).
// With a +Inf weight at tap (0, 0) of a 3x3 "same" convolution, outputs whose
// (0, 0) tap reads padding become 0 * Inf = NaN; the others are +Inf.
TEST(Conv2dSpecTest, PaddedTapsContributeFmaOfZero) {
  const Conv2dShape s = WithPad(Shape(1, 1, 3, 3, 1, 3, 3), 1, 1, 1, 1);
  ASSERT_THAT(ValidateConv2dShape(s), IsOk());
  std::vector<float> x(9, 1.0f), w(9, 1.0f);
  w[0] = std::numeric_limits<float>::infinity();
  const std::vector<float> y = Forward(s, x, w);
  for (int64_t oh = 0; oh < 3; ++oh)
    for (int64_t ow = 0; ow < 3; ++ow) {
      const float v = y[oh * 3 + ow];
      if (oh == 0 || ow == 0) {
        EXPECT_TRUE(std::isnan(v)) << oh << "," << ow << ": " << v;
      } else {
        EXPECT_EQ(v, std::numeric_limits<float>::infinity()) << oh << "," << ow;
      }
    }
}

// The same rule in dx: a 1x1 kernel with stride 2 never reads odd rows or
// columns, yet their dx taps exist and read +0 from the stride holes, so an
// Inf weight makes them NaN (0 * Inf); the positions it did read get Inf.
TEST(Conv2dSpecTest, StrideHolesInGradInputContributeFmaOfZero) {
  const Conv2dShape s = WithStride(Shape(1, 1, 4, 4, 1, 1, 1), 2, 2);
  ASSERT_THAT(ValidateConv2dShape(s), IsOk());
  const std::vector<float> w = {std::numeric_limits<float>::infinity()};
  const std::vector<float> dy(4, 1.0f);
  const std::vector<float> dx = GradInput(s, dy, w);
  for (int64_t ih = 0; ih < 4; ++ih)
    for (int64_t iw = 0; iw < 4; ++iw) {
      const float v = dx[ih * 4 + iw];
      if (ih % 2 == 0 && iw % 2 == 0) {
        EXPECT_EQ(v, std::numeric_limits<float>::infinity());
      } else {
        EXPECT_TRUE(std::isnan(v)) << ih << "," << iw << ": " << v;
      }
    }
}

// With finite data, padding reads +0 and an all-padding output is +0.0f
// (never -0.0f), even with negative weights.
TEST(Conv2dSpecTest, AllPaddingOutputIsPositiveZero) {
  const Conv2dShape s =
      WithPad(WithStride(Shape(1, 1, 2, 2, 1, 2, 2), 3, 3), 3, 3, 3, 3);
  ASSERT_THAT(ValidateConv2dShape(s), IsOk());
  const std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
  const std::vector<float> w = {-1.0f, -2.0f, -3.0f, -4.0f};
  const std::vector<float> y = Forward(s, x, w);
  ASSERT_EQ(y.size(), 9u);    // (2 + 6 - 2) / 3 + 1 = 3 per axis
  EXPECT_EQ(Bits(y[0]), 0u);  // window rows -3..-2: only padding
}

}  // namespace
}  // namespace lockstep::spatial
