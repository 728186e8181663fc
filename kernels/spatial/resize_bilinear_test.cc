#include "kernels/spatial/resize_bilinear.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
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

ResizeBilinearShape Resize(int64_t n, int64_t c, int64_t in_h, int64_t in_w,
                           int64_t out_h, int64_t out_w) {
  ResizeBilinearShape s;
  s.n = n;
  s.c = c;
  s.in_h = in_h;
  s.in_w = in_w;
  s.out_h = out_h;
  s.out_w = out_w;
  return s;
}

struct ResizeCase {
  std::string name;
  ResizeBilinearShape shape;
  // Scale factors are powers of two and small: with integer data every
  // weight, product and sum is exact, so the float64 reference rounded to
  // float must match bit for bit.
  bool exact;
};

// Test names print the case name rather than the struct's bytes.
void PrintTo(const ResizeCase& c, std::ostream* os) { *os << c.name; }

std::vector<ResizeCase> Cases() {
  return {
      {"up_2x", Resize(2, 2, 4, 5, 8, 10), true},
      {"down_2x", Resize(1, 3, 8, 6, 4, 3), true},
      {"up_4x_down_2x", Resize(1, 2, 3, 8, 12, 4), true},
      {"identity", Resize(1, 2, 5, 4, 5, 4), true},
      {"to_1x1", Resize(1, 1, 4, 4, 1, 1), true},
      {"from_1x1", Resize(1, 2, 1, 1, 3, 5), false},
      {"non_dyadic_down", Resize(1, 2, 5, 7, 3, 4), false},
      {"non_dyadic_up", Resize(2, 1, 3, 4, 7, 9), false},
      // More than 256 terms per input pixel: the gathers span chunks.
      {"large_upsampling", Resize(1, 1, 2, 3, 64, 48), false},
  };
}

// Terms each input pixel's gather holds, per the double reference's taps.
std::vector<int64_t> TermCounts(const ResizeBilinearShape& s) {
  std::vector<int64_t> counts(ResizeBilinearInputSize(s), 0);
  reference::ForEachResizeTap(
      s, [&](int64_t plane, int64_t, int64_t in_offset, double) {
        ++counts[plane * s.in_h * s.in_w + in_offset];
      });
  return counts;
}

std::vector<float> Forward(const ResizeBilinearShape& s,
                           const std::vector<float>& x) {
  std::vector<float> y(ResizeBilinearOutputSize(s));
  ResizeBilinearForward(s, x.data(), y.data());
  return y;
}

std::vector<float> Grad(const ResizeBilinearShape& s,
                        const std::vector<float>& dy) {
  std::vector<float> dx(ResizeBilinearInputSize(s));
  ResizeBilinearGrad(s, dy.data(), dx.data());
  return dx;
}

// The spec written out as scatter-built term lists: every output pixel, in
// flat order, appends (dy, weight) for each of its taps (0,0), (0,1), (1,0),
// (1,1) to the list of the pixel the tap reads; each list is reduced with
// reduce.h's CanonicalDot. Weights come from the spec's axis function.
std::vector<float> OracleGrad(const ResizeBilinearShape& s,
                              const std::vector<float>& dy) {
  const int64_t size = ResizeBilinearInputSize(s);
  std::vector<std::vector<float>> g(size), w(size);
  for (int64_t plane = 0; plane < s.n * s.c; ++plane)
    for (int64_t oh = 0; oh < s.out_h; ++oh)
      for (int64_t ow = 0; ow < s.out_w; ++ow) {
        const BilinearAxisTaps ty = BilinearAxis(s.in_h, s.out_h, oh);
        const BilinearAxisTaps tx = BilinearAxis(s.in_w, s.out_w, ow);
        const int64_t rows[2] = {ty.i0, ty.i1}, cols[2] = {tx.i0, tx.i1};
        const float ly[2] = {ty.l0, ty.l1}, lx[2] = {tx.l0, tx.l1};
        const float d = dy[(plane * s.out_h + oh) * s.out_w + ow];
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b) {
            const int64_t p = (plane * s.in_h + rows[a]) * s.in_w + cols[b];
            g[p].push_back(d);
            w[p].push_back(ly[a] * lx[b]);
          }
      }
  std::vector<float> dx(size);
  for (int64_t p = 0; p < size; ++p) {
    dx[p] =
        canonical::CanonicalDot(g[p].data(), 1, w[p].data(), 1, g[p].size());
  }
  return dx;
}

std::vector<float> OracleForward(const ResizeBilinearShape& s,
                                 const std::vector<float>& x) {
  std::vector<float> y(ResizeBilinearOutputSize(s));
  for (int64_t plane = 0; plane < s.n * s.c; ++plane)
    for (int64_t oh = 0; oh < s.out_h; ++oh)
      for (int64_t ow = 0; ow < s.out_w; ++ow) {
        const BilinearAxisTaps ty = BilinearAxis(s.in_h, s.out_h, oh);
        const BilinearAxisTaps tx = BilinearAxis(s.in_w, s.out_w, ow);
        const float* xp = x.data() + plane * s.in_h * s.in_w;
        const float w[4] = {ty.l0 * tx.l0, ty.l0 * tx.l1, ty.l1 * tx.l0,
                            ty.l1 * tx.l1};
        const float v[4] = {
            xp[ty.i0 * s.in_w + tx.i0], xp[ty.i0 * s.in_w + tx.i1],
            xp[ty.i1 * s.in_w + tx.i0], xp[ty.i1 * s.in_w + tx.i1]};
        y[(plane * s.out_h + oh) * s.out_w + ow] =
            canonical::CanonicalDot(w, 1, v, 1, 4);
      }
  return y;
}

class ResizeCaseTest : public ::testing::TestWithParam<ResizeCase> {};

TEST_P(ResizeCaseTest, ShapeIsValid) {
  EXPECT_THAT(ValidateResizeBilinearShape(GetParam().shape), IsOk());
}

// The float64 reference computes coordinates in double, so for non-dyadic
// scales the float32 weights differ from it by a few ulps of the source
// coordinate: the bound adds 4 * (max extent + 2) ulps of the unweighted
// term magnitude (at most `terms` values of size <= 1).
TEST_P(ResizeCaseTest, MatchesFloat64ReferenceWithinBound) {
  const ResizeBilinearShape& s = GetParam().shape;
  const std::vector<float> x = RandomFloats(ResizeBilinearInputSize(s), 1);
  const std::vector<float> dy = RandomFloats(ResizeBilinearOutputSize(s), 2);
  const std::vector<int64_t> counts = TermCounts(s);
  const int64_t terms = *std::max_element(counts.begin(), counts.end());
  const double coordinate =
      4.0 *
      static_cast<double>(std::max({s.in_h, s.in_w, s.out_h, s.out_w}) + 2);
  EXPECT_TRUE(WithinBound(Forward(s, x),
                          reference::ResizeBilinearForward(s, x.data()),
                          ReductionBound(4, 2) + coordinate, 4.0))
      << "forward";
  EXPECT_TRUE(WithinBound(
      Grad(s, dy), reference::ResizeBilinearGrad(s, dy.data()),
      ReductionBound(terms, 2) + coordinate, static_cast<double>(terms)))
      << "grad";
}

TEST_P(ResizeCaseTest, ExactIntegersBitForBit) {
  const ResizeBilinearShape& s = GetParam().shape;
  if (!GetParam().exact) GTEST_SKIP() << "weights are not small dyadics";
  const std::vector<float> x = RandomInts(ResizeBilinearInputSize(s), 3);
  const std::vector<float> dy = RandomInts(ResizeBilinearOutputSize(s), 4);
  EXPECT_TRUE(
      BitsEqual(Forward(s, x),
                RoundToFloat(reference::ResizeBilinearForward(s, x.data()))))
      << "forward";
  EXPECT_TRUE(BitsEqual(
      Grad(s, dy), RoundToFloat(reference::ResizeBilinearGrad(s, dy.data()))))
      << "grad";
}

TEST_P(ResizeCaseTest, MatchesSpecOracleBitForBit) {
  const ResizeBilinearShape& s = GetParam().shape;
  const std::vector<float> x = RandomFloats(ResizeBilinearInputSize(s), 5);
  const std::vector<float> dy = RandomFloats(ResizeBilinearOutputSize(s), 6);
  EXPECT_TRUE(BitsEqual(Forward(s, x), OracleForward(s, x))) << "forward";
  EXPECT_TRUE(BitsEqual(Grad(s, dy), OracleGrad(s, dy))) << "grad";
}

TEST_P(ResizeCaseTest, ShuffledElementOrderGivesSameBits) {
  const ResizeBilinearShape& s = GetParam().shape;
  const std::vector<float> x = RandomFloats(ResizeBilinearInputSize(s), 7);
  const std::vector<float> dy = RandomFloats(ResizeBilinearOutputSize(s), 8);
  EXPECT_TRUE(BitsEqual(EvaluateShuffled(ResizeBilinearOutputSize(s), 1,
                                         [&](int64_t i) {
                                           return ResizeBilinearForwardElement(
                                               s, x.data(), i);
                                         }),
                        Forward(s, x)));
  EXPECT_TRUE(BitsEqual(EvaluateShuffled(ResizeBilinearInputSize(s), 2,
                                         [&](int64_t i) {
                                           return ResizeBilinearGradElement(
                                               s, dy.data(), i);
                                         }),
                        Grad(s, dy)));
}

double Loss(const std::vector<float>& y, const std::vector<float>& r) {
  double l = 0.0;
  for (size_t j = 0; j < y.size(); ++j) l += static_cast<double>(r[j]) * y[j];
  return l;
}

// Resize is linear in x, so a large central-difference step is exact up to
// rounding noise.
TEST_P(ResizeCaseTest, GradMatchesFiniteDifferences) {
  const ResizeBilinearShape& s = GetParam().shape;
  const std::vector<float> x = RandomFloats(ResizeBilinearInputSize(s), 9);
  const std::vector<float> r = RandomFloats(ResizeBilinearOutputSize(s), 10);
  const std::vector<float> dx = Grad(s, r);
  const float step = 0.5f;
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<float> plus = x, minus = x;
    plus[i] += step;
    minus[i] -= step;
    const double fd =
        (Loss(Forward(s, plus), r) - Loss(Forward(s, minus), r)) / (2 * step);
    EXPECT_NEAR(fd, dx[i], 1e-4 * (1.0 + std::fabs(dx[i]))) << "x[" << i << "]";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ResizeCaseTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<ResizeCase>& info) {
                           return info.param.name;
                         });

TEST(ResizeBilinearTest, LargeUpsamplingReallySpansChunks) {
  const ResizeBilinearShape s = Resize(1, 1, 2, 3, 64, 48);
  const std::vector<int64_t> counts = TermCounts(s);
  EXPECT_GT(*std::max_element(counts.begin(), counts.end()), canonical::kChunk);
}

// The axis arithmetic pinned to bits. The expected values were worked out
// with exact rational arithmetic and one float32 rounding per spec line; an
// implementation that fused (o + 0.5) * scale - 0.5 into one fma, or
// computed the coordinate in double, gets different bits for (1, 5, 3).
TEST(BilinearAxisTest, SourceCoordinateRoundingSequence) {
  struct Pinned {
    int64_t in, out, o, i0, i1;
    uint32_t l0, l1;
  };
  const Pinned cases[] = {
      {1, 5, 3, 0, 0, 0x3f4ccccd, 0x3e4ccccc},
      {7, 3, 2, 5, 6, 0x3f2aaab0, 0x3eaaaaa0},
      {13, 7, 6, 11, 12, 0x3edb6dc0, 0x3f124920},
      {3, 7, 5, 1, 2, 0x3e124920, 0x3f5b6db8},
      // Dyadic: in 4 -> out 8 (scale 0.5), centres -0.25 (clamped), 0.25,
      // and 3.25 (clamped upper tap).
      {4, 8, 0, 0, 1, 0x3f800000, 0x00000000},
      {4, 8, 1, 0, 1, 0x3f400000, 0x3e800000},
      {4, 8, 7, 3, 3, 0x3f400000, 0x3e800000},
      // in 8 -> out 4 (scale 2): 2 o + 0.5.
      {8, 4, 3, 6, 7, 0x3f000000, 0x3f000000},
  };
  for (const Pinned& p : cases) {
    const BilinearAxisTaps t = BilinearAxis(p.in, p.out, p.o);
    EXPECT_EQ(t.i0, p.i0) << p.in << "->" << p.out << " o=" << p.o;
    EXPECT_EQ(t.i1, p.i1) << p.in << "->" << p.out << " o=" << p.o;
    EXPECT_EQ(Bits(t.l0), p.l0) << p.in << "->" << p.out << " o=" << p.o;
    EXPECT_EQ(Bits(t.l1), p.l1) << p.in << "->" << p.out << " o=" << p.o;
  }
}

// i0 is non-decreasing in o (the gather's row/column search relies on it).
TEST(BilinearAxisTest, TapIndexIsMonotone) {
  for (int64_t in = 1; in <= 40; ++in)
    for (int64_t out = 1; out <= 40; ++out)
      for (int64_t o = 1; o < out; ++o) {
        ASSERT_LE(BilinearAxis(in, out, o - 1).i0, BilinearAxis(in, out, o).i0)
            << in << "->" << out << " o=" << o;
        ASSERT_LE(BilinearAxis(in, out, o).i1, in - 1);
      }
}

}  // namespace
}  // namespace lockstep::spatial
