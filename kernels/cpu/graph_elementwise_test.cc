// The broadcasting graph primitives on the CPU (kernels/ops/
// graph_elementwise.h, graph_elementwise_kernels.cc):
//   - the kernels' bits equal an independent scalar spec (naive broadcast
//     indexing, the broadcast-gradient sums collected in row-major output
//     order and added by canonical::CanonicalSum) on every ISA and 1, 2, 3
//     and 8 threads;
//   - the IEEE ops equal the float64 result rounded once, bit for bit; the
//     portable functions are close to float64;
//   - every gradient matches central differences of a float64 model;
//   - the DEFAULT atomic broadcast-gradient reduction follows its arrival
//     order (pinned), and is exact on small integers;
//   - bad calls are refused naming the argument.
#include "kernels/ops/graph_elementwise.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/canonical/reduce.h"
#include "kernels/cpu/atomic_float.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"
#include "kernels/testing/float_test_util.h"

namespace lockstep::kernels {
namespace {

namespace c = ::lockstep::canonical;
using ::lockstep::testing::BitsEqual;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::RandomFloats;
using ::lockstep::testing::SmallInts;

using Shape = std::vector<int64_t>;

int64_t Numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Tensor Make(const Shape& s, const std::vector<float>& v) {
  return *Tensor::FromValues<float>(s, v);
}
Tensor Zeros(const Shape& s) { return *Tensor::Zeros(DType::kFloat32, s); }
std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// Offset in an operand of shape `x` (right-aligned, size-1 axes broadcast)
// of element `o` of y (row-major).
int64_t OffsetIn(const Shape& y, const Shape& x, int64_t o) {
  const size_t off = y.size() - x.size();
  int64_t result = 0, stride = 1;
  for (int d = static_cast<int>(y.size()) - 1; d >= 0; --d) {
    const int64_t i = o % y[d];
    o /= y[d];
    if (static_cast<size_t>(d) < off) continue;
    const int64_t xd = x[d - off];
    if (xd != 1) result += i * stride;
    stride *= xd;
  }
  return result;
}

Shape BroadcastOf(const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape y(rank, 1);
  for (const Shape& s : shapes) {
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t& v = y[rank - s.size() + d];
      if (s[d] != 1) v = s[d];
    }
  }
  return y;
}

// The spec of the broadcast-gradient reduction: per x element, its terms in
// row-major order of y, one canonical sum; no reduction when x has y's size.
std::vector<float> SpecSumTo(const std::vector<float>& t, const Shape& y,
                             const Shape& x) {
  std::vector<float> out(Numel(x));
  if (Numel(x) == Numel(y)) return t;
  std::vector<std::vector<float>> terms(out.size());
  for (int64_t o = 0; o < Numel(y); ++o) {
    terms[OffsetIn(y, x, o)].push_back(t[o]);
  }
  for (size_t j = 0; j < out.size(); ++j) {
    out[j] = c::CanonicalSum(terms[j].data(),
                             static_cast<int64_t>(terms[j].size()), 1);
  }
  return out;
}

class GraphElementwiseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_THAT(RegisterCpuCanonicalKernels(&registry_), IsOk());
    ASSERT_THAT(RegisterCpuDeterministicAndDefaultKernels(&registry_), IsOk());
  }
  void TearDown() override {
    SetCpuIsaForTesting(std::nullopt);
    SetCpuThreadsForTesting(0);
  }

  absl::Status Run(const char* op, std::vector<Tensor> in,
                   std::vector<Tensor>& out, const OpAttrs& attrs,
                   Mode mode = Mode::kCanonical,
                   const char* algorithm = kCanonicalAlgorithm) {
    absl::StatusOr<KernelFn> fn =
        registry_.Lookup({op, mode, algorithm, kCpuBackendName});
    if (!fn.ok()) return fn.status();
    return (*fn)(in, absl::MakeSpan(out), attrs);
  }

  // Runs the kernel on every ISA x {1, 2, 3, 8} threads; every run must give
  // the bits of the first. Returns the outputs.
  std::vector<std::vector<float>> RunEverywhere(const char* op,
                                                const std::vector<Tensor>& in,
                                                const std::vector<Shape>& outs,
                                                const OpAttrs& attrs) {
    std::vector<std::vector<float>> first;
    for (CpuIsa isa : SupportedCpuIsas()) {
      SetCpuIsaForTesting(isa);
      for (int threads : {1, 2, 3, 8}) {
        SetCpuThreadsForTesting(threads);
        std::vector<Tensor> out;
        for (const Shape& s : outs) out.push_back(Zeros(s));
        EXPECT_THAT(Run(op, in, out, attrs), IsOk()) << op;
        std::vector<std::vector<float>> got;
        for (const Tensor& t : out) got.push_back(Values(t));
        if (first.empty()) {
          first = got;
          continue;
        }
        for (size_t k = 0; k < got.size(); ++k) {
          EXPECT_TRUE(BitsEqual(got[k], first[k]))
              << op << " output " << k << " isa " << CpuIsaName(isa) << ", "
              << threads << " threads";
        }
      }
    }
    return first;
  }

  Registry registry_;
};

struct BroadcastCase {
  Shape a, b;
};
// Trailing, leading and middle broadcasts, a scalar-like operand, a
// 700-term reduction (three chunks) over 130 outputs (three lane blocks).
const BroadcastCase kCases[] = {
    {{2, 3, 5}, {2, 1, 5}},     {{2, 3, 5}, {2, 3, 1}}, {{2, 3, 5}, {2, 1, 1}},
    {{2, 1, 5}, {3, 1}},        {{700, 130}, {130}},    {{4, 1}, {1, 300}},
    {{2, 300, 70}, {2, 1, 70}}, {{3, 4}, {3, 4}}};

std::vector<float> Inputs(const Shape& s, uint32_t seed, bool positive) {
  std::vector<float> v = RandomFloats(Numel(s), seed);
  for (float& f : v) {
    if (positive) f = std::fabs(f) + 0.25f;
  }
  return v;
}

TEST_F(GraphElementwiseTest, BinaryMatchesTheSpecOnEveryIsaAndThreadCount) {
  for (int kind = 1; kind <= 7; ++kind) {
    const bool pow = kind == 5;
    for (const BroadcastCase& bc : kCases) {
      SCOPED_TRACE(::testing::Message()
                   << "kind " << kind << " a " << ShapeString(bc.a) << " b "
                   << ShapeString(bc.b));
      const Shape y = BroadcastOf({bc.a, bc.b});
      const std::vector<float> a = Inputs(bc.a, 1, pow);
      const std::vector<float> b = Inputs(bc.b, 2, false);
      const std::vector<float> dy = Inputs(y, 3, false);
      OpAttrs attrs;
      attrs.graph_kind = kind;
      const auto k = static_cast<c::BinaryKind>(kind);
      const std::vector<std::vector<float>> fwd = RunEverywhere(
          op::kBinaryForward, {Make(bc.a, a), Make(bc.b, b)}, {y}, attrs);
      std::vector<float> want(Numel(y)), ta(Numel(y)), tb(Numel(y));
      for (int64_t o = 0; o < Numel(y); ++o) {
        const float av = a[OffsetIn(y, bc.a, o)];
        const float bv = b[OffsetIn(y, bc.b, o)];
        want[o] = c::BinaryElement(k, av, bv);
        c::BinaryGradTerms(k, av, bv, dy[o], &ta[o], &tb[o]);
      }
      ASSERT_EQ(fwd.size(), 1u);
      EXPECT_TRUE(BitsEqual(fwd[0], want));
      const std::vector<std::vector<float>> grad = RunEverywhere(
          op::kBinaryGrad, {Make(bc.a, a), Make(bc.b, b), Make(y, dy)},
          {bc.a, bc.b}, attrs);
      ASSERT_EQ(grad.size(), 2u);
      EXPECT_TRUE(BitsEqual(grad[0], SpecSumTo(ta, y, bc.a)));
      EXPECT_TRUE(BitsEqual(grad[1], SpecSumTo(tb, y, bc.b)));
    }
  }
}

TEST_F(GraphElementwiseTest, UnaryCompareWhereAndReduceMatchTheSpec) {
  const Shape s = {3, 70};
  const std::vector<float> x = Inputs(s, 4, false);
  const std::vector<float> dy = Inputs(s, 5, false);
  for (int kind = 1; kind <= 8; ++kind) {
    OpAttrs attrs;
    attrs.graph_kind = kind;
    const auto k = static_cast<c::UnaryKind>(kind);
    std::vector<float> want(x.size()), dwant(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      want[i] = c::UnaryElement(k, x[i]);
      dwant[i] = c::UnaryGradElement(k, x[i], dy[i]);
    }
    EXPECT_TRUE(BitsEqual(
        RunEverywhere(op::kUnaryForward, {Make(s, x)}, {s}, attrs)[0], want));
    EXPECT_TRUE(BitsEqual(
        RunEverywhere(op::kUnaryGrad, {Make(s, x), Make(s, dy)}, {s}, attrs)[0],
        dwant));
  }
  // IDENTITY keeps every bit, NaN payloads included.
  {
    const std::vector<float> odd = {testing::FromBits(0x7FC01234u), -0.0f};
    std::vector<Tensor> out = {Zeros({2})};
    OpAttrs attrs;
    attrs.graph_kind = 8;
    ASSERT_THAT(Run(op::kUnaryForward, {Make({2}, odd)}, out, attrs), IsOk());
    EXPECT_EQ(testing::FloatBits(out[0].data<float>()[0]), 0x7FC01234u);
    EXPECT_EQ(testing::FloatBits(out[0].data<float>()[1]), 0x80000000u);
  }
  // COMPARE on small integers (ties happen).
  const Shape ca = {4, 5}, cb = {5};
  const std::vector<float> a = SmallInts(20, 6, -2, 2);
  const std::vector<float> b = SmallInts(5, 7, -2, 2);
  for (int kind = 1; kind <= 5; ++kind) {
    OpAttrs attrs;
    attrs.graph_kind = kind;
    std::vector<float> want(20);
    for (int64_t o = 0; o < 20; ++o) {
      const float av = a[o], bv = b[o % 5];
      const bool r = kind == 1   ? av == bv
                     : kind == 2 ? av < bv
                     : kind == 3 ? av <= bv
                     : kind == 4 ? av > bv
                                 : av >= bv;
      want[o] = r ? 1.0f : 0.0f;
    }
    EXPECT_TRUE(BitsEqual(
        RunEverywhere(op::kCompare, {Make(ca, a), Make(cb, b)}, {ca}, attrs)[0],
        want))
        << "compare kind " << kind;
  }
  // WHERE over three broadcast operands, and its masked gradients.
  const Shape cs = {3, 1, 5}, as = {4, 5}, bs = {3, 1, 1}, ys = {3, 4, 5};
  std::vector<float> cond = SmallInts(15, 8, 0, 1);
  cond[0] = testing::FromBits(0x7FC00000u);  // NaN != 0: takes a
  const std::vector<float> wa = Inputs(as, 9, false);
  const std::vector<float> wb = Inputs(bs, 10, false);
  const std::vector<float> wdy = Inputs(ys, 11, false);
  std::vector<float> want(60), ta(60), tb(60);
  for (int64_t o = 0; o < 60; ++o) {
    const bool take_a = cond[OffsetIn(ys, cs, o)] != 0.0f;
    want[o] = take_a ? wa[OffsetIn(ys, as, o)] : wb[OffsetIn(ys, bs, o)];
    ta[o] = take_a ? wdy[o] : 0.0f;
    tb[o] = take_a ? 0.0f : wdy[o];
  }
  EXPECT_TRUE(BitsEqual(
      RunEverywhere(op::kWhereForward,
                    {Make(cs, cond), Make(as, wa), Make(bs, wb)}, {ys}, {})[0],
      want));
  const std::vector<std::vector<float>> wg = RunEverywhere(
      op::kWhereGrad, {Make(cs, cond), Make(ys, wdy)}, {as, bs}, {});
  EXPECT_TRUE(BitsEqual(wg[0], SpecSumTo(ta, ys, as)));
  EXPECT_TRUE(BitsEqual(wg[1], SpecSumTo(tb, ys, bs)));
  // REDUCE: SUM is the broadcast-gradient sum to the keepdims shape; MEAN
  // divides it once by the term count; the gradient broadcasts back.
  const Shape rx = {2, 300, 70};
  const std::vector<float> xv = Inputs(rx, 12, false);
  struct R {
    uint32_t axes;
    bool keepdims;
    int kind;
    Shape kept, y;
  };
  const R reduces[] = {{0b010, true, 1, {2, 1, 70}, {2, 1, 70}},
                       {0b110, false, 2, {2, 1, 1}, {2}},
                       {0b100, false, 2, {2, 300, 1}, {2, 300}}};
  for (const R& r : reduces) {
    OpAttrs attrs;
    attrs.graph_kind = r.kind;
    attrs.reduce_axes = r.axes;
    attrs.reduce_keepdims = r.keepdims;
    std::vector<float> sum = SpecSumTo(xv, rx, r.kept);
    const float n = static_cast<float>(Numel(rx) / Numel(r.kept));
    if (r.kind == 2) {
      for (float& v : sum) v = v / n;
    }
    EXPECT_TRUE(BitsEqual(
        RunEverywhere(op::kReduceForward, {Make(rx, xv)}, {r.y}, attrs)[0],
        sum))
        << "reduce axes " << r.axes;
    const std::vector<float> rdy = Inputs(r.y, 13, false);
    std::vector<float> dx(Numel(rx));
    for (int64_t o = 0; o < Numel(rx); ++o) {
      const float g = rdy[OffsetIn(rx, r.kept, o)];
      dx[o] = r.kind == 2 ? g / n : g;
    }
    EXPECT_TRUE(BitsEqual(
        RunEverywhere(op::kReduceGrad, {Make(r.y, rdy)}, {rx}, attrs)[0], dx))
        << "reduce.grad axes " << r.axes;
  }
}

// The IEEE ops are one rounding of the exact result: the float64 result
// rounded to float (double rounding is harmless for +, -, *, / and sqrt).
TEST_F(GraphElementwiseTest, IeeeOpsAreTheFloat64ResultRoundedOnce) {
  const Shape s = {500};
  const std::vector<float> a = Inputs(s, 14, false);
  std::vector<float> b = Inputs(s, 15, false);
  std::vector<float> pos = Inputs(s, 16, true);
  for (int kind : {1, 2, 3, 4}) {
    OpAttrs attrs;
    attrs.graph_kind = kind;
    std::vector<Tensor> out = {Zeros(s)};
    ASSERT_THAT(Run(op::kBinaryForward, {Make(s, a), Make(s, b)}, out, attrs),
                IsOk());
    for (int64_t i = 0; i < 500; ++i) {
      const double x = a[i], y = b[i];
      const double r = kind == 1   ? x + y
                       : kind == 2 ? x - y
                       : kind == 3 ? x * y
                                   : x / y;
      const float want = static_cast<float>(r);
      EXPECT_EQ(testing::FloatBits(out[0].data<float>()[i]),
                std::isnan(want) ? 0x7FC00000u : testing::FloatBits(want))
          << "kind " << kind << " element " << i;
    }
  }
  // POW: exponent 2 is a * a and 0.5 the IEEE square root, both one
  // rounding; other exponents are within 8 ULP-scale of float64 pow.
  const std::vector<float> exps = {2.0f, 0.5f, 3.0f, -1.5f, 1.0f, 0.0f};
  for (float e : exps) {
    OpAttrs attrs;
    attrs.graph_kind = 5;
    std::vector<Tensor> out = {Zeros(s)};
    ASSERT_THAT(
        Run(op::kBinaryForward, {Make(s, pos), Make({1}, {e})}, out, attrs),
        IsOk());
    for (int64_t i = 0; i < 500; ++i) {
      const double want = std::pow(static_cast<double>(pos[i]), e);
      const float got = out[0].data<float>()[i];
      if (e == 2.0f || e == 0.5f || e == 1.0f || e == 0.0f) {
        EXPECT_EQ(testing::FloatBits(got),
                  testing::FloatBits(static_cast<float>(want)))
            << "pow " << e << " element " << i;
      } else {
        EXPECT_NEAR(got, want, 4e-7 * std::fabs(want))
            << "pow " << e << " element " << i;
      }
    }
  }
  // Negative bases: whole exponents keep their sign rule; others are NaN.
  EXPECT_EQ(c::CanonicalPow(-2.0f, 3.0f), -8.0f);
  EXPECT_EQ(c::CanonicalPow(-2.0f, 2.0f), 4.0f);
  EXPECT_NEAR(c::CanonicalPow(-2.0f, -2.0f), 0.25f, 1e-7f);
  EXPECT_EQ(testing::FloatBits(c::CanonicalPow(-2.0f, 1.5f)), 0x7FC00000u);
  EXPECT_EQ(c::CanonicalPow(0.0f, 3.0f), 0.0f);
  EXPECT_EQ(c::CanonicalPow(0.0f, -1.0f), INFINITY);
  // UNARY: NEG, ABS, SQRT, RECIPROCAL are one rounding; EXP, LOG, ERF
  // within a few ULP of float64.
  for (int kind = 1; kind <= 7; ++kind) {
    OpAttrs attrs;
    attrs.graph_kind = kind;
    std::vector<Tensor> out = {Zeros(s)};
    ASSERT_THAT(Run(op::kUnaryForward, {Make(s, pos)}, out, attrs), IsOk());
    for (int64_t i = 0; i < 500; ++i) {
      const double x = pos[i];
      const float got = out[0].data<float>()[i];
      switch (kind) {
        case 1:
          EXPECT_EQ(got, -pos[i]);
          break;
        case 2:
          EXPECT_EQ(got, pos[i]);
          break;
        case 3:
          EXPECT_EQ(got, static_cast<float>(std::sqrt(x)));
          break;
        case 4:
          EXPECT_EQ(got, static_cast<float>(1.0 / x));
          break;
        case 5:
          EXPECT_NEAR(got, std::exp(x), 3e-7 * std::exp(x));
          break;
        case 6:
          EXPECT_NEAR(got, std::log(x), 3e-7 * std::fabs(std::log(x)) + 1e-8);
          break;
        case 7:
          EXPECT_NEAR(got, std::erf(x), 3e-7);
          break;
      }
    }
  }
}

// Central differences of a float64 model of each op against the kernels'
// gradients; the loss is sum(dy * y).
void ExpectGradientsMatch(
    const std::function<double(const std::vector<double>&,
                               const std::vector<double>&, int64_t)>& f,
    const Shape& as, const Shape& bs, const std::vector<float>& a,
    const std::vector<float>& b, const std::vector<float>& dy,
    const std::vector<float>& da, const std::vector<float>& db) {
  const Shape y = BroadcastOf({as, bs});
  std::vector<double> av(a.begin(), a.end()), bv(b.begin(), b.end());
  auto loss = [&] {
    double l = 0.0;
    for (int64_t o = 0; o < Numel(y); ++o) {
      l += static_cast<double>(dy[o]) * f(av, bv, o);
    }
    return l;
  };
  const double h = 1e-5;
  for (int which = 0; which < 2; ++which) {
    std::vector<double>& v = which == 0 ? av : bv;
    const std::vector<float>& g = which == 0 ? da : db;
    for (size_t j = 0; j < v.size(); ++j) {
      const double keep = v[j];
      v[j] = keep + h;
      const double up = loss();
      v[j] = keep - h;
      const double down = loss();
      v[j] = keep;
      const double num = (up - down) / (2 * h);
      EXPECT_NEAR(g[j], num, 2e-4 * (1.0 + std::fabs(num)))
          << (which == 0 ? "a" : "b") << "[" << j << "]";
    }
  }
}

TEST_F(GraphElementwiseTest, GradientsMatchFiniteDifferences) {
  const Shape as = {2, 1, 5}, bs = {3, 1};
  const Shape y = BroadcastOf({as, bs});
  const std::vector<float> dy = Inputs(y, 20, false);
  // Every kind on random operands, and POW with the exponents LayerNorm
  // decompositions export (2 and 0.5).
  struct G {
    int kind;
    float exponent;  // 0: random b
  };
  const G grads[] = {{1, 0}, {2, 0}, {3, 0}, {4, 0},   {5, 0},
                     {6, 0}, {7, 0}, {5, 2}, {5, 0.5f}};
  for (const G& gc : grads) {
    const int kind = gc.kind;
    SCOPED_TRACE(::testing::Message()
                 << "binary kind " << kind << " exponent " << gc.exponent);
    // Positive operands keep DIV, POW and LOG smooth; MAX / MIN operands
    // far apart (no ties).
    std::vector<float> a = Inputs(as, 21, true);
    std::vector<float> b = Inputs(bs, 22, kind == 4);
    if (kind >= 6) {
      for (size_t i = 0; i < b.size(); ++i) b[i] = i % 2 ? 5.0f : -5.0f;
    }
    if (gc.exponent != 0) b.assign(b.size(), gc.exponent);
    OpAttrs attrs;
    attrs.graph_kind = kind;
    std::vector<Tensor> out = {Zeros(as), Zeros(bs)};
    ASSERT_THAT(Run(op::kBinaryGrad, {Make(as, a), Make(bs, b), Make(y, dy)},
                    out, attrs),
                IsOk());
    auto f = [&](const std::vector<double>& av, const std::vector<double>& bv,
                 int64_t o) {
      const double x = av[OffsetIn(y, as, o)], z = bv[OffsetIn(y, bs, o)];
      switch (kind) {
        case 1:
          return x + z;
        case 2:
          return x - z;
        case 3:
          return x * z;
        case 4:
          return x / z;
        case 5:
          return std::pow(x, z);
        case 6:
          return std::max(x, z);
        default:
          return std::min(x, z);
      }
    };
    ExpectGradientsMatch(f, as, bs, a, b, dy, Values(out[0]), Values(out[1]));
  }
  // UNARY: dx against central differences, one element at a time.
  const Shape s = {40};
  const std::vector<float> x = Inputs(s, 24, true);
  const std::vector<float> udy = Inputs(s, 25, false);
  for (int kind = 1; kind <= 8; ++kind) {
    OpAttrs attrs;
    attrs.graph_kind = kind;
    std::vector<Tensor> out = {Zeros(s)};
    ASSERT_THAT(Run(op::kUnaryGrad, {Make(s, x), Make(s, udy)}, out, attrs),
                IsOk());
    auto f = [kind](double v) {
      switch (kind) {
        case 1:
          return -v;
        case 2:
          return std::fabs(v);
        case 3:
          return std::sqrt(v);
        case 4:
          return 1.0 / v;
        case 5:
          return std::exp(v);
        case 6:
          return std::log(v);
        case 7:
          return std::erf(v);
        default:
          return v;
      }
    };
    for (int64_t i = 0; i < 40; ++i) {
      const double h = 1e-5, v = x[i];
      const double num = udy[i] * (f(v + h) - f(v - h)) / (2 * h);
      EXPECT_NEAR(out[0].data<float>()[i], num, 2e-4 * (1.0 + std::fabs(num)))
          << "unary kind " << kind << " element " << i;
    }
  }
}

// The DEFAULT atomic reduction: the bits follow the pinned arrival order
// (wide-range inputs), every order is exact on small integers, and the
// results stay within rounding of CANONICAL.
TEST_F(GraphElementwiseTest, DefaultAtomicReductionFollowsArrivalOrder) {
  SetCpuThreadsForTesting(4);
  const Shape as = {2048, 16}, bs = {16}, y = {2048, 16};
  auto run = [&](const std::vector<float>& a, const std::vector<float>& b,
                 const std::vector<float>& dy, Mode mode, const char* alg,
                 const char* op) {
    OpAttrs attrs;
    attrs.graph_kind = 1;  // ADD: db is the column sums of dy
    std::vector<Tensor> out = {Zeros(as), Zeros(bs)};
    if (op == std::string(op::kWhereGrad)) {
      EXPECT_THAT(Run(op, {Make(as, a), Make(y, dy)}, out, attrs, mode, alg),
                  IsOk());
    } else {
      EXPECT_THAT(Run(op, {Make(as, a), Make(bs, b), Make(y, dy)}, out, attrs,
                      mode, alg),
                  IsOk());
    }
    return Values(out[1]);
  };
  std::vector<float> wide = RandomFloats(Numel(y), 30);
  for (size_t i = 0; i < wide.size(); ++i) wide[i] *= i % 7 == 0 ? 1e4f : 1.0f;
  const std::vector<float> a = Inputs(as, 31, false);
  const std::vector<float> ones(Numel(as), 1.0f);
  const std::vector<float> b = Inputs(bs, 32, false);
  for (const char* op : {op::kBinaryGrad, op::kWhereGrad}) {
    SCOPED_TRACE(op);
    const std::vector<float>& first = op == std::string(op::kWhereGrad)
                                          ? std::vector<float>(ones.size(), 0)
                                          : a;
    std::set<std::string> distinct;
    for (uint64_t seed : {1, 2, 3, 4, 5, 6, 7, 8}) {
      ScopedAtomicArrivalOrderForTesting order(seed);
      const std::vector<float> r1 =
          run(first, b, wide, Mode::kDefault, kAtomicAlgorithm, op);
      const std::vector<float> r2 =
          run(first, b, wide, Mode::kDefault, kAtomicAlgorithm, op);
      EXPECT_TRUE(BitsEqual(r1, r2)) << "same order, seed " << seed;
      distinct.insert(std::string(reinterpret_cast<const char*>(r1.data()),
                                  r1.size() * sizeof(float)));
    }
    EXPECT_GE(distinct.size(), 2u) << "the result ignored the arrival order";
    const std::vector<float> ints = SmallInts(Numel(y), 33);
    const std::vector<float> canonical =
        run(first, b, ints, Mode::kCanonical, kCanonicalAlgorithm, op);
    for (uint64_t seed : {1, 2, 3}) {
      ScopedAtomicArrivalOrderForTesting order(seed);
      EXPECT_TRUE(
          BitsEqual(run(first, b, ints, Mode::kDefault, kAtomicAlgorithm, op),
                    canonical));
    }
    EXPECT_TRUE(BitsEqual(
        run(first, b, ints, Mode::kDefault, kDefaultAlgorithm, op), canonical));
  }
}

// LayerNorm and GELU as torch.onnx.export decomposes them (ReduceMean, Sub,
// Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul, Add; x * 0.5 * (1 + erf(x /
// sqrt(2)))), constants as broadcast [1] operands, against the fused
// layer_norm.forward and gelu.forward, both measured against float64. The
// decomposition rounds differently (a division by the standard deviation
// instead of a multiply by its reciprocal, the mean of squares of the
// rounded deviations), so the bits differ; both stay within a few float
// ULPs of the float64 result.
TEST_F(GraphElementwiseTest, DecomposedLayerNormAndGeluMatchTheFusedOps) {
  const Shape xs = {2, 3, 64}, row = {2, 3, 1}, one = {1}, d = {64};
  const std::vector<float> x = Inputs(xs, 40, false);
  std::vector<float> gamma = Inputs(d, 41, true), beta = Inputs(d, 42, false);
  const float eps = 1e-5f;
  auto run = [&](const char* op, std::vector<Tensor> in, const Shape& out,
                 int kind, uint32_t axes = 0) {
    OpAttrs a;
    a.graph_kind = kind;
    a.reduce_axes = axes;
    a.reduce_keepdims = true;
    a.norm_epsilon = eps;
    std::vector<Tensor> o = {Zeros(out)};
    EXPECT_THAT(Run(op, in, o, a), IsOk()) << op;
    return o[0];
  };
  auto scalar = [&](float v) { return Make(one, {v}); };
  const Tensor xt = Make(xs, x);
  const Tensor mu = run(op::kReduceForward, {xt}, row, 2, 0b100);
  const Tensor c = run(op::kBinaryForward, {xt, mu}, xs, 2);
  const Tensor sq = run(op::kBinaryForward, {c, scalar(2.0f)}, xs, 5);
  const Tensor var = run(op::kReduceForward, {sq}, row, 2, 0b100);
  const Tensor ve = run(op::kBinaryForward, {var, scalar(eps)}, row, 1);
  const Tensor sd = run(op::kUnaryForward, {ve}, row, 3);
  const Tensor nrm = run(op::kBinaryForward, {c, sd}, xs, 4);
  const Tensor scaled = run(op::kBinaryForward, {nrm, Make(d, gamma)}, xs, 3);
  const Tensor ln = run(op::kBinaryForward, {scaled, Make(d, beta)}, xs, 1);
  const Tensor t =
      run(op::kBinaryForward, {ln, scalar(std::sqrt(2.0f))}, xs, 4);
  const Tensor e = run(op::kUnaryForward, {t}, xs, 7);
  const Tensor p1 = run(op::kBinaryForward, {e, scalar(1.0f)}, xs, 1);
  const Tensor half = run(op::kBinaryForward, {ln, scalar(0.5f)}, xs, 3);
  const Tensor gelu = run(op::kBinaryForward, {half, p1}, xs, 3);
  const Tensor fused_ln =
      run(op::kLayerNormForward, {xt, Make(d, gamma), Make(d, beta)}, xs, 0);
  const Tensor fused_gelu = run(op::kGeluForward, {fused_ln}, xs, 0);
  // float64 reference.
  std::vector<double> ref_ln(x.size()), ref_gelu(x.size());
  for (int64_t r = 0; r < 6; ++r) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < 64; ++i) m += x[r * 64 + i];
    m /= 64;
    for (int64_t i = 0; i < 64; ++i) {
      v += (x[r * 64 + i] - m) * (x[r * 64 + i] - m);
    }
    v /= 64;
    for (int64_t i = 0; i < 64; ++i) {
      const double y =
          (x[r * 64 + i] - m) / std::sqrt(v + eps) * gamma[i] + beta[i];
      ref_ln[r * 64 + i] = y;
      ref_gelu[r * 64 + i] = 0.5 * y * (1.0 + std::erf(y / std::sqrt(2.0)));
    }
  }
  auto max_diff = [](const Tensor& got, const std::vector<double>& want) {
    double m = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      m = std::max(m, std::fabs(got.data<float>()[i] - want[i]));
    }
    return m;
  };
  const double dec_ln = max_diff(ln, ref_ln),
               fus_ln = max_diff(fused_ln, ref_ln);
  const double dec_gelu = max_diff(gelu, ref_gelu);
  const double fus_gelu = max_diff(fused_gelu, ref_gelu);
  int64_t differing = 0;
  double between = 0;
  for (int64_t i = 0; i < gelu.numel(); ++i) {
    const float a = gelu.data<float>()[i], b = fused_gelu.data<float>()[i];
    differing += testing::FloatBits(a) != testing::FloatBits(b);
    between = std::max(between, static_cast<double>(std::fabs(a - b)));
  }
  std::printf(
      "max |float - float64|: layer norm decomposed %.3g, fused %.3g; gelu "
      "decomposed %.3g, fused %.3g; decomposed vs fused gelu: %lld of %lld "
      "differ, max %.3g\n",
      dec_ln, fus_ln, dec_gelu, fus_gelu, static_cast<long long>(differing),
      static_cast<long long>(gelu.numel()), between);
  EXPECT_LT(dec_ln, 2e-6);
  EXPECT_LT(fus_ln, 2e-6);
  EXPECT_LT(dec_gelu, 2e-6);
  EXPECT_LT(fus_gelu, 2e-6);
  EXPECT_LT(between, 4e-6);
}

TEST_F(GraphElementwiseTest, BadCallsNameTheArgument) {
  OpAttrs add;
  add.graph_kind = 1;
  std::vector<Tensor> out = {Zeros({2, 3})};
  absl::Status s =
      Run(op::kBinaryForward, {Zeros({2, 3}), Zeros({4})}, out, add);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("do not broadcast"), std::string::npos) << s;
  EXPECT_NE(s.message().find("b [4]"), std::string::npos) << s;
  out = {Zeros({3, 2})};
  s = Run(op::kBinaryForward, {Zeros({2, 3}), Zeros({3})}, out, add);
  EXPECT_NE(s.message().find("y must have the broadcast shape [2, 3]"),
            std::string::npos)
      << s;
  OpAttrs bad;
  bad.graph_kind = 9;
  out = {Zeros({2, 3})};
  s = Run(op::kBinaryForward, {Zeros({2, 3}), Zeros({3})}, out, bad);
  EXPECT_NE(s.message().find("attrs.graph_kind 9 is outside 1 .. 7"),
            std::string::npos)
      << s;
  std::vector<Tensor> grads = {Zeros({2, 3}), Zeros({2, 3})};
  s = Run(op::kBinaryGrad, {Zeros({2, 3}), Zeros({3}), Zeros({2, 3})}, grads,
          add);
  EXPECT_NE(s.message().find("db must have its operand's shape [3]"),
            std::string::npos)
      << s;
  OpAttrs red;
  red.graph_kind = 1;
  red.reduce_axes = 0b10;
  out = {Zeros({2, 1})};
  s = Run(op::kReduceForward, {Zeros({2, 3})}, out, red);
  EXPECT_NE(s.message().find("y must have shape [2]"), std::string::npos) << s;
  red.reduce_axes = 0b100;
  s = Run(op::kReduceForward, {Zeros({2, 3})}, out, red);
  EXPECT_NE(s.message().find("beyond x's rank 2"), std::string::npos) << s;
}

}  // namespace
}  // namespace lockstep::kernels
