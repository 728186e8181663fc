// The DETERMINISTIC and DEFAULT cuBLAS GEMM (vendor_runtime.h CublasMatMul):
// a row-major product mapped onto one column-major cublasSgemm
// (vendor_plan.h) on the mode's handle (vendor_context.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <mutex>
#include <optional>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cudnn/cublas_gemm.h"
#include "kernels/cudnn/vendor_context.h"
#include "kernels/cudnn/vendor_plan.h"
#include "kernels/cudnn/vendor_runtime.h"
#include "kernels/cudnn/vendor_status.h"

namespace lockstep::kernels::vendor {
namespace internal {

absl::Status EnqueueSgemm(cublasHandle_t h, const ColumnMajorGemm& g,
                          const float* a, const float* b, float* c) {
  const float* ga = g.swap_operands ? b : a;
  const float* gb = g.swap_operands ? a : b;
  const float one = 1.0f;
  const float zero = 0.0f;
  LS_CUBLAS_RETURN_IF_ERROR(
      cublasSgemm(h, g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                  g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                  static_cast<int>(g.m), static_cast<int>(g.n),
                  static_cast<int>(g.k), &one, ga, static_cast<int>(g.lda), gb,
                  static_cast<int>(g.ldb), &zero, c, static_cast<int>(g.ldc)));
  return absl::OkStatus();
}

}  // namespace internal

namespace c = ::lockstep::canonical;
using internal::CheckMode;
using internal::CheckSize;
using internal::CublasHandle;
using internal::CurrentContext;
using internal::DeviceContext;
using internal::EnqueueSgemm;
using internal::SyncAndCopyOut;
using ::lockstep::kernels::cuda::DeviceBuffer;

absl::Status CublasMatMul(Mode mode, const c::MatMulShape& s,
                          absl::Span<const float> a, absl::Span<const float> b,
                          absl::Span<float> out) {
  constexpr char kWhat[] = "cublas gemm";
  LS_RETURN_IF_ERROR(CheckMode(kWhat, mode));
  LS_RETURN_IF_ERROR(CheckSize(kWhat, "A", a.size(), s.rows * s.depth));
  LS_RETURN_IF_ERROR(CheckSize(kWhat, "B", b.size(), s.depth * s.cols));
  LS_RETURN_IF_ERROR(CheckSize(kWhat, "C", out.size(), s.rows * s.cols));
  std::optional<ColumnMajorGemm> gemm;
  if (s.rows > 0 && s.cols > 0 && s.depth > 0) {
    LS_ASSIGN_OR_RETURN(gemm, MapToColumnMajorGemm(s));
  }
  LS_RETURN_IF_ERROR(cuda::CudaDeviceStatus());
  LS_ASSIGN_OR_RETURN(DeviceContext * ctx, CurrentContext());
  std::lock_guard<std::mutex> lock(ctx->mu);
  LS_ASSIGN_OR_RETURN(cublasHandle_t h,
                      CublasHandle(ctx, mode == Mode::kDeterministic));
  DeviceBuffer da, db, dc;
  LS_RETURN_IF_ERROR(da.CopyIn(a));
  LS_RETURN_IF_ERROR(db.CopyIn(b));
  if (gemm.has_value()) {
    LS_RETURN_IF_ERROR(dc.Allocate(out.size() * sizeof(float)));
    LS_RETURN_IF_ERROR(EnqueueSgemm(h, *gemm, da.f(), db.f(), dc.f()));
  } else {
    LS_RETURN_IF_ERROR(dc.Zeros(out.size()));  // empty reduction: +0.0f
  }
  return SyncAndCopyOut(dc, out);
}

}  // namespace lockstep::kernels::vendor
