#include "kernels/graph_op_cases.h"

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/backend.h"
#include "kernels/graph_ops.h"
#include "kernels/tensor.h"

namespace lockstep::kernels {
namespace {

class Gen {
 public:
  Gen(InputFamily family, uint32_t seed) : family_(family), rng_(seed) {}

  Tensor Floats(std::vector<int64_t> shape) {
    Tensor t = *Tensor::Zeros(DType::kFloat32, std::move(shape));
    float* p = t.data<float>();
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::uniform_int_distribution<int> ints(-8, 8);
    for (int64_t i = 0; i < t.numel(); ++i) {
      p[i] = family_ == InputFamily::kSmallInts ? static_cast<float>(ints(rng_))
                                                : uniform(rng_);
      if (family_ == InputFamily::kRandom && i % 97 == 5) p[i] = -0.0f;
    }
    return t;
  }
  // n indices in [0, v), each drawn with weight favouring low ids (so some
  // rows get long segments and some none).
  Tensor Indices(int64_t n, int32_t v) {
    Tensor t = *Tensor::Zeros(DType::kInt32, {n});
    std::uniform_int_distribution<int32_t> draw(0, v - 1);
    int32_t* p = t.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = draw(rng_) / (i % 3 == 0 ? 1 : 2);
    return t;
  }

 private:
  InputFamily family_;
  std::mt19937 rng_;
};

Tensor Zeros(std::vector<int64_t> shape) {
  return *Tensor::Zeros(DType::kFloat32, std::move(shape));
}

Tensor Ints(std::vector<int32_t> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return *Tensor::FromValues<int32_t>({n}, values);
}

}  // namespace

std::vector<OpCase> GraphDataOpCases(InputFamily family, uint32_t seed) {
  Gen g(family, seed ^ 0x6a09e667u);
  std::vector<OpCase> c;
  c.push_back(
      {"constant 3x5", op::kConstant, {g.Floats({3, 5})}, {Zeros({15})}, {}});
  c.push_back({"parameter.forward 4x6",
               op::kParameterForward,
               {g.Floats({4, 6})},
               {Zeros({4, 6})},
               {}});
  c.push_back({"parameter.grad 4x6",
               op::kParameterGrad,
               {g.Floats({4, 6})},
               {Zeros({4, 6})},
               {}});
  c.push_back({"gather.forward a=2 v=7 p=5 b=3",
               op::kGatherForward,
               {g.Floats({2, 7, 3}), Ints({6, 0, 3, 3, 1})},
               {Zeros({2, 5, 3})},
               {}});
  c.push_back({"gather.forward token table v=11 p=40 d=8",
               op::kGatherForward,
               {g.Floats({1, 11, 8}), g.Indices(40, 11)},
               {Zeros({1, 40, 8})},
               {}});
  c.push_back({"gather.grad a=2 v=9 p=600 b=3",
               op::kGatherGrad,
               {g.Indices(600, 9), g.Floats({2, 600, 3})},
               {Zeros({2, 9, 3})},
               {}});
  c.push_back({"slice.forward a=2 v=7 p=3 b=3",
               op::kSliceForward,
               {g.Floats({2, 7, 3}), Ints({1, 3, 5})},
               {Zeros({2, 3, 3})},
               {}});
  c.push_back({"slice.grad a=2 v=7 p=3 b=3",
               op::kSliceGrad,
               {Ints({1, 3, 5}), g.Floats({2, 3, 3})},
               {Zeros({2, 7, 3})},
               {}});
  c.push_back({"concat.forward 1+4+2",
               op::kConcatForward,
               {g.Floats({2, 1, 3}), g.Floats({2, 4, 3}), g.Floats({2, 2, 3})},
               {Zeros({2, 7, 3})},
               {}});
  c.push_back({"concat.grad 1+4+2",
               op::kConcatGrad,
               {g.Floats({2, 7, 3})},
               {Zeros({2, 1, 3}), Zeros({2, 4, 3}), Zeros({2, 2, 3})},
               {}});
  return c;
}

namespace {

// Which special values an input holds.
enum class Specials {
  kAll,       // NaN, +-Inf, +-0, subnormals, the largest float, 0.5, 2, -3
  kFinite,    // +-0, subnormals, 0.5, 2, -3
  kNone,      // uniform [-2, 2) only
  kPositive,  // uniform [0.25, 2) only
};

// Uniform values with a special value at every 5th element. Inputs of ops
// that sum (the broadcast gradients, REDUCE, gather.grad) hold no NaN and no
// infinity: a NaN made by a sum's arithmetic has no specified payload
// (docs/canonical-arithmetic.md, sections 7 and 11.1).
Tensor Values(std::mt19937& rng, std::vector<int64_t> shape, Specials which) {
  constexpr float kSpecial[] = {std::numeric_limits<float>::quiet_NaN(),
                                std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::max(),
                                0.0f,
                                -0.0f,
                                1.5e-39f,
                                -7.0e-45f,
                                0.5f,
                                2.0f,
                                -3.0f};
  constexpr int kNumSpecial = sizeof(kSpecial) / sizeof(kSpecial[0]);
  constexpr int kFirstFinite = 4;  // kSpecial[4..] are finite
  Tensor t = *Tensor::Zeros(DType::kFloat32, std::move(shape));
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::uniform_real_distribution<float> positive(0.25f, 2.0f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    p[i] = which == Specials::kPositive ? positive(rng) : uniform(rng);
    if (i % 5 != 2) continue;
    const int64_t k = i / 5;
    if (which == Specials::kAll) {
      p[i] = kSpecial[k % kNumSpecial];
    } else if (which == Specials::kFinite) {
      p[i] = kSpecial[kFirstFinite + k % (kNumSpecial - kFirstFinite)];
    }
  }
  return t;
}

OpAttrs Kind(int k) {
  OpAttrs a;
  a.graph_kind = k;
  return a;
}

std::string Shape(const std::vector<int64_t>& s) { return ShapeString(s); }

}  // namespace

std::vector<OpCase> GraphEdgeOpCases(uint32_t seed) {
  std::mt19937 rng(seed ^ 0xbb67ae85u);
  auto f = [&](std::vector<int64_t> shape) {
    return Values(rng, std::move(shape), Specials::kAll);
  };
  auto finite = [&](std::vector<int64_t> shape) {
    return Values(rng, std::move(shape), Specials::kFinite);
  };
  auto plain = [&](std::vector<int64_t> shape) {
    return Values(rng, std::move(shape), Specials::kNone);
  };
  std::vector<OpCase> c;
  // Broadcast pairs (a, b, y): rank 0 on either side, rank 4 against lower
  // ranks, size-1 axes on both sides, a reduction of 1800 terms into b.
  struct Pair {
    std::vector<int64_t> a, b, y;
  };
  const Pair pairs[] = {{{}, {}, {}},
                        {{}, {2, 3}, {2, 3}},
                        {{4, 1, 3, 1}, {5, 1, 2}, {4, 5, 3, 2}},
                        {{1}, {3, 2, 1, 4}, {3, 2, 1, 4}},
                        {{3, 300, 2}, {1}, {3, 300, 2}},
                        {{2, 1, 300}, {4, 1}, {2, 4, 300}}};
  for (const Pair& p : pairs) {
    const std::string shapes =
        absl::StrCat(" a=", Shape(p.a), " b=", Shape(p.b));
    for (int k = 1; k <= 7; ++k) {
      c.push_back({absl::StrCat("binary.forward", shapes, " kind=", k),
                   op::kBinaryForward,
                   {f(p.a), f(p.b)},
                   {Zeros(p.y)},
                   Kind(k)});
      // Finite terms: a zero or subnormal divisor (DIV) or base (POW)
      // would put infinities and NaNs into one sum.
      const bool div = k == 4, pow = k == 5;
      c.push_back({absl::StrCat("binary.grad", shapes, " kind=", k),
                   op::kBinaryGrad,
                   {pow ? Values(rng, p.a, Specials::kPositive) : finite(p.a),
                    div || pow ? plain(p.b) : finite(p.b), finite(p.y)},
                   {Zeros(p.a), Zeros(p.b)},
                   Kind(k)});
    }
    for (int k = 1; k <= 5; ++k) {
      c.push_back({absl::StrCat("compare", shapes, " kind=", k),
                   op::kCompare,
                   {f(p.a), f(p.b)},
                   {Zeros(p.y)},
                   Kind(k)});
    }
  }
  for (const std::vector<int64_t>& s :
       {std::vector<int64_t>{}, std::vector<int64_t>{2, 3, 4, 5}}) {
    for (int k = 1; k <= 8; ++k) {
      c.push_back({absl::StrCat("unary.forward x=", Shape(s), " kind=", k),
                   op::kUnaryForward,
                   {f(s)},
                   {Zeros(s)},
                   Kind(k)});
      c.push_back({absl::StrCat("unary.grad x=", Shape(s), " kind=", k),
                   op::kUnaryGrad,
                   {f(s), f(s)},
                   {Zeros(s)},
                   Kind(k)});
    }
  }
  // where: cond holds NaN (true), -0 (false) and subnormals (true).
  struct Where {
    std::vector<int64_t> cond, a, b, y;
  };
  const Where wheres[] = {{{}, {}, {}, {}},
                          {{2, 1, 4, 1}, {4, 3}, {}, {2, 1, 4, 3}},
                          {{5}, {3, 1, 1, 5}, {2, 1, 5}, {3, 2, 1, 5}},
                          {{300, 1}, {1, 2}, {300, 2}, {300, 2}}};
  for (const Where& w : wheres) {
    const std::string shapes = absl::StrCat(
        " cond=", Shape(w.cond), " a=", Shape(w.a), " b=", Shape(w.b));
    c.push_back({"where.forward" + shapes,
                 op::kWhereForward,
                 {f(w.cond), f(w.a), f(w.b)},
                 {Zeros(w.y)},
                 {}});
    c.push_back({"where.grad" + shapes,
                 op::kWhereGrad,
                 {f(w.cond), finite(w.y)},
                 {Zeros(w.a), Zeros(w.b)},
                 {}});
  }
  struct Reduce {
    std::vector<int64_t> x;
    uint32_t axes;
    bool keepdims;
  };
  const Reduce reduces[] = {
      {{3, 4, 5, 6}, 0b0001, false}, {{3, 4, 5, 6}, 0b1010, true},
      {{3, 4, 5, 6}, 0b0110, false}, {{3, 4, 5, 6}, 0b1111, false},
      {{3, 4, 5, 6}, 0b1111, true},  {{3, 4, 5, 6}, 0b0000, false},
      {{3, 1, 5}, 0b010, false},     {{}, 0, false},
      {{2, 700}, 0b10, true},        {{700, 3}, 0b01, false}};
  for (const Reduce& r : reduces) {
    std::vector<int64_t> y;
    for (size_t d = 0; d < r.x.size(); ++d) {
      const bool reduced = (r.axes >> d) & 1u;
      if (!reduced) y.push_back(r.x[d]);
      if (reduced && r.keepdims) y.push_back(1);
    }
    for (int k = 1; k <= 2; ++k) {
      OpAttrs a = Kind(k);
      a.reduce_axes = r.axes;
      a.reduce_keepdims = r.keepdims;
      const std::string label =
          absl::StrFormat("x=%s axes=0x%x keepdims=%d kind=%d", Shape(r.x),
                          r.axes, r.keepdims, k);
      c.push_back({"reduce.forward " + label,
                   op::kReduceForward,
                   {finite(r.x)},
                   {Zeros(y)},
                   a});
      c.push_back(
          {"reduce.grad " + label, op::kReduceGrad, {f(y)}, {Zeros(r.x)}, a});
    }
  }
  // Data movement: the special values must come through bit for bit.
  c.push_back({"constant [] -> [1]", op::kConstant, {f({})}, {Zeros({1})}, {}});
  c.push_back({"parameter.forward 2x3x4x5",
               op::kParameterForward,
               {f({2, 3, 4, 5})},
               {Zeros({120})},
               {}});
  c.push_back(
      {"parameter.grad 7", op::kParameterGrad, {f({7})}, {Zeros({7})}, {}});
  c.push_back({"gather.forward repeated, unused a=3 v=6 p=8 b=2",
               op::kGatherForward,
               {f({3, 6, 2}), Ints({5, 0, 5, 5, 2, 0, 1, 5})},
               {Zeros({3, 8, 2})},
               {}});
  c.push_back({"gather.forward b=1 a=1 v=4 p=0",
               op::kGatherForward,
               {f({1, 4, 1}), Ints({})},
               {Zeros({1, 0, 1})},
               {}});
  Tensor ids = *Tensor::Zeros(DType::kInt32, {700});
  for (int64_t i = 0; i < ids.numel(); ++i) {
    ids.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 5 == 0 ? 3 : i % 4);
  }
  c.push_back({"gather.grad segments > 256 a=2 v=6 p=700 b=2",
               op::kGatherGrad,
               {ids, finite({2, 700, 2})},
               {Zeros({2, 6, 2})},
               {}});
  c.push_back({"gather.grad repeated, unused a=3 v=6 p=8 b=1",
               op::kGatherGrad,
               {Ints({5, 0, 5, 5, 2, 0, 1, 5}), finite({3, 8, 1})},
               {Zeros({3, 6, 1})},
               {}});
  // SLICE with step 2 and step 3 (positions start:stop:step).
  c.push_back({"slice.forward step 2 a=2 v=9 p=4 b=3",
               op::kSliceForward,
               {f({2, 9, 3}), Ints({1, 3, 5, 7})},
               {Zeros({2, 4, 3})},
               {}});
  c.push_back({"slice.grad step 2 a=2 v=9 p=4 b=3",
               op::kSliceGrad,
               {Ints({1, 3, 5, 7}), f({2, 4, 3})},
               {Zeros({2, 9, 3})},
               {}});
  c.push_back({"slice.grad step 3 a=1 v=10 p=4 b=1",
               op::kSliceGrad,
               {Ints({0, 3, 6, 9}), f({1, 4, 1})},
               {Zeros({1, 10, 1})},
               {}});
  c.push_back({"concat.forward 2+0+3 b=1",
               op::kConcatForward,
               {f({4, 2, 1}), f({4, 0, 1}), f({4, 3, 1})},
               {Zeros({4, 5, 1})},
               {}});
  c.push_back({"concat.forward 1+1+1 a=1 b=5",
               op::kConcatForward,
               {f({1, 1, 5}), f({1, 1, 5}), f({1, 1, 5})},
               {Zeros({1, 3, 5})},
               {}});
  c.push_back({"concat.grad 2+1+3 a=3 b=2",
               op::kConcatGrad,
               {f({3, 6, 2})},
               {Zeros({3, 2, 2}), Zeros({3, 1, 2}), Zeros({3, 3, 2})},
               {}});
  // MATMUL of a batched [N, M, K] = [4, 150, 5] and an unbatched [K, P] as
  // the executor presents it: [R, K] x [K, P] with R = 600 rows, db one
  // canonical reduction over the 600 rows (three chains). Finite inputs:
  // the dot products are the dense ones, tested with specials elsewhere.
  for (bool tb : {false, true}) {
    OpAttrs a;
    a.transpose_w = tb;
    const std::vector<int64_t> bs =
        tb ? std::vector<int64_t>{3, 5} : std::vector<int64_t>{5, 3};
    const std::string label =
        absl::StrCat(" unbatched b r=600 k=5 p=3 tb=", tb);
    c.push_back({"matmul.forward" + label,
                 op::kMatMulForward,
                 {plain({600, 5}), plain(bs)},
                 {Zeros({600, 3})},
                 a});
    c.push_back({"matmul.grad" + label,
                 op::kMatMulGrad,
                 {plain({600, 5}), plain(bs), plain({600, 3})},
                 {Zeros({600, 5}), Zeros(bs)},
                 a});
  }
  return c;
}

}  // namespace lockstep::kernels
