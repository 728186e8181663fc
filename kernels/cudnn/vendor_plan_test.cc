// The vendor kernels' pure host rules. The cuBLAS mapping is checked by
// running the mapped call on an emulated column-major sgemm (cuBLAS's
// semantics and leading-dimension rules, every read bounds-checked) and
// comparing with kernels/ops/dense.h's own product, for every dense op,
// every transpose combination and shapes with unit dimensions.
#include "kernels/cudnn/vendor_plan.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/ops/dense.h"
#include "kernels/spatial/conv2d.h"

namespace lockstep::kernels::vendor {
namespace {

namespace c = ::lockstep::canonical;

bool Contains(const absl::Status& s, const std::string& part) {
  return std::string(s.message()).find(part) != std::string::npos;
}

// cublasSgemm's definition on host memory: C_cm = op(A_cm) op(B_cm),
// X_cm(i, j) = x[i + j * ldx]. Fails the test on a leading dimension cuBLAS
// would reject (CUBLAS_STATUS_INVALID_VALUE) or a read or write outside the
// buffers.
::testing::AssertionResult EmulateSgemm(const ColumnMajorGemm& g,
                                        const std::vector<float>& a,
                                        const std::vector<float>& b,
                                        std::vector<float>* out) {
  const int64_t a_rows = g.transpose_a ? g.k : g.m;
  const int64_t b_rows = g.transpose_b ? g.n : g.k;
  if (g.m < 1 || g.n < 1 || g.k < 1) {
    return ::testing::AssertionFailure() << "empty gemm";
  }
  if (g.lda < std::max<int64_t>(1, a_rows) ||
      g.ldb < std::max<int64_t>(1, b_rows) ||
      g.ldc < std::max<int64_t>(1, g.m)) {
    return ::testing::AssertionFailure() << absl::StrFormat(
               "bad leading dimension: lda %d (rows %d), "
               "ldb %d (rows %d), ldc %d (m %d)",
               g.lda, a_rows, g.ldb, b_rows, g.ldc, g.m);
  }
  for (int64_t j = 0; j < g.n; ++j) {
    for (int64_t i = 0; i < g.m; ++i) {
      double acc = 0.0;
      for (int64_t p = 0; p < g.k; ++p) {
        const int64_t ai = g.transpose_a ? p + i * g.lda : i + p * g.lda;
        const int64_t bi = g.transpose_b ? j + p * g.ldb : p + j * g.ldb;
        if (ai < 0 || ai >= static_cast<int64_t>(a.size()) || bi < 0 ||
            bi >= static_cast<int64_t>(b.size())) {
          return ::testing::AssertionFailure()
                 << "read outside an operand: A[" << ai << "] of " << a.size()
                 << ", B[" << bi << "] of " << b.size();
        }
        acc += static_cast<double>(a[ai]) * b[bi];
      }
      const int64_t ci = i + j * g.ldc;
      if (ci >= static_cast<int64_t>(out->size())) {
        return ::testing::AssertionFailure()
               << "write outside C: " << ci << " of " << out->size();
      }
      (*out)[ci] = static_cast<float>(acc);
    }
  }
  return ::testing::AssertionSuccess();
}

std::vector<float> SmallIntegers(int64_t n, int seed) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>(((i * 7 + seed * 13) % 9) - 4);
  }
  return v;
}

enum class Op { kForward, kGradInput, kGradWeight };

const char* OpName(Op op) {
  switch (op) {
    case Op::kForward:
      return "dense.forward";
    case Op::kGradInput:
      return "dense.grad_input";
    case Op::kGradWeight:
      return "dense.grad_weight";
  }
  return "";
}

c::MatMulShape ShapeOf(Op op, const c::DenseShape& d) {
  switch (op) {
    case Op::kForward:
      return c::DenseForwardShape(d);
    case Op::kGradInput:
      return c::DenseGradInputShape(d);
    case Op::kGradWeight:
      return c::DenseGradWeightShape(d);
  }
  return {};
}

TEST(MapToColumnMajorGemmTest, EveryDenseOpTransposeAndShapeMatchesDenseH) {
  const int64_t shapes[][3] = {
      {1, 1, 1}, {1, 5, 1}, {3, 1, 4}, {1, 4, 3}, {5, 1, 1},
      {4, 3, 1}, {1, 1, 6}, {3, 5, 7}, {7, 2, 3}, {2, 9, 2},
  };
  int checked = 0;
  for (Op op : {Op::kForward, Op::kGradInput, Op::kGradWeight}) {
    for (bool tx : {false, true}) {
      for (bool tw : {false, true}) {
        for (const auto& mkn : shapes) {
          c::DenseShape d;
          d.m = mkn[0];
          d.k = mkn[1];
          d.n = mkn[2];
          d.transpose_x = tx;
          d.transpose_w = tw;
          const c::MatMulShape s = ShapeOf(op, d);
          SCOPED_TRACE(absl::StrFormat("%s m=%d k=%d n=%d tx=%d tw=%d",
                                       OpName(op), d.m, d.k, d.n, tx, tw));
          const std::vector<float> a = SmallIntegers(s.rows * s.depth, 1);
          const std::vector<float> b = SmallIntegers(s.depth * s.cols, 2);
          std::vector<float> want(s.rows * s.cols, -99.0f);
          c::MatMul(s, a.data(), b.data(), want.data());

          absl::StatusOr<ColumnMajorGemm> g = MapToColumnMajorGemm(s);
          ASSERT_TRUE(g.ok()) << g.status();
          std::vector<float> got(s.rows * s.cols, -99.0f);
          ASSERT_TRUE(EmulateSgemm(*g, g->swap_operands ? b : a,
                                   g->swap_operands ? a : b, &got));
          EXPECT_EQ(got, want);
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 3 * 4 * 10);
}

// The classic mapping of a plain row-major product: C^T = B^T A^T with no
// transposes, leading dimensions the row lengths.
TEST(MapToColumnMajorGemmTest, PlainForwardIsTheSwappedUntransposedCall) {
  c::DenseShape d;
  d.m = 8;
  d.k = 5;
  d.n = 3;
  absl::StatusOr<ColumnMajorGemm> g =
      MapToColumnMajorGemm(c::DenseForwardShape(d));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->swap_operands);
  EXPECT_FALSE(g->transpose_a);
  EXPECT_FALSE(g->transpose_b);
  EXPECT_EQ(g->m, 3);
  EXPECT_EQ(g->n, 8);
  EXPECT_EQ(g->k, 5);
  EXPECT_EQ(g->lda, 3);  // w [K, N]
  EXPECT_EQ(g->ldb, 5);  // x [M, K]
  EXPECT_EQ(g->ldc, 3);  // y [M, N]

  // y = x w^T with w stored [N, K]: cuBLAS's A (= w^T's transpose) is T.
  d.transpose_w = true;
  g = MapToColumnMajorGemm(c::DenseForwardShape(d));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->swap_operands);
  EXPECT_TRUE(g->transpose_a);
  EXPECT_FALSE(g->transpose_b);
  EXPECT_EQ(g->lda, 5);
}

TEST(MapToColumnMajorGemmTest, EmptyAndUnexpressibleProductsAreErrors) {
  c::DenseShape d;
  d.m = 4;
  d.k = 0;
  d.n = 2;
  EXPECT_EQ(MapToColumnMajorGemm(c::DenseForwardShape(d)).status().code(),
            absl::StatusCode::kInvalidArgument);

  c::MatMulShape s;
  s.rows = 3;
  s.cols = 3;
  s.depth = 3;
  s.a_row = 3;
  s.a_depth = 1;
  s.b_depth = 3;
  s.b_col = 1;
  s.c_row = 6;  // neither stride is 1: not a dense matrix
  s.c_col = 2;
  absl::StatusOr<ColumnMajorGemm> g = MapToColumnMajorGemm(s);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(Contains(g.status(), "operand C")) << g.status();

  c::DenseShape big;
  big.m = 2;
  big.k = int64_t{1} << 31;
  big.n = 2;
  g = MapToColumnMajorGemm(c::DenseForwardShape(big));
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(g.status(), "2^31 - 1")) << g.status();
}

spatial::Conv2dShape SmallConv() {
  spatial::Conv2dShape s;
  s.n = 2;
  s.c_in = 4;
  s.h = 9;
  s.w = 7;
  s.c_out = 6;
  s.k_h = 3;
  s.k_w = 3;
  s.pad_top = s.pad_bottom = 1;
  s.pad_left = s.pad_right = 2;
  s.groups = 2;
  return s;
}

TEST(CheckCudnnConv2dTest, SymmetricPaddingIsExpressible) {
  EXPECT_TRUE(CheckCudnnConv2d("conv2d.forward", SmallConv()).ok());
}

TEST(CheckCudnnConv2dTest, AsymmetricPaddingIsUnimplementedNamingTheField) {
  spatial::Conv2dShape s = SmallConv();
  s.pad_bottom = 2;
  absl::Status st = CheckCudnnConv2d("conv2d.forward", s);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(st, "conv2d.forward (cudnn)")) << st;
  EXPECT_TRUE(Contains(st, "pad_top = 1, pad_bottom = 2")) << st;

  s = SmallConv();
  s.pad_right = 0;
  st = CheckCudnnConv2d("conv2d.grad_weight", s);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(st, "pad_left = 2, pad_right = 0")) << st;
}

TEST(CheckCudnnConv2dTest, TensorsOf2To31ElementsAreUnimplemented) {
  spatial::Conv2dShape s = SmallConv();
  s.n = 1 << 20;
  s.h = 64;
  s.w = 64;  // input: 2^20 * 4 * 64 * 64 = 2^34 elements
  const absl::Status st = CheckCudnnConv2d("conv2d.forward", s);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(st, "the input has")) << st;
}

ConvAlgoPerf Perf(int algo, bool ok, bool det, size_t bytes, float ms = -1,
                  int math = 3) {
  ConvAlgoPerf p;
  p.algo = algo;
  p.succeeded = ok;
  p.deterministic = det;
  p.workspace_bytes = bytes;
  p.time_ms = ms;
  p.math_type = math;
  return p;
}

constexpr int kFma = 3;      // CUDNN_FMA_MATH
constexpr int kDefault = 0;  // CUDNN_DEFAULT_MATH

TEST(ChooseDeterministicConvAlgoTest, FirstDeterministicSuccessfulWithinCap) {
  const std::vector<ConvAlgoPerf> perfs = {
      Perf(6, true, false, 0),       // fastest by the heuristics, atomics
      Perf(7, false, true, 0),       // not supported for this shape
      Perf(2, true, true, 1 << 30),  // over the cap
      Perf(1, true, true, 4096),     // the one
      Perf(0, true, true, 0),        // also fine, but later
  };
  const int allowed[] = {kFma};
  absl::StatusOr<ConvAlgoPerf> got =
      ChooseDeterministicConvAlgo(perfs, size_t{256} << 20, allowed, "fwd");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->algo, 1);
  EXPECT_EQ(got->workspace_bytes, 4096u);
}

TEST(ChooseDeterministicConvAlgoTest, NeverLooksAtTimes) {
  const std::vector<ConvAlgoPerf> perfs = {
      Perf(1, true, true, 0, 9.0f),
      Perf(0, true, true, 0, 0.5f),
  };
  EXPECT_EQ(ChooseDeterministicConvAlgo(perfs, 0, {}, "fwd")->algo, 1);
}

TEST(ChooseDeterministicConvAlgoTest, CapIsInclusiveAndMathTypeFilters) {
  const std::vector<ConvAlgoPerf> perfs = {
      Perf(5, true, true, 100, -1, kDefault),  // TF32 permitted: skipped
      Perf(4, true, true, 100, -1, kFma),
  };
  const int fma_only[] = {kFma};
  EXPECT_EQ(ChooseDeterministicConvAlgo(perfs, 100, fma_only, "w")->algo, 4);
  const int both[] = {kFma, kDefault};
  EXPECT_EQ(ChooseDeterministicConvAlgo(perfs, 100, both, "w")->algo, 5);
  EXPECT_EQ(ChooseDeterministicConvAlgo(perfs, 99, both, "w").status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(ChooseDeterministicConvAlgoTest, NoneQualifiesListsTheCandidates) {
  const std::vector<ConvAlgoPerf> perfs = {
      Perf(6, true, false, 0),
      Perf(3, false, true, 0),
  };
  const int allowed[] = {kFma};
  absl::StatusOr<ConvAlgoPerf> got = ChooseDeterministicConvAlgo(
      perfs, 1024, allowed, "conv2d.grad_weight (cudnn)");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(got.status(),
                       "conv2d.grad_weight (cudnn): no "
                       "deterministic algorithm"))
      << got.status();
  EXPECT_TRUE(Contains(got.status(), "algo 6 (ok, nondeterministic"))
      << got.status();
  EXPECT_TRUE(Contains(got.status(), "algo 3 (failed, deterministic"))
      << got.status();
  EXPECT_EQ(ChooseDeterministicConvAlgo({}, 1024, allowed, "x").status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(ChooseFastestConvAlgoTest, FastestThatRanWithinCapDeterministicOrNot) {
  const std::vector<ConvAlgoPerf> perfs = {
      Perf(2, true, true, 0, 0.9f),
      Perf(6, true, false, 0, 0.3f),        // nondeterministic, fastest
      Perf(7, false, true, 0, 0.1f),        // failed
      Perf(5, true, true, 1 << 30, 0.05f),  // over the cap
      Perf(1, true, true, 0, 0.3f),         // ties with 6, later
  };
  absl::StatusOr<ConvAlgoPerf> got =
      ChooseFastestConvAlgo(perfs, size_t{256} << 20, "fwd");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->algo, 6);
  EXPECT_EQ(ChooseFastestConvAlgo({perfs[2]}, 0, "fwd").status().code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace lockstep::kernels::vendor
