// LsFma: the inline FMA3 instruction (where the CPU has it) and libm's
// fmaf give the same bits, on random operands spread over the exponent
// range, on cases where the fused result differs from a * b + c, and on
// zeros, subnormals, infinities and overflow.
#include "kernels/canonical/hd.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace lockstep::canonical {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// libm's fmaf through a pointer, so the compiler cannot fold or inline it.
float (*volatile libm_fmaf)(float, float, float) = &::fmaf;

void ExpectSame(float a, float b, float c) {
  const float got = LsFma(a, b, c);
  const float want = libm_fmaf(a, b, c);
  EXPECT_EQ(Bits(got), Bits(want)) << "fma(" << a << ", " << b << ", " << c
                                   << ") = " << got << ", libm " << want;
}

TEST(LsFmaTest, MatchesLibmOnRandomOperands) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-140, 120);
  std::bernoulli_distribution neg(0.5);
  auto any = [&] {
    const float v = std::ldexp(mant(gen), expo(gen));
    return neg(gen) ? -v : v;
  };
  for (int i = 0; i < 200000; ++i) {
    const float a = any();
    const float b = any();
    // c near -a * b half the time: cancellation, where rounding shows.
    const float c = (i % 2) ? any() : -(a * b) * (1.0f + std::ldexp(1.0f, -20));
    ExpectSame(a, b, c);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(LsFmaTest, FusedDiffersFromMultiplyThenAdd) {
  const float a = 1.0f + std::ldexp(1.0f, -12);
  const float c = -(1.0f + std::ldexp(1.0f, -11));
  // a * a = 1 + 2^-11 + 2^-24 exactly; in float it rounds (a tie, to even)
  // to 1 + 2^-11, so a * a + c is 0 while the fused result keeps 2^-24.
  volatile float product = a * a;
  EXPECT_EQ(product + c, 0.0f);
  EXPECT_EQ(LsFma(a, a, c), std::ldexp(1.0f, -24));
  ExpectSame(a, a, c);
}

TEST(LsFmaTest, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float max = std::numeric_limits<float>::max();
  const float sub = std::numeric_limits<float>::denorm_min();
  const float vals[] = {0.0f, -0.0f, 1.0f, -1.0f, sub, -sub, 1e-38f,
                        max,  -max,  inf,  -inf,  nan, 3.5f, -2.25f};
  for (float a : vals) {
    for (float b : vals) {
      for (float c : vals) ExpectSame(a, b, c);
    }
  }
  // Signs of exact zeros: +0 * -1 + +0 = +0, -0 * 1 + -0 = -0.
  EXPECT_EQ(Bits(LsFma(0.0f, -1.0f, 0.0f)), Bits(0.0f));
  EXPECT_EQ(Bits(LsFma(-0.0f, 1.0f, -0.0f)), Bits(-0.0f));
}

}  // namespace
}  // namespace lockstep::canonical
