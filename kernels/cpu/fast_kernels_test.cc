// The registered fast CPU kernels: CANONICAL dense and conv2d kernels (GEMM)
// and bias_add.grad and the pooling ops (lane kernels) against the "scalar"
// ones through the registry for every ISA and thread count; DETERMINISTIC
// repeatable; DEFAULT (atomic) within rounding of CANONICAL.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"
#include "kernels/testing/float_test_util.h"

namespace lockstep::kernels {
namespace {

using ::lockstep::testing::FloatBits;
using ::lockstep::testing::FromBits;
using ::lockstep::testing::HexFloat;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::RandomFloats;
using ::lockstep::testing::SmallInts;
using ::lockstep::testing::StatusIs;

::testing::AssertionResult SameBits(const std::vector<float>& got,
                                    const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes differ";
  }
  size_t diffs = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (FloatBits(got[i]) != FloatBits(want[i]) && diffs++ == 0) first = i;
  }
  if (diffs == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << absl::StrFormat(
             "%d of %d differ; first at index 0x%x: got %s, want %s", diffs,
             got.size(), first, HexFloat(got[first]), HexFloat(want[first]));
}

// |got - want| <= rel * max(1, |want|) elementwise.
::testing::AssertionResult Close(const std::vector<float>& got,
                                 const std::vector<float>& want, double rel) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = rel * std::max(1.0, std::fabs(double{want[i]}));
    if (!(std::fabs(double{got[i]} - double{want[i]}) <= tol)) {
      return ::testing::AssertionFailure()
             << absl::StrFormat("index 0x%x: got %s, want %s (tolerance %g)", i,
                                HexFloat(got[i]), HexFloat(want[i]), tol);
    }
  }
  return ::testing::AssertionSuccess();
}

Tensor T(std::vector<int64_t> shape, const std::vector<float>& v) {
  return *Tensor::FromValues<float>(std::move(shape), v);
}
Tensor Z(std::vector<int64_t> shape) {
  return *Tensor::Zeros(DType::kFloat32, std::move(shape));
}
std::vector<float> V(const Tensor& t) {
  absl::Span<const float> s = t.span<float>();
  return std::vector<float>(s.begin(), s.end());
}

class FastKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_THAT(RegisterCpuCanonicalKernels(&registry_), IsOk());
    ASSERT_THAT(RegisterCpuDeterministicAndDefaultKernels(&registry_), IsOk());
    // A kernel reading scratch it did not write would see NaNs.
    SetScratchPoisonForTesting(true);
  }
  void TearDown() override {
    SetScratchPoisonForTesting(false);
    SetCpuIsaForTesting(std::nullopt);
    SetCpuThreadsForTesting(0);
  }
  // Runs (op, mode, algorithm) and returns output 0.
  std::vector<float> Run(const std::string& op, Mode mode,
                         const std::string& algorithm,
                         const std::vector<Tensor>& in,
                         std::vector<int64_t> out_shape,
                         const OpAttrs& attrs = {}) {
    absl::StatusOr<KernelFn> fn =
        registry_.Lookup(KernelKey{op, mode, algorithm, "cpu"});
    EXPECT_THAT(fn.status(), IsOk());
    if (!fn.ok()) return {};
    std::vector<Tensor> out = {Z(std::move(out_shape))};
    EXPECT_THAT((*fn)(in, absl::MakeSpan(out), attrs), IsOk());
    return V(out[0]);
  }
  // The output of `op` through its CANONICAL and DETERMINISTIC kernels
  // equals the scalar kernel's bits for every ISA, thread count
  // {1, 2, 3, 8}, twice.
  void ExpectLanesEqualScalar(const std::string& op,
                              const std::vector<Tensor>& in,
                              const std::vector<int64_t>& out, const OpAttrs& a,
                              const std::string& what) {
    const std::vector<float> want =
        Run(op, Mode::kCanonical, kScalarAlgorithm, in, out, a);
    for (CpuIsa isa : SupportedCpuIsas()) {
      SetCpuIsaForTesting(isa);
      for (int threads : {1, 2, 3, 8}) {
        SetCpuThreadsForTesting(threads);
        for (int rep = 0; rep < 2; ++rep) {
          for (Mode mode : {Mode::kCanonical, Mode::kDeterministic}) {
            const std::vector<float> got =
                Run(op, mode,
                    mode == Mode::kCanonical ? kCanonicalAlgorithm
                                             : kDeterministicAlgorithm,
                    in, out, a);
            ASSERT_TRUE(SameBits(got, want)) << absl::StrFormat(
                "%s %s isa=%s threads=%d rep=%d mode=%s", op, what,
                CpuIsaName(isa), threads, rep, ModeName(mode));
          }
        }
      }
    }
  }
  Registry registry_;
};

struct DenseCase {
  std::string op;
  std::vector<Tensor> in;
  std::vector<int64_t> out_shape;
  OpAttrs attrs;
  int64_t depth;
};

// Every dense op and transpose combination for one (m, k, n).
std::vector<DenseCase> DenseCases(int64_t m, int64_t k, int64_t n, bool ints,
                                  uint32_t seed) {
  auto gen = [&](int64_t count, uint32_t s) {
    return ints ? SmallInts(count, s) : RandomFloats(count, s);
  };
  std::vector<DenseCase> out;
  for (int tr = 0; tr < 4; ++tr) {
    OpAttrs a;
    a.transpose_x = (tr & 1) != 0;
    a.transpose_w = (tr & 2) != 0;
    const std::vector<int64_t> xs =
        a.transpose_x ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k};
    const std::vector<int64_t> ws =
        a.transpose_w ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
    const Tensor x = T(xs, gen(m * k, seed + tr));
    const Tensor w = T(ws, gen(k * n, seed + 10 + tr));
    const Tensor dy = T({m, n}, gen(m * n, seed + 20 + tr));
    out.push_back({op::kDenseForward, {x, w}, {m, n}, a, k});
    out.push_back({op::kDenseGradInput, {dy, w}, xs, a, n});
    out.push_back({op::kDenseGradWeight, {x, dy}, ws, a, m});
  }
  return out;
}

TEST_F(FastKernelsTest, CanonicalDenseEqualsScalarForEveryIsaAndThreads) {
  struct Dims {
    int64_t m, k, n;
  };
  uint32_t seed = 100;
  for (const Dims& d : {Dims{5, 600, 19}, Dims{17, 257, 3}, Dims{1, 1, 1},
                        Dims{256, 7, 33}, Dims{2, 0, 3}}) {
    for (bool ints : {false, true}) {
      for (const DenseCase& c : DenseCases(d.m, d.k, d.n, ints, seed += 50)) {
        const std::vector<float> want =
            Run(c.op, Mode::kCanonical, kScalarAlgorithm, c.in, c.out_shape,
                c.attrs);
        for (CpuIsa isa : SupportedCpuIsas()) {
          SetCpuIsaForTesting(isa);
          for (int threads : {1, 2, 3, 8}) {
            SetCpuThreadsForTesting(threads);
            for (int rep = 0; rep < 2; ++rep) {
              const std::vector<float> got =
                  Run(c.op, Mode::kCanonical, kCanonicalAlgorithm, c.in,
                      c.out_shape, c.attrs);
              ASSERT_TRUE(SameBits(got, want)) << absl::StrFormat(
                  "%s m=%d k=%d n=%d tx=%d tw=%d ints=%d isa=%s threads=%d "
                  "rep=%d",
                  c.op, d.m, d.k, d.n, c.attrs.transpose_x, c.attrs.transpose_w,
                  ints, CpuIsaName(isa), threads, rep);
            }
          }
        }
      }
    }
  }
}

// matmul.* on a batch of 3 entries: the outputs of (op, mode, algorithm),
// flattened, output 0 then output 1 (matmul.grad).
std::vector<float> RunMatMul(Registry& registry, bool grad, Mode mode,
                             const std::string& algorithm,
                             const std::vector<Tensor>& in,
                             const std::vector<std::vector<int64_t>>& outs,
                             const OpAttrs& a) {
  absl::StatusOr<KernelFn> fn = registry.Lookup(KernelKey{
      grad ? op::kMatMulGrad : op::kMatMulForward, mode, algorithm, "cpu"});
  EXPECT_THAT(fn.status(), IsOk());
  if (!fn.ok()) return {};
  std::vector<Tensor> out;
  for (const auto& shape : outs) out.push_back(Z(shape));
  EXPECT_THAT((*fn)(in, absl::MakeSpan(out), a), IsOk());
  std::vector<float> all;
  for (const Tensor& t : out) {
    const std::vector<float> v = V(t);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

struct MatMulCase {
  std::vector<Tensor> fwd_in, grad_in;
  std::vector<int64_t> as, bs, ys;
  OpAttrs attrs;
};

// Batch 3 of op(a) [m, k] x op(b) [k, n], every transpose combination.
std::vector<MatMulCase> MatMulCases(int64_t m, int64_t k, int64_t n, bool ints,
                                    float scale, uint32_t seed) {
  const int64_t batch = 3;
  auto gen = [&](int64_t count, uint32_t s) {
    return ints ? SmallInts(count, s) : RandomFloats(count, s);
  };
  std::vector<MatMulCase> out;
  for (int tr = 0; tr < 4; ++tr) {
    MatMulCase c;
    c.attrs.transpose_x = (tr & 1) != 0;
    c.attrs.transpose_w = (tr & 2) != 0;
    c.attrs.scale = scale;
    c.as = c.attrs.transpose_x ? std::vector<int64_t>{batch, k, m}
                               : std::vector<int64_t>{batch, m, k};
    c.bs = c.attrs.transpose_w ? std::vector<int64_t>{batch, n, k}
                               : std::vector<int64_t>{batch, k, n};
    c.ys = {batch, m, n};
    const Tensor a = T(c.as, gen(batch * m * k, seed + tr));
    const Tensor b = T(c.bs, gen(batch * k * n, seed + 10 + tr));
    const Tensor dy = T(c.ys, gen(batch * m * n, seed + 20 + tr));
    c.fwd_in = {a, b};
    c.grad_in = {a, b, dy};
    out.push_back(std::move(c));
  }
  return out;
}

// The scalar dense kernels on entry t of every operand, then the scale:
// what the spec says matmul.forward and matmul.grad are.
std::vector<float> DensePerEntry(Registry& registry, const MatMulCase& c,
                                 bool grad) {
  const int64_t batch = c.as[0];
  auto entry = [](const Tensor& t, int64_t i) {
    std::vector<int64_t> shape(t.shape().begin() + 1, t.shape().end());
    const int64_t per = t.numel() / t.dim(0);
    const std::vector<float> v = V(t);
    return T(shape, std::vector<float>(v.begin() + i * per,
                                       v.begin() + (i + 1) * per));
  };
  auto run = [&](const char* op, std::vector<Tensor> in,
                 std::vector<int64_t> shape) {
    KernelFn fn = *registry.Lookup(
        KernelKey{op, Mode::kCanonical, kScalarAlgorithm, "cpu"});
    std::vector<Tensor> out = {Z(std::move(shape))};
    EXPECT_THAT(fn(in, absl::MakeSpan(out), c.attrs), IsOk());
    std::vector<float> v = V(out[0]);
    if (c.attrs.scale != 1.0f) {
      for (float& x : v) x = x * c.attrs.scale;
    }
    return v;
  };
  std::vector<float> first, second;
  for (int64_t t = 0; t < batch; ++t) {
    const Tensor a = entry(c.grad_in[0], t), b = entry(c.grad_in[1], t),
                 dy = entry(c.grad_in[2], t);
    std::vector<float> v =
        grad ? run(op::kDenseGradInput, {dy, b}, a.shape())
             : run(op::kDenseForward, {a, b}, {c.ys[1], c.ys[2]});
    first.insert(first.end(), v.begin(), v.end());
    if (grad) {
      v = run(op::kDenseGradWeight, {a, dy}, b.shape());
      second.insert(second.end(), v.begin(), v.end());
    }
  }
  first.insert(first.end(), second.begin(), second.end());
  return first;
}

TEST_F(FastKernelsTest, CanonicalMatMulIsScalarDensePerEntryForEveryIsa) {
  struct Dims {
    int64_t m, k, n;
    float scale;
  };
  uint32_t seed = 900;
  for (const Dims& d : {Dims{5, 600, 19, 1.0f}, Dims{17, 33, 260, 0.125f},
                        Dims{2, 0, 3, -0.5f}}) {
    for (bool ints : {false, true}) {
      for (const MatMulCase& c :
           MatMulCases(d.m, d.k, d.n, ints, d.scale, seed += 50)) {
        for (bool grad : {false, true}) {
          const std::vector<float> want = DensePerEntry(registry_, c, grad);
          const std::vector<std::vector<int64_t>> outs =
              grad ? std::vector<std::vector<int64_t>>{c.as, c.bs}
                   : std::vector<std::vector<int64_t>>{c.ys};
          for (CpuIsa isa : SupportedCpuIsas()) {
            SetCpuIsaForTesting(isa);
            for (int threads : {1, 2, 3, 8}) {
              SetCpuThreadsForTesting(threads);
              const std::vector<float> got = RunMatMul(
                  registry_, grad, Mode::kCanonical, kCanonicalAlgorithm,
                  grad ? c.grad_in : c.fwd_in, outs, c.attrs);
              ASSERT_TRUE(SameBits(got, want)) << absl::StrFormat(
                  "grad=%d m=%d k=%d n=%d ta=%d tb=%d ints=%d isa=%s "
                  "threads=%d",
                  grad, d.m, d.k, d.n, c.attrs.transpose_x, c.attrs.transpose_w,
                  ints, CpuIsaName(isa), threads);
            }
          }
        }
      }
    }
  }
}

TEST_F(FastKernelsTest, DeterministicAndSplitKMatMulAreRepeatableAndClose) {
  for (bool ints : {false, true}) {
    for (const MatMulCase& c : MatMulCases(9, 700, 21, ints, 0.25f, 7)) {
      for (bool grad : {false, true}) {
        const std::vector<float> canonical = DensePerEntry(registry_, c, grad);
        const std::vector<std::vector<int64_t>> outs =
            grad ? std::vector<std::vector<int64_t>>{c.as, c.bs}
                 : std::vector<std::vector<int64_t>>{c.ys};
        const std::vector<Tensor>& in = grad ? c.grad_in : c.fwd_in;
        for (CpuIsa isa : SupportedCpuIsas()) {
          SetCpuIsaForTesting(isa);
          std::vector<float> first;
          for (int threads : {1, 3}) {
            SetCpuThreadsForTesting(threads);
            const std::vector<float> det =
                RunMatMul(registry_, grad, Mode::kDeterministic,
                          kDeterministicAlgorithm, in, outs, c.attrs);
            if (first.empty()) first = det;
            ASSERT_TRUE(SameBits(det, first)) << "grad=" << grad;
            ASSERT_TRUE(Close(det, canonical, 1e-4)) << "grad=" << grad;
            if (ints) {
              ASSERT_TRUE(SameBits(det, canonical));
            }
            if (grad) continue;
            const std::vector<float> split =
                RunMatMul(registry_, false, Mode::kDefault,
                          kSplitKAtomicAlgorithm, in, outs, c.attrs);
            ASSERT_TRUE(Close(split, canonical, 1e-4));
            if (ints) {
              ASSERT_TRUE(SameBits(split, canonical));
            }
          }
        }
      }
    }
  }
}

struct ConvCase {
  int64_t n, c_in, h, w, c_out, k_h, k_w;
  int64_t stride_h, stride_w, pad_t, pad_b, pad_l, pad_r, dil_h, dil_w, groups;
};

TEST_F(FastKernelsTest, CanonicalConvEqualsScalarForEveryIsaAndThreads) {
  const ConvCase cases[] = {
      {2, 3, 7, 6, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},
      {1, 2, 9, 8, 3, 3, 2, 2, 3, 0, 1, 1, 0, 2, 1, 1},      // stride, dilation
      {2, 4, 5, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2},      // groups
      {1, 3, 6, 7, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 3},      // depthwise
      {2, 40, 12, 12, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},  // chunks > 256
      {3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1},
      {45, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},  // image batches
      {30, 4, 6, 7, 6, 3, 2, 2, 3, 1, 0, 2, 1, 1, 2, 2},  // batches, groups
  };
  uint32_t seed = 900;
  for (const ConvCase& cc : cases) {
    OpAttrs a;
    a.stride_h = cc.stride_h;
    a.stride_w = cc.stride_w;
    a.pad_top = cc.pad_t;
    a.pad_bottom = cc.pad_b;
    a.pad_left = cc.pad_l;
    a.pad_right = cc.pad_r;
    a.dilation_h = cc.dil_h;
    a.dilation_w = cc.dil_w;
    a.groups = cc.groups;
    const int64_t oh =
        (cc.h + cc.pad_t + cc.pad_b - (cc.dil_h * (cc.k_h - 1) + 1)) /
            cc.stride_h +
        1;
    const int64_t ow =
        (cc.w + cc.pad_l + cc.pad_r - (cc.dil_w * (cc.k_w - 1) + 1)) /
            cc.stride_w +
        1;
    const std::vector<int64_t> xs = {cc.n, cc.c_in, cc.h, cc.w};
    const std::vector<int64_t> ws = {cc.c_out, cc.c_in / cc.groups, cc.k_h,
                                     cc.k_w};
    const std::vector<int64_t> ys = {cc.n, cc.c_out, oh, ow};
    auto count = [](const std::vector<int64_t>& s) {
      return s[0] * s[1] * s[2] * s[3];
    };
    for (bool ints : {false, true}) {
      auto gen = [&](int64_t n) {
        ++seed;
        return ints ? SmallInts(n, seed) : RandomFloats(n, seed);
      };
      const Tensor x = T(xs, gen(count(xs)));
      const Tensor w = T(ws, gen(count(ws)));
      const Tensor dy = T(ys, gen(count(ys)));
      struct Call {
        const char* op;
        std::vector<Tensor> in;
        std::vector<int64_t> out;
      };
      const Call calls[] = {{op::kConv2dForward, {x, w}, ys},
                            {op::kConv2dGradInput, {dy, w}, xs},
                            {op::kConv2dGradWeight, {x, dy}, ws}};
      for (const Call& call : calls) {
        const std::vector<float> want = Run(
            call.op, Mode::kCanonical, kScalarAlgorithm, call.in, call.out, a);
        for (CpuIsa isa : SupportedCpuIsas()) {
          SetCpuIsaForTesting(isa);
          for (int threads : {1, 2, 3, 8}) {
            SetCpuThreadsForTesting(threads);
            for (int rep = 0; rep < 2; ++rep) {
              const std::vector<float> got =
                  Run(call.op, Mode::kCanonical, kCanonicalAlgorithm, call.in,
                      call.out, a);
              ASSERT_TRUE(SameBits(got, want)) << absl::StrFormat(
                  "%s case c_in=%d groups=%d ints=%d isa=%s threads=%d rep=%d",
                  call.op, cc.c_in, cc.groups, ints, CpuIsaName(isa), threads,
                  rep);
            }
          }
        }
      }
    }
  }
}

// The three conv2d calls of one geometry, inputs from gen.
struct ConvCall {
  const char* op;
  std::vector<Tensor> in;
  std::vector<int64_t> out;
  int64_t depth;  // reduction length
};
std::vector<ConvCall> ConvCalls(
    const ConvCase& cc, OpAttrs* a,
    const std::function<std::vector<float>(int64_t)>& gen) {
  a->stride_h = cc.stride_h;
  a->stride_w = cc.stride_w;
  a->pad_top = cc.pad_t;
  a->pad_bottom = cc.pad_b;
  a->pad_left = cc.pad_l;
  a->pad_right = cc.pad_r;
  a->dilation_h = cc.dil_h;
  a->dilation_w = cc.dil_w;
  a->groups = cc.groups;
  const int64_t oh =
      (cc.h + cc.pad_t + cc.pad_b - (cc.dil_h * (cc.k_h - 1) + 1)) /
          cc.stride_h +
      1;
  const int64_t ow =
      (cc.w + cc.pad_l + cc.pad_r - (cc.dil_w * (cc.k_w - 1) + 1)) /
          cc.stride_w +
      1;
  const std::vector<int64_t> xs = {cc.n, cc.c_in, cc.h, cc.w};
  const std::vector<int64_t> ws = {cc.c_out, cc.c_in / cc.groups, cc.k_h,
                                   cc.k_w};
  const std::vector<int64_t> ys = {cc.n, cc.c_out, oh, ow};
  auto count = [](const std::vector<int64_t>& s) {
    return s[0] * s[1] * s[2] * s[3];
  };
  const Tensor x = T(xs, gen(count(xs)));
  const Tensor w = T(ws, gen(count(ws)));
  const Tensor dy = T(ys, gen(count(ys)));
  const int64_t taps = cc.k_h * cc.k_w;
  return {{op::kConv2dForward, {x, w}, ys, cc.c_in / cc.groups * taps},
          {op::kConv2dGradInput, {dy, w}, xs, cc.c_out / cc.groups * taps},
          {op::kConv2dGradWeight, {x, dy}, ws, cc.n * oh * ow}};
}

// DETERMINISTIC conv2d: one fma chain per output. Per ISA the bits never
// change with the thread count or between calls; exact on small integers
// (every order is); within rounding of CANONICAL. DEFAULT forward and
// grad_input are the same kernels.
TEST_F(FastKernelsTest, DeterministicConvIsRepeatableAndClose) {
  const ConvCase cases[] = {
      {2, 40, 12, 12, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},  // chains > 256
      {1, 2, 9, 8, 3, 3, 2, 2, 3, 0, 1, 1, 0, 2, 1, 1},      // stride, dilation
      {2, 4, 5, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2},      // groups
      {9, 3, 11, 10, 4, 5, 5, 2, 2, 2, 2, 2, 2, 1, 1, 1},    // dw chain 270
      {45, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},     // image batches
  };
  uint32_t seed = 4000;
  for (const ConvCase& cc : cases) {
    for (bool ints : {false, true}) {
      OpAttrs a;
      const std::vector<ConvCall> calls = ConvCalls(cc, &a, [&](int64_t n) {
        ++seed;
        return ints ? SmallInts(n, seed) : RandomFloats(n, seed);
      });
      for (const ConvCall& call : calls) {
        SetCpuIsaForTesting(std::nullopt);
        SetCpuThreadsForTesting(0);
        const std::vector<float> canonical =
            Run(call.op, Mode::kCanonical, kCanonicalAlgorithm, call.in,
                call.out, a);
        for (CpuIsa isa : SupportedCpuIsas()) {
          SetCpuIsaForTesting(isa);
          std::vector<float> first;
          for (int threads : {1, 2, 3, 8}) {
            SetCpuThreadsForTesting(threads);
            for (int rep = 0; rep < 2; ++rep) {
              const std::vector<float> got =
                  Run(call.op, Mode::kDeterministic, kDeterministicAlgorithm,
                      call.in, call.out, a);
              if (first.empty()) first = got;
              ASSERT_TRUE(SameBits(got, first)) << absl::StrFormat(
                  "%s c_in=%d ints=%d isa=%s threads=%d rep=%d", call.op,
                  cc.c_in, ints, CpuIsaName(isa), threads, rep);
            }
          }
          if (ints) {
            ASSERT_TRUE(SameBits(first, canonical)) << call.op;
          }
          ASSERT_TRUE(Close(first, canonical, 1e-5 * call.depth)) << call.op;
          if (call.op != op::kConv2dGradWeight) {  // DEFAULT: atomic there
            ASSERT_TRUE(SameBits(Run(call.op, Mode::kDefault, kDefaultAlgorithm,
                                     call.in, call.out, a),
                                 first))
                << call.op << " DEFAULT";
          }
        }
      }
    }
  }
}

// Inputs for the reductions: random, small integers (ties everywhere), and
// a mix of special values (signed zeros, infinities, a few NaNs with
// distinct payloads, repeated maxima).
std::vector<float> LaneInputs(int kind, int64_t n, uint32_t seed) {
  if (kind == 0) return RandomFloats(n, seed);
  if (kind == 1) return SmallInts(n, seed, -3, 3);
  std::vector<float> v = SmallInts(n, seed, -2, 2);
  for (int64_t i = 0; i < n; ++i) {
    switch ((i * 7 + seed) % 23) {
      case 0:
        v[i] = -0.0f;
        break;
      case 1:
        v[i] = 0.0f;
        break;
      case 2:
        v[i] = std::numeric_limits<float>::infinity();
        break;
      case 3:
        v[i] = -std::numeric_limits<float>::infinity();
        break;
      default:
        break;
    }
    if ((i * 13 + seed) % 97 == 5) {
      v[i] = FromBits(0x7fc00000u | static_cast<uint32_t>(i & 0xffff));
    }
  }
  return v;
}

TEST_F(FastKernelsTest, CanonicalBiasGradEqualsScalarForEveryIsaAndThreads) {
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 1},        {300, 37},       {600, 40},       {2, 100},
      {257, 16},     {3, 5, 7, 9},    {5, 21, 16, 16}, {2, 33, 1, 300},
      {4, 17, 3, 3}, {1, 64, 32, 32}, {70, 3, 2, 2},   {3, 1, 513},
  };
  uint32_t seed = 7000;
  for (const std::vector<int64_t>& shape : shapes) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    for (int kind = 0; kind < 3; ++kind) {
      // Finite inputs only for the sums with NaNs: NaN + NaN picks an
      // operand's payload by instruction order, which the spec leaves open.
      std::vector<float> values = LaneInputs(kind, count, ++seed);
      if (kind == 2) {
        for (float& v : values) {
          if (v != v) v = 1.0f;
        }
      }
      const std::vector<Tensor> in = {T(shape, values)};
      const std::vector<int64_t> out = {shape[1]};
      const std::vector<float> want =
          Run(op::kBiasAddGrad, Mode::kCanonical, kScalarAlgorithm, in, out);
      for (CpuIsa isa : SupportedCpuIsas()) {
        SetCpuIsaForTesting(isa);
        for (int threads : {1, 2, 3, 8}) {
          SetCpuThreadsForTesting(threads);
          for (int rep = 0; rep < 2; ++rep) {
            for (Mode mode : {Mode::kCanonical, Mode::kDeterministic}) {
              const std::vector<float> got =
                  Run(op::kBiasAddGrad, mode,
                      mode == Mode::kCanonical ? kCanonicalAlgorithm
                                               : kDeterministicAlgorithm,
                      in, out);
              ASSERT_TRUE(SameBits(got, want)) << absl::StrFormat(
                  "shape %s kind=%d isa=%s threads=%d rep=%d mode=%s",
                  ShapeString(shape), kind, CpuIsaName(isa), threads, rep,
                  ModeName(mode));
            }
          }
        }
      }
    }
  }
}

struct PoolCase {
  int64_t n, c, h, w, k_h, k_w, stride_h, stride_w;
  int64_t pad_t, pad_b, pad_l, pad_r;
};

TEST_F(FastKernelsTest, CanonicalMaxPoolEqualsScalarForEveryIsaAndThreads) {
  const PoolCase cases[] = {
      {2, 3, 8, 8, 2, 2, 2, 2, 0, 0, 0, 0},      // LeNet
      {1, 2, 9, 75, 2, 2, 2, 2, 0, 0, 0, 0},     // odd sizes, many lanes
      {2, 2, 17, 70, 3, 3, 2, 2, 1, 1, 1, 1},    // ResNet stem
      {1, 3, 20, 40, 3, 3, 1, 1, 1, 1, 1, 1},    // stride 1, overlap
      {1, 2, 13, 100, 3, 3, 3, 3, 1, 0, 2, 1},   // stride 3, asymmetric pad
      {2, 2, 11, 50, 2, 3, 1, 2, 0, 1, 0, 2},    // mixed
      {1, 1, 20, 20, 17, 17, 1, 1, 0, 0, 0, 0},  // > 256 windows per element
      {3, 4, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},
      {64, 16, 12, 12, 2, 2, 2, 2, 0, 0, 0, 0},  // many planes: tasks
  };
  uint32_t seed = 8000;
  for (const PoolCase& pc : cases) {
    OpAttrs a;
    a.kernel_h = pc.k_h;
    a.kernel_w = pc.k_w;
    a.stride_h = pc.stride_h;
    a.stride_w = pc.stride_w;
    a.pad_top = pc.pad_t;
    a.pad_bottom = pc.pad_b;
    a.pad_left = pc.pad_l;
    a.pad_right = pc.pad_r;
    const int64_t oh = (pc.h + pc.pad_t + pc.pad_b - pc.k_h) / pc.stride_h + 1;
    const int64_t ow = (pc.w + pc.pad_l + pc.pad_r - pc.k_w) / pc.stride_w + 1;
    const std::vector<int64_t> xs = {pc.n, pc.c, pc.h, pc.w};
    const std::vector<int64_t> ys = {pc.n, pc.c, oh, ow};
    for (int kind = 0; kind < 3; ++kind) {
      const Tensor x =
          T(xs, LaneInputs(kind, pc.n * pc.c * pc.h * pc.w, ++seed));
      // dy finite: dx adds dy terms (see the bias test).
      const Tensor dy = T(
          ys, LaneInputs(kind == 2 ? 1 : kind, pc.n * pc.c * oh * ow, ++seed));
      struct Call {
        const char* op;
        std::vector<Tensor> in;
        std::vector<int64_t> out;
      };
      const Call calls[] = {{op::kMaxPool2dForward, {x}, ys},
                            {op::kMaxPool2dGrad, {x, dy}, xs}};
      for (const Call& call : calls) {
        const std::vector<float> want = Run(
            call.op, Mode::kCanonical, kScalarAlgorithm, call.in, call.out, a);
        for (CpuIsa isa : SupportedCpuIsas()) {
          SetCpuIsaForTesting(isa);
          for (int threads : {1, 2, 3, 8}) {
            SetCpuThreadsForTesting(threads);
            for (int rep = 0; rep < 2; ++rep) {
              for (Mode mode : {Mode::kCanonical, Mode::kDeterministic}) {
                const std::vector<float> got =
                    Run(call.op, mode,
                        mode == Mode::kCanonical ? kCanonicalAlgorithm
                                                 : kDeterministicAlgorithm,
                        call.in, call.out, a);
                ASSERT_TRUE(SameBits(got, want)) << absl::StrFormat(
                    "%s %dx%d k=%dx%d s=%dx%d kind=%d isa=%s threads=%d "
                    "rep=%d mode=%s",
                    call.op, pc.h, pc.w, pc.k_h, pc.k_w, pc.stride_h,
                    pc.stride_w, kind, CpuIsaName(isa), threads, rep,
                    ModeName(mode));
              }
            }
          }
        }
      }
    }
  }
}

// NaNs replaced by 1.0f: for inputs that are added (NaN + NaN picks an
// operand's payload by instruction order, which the spec leaves open).
std::vector<float> SumInputs(int kind, int64_t n, uint32_t seed) {
  std::vector<float> v = LaneInputs(kind, n, seed);
  for (float& f : v) {
    if (f != f) f = 1.0f;
  }
  return v;
}

TEST_F(FastKernelsTest, CanonicalAvgPoolEqualsScalarForEveryIsaAndThreads) {
  const PoolCase cases[] = {
      {2, 3, 8, 8, 2, 2, 2, 2, 0, 0, 0, 0},       // LeNet
      {1, 2, 9, 75, 2, 2, 2, 2, 0, 0, 0, 0},      // odd sizes, many lanes
      {2, 2, 17, 70, 3, 3, 2, 2, 1, 1, 1, 1},     // ResNet stem
      {1, 3, 20, 40, 3, 3, 1, 1, 1, 1, 1, 1},     // stride 1, overlap
      {1, 2, 13, 100, 3, 3, 3, 3, 1, 0, 2, 1},    // stride 3, asymmetric pad
      {2, 2, 11, 50, 2, 3, 1, 2, 0, 1, 0, 2},     // mixed
      {1, 3, 12, 12, 5, 4, 3, 2, 2, 4, 3, 1},     // pads up to k - 1
      {1, 1, 20, 20, 17, 17, 1, 1, 0, 0, 0, 0},   // 289 taps, > 256 windows
      {1, 17, 18, 18, 17, 16, 1, 1, 8, 8, 7, 8},  // chunked, padded
      {3, 4, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},
      {64, 16, 12, 12, 2, 2, 2, 2, 0, 0, 0, 0},  // many planes: tasks
  };
  uint32_t seed = 9000;
  for (const PoolCase& pc : cases) {
    for (bool include_pad : {true, false}) {
      OpAttrs a;
      a.kernel_h = pc.k_h;
      a.kernel_w = pc.k_w;
      a.stride_h = pc.stride_h;
      a.stride_w = pc.stride_w;
      a.pad_top = pc.pad_t;
      a.pad_bottom = pc.pad_b;
      a.pad_left = pc.pad_l;
      a.pad_right = pc.pad_r;
      a.count_include_pad = include_pad;
      const int64_t oh =
          (pc.h + pc.pad_t + pc.pad_b - pc.k_h) / pc.stride_h + 1;
      const int64_t ow =
          (pc.w + pc.pad_l + pc.pad_r - pc.k_w) / pc.stride_w + 1;
      const std::vector<int64_t> xs = {pc.n, pc.c, pc.h, pc.w};
      const std::vector<int64_t> ys = {pc.n, pc.c, oh, ow};
      for (int kind = 0; kind < 3; ++kind) {
        const Tensor x =
            T(xs, SumInputs(kind, pc.n * pc.c * pc.h * pc.w, ++seed));
        const Tensor dy = T(ys, SumInputs(kind, pc.n * pc.c * oh * ow, ++seed));
        const std::string what = absl::StrFormat(
            "%dx%d k=%dx%d s=%dx%d pad=%d,%d,%d,%d include_pad=%d kind=%d",
            pc.h, pc.w, pc.k_h, pc.k_w, pc.stride_h, pc.stride_w, pc.pad_t,
            pc.pad_b, pc.pad_l, pc.pad_r, include_pad, kind);
        ExpectLanesEqualScalar(op::kAvgPool2dForward, {x}, ys, a, what);
        ExpectLanesEqualScalar(op::kAvgPool2dGrad, {dy}, xs, a, what);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_F(FastKernelsTest,
       CanonicalGlobalAvgPoolEqualsScalarForEveryIsaAndThreads) {
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 1, 1, 1},   {1, 20, 1, 1},  {2, 3, 5, 7},
      {3, 5, 16, 16}, {4, 8, 20, 20}, {2, 37, 23, 23},
      {2, 3, 45, 60}, {64, 16, 7, 7}, {1, 17, 1, 300},
  };
  uint32_t seed = 9500;
  for (const std::vector<int64_t>& xs : shapes) {
    const std::vector<int64_t> ys = {xs[0], xs[1]};
    const int64_t count = xs[0] * xs[1] * xs[2] * xs[3];
    for (int kind = 0; kind < 3; ++kind) {
      const Tensor x = T(xs, SumInputs(kind, count, ++seed));
      // The grad only divides: NaNs with payloads stay in.
      const Tensor dy = T(ys, LaneInputs(kind, xs[0] * xs[1], ++seed));
      const std::string what =
          absl::StrFormat("shape %s kind=%d", ShapeString(xs), kind);
      ExpectLanesEqualScalar(op::kGlobalAvgPoolForward, {x}, ys, {}, what);
      ExpectLanesEqualScalar(op::kGlobalAvgPoolGrad, {dy}, xs, {}, what);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(FastKernelsTest, DeterministicDenseIsRepeatableAndClose) {
  for (bool ints : {false, true}) {
    for (const DenseCase& c : DenseCases(9, 700, 21, ints, 7)) {
      const std::vector<float> canonical =
          Run(c.op, Mode::kCanonical, kCanonicalAlgorithm, c.in, c.out_shape,
              c.attrs);
      std::vector<float> first;
      for (CpuIsa isa : SupportedCpuIsas()) {
        SetCpuIsaForTesting(isa);
        for (int threads : {1, 3}) {
          SetCpuThreadsForTesting(threads);
          for (const char* mode_alg : {"det", "default"}) {
            const bool det = std::string(mode_alg) == "det";
            if (!det && c.op == op::kDenseForward) continue;  // atomic
            const std::vector<float> got =
                Run(c.op, det ? Mode::kDeterministic : Mode::kDefault,
                    det ? kDeterministicAlgorithm : kDefaultAlgorithm, c.in,
                    c.out_shape, c.attrs);
            if (first.empty()) first = got;
            ASSERT_TRUE(SameBits(got, first)) << c.op << " " << mode_alg;
            // Small integers: every order is exact.
            if (ints) {
              ASSERT_TRUE(SameBits(got, canonical)) << c.op;
            }
            ASSERT_TRUE(Close(got, canonical, 1e-4)) << c.op;
          }
        }
      }
    }
  }
}

TEST_F(FastKernelsTest, DefaultAtomicKernelsAreWithinToleranceOfCanonical) {
  for (bool ints : {false, true}) {
    auto gen = [&](int64_t count, uint32_t s) {
      return ints ? SmallInts(count, s) : RandomFloats(count, s);
    };
    for (int threads : {1, 2, 8}) {
      SetCpuThreadsForTesting(threads);
      // dense.forward, split-K atomic.
      for (const DenseCase& c : DenseCases(7, 900, 13, ints, 11)) {
        if (c.op != op::kDenseForward) continue;
        const std::vector<float> want =
            Run(c.op, Mode::kCanonical, kCanonicalAlgorithm, c.in, c.out_shape,
                c.attrs);
        for (const char* alg : {kDefaultAlgorithm, kSplitKAtomicAlgorithm}) {
          const std::vector<float> got =
              Run(c.op, Mode::kDefault, alg, c.in, c.out_shape, c.attrs);
          if (ints) {
            ASSERT_TRUE(SameBits(got, want)) << alg;
          }
          ASSERT_TRUE(Close(got, want, 1e-4)) << alg;
        }
      }
      // bias_add.grad, atomic.
      {
        const std::vector<Tensor> in = {T({37, 5, 3, 4}, gen(37 * 60, 5))};
        const std::vector<float> want = Run(op::kBiasAddGrad, Mode::kCanonical,
                                            kCanonicalAlgorithm, in, {5});
        for (const char* alg : {kDefaultAlgorithm, kAtomicAlgorithm}) {
          const std::vector<float> got =
              Run(op::kBiasAddGrad, Mode::kDefault, alg, in, {5});
          if (ints) {
            ASSERT_TRUE(SameBits(got, want)) << alg;
          }
          ASSERT_TRUE(Close(got, want, 1e-4)) << alg;
        }
      }
      // conv2d.grad_weight, atomic over the batch.
      {
        OpAttrs a;
        a.pad_top = a.pad_bottom = a.pad_left = a.pad_right = 1;
        a.stride_h = 2;
        const std::vector<Tensor> in = {T({6, 3, 7, 5}, gen(6 * 105, 8)),
                                        T({6, 4, 4, 5}, gen(6 * 80, 9))};
        const std::vector<float> want =
            Run(op::kConv2dGradWeight, Mode::kCanonical, kCanonicalAlgorithm,
                in, {4, 3, 3, 3}, a);
        for (const char* alg : {kDefaultAlgorithm, kAtomicAlgorithm}) {
          const std::vector<float> got = Run(
              op::kConv2dGradWeight, Mode::kDefault, alg, in, {4, 3, 3, 3}, a);
          if (ints) {
            ASSERT_TRUE(SameBits(got, want)) << alg;
          }
          ASSERT_TRUE(Close(got, want, 1e-4)) << alg;
        }
      }
    }
  }
}

TEST_F(FastKernelsTest, RegistersTheDocumentedKeysOnce) {
  const KernelKey keys[] = {
      {op::kDenseForward, Mode::kCanonical, "canonical", "cpu"},
      {op::kDenseForward, Mode::kCanonical, "scalar", "cpu"},
      {op::kDenseGradInput, Mode::kDeterministic, "deterministic", "cpu"},
      {op::kDenseGradWeight, Mode::kDeterministic, "deterministic", "cpu"},
      {op::kDenseForward, Mode::kDeterministic, "deterministic", "cpu"},
      {op::kDenseForward, Mode::kDefault, "default", "cpu"},
      {op::kDenseForward, Mode::kDefault, "split_k_atomic", "cpu"},
      {op::kMatMulForward, Mode::kDefault, "default", "cpu"},
      {op::kMatMulForward, Mode::kDefault, "split_k_atomic", "cpu"},
      {op::kMatMulGrad, Mode::kDefault, "default", "cpu"},
      {op::kBiasAddGrad, Mode::kDefault, "default", "cpu"},
      {op::kBiasAddGrad, Mode::kDefault, "atomic", "cpu"},
      {op::kConv2dGradWeight, Mode::kDefault, "default", "cpu"},
      {op::kConv2dGradWeight, Mode::kDefault, "atomic", "cpu"},
      {op::kConv2dForward, Mode::kDefault, "default", "cpu"},
      {op::kConv2dGradInput, Mode::kDefault, "default", "cpu"},
      {op::kBiasAddGrad, Mode::kCanonical, "scalar", "cpu"},
      {op::kMaxPool2dForward, Mode::kCanonical, "scalar", "cpu"},
      {op::kMaxPool2dGrad, Mode::kCanonical, "scalar", "cpu"},
      {op::kAvgPool2dForward, Mode::kCanonical, "scalar", "cpu"},
      {op::kAvgPool2dGrad, Mode::kCanonical, "scalar", "cpu"},
      {op::kGlobalAvgPoolForward, Mode::kCanonical, "scalar", "cpu"},
      {op::kGlobalAvgPoolGrad, Mode::kCanonical, "scalar", "cpu"},
  };
  for (const KernelKey& k : keys) {
    EXPECT_TRUE(registry_.Contains(k)) << k.DebugString();
  }
  // Every op has a DETERMINISTIC kernel; outside dense.*, conv2d.* and
  // matmul.* it is the CANONICAL one.
  std::vector<std::string> ops = AllOpNames();
  for (const std::string& op : ops) {
    const KernelKey det{op, Mode::kDeterministic, "deterministic", "cpu"};
    ASSERT_TRUE(registry_.Contains(det)) << op;
    const bool own =
        op.rfind("dense.", 0) == 0 || op.rfind("conv2d.", 0) == 0 ||
        op.rfind("conv_transpose2d.", 0) == 0 || op.rfind("matmul.", 0) == 0;
    const KernelFn canonical =
        *registry_.Lookup({op, Mode::kCanonical, "canonical", "cpu"});
    EXPECT_EQ(*registry_.Lookup(det) == canonical, !own) << op;
    // And a DEFAULT "default" one: its own (atomic / as DETERMINISTIC) for
    // dense.*, conv2d.*, bias_add.grad, embedding.grad_weight, binary.grad
    // and where.grad, else the DETERMINISTIC kernel.
    const KernelKey def{op, Mode::kDefault, "default", "cpu"};
    ASSERT_TRUE(registry_.Contains(def)) << op;
    if (!own && op != op::kBiasAddGrad && op != op::kEmbeddingGradWeight &&
        op != op::kBinaryGrad && op != op::kWhereGrad) {
      EXPECT_TRUE(*registry_.Lookup(def) == *registry_.Lookup(det)) << op;
    }
  }
  EXPECT_THAT(RegisterCpuDeterministicAndDefaultKernels(&registry_),
              StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST_F(FastKernelsTest, ValidatesBeforeComputing) {
  std::vector<Tensor> out = {Z({2, 3})};
  absl::StatusOr<KernelFn> fn = registry_.Lookup(
      KernelKey{op::kDenseForward, Mode::kCanonical, "canonical", "cpu"});
  ASSERT_THAT(fn.status(), IsOk());
  EXPECT_THAT((*fn)({Z({2, 4}), Z({5, 3})}, absl::MakeSpan(out), {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace lockstep::kernels
