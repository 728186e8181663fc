#include "kernels/cudnn/vendor_plan.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace lockstep::kernels::vendor {
namespace {

constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();

// The leading dimension of a rows x cols matrix L(i, j) = p[i * rs + j * cs]
// read as column-major M(i, j) = p[i + j * ld] with ld >= max(1, rows), or
// nothing when L is not column-major. A single row or column leaves the
// stride along it unused. REQUIRES rows, cols >= 1.
std::optional<int64_t> ColumnMajorLd(int64_t rows, int64_t cols, int64_t rs,
                                     int64_t cs) {
  if (rows != 1 && rs != 1) return std::nullopt;
  const int64_t ld = cols == 1 ? rows : cs;
  if (ld < rows) return std::nullopt;
  return ld;
}

struct Operand {
  bool transposed = false;  // op(M) = M^T
  int64_t ld = 1;
};

// L (rows x cols, strides rs, cs) as op(M) with M column-major: M = L when L
// is column-major, else M = L^T (cols x rows, column-major when L is
// row-major) with op = T.
std::optional<Operand> AsOperand(int64_t rows, int64_t cols, int64_t rs,
                                 int64_t cs) {
  if (std::optional<int64_t> ld = ColumnMajorLd(rows, cols, rs, cs)) {
    return Operand{false, *ld};
  }
  if (std::optional<int64_t> ld = ColumnMajorLd(cols, rows, cs, rs)) {
    return Operand{true, *ld};
  }
  return std::nullopt;
}

absl::Status StrideError(const canonical::MatMulShape& s, const char* which) {
  return absl::InternalError(absl::StrFormat(
      "cublas: operand %s of the %dx%dx%d product is neither row- nor "
      "column-major (strides a %d,%d b %d,%d c %d,%d)",
      which, s.rows, s.depth, s.cols, s.a_row, s.a_depth, s.b_depth, s.b_col,
      s.c_row, s.c_col));
}

std::string MathTypes(absl::Span<const int> types) {
  if (types.empty()) return "any";
  return absl::StrJoin(types, "/");
}

}  // namespace

absl::StatusOr<ColumnMajorGemm> MapToColumnMajorGemm(
    const canonical::MatMulShape& s) {
  if (s.rows < 1 || s.cols < 1 || s.depth < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cublas: empty product %dx%dx%d (rows x depth x cols) has no gemm",
        s.rows, s.depth, s.cols));
  }
  ColumnMajorGemm g;
  g.k = s.depth;
  std::optional<Operand> a, b;
  if (std::optional<int64_t> ldc =
          ColumnMajorLd(s.rows, s.cols, s.c_row, s.c_col)) {
    // C column-major: C = A B as it stands.
    g.swap_operands = false;
    g.m = s.rows;
    g.n = s.cols;
    g.ldc = *ldc;
    a = AsOperand(s.rows, s.depth, s.a_row, s.a_depth);
    b = AsOperand(s.depth, s.cols, s.b_depth, s.b_col);
  } else if (std::optional<int64_t> ldc_t =
                 ColumnMajorLd(s.cols, s.rows, s.c_col, s.c_row)) {
    // C row-major: C^T = B^T A^T, C^T column-major.
    g.swap_operands = true;
    g.m = s.cols;
    g.n = s.rows;
    g.ldc = *ldc_t;
    a = AsOperand(s.cols, s.depth, s.b_col, s.b_depth);  // B^T
    b = AsOperand(s.depth, s.rows, s.a_depth, s.a_row);  // A^T
  } else {
    return StrideError(s, "C");
  }
  if (!a.has_value()) return StrideError(s, g.swap_operands ? "B" : "A");
  if (!b.has_value()) return StrideError(s, g.swap_operands ? "A" : "B");
  g.transpose_a = a->transposed;
  g.lda = a->ld;
  g.transpose_b = b->transposed;
  g.ldb = b->ld;
  for (const int64_t v : {g.m, g.n, g.k, g.lda, g.ldb, g.ldc}) {
    if (v > kIntMax) {
      return absl::UnimplementedError(absl::StrFormat(
          "cublas: the %dx%dx%d product needs a dimension or leading "
          "dimension of %d, over cuBLAS's limit of 2^31 - 1",
          s.rows, s.depth, s.cols, v));
    }
  }
  return g;
}

absl::Status CheckCudnnConv2d(absl::string_view op,
                              const spatial::Conv2dShape& s) {
  if (s.pad_top != s.pad_bottom) {
    return absl::UnimplementedError(absl::StrFormat(
        "%s (cudnn): asymmetric padding pad_top = %d, pad_bottom = %d cannot "
        "be expressed in cuDNN's convolution descriptor (one pad per axis); "
        "use the canonical kernel",
        op, s.pad_top, s.pad_bottom));
  }
  if (s.pad_left != s.pad_right) {
    return absl::UnimplementedError(absl::StrFormat(
        "%s (cudnn): asymmetric padding pad_left = %d, pad_right = %d cannot "
        "be expressed in cuDNN's convolution descriptor (one pad per axis); "
        "use the canonical kernel",
        op, s.pad_left, s.pad_right));
  }
  const struct {
    const char* name;
    int64_t elements;
  } tensors[] = {
      {"input", spatial::Conv2dInputSize(s)},
      {"weight", spatial::Conv2dWeightSize(s)},
      {"output", spatial::Conv2dOutputSize(s)},
  };
  for (const auto& t : tensors) {
    if (t.elements > kIntMax) {
      return absl::UnimplementedError(absl::StrFormat(
          "%s (cudnn): the %s has %d elements, over cuDNN's limit of 2^31 - 1 "
          "per tensor; use the canonical kernel",
          op, t.name, t.elements));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ConvAlgoPerf> ChooseDeterministicConvAlgo(
    absl::Span<const ConvAlgoPerf> perfs, size_t workspace_cap,
    absl::Span<const int> allowed_math_types, absl::string_view what) {
  for (const ConvAlgoPerf& p : perfs) {
    if (!p.succeeded || !p.deterministic || p.workspace_bytes > workspace_cap) {
      continue;
    }
    if (!allowed_math_types.empty() &&
        std::find(allowed_math_types.begin(), allowed_math_types.end(),
                  p.math_type) == allowed_math_types.end()) {
      continue;
    }
    return p;
  }
  return absl::UnimplementedError(absl::StrFormat(
      "%s: no deterministic algorithm with math type %s within the %d-byte "
      "workspace cap among cuDNN's %d candidates: %s",
      what, MathTypes(allowed_math_types), workspace_cap, perfs.size(),
      DescribeConvAlgoPerfs(perfs)));
}

absl::StatusOr<ConvAlgoPerf> ChooseFastestConvAlgo(
    absl::Span<const ConvAlgoPerf> perfs, size_t workspace_cap,
    absl::string_view what) {
  const ConvAlgoPerf* best = nullptr;
  for (const ConvAlgoPerf& p : perfs) {
    if (!p.succeeded || p.workspace_bytes > workspace_cap) continue;
    if (best == nullptr || p.time_ms < best->time_ms) best = &p;
  }
  if (best == nullptr) {
    return absl::UnimplementedError(absl::StrFormat(
        "%s: no algorithm that ran within the %d-byte workspace cap among "
        "cuDNN's %d candidates: %s",
        what, workspace_cap, perfs.size(), DescribeConvAlgoPerfs(perfs)));
  }
  return *best;
}

std::string DescribeConvAlgoPerfs(absl::Span<const ConvAlgoPerf> perfs) {
  if (perfs.empty()) return "none";
  std::vector<std::string> parts;
  parts.reserve(perfs.size());
  for (const ConvAlgoPerf& p : perfs) {
    parts.push_back(
        absl::StrFormat("algo %d (%s, %s, math %d, %d bytes, %.3f ms)", p.algo,
                        p.succeeded ? "ok" : "failed",
                        p.deterministic ? "deterministic" : "nondeterministic",
                        p.math_type, p.workspace_bytes, p.time_ms));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace lockstep::kernels::vendor
