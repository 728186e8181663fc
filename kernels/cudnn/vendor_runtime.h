// The device side of the vendor-library kernels (vendor_backend.h): cuBLAS
// GEMMs, cuDNN convolutions and the DEFAULT mode's atomic kernels, on host
// buffers; and the GPU cost-of-determinism benchmark (RunVendorBenchmarks).
//
// Built by nvcc where the CUDA toolkit (with cuDNN) was found and
// --define=cuda=off is not given, one file per concern:
//   vendor_context.{h,cu}  per-device handles, argument checks, copy-out
//   vendor_status.cu       cuBLAS / cuDNN errors as Status (vendor_status.h)
//   cublas_gemm.{h,cu}     CublasMatMul
//   cudnn_conv.{h,cu}      CudnnConv2d and its per-shape plan cache
//   atomic_kernels.cu      SplitKAtomicMatMul, AtomicBiasAddGrad,
//                          AtomicMaxPool2dGrad
//   vendor_bench.cu        RunVendorBenchmarks
// Elsewhere from vendor_runtime_fallback.cc, whose functions return
// FAILED_PRECONDITION "cudnn backend: built without CUDA".
//
// Every kernel function takes shapes that the caller has validated
// (kernels/ops/ validate.h, kernels/spatial/validate.h) and host spans holding
// exactly the elements those shapes describe (INVALID_ARGUMENT otherwise). It
// checks for a device (kernels/cuda/cuda_runtime.h CudaDeviceStatus), copies
// the inputs to the current device, computes, synchronizes and copies the
// output back. The output is untouched on error. Errors (every CUDA, cuBLAS and
// cuDNN call is checked, vendor_status.h):
//   no device / no driver      FAILED_PRECONDITION "no usable CUDA device: ..."
//   sticky device errors       FAILED_PRECONDITION "device unusable: ..."
//   not supported by a library UNIMPLEMENTED "cudnn: <call> failed at ..."
//   anything else              INTERNAL "cublas: <call> failed at ...: ..."
//
// Library state, created lazily on the first call that needs it and kept
// for the life of the process, per device (cudaGetDevice):
//   - two cuBLAS handles: DETERMINISTIC (CUBLAS_ATOMICS_NOT_ALLOWED,
//     CUBLAS_PEDANTIC_MATH, a fixed kCublasWorkspaceBytes user workspace set
//     with cublasSetWorkspace) and DEFAULT (atomics allowed, default math,
//     cuBLAS's own workspace);
//   - one cuDNN handle;
//   - per (mode, direction, convolution shape): the cuDNN descriptors and
//     the chosen algorithm (vendor_plan.h rules), in a mutex-protected map.
// All calls on one device are serialized by a per-device mutex, so the
// functions are thread-safe as long as concurrent calls do not share output
// buffers. The legacy default stream is used throughout.
#ifndef LOCKSTEP_KERNELS_CUDNN_VENDOR_RUNTIME_H_
#define LOCKSTEP_KERNELS_CUDNN_VENDOR_RUNTIME_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "kernels/ops/dense.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/embedding.h"
#include "kernels/spatial/conv2d.h"
#include "kernels/spatial/pool2d.h"

namespace lockstep::kernels::vendor {

// The DETERMINISTIC cuBLAS handle's user workspace (cublasSetWorkspace).
inline constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
// Largest cuDNN workspace a convolution algorithm may need to be chosen.
inline constexpr size_t kConvWorkspaceCapBytes = size_t{256} << 20;
// The DEFAULT split-K GEMM: each thread reduces this many consecutive k
// into a partial sum and adds it into the output with atomicAdd.
inline constexpr int64_t kSplitKChunk = 64;

// Whether this binary's vendor code was compiled by nvcc.
bool VendorBuiltWithCuda();

// C = A B (kernels/ops/dense.h strides) by cublasSgemm on the DETERMINISTIC
// or the DEFAULT handle (`mode`, anything but those two is
// INVALID_ARGUMENT). An empty reduction (depth 0) writes +0.0f.
absl::Status CublasMatMul(Mode mode, const canonical::MatMulShape& s,
                          absl::Span<const float> a, absl::Span<const float> b,
                          absl::Span<float> c);

// C = A B split over the reduction: C zeroed, then one thread per (output,
// kSplitKChunk-long slice of k) adds its fma-chain partial sum into C with
// atomicAdd, in arrival order (NONDETERMINISTIC when depth > kSplitKChunk).
absl::Status SplitKAtomicMatMul(const canonical::MatMulShape& s,
                                absl::Span<const float> a,
                                absl::Span<const float> b, absl::Span<float> c);

enum class ConvDirection {
  kForward,     // in0 = x, in1 = w, out = y
  kGradInput,   // in0 = dy, in1 = w, out = dx
  kGradWeight,  // in0 = x, in1 = dy, out = dw
};

// One cuDNN convolution (NCHW / OIHW float32, cross-correlation, groups).
// REQUIRES CheckCudnnConv2d(s) OK (UNIMPLEMENTED otherwise).
//   DETERMINISTIC: math type CUDNN_FMA_MATH (no tensor-op / TF32 kernels);
//     the algorithm is the first that cudnnGet*Algorithm_v7's heuristics
//     list as deterministic, successful, of FMA math (or, on devices before
//     sm_80, where default math is FMA, default math) and within
//     kConvWorkspaceCapBytes (ChooseDeterministicConvAlgo). Never timed.
//   DEFAULT: math type CUDNN_DEFAULT_MATH (cuDNN's default: TF32 tensor
//     cores permitted on sm_80 and later); the algorithm is the fastest by
//     cudnnFind*AlgorithmEx's timing among all that ran within the cap,
//     deterministic or not (ChooseFastestConvAlgo), measured once per shape
//     per process.
absl::Status CudnnConv2d(Mode mode, ConvDirection direction,
                         const spatial::Conv2dShape& s,
                         absl::Span<const float> in0,
                         absl::Span<const float> in1, absl::Span<float> out);

// db zeroed, then one thread per (n, c, 32-element slice of the spatial
// extent) adds its slice's sum into db[c] with atomicAdd
// (NONDETERMINISTIC).
absl::Status AtomicBiasAddGrad(const canonical::BiasShape& s,
                               absl::Span<const float> dy,
                               absl::Span<float> db);

// dx zeroed, then one thread per dy element finds its window's winner
// (spatial::MaxPool2dWindowArgmax, the canonical rule) and adds dy into
// dx[winner] with atomicAdd (NONDETERMINISTIC where windows overlap).
absl::Status AtomicMaxPool2dGrad(const spatial::Pool2dShape& s,
                                 absl::Span<const float> x,
                                 absl::Span<const float> dy,
                                 absl::Span<float> dx);

// dw zeroed, then one thread per dy element adds it into dw[ids[p]] with
// atomicAdd, as frameworks' embedding backward does (NONDETERMINISTIC when
// an id repeats). ids validated by the caller.
absl::Status AtomicEmbeddingGrad(const canonical::EmbeddingShape& s,
                                 absl::Span<const int32_t> ids,
                                 absl::Span<const float> dy,
                                 absl::Span<float> dw);

// The GPU "cost of determinism" report, measured in one run on
// device-resident buffers (every input float32 0x3c3c3c3c), each figure the
// best of `reps` runs after a warm-up (cuda::TimeDeviceWorkMs: CUDA events
// on the legacy default stream, no host<->device copies in the timed
// region). GFLOP/s of
//   canonical      the CANONICAL CUDA kernel (cuda::PlanCanonicalOp +
//                  cuda::LaunchOnDevice: the registered kernel's launches)
//   deterministic  cublasSgemm on the DETERMINISTIC handle / cuDNN with the
//                  algorithm CudnnConv2d(kDeterministic) chooses
//   default        cublasSgemm on the DEFAULT handle / cuDNN with the
//                  algorithm cudnnFind picks (CudnnConv2d(kDefault))
// and the ratios canonical/deterministic and deterministic/default, for
// square row-major GEMMs y = x w at 1024^3 and 2048^3 and for conv2d
// forward, grad_input and grad_weight of a LeNet-like layer (N=64, C 6 ->
// 16, 14x14 -> 10x10, 5x5) and a ResNet-like layer (N=32, C 64 -> 64,
// 56x56, 3x3, pad 1); then the cuDNN algorithms chosen and, for a cell that
// could not be measured (e.g. no deterministic cuDNN algorithm), why. Uses
// the same handles, plan cache and mutex as the kernels above. Errors: no
// device (as above), INVALID_ARGUMENT for reps < 1, and FAILED_PRECONDITION
// when the device is lost during the run.
absl::StatusOr<std::string> RunVendorBenchmarks(int reps = 10);

}  // namespace lockstep::kernels::vendor

#endif  // LOCKSTEP_KERNELS_CUDNN_VENDOR_RUNTIME_H_
