// The DETERMINISTIC and DEFAULT cuDNN convolutions (vendor_runtime.h
// CudnnConv2d) through the legacy cudnn_cnn API, still shipped by cuDNN 9:
// descriptors and the chosen algorithm cached per (device, mode, direction,
// shape), the algorithm chosen by the vendor_plan.h rules.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cudnn/cudnn_conv.h"
#include "kernels/cudnn/vendor_context.h"
#include "kernels/cudnn/vendor_plan.h"
#include "kernels/cudnn/vendor_runtime.h"
#include "kernels/cudnn/vendor_status.h"

namespace lockstep::kernels::vendor {
namespace internal {
namespace {

namespace sp = ::lockstep::spatial;
using ::lockstep::kernels::cuda::DeviceBuffer;

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

}  // namespace

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

}  // namespace internal

namespace sp = ::lockstep::spatial;
using internal::CheckMode;
using internal::CheckSize;
using internal::ConvPlan;
using internal::CudnnHandle;
using internal::CurrentContext;
using internal::DeviceContext;
using internal::DirectionName;
using internal::GetConvPlan;
using internal::RunConv;
using internal::SyncAndCopyOut;
using ::lockstep::kernels::cuda::DeviceBuffer;

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

}  // namespace lockstep::kernels::vendor
