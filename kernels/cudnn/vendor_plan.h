// Host-side planning of the vendor-library kernels (vendor_backend.h): pure
// functions, no CUDA headers, unit-tested on any machine.
//
//   MapToColumnMajorGemm   a row-major (strided) product of kernels/ops/
//                          dense.h -> the arguments of cuBLAS's column-major
//                          sgemm
//   CheckCudnnConv2d       whether legacy cuDNN can express a convolution
//                          (UNIMPLEMENTED naming the attribute otherwise)
//   ChooseDeterministicConvAlgo / ChooseFastestConvAlgo
//                          the rules that pick a cuDNN convolution algorithm
//                          from the library's perf results
//
// Thread-safe (pure functions).
#ifndef LOCKSTEP_KERNELS_CUDNN_VENDOR_PLAN_H_
#define LOCKSTEP_KERNELS_CUDNN_VENDOR_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/ops/dense.h"
#include "kernels/spatial/conv2d.h"

namespace lockstep::kernels::vendor {

// ---- cuBLAS ---------------------------------------------------------------

// One column-major cublasSgemm call, C_cm = op(A_cm) op(B_cm) with
// alpha = 1, beta = 0, where X_cm(i, j) = x[i + j * ldx]:
//   cublasSgemm(handle, transpose_a ? T : N, transpose_b ? T : N, m, n, k,
//               &one, A_cm, lda, B_cm, ldb, &zero, C_cm, ldc)
// swap_operands says which of the product's operands cuBLAS gets:
//   false: A_cm is the product's A, B_cm its B, and C_cm is C itself
//          (C is stored column-major, e.g. dx of a transposed x);
//   true:  A_cm is the product's B, B_cm its A, and C_cm is C^T (the usual
//          case: C row-major, computed as C^T = B^T A^T).
// Every leading dimension satisfies cuBLAS's rule (lda >= max(1, rows of
// A_cm as stored), likewise ldb and ldc >= max(1, m)).
struct ColumnMajorGemm {
  bool swap_operands = false;
  bool transpose_a = false;
  bool transpose_b = false;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t lda = 1;
  int64_t ldb = 1;
  int64_t ldc = 1;
};

// Maps C = A B, with C(i, j) = c[i * c_row + j * c_col], A(i, p) =
// a[i * a_row + p * a_depth], B(p, j) = b[p * b_depth + j * b_col]
// (kernels/ops/dense.h), onto one column-major sgemm. Every dense.* shape
// (all transpose flags) maps. REQUIRES rows, cols, depth >= 1 (an empty
// product is the caller's: nothing to compute, or zeros):
// INVALID_ARGUMENT otherwise; INTERNAL for strides that are neither row-
// nor column-major; UNIMPLEMENTED when an argument exceeds cuBLAS's int
// range (2^31 - 1).
absl::StatusOr<ColumnMajorGemm> MapToColumnMajorGemm(
    const canonical::MatMulShape& s);

// ---- cuDNN ----------------------------------------------------------------

// OK when legacy cuDNN (cudnnConvolutionDescriptor_t) can express the
// convolution of a validated shape: symmetric zero padding on each axis
// (pad_top == pad_bottom, pad_left == pad_right) and fewer than 2^31
// elements in every tensor. Otherwise UNIMPLEMENTED "<op> (cudnn): ..."
// naming the attribute and its values; the canonical kernel runs such
// shapes.
absl::Status CheckCudnnConv2d(absl::string_view op,
                              const spatial::Conv2dShape& s);

// One entry of cuDNN's perf results (cudnnConvolution*AlgoPerf_t), without
// the cuDNN types.
struct ConvAlgoPerf {
  int algo = 0;                // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  bool succeeded = false;      // status == CUDNN_STATUS_SUCCESS
  bool deterministic = false;  // determinism == CUDNN_DETERMINISTIC
  int math_type = 0;           // cudnnMathType_t
  size_t workspace_bytes = 0;  // memory
  float time_ms = -1.0f;       // measured by cudnnFind*, -1 from heuristics
};

// The DETERMINISTIC rule: the FIRST entry, in the order cuDNN's heuristics
// returned them, that succeeded, is deterministic, needs at most
// workspace_cap bytes and whose math type is one of allowed_math_types
// (empty: any). Never looks at time_ms. UNIMPLEMENTED "<what>: no
// deterministic algorithm ..." listing every entry when none qualifies.
absl::StatusOr<ConvAlgoPerf> ChooseDeterministicConvAlgo(
    absl::Span<const ConvAlgoPerf> perfs, size_t workspace_cap,
    absl::Span<const int> allowed_math_types, absl::string_view what);

// The DEFAULT rule (stock frameworks' autotuning): among the entries that
// succeeded and need at most workspace_cap bytes, the one with the smallest
// measured time_ms (the first of equal times), deterministic or not.
// UNIMPLEMENTED listing every entry when none qualifies.
absl::StatusOr<ConvAlgoPerf> ChooseFastestConvAlgo(
    absl::Span<const ConvAlgoPerf> perfs, size_t workspace_cap,
    absl::string_view what);

// "algo 1 (ok, deterministic, math 3, 0 bytes, 0.012 ms); ..." for messages.
std::string DescribeConvAlgoPerfs(absl::Span<const ConvAlgoPerf> perfs);

}  // namespace lockstep::kernels::vendor

#endif  // LOCKSTEP_KERNELS_CUDNN_VENDOR_PLAN_H_
