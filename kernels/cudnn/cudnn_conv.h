// The cuDNN convolution's plan cache and launch, shared by CudnnConv2d
// (cudnn_conv.cu) and the benchmark (vendor_bench.cu). CUDA code only; not
// part of the library's interface (vendor_runtime.h).
#ifndef LOCKSTEP_KERNELS_CUDNN_CUDNN_CONV_H_
#define LOCKSTEP_KERNELS_CUDNN_CUDNN_CONV_H_

#include <cudnn.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cudnn/vendor_context.h"
#include "kernels/cudnn/vendor_runtime.h"
#include "kernels/spatial/conv2d.h"

namespace lockstep::kernels::vendor::internal {

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

// "conv2d.forward", "conv2d.grad_input" or "conv2d.grad_weight".
const char* DirectionName(ConvDirection dir);

// The plan of (ctx's device, mode, dir, s): the cuDNN descriptors and the
// algorithm chosen by the vendor_plan.h rules (DETERMINISTIC: cuDNN's
// heuristics; DEFAULT: cudnnFind timed on the call's own buffers in0, in1,
// out), built on first use and kept for the life of the process.
// REQUIRES ctx->mu held (so one device never builds the same plan twice).
absl::StatusOr<const ConvPlan*> GetConvPlan(DeviceContext* ctx, cudnnHandle_t h,
                                            Mode mode, ConvDirection dir,
                                            const spatial::Conv2dShape& s,
                                            const cuda::DeviceBuffer& in0,
                                            const cuda::DeviceBuffer& in1,
                                            cuda::DeviceBuffer& out);

// Queues `plan`'s convolution on the legacy default stream; `ws` holds
// plan.workspace_bytes (or is null when that is 0).
absl::Status EnqueueConv(cudnnHandle_t h, ConvDirection dir,
                         const ConvPlan& plan, const void* in0, const void* in1,
                         void* out, void* ws);

}  // namespace lockstep::kernels::vendor::internal

#endif  // LOCKSTEP_KERNELS_CUDNN_CUDNN_CONV_H_
