// The DEFAULT mode's own atomic kernels (vendor_runtime.h SplitKAtomicMatMul,
// AtomicBiasAddGrad, AtomicMaxPool2dGrad, AtomicEmbeddingGrad): grid-stride
// CUDA kernels that add partial results into the output with atomicAdd, in
// arrival order.
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/launch_limits.h"
#include "kernels/cudnn/vendor_context.h"
#include "kernels/cudnn/vendor_runtime.h"
#include "kernels/ops/dense.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/embedding.h"
#include "kernels/spatial/pool2d.h"

namespace lockstep::kernels::vendor {
namespace {

namespace c = ::lockstep::canonical;
namespace sp = ::lockstep::spatial;

// Every launch uses the largest block the kernels are bounded for.
constexpr int kThreadsPerBlock = cuda::kMaxThreadsPerBlock;
static_assert(kThreadsPerBlock % cuda::kWarpSize == 0);
constexpr int64_t kMaxBlocks = 65535;  // the kernels are grid-stride
constexpr int64_t kBiasSlice = 32;

int64_t BlocksFor(int64_t work) {
  int64_t blocks = (work + kThreadsPerBlock - 1) / kThreadsPerBlock;
  if (blocks < 1) blocks = 1;
  return blocks < kMaxBlocks ? blocks : kMaxBlocks;
}

__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// One thread per (output, slice of `chunk` consecutive k); the slice index
// varies fastest, so a warp's atomics hit the same outputs.
__global__ void __launch_bounds__(cuda::kMaxThreadsPerBlock)
    SplitKAtomicKernel(c::MatMulShape s, int64_t splits, int64_t chunk,
                       const float* a, const float* b, float* out) {
  const int64_t work = s.rows * s.cols * splits;
  for (int64_t t = GlobalThread(); t < work; t += GridThreads()) {
    const int64_t split = t % splits;
    const int64_t o = t / splits;
    const int64_t i = o / s.cols;
    const int64_t j = o % s.cols;
    const int64_t p0 = split * chunk;
    const int64_t p1 = p0 + chunk < s.depth ? p0 + chunk : s.depth;
    float acc = 0.0f;
    for (int64_t p = p0; p < p1; ++p) {
      acc = __fmaf_rn(a[i * s.a_row + p * s.a_depth],
                      b[p * s.b_depth + j * s.b_col], acc);
    }
    atomicAdd(out + i * s.c_row + j * s.c_col, acc);
  }
}

// One thread per (n, c, slice of kBiasSlice spatial elements).
__global__ void __launch_bounds__(cuda::kMaxThreadsPerBlock)
    BiasAddGradAtomicKernel(c::BiasShape s, int64_t slices, const float* dy,
                            float* db) {
  const int64_t work = s.n * s.c * slices;
  for (int64_t t = GlobalThread(); t < work; t += GridThreads()) {
    const int64_t slice = t % slices;
    const int64_t row = t / slices;  // n * C + c
    const float* p = dy + row * s.spatial;
    const int64_t e0 = slice * kBiasSlice;
    const int64_t e1 =
        e0 + kBiasSlice < s.spatial ? e0 + kBiasSlice : s.spatial;
    float acc = 0.0f;
    for (int64_t e = e0; e < e1; ++e) acc = __fadd_rn(acc, p[e]);
    atomicAdd(db + row % s.c, acc);
  }
}

// One thread per dy element: added into its id's row of dw.
__global__ void __launch_bounds__(cuda::kMaxThreadsPerBlock)
    EmbeddingGradAtomicKernel(c::EmbeddingShape s, const int32_t* ids,
                              const float* dy, float* dw) {
  const int64_t work = s.positions * s.dim;
  for (int64_t t = GlobalThread(); t < work; t += GridThreads()) {
    const int64_t p = t / s.dim;
    const int64_t d = t - p * s.dim;
    atomicAdd(dw + static_cast<int64_t>(ids[p]) * s.dim + d, dy[t]);
  }
}

// One thread per dy element: its window's winner receives dy.
__global__ void __launch_bounds__(cuda::kMaxThreadsPerBlock)
    MaxPool2dGradAtomicKernel(sp::Pool2dShape s, const float* x,
                              const float* dy, float* dx) {
  const int64_t out_h = sp::Pool2dOutH(s);
  const int64_t out_w = sp::Pool2dOutW(s);
  const int64_t work = s.n * s.c * out_h * out_w;
  for (int64_t t = GlobalThread(); t < work; t += GridThreads()) {
    const int64_t ow = t % out_w;
    const int64_t rest = t / out_w;
    const int64_t oh = rest % out_h;
    const int64_t plane = rest / out_h;  // n * C + c
    const int64_t offset = plane * s.h * s.w;
    const int64_t at = sp::MaxPool2dWindowArgmax(s, x + offset, oh, ow);
    atomicAdd(dx + offset + at, dy[t]);
  }
}

}  // namespace

using internal::CheckSize;
using internal::CurrentContext;
using internal::DeviceContext;
using internal::SyncAndCopyOut;
using ::lockstep::kernels::cuda::DeviceBuffer;

absl::Status SplitKAtomicMatMul(const c::MatMulShape& s,
                                absl::Span<const float> a,
                                absl::Span<const float> b,
                                absl::Span<float> out) {
  constexpr char kWhat[] = "split-k gemm";
  LS_RETURN_IF_ERROR(CheckSize(kWhat, "A", a.size(), s.rows * s.depth));
  LS_RETURN_IF_ERROR(CheckSize(kWhat, "B", b.size(), s.depth * s.cols));
  LS_RETURN_IF_ERROR(CheckSize(kWhat, "C", out.size(), s.rows * s.cols));
  LS_RETURN_IF_ERROR(cuda::CudaDeviceStatus());
  LS_ASSIGN_OR_RETURN(DeviceContext * ctx, CurrentContext());
  std::lock_guard<std::mutex> lock(ctx->mu);
  DeviceBuffer da, db, dc;
  LS_RETURN_IF_ERROR(da.CopyIn(a));
  LS_RETURN_IF_ERROR(db.CopyIn(b));
  LS_RETURN_IF_ERROR(dc.Zeros(out.size()));
  const int64_t splits = (s.depth + kSplitKChunk - 1) / kSplitKChunk;
  const int64_t work = s.rows * s.cols * splits;
  if (work > 0) {
    SplitKAtomicKernel<<<static_cast<unsigned>(BlocksFor(work)),
                         kThreadsPerBlock>>>(s, splits, kSplitKChunk, da.f(),
                                             db.f(), dc.f());
    LS_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return SyncAndCopyOut(dc, out);
}

absl::Status AtomicBiasAddGrad(const c::BiasShape& s,
                               absl::Span<const float> dy,
                               absl::Span<float> db) {
  constexpr char kWhat[] = "bias_add.grad (atomic)";
  LS_RETURN_IF_ERROR(CheckSize(kWhat, "dy", dy.size(), s.n * s.c * s.spatial));
  LS_RETURN_IF_ERROR(CheckSize(kWhat, "db", db.size(), s.c));
  LS_RETURN_IF_ERROR(cuda::CudaDeviceStatus());
  LS_ASSIGN_OR_RETURN(DeviceContext * ctx, CurrentContext());
  std::lock_guard<std::mutex> lock(ctx->mu);
  DeviceBuffer ddy, ddb;
  LS_RETURN_IF_ERROR(ddy.CopyIn(dy));
  LS_RETURN_IF_ERROR(ddb.Zeros(db.size()));
  const int64_t slices = (s.spatial + kBiasSlice - 1) / kBiasSlice;
  const int64_t work = s.n * s.c * slices;
  if (work > 0) {
    BiasAddGradAtomicKernel<<<static_cast<unsigned>(BlocksFor(work)),
                              kThreadsPerBlock>>>(s, slices, ddy.f(), ddb.f());
    LS_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return SyncAndCopyOut(ddb, db);
}

absl::Status AtomicEmbeddingGrad(const c::EmbeddingShape& s,
                                 absl::Span<const int32_t> ids,
                                 absl::Span<const float> dy,
                                 absl::Span<float> dw) {
  constexpr char kWhat[] = "embedding.grad_weight (atomic)";
  LS_RETURN_IF_ERROR(CheckSize(kWhat, "ids", ids.size(), s.positions));
  LS_RETURN_IF_ERROR(CheckSize(kWhat, "dy", dy.size(), s.positions * s.dim));
  LS_RETURN_IF_ERROR(CheckSize(kWhat, "dw", dw.size(), s.vocab * s.dim));
  LS_RETURN_IF_ERROR(cuda::CudaDeviceStatus());
  LS_ASSIGN_OR_RETURN(DeviceContext * ctx, CurrentContext());
  std::lock_guard<std::mutex> lock(ctx->mu);
  DeviceBuffer dids, ddy, ddw;
  LS_RETURN_IF_ERROR(
      dids.CopyInBytes(ids.data(), ids.size() * sizeof(int32_t)));
  LS_RETURN_IF_ERROR(ddy.CopyIn(dy));
  LS_RETURN_IF_ERROR(ddw.Zeros(dw.size()));
  const int64_t work = s.positions * s.dim;
  if (work > 0) {
    EmbeddingGradAtomicKernel<<<static_cast<unsigned>(BlocksFor(work)),
                                kThreadsPerBlock>>>(
        s, static_cast<const int32_t*>(dids.get()), ddy.f(), ddw.f());
    LS_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return SyncAndCopyOut(ddw, dw);
}

absl::Status AtomicMaxPool2dGrad(const sp::Pool2dShape& s,
                                 absl::Span<const float> x,
                                 absl::Span<const float> dy,
                                 absl::Span<float> dx) {
  constexpr char kWhat[] = "max_pool2d.grad (atomic)";
  LS_RETURN_IF_ERROR(CheckSize(kWhat, "x", x.size(), sp::Pool2dInputSize(s)));
  LS_RETURN_IF_ERROR(
      CheckSize(kWhat, "dy", dy.size(), sp::Pool2dOutputSize(s)));
  LS_RETURN_IF_ERROR(CheckSize(kWhat, "dx", dx.size(), sp::Pool2dInputSize(s)));
  LS_RETURN_IF_ERROR(cuda::CudaDeviceStatus());
  LS_ASSIGN_OR_RETURN(DeviceContext * ctx, CurrentContext());
  std::lock_guard<std::mutex> lock(ctx->mu);
  DeviceBuffer dx_dev, x_dev, dy_dev;
  LS_RETURN_IF_ERROR(x_dev.CopyIn(x));
  LS_RETURN_IF_ERROR(dy_dev.CopyIn(dy));
  LS_RETURN_IF_ERROR(dx_dev.Zeros(dx.size()));
  const int64_t work = sp::Pool2dOutputSize(s);
  if (work > 0) {
    MaxPool2dGradAtomicKernel<<<static_cast<unsigned>(BlocksFor(work)),
                                kThreadsPerBlock>>>(s, x_dev.f(), dy_dev.f(),
                                                    dx_dev.f());
    LS_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return SyncAndCopyOut(dx_dev, dx);
}

}  // namespace lockstep::kernels::vendor
