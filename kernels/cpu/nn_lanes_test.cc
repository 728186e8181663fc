// The CANONICAL softmax (forward and grad, plain and causal), softmax_xent
// (the row statistics), GELU (erf form, forward and grad), sigmoid, tanh,
// silu and GELU (tanh form), adam / adamw and grad_norm.sum_squares (chunks
// side by side) kernels run on the lane kernels: softmax's row reductions with
// lanes = rows (blocks of rows transposed in registers), GELU's whole element
// on the vector erf and exp. On every ISA path this CPU has and on 1, 2, 3 and
// 8 threads their bits equal the spec code (kernels/ops/norm.h one row at a
// time, kernels/ops/activations.h one element at a time), for row counts that
// leave tails after blocks of 8 and 16, rows shorter and longer than a vector
// and not a multiple of it, rows that cross the 256-term chunk, lengths that
// leave every vector tail, and inputs with NaN, infinities, -0, subnormals,
// ties at the row maximum, and NaN or infinity in dy past a causal row's end
// (where y is 0 and must not reach the dot).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/canonical/reduce.h"
#include "kernels/cpu/canonical_kernel_test.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ops/activations.h"
#include "kernels/ops/norm.h"
#include "kernels/ops/optimizers.h"
#include "kernels/ops/softmax_xent.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"
#include "kernels/testing/float_test_util.h"

namespace lockstep::kernels {
namespace {

namespace c = ::lockstep::canonical;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

std::vector<float> RandomFloats(int64_t n, uint32_t seed, float range) {
  return lockstep::testing::RandomFloats(static_cast<size_t>(n), seed, -range,
                                         range);
}

Tensor T(std::vector<int64_t> shape, const std::vector<float>& v) {
  return FloatTensor(std::move(shape), v);
}

class NnLanesTest : public CpuCanonicalKernelTest {
 protected:
  // Runs `op` on every ISA and thread count and compares with `want`.
  void ExpectSpecBits(const char* op, const std::vector<Tensor>& in,
                      const std::vector<int64_t>& out_shape,
                      const std::vector<float>& want, const OpAttrs& attrs,
                      const std::string& label) {
    for (CpuIsa isa : SupportedCpuIsas()) {
      SetCpuIsaForTesting(isa);
      for (int threads : {1, 2, 3, 8}) {
        SetCpuThreadsForTesting(threads);
        const std::string where =
            absl::StrCat(op, " ", label, ", isa ", CpuIsaName(isa), ", ",
                         threads, " threads");
        std::vector<Tensor> inputs = in;
        Tensor out[] = {T(out_shape, std::vector<float>(want.size(), 7.0f))};
        ASSERT_TRUE(
            Kernel(op)(absl::MakeConstSpan(inputs), absl::MakeSpan(out), attrs)
                .ok())
            << where;
        ExpectSameBits(out[0], want, where);
      }
    }
  }
};

// Specials in x: NaN first in a row (the row's max stays NaN), NaN and
// infinities inside rows, -0 and +0 tied at the maximum, subnormals; in dy:
// NaN and infinities, some past causal rows' ends.
void PlaceSpecials(int64_t rows, int64_t d, std::vector<float>* x,
                   std::vector<float>* dy) {
  auto at = [&](int64_t r, int64_t j) -> int64_t {
    return (r % rows) * d + (j % d);
  };
  (*x)[at(1, 0)] = kNan;
  (*x)[at(2, d / 2)] = kNan;
  (*x)[at(3, 1)] = kInf;
  (*x)[at(4, d - 1)] = -kInf;
  (*x)[at(5, 0)] = -0.0f;
  (*x)[at(5, 1)] = 0.0f;
  for (int64_t j = 2; j < d; ++j) (*x)[at(5, j)] = -1.0f;
  (*x)[at(6, 0)] = 3.0f;
  (*x)[at(6, d - 1)] = 3.0f;
  (*x)[at(7, 2)] = 1e-40f;
  for (int64_t r = 0; r < rows; r += 3) {
    (*dy)[at(r, d - 1)] = (r % 2) ? kNan : kInf;
  }
  (*dy)[at(8, 0)] = -kInf;
}

TEST_F(NnLanesTest, SoftmaxGivesTheSpecBitsOnEveryIsaAndThreadCount) {
  const std::vector<std::vector<int64_t>> shapes = {
      {37, 300}, {3, 7, 64}, {2, 4, 256, 256}, {1, 40, 5},
      {33, 17},  {2, 9, 9},  {1, 300, 300}};
  uint32_t seed = 500;
  for (const std::vector<int64_t>& shape : shapes) {
    for (const bool causal : {false, true}) {
      if (causal && shape[shape.size() - 2] != shape.back()) continue;
      for (const bool specials : {false, true}) {
        const std::string label =
            absl::StrCat("shape [", absl::StrJoin(shape, ","), "]",
                         causal ? " causal" : "", specials ? " specials" : "");
        int64_t numel = 1;
        for (int64_t d : shape) numel *= d;
        c::RowShape s;
        s.d = shape.back();
        s.rows = numel / s.d;
        s.causal = causal;
        std::vector<float> x = RandomFloats(numel, seed++, 8.0f);
        std::vector<float> dy = RandomFloats(numel, seed++, 2.0f);
        if (specials && s.rows >= 9) PlaceSpecials(s.rows, s.d, &x, &dy);
        std::vector<float> want_y(numel), want_dx(numel);
        c::SoftmaxLastForward(s, x.data(), want_y.data());
        c::SoftmaxLastGrad(s, x.data(), dy.data(), want_dx.data());
        OpAttrs attrs;
        attrs.causal = causal;
        ExpectSpecBits(op::kSoftmaxForward, {T(shape, x)}, shape, want_y, attrs,
                       label);
        ExpectSpecBits(op::kSoftmaxGrad, {T(shape, x), T(shape, dy)}, shape,
                       want_dx, attrs, label);
        // From the forward's y: the same bits, and y is what it reads (x
        // replaced by other values changes nothing).
        ExpectSpecBits(op::kSoftmaxGrad,
                       {T(shape, RandomFloats(numel, seed++, 8.0f)),
                        T(shape, dy), T(shape, want_y)},
                       shape, want_dx, attrs, label + " from y");
      }
    }
  }
}

// softmax.grad's y is checked like dy: shaped like x, float32, named.
TEST_F(NnLanesTest, SoftmaxGradRefusesAMisshapenY) {
  const std::vector<float> v(24, 0.5f);
  Tensor out[] = {T({4, 6}, std::vector<float>(24))};
  {
    Tensor in[] = {T({4, 6}, v), T({4, 6}, v), T({6, 4}, v)};
    const absl::Status st = Kernel(op::kSoftmaxGrad)(
        absl::MakeConstSpan(in), absl::MakeSpan(out), OpAttrs{});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("softmax.grad: y"), std::string::npos) << st;
  }
  {
    Tensor in[] = {T({4, 6}, v), T({4, 6}, v), T({4, 6}, v)};
    Tensor two[] = {out[0], T({4, 6}, std::vector<float>(24))};
    const absl::Status st = Kernel(op::kSoftmaxGrad)(
        absl::MakeConstSpan(in), absl::MakeSpan(two), OpAttrs{});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("expected 1 output, got 2"), std::string::npos)
        << st;
  }
}

// softmax_xent's row statistics run on the same lane kernel (lanes = rows):
// the loss and dlogits have the spec's bits, for rows crossing the chunk,
// row counts with every tail, and specials in the logits.
TEST_F(NnLanesTest, SoftmaxXentGivesTheSpecBitsOnEveryIsaAndThreadCount) {
  const int64_t shapes[][2] = {
      {300, 10}, {37, 600}, {17, 256}, {1, 1}, {40, 33}};
  uint32_t seed = 700;
  for (const auto& shape : shapes) {
    for (const bool specials : {false, true}) {
      c::SoftmaxShape s;
      s.n = shape[0];
      s.c = shape[1];
      const std::string label =
          absl::StrCat("n ", s.n, " c ", s.c, specials ? " specials" : "");
      std::vector<float> logits = RandomFloats(s.n * s.c, seed++, 8.0f);
      std::vector<int32_t> labels(s.n);
      std::mt19937 gen(seed++);
      for (int32_t& l : labels) l = static_cast<int32_t>(gen() % s.c);
      if (specials && s.n >= 9) {
        std::vector<float> unused(s.n * s.c);
        PlaceSpecials(s.n, s.c, &logits, &unused);
      }
      std::vector<float> scratch(s.n), want_dlogits(s.n * s.c);
      const std::vector<float> want_loss = {c::SoftmaxXentForward(
          s, logits.data(), labels.data(), scratch.data())};
      c::SoftmaxXentGrad(s, logits.data(), labels.data(), want_dlogits.data());
      const Tensor labels_t = *Tensor::FromValues<int32_t>({s.n}, labels);
      ExpectSpecBits(op::kSoftmaxXentForward, {T({s.n, s.c}, logits), labels_t},
                     {1}, want_loss, OpAttrs{}, label);
      ExpectSpecBits(op::kSoftmaxXentGrad, {T({s.n, s.c}, logits), labels_t},
                     {s.n, s.c}, want_dlogits, OpAttrs{}, label);
    }
  }
}

TEST_F(NnLanesTest, GeluGivesTheSpecBitsOnEveryIsaAndThreadCount) {
  // Every branch of the erf (|x| < 1, 1 <= |x| < 6, beyond) and the exp's
  // underflow, with specials, at lengths that leave every tail. Then
  // narrower ranges, where most lanes lie within the erf's |x| < 1 branch
  // and a few, scattered, outside it (the AVX2 lanes compute that branch
  // alone for every lane, then the whole erf for the others, gathered:
  // GeluBlocks), with arguments at the branch's edge (x / sqrt(2) just
  // below 1, and 1 or just above) among them.
  uint32_t seed = 900;
  const float edges[] = {1.4142134f, 1.4142135f, 1.4142137f, -1.4142134f,
                         -1.4142137f};
  for (const float range : {12.0f, 1.5f, 1.2f}) {
    for (const int64_t n : {int64_t{1}, int64_t{15}, int64_t{17},
                            int64_t{40000}, int64_t{16384 * 2 + 5}}) {
      std::vector<float> x = RandomFloats(n, seed++, range);
      std::vector<float> dy = RandomFloats(n, seed++, 2.0f);
      const float specials[] = {kNan,    kInf, -kInf, -0.0f, 0.0f,  1e-40f,
                                -1e-40f, 1.0f, -1.0f, 6.0f,  -6.0f, 20.0f};
      for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); ++i) {
        if (range > 2.0f && static_cast<int64_t>(3 * i) < n) {
          x[3 * i] = specials[i];
        }
        if (static_cast<int64_t>(3 * i + 1) < n) dy[3 * i + 1] = specials[i];
      }
      if (range < 2.0f) {
        for (int64_t i = 500, e = 0; i < n; i += 997, ++e) {
          x[i] = edges[e % (sizeof(edges) / sizeof(edges[0]))];
        }
      }
      std::vector<float> want_y(n), want_dx(n);
      c::ActivationForward(c::Activation::kGelu, x.data(), want_y.data(), n);
      c::ActivationGrad(c::Activation::kGelu, x.data(), dy.data(),
                        want_dx.data(), n);
      const std::string label = absl::StrCat("range ", range, ", n ", n);
      ExpectSpecBits(op::kGeluForward, {T({n}, x)}, {n}, want_y, OpAttrs{},
                     label);
      ExpectSpecBits(op::kGeluGrad, {T({n}, x), T({n}, dy)}, {n}, want_dx,
                     OpAttrs{}, label);
    }
  }
}

// sigmoid, tanh, silu and gelu (tanh form), one element per lane around the
// vector exp and tanh: every branch of the tanh (|x| < 1, 1 <= |x| <= 9.5,
// beyond, and the edges between them), the exp's overflow and underflow,
// specials in x and dy, lengths that leave every tail.
TEST_F(NnLanesTest, TanhFamilyGivesTheSpecBitsOnEveryIsaAndThreadCount) {
  struct Act {
    c::Activation a;
    const char* forward;
    const char* grad;
  };
  const Act acts[] = {
      {c::Activation::kSigmoid, op::kSigmoidForward, op::kSigmoidGrad},
      {c::Activation::kTanh, op::kTanhForward, op::kTanhGrad},
      {c::Activation::kSilu, op::kSiluForward, op::kSiluGrad},
      {c::Activation::kGeluTanh, op::kGeluTanhForward, op::kGeluTanhGrad},
  };
  const float specials[] = {
      kNan,   -kNan,   kInf,      -kInf,     -0.0f,       0.0f,
      1e-40f, -1e-40f, 1.0f,      -1.0f,     0.99999994f, 1.0000001f,
      9.5f,   -9.5f,   9.500001f, 9.499999f, 4.5f,        -4.75f,
      20.0f,  -20.0f,  88.8f,     -88.8f,    104.0f,      -104.0f,
      1e30f,  -1e30f,  3.4e38f,   -3.4e38f};
  uint32_t seed = 1700;
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{15}, int64_t{17},
                          int64_t{40000}, int64_t{16384 * 2 + 5}}) {
    std::vector<float> x = RandomFloats(n, seed++, 12.0f);
    std::vector<float> dy = RandomFloats(n, seed++, 2.0f);
    for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); ++i) {
      if (static_cast<int64_t>(3 * i) < n) x[3 * i] = specials[i];
      if (static_cast<int64_t>(3 * i + 1) < n) dy[3 * i + 1] = specials[i];
    }
    for (const Act& act : acts) {
      std::vector<float> want_y(n), want_dx(n);
      c::ActivationForward(act.a, x.data(), want_y.data(), n);
      c::ActivationGrad(act.a, x.data(), dy.data(), want_dx.data(), n);
      const std::string label = absl::StrCat("n ", n);
      ExpectSpecBits(act.forward, {T({n}, x)}, {n}, want_y, OpAttrs{}, label);
      ExpectSpecBits(act.grad, {T({n}, x), T({n}, dy)}, {n}, want_dx, OpAttrs{},
                     label);
    }
  }
}

// adam.update and adamw.update, one element per lane (w, m, v in place):
// specials in every operand, zero second moments (sqrt(0) + eps), tails.
TEST_F(NnLanesTest, AdamGivesTheSpecBitsOnEveryIsaAndThreadCount) {
  uint32_t seed = 1100;
  for (const bool decoupled : {false, true}) {
    for (const int64_t n : {int64_t{1}, int64_t{15}, int64_t{17},
                            int64_t{40000}, int64_t{16384 * 2 + 5}}) {
      std::vector<float> w = RandomFloats(n, seed++, 3.0f);
      std::vector<float> m = RandomFloats(n, seed++, 0.5f);
      std::vector<float> v = RandomFloats(n, seed++, 1.0f);
      const std::vector<float> g = [&] {
        std::vector<float> r = RandomFloats(n, seed++, 2.0f);
        for (float& f : v) f = f * f;  // second moments are >= 0
        const float specials[] = {kNan, kInf, -kInf, -0.0f, 0.0f, 1e-40f};
        for (size_t i = 0; i < 6; ++i) {
          for (size_t k = 0; k < 4; ++k) {
            const int64_t at = static_cast<int64_t>(4 * i + k + 5 * k);
            if (at >= n) continue;
            (k == 0 ? r : k == 1 ? w : k == 2 ? m : v)[at] = specials[i];
          }
        }
        return r;
      }();
      OpAttrs attrs;
      attrs.learning_rate = 0.01f;
      attrs.beta1 = 0.9f;
      attrs.beta2 = 0.999f;
      attrs.epsilon = 1e-8f;
      attrs.step = 7;
      attrs.weight_decay = 0.05f;
      const c::AdamScalars s =
          decoupled
              ? c::AdamWScalarsOf(attrs.learning_rate, attrs.beta1, attrs.beta2,
                                  attrs.epsilon, attrs.step, attrs.weight_decay)
              : c::AdamScalarsOf(attrs.learning_rate, attrs.beta1, attrs.beta2,
                                 attrs.epsilon, attrs.step);
      std::vector<float> want_w = w, want_m = m, want_v = v;
      c::AdamUpdate(s, want_w.data(), want_m.data(), want_v.data(), g.data(),
                    n);
      const char* op = decoupled ? op::kAdamWUpdate : op::kAdamUpdate;
      for (CpuIsa isa : SupportedCpuIsas()) {
        SetCpuIsaForTesting(isa);
        for (int threads : {1, 2, 3, 8}) {
          SetCpuThreadsForTesting(threads);
          const std::string where =
              absl::StrCat(op, " n ", n, ", isa ", CpuIsaName(isa), ", ",
                           threads, " threads");
          Tensor in[] = {T({n}, g)};
          Tensor out[] = {T({n}, w), T({n}, m), T({n}, v)};
          ASSERT_TRUE(
              Kernel(op)(absl::MakeConstSpan(in), absl::MakeSpan(out), attrs)
                  .ok())
              << where;
          ExpectSameBits(out[0], want_w, "w, " + where);
          ExpectSameBits(out[1], want_m, "m, " + where);
          ExpectSameBits(out[2], want_v, "v, " + where);
        }
      }
    }
  }
}

// grad_norm.sum_squares: the full chunks' chains side by side (one chunk
// per lane, blocks of 8 and 16 chunks transposed in registers, a partial
// block, the pool), the short last chunk and the tree: the bits of
// canonical::CanonicalDot(g, 1, g, 1, n), for lengths around the chunk and
// the vector blocks, large enough for the pool, and with subnormals, -0,
// infinities and NaN.
TEST_F(NnLanesTest, SumSquaresGivesTheSpecBitsOnEveryIsaAndThreadCount) {
  const float kSubnormal = std::numeric_limits<float>::denorm_min() * 37.0f;
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{256},
                          int64_t{257}, int64_t{8 * 256}, int64_t{16 * 256},
                          int64_t{2 * 16 * 256 + 9 * 256 + 255},
                          int64_t{3 * 256 + 1}, int64_t{1 << 19}}) {
    for (int family = 0; family < 4; ++family) {
      std::vector<float> g =
          RandomFloats(n, 900 + static_cast<uint32_t>(n) + family, 3.0f);
      if (family == 1) {
        // Subnormals and -0 throughout: their squares underflow to +0.
        for (int64_t i = 0; i < n; i += 3) g[i] = (i % 2 ? -1 : 1) * kSubnormal;
        for (int64_t i = 1; i < n; i += 7) g[i] = -0.0f;
      }
      if (family == 2 && n > 0) g[n / 2] = -kInf;
      if (family == 3 && n > 0) g[n - 1] = kNan;
      const float want = c::CanonicalDot(g.data(), 1, g.data(), 1, n);
      ExpectSpecBits(op::kGradNormSumSquares, {T({n}, g)}, {1}, {want}, {},
                     absl::StrCat("n ", n, ", family ", family));
    }
  }
}

}  // namespace
}  // namespace lockstep::kernels
