// SGD, momentum and Adam: exact family (integers, power-of-two rates) bit
// for bit vs the float64 reference; Adam bit for bit vs a float64 emulation
// of the written rounding sequence (each operation done in double on float
// operands and rounded to float, which equals the IEEE float32 operation for
// + - * / sqrt); and the plain float64 reference within a stated bound.
#include "kernels/ops/optimizers.h"

#include <cmath>
#include <cstdint>
#include <iostream>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops/reference.h"
#include "kernels/testing/float_test_util.h"

namespace lockstep::canonical {
namespace {

using ::lockstep::testing::BitsEqual;
using ::lockstep::testing::BitsEqualRounded;
using ::lockstep::testing::FloatBits;
using ::lockstep::testing::kFloatU;
using ::lockstep::testing::RandomFloats;
using ::lockstep::testing::SmallInts;
using ::lockstep::testing::WithinBound;

// One IEEE float32 operation, computed in double and rounded (exact for
// + - * / sqrt because double has more than 2 * 24 + 2 bits).
float R(double v) { return static_cast<float>(v); }

TEST(SgdTest, ExactFamilyBitForBit) {
  for (float lr : {1.0f, 0.5f, 0.125f, 0x1p-10f}) {
    std::vector<float> w = SmallInts(1000, 1);
    const std::vector<float> g = SmallInts(1000, 2);
    const std::vector<double> want = reference::Sgd(w, g, lr);
    SgdUpdate(w.data(), g.data(), 1000, lr);
    EXPECT_TRUE(BitsEqualRounded(w, want)) << "lr=" << lr;
  }
}

TEST(SgdTest, RandomIsTwoRoundings) {
  std::vector<float> w = RandomFloats(500, 3);
  const std::vector<float> g = RandomFloats(500, 4);
  const float lr = 0.01f;
  std::vector<float> want(w.size());
  for (size_t i = 0; i < w.size(); ++i)
    want[i] = R(w[i] - R(double{lr} * g[i]));
  SgdUpdate(w.data(), g.data(), 500, lr);
  EXPECT_TRUE(BitsEqual(w, want));
}

TEST(MomentumTest, ExactFamilyOverSeveralStepsBitForBit) {
  const float lr = 0.125f, mu = 0.5f;
  std::vector<float> w = SmallInts(800, 5);
  std::vector<float> v(800, 0.0f);
  std::vector<double> wd(w.begin(), w.end()), vd(800, 0.0);
  for (int step = 0; step < 4; ++step) {
    const std::vector<float> g = SmallInts(800, 10 + step);
    MomentumUpdate(w.data(), v.data(), g.data(), 800, lr, mu);
    reference::Momentum(wd, vd, g, lr, mu);
    EXPECT_TRUE(BitsEqualRounded(v, vd)) << "v after step " << step;
    EXPECT_TRUE(BitsEqualRounded(w, wd)) << "w after step " << step;
  }
}

TEST(MomentumTest, RandomFollowsWrittenSequence) {
  std::vector<float> w = RandomFloats(300, 6), v = RandomFloats(300, 7);
  const std::vector<float> g = RandomFloats(300, 8);
  const float lr = 0.01f, mu = 0.9f;
  std::vector<float> wn(300), vn(300);
  for (size_t i = 0; i < 300; ++i) {
    vn[i] = R(R(double{mu} * v[i]) + g[i]);  // no fma
    wn[i] = R(w[i] - R(double{lr} * vn[i]));
  }
  MomentumUpdate(w.data(), v.data(), g.data(), 300, lr, mu);
  EXPECT_TRUE(BitsEqual(v, vn));
  EXPECT_TRUE(BitsEqual(w, wn));
}

TEST(PowIntTest, WrittenSequence) {
  EXPECT_EQ(PowInt(0.9, 0), 1.0);
  EXPECT_EQ(PowInt(0.9, 1), 0.9);
  for (int t = 0; t <= 1074; t += 7) {
    EXPECT_EQ(PowInt(0.5, t), std::ldexp(1.0, -t)) << "t=" << t;
  }
  // t = 10 = 0b1010: r = b^2 * b^8 with b^2, b^4, b^8 by squaring.
  const double b = 0.9;
  const double b2 = b * b, b4 = b2 * b2, b8 = b4 * b4;
  EXPECT_EQ(PowInt(b, 10), b2 * b8);
  // t = 7 = 0b111: r = ((1 * b) * b^2) * b^4.
  EXPECT_EQ(PowInt(b, 7), (b * b2) * b4);
}

struct AdamState {
  std::vector<float> w, m, v;
};

// The written Adam sequence, one rounded operation per line.
void EmulateAdam(AdamState& s, const std::vector<float>& g, float lr, float b1,
                 float b2, float eps, int64_t t) {
  // PowInt in float64, written out independently: the product, in
  // increasing j, of the squarings b^(2^j) for the set bits j of t.
  auto pow_int = [](double b, int64_t e) {
    double r = 1.0;
    for (int j = 0; (e >> j) != 0; ++j) {
      if ((e >> j) & 1) r = r * b;
      if ((e >> (j + 1)) != 0) b = b * b;
    }
    return r;
  };
  const double p1 = pow_int(b1, t), p2 = pow_int(b2, t);
  const float c1 = R(1.0 - b1), c2 = R(1.0 - b2);
  const float bc1 = R(1.0 - p1), bc2 = R(1.0 - p2);
  for (size_t i = 0; i < g.size(); ++i) {
    const float m = R(R(double{b1} * s.m[i]) + R(double{c1} * g[i]));
    const float q = R(double{g[i]} * g[i]);
    const float v = R(R(double{b2} * s.v[i]) + R(double{c2} * q));
    s.m[i] = m;
    s.v[i] = v;
    const float mh = R(double{m} / bc1);
    const float vh = R(double{v} / bc2);
    const float d = R(double{R(std::sqrt(double{vh}))} + eps);
    const float r = R(double{mh} / d);
    s.w[i] = R(s.w[i] - R(double{lr} * r));
  }
}

TEST(AdamTest, FollowsWrittenRoundingSequenceBitForBit) {
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  AdamState got{RandomFloats(400, 20), std::vector<float>(400, 0.0f),
                std::vector<float>(400, 0.0f)};
  AdamState want = got;
  for (int64_t t = 1; t <= 6; ++t) {
    std::vector<float> g = RandomFloats(400, 30 + t);
    g[0] = 0.0f;  // v = 0 path: d = eps
    g[1] = 1e-30f;
    const AdamScalars s = AdamScalarsOf(lr, b1, b2, eps, t);
    AdamUpdate(s, got.w.data(), got.m.data(), got.v.data(), g.data(), 400);
    EmulateAdam(want, g, lr, b1, b2, eps, t);
    EXPECT_TRUE(BitsEqual(got.m, want.m)) << "m, t=" << t;
    EXPECT_TRUE(BitsEqual(got.v, want.v)) << "v, t=" << t;
    EXPECT_TRUE(BitsEqual(got.w, want.w)) << "w, t=" << t;
  }
  // A large step number (binary exponentiation, no loop over t).
  const AdamScalars late = AdamScalarsOf(lr, b1, b2, eps, 1000000);
  EXPECT_EQ(late.bc1, 1.0f);
  EXPECT_GT(late.bc2, 0.99f);
}

TEST(AdamTest, ExactFamilyFirstMomentAndSecondMoment) {
  // With beta1 = 0.5, beta2 = 0.75 and integer gradients the moment updates
  // are exact, so m and v equal the plain float64 reference bit for bit.
  const float b1 = 0.5f, b2 = 0.75f;
  AdamState s{SmallInts(300, 40), std::vector<float>(300, 0.0f),
              std::vector<float>(300, 0.0f)};
  std::vector<double> wd(s.w.begin(), s.w.end()), md(300, 0.0), vd(300, 0.0);
  for (int64_t t = 1; t <= 3; ++t) {
    const std::vector<float> g = SmallInts(300, 50 + t);
    AdamUpdate(AdamScalarsOf(0.125f, b1, b2, 0.0625f, t), s.w.data(),
               s.m.data(), s.v.data(), g.data(), 300);
    reference::Adam(wd, md, vd, g, 0.125, b1, b2, 0.0625, t);
    EXPECT_TRUE(BitsEqualRounded(s.m, md)) << "t=" << t;
    EXPECT_TRUE(BitsEqualRounded(s.v, vd)) << "t=" << t;
  }
}

TEST(AdamTest, WithinBoundOfFloat64Reference) {
  // Bound on w after T steps. m_t = b1 m + c1 g may cancel, so its error is
  // relative to mabs_t = b1 mabs + c1 |g| (3 roundings per step, carried
  // with factor b1 <= 1, so at most 3 t u mabs_t in all); v has no
  // cancellation. The update lr * (m / bc1) / (sqrt(v / bc2) + eps) adds 8
  // roundings of its own. Per step:
  //   |error of update_t| <= (16 + 4 t) u lr (mabs_t / bc1) / d_t,
  // plus one rounding of w: u |w_t|.
  const double lr = 1e-2, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  const size_t n = 300;
  AdamState s{RandomFloats(n, 60), std::vector<float>(n, 0.0f),
              std::vector<float>(n, 0.0f)};
  std::vector<double> wd(s.w.begin(), s.w.end()), md(n, 0.0), vd(n, 0.0);
  std::vector<double> mabs(n, 0.0), bound(n, 0.0);
  for (int64_t t = 1; t <= 10; ++t) {
    const std::vector<float> g = RandomFloats(n, 70 + t);
    AdamUpdate(
        AdamScalarsOf(static_cast<float>(lr), static_cast<float>(b1),
                      static_cast<float>(b2), static_cast<float>(eps), t),
        s.w.data(), s.m.data(), s.v.data(), g.data(), n);
    reference::Adam(wd, md, vd, g, static_cast<float>(lr), b1, b2, eps, t);
    const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
    for (size_t i = 0; i < n; ++i) {
      mabs[i] = b1 * mabs[i] + (1.0 - b1) * std::fabs(g[i]);
      const double d = std::sqrt(vd[i] / bc2) + eps;
      bound[i] += (16 + 4 * t) * kFloatU * lr * (mabs[i] / bc1) / d +
                  kFloatU * std::fabs(wd[i]);
    }
  }
  double worst = 0.0;
  EXPECT_TRUE(WithinBound(s.w, wd, bound, &worst));
  std::cout << "adam (10 steps): worst |error| / bound = " << worst << "\n";
}

}  // namespace
}  // namespace lockstep::canonical
