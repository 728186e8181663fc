// Op set v2 spec bodies (activations.h, norm.h) against independent float64
// implementations, and the float64 gradients against central finite
// differences of the float64 forward. The bit-level properties (same bits
// on every ISA, thread count and the CUDA emulation) are tested by
// kernels/cpu/all_ops_test and kernels/cuda/emulation_test.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/canonical/float_bits.h"
#include "kernels/canonical/reduce.h"
#include "kernels/ops/activations.h"
#include "kernels/ops/dropout.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/matmul.h"
#include "kernels/ops/movement.h"
#include "kernels/ops/norm.h"

namespace lockstep::canonical {
namespace {

constexpr double kPi = 3.14159265358979323846;

double RefForward(Activation a, double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  switch (a) {
    case Activation::kSigmoid:
      return s;
    case Activation::kTanh:
      return std::tanh(x);
    case Activation::kSilu:
      return x * s;
    case Activation::kGelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::kGeluTanh:
      return 0.5 * x *
             (1.0 +
              std::tanh(std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x)));
  }
  return 0.0;
}

double RefGrad(Activation a, double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  switch (a) {
    case Activation::kSigmoid:
      return s * (1.0 - s);
    case Activation::kTanh:
      return 1.0 - std::tanh(x) * std::tanh(x);
    case Activation::kSilu:
      return s * (1.0 + x * (1.0 - s));
    case Activation::kGelu:
      return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) +
             x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * kPi);
    case Activation::kGeluTanh: {
      const double k = std::sqrt(2.0 / kPi);
      const double u = k * (x + 0.044715 * x * x * x);
      const double t = std::tanh(u);
      return 0.5 * (1.0 + t) +
             0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
    }
  }
  return 0.0;
}

const Activation kAll[] = {Activation::kSigmoid, Activation::kTanh,
                           Activation::kSilu, Activation::kGelu,
                           Activation::kGeluTanh};

// |float result - float64 reference| <= 16 * 2^-24 * max(|ref|, 1): a few
// roundings plus the portable math's few-ULP error, relative for large
// values; below 1 the bound is absolute because 1 - s, 1 - t*t and
// 1 + erf(x) are formed from rounded values near 1 (errors of order
// ulp(1) = 2^-23 that no float32 formula avoids).
void ExpectClose(float got, double want, const char* what, double x) {
  const double scale = std::max(std::fabs(want), 1.0);
  EXPECT_LE(std::fabs(static_cast<double>(got) - want), 16 * 0x1.0p-24 * scale)
      << what << " at x=" << x << " got " << got << " want " << want;
}

TEST(ActivationsTest, ForwardAndGradAgreeWithFloat64) {
  for (Activation a : kAll) {
    for (double x = -12.0; x <= 12.0; x += 0.0137) {
      const float xf = static_cast<float>(x);
      const double xd = xf;
      ExpectClose(ActivationForwardElement(a, xf), RefForward(a, xd), "forward",
                  xd);
      ExpectClose(ActivationGradElement(a, xf, 1.0f), RefGrad(a, xd), "grad",
                  xd);
      // dy scales the derivative by one rounding.
      const float g2 = ActivationGradElement(a, xf, -0.5f);
      EXPECT_EQ(g2, -0.5f * ActivationGradElement(a, xf, 1.0f));
    }
  }
}

TEST(ActivationsTest, Float64GradientsMatchFiniteDifferences) {
  for (Activation a : kAll) {
    for (double x = -6.0; x <= 6.0; x += 0.173) {
      const double h = 1e-6;
      const double fd = (RefForward(a, x + h) - RefForward(a, x - h)) / (2 * h);
      EXPECT_NEAR(RefGrad(a, x), fd, 1e-8)
          << "activation " << static_cast<int>(a) << " x=" << x;
    }
  }
}

TEST(ActivationsTest, SpecialValues) {
  const float nan = std::nanf("");
  for (Activation a : kAll) {
    EXPECT_EQ(LsFloatToBits(ActivationForwardElement(a, nan)),
              kCanonicalNanBits);
    EXPECT_EQ(LsFloatToBits(ActivationGradElement(a, nan, 1.0f)),
              kCanonicalNanBits);
    EXPECT_EQ(LsFloatToBits(ActivationGradElement(a, 0.5f, nan)),
              kCanonicalNanBits);
  }
  EXPECT_EQ(ActivationForwardElement(Activation::kSigmoid, -200.0f), 0.0f);
  EXPECT_EQ(ActivationForwardElement(Activation::kSigmoid, 200.0f), 1.0f);
  EXPECT_EQ(ActivationForwardElement(Activation::kGelu, 10.0f), 10.0f);
  EXPECT_EQ(ActivationForwardElement(Activation::kGelu, -10.0f), -0.0f);
  EXPECT_EQ(ActivationForwardElement(Activation::kSilu, 0.0f), 0.0f);
}

// ---- softmax and layer norm ------------------------------------------------

std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<double> RefSoftmax(const std::vector<double>& x, int64_t rows,
                               int64_t d) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = x[r * d];
    for (int64_t j = 1; j < d; ++j) m = std::max(m, x[r * d + j]);
    double s = 0;
    for (int64_t j = 0; j < d; ++j) s += std::exp(x[r * d + j] - m);
    for (int64_t j = 0; j < d; ++j)
      y[r * d + j] = std::exp(x[r * d + j] - m) / s;
  }
  return y;
}

std::vector<double> RefLayerNorm(const std::vector<double>& x,
                                 const std::vector<double>& gamma,
                                 const std::vector<double>& beta, int64_t rows,
                                 int64_t d, double eps) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) mean += x[r * d + j];
    mean /= d;
    for (int64_t j = 0; j < d; ++j) {
      var += (x[r * d + j] - mean) * (x[r * d + j] - mean);
    }
    var /= d;
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < d; ++j) {
      y[r * d + j] = (x[r * d + j] - mean) * rstd * gamma[j] + beta[j];
    }
  }
  return y;
}

std::vector<double> ToDouble(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Loss L = sum_i w_i * f(x)_i; its gradient with respect to `param` by
// central differences (float64).
std::vector<double> NumericGrad(
    const std::function<std::vector<double>(const std::vector<double>&)>& f,
    std::vector<double> param, const std::vector<double>& w) {
  std::vector<double> g(param.size());
  const double h = 1e-6;
  for (size_t i = 0; i < param.size(); ++i) {
    const double keep = param[i];
    param[i] = keep + h;
    const std::vector<double> up = f(param);
    param[i] = keep - h;
    const std::vector<double> down = f(param);
    param[i] = keep;
    double d = 0;
    for (size_t k = 0; k < w.size(); ++k) d += w[k] * (up[k] - down[k]);
    g[i] = d / (2 * h);
  }
  return g;
}

// Relative L2 error of a float result against a float64 reference.
double RelL2(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

TEST(SoftmaxLastTest, ForwardAndGradAgainstFloat64AndFiniteDifferences) {
  const int64_t rows = 5, d = 300;  // a row crosses the 256-term chunk
  RowShape s;
  s.rows = rows;
  s.d = d;
  const std::vector<float> x = RandomFloats(rows * d, 1, -4.0f, 4.0f);
  const std::vector<float> dy = RandomFloats(rows * d, 2, -1.0f, 1.0f);
  std::vector<float> y(x.size()), dx(x.size());
  SoftmaxLastForward(s, x.data(), y.data());
  SoftmaxLastGrad(s, x.data(), dy.data(), dx.data());
  const auto ref = [&](const std::vector<double>& xv) {
    return RefSoftmax(xv, rows, d);
  };
  EXPECT_LT(RelL2(y, ref(ToDouble(x))), 1e-6);
  const std::vector<double> num = NumericGrad(ref, ToDouble(x), ToDouble(dy));
  EXPECT_LT(RelL2(dx, num), 1e-5);
}

// Causal rows of [B, T, T]: row r is query i = r mod T; entries j > i are
// excluded (probability 0, no gradient).
std::vector<double> RefCausalSoftmax(const std::vector<double>& x, int64_t rows,
                                     int64_t t) {
  std::vector<double> y(x.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = r % t + 1;
    double m = x[r * t];
    for (int64_t j = 1; j < n; ++j) m = std::max(m, x[r * t + j]);
    double s = 0;
    for (int64_t j = 0; j < n; ++j) s += std::exp(x[r * t + j] - m);
    for (int64_t j = 0; j < n; ++j) {
      y[r * t + j] = std::exp(x[r * t + j] - m) / s;
    }
  }
  return y;
}

uint32_t Bits(float f) { return LsFloatToBits(f); }

// The CPU kernels' rows (each exp once, kept in the output row) give the
// spec rows' bits: plain and causal rows, a row crossing the 256-term
// chunk, and rows holding NaN, +-Inf and -0.
TEST(SoftmaxLastTest, RowsWithOneExpPerElementGiveTheSpecBits) {
  for (const bool causal : {false, true}) {
    RowShape s;
    s.rows = 6;
    s.d = 300;
    s.causal = causal;
    std::vector<float> x = RandomFloats(s.rows * s.d, 21, -6.0f, 6.0f);
    const std::vector<float> dy = RandomFloats(s.rows * s.d, 22, -1.0f, 1.0f);
    x[s.d + 3] = std::numeric_limits<float>::quiet_NaN();
    x[2 * s.d + 1] = std::numeric_limits<float>::infinity();
    x[3 * s.d + 0] = -std::numeric_limits<float>::infinity();
    x[4 * s.d + 2] = -0.0f;
    for (int64_t r = 0; r < s.rows; ++r) {
      std::vector<float> y(s.rows * s.d, 7.0f), y_once(s.rows * s.d, 7.0f);
      std::vector<float> dx(s.rows * s.d, 7.0f), dx_once(s.rows * s.d, 7.0f);
      SoftmaxLastForwardRow(s, x.data(), y.data(), r);
      SoftmaxLastForwardRowOnce(s, x.data(), y_once.data(), r);
      SoftmaxLastGradRow(s, x.data(), dy.data(), dx.data(), r);
      SoftmaxLastGradRowOnce(s, x.data(), dy.data(), dx_once.data(), r);
      for (int64_t i = 0; i < s.rows * s.d; ++i) {
        ASSERT_EQ(LsFloatToBits(y_once[i]), LsFloatToBits(y[i]))
            << "y, causal " << causal << ", row " << r << ", element " << i;
        ASSERT_EQ(LsFloatToBits(dx_once[i]), LsFloatToBits(dx[i]))
            << "dx, causal " << causal << ", row " << r << ", element " << i;
      }
    }
  }
}

TEST(SoftmaxLastTest, CausalAgainstFloat64FiniteDifferencesAndPrefixRows) {
  const int64_t t = 300, rows = 2 * t;  // [2, 300, 300]: rows cross a chunk
  RowShape s;
  s.rows = rows;
  s.d = t;
  s.causal = true;
  std::vector<float> x = RandomFloats(rows * t, 3, -4.0f, 4.0f);
  std::vector<float> dy = RandomFloats(rows * t, 4, -1.0f, 1.0f);
  // What lies beyond the diagonal never matters, not even NaN or infinity.
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = r % t + 1; j < t; j += 7) {
      x[r * t + j] = (j % 2) ? NAN : INFINITY;
      dy[r * t + j] = NAN;
    }
  }
  std::vector<float> y(x.size()), dx(x.size());
  SoftmaxLastForward(s, x.data(), y.data());
  SoftmaxLastGrad(s, x.data(), dy.data(), dx.data());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = r % t + 1;
    for (int64_t j = n; j < t; ++j) {
      ASSERT_EQ(Bits(y[r * t + j]), 0u) << "y row " << r << " col " << j;
      ASSERT_EQ(Bits(dx[r * t + j]), 0u) << "dx row " << r << " col " << j;
    }
    // Row r is, bit for bit, the plain softmax of its first n entries.
    RowShape prefix;
    prefix.rows = 1;
    prefix.d = n;
    std::vector<float> py(n), pdx(n);
    SoftmaxLastForward(prefix, x.data() + r * t, py.data());
    SoftmaxLastGrad(prefix, x.data() + r * t, dy.data() + r * t, pdx.data());
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(Bits(y[r * t + j]), Bits(py[j])) << r << " " << j;
      ASSERT_EQ(Bits(dx[r * t + j]), Bits(pdx[j])) << r << " " << j;
    }
  }
  // Against float64 on finite inputs (the masked entries zeroed, as the
  // reference ignores them anyway).
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = r % t + 1; j < t; ++j) x[r * t + j] = dy[r * t + j] = 0;
  }
  SoftmaxLastForward(s, x.data(), y.data());
  SoftmaxLastGrad(s, x.data(), dy.data(), dx.data());
  const auto ref = [&](const std::vector<double>& xv) {
    return RefCausalSoftmax(xv, rows, t);
  };
  EXPECT_LT(RelL2(y, ref(ToDouble(x))), 1e-6);
  // Finite differences on a smaller case (the full one costs 2 * 180,000
  // reference evaluations).
  const int64_t t2 = 9, rows2 = 3 * t2;
  RowShape s2;
  s2.rows = rows2;
  s2.d = t2;
  s2.causal = true;
  const std::vector<float> x2 = RandomFloats(rows2 * t2, 5, -3.0f, 3.0f);
  const std::vector<float> dy2 = RandomFloats(rows2 * t2, 6, -1.0f, 1.0f);
  std::vector<float> dx2(x2.size());
  SoftmaxLastGrad(s2, x2.data(), dy2.data(), dx2.data());
  const std::vector<double> num = NumericGrad(
      [&](const std::vector<double>& xv) {
        return RefCausalSoftmax(xv, rows2, t2);
      },
      ToDouble(x2), ToDouble(dy2));
  EXPECT_LT(RelL2(dx2, num), 1e-5);
}

// ---- batched matmul, transpose -------------------------------------------

struct MatMulCase {
  int64_t batch, m, k, n;
  bool ta, tb;
  float scale;
};

// y[t, i, j] = scale * sum_p A(t, i, p) B(t, p, j) in float64, A and B read
// through the transposes.
std::vector<double> RefMatMul(const MatMulCase& c, const std::vector<double>& a,
                              const std::vector<double>& b) {
  std::vector<double> y(c.batch * c.m * c.n);
  for (int64_t t = 0; t < c.batch; ++t) {
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < c.k; ++p) {
          const double av = c.ta ? a[t * c.m * c.k + p * c.m + i]
                                 : a[t * c.m * c.k + i * c.k + p];
          const double bv = c.tb ? b[t * c.k * c.n + j * c.k + p]
                                 : b[t * c.k * c.n + p * c.n + j];
          acc += av * bv;
        }
        y[(t * c.m + i) * c.n + j] = c.scale * acc;
      }
    }
  }
  return y;
}

MatMulDims DimsOf(const MatMulCase& c) {
  return MatMulDims{DenseShape{c.m, c.k, c.n, c.ta, c.tb}, c.batch, c.scale};
}

std::vector<float> SmallInts(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-8, 8);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(d(rng));
  return v;
}

const MatMulCase kMatMulCases[] = {{3, 4, 300, 5, false, false, 1.0f},
                                   {2, 6, 7, 3, true, true, 0.25f},
                                   {4, 5, 8, 6, false, true, 0.17677669f},
                                   {2, 3, 4, 5, true, false, -2.0f}};

TEST(BatchedMatMulTest, EachEntryIsTheDenseOpThenOneScaleMultiply) {
  for (const MatMulCase& c : kMatMulCases) {
    SCOPED_TRACE(c.k);
    const MatMulDims d = DimsOf(c);
    const int64_t na = c.batch * c.m * c.k, nb = c.batch * c.k * c.n,
                  ny = c.batch * c.m * c.n;
    const std::vector<float> a = RandomFloats(na, 7, -1, 1);
    const std::vector<float> b = RandomFloats(nb, 8, -1, 1);
    const std::vector<float> dy = RandomFloats(ny, 9, -1, 1);
    std::vector<float> y(ny), da(na), db(nb);
    BatchedMatMul(MatMulForwardShape(d), a.data(), b.data(), y.data());
    BatchedMatMul(MatMulGradAShape(d), dy.data(), b.data(), da.data());
    BatchedMatMul(MatMulGradBShape(d), a.data(), dy.data(), db.data());
    for (int64_t t = 0; t < c.batch; ++t) {
      std::vector<float> ey(c.m * c.n), eda(c.m * c.k), edb(c.k * c.n);
      DenseForward(d.d, a.data() + t * c.m * c.k, b.data() + t * c.k * c.n,
                   ey.data());
      DenseGradInput(d.d, dy.data() + t * c.m * c.n, b.data() + t * c.k * c.n,
                     eda.data());
      DenseGradWeight(d.d, a.data() + t * c.m * c.k, dy.data() + t * c.m * c.n,
                      edb.data());
      for (size_t i = 0; i < ey.size(); ++i) {
        ASSERT_EQ(Bits(y[t * ey.size() + i]), Bits(ey[i] * c.scale)) << i;
      }
      for (size_t i = 0; i < eda.size(); ++i) {
        ASSERT_EQ(Bits(da[t * eda.size() + i]), Bits(eda[i] * c.scale)) << i;
      }
      for (size_t i = 0; i < edb.size(); ++i) {
        ASSERT_EQ(Bits(db[t * edb.size() + i]), Bits(edb[i] * c.scale)) << i;
      }
    }
  }
}

TEST(BatchedMatMulTest, AgainstFloat64ExactIntegersAndFiniteDifferences) {
  for (const MatMulCase& c : kMatMulCases) {
    SCOPED_TRACE(c.k);
    const MatMulDims d = DimsOf(c);
    const int64_t na = c.batch * c.m * c.k, nb = c.batch * c.k * c.n,
                  ny = c.batch * c.m * c.n;
    // Small integers with power-of-two scales: every sum is exact, so the
    // result is the float64 one, bit for bit.
    if (c.scale == 1.0f || c.scale == 0.25f || c.scale == -2.0f) {
      const std::vector<float> a = SmallInts(na, 10);
      const std::vector<float> b = SmallInts(nb, 11);
      std::vector<float> y(ny);
      BatchedMatMul(MatMulForwardShape(d), a.data(), b.data(), y.data());
      const std::vector<double> want = RefMatMul(c, ToDouble(a), ToDouble(b));
      for (int64_t i = 0; i < ny; ++i) {
        ASSERT_EQ(Bits(y[i]), Bits(static_cast<float>(want[i]))) << i;
      }
    }
    const std::vector<float> a = RandomFloats(na, 12, -1, 1);
    const std::vector<float> b = RandomFloats(nb, 13, -1, 1);
    const std::vector<float> w = RandomFloats(ny, 14, -1, 1);  // dy
    std::vector<float> y(ny), da(na), db(nb);
    BatchedMatMul(MatMulForwardShape(d), a.data(), b.data(), y.data());
    BatchedMatMul(MatMulGradAShape(d), w.data(), b.data(), da.data());
    BatchedMatMul(MatMulGradBShape(d), a.data(), w.data(), db.data());
    EXPECT_LT(RelL2(y, RefMatMul(c, ToDouble(a), ToDouble(b))), 1e-6);
    const std::vector<double> num_a = NumericGrad(
        [&](const std::vector<double>& av) {
          return RefMatMul(c, av, ToDouble(b));
        },
        ToDouble(a), ToDouble(w));
    const std::vector<double> num_b = NumericGrad(
        [&](const std::vector<double>& bv) {
          return RefMatMul(c, ToDouble(a), bv);
        },
        ToDouble(b), ToDouble(w));
    EXPECT_LT(RelL2(da, num_a), 1e-5);
    EXPECT_LT(RelL2(db, num_b), 1e-5);
  }
}

TEST(TransposeTest, MovesEveryElementAndTheInverseRestoresIt) {
  // x [2, 3, 4, 5] -> perm (0, 2, 3, 1) -> y [2, 4, 5, 3].
  const int64_t dims[] = {2, 3, 4, 5};
  const int perm[] = {0, 2, 3, 1};
  const int64_t strides[] = {60, 20, 5, 1};
  TransposeShape s;
  s.rank = 4;
  s.numel = 120;
  for (int d = 0; d < 4; ++d) {
    s.out_dims[d] = dims[perm[d]];
    s.src_strides[d] = strides[perm[d]];
  }
  std::vector<uint32_t> x(120), y(120), back(120);
  for (uint32_t i = 0; i < 120; ++i) x[i] = 0x7FC00000u + i;  // NaN payloads
  Transpose(s, x.data(), y.data());
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t h = 0; h < 4; ++h) {
      for (int64_t w = 0; w < 5; ++w) {
        for (int64_t c = 0; c < 3; ++c) {
          ASSERT_EQ(y[((n * 4 + h) * 5 + w) * 3 + c],
                    x[((n * 3 + c) * 4 + h) * 5 + w]);
        }
      }
    }
  }
  // The inverse permutation (0, 3, 1, 2) over y's strides.
  const int inv[] = {0, 3, 1, 2};
  const int64_t ystrides[] = {60, 15, 3, 1};
  TransposeShape t;
  t.rank = 4;
  t.numel = 120;
  for (int d = 0; d < 4; ++d) {
    t.out_dims[d] = s.out_dims[inv[d]];
    t.src_strides[d] = ystrides[inv[d]];
  }
  Transpose(t, y.data(), back.data());
  EXPECT_EQ(back, x);
}

TEST(LayerNormTest, ForwardAndGradsAgainstFloat64AndFiniteDifferences) {
  const int64_t rows = 6, d = 300;
  RowShape s;
  s.rows = rows;
  s.d = d;
  s.epsilon = 1e-5f;
  const std::vector<float> x = RandomFloats(rows * d, 3, -2.0f, 3.0f);
  const std::vector<float> gamma = RandomFloats(d, 4, 0.5f, 1.5f);
  const std::vector<float> beta = RandomFloats(d, 5, -0.5f, 0.5f);
  const std::vector<float> dy = RandomFloats(rows * d, 6, -1.0f, 1.0f);
  std::vector<float> y(x.size()), dx(x.size()), dgamma(d), dbeta(d);
  std::vector<LayerNormRowStats> stats(rows);
  LayerNormForward(s, x.data(), gamma.data(), beta.data(), y.data());
  LayerNormGradInput(s, x.data(), gamma.data(), dy.data(), dx.data());
  LayerNormGradParams(s, x.data(), dy.data(), stats.data(), dgamma.data(),
                      dbeta.data());
  const double eps = static_cast<double>(s.epsilon);
  const std::vector<double> xd = ToDouble(x), gd = ToDouble(gamma),
                            bd = ToDouble(beta), w = ToDouble(dy);
  EXPECT_LT(RelL2(y, RefLayerNorm(xd, gd, bd, rows, d, eps)), 1e-6);
  EXPECT_LT(RelL2(dx, NumericGrad(
                          [&](const std::vector<double>& v) {
                            return RefLayerNorm(v, gd, bd, rows, d, eps);
                          },
                          xd, w)),
            1e-5);
  EXPECT_LT(RelL2(dgamma, NumericGrad(
                              [&](const std::vector<double>& v) {
                                return RefLayerNorm(xd, v, bd, rows, d, eps);
                              },
                              gd, w)),
            1e-5);
  EXPECT_LT(RelL2(dbeta, NumericGrad(
                             [&](const std::vector<double>& v) {
                               return RefLayerNorm(xd, gd, v, rows, d, eps);
                             },
                             bd, w)),
            1e-5);
}

// Training-mode batch norm over [N, C, S] in float64: y, and the running
// statistics after one update from `running`.
std::vector<double> RefBatchNorm(const std::vector<double>& x,
                                 const std::vector<double>& gamma,
                                 const std::vector<double>& beta, int64_t n,
                                 int64_t c, int64_t sp, double eps,
                                 double momentum,
                                 std::vector<double>* running) {
  std::vector<double> y(x.size());
  const double m = static_cast<double>(n * sp);
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = 0, vs = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < sp; ++k) mean += x[(i * c + ch) * sp + k];
    }
    mean /= m;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < sp; ++k) {
        const double d = x[(i * c + ch) * sp + k] - mean;
        vs += d * d;
      }
    }
    const double rstd = 1.0 / std::sqrt(vs / m + eps);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < sp; ++k) {
        const int64_t j = (i * c + ch) * sp + k;
        y[j] = (x[j] - mean) * rstd * gamma[ch] + beta[ch];
      }
    }
    if (running != nullptr) {
      (*running)[ch] = (1 - momentum) * (*running)[ch] + momentum * mean;
      (*running)[c + ch] =
          (1 - momentum) * (*running)[c + ch] + momentum * vs / (m - 1);
    }
  }
  return y;
}

TEST(BatchNormTest, TrainingForwardGradsAndRunningStatsAgainstFloat64) {
  const int64_t n = 6, c = 3, sp = 50;  // 300 values per channel
  ChannelShape s;
  s.n = n;
  s.c = c;
  s.spatial = sp;
  const std::vector<float> x = RandomFloats(n * c * sp, 7, -2.0f, 3.0f);
  const std::vector<float> gamma = RandomFloats(c, 8, 0.5f, 1.5f);
  const std::vector<float> beta = RandomFloats(c, 9, -0.5f, 0.5f);
  const std::vector<float> dy = RandomFloats(n * c * sp, 10, -1.0f, 1.0f);
  std::vector<float> running = {0.1f, -0.2f, 0.3f, 1.0f, 0.8f, 1.2f};
  std::vector<double> want_running(running.begin(), running.end());
  std::vector<float> y(x.size()), dx(x.size()), dgamma(c), dbeta(c);
  const std::vector<float> running_before = running;
  BatchNormForward(s, x.data(), gamma.data(), beta.data(), y.data(),
                   running.data());
  BatchNormGradInput(s, x.data(), gamma.data(), dy.data(),
                     running_before.data(), dx.data());
  BatchNormGradParams(s, x.data(), dy.data(), running_before.data(),
                      dgamma.data(), dbeta.data());
  const double eps = 1e-5;
  const std::vector<double> xd = ToDouble(x), gd = ToDouble(gamma),
                            bd = ToDouble(beta), w = ToDouble(dy);
  EXPECT_LT(
      RelL2(y, RefBatchNorm(xd, gd, bd, n, c, sp, eps, 0.1, &want_running)),
      1e-6);
  EXPECT_LT(RelL2(running, want_running), 1e-6);
  const auto f = [&](const std::vector<double>& xv,
                     const std::vector<double>& gv,
                     const std::vector<double>& bv) {
    return RefBatchNorm(xv, gv, bv, n, c, sp, eps, 0.1, nullptr);
  };
  EXPECT_LT(
      RelL2(dx, NumericGrad(
                    [&](const std::vector<double>& v) { return f(v, gd, bd); },
                    xd, w)),
      1e-5);
  EXPECT_LT(RelL2(dgamma, NumericGrad(
                              [&](const std::vector<double>& v) {
                                return f(xd, v, bd);
                              },
                              gd, w)),
            1e-5);
  EXPECT_LT(RelL2(dbeta, NumericGrad(
                             [&](const std::vector<double>& v) {
                               return f(xd, gd, v);
                             },
                             bd, w)),
            1e-5);
}

TEST(BatchNormTest, EvalUsesRunningStatisticsAndLeavesThemAlone) {
  ChannelShape s;
  s.n = 2;
  s.c = 2;
  s.spatial = 2;
  s.eval = true;
  const float x[] = {1, 2, 3, 4, 5, 6, 7, 8};
  const float gamma[] = {2, 0.5f};
  const float beta[] = {1, -1};
  float running[] = {1.0f, 2.0f, 3.0f, 0.25f};  // means 1, 2; vars 3, 0.25
  float y[8], dx[8], dgamma[2], dbeta[2];
  const float dy[] = {1, 1, 1, 1, 1, 1, 1, 1};
  BatchNormForward(s, x, gamma, beta, y, running);
  EXPECT_EQ(running[0], 1.0f);
  EXPECT_EQ(running[3], 0.25f);
  const double r0 = 1.0 / std::sqrt(3.0 + 1e-5),
               r1 = 1.0 / std::sqrt(0.25 + 1e-5);
  EXPECT_NEAR(y[0], (1 - 1) * r0 * 2 + 1, 1e-6);
  EXPECT_NEAR(y[2], (3 - 2) * r1 * 0.5 - 1, 1e-6);
  BatchNormGradInput(s, x, gamma, dy, running, dx);
  EXPECT_NEAR(dx[0], 2 * r0, 1e-6);
  EXPECT_NEAR(dx[3], 0.5 * r1, 1e-6);
  BatchNormGradParams(s, x, dy, running, dgamma, dbeta);
  EXPECT_EQ(dbeta[0], 4.0f);
  EXPECT_NEAR(dgamma[0], ((1 - 1) + (2 - 1) + (5 - 1) + (6 - 1)) * r0, 1e-5);
}

TEST(LayerNormTest, ConstantRowNormalisesToBeta) {
  RowShape s;
  s.rows = 1;
  s.d = 4;
  const float x[] = {2.5f, 2.5f, 2.5f, 2.5f};
  const float gamma[] = {1, 2, 3, 4};
  const float beta[] = {0.25f, -1, 0, 7};
  float y[4];
  LayerNormForward(s, x, gamma, beta, y);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(y[j], beta[j]);
}

// The sort lists each id's positions in increasing order, every position
// exactly once.
TEST(EmbeddingTest, SortPositionsByIdIsAStableCountingSort) {
  const int32_t ids[] = {2, 0, 2, 3, 0, 2};
  const EmbeddingShape s{6, 5, 1};
  int64_t offsets[6];
  int64_t order[6];
  SortPositionsById(s, ids, offsets, order);
  const int64_t want_offsets[] = {0, 2, 2, 5, 6, 6};
  const int64_t want_order[] = {1, 4, 0, 2, 5, 3};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(offsets[i], want_offsets[i]) << i;
  for (int i = 0; i < 6; ++i) EXPECT_EQ(order[i], want_order[i]) << i;
}

// Forward is an exact gather; the gradient of L = sum(y * r) with respect
// to w is the float64 scatter-add of r, and equals the central finite
// differences of L (L is linear in w: the differences are exact up to the
// float64 rounding of L). The canonical sum of each row is also checked
// against CanonicalSum over the row's terms gathered in position order,
// including a row of 800 terms (four chains and the tree).
TEST(EmbeddingTest, ForwardAndGradAgainstFloat64AndFiniteDifferences) {
  const EmbeddingShape s{1000, 6, 3};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  std::vector<int32_t> ids(s.positions);
  for (int64_t p = 0; p < s.positions; ++p) {
    ids[p] = (p % 10 < 7) ? 1 : static_cast<int32_t>(p % 4);  // id 4, 5 unused
  }
  std::vector<float> w(s.vocab * s.dim), r(s.positions * s.dim);
  for (float& v : w) v = real(rng);
  for (float& v : r) v = real(rng);
  for (int64_t i = 0; i < s.positions * s.dim; ++i) {
    const float y = EmbeddingForwardElement(s, ids.data(), w.data(), i);
    EXPECT_EQ(y, w[ids[i / s.dim] * s.dim + i % s.dim]);
  }
  std::vector<int64_t> offsets(s.vocab + 1), order(s.positions);
  SortPositionsById(s, ids.data(), offsets.data(), order.data());
  EXPECT_EQ(offsets[2] - offsets[1], 800);  // four chains, then the tree
  for (int64_t v = 0; v < s.vocab; ++v) {
    for (int64_t d = 0; d < s.dim; ++d) {
      const float got = EmbeddingGradFlatElement(
          s, offsets.data(), order.data(), r.data(), v * s.dim + d);
      std::vector<float> terms;
      double want = 0.0;
      for (int64_t p = 0; p < s.positions; ++p) {
        if (ids[p] != v) continue;
        terms.push_back(r[p * s.dim + d]);
        want += r[p * s.dim + d];
      }
      EXPECT_EQ(LsFloatToBits(got),
                LsFloatToBits(CanonicalSum(
                    terms.data(), static_cast<int64_t>(terms.size()), 1)))
          << "v=" << v << " d=" << d;
      if (terms.empty()) {
        EXPECT_EQ(LsFloatToBits(got), 0u);
      }
      // n terms of magnitude <= 1: |error| <= n * 2^-24 * sum|r| bound.
      EXPECT_NEAR(got, want, 1e-6 * static_cast<double>(terms.size()) + 1e-7);
      // Central difference of L = sum(y * r) in float64 along w[v, d].
      auto loss = [&](double delta) {
        double l = 0.0;
        for (int64_t p = 0; p < s.positions; ++p) {
          for (int64_t j = 0; j < s.dim; ++j) {
            double wv = w[ids[p] * s.dim + j];
            if (ids[p] == v && j == d) wv += delta;
            l += wv * r[p * s.dim + j];
          }
        }
        return l;
      };
      const double h = 1e-3;
      EXPECT_NEAR((loss(h) - loss(-h)) / (2 * h), want, 1e-9);
    }
  }
}

// The mask is the spec's integer rule on Philox bits; the drop fraction is
// the rate (within 6 standard deviations of a binomial over 100,000
// elements: fixed seeds, so this cannot flake); rate 0 keeps everything
// with scale exactly 1.
TEST(DropoutTest, MaskFollowsTheSpecAndDropsAtTheRate) {
  const int64_t n = 100000;
  for (const float rate : {0.0f, 0.1f, 0.25f, 0.9f}) {
    const DropoutParams p = DropoutParamsOf(rate, 7, kDropoutStreamBase + 3);
    EXPECT_EQ(p.threshold,
              static_cast<uint32_t>(static_cast<double>(rate) * 16777216.0));
    EXPECT_EQ(LsFloatToBits(p.scale), LsFloatToBits(1.0f / (1.0f - rate)));
    int64_t dropped = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float m = DropoutMaskElement(p, i);
      const bool keep =
          (PhiloxBits(7, kDropoutStreamBase + 3, static_cast<uint64_t>(i)) >>
           8) >= p.threshold;
      EXPECT_EQ(LsFloatToBits(m), LsFloatToBits(keep ? p.scale : 0.0f));
      dropped += keep ? 0 : 1;
    }
    const double sd = std::sqrt(n * rate * (1.0 - rate));
    EXPECT_NEAR(static_cast<double>(dropped), n * rate, 6 * sd + 1) << rate;
    if (rate == 0.0f) {
      EXPECT_EQ(dropped, 0);
      EXPECT_EQ(p.scale, 1.0f);
    }
  }
  // Another stream (layer or step) draws another mask.
  const DropoutParams a = DropoutParamsOf(0.5f, 7, kDropoutStreamBase + 1);
  const DropoutParams b = DropoutParamsOf(0.5f, 7, kDropoutStreamBase + 2);
  int64_t differ = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    differ += DropoutMaskElement(a, i) != DropoutMaskElement(b, i);
  }
  EXPECT_GT(differ, 300);
}

}  // namespace
}  // namespace lockstep::canonical
