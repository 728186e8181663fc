// The registered fast CPU kernels: CANONICAL dense kernels (GEMM) against
// the "scalar" ones through the registry for every ISA and thread count;
// DETERMINISTIC repeatable; DEFAULT (atomic) within rounding of CANONICAL.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"
#include "kernels/testing/float_test_util.h"

namespace lockstep::kernels {
namespace {

using ::lockstep::testing::FloatBits;
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
  }
  void TearDown() override {
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
      {op::kBiasAddGrad, Mode::kDefault, "default", "cpu"},
      {op::kBiasAddGrad, Mode::kDefault, "atomic", "cpu"},
      {op::kConv2dGradWeight, Mode::kDefault, "default", "cpu"},
      {op::kConv2dGradWeight, Mode::kDefault, "atomic", "cpu"},
  };
  for (const KernelKey& k : keys) {
    EXPECT_TRUE(registry_.Contains(k)) << k.DebugString();
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
