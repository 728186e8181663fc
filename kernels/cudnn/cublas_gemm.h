// The cuBLAS GEMM's launch, shared by CublasMatMul (cublas_gemm.cu) and the
// benchmark (vendor_bench.cu). CUDA code only; not part of the library's
// interface (vendor_runtime.h).
#ifndef LOCKSTEP_KERNELS_CUDNN_CUBLAS_GEMM_H_
#define LOCKSTEP_KERNELS_CUDNN_CUBLAS_GEMM_H_

#include <cublas_v2.h>

#include "absl/status/status.h"
#include "kernels/cudnn/vendor_plan.h"

namespace lockstep::kernels::vendor::internal {

// Queues one column-major sgemm (vendor_plan.h) computing C = A B on the
// legacy default stream; a, b, c are the product's row-major operands.
absl::Status EnqueueSgemm(cublasHandle_t h, const ColumnMajorGemm& g,
                          const float* a, const float* b, float* c);

}  // namespace lockstep::kernels::vendor::internal

#endif  // LOCKSTEP_KERNELS_CUDNN_CUBLAS_GEMM_H_
