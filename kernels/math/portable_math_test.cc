#include "kernels/math/portable_math.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

#include "gtest/gtest.h"
#include "kernels/canonical/float_bits.h"

namespace lockstep::canonical {
namespace {

constexpr uint32_t kPosInf = 0x7F800000u;
constexpr uint32_t kNegInf = 0xFF800000u;

// Spacing of floats in the binade of v (2^-149 below 2^-126).
double UlpOf(float v) {
  const float a = std::fabs(v);
  if (a < 0x1.0p-126f) return 0x1.0p-149;
  int e = 0;
  std::frexp(a, &e);
  return std::ldexp(1.0, e - 24);
}

// Error of y against the float64 reference, in ULPs of float(ref).
// Exact bit equality (including infinities) is 0.
double UlpError(float y, double ref) {
  const float rf = static_cast<float>(ref);
  if (LsFloatToBits(y) == LsFloatToBits(rf)) return 0.0;
  if (std::isinf(rf) || std::isinf(y) || std::isnan(y)) return HUGE_VAL;
  return std::fabs(static_cast<double>(y) - ref) / UlpOf(rf);
}

struct Worst {
  double ulp = 0.0;
  float x = 0.0f;
  float y = 0.0f;
  double ref = 0.0;
  void Update(float xi, float yi, double r) {
    const double e = UlpError(yi, r);
    if (e > ulp) {
      ulp = e;
      x = xi;
      y = yi;
      ref = r;
    }
  }
};

// The bound every function meets over all floats (measured by
// portable_math_ulp; see SPEC.md): strictly below 1 ULP, i.e. faithful.
constexpr double kMaxUlp = 1.0;

// Strided sweep over bit patterns [lo, hi]: ~ (hi - lo) / stride points.
template <typename F, typename R>
Worst SweepBits(uint32_t lo, uint32_t hi, uint32_t stride, F f, R ref) {
  Worst w;
  for (uint64_t b = lo; b <= hi; b += stride) {
    const float x = LsBitsToFloat(static_cast<uint32_t>(b));
    w.Update(x, f(x), ref(static_cast<double>(x)));
  }
  return w;
}

// Every float in [x0, x1].
template <typename F, typename R>
Worst SweepDense(float x0, float x1, F f, R ref) {
  Worst w;
  for (float x = x0; x <= x1; x = std::nextafter(x, HUGE_VALF)) {
    w.Update(x, f(x), ref(static_cast<double>(x)));
  }
  return w;
}

double RefExp(double x) { return std::exp(x); }
double RefLog(double x) { return std::log(x); }
double RefTanh(double x) { return std::tanh(x); }
double RefErf(double x) { return std::erf(x); }

#define EXPECT_WORST_BELOW(w, bound)                                  \
  EXPECT_LT((w).ulp, (bound)) << "worst x=" << std::hexfloat << (w).x \
                              << " got=" << (w).y << " ref=" << (w).ref

TEST(CanonicalExpTest, StridedSweepWithinBound) {
  // ~1.1M points over [0, 89] and ~1.1M over [-104, -0].
  const uint32_t kStride = 997;
  EXPECT_WORST_BELOW(
      SweepBits(0u, LsFloatToBits(89.0f), kStride, CanonicalExp, RefExp),
      kMaxUlp);
  EXPECT_WORST_BELOW(SweepBits(0x80000000u, LsFloatToBits(-104.0f), kStride,
                               CanonicalExp, RefExp),
                     kMaxUlp);
}

TEST(CanonicalExpTest, DenseNearOverflowAndSubnormalEdges) {
  // Overflow threshold, the normal/subnormal boundary (ln 2^-126 = -87.34),
  // the underflow-to-zero threshold (ln 2^-150 = -103.97) and around 0.
  EXPECT_WORST_BELOW(SweepDense(88.70f, 89.0f, CanonicalExp, RefExp), kMaxUlp);
  EXPECT_WORST_BELOW(SweepDense(-87.40f, -87.30f, CanonicalExp, RefExp),
                     kMaxUlp);
  EXPECT_WORST_BELOW(SweepDense(-104.0f, -103.0f, CanonicalExp, RefExp),
                     kMaxUlp);
  EXPECT_WORST_BELOW(
      SweepBits(0u, LsFloatToBits(0x1.0p-20f), 1021, CanonicalExp, RefExp),
      kMaxUlp);
  EXPECT_WORST_BELOW(SweepBits(0x80000000u, LsFloatToBits(-0x1.0p-20f), 1021,
                               CanonicalExp, RefExp),
                     kMaxUlp);
}

TEST(CanonicalExpTest, SpecialValues) {
  EXPECT_EQ(LsFloatToBits(CanonicalExp(0.0f)), LsFloatToBits(1.0f));
  EXPECT_EQ(LsFloatToBits(CanonicalExp(-0.0f)), LsFloatToBits(1.0f));
  EXPECT_EQ(LsFloatToBits(CanonicalExp(HUGE_VALF)), kPosInf);
  EXPECT_EQ(LsFloatToBits(CanonicalExp(-HUGE_VALF)), 0u);
  EXPECT_EQ(
      LsFloatToBits(CanonicalExp(std::numeric_limits<float>::quiet_NaN())),
      kCanonicalNanBits);
  EXPECT_EQ(LsFloatToBits(CanonicalExp(LsBitsToFloat(0xFFC12345u))),
            kCanonicalNanBits);
  EXPECT_EQ(LsFloatToBits(CanonicalExp(1.0f)), 0x402DF854u);  // e.
  // Near 0: e^x = 1 + x + x^2/2 lies just past a midpoint. (exp(2^-24)
  // gives 1, 0.5 ULP from e^x = 1 + 2^-24 + 2^-49: not correctly rounded.)
  EXPECT_LT(UlpError(CanonicalExp(0x1.0p-24f), std::exp(0x1.0p-24)), kMaxUlp);
  EXPECT_EQ(CanonicalExp(0x1.fffffep-25f), 1.0f);
  EXPECT_EQ(CanonicalExp(-0x1.0p-25f), 1.0f);
  EXPECT_EQ(CanonicalExp(-0x1.0p-24f), 1.0f - 0x1.0p-24f);
  EXPECT_EQ(CanonicalExp(0x1.0p-149f), 1.0f);
  // Overflow edge: ln(FLT_MAX) = 88.7228391...; 0x1.62e42ep6 stays finite,
  // the next float up overflows.
  EXPECT_EQ(LsFloatToBits(CanonicalExp(0x1.62e42ep6f)),
            LsFloatToBits(static_cast<float>(std::exp(0x1.62e42ep6))));
  EXPECT_EQ(LsFloatToBits(CanonicalExp(0x1.62e430p6f)), kPosInf);
  EXPECT_EQ(LsFloatToBits(CanonicalExp(1000.0f)), kPosInf);
  EXPECT_EQ(LsFloatToBits(CanonicalExp(std::numeric_limits<float>::max())),
            kPosInf);
  // Underflow edge: results go through the subnormals to +0.
  EXPECT_EQ(LsFloatToBits(CanonicalExp(-104.0f)), 0u);
  EXPECT_EQ(LsFloatToBits(CanonicalExp(-1000.0f)), 0u);
  EXPECT_EQ(LsFloatToBits(CanonicalExp(-std::numeric_limits<float>::max())),
            0u);
  EXPECT_EQ(LsFloatToBits(CanonicalExp(-103.5f)), 1u);  // 2^-149 (1.01e-45).
  const float sub = CanonicalExp(-100.0f);              // 3.72e-44.
  EXPECT_GT(sub, 0.0f);
  EXPECT_LT(sub, 0x1.0p-126f);
  EXPECT_EQ(LsFloatToBits(sub),
            LsFloatToBits(static_cast<float>(std::exp(-100.0))));
  // Exact powers: exp(k ln2) is close to 2^k; exp of small integers.
  for (int i = -80; i <= 80; ++i) {
    const float x = static_cast<float>(i);
    EXPECT_LT(UlpError(CanonicalExp(x), std::exp(static_cast<double>(i))),
              kMaxUlp)
        << i;
  }
}

TEST(CanonicalLogTest, StridedSweepWithinBound) {
  // All positive finite floats, subnormals included: ~2.1M points.
  EXPECT_WORST_BELOW(SweepBits(1u, 0x7F7FFFFFu, 1009, CanonicalLog, RefLog),
                     kMaxUlp);
}

TEST(CanonicalLogTest, DenseAroundOneAndSubnormals) {
  EXPECT_WORST_BELOW(SweepDense(0.99f, 1.01f, CanonicalLog, RefLog), kMaxUlp);
  EXPECT_WORST_BELOW(SweepDense(0.70f, 0.72f, CanonicalLog, RefLog), kMaxUlp);
  EXPECT_WORST_BELOW(SweepDense(1.40f, 1.42f, CanonicalLog, RefLog), kMaxUlp);
  // The smallest 200000 subnormals and the top of the subnormal range.
  EXPECT_WORST_BELOW(SweepBits(1u, 200000u, 1, CanonicalLog, RefLog), kMaxUlp);
  EXPECT_WORST_BELOW(
      SweepBits(0x00700000u, 0x00900000u, 7, CanonicalLog, RefLog), kMaxUlp);
}

TEST(CanonicalLogTest, SpecialValues) {
  EXPECT_EQ(LsFloatToBits(CanonicalLog(1.0f)), 0u);  // +0.
  EXPECT_EQ(LsFloatToBits(CanonicalLog(0.0f)), kNegInf);
  EXPECT_EQ(LsFloatToBits(CanonicalLog(-0.0f)), kNegInf);
  EXPECT_EQ(LsFloatToBits(CanonicalLog(HUGE_VALF)), kPosInf);
  EXPECT_EQ(LsFloatToBits(CanonicalLog(-HUGE_VALF)), kCanonicalNanBits);
  EXPECT_EQ(LsFloatToBits(CanonicalLog(-1.0f)), kCanonicalNanBits);
  EXPECT_EQ(LsFloatToBits(CanonicalLog(-0x1.0p-149f)), kCanonicalNanBits);
  EXPECT_EQ(
      LsFloatToBits(CanonicalLog(std::numeric_limits<float>::quiet_NaN())),
      kCanonicalNanBits);
  // Smallest subnormal: log(2^-149) = -103.27893.
  EXPECT_EQ(LsFloatToBits(CanonicalLog(0x1.0p-149f)),
            LsFloatToBits(static_cast<float>(-149.0 * std::log(2.0))));
  EXPECT_EQ(LsFloatToBits(CanonicalLog(std::numeric_limits<float>::max())),
            LsFloatToBits(static_cast<float>(std::log(
                static_cast<double>(std::numeric_limits<float>::max())))));
  // log(2^k) for every binade.
  for (int k = -149; k <= 127; ++k) {
    const float x = std::ldexp(1.0f, k);
    EXPECT_LT(UlpError(CanonicalLog(x), k * std::log(2.0)), kMaxUlp) << k;
  }
  // log(e) rounds to 1 (e is 0x402DF854 = 2.71828175, log = 1.0000000478).
  EXPECT_EQ(CanonicalLog(LsBitsToFloat(0x402DF854u)), 1.0f);
}

TEST(CanonicalTanhTest, StridedSweepWithinBound) {
  // All finite floats of both signs: ~4.2M points.
  EXPECT_WORST_BELOW(SweepBits(0u, 0x7F7FFFFFu, 1013, CanonicalTanh, RefTanh),
                     kMaxUlp);
  EXPECT_WORST_BELOW(
      SweepBits(0x80000000u, 0xFF7FFFFFu, 1013, CanonicalTanh, RefTanh),
      kMaxUlp);
}

TEST(CanonicalTanhTest, DenseAroundBranchPoints) {
  // Polynomial/exp switch at 1, saturation at 9.5, tanh(x) -> 1 at 9.0109.
  EXPECT_WORST_BELOW(SweepDense(0.98f, 1.02f, CanonicalTanh, RefTanh), kMaxUlp);
  EXPECT_WORST_BELOW(SweepDense(8.9f, 9.6f, CanonicalTanh, RefTanh), kMaxUlp);
  EXPECT_WORST_BELOW(SweepDense(0.85f, 0.90f, CanonicalTanh, RefTanh), kMaxUlp);
}

TEST(CanonicalTanhTest, OddSymmetryIsBitExact) {
  for (uint32_t b = 0; b < 0x7F800000u; b += 4099) {
    const float x = LsBitsToFloat(b);
    const uint32_t pos = LsFloatToBits(CanonicalTanh(x));
    const uint32_t neg = LsFloatToBits(CanonicalTanh(-x));
    ASSERT_EQ(neg, pos | 0x80000000u)
        << std::hex << "x bits 0x" << b << " tanh(x) 0x" << pos
        << " tanh(-x) 0x" << neg;
  }
}

TEST(CanonicalTanhTest, SpecialValues) {
  EXPECT_EQ(LsFloatToBits(CanonicalTanh(0.0f)), 0u);
  EXPECT_EQ(LsFloatToBits(CanonicalTanh(-0.0f)), 0x80000000u);
  EXPECT_EQ(CanonicalTanh(HUGE_VALF), 1.0f);
  EXPECT_EQ(CanonicalTanh(-HUGE_VALF), -1.0f);
  EXPECT_EQ(CanonicalTanh(20.0f), 1.0f);
  EXPECT_EQ(CanonicalTanh(-20.0f), -1.0f);
  EXPECT_EQ(CanonicalTanh(9.0f), 1.0f - 0x1.0p-24f);  // Not yet saturated.
  EXPECT_EQ(
      LsFloatToBits(CanonicalTanh(std::numeric_limits<float>::quiet_NaN())),
      kCanonicalNanBits);
  EXPECT_EQ(
      LsFloatToBits(CanonicalTanh(-std::numeric_limits<float>::quiet_NaN())),
      kCanonicalNanBits);
  // Tiny and subnormal inputs: tanh(x) rounds to x.
  for (const float x : {0x1.0p-149f, 0x1.0p-126f, 0x1.0p-30f, -0x1.0p-20f}) {
    EXPECT_EQ(LsFloatToBits(CanonicalTanh(x)), LsFloatToBits(x));
  }
}

// CanonicalErf is not faithful everywhere: the erfc fit it uses for
// |x| >= 1 has a relative error up to 1.2e-7, so a few ULPs are allowed
// there (SPEC: docs/canonical-arithmetic.md section 5).
constexpr double kMaxErfUlp = 4.0;

TEST(CanonicalErfTest, StridedSweepWithinBound) {
  const Worst pos = SweepBits(0u, 0x7F7FFFFFu, 1013, CanonicalErf, RefErf);
  const Worst neg =
      SweepBits(0x80000000u, 0xFF7FFFFFu, 1013, CanonicalErf, RefErf);
  std::printf("erf worst: %.3f ULP at %a\n", pos.ulp, pos.x);
  EXPECT_WORST_BELOW(pos, kMaxErfUlp);
  EXPECT_WORST_BELOW(neg, kMaxErfUlp);
}

TEST(CanonicalErfTest, DenseAroundBranchPoints) {
  // Series/erfc switch at 1, the steep part up to 4, saturation at 6.
  const Worst a = SweepDense(0.9f, 1.1f, CanonicalErf, RefErf);
  const Worst b = SweepDense(1.1f, 4.0f, CanonicalErf, RefErf);
  const Worst c = SweepDense(0.0f, 0.9f, CanonicalErf, RefErf);
  std::printf("erf worst: [0.9,1.1] %.3f  [1.1,4] %.3f  [0,0.9] %.3f ULP\n",
              a.ulp, b.ulp, c.ulp);
  EXPECT_WORST_BELOW(a, kMaxErfUlp);
  EXPECT_WORST_BELOW(b, kMaxErfUlp);
  EXPECT_WORST_BELOW(c, kMaxErfUlp);
  EXPECT_EQ(CanonicalErf(5.99f), 1.0f);
}

TEST(CanonicalErfTest, OddSymmetryAndSpecialValues) {
  for (uint32_t b = 0; b < 0x7F800000u; b += 4099) {
    const float x = LsBitsToFloat(b);
    ASSERT_EQ(LsFloatToBits(CanonicalErf(-x)),
              LsFloatToBits(CanonicalErf(x)) | 0x80000000u)
        << std::hex << "x bits 0x" << b;
  }
  EXPECT_EQ(LsFloatToBits(CanonicalErf(0.0f)), 0u);
  EXPECT_EQ(LsFloatToBits(CanonicalErf(-0.0f)), 0x80000000u);
  EXPECT_EQ(CanonicalErf(HUGE_VALF), 1.0f);
  EXPECT_EQ(CanonicalErf(-HUGE_VALF), -1.0f);
  EXPECT_EQ(
      LsFloatToBits(CanonicalErf(std::numeric_limits<float>::quiet_NaN())),
      kCanonicalNanBits);
}

TEST(CanonicalSqrtTest, IeeeAndCanonicalNan) {
  EXPECT_EQ(CanonicalSqrt(4.0f), 2.0f);
  EXPECT_EQ(CanonicalSqrt(2.0f), 0x1.6a09e6p0f);
  EXPECT_EQ(LsFloatToBits(CanonicalSqrt(-0.0f)), 0x80000000u);
  EXPECT_EQ(LsFloatToBits(CanonicalSqrt(HUGE_VALF)), kPosInf);
  EXPECT_EQ(LsFloatToBits(CanonicalSqrt(-1.0f)), kCanonicalNanBits);
  EXPECT_EQ(LsFloatToBits(CanonicalSqrt(0x1.0p-149f)),
            LsFloatToBits(0x1.6a09e6p-75f));
}

// Pins the exact bits of each function over a strided sweep. A change here
// changes CANONICAL results on every device: it needs a new canonical
// arithmetic version (kernels/canonical/version.h) and a SPEC.md update.
uint64_t Fnv1a(uint64_t h, uint32_t v) {
  for (int i = 0; i < 4; ++i) {
    h ^= (v >> (8 * i)) & 0xFFu;
    h *= 0x100000001B3ull;
  }
  return h;
}

TEST(CanonicalMathTest, GoldenBits) {
  uint64_t he = 0xCBF29CE484222325ull, hl = he, ht = he;
  for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += 65537) {
    const float x = LsBitsToFloat(static_cast<uint32_t>(b));
    he = Fnv1a(he, LsFloatToBits(CanonicalExp(x)));
    hl = Fnv1a(hl, LsFloatToBits(CanonicalLog(x)));
    ht = Fnv1a(ht, LsFloatToBits(CanonicalTanh(x)));
  }
  std::printf("golden: exp %016llx log %016llx tanh %016llx\n",
              static_cast<unsigned long long>(he),
              static_cast<unsigned long long>(hl),
              static_cast<unsigned long long>(ht));
  EXPECT_EQ(he, 0xd17913df33b85a4cull);
  EXPECT_EQ(hl, 0xc105f93589b2378full);
  EXPECT_EQ(ht, 0xc1542d9b0226d2daull);
}

TEST(CanonicalMathTest, ErfGoldenBits) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += 65537) {
    h = Fnv1a(h, LsFloatToBits(
                     CanonicalErf(LsBitsToFloat(static_cast<uint32_t>(b)))));
  }
  std::printf("golden: erf %016llx\n", static_cast<unsigned long long>(h));
  EXPECT_EQ(h, 0xbea36e8a3403e91cull);
}

}  // namespace
}  // namespace lockstep::canonical
