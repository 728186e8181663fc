// The vendor-library kernels on the device: cuBLAS GEMMs, cuDNN
// convolutions (legacy cudnn_cnn API, still shipped by cuDNN 9), and the
// DEFAULT mode's own atomic kernels. See vendor_runtime.h.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/plan.h"
#include "kernels/cudnn/vendor_plan.h"
#include "kernels/cudnn/vendor_runtime.h"
#include "kernels/cudnn/vendor_status.h"
#include "kernels/tensor.h"

namespace lockstep::kernels::vendor {
namespace {

namespace c = ::lockstep::canonical;
namespace sp = ::lockstep::spatial;
using ::lockstep::kernels::cuda::DeviceBuffer;

// ---- launches -------------------------------------------------------------

constexpr int kThreadsPerBlock = 256;
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
__global__ void SplitKAtomicKernel(c::MatMulShape s, int64_t splits,
                                   int64_t chunk, const float* a,
                                   const float* b, float* out) {
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
__global__ void BiasAddGradAtomicKernel(c::BiasShape s, int64_t slices,
                                        const float* dy, float* db) {
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

// One thread per dy element: its window's winner receives dy.
__global__ void MaxPool2dGradAtomicKernel(sp::Pool2dShape s, const float* x,
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

// ---- memory ---------------------------------------------------------------

// Waits for the device, then copies `device` into `host`: the only write to
// a caller's output, after everything else succeeded.
absl::Status SyncAndCopyOut(const DeviceBuffer& device,
                            absl::Span<float> host) {
  LS_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  if (!host.empty()) {
    LS_CUDA_RETURN_IF_ERROR(cudaMemcpy(host.data(), device.get(),
                                       host.size() * sizeof(float),
                                       cudaMemcpyDeviceToHost));
  }
  return absl::OkStatus();
}

absl::Status CheckSize(const char* what, const char* name, size_t got,
                       int64_t want) {
  if (want < 0 || got != static_cast<size_t>(want)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s holds %d floats, the shape needs %d", what, name, got, want));
  }
  return absl::OkStatus();
}

absl::Status CheckMode(const char* what, Mode mode) {
  if (mode != Mode::kDeterministic && mode != Mode::kDefault) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: mode must be DETERMINISTIC or DEFAULT, got %s",
                        what, ModeName(mode)));
  }
  return absl::OkStatus();
}

// ---- per-device library state --------------------------------------------

struct DeviceContext {
  int device = 0;
  int cc_major = 0;
  // Serializes every vendor call on this device; guards the fields below.
  std::mutex mu;
  cublasHandle_t cublas_deterministic = nullptr;
  void* cublas_workspace = nullptr;  // the deterministic handle's
  cublasHandle_t cublas_default = nullptr;
  cudnnHandle_t cudnn = nullptr;
};

// The current device's context, created on first use and never destroyed
// (handles outlive every caller; destroying them at exit races the CUDA
// runtime's own teardown).
absl::StatusOr<DeviceContext*> CurrentContext() {
  int device = 0;
  LS_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  static std::mutex* const mu = new std::mutex;
  static auto* const contexts =
      new std::map<int, std::unique_ptr<DeviceContext>>;
  std::lock_guard<std::mutex> lock(*mu);
  std::unique_ptr<DeviceContext>& slot = (*contexts)[device];
  if (slot == nullptr) {
    int major = 0;
    LS_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(
        &major, cudaDevAttrComputeCapabilityMajor, device));
    auto ctx = std::make_unique<DeviceContext>();
    ctx->device = device;
    ctx->cc_major = major;
    slot = std::move(ctx);
  }
  return slot.get();
}

absl::Status ConfigureCublas(DeviceContext* ctx, cublasHandle_t h,
                             bool deterministic) {
  // cublasSetStream resets the workspace to cuBLAS's pool: stream first.
  LS_CUBLAS_RETURN_IF_ERROR(cublasSetStream(h, nullptr));
  LS_CUBLAS_RETURN_IF_ERROR(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  if (!deterministic) {
    LS_CUBLAS_RETURN_IF_ERROR(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_ALLOWED));
    LS_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    return absl::OkStatus();
  }
  LS_CUBLAS_RETURN_IF_ERROR(
      cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED));
  LS_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
  if (ctx->cublas_workspace == nullptr) {
    LS_CUDA_RETURN_IF_ERROR(
        cudaMalloc(&ctx->cublas_workspace, kCublasWorkspaceBytes));
  }
  LS_CUBLAS_RETURN_IF_ERROR(
      cublasSetWorkspace(h, ctx->cublas_workspace, kCublasWorkspaceBytes));
  return absl::OkStatus();
}

// REQUIRES ctx->mu held.
absl::StatusOr<cublasHandle_t> CublasHandle(DeviceContext* ctx,
                                            bool deterministic) {
  cublasHandle_t& slot =
      deterministic ? ctx->cublas_deterministic : ctx->cublas_default;
  if (slot != nullptr) return slot;
  cublasHandle_t h = nullptr;
  LS_CUBLAS_RETURN_IF_ERROR(cublasCreate(&h));
  if (absl::Status s = ConfigureCublas(ctx, h, deterministic); !s.ok()) {
    cublasDestroy(h);
    return s;
  }
  slot = h;
  return slot;
}

// REQUIRES ctx->mu held.
absl::StatusOr<cudnnHandle_t> CudnnHandle(DeviceContext* ctx) {
  if (ctx->cudnn != nullptr) return ctx->cudnn;
  cudnnHandle_t h = nullptr;
  LS_CUDNN_RETURN_IF_ERROR(cudnnCreate(&h));
  if (const cudnnStatus_t e = cudnnSetStream(h, nullptr);
      e != CUDNN_STATUS_SUCCESS) {
    absl::Status s = CudnnErrorToStatus(
        static_cast<int>(e), "cudnnSetStream(h, nullptr)", __FILE__, __LINE__);
    cudnnDestroy(h);
    return s;
  }
  ctx->cudnn = h;
  return h;
}

// ---- convolution plans ----------------------------------------------------

// Descriptors and the chosen algorithm of one (device, mode, direction,
// shape).
struct ConvPlan {
  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  ~ConvPlan() {
    if (x != nullptr) cudnnDestroyTensorDescriptor(x);
    if (y != nullptr) cudnnDestroyTensorDescriptor(y);
    if (w != nullptr) cudnnDestroyFilterDescriptor(w);
    if (conv != nullptr) cudnnDestroyConvolutionDescriptor(conv);
  }
  cudnnTensorDescriptor_t x = nullptr;  // x or dx
  cudnnTensorDescriptor_t y = nullptr;  // y or dy
  cudnnFilterDescriptor_t w = nullptr;  // w or dw
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace_bytes = 0;
  std::string choice;  // the chosen perf entry, for error messages
};

using ConvKey = std::array<int64_t, 17>;

ConvKey KeyOf(int device, Mode mode, ConvDirection dir,
              const sp::Conv2dShape& s) {
  return {device,
          static_cast<int64_t>(mode),
          static_cast<int64_t>(dir),
          s.n,
          s.c_in,
          s.h,
          s.w,
          s.c_out,
          s.k_h,
          s.k_w,
          s.stride_h,
          s.stride_w,
          s.pad_top,
          s.pad_left,
          s.dilation_h,
          s.dilation_w,
          s.groups};
}

// Converts cuDNN's perf structs (the same fields for all three directions).
template <typename Perf>
std::vector<ConvAlgoPerf> ToAlgoPerfs(const std::vector<Perf>& perfs,
                                      int count) {
  std::vector<ConvAlgoPerf> out;
  for (int i = 0; i < count && i < static_cast<int>(perfs.size()); ++i) {
    ConvAlgoPerf p;
    p.algo = static_cast<int>(perfs[i].algo);
    p.succeeded = perfs[i].status == CUDNN_STATUS_SUCCESS;
    p.deterministic = perfs[i].determinism == CUDNN_DETERMINISTIC;
    p.math_type = static_cast<int>(perfs[i].mathType);
    p.workspace_bytes = perfs[i].memory;
    p.time_ms = perfs[i].time;
    out.push_back(p);
  }
  return out;
}

const char* DirectionName(ConvDirection dir) {
  switch (dir) {
    case ConvDirection::kForward:
      return "conv2d.forward";
    case ConvDirection::kGradInput:
      return "conv2d.grad_input";
    case ConvDirection::kGradWeight:
      return "conv2d.grad_weight";
  }
  return "conv2d";
}

// cuDNN's candidate list for `plan`'s convolution: the heuristics
// (DETERMINISTIC) or timed runs on the call's own buffers (DEFAULT).
absl::StatusOr<std::vector<ConvAlgoPerf>> ConvCandidates(
    cudnnHandle_t h, Mode mode, ConvDirection dir, const ConvPlan& plan,
    const DeviceBuffer& in0, const DeviceBuffer& in1, DeviceBuffer& out) {
  const bool heuristics = mode == Mode::kDeterministic;
  DeviceBuffer find_ws;
  if (!heuristics) LS_RETURN_IF_ERROR(find_ws.Allocate(kConvWorkspaceCapBytes));
  int max_count = 0;
  int got = 0;
  switch (dir) {
    case ConvDirection::kForward: {
      LS_CUDNN_RETURN_IF_ERROR(
          cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> r(max_count);
      if (heuristics) {
        LS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(
            h, plan.x, plan.w, plan.conv, plan.y, max_count, &got, r.data()));
      } else {
        LS_CUDNN_RETURN_IF_ERROR(cudnnFindConvolutionForwardAlgorithmEx(
            h, plan.x, in0.get(), plan.w, in1.get(), plan.conv, plan.y,
            out.get(), max_count, &got, r.data(), find_ws.get(),
            kConvWorkspaceCapBytes));
      }
      return ToAlgoPerfs(r, got);
    }
    case ConvDirection::kGradInput: {  // in0 = dy, in1 = w, out = dx
      LS_CUDNN_RETURN_IF_ERROR(
          cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> r(max_count);
      if (heuristics) {
        LS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(
            h, plan.w, plan.y, plan.conv, plan.x, max_count, &got, r.data()));
      } else {
        LS_CUDNN_RETURN_IF_ERROR(cudnnFindConvolutionBackwardDataAlgorithmEx(
            h, plan.w, in1.get(), plan.y, in0.get(), plan.conv, plan.x,
            out.get(), max_count, &got, r.data(), find_ws.get(),
            kConvWorkspaceCapBytes));
      }
      return ToAlgoPerfs(r, got);
    }
    case ConvDirection::kGradWeight: {  // in0 = x, in1 = dy, out = dw
      LS_CUDNN_RETURN_IF_ERROR(
          cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max_count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> r(max_count);
      if (heuristics) {
        LS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            h, plan.x, plan.y, plan.conv, plan.w, max_count, &got, r.data()));
      } else {
        LS_CUDNN_RETURN_IF_ERROR(cudnnFindConvolutionBackwardFilterAlgorithmEx(
            h, plan.x, in0.get(), plan.y, in1.get(), plan.conv, plan.w,
            out.get(), max_count, &got, r.data(), find_ws.get(),
            kConvWorkspaceCapBytes));
      }
      return ToAlgoPerfs(r, got);
    }
  }
  return absl::InternalError("cudnn: unknown convolution direction");
}

absl::Status ConvWorkspaceSize(cudnnHandle_t h, ConvDirection dir,
                               ConvPlan* plan) {
  size_t bytes = 0;
  switch (dir) {
    case ConvDirection::kForward:
      LS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardWorkspaceSize(
          h, plan->x, plan->w, plan->conv, plan->y,
          static_cast<cudnnConvolutionFwdAlgo_t>(plan->algo), &bytes));
      break;
    case ConvDirection::kGradInput:
      LS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataWorkspaceSize(
          h, plan->w, plan->y, plan->conv, plan->x,
          static_cast<cudnnConvolutionBwdDataAlgo_t>(plan->algo), &bytes));
      break;
    case ConvDirection::kGradWeight:
      LS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterWorkspaceSize(
          h, plan->x, plan->y, plan->conv, plan->w,
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan->algo), &bytes));
      break;
  }
  plan->workspace_bytes = bytes;
  return absl::OkStatus();
}

// Builds the descriptors of `s` and chooses the algorithm (vendor_plan.h
// rules). REQUIRES ctx->mu held; the buffers are the call's (cudnnFind runs
// on them).
absl::StatusOr<std::unique_ptr<ConvPlan>> BuildConvPlan(
    DeviceContext* ctx, cudnnHandle_t h, Mode mode, ConvDirection dir,
    const sp::Conv2dShape& s, const DeviceBuffer& in0, const DeviceBuffer& in1,
    DeviceBuffer& out) {
  auto plan = std::make_unique<ConvPlan>();
  const int out_h = static_cast<int>(sp::Conv2dOutH(s));
  const int out_w = static_cast<int>(sp::Conv2dOutW(s));
  LS_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&plan->x));
  LS_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(
      plan->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(s.n),
      static_cast<int>(s.c_in), static_cast<int>(s.h), static_cast<int>(s.w)));
  LS_CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&plan->w));
  LS_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(
      plan->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, static_cast<int>(s.c_out),
      static_cast<int>(s.c_in / s.groups), static_cast<int>(s.k_h),
      static_cast<int>(s.k_w)));
  LS_CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&plan->conv));
  LS_CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(
      plan->conv, static_cast<int>(s.pad_top), static_cast<int>(s.pad_left),
      static_cast<int>(s.stride_h), static_cast<int>(s.stride_w),
      static_cast<int>(s.dilation_h), static_cast<int>(s.dilation_w),
      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  LS_CUDNN_RETURN_IF_ERROR(
      cudnnSetConvolutionGroupCount(plan->conv, static_cast<int>(s.groups)));
  const cudnnMathType_t requested =
      mode == Mode::kDeterministic ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
  LS_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(plan->conv, requested));
  int yn = 0, yc = 0, yh = 0, yw = 0;
  LS_CUDNN_RETURN_IF_ERROR(cudnnGetConvolution2dForwardOutputDim(
      plan->conv, plan->x, plan->w, &yn, &yc, &yh, &yw));
  if (yn != s.n || yc != s.c_out || yh != out_h || yw != out_w) {
    return absl::InternalError(absl::StrFormat(
        "%s (cudnn): cuDNN computes a [%d, %d, %d, %d] output, the op's is "
        "[%d, %d, %d, %d]",
        DirectionName(dir), yn, yc, yh, yw, s.n, s.c_out, out_h, out_w));
  }
  LS_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&plan->y));
  LS_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(
      plan->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, yn, yc, yh, yw));

  LS_ASSIGN_OR_RETURN(std::vector<ConvAlgoPerf> candidates,
                      ConvCandidates(h, mode, dir, *plan, in0, in1, out));
  ConvAlgoPerf chosen;
  if (mode == Mode::kDeterministic) {
    // Before sm_80 cuDNN's default math is FMA math (no TF32 there).
    std::vector<int> allowed = {static_cast<int>(CUDNN_FMA_MATH)};
    if (ctx->cc_major < 8) allowed.push_back(CUDNN_DEFAULT_MATH);
    LS_ASSIGN_OR_RETURN(chosen,
                        ChooseDeterministicConvAlgo(
                            candidates, kConvWorkspaceCapBytes, allowed,
                            absl::StrFormat("%s (cudnn)", DirectionName(dir))));
  } else {
    LS_ASSIGN_OR_RETURN(
        chosen, ChooseFastestConvAlgo(
                    candidates, kConvWorkspaceCapBytes,
                    absl::StrFormat("%s (cudnn_find)", DirectionName(dir))));
  }
  plan->algo = chosen.algo;
  plan->math = static_cast<cudnnMathType_t>(chosen.math_type);
  plan->choice = DescribeConvAlgoPerfs({chosen});
  // cuDNN selects tensor-op kernels from the algorithm and the descriptor's
  // math type together: set the one the perf result was measured with.
  LS_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(plan->conv, plan->math));
  LS_RETURN_IF_ERROR(ConvWorkspaceSize(h, dir, plan.get()));
  return plan;
}

// The plan of (current device, mode, dir, s), built on first use. REQUIRES
// ctx->mu held (so one device never builds the same plan twice).
absl::StatusOr<const ConvPlan*> GetConvPlan(DeviceContext* ctx, cudnnHandle_t h,
                                            Mode mode, ConvDirection dir,
                                            const sp::Conv2dShape& s,
                                            const DeviceBuffer& in0,
                                            const DeviceBuffer& in1,
                                            DeviceBuffer& out) {
  static std::mutex* const mu = new std::mutex;
  static auto* const plans = new std::map<ConvKey, std::unique_ptr<ConvPlan>>;
  const ConvKey key = KeyOf(ctx->device, mode, dir, s);
  {
    std::lock_guard<std::mutex> lock(*mu);
    auto it = plans->find(key);
    if (it != plans->end()) return it->second.get();
  }
  LS_ASSIGN_OR_RETURN(std::unique_ptr<ConvPlan> plan,
                      BuildConvPlan(ctx, h, mode, dir, s, in0, in1, out));
  std::lock_guard<std::mutex> lock(*mu);
  std::unique_ptr<ConvPlan>& slot = (*plans)[key];
  slot = std::move(plan);
  return slot.get();
}

// Queues `plan`'s convolution on the legacy default stream; `ws` holds
// plan.workspace_bytes (or is null when that is 0).
absl::Status EnqueueConv(cudnnHandle_t h, ConvDirection dir,
                         const ConvPlan& plan, const void* in0, const void* in1,
                         void* out, void* ws) {
  const float one = 1.0f;
  const float zero = 0.0f;
  switch (dir) {
    case ConvDirection::kForward:
      LS_CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(
          h, &one, plan.x, in0, plan.w, in1, plan.conv,
          static_cast<cudnnConvolutionFwdAlgo_t>(plan.algo), ws,
          plan.workspace_bytes, &zero, plan.y, out));
      break;
    case ConvDirection::kGradInput:
      LS_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
          h, &one, plan.w, in1, plan.y, in0, plan.conv,
          static_cast<cudnnConvolutionBwdDataAlgo_t>(plan.algo), ws,
          plan.workspace_bytes, &zero, plan.x, out));
      break;
    case ConvDirection::kGradWeight:
      LS_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
          h, &one, plan.x, in0, plan.y, in1, plan.conv,
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan.algo), ws,
          plan.workspace_bytes, &zero, plan.w, out));
      break;
  }
  return absl::OkStatus();
}

absl::Status RunConv(cudnnHandle_t h, ConvDirection dir, const ConvPlan& plan,
                     const DeviceBuffer& in0, const DeviceBuffer& in1,
                     DeviceBuffer& out) {
  DeviceBuffer ws;
  LS_RETURN_IF_ERROR(ws.Allocate(plan.workspace_bytes));
  LS_RETURN_IF_ERROR(
      EnqueueConv(h, dir, plan, in0.get(), in1.get(), out.get(), ws.get()));
  // The workspace is freed on return: wait for the convolution first.
  LS_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

// Queues one column-major sgemm (vendor_plan.h) computing C = A B on the
// legacy default stream; a, b, c are the product's row-major operands.
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

}  // namespace

bool VendorBuiltWithCuda() { return true; }

absl::Status VendorErrorToStatus(const char* library,
                                 const std::string& error_name,
                                 const std::string& error_text,
                                 bool not_supported, const char* call,
                                 const char* file, int line) {
  std::string what = absl::StrFormat("%s failed at %s:%d: ", call, file, line);
  if (error_text.empty() || error_text == error_name) {
    what += error_name;
  } else {
    what += absl::StrFormat("%s (%s)", error_text, error_name);
  }
  const cudaError_t device = cudaDeviceSynchronize();
  if (device != cudaSuccess) {
    const std::string cuda_error =
        absl::StrFormat("; cudaDeviceSynchronize: %s (%s)",
                        cudaGetErrorString(device), cudaGetErrorName(device));
    if (cuda::IsStickyCudaError(device)) {
      return absl::FailedPreconditionError("device unusable: " + what +
                                           cuda_error);
    }
    cudaGetLastError();  // not sticky: clear it for later calls
    if (cuda::IsNoDeviceCudaError(device)) {
      return absl::FailedPreconditionError("no usable CUDA device: " + what +
                                           cuda_error);
    }
  }
  if (not_supported) {
    return absl::UnimplementedError(absl::StrFormat("%s: %s", library, what));
  }
  return absl::InternalError(absl::StrFormat("%s: %s", library, what));
}

absl::Status CublasErrorToStatus(int status, const char* call, const char* file,
                                 int line) {
  const auto s = static_cast<cublasStatus_t>(status);
  return VendorErrorToStatus(
      "cublas", cublasGetStatusName(s), cublasGetStatusString(s),
      s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_ARCH_MISMATCH,
      call, file, line);
}

absl::Status CudnnErrorToStatus(int status, const char* call, const char* file,
                                int line) {
  const auto s = static_cast<cudnnStatus_t>(status);
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  return VendorErrorToStatus(
      "cudnn", cudnnGetErrorString(s), detail,
      CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED, call, file,
      line);
}

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

absl::Status CudnnConv2d(Mode mode, ConvDirection dir, const sp::Conv2dShape& s,
                         absl::Span<const float> in0,
                         absl::Span<const float> in1, absl::Span<float> out) {
  const char* what = DirectionName(dir);
  LS_RETURN_IF_ERROR(CheckMode(what, mode));
  LS_RETURN_IF_ERROR(CheckCudnnConv2d(what, s));
  const int64_t x_size = sp::Conv2dInputSize(s);
  const int64_t w_size = sp::Conv2dWeightSize(s);
  const int64_t y_size = sp::Conv2dOutputSize(s);
  switch (dir) {
    case ConvDirection::kForward:
      LS_RETURN_IF_ERROR(CheckSize(what, "x", in0.size(), x_size));
      LS_RETURN_IF_ERROR(CheckSize(what, "w", in1.size(), w_size));
      LS_RETURN_IF_ERROR(CheckSize(what, "y", out.size(), y_size));
      break;
    case ConvDirection::kGradInput:
      LS_RETURN_IF_ERROR(CheckSize(what, "dy", in0.size(), y_size));
      LS_RETURN_IF_ERROR(CheckSize(what, "w", in1.size(), w_size));
      LS_RETURN_IF_ERROR(CheckSize(what, "dx", out.size(), x_size));
      break;
    case ConvDirection::kGradWeight:
      LS_RETURN_IF_ERROR(CheckSize(what, "x", in0.size(), x_size));
      LS_RETURN_IF_ERROR(CheckSize(what, "dy", in1.size(), y_size));
      LS_RETURN_IF_ERROR(CheckSize(what, "dw", out.size(), w_size));
      break;
  }
  LS_RETURN_IF_ERROR(cuda::CudaDeviceStatus());
  LS_ASSIGN_OR_RETURN(DeviceContext * ctx, CurrentContext());
  std::lock_guard<std::mutex> lock(ctx->mu);
  LS_ASSIGN_OR_RETURN(cudnnHandle_t h, CudnnHandle(ctx));
  DeviceBuffer d0, d1, dout;
  LS_RETURN_IF_ERROR(d0.CopyIn(in0));
  LS_RETURN_IF_ERROR(d1.CopyIn(in1));
  LS_RETURN_IF_ERROR(dout.Allocate(out.size() * sizeof(float)));
  LS_ASSIGN_OR_RETURN(const ConvPlan* plan,
                      GetConvPlan(ctx, h, mode, dir, s, d0, d1, dout));
  if (absl::Status run = RunConv(h, dir, *plan, d0, d1, dout); !run.ok()) {
    return absl::Status(
        run.code(), absl::StrCat(run.message(),
                                 "; cuDNN algorithm chosen: ", plan->choice));
  }
  return SyncAndCopyOut(dout, out);
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

// ---- benchmarks -----------------------------------------------------------

namespace {

// Columns of the cost-of-determinism table.
enum BenchColumn { kCanonicalColumn = 0, kDeterministicColumn, kDefaultColumn };
constexpr int kBenchColumns = 3;
constexpr const char* kBenchColumnNames[kBenchColumns] = {
    "canonical", "deterministic", "default"};

struct BenchRow {
  std::string name;  // "gemm 1024x1024x1024", "conv2d.forward lenet"
  double flops = 0.0;
  std::array<absl::StatusOr<float>, kBenchColumns> ms = {
      absl::UnknownError("not run"), absl::UnknownError("not run"),
      absl::UnknownError("not run")};
  std::string algorithms;  // the cuDNN algorithms chosen, if any
};

// Every benchmark buffer holds float32 0x3c3c3c3c (about 0.0115): finite,
// normal, and small enough that no sum overflows.
absl::Status AllocateFilled(DeviceBuffer& buffer, size_t floats) {
  LS_RETURN_IF_ERROR(buffer.Allocate(floats * sizeof(float)));
  LS_CUDA_RETURN_IF_ERROR(
      cudaMemset(buffer.get(), 0x3c, floats * sizeof(float)));
  return absl::OkStatus();
}

// The CANONICAL CUDA kernel of `op` on device buffers: planned by
// cuda::PlanCanonicalOp on host tensors of the same shapes (the registered
// kernel's validation and launches), each planned buffer mapped to the
// caller's device buffer of the same tensor (scratch is allocated here),
// and timed with cuda::LaunchOnDevice.
absl::StatusOr<float> TimeCanonicalMs(
    absl::string_view op, const std::vector<std::vector<int64_t>>& in_shapes,
    const std::vector<int64_t>& out_shape, const OpAttrs& attrs,
    absl::Span<void* const> in_device, void* out_device, int reps) {
  std::vector<Tensor> in;
  for (const std::vector<int64_t>& shape : in_shapes) {
    LS_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros(DType::kFloat32, shape));
    in.push_back(std::move(t));
  }
  std::vector<Tensor> out;
  {
    LS_ASSIGN_OR_RETURN(Tensor t, Tensor::Zeros(DType::kFloat32, out_shape));
    out.push_back(std::move(t));
  }
  LS_ASSIGN_OR_RETURN(
      cuda::DeviceCall call,
      cuda::PlanCanonicalOp(op, in, absl::MakeSpan(out), attrs));
  std::vector<void*> device(call.buffers.size(), nullptr);
  std::vector<std::unique_ptr<DeviceBuffer>> scratch;
  for (size_t b = 0; b < call.buffers.size(); ++b) {
    const void* host = call.buffers[b].host;
    for (size_t i = 0; i < in.size() && i < in_device.size(); ++i) {
      if (host == in[i].raw_data()) device[b] = in_device[i];
    }
    if (host == out[0].raw_data()) device[b] = out_device;
    if (device[b] != nullptr) continue;
    if (host != nullptr) {
      return absl::InternalError(absl::StrFormat(
          "%s benchmark: planned buffer %d is none of the call's tensors", op,
          b));
    }
    scratch.push_back(std::make_unique<DeviceBuffer>());
    LS_RETURN_IF_ERROR(scratch.back()->Allocate(call.buffers[b].bytes));
    device[b] = scratch.back()->get();
  }
  return cuda::TimeDeviceWorkMs(
      reps, [&]() { return cuda::LaunchOnDevice(call, device); });
}

// Square row-major GEMM y[M, N] = x[M, K] w[K, N] with M = N = K = size.
// REQUIRES ctx->mu held.
absl::StatusOr<BenchRow> GemmRow(DeviceContext* ctx, int64_t size, int reps) {
  BenchRow row;
  row.name = absl::StrFormat("gemm %dx%dx%d", size, size, size);
  row.flops = 2.0 * size * size * size;
  c::DenseShape d;
  d.m = size;
  d.k = size;
  d.n = size;
  const c::MatMulShape s = c::DenseForwardShape(d);
  LS_ASSIGN_OR_RETURN(ColumnMajorGemm g, MapToColumnMajorGemm(s));
  DeviceBuffer x, w, y;
  LS_RETURN_IF_ERROR(AllocateFilled(x, size * size));
  LS_RETURN_IF_ERROR(AllocateFilled(w, size * size));
  LS_RETURN_IF_ERROR(AllocateFilled(y, size * size));
  row.ms[kCanonicalColumn] = TimeCanonicalMs(
      op::kDenseForward, {{size, size}, {size, size}}, {size, size}, OpAttrs{},
      {x.get(), w.get()}, y.get(), reps);
  for (const bool deterministic : {true, false}) {
    absl::StatusOr<float>& cell =
        row.ms[deterministic ? kDeterministicColumn : kDefaultColumn];
    absl::StatusOr<cublasHandle_t> h = CublasHandle(ctx, deterministic);
    if (!h.ok()) {
      cell = h.status();
      continue;
    }
    cell = cuda::TimeDeviceWorkMs(
        reps, [&]() { return EnqueueSgemm(*h, g, x.f(), w.f(), y.f()); });
  }
  return row;
}

// One cuDNN convolution shape's timing in one mode: the plan the vendor
// kernel would use (heuristic choice or cudnnFind, cached per shape), its
// workspace allocated once. REQUIRES ctx->mu held.
absl::StatusOr<float> TimeCudnnMs(DeviceContext* ctx, cudnnHandle_t h,
                                  Mode mode, ConvDirection dir,
                                  const sp::Conv2dShape& s,
                                  const DeviceBuffer& in0,
                                  const DeviceBuffer& in1, DeviceBuffer& out,
                                  int reps, std::string* choice) {
  LS_ASSIGN_OR_RETURN(const ConvPlan* plan,
                      GetConvPlan(ctx, h, mode, dir, s, in0, in1, out));
  *choice = plan->choice;
  DeviceBuffer ws;
  LS_RETURN_IF_ERROR(ws.Allocate(plan->workspace_bytes));
  return cuda::TimeDeviceWorkMs(reps, [&]() {
    return EnqueueConv(h, dir, *plan, in0.get(), in1.get(), out.get(),
                       ws.get());
  });
}

// One direction of a convolution layer. REQUIRES ctx->mu held.
absl::StatusOr<BenchRow> ConvRow(DeviceContext* ctx, absl::string_view layer,
                                 const sp::Conv2dShape& s, ConvDirection dir,
                                 int reps) {
  BenchRow row;
  row.name = absl::StrFormat("%s %s", DirectionName(dir), layer);
  const int64_t out_h = sp::Conv2dOutH(s);
  const int64_t out_w = sp::Conv2dOutW(s);
  row.flops =
      2.0 * s.n * s.c_out * out_h * out_w * (s.c_in / s.groups) * s.k_h * s.k_w;
  const std::vector<int64_t> x_shape = {s.n, s.c_in, s.h, s.w};
  const std::vector<int64_t> w_shape = {s.c_out, s.c_in / s.groups, s.k_h,
                                        s.k_w};
  const std::vector<int64_t> y_shape = {s.n, s.c_out, out_h, out_w};
  std::vector<int64_t> in0_shape, in1_shape, out_shape;
  switch (dir) {
    case ConvDirection::kForward:
      in0_shape = x_shape;
      in1_shape = w_shape;
      out_shape = y_shape;
      break;
    case ConvDirection::kGradInput:
      in0_shape = y_shape;
      in1_shape = w_shape;
      out_shape = x_shape;
      break;
    case ConvDirection::kGradWeight:
      in0_shape = x_shape;
      in1_shape = y_shape;
      out_shape = w_shape;
      break;
  }
  const auto numel = [](const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return static_cast<size_t>(n);
  };
  DeviceBuffer in0, in1, out;
  LS_RETURN_IF_ERROR(AllocateFilled(in0, numel(in0_shape)));
  LS_RETURN_IF_ERROR(AllocateFilled(in1, numel(in1_shape)));
  LS_RETURN_IF_ERROR(AllocateFilled(out, numel(out_shape)));
  OpAttrs attrs;
  attrs.stride_h = s.stride_h;
  attrs.stride_w = s.stride_w;
  attrs.pad_top = s.pad_top;
  attrs.pad_bottom = s.pad_bottom;
  attrs.pad_left = s.pad_left;
  attrs.pad_right = s.pad_right;
  attrs.dilation_h = s.dilation_h;
  attrs.dilation_w = s.dilation_w;
  attrs.groups = s.groups;
  row.ms[kCanonicalColumn] =
      TimeCanonicalMs(DirectionName(dir), {in0_shape, in1_shape}, out_shape,
                      attrs, {in0.get(), in1.get()}, out.get(), reps);
  absl::StatusOr<cudnnHandle_t> h = CudnnHandle(ctx);
  if (!h.ok()) {
    row.ms[kDeterministicColumn] = h.status();
    row.ms[kDefaultColumn] = h.status();
    return row;
  }
  std::string deterministic_choice = "-", default_choice = "-";
  row.ms[kDeterministicColumn] =
      TimeCudnnMs(ctx, *h, Mode::kDeterministic, dir, s, in0, in1, out, reps,
                  &deterministic_choice);
  row.ms[kDefaultColumn] = TimeCudnnMs(ctx, *h, Mode::kDefault, dir, s, in0,
                                       in1, out, reps, &default_choice);
  row.algorithms = absl::StrFormat("deterministic %s; default %s",
                                   deterministic_choice, default_choice);
  return row;
}

std::string Gflops(const BenchRow& row, int column) {
  const absl::StatusOr<float>& ms = row.ms[column];
  if (!ms.ok() || *ms <= 0.0f) return "-";
  return absl::StrFormat("%.1f", row.flops / (*ms * 1e-3) / 1e9);
}

// GFLOP/s ratio of column `num` to column `den` (= the inverse time ratio).
std::string Ratio(const BenchRow& row, int num, int den) {
  const absl::StatusOr<float>& a = row.ms[num];
  const absl::StatusOr<float>& b = row.ms[den];
  if (!a.ok() || !b.ok() || *a <= 0.0f || *b <= 0.0f) return "-";
  return absl::StrFormat("%.3f", *b / *a);
}

// A lost device ends the benchmark; any other failure is one cell's.
bool DeviceLost(const absl::Status& s) {
  return s.code() == absl::StatusCode::kFailedPrecondition;
}

}  // namespace

absl::StatusOr<std::string> RunVendorBenchmarks(int reps) {
  if (reps < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RunVendorBenchmarks: reps must be >= 1, got %d", reps));
  }
  LS_RETURN_IF_ERROR(cuda::CudaDeviceStatus());
  LS_ASSIGN_OR_RETURN(DeviceContext * ctx, CurrentContext());
  std::lock_guard<std::mutex> lock(ctx->mu);

  std::string report;
  {
    cudaDeviceProp prop;
    LS_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ctx->device));
    int runtime = 0, driver = 0, cublas = 0;
    LS_CUDA_RETURN_IF_ERROR(cudaRuntimeGetVersion(&runtime));
    LS_CUDA_RETURN_IF_ERROR(cudaDriverGetVersion(&driver));
    LS_ASSIGN_OR_RETURN(cublasHandle_t h, CublasHandle(ctx, true));
    LS_CUBLAS_RETURN_IF_ERROR(cublasGetVersion(h, &cublas));
    report += absl::StrFormat(
        "cost of determinism on %s (sm_%d%d): CUDA runtime %d, driver %d, "
        "cuBLAS %d, cuDNN %d\n",
        prop.name, prop.major, prop.minor, runtime, driver, cublas,
        static_cast<int64_t>(cudnnGetVersion()));
  }
  report += absl::StrFormat(
      "GFLOP/s on device-resident float32 buffers, CUDA events, best of %d "
      "runs after one warm-up run\n",
      reps);
  report +=
      "  canonical      CANONICAL CUDA kernel (kernels/cuda, one thread per "
      "output, canonical reduction order)\n"
      "  deterministic  the DETERMINISTIC kernels: cuBLAS with atomics not "
      "allowed, pedantic math, a fixed 32 MiB workspace; cuDNN with FMA "
      "math and the first deterministic heuristic algorithm\n"
      "  default        the DEFAULT kernels: cuBLAS with atomics allowed and "
      "default math; cuDNN with default math (TF32 on sm_80+) and the "
      "fastest algorithm by cudnnFind\n"
      "  gemm: y[M, N] = x[M, K] w[K, N], row-major, 2 M N K flops; conv: "
      "2 N C_out H_out W_out C_in K_h K_w flops in every direction\n"
      "  lenet: N=64, C 6 -> 16, 14x14 -> 10x10, 5x5 kernel; resnet: N=32, "
      "C 64 -> 64, 56x56 -> 56x56, 3x3 kernel, pad 1\n";

  std::vector<BenchRow> rows;
  for (const int64_t size : {int64_t{1024}, int64_t{2048}}) {
    LS_ASSIGN_OR_RETURN(BenchRow row, GemmRow(ctx, size, reps));
    rows.push_back(std::move(row));
  }
  sp::Conv2dShape lenet;
  lenet.n = 64;
  lenet.c_in = 6;
  lenet.h = 14;
  lenet.w = 14;
  lenet.c_out = 16;
  lenet.k_h = 5;
  lenet.k_w = 5;
  sp::Conv2dShape resnet;
  resnet.n = 32;
  resnet.c_in = 64;
  resnet.h = 56;
  resnet.w = 56;
  resnet.c_out = 64;
  resnet.k_h = 3;
  resnet.k_w = 3;
  resnet.pad_top = resnet.pad_bottom = resnet.pad_left = resnet.pad_right = 1;
  const std::pair<const char*, sp::Conv2dShape> layers[] = {{"lenet", lenet},
                                                            {"resnet", resnet}};
  for (const auto& [layer, shape] : layers) {
    for (const ConvDirection dir :
         {ConvDirection::kForward, ConvDirection::kGradInput,
          ConvDirection::kGradWeight}) {
      LS_ASSIGN_OR_RETURN(BenchRow row, ConvRow(ctx, layer, shape, dir, reps));
      rows.push_back(std::move(row));
    }
  }

  report += absl::StrFormat("%-27s %8s %10s %14s %10s %10s %12s\n", "case",
                            "GFLOP", "canonical", "deterministic", "default",
                            "canon/det", "det/default");
  std::string notes;
  for (const BenchRow& row : rows) {
    report += absl::StrFormat(
        "%-27s %8.3f %10s %14s %10s %10s %12s\n", row.name, row.flops / 1e9,
        Gflops(row, kCanonicalColumn), Gflops(row, kDeterministicColumn),
        Gflops(row, kDefaultColumn),
        Ratio(row, kCanonicalColumn, kDeterministicColumn),
        Ratio(row, kDeterministicColumn, kDefaultColumn));
    for (int col = 0; col < kBenchColumns; ++col) {
      if (row.ms[col].ok()) continue;
      if (DeviceLost(row.ms[col].status())) return row.ms[col].status();
      notes +=
          absl::StrFormat("  %s, %s: %s\n", row.name, kBenchColumnNames[col],
                          row.ms[col].status().ToString());
    }
  }
  report += "cuDNN algorithms chosen:\n";
  for (const BenchRow& row : rows) {
    if (row.algorithms.empty()) continue;
    report += absl::StrFormat("  %s: %s\n", row.name, row.algorithms);
  }
  if (!notes.empty()) report += "not measured:\n" + notes;
  return report;
}

}  // namespace lockstep::kernels::vendor
