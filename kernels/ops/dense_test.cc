// dense.forward / grad_input / grad_weight: exact-integer family (bit for
// bit), float64 reference within the canonical-sum bound, canonical order
// (bit for bit vs CanonicalDot over the gathered operands), finite
// differences.
#include "kernels/ops/dense.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <tuple>
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
using ::lockstep::testing::RandomFloats;
using ::lockstep::testing::SmallInts;
using ::lockstep::testing::WithinBound;

struct Case {
  int64_t m, k, n;
  bool tx, tw;
  std::string Name() const {
    return absl::StrFormat("m=%d k=%d n=%d tx=%d tw=%d", m, k, n, tx, tw);
  }
  DenseShape Shape() const { return DenseShape{m, k, n, tx, tw}; }
};

std::vector<Case> AllTransposes(int64_t m, int64_t k, int64_t n) {
  std::vector<Case> cases;
  for (bool tx : {false, true})
    for (bool tw : {false, true}) cases.push_back(Case{m, k, n, tx, tw});
  return cases;
}

std::vector<float> Forward(const Case& c, const std::vector<float>& x,
                           const std::vector<float>& w) {
  std::vector<float> y(c.m * c.n, -1.0f);
  DenseForward(c.Shape(), x.data(), w.data(), y.data());
  return y;
}
std::vector<float> GradInput(const Case& c, const std::vector<float>& dy,
                             const std::vector<float>& w) {
  std::vector<float> dx(c.m * c.k, -1.0f);
  DenseGradInput(c.Shape(), dy.data(), w.data(), dx.data());
  return dx;
}
std::vector<float> GradWeight(const Case& c, const std::vector<float>& x,
                              const std::vector<float>& dy) {
  std::vector<float> dw(c.k * c.n, -1.0f);
  DenseGradWeight(c.Shape(), x.data(), dy.data(), dw.data());
  return dw;
}

std::vector<float> Abs(std::vector<float> v) {
  for (float& x : v) x = std::fabs(x);
  return v;
}

TEST(DenseTest, ExactIntegerFamilyMatchesReferenceBitForBit) {
  std::vector<Case> cases;
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{3, 5, 4},
                         {1, 1, 1},
                         {2, 0, 3},
                         {7, 300, 5},
                         {5, 3, 600},
                         {520, 2, 3}}) {
    for (const Case& c : AllTransposes(m, k, n)) cases.push_back(c);
  }
  uint32_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.Name());
    const std::vector<float> x = SmallInts(c.m * c.k, seed++);
    const std::vector<float> w = SmallInts(c.k * c.n, seed++);
    const std::vector<float> dy = SmallInts(c.m * c.n, seed++);
    EXPECT_TRUE(BitsEqualRounded(
        Forward(c, x, w), reference::Dense(x, w, c.m, c.k, c.n, c.tx, c.tw)));
    EXPECT_TRUE(BitsEqualRounded(
        GradInput(c, dy, w),
        reference::DenseGradInput(dy, w, c.m, c.k, c.n, c.tx, c.tw)));
    EXPECT_TRUE(BitsEqualRounded(
        GradWeight(c, x, dy),
        reference::DenseGradWeight(x, dy, c.m, c.k, c.n, c.tx, c.tw)));
  }
}

// Bound per output: CanonicalSumBound(depth, sum |a_i b_i|) (test_util.h).
TEST(DenseTest, RandomInputsWithinCanonicalSumBound) {
  double worst = 0.0;
  uint32_t seed = 100;
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{4, 17, 6},
                         {3, 700, 5},
                         {300, 4, 300}}) {
    for (const Case& c : AllTransposes(m, k, n)) {
      SCOPED_TRACE(c.Name());
      const std::vector<float> x = RandomFloats(c.m * c.k, seed++);
      const std::vector<float> w = RandomFloats(c.k * c.n, seed++);
      const std::vector<float> dy = RandomFloats(c.m * c.n, seed++);
      double ratio = 0.0;

      std::vector<double> abs =
          reference::Dense(Abs(x), Abs(w), c.m, c.k, c.n, c.tx, c.tw);
      for (double& a : abs) a = CanonicalSumBound(c.k, a);
      EXPECT_TRUE(WithinBound(Forward(c, x, w),
                              reference::Dense(x, w, c.m, c.k, c.n, c.tx, c.tw),
                              abs, &ratio));
      worst = std::max(worst, ratio);

      abs =
          reference::DenseGradInput(Abs(dy), Abs(w), c.m, c.k, c.n, c.tx, c.tw);
      for (double& a : abs) a = CanonicalSumBound(c.n, a);
      EXPECT_TRUE(WithinBound(
          GradInput(c, dy, w),
          reference::DenseGradInput(dy, w, c.m, c.k, c.n, c.tx, c.tw), abs,
          &ratio));
      worst = std::max(worst, ratio);

      abs = reference::DenseGradWeight(Abs(x), Abs(dy), c.m, c.k, c.n, c.tx,
                                       c.tw);
      for (double& a : abs) a = CanonicalSumBound(c.m, a);
      EXPECT_TRUE(WithinBound(
          GradWeight(c, x, dy),
          reference::DenseGradWeight(x, dy, c.m, c.k, c.n, c.tx, c.tw), abs,
          &ratio));
      worst = std::max(worst, ratio);
    }
  }
  std::cout << "dense: worst |error| / bound = " << worst << "\n";
}

// Each output is exactly CanonicalDot over the gathered operands in the
// op's canonical index order (k, n, m respectively). Wide-range values make
// any other order or grouping show up in the bits.
TEST(DenseTest, CanonicalOrderPerOutput) {
  auto wide = [](size_t count, uint32_t seed) {
    std::vector<float> v = RandomFloats(count, seed);
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = std::ldexp(v[i], (i * 7) % 31 - 15);
    return v;
  };
  for (const Case& c : AllTransposes(3, 600, 2)) {
    SCOPED_TRACE(c.Name());
    const std::vector<float> x = wide(c.m * c.k, 1), w = wide(c.k * c.n, 2);
    const std::vector<float> y = Forward(c, x, w);
    std::vector<float> want(c.m * c.n);
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        std::vector<float> a(c.k), b(c.k);
        for (int64_t p = 0; p < c.k; ++p) {
          a[p] = static_cast<float>(reference::XAt(x, c.m, c.k, c.tx, i, p));
          b[p] = static_cast<float>(reference::WAt(w, c.k, c.n, c.tw, p, j));
        }
        want[i * c.n + j] = CanonicalDot(a.data(), 1, b.data(), 1, c.k);
      }
    EXPECT_TRUE(BitsEqual(y, want));
  }
  for (const Case& c : AllTransposes(2, 3, 600)) {  // grad_input: over n
    SCOPED_TRACE(c.Name());
    const std::vector<float> dy = wide(c.m * c.n, 3), w = wide(c.k * c.n, 4);
    const std::vector<float> dx = GradInput(c, dy, w);
    std::vector<float> want(c.m * c.k);
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t p = 0; p < c.k; ++p) {
        std::vector<float> a(c.n), b(c.n);
        for (int64_t j = 0; j < c.n; ++j) {
          a[j] = dy[i * c.n + j];
          b[j] = static_cast<float>(reference::WAt(w, c.k, c.n, c.tw, p, j));
        }
        want[c.tx ? p * c.m + i : i * c.k + p] =
            CanonicalDot(a.data(), 1, b.data(), 1, c.n);
      }
    EXPECT_TRUE(BitsEqual(dx, want));
  }
  for (const Case& c : AllTransposes(600, 3, 2)) {  // grad_weight: over m
    SCOPED_TRACE(c.Name());
    const std::vector<float> x = wide(c.m * c.k, 5), dy = wide(c.m * c.n, 6);
    const std::vector<float> dw = GradWeight(c, x, dy);
    std::vector<float> want(c.k * c.n);
    for (int64_t p = 0; p < c.k; ++p)
      for (int64_t j = 0; j < c.n; ++j) {
        std::vector<float> a(c.m), b(c.m);
        for (int64_t i = 0; i < c.m; ++i) {
          a[i] = static_cast<float>(reference::XAt(x, c.m, c.k, c.tx, i, p));
          b[i] = dy[i * c.n + j];
        }
        want[c.tw ? j * c.k + p : p * c.n + j] =
            CanonicalDot(a.data(), 1, b.data(), 1, c.m);
      }
    EXPECT_TRUE(BitsEqual(dw, want));
  }
}

// L(x, w) = sum_ij r_ij y_ij. Central differences of the float64 reference
// forward must match grad_input(dy = r) and grad_weight(dy = r) computed by
// the float32 ops.
TEST(DenseTest, GradientsMatchFiniteDifferences) {
  for (const Case& c : AllTransposes(3, 4, 5)) {
    SCOPED_TRACE(c.Name());
    std::vector<float> x = RandomFloats(c.m * c.k, 7);
    std::vector<float> w = RandomFloats(c.k * c.n, 8);
    const std::vector<float> r = RandomFloats(c.m * c.n, 9);
    auto loss = [&]() {
      const std::vector<double> y =
          reference::Dense(x, w, c.m, c.k, c.n, c.tx, c.tw);
      double l = 0.0;
      for (size_t i = 0; i < y.size(); ++i) l += r[i] * y[i];
      return l;
    };
    auto fd = [&](std::vector<float>& v, size_t e) {
      const float orig = v[e];
      const float plus = orig + 0x1p-8f, minus = orig - 0x1p-8f;
      v[e] = plus;
      const double lp = loss();
      v[e] = minus;
      const double lm = loss();
      v[e] = orig;
      return (lp - lm) / (static_cast<double>(plus) - minus);
    };
    const std::vector<float> dx = GradInput(c, r, w);
    for (size_t e = 0; e < x.size(); ++e) {
      EXPECT_NEAR(dx[e], fd(x, e), 1e-5) << "dx[" << e << "]";
    }
    const std::vector<float> dw = GradWeight(c, x, r);
    for (size_t e = 0; e < w.size(); ++e) {
      EXPECT_NEAR(dw[e], fd(w, e), 1e-5) << "dw[" << e << "]";
    }
  }
}

TEST(DenseTest, ElementFunctionIsOrderIndependent) {
  // A GPU grid computes outputs in any order; MatMulElement must give the
  // same bits as the driver whatever order outputs are visited in.
  const Case c{5, 300, 7, true, false};
  const std::vector<float> x = RandomFloats(c.m * c.k, 11);
  const std::vector<float> w = RandomFloats(c.k * c.n, 12);
  const std::vector<float> y = Forward(c, x, w);
  const MatMulShape s = DenseForwardShape(c.Shape());
  std::vector<float> z(c.m * c.n, 0.0f);
  for (int64_t t = c.m * c.n - 1; t >= 0; --t) {
    const int64_t idx = (t * 13) % (c.m * c.n);  // 13 is coprime with 35
    z[idx] = MatMulElement(s, x.data(), w.data(), idx / c.n, idx % c.n);
  }
  EXPECT_TRUE(BitsEqual(z, y));
}

}  // namespace
}  // namespace lockstep::canonical
