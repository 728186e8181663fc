// Softmax cross-entropy: bit for bit vs an independent transcription of the
// written sequence, float64 reference within a stated bound, finite
// differences, exact cases, shift invariance, NaN.
#include "kernels/ops/softmax_xent.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/canonical/reduce.h"
#include "kernels/math/portable_math.h"
#include "kernels/ops/reference.h"
#include "kernels/testing/float_test_util.h"

namespace lockstep::canonical {
namespace {

using ::lockstep::testing::BitsEqual;
using ::lockstep::testing::BitsEqualRounded;
using ::lockstep::testing::FloatBits;
using ::lockstep::testing::HexFloat;
using ::lockstep::testing::kFloatU;
using ::lockstep::testing::RandomFloats;
using ::lockstep::testing::WithinBound;

std::vector<int32_t> RandomLabels(int64_t n, int64_t c, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(c - 1));
  std::vector<int32_t> v(n);
  for (auto& l : v) l = dist(gen);
  return v;
}

float Loss(const SoftmaxShape& s, const std::vector<float>& x,
           const std::vector<int32_t>& y) {
  std::vector<float> scratch(s.n);
  return SoftmaxXentForward(s, x.data(), y.data(), scratch.data());
}
std::vector<float> Grad(const SoftmaxShape& s, const std::vector<float>& x,
                        const std::vector<int32_t>& y) {
  std::vector<float> g(s.n * s.c, -1.0f);
  SoftmaxXentGrad(s, x.data(), y.data(), g.data());
  return g;
}

// The written sequence with materialised exponentials.
struct Emulated {
  float loss;
  std::vector<float> grad;
};
Emulated Emulate(const SoftmaxShape& s, const std::vector<float>& x,
                 const std::vector<int32_t>& y) {
  Emulated out{0.0f, std::vector<float>(s.n * s.c)};
  std::vector<float> losses(s.n);
  for (int64_t i = 0; i < s.n; ++i) {
    const float* row = &x[i * s.c];
    float m = row[0];
    for (int64_t j = 1; j < s.c; ++j) m = row[j] > m ? row[j] : m;
    std::vector<float> e(s.c);
    for (int64_t j = 0; j < s.c; ++j) e[j] = CanonicalExp(row[j] - m);
    const float sum = CanonicalSum(e.data(), s.c, 1);
    const float z = row[y[i]] - m;
    losses[i] = CanonicalLog(sum) - z;
    for (int64_t j = 0; j < s.c; ++j) {
      const float p = e[j] / sum;
      const float t = j == y[i] ? p - 1.0f : p;
      out.grad[i * s.c + j] = t / static_cast<float>(s.n);
    }
  }
  out.loss = CanonicalSum(losses.data(), s.n, 1) / static_cast<float>(s.n);
  return out;
}

const SoftmaxShape kShapes[] = {{1, 1}, {5, 10}, {3, 300}, {300, 3}, {7, 513}};

TEST(SoftmaxXentTest, FollowsWrittenSequenceBitForBit) {
  uint32_t seed = 1;
  for (const SoftmaxShape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "n=" << s.n << " c=" << s.c);
    const std::vector<float> x = RandomFloats(s.n * s.c, seed++, -6.0f, 6.0f);
    const std::vector<int32_t> y = RandomLabels(s.n, s.c, seed++);
    const Emulated want = Emulate(s, x, y);
    const float loss = Loss(s, x, y);
    EXPECT_EQ(FloatBits(loss), FloatBits(want.loss))
        << HexFloat(loss) << " vs " << HexFloat(want.loss);
    EXPECT_TRUE(BitsEqual(Grad(s, x, y), want.grad));
  }
}

// Random logits in [-6, 6), with a NaN, +Inf and -Inf when there are more
// than 20.
std::vector<float> LogitsWithSpecials(const SoftmaxShape& s, uint32_t seed) {
  std::vector<float> x = RandomFloats(s.n * s.c, seed, -6.0f, 6.0f);
  if (x.size() > 20) {
    x[3] = std::numeric_limits<float>::quiet_NaN();
    x[x.size() - 4] = std::numeric_limits<float>::infinity();
    x[x.size() / 2] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

// The CPU kernel's rows (each exp once, kept in the output row) follow the
// same written sequence: the same bits, also with NaN and +-Inf logits.
TEST(SoftmaxXentTest, GradRowsWithOneExpPerElementGiveTheSameBits) {
  uint32_t seed = 50;
  for (const SoftmaxShape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "n=" << s.n << " c=" << s.c);
    const std::vector<float> x = LogitsWithSpecials(s, seed++);
    const std::vector<int32_t> y = RandomLabels(s.n, s.c, seed++);
    std::vector<float> want(x.size()), got(x.size(), 7.0f);
    SoftmaxXentGrad(s, x.data(), y.data(), want.data());
    for (int64_t i = 0; i < s.n; ++i) {
      SoftmaxXentGradRowOnce(s, x.data(), y.data(), i, got.data());
    }
    EXPECT_TRUE(BitsEqual(got, want));
  }
}

// The CPU kernel's per-example losses (each exp once, into scratch) give
// SoftmaxXentExampleLoss's bits, also with NaN and +-Inf logits.
TEST(SoftmaxXentTest, LossesWithOneExpPerElementGiveTheSameBits) {
  uint32_t seed = 70;
  for (const SoftmaxShape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "n=" << s.n << " c=" << s.c);
    const std::vector<float> x = LogitsWithSpecials(s, seed++);
    const std::vector<int32_t> y = RandomLabels(s.n, s.c, seed++);
    std::vector<float> want(s.n), got(s.n), scratch(s.c, 7.0f);
    for (int64_t i = 0; i < s.n; ++i) {
      want[i] = SoftmaxXentExampleLoss(s, x.data(), y.data(), i);
      got[i] =
          SoftmaxXentExampleLossOnce(s, x.data(), y.data(), i, scratch.data());
    }
    EXPECT_TRUE(BitsEqual(got, want));
  }
}

// Bounds (u = 2^-24, z_j = x_j - m, p_j the softmax):
//   loss_i: u (4 |log s| + 4 |z_y| + 2 max|z| + C + 8)
//           (rounding of z, exp <= 1 ulp, the canonical sum of C terms,
//            log <= 1 ulp, the final subtraction)
//   loss:   mean of the loss_i bounds + (N + 2) u mean|loss_i|
//   grad:   u (|p_j| (2 |z_j| + C + 12) + 2 |p_j - onehot|) / N
//           (the last term: rounding of p - 1 and of the division by N)
TEST(SoftmaxXentTest, WithinBoundOfFloat64Reference) {
  double worst_loss = 0.0, worst_grad = 0.0;
  uint32_t seed = 100;
  for (const SoftmaxShape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "n=" << s.n << " c=" << s.c);
    const std::vector<float> x = RandomFloats(s.n * s.c, seed++, -6.0f, 6.0f);
    const std::vector<int32_t> y = RandomLabels(s.n, s.c, seed++);
    const double ref = reference::SoftmaxXent(x, y, s.n, s.c);
    const std::vector<double> gref = reference::SoftmaxXentGrad(x, y, s.n, s.c);

    double loss_bound = 0.0, abs_losses = 0.0;
    std::vector<double> gbound(s.n * s.c);
    for (int64_t i = 0; i < s.n; ++i) {
      const float* row = &x[i * s.c];
      const double m = *std::max_element(row, row + s.c);
      double sum = 0.0, max_z = 0.0;
      for (int64_t j = 0; j < s.c; ++j) {
        sum += std::exp(row[j] - m);
        max_z = std::max(max_z, std::fabs(row[j] - m));
      }
      const double zy = std::fabs(row[y[i]] - m);
      loss_bound += kFloatU * (4 * std::fabs(std::log(sum)) + 4 * zy +
                               2 * max_z + s.c + 8);
      abs_losses += std::fabs(std::log(sum) + zy);
      for (int64_t j = 0; j < s.c; ++j) {
        const double p = std::exp(row[j] - m) / sum;
        gbound[i * s.c + j] = kFloatU *
                              (p * (2 * std::fabs(row[j] - m) + s.c + 12) +
                               2 * std::fabs(p - (j == y[i] ? 1.0 : 0.0))) /
                              s.n;
      }
    }
    loss_bound = loss_bound / s.n + (s.n + 2) * kFloatU * abs_losses / s.n;
    double ratio = 0.0;
    EXPECT_TRUE(WithinBound({Loss(s, x, y)}, {ref}, {loss_bound}, &ratio));
    worst_loss = std::max(worst_loss, ratio);
    EXPECT_TRUE(WithinBound(Grad(s, x, y), gref, gbound, &ratio));
    worst_grad = std::max(worst_grad, ratio);
  }
  std::cout << "softmax_xent: worst |error| / bound: loss " << worst_loss
            << ", grad " << worst_grad << "\n";
}

TEST(SoftmaxXentTest, GradientMatchesFiniteDifferences) {
  const SoftmaxShape s{4, 6};
  std::vector<float> x = RandomFloats(s.n * s.c, 7, -3.0f, 3.0f);
  const std::vector<int32_t> y = RandomLabels(s.n, s.c, 8);
  const std::vector<float> g = Grad(s, x, y);
  for (size_t e = 0; e < x.size(); ++e) {
    const float orig = x[e];
    const float plus = orig + 0x1p-10f, minus = orig - 0x1p-10f;
    x[e] = plus;
    const double lp = reference::SoftmaxXent(x, y, s.n, s.c);
    x[e] = minus;
    const double lm = reference::SoftmaxXent(x, y, s.n, s.c);
    x[e] = orig;
    const double fd = (lp - lm) / (static_cast<double>(plus) - minus);
    EXPECT_NEAR(g[e], fd, 2e-6) << "dlogits[" << e << "]";
  }
}

TEST(SoftmaxXentTest, UniformLogitsGiveExactGradient) {
  // All logits equal: e_j = exp(0) = 1, s = C, p = 1/C. With C and N powers
  // of two every step is exact, so the gradient equals the float64
  // reference bit for bit and the loss is CanonicalLog(C).
  const SoftmaxShape s{4, 8};
  const std::vector<float> x(s.n * s.c, 0.75f);
  const std::vector<int32_t> y = {0, 7, 3, 3};
  EXPECT_TRUE(BitsEqualRounded(Grad(s, x, y),
                               reference::SoftmaxXentGrad(x, y, s.n, s.c)));
  const float log8 = CanonicalLog(8.0f);
  // (l + l) + l) + l over 4 equal terms, then / 4.
  const float want = (((log8 + log8) + log8) + log8) / 4.0f;
  EXPECT_EQ(FloatBits(Loss(s, x, y)), FloatBits(want));
}

TEST(SoftmaxXentTest, ShiftInvariantAndNoOverflow) {
  // Logits on a 2^-8 grid in [-4, 4]: adding 1024 is exact and so is
  // subtracting the row max, so the results are bit-identical.
  const SoftmaxShape s{6, 20};
  std::vector<float> x = RandomFloats(s.n * s.c, 9, -4.0f, 4.0f);
  for (float& v : x) v = std::round(v * 256.0f) / 256.0f;
  std::vector<float> shifted = x;
  for (float& v : shifted) v += 1024.0f;
  const std::vector<int32_t> y = RandomLabels(s.n, s.c, 10);
  const float loss = Loss(s, x, y);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_EQ(FloatBits(Loss(s, shifted, y)), FloatBits(loss));
  EXPECT_TRUE(BitsEqual(Grad(s, shifted, y), Grad(s, x, y)));
}

TEST(SoftmaxXentTest, NaNStaysInItsRow) {
  const SoftmaxShape s{3, 4};
  std::vector<float> x = RandomFloats(s.n * s.c, 11);
  x[1 * s.c + 2] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<int32_t> y = {0, 1, 2};
  EXPECT_TRUE(std::isnan(Loss(s, x, y)));
  const std::vector<float> g = Grad(s, x, y);
  for (int64_t j = 0; j < s.c; ++j) {
    EXPECT_TRUE(std::isfinite(g[0 * s.c + j]));
    EXPECT_TRUE(std::isnan(g[1 * s.c + j]));
    EXPECT_TRUE(std::isfinite(g[2 * s.c + j]));
  }
}

TEST(SoftmaxXentTest, ElementFunctionIsOrderIndependent) {
  const SoftmaxShape s{4, 37};
  const std::vector<float> x = RandomFloats(s.n * s.c, 12, -5.0f, 5.0f);
  const std::vector<int32_t> y = RandomLabels(s.n, s.c, 13);
  const std::vector<float> g = Grad(s, x, y);
  std::vector<float> z(g.size(), 0.0f);
  for (int64_t i = s.n - 1; i >= 0; --i) {
    const SoftmaxRowStats st = SoftmaxRowStatsOf(&x[i * s.c], s.c);
    for (int64_t t = 0; t < s.c; ++t) {
      const int64_t j = (t * 5) % s.c;  // 5 is coprime with 37
      z[i * s.c + j] = SoftmaxXentGradElement(s, &x[i * s.c], y[i], st, j);
    }
  }
  EXPECT_TRUE(BitsEqual(z, g));
}

}  // namespace
}  // namespace lockstep::canonical
