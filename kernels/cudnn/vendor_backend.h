// The CUDA backend's DETERMINISTIC and DEFAULT kernels: cuBLAS, cuDNN and a
// few atomic kernels of our own (docs/gpu.md, "Vendor libraries").
//
// RegisterCudaVendorKernels registers, all under backend "cuda":
//
//   DETERMINISTIC (bitwise repeatable on one hardware class: same GPU model
//   and SM count, driver, CUDA, cuBLAS and cuDNN versions; not equal to
//   CANONICAL's bits):
//     dense.forward, dense.grad_input, dense.grad_weight       "cublas"
//         cublasSgemm on a handle with CUBLAS_ATOMICS_NOT_ALLOWED,
//         CUBLAS_PEDANTIC_MATH (no TF32) and a fixed user workspace
//         (cublasSetWorkspace), row-major mapped onto column-major
//         (vendor_plan.h), every transpose flag
//     conv2d.forward, conv2d.grad_input, conv2d.grad_weight     "cudnn"
//         cuDNN, CUDNN_FMA_MATH (no TF32), the algorithm chosen explicitly:
//         the first that cuDNN's heuristics (cudnnGet*Algorithm_v7) report
//         as deterministic and successful within a 256 MiB workspace cap;
//         never timed
//     conv_transpose2d.forward, .grad_input, .grad_weight       "cudnn"
//         the same cuDNN calls on the conv2d whose input gradient it is
//         (its forward is that conv2d's backward-data, its grad_input the
//         conv2d's forward, its grad_weight the conv2d's backward-filter)
//     bias_add.grad, max_pool2d.grad                            "gather"
//         the CANONICAL CUDA kernels (one thread per output, no atomics;
//         kernels/cuda/): deterministic by construction, and bit-identical
//         to CANONICAL
//
//   DEFAULT (stock-framework behaviour, NONDETERMINISTIC where marked):
//     dense.forward, dense.grad_input, dense.grad_weight       "cublas"
//         cublasSgemm on a handle with atomics allowed and cuBLAS's
//         default math and workspace (deterministic in practice for sgemm,
//         not guaranteed)
//     dense.forward                                    "split_k_atomic"
//         our split-K kernel: partial sums of 64-long k slices added into y
//         with atomicAdd (NONDETERMINISTIC when K > 64)
//     conv2d.forward, conv2d.grad_input, conv2d.grad_weight     "cudnn_find"
//         cuDNN, CUDNN_DEFAULT_MATH (TF32 permitted on sm_80+), the
//         algorithm picked by timing (cudnnFind*AlgorithmEx) among all,
//         nondeterministic ones included, once per shape per process
//         (NONDETERMINISTIC: the choice depends on timings, and the chosen
//         algorithm may use atomics)
//     conv_transpose2d.forward, .grad_input, .grad_weight  "cudnn_find"
//         the same, on the conv2d whose input gradient it is
//     bias_add.grad                                             "atomic"
//         our kernel: per-slice sums added into db with atomicAdd
//         (NONDETERMINISTIC)
//     max_pool2d.grad                                           "atomic"
//         our scatter: each dy element added into its window winner's dx
//         with atomicAdd (NONDETERMINISTIC where windows overlap)
//     embedding.grad_weight                                     "atomic"
//         our scatter: each dy element added into dw[ids[p]] with
//         atomicAdd (NONDETERMINISTIC when an id repeats)
//     and, for each of those twelve ops, "default": the kernel the worker
//     runs for DEFAULT when no algorithm is named; split_k_atomic for
//     dense.forward (as on the CPU), cublas for dense.grad_*, cudnn_find
//     for conv2d.* and conv_transpose2d.*, atomic for bias_add.grad,
//     max_pool2d.grad and embedding.grad_weight;
//     and "deterministic" for each op with a DETERMINISTIC kernel above:
//     that kernel, for a DEFAULT job that pins single ops to repeatable
//     kernels (config.op_algorithms).
//
// 56 keys in all. Registration needs no device. Every kernel validates its
// call exactly as the CPU backend does (same validators, same
// INVALID_ARGUMENT messages) before touching the device; the cuDNN kernels
// then return UNIMPLEMENTED for what legacy cuDNN cannot express
// (asymmetric padding, tensors of 2^31 elements or more). Then each needs
// a device: without one, FAILED_PRECONDITION "no usable CUDA device: ...";
// after a sticky device error, FAILED_PRECONDITION "device unusable: ...".
// Kernels take host Tensors, copy them to the current device, compute,
// synchronize and copy the output back; outputs are untouched on error.
// Thread-safety: as the CPU backend's kernels (concurrent calls must not
// share output Tensors); calls on one device are serialized.
#ifndef LOCKSTEP_KERNELS_CUDNN_VENDOR_BACKEND_H_
#define LOCKSTEP_KERNELS_CUDNN_VENDOR_BACKEND_H_

#include "absl/status/status.h"
#include "kernels/registry.h"

namespace lockstep::kernels {

// Algorithm names of the vendor kernels ("atomic", "split_k_atomic" and
// "default" are the CPU backend's names for the same kinds of kernel).
inline constexpr char kCublasAlgorithm[] = "cublas";
inline constexpr char kCudnnAlgorithm[] = "cudnn";
inline constexpr char kCudnnFindAlgorithm[] = "cudnn_find";
inline constexpr char kGatherAlgorithm[] = "gather";
inline constexpr char kVendorAtomicAlgorithm[] = "atomic";
inline constexpr char kVendorSplitKAtomicAlgorithm[] = "split_k_atomic";
inline constexpr char kVendorDefaultAlgorithm[] = "default";
inline constexpr char kVendorDeterministicAlgorithm[] = "deterministic";

// Registers the keys listed above. In a build without CUDA registers nothing
// and returns FAILED_PRECONDITION "cudnn backend: built without CUDA".
// ALREADY_EXISTS if one of the keys is taken (keys registered before it
// stay).
absl::Status RegisterCudaVendorKernels(Registry* registry);

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_CUDNN_VENDOR_BACKEND_H_
