// The CUDA side of the CANONICAL CUDA backend: runs planned kernel calls
// (plan.h) on the device, hashes tensors on the device, and benchmarks.
//
// Built by nvcc from cuda_runtime.cu where the CUDA toolkit was found and
// --define=cuda=off is not given (LOCKSTEP_WITH_CUDA is then defined for
// dependants); elsewhere from cuda_runtime_fallback.cc, whose functions
// return FAILED_PRECONDITION "built without CUDA".
//
// Every CUDA runtime call is checked; an error comes back as an absl::Status
// naming the call, file and line (never exit()):
//   no device / no driver      FAILED_PRECONDITION "no usable CUDA device: ..."
//   sticky device errors       FAILED_PRECONDITION "device unusable: ..."
//     (illegal address, launch failure, ECC, ...: the context is lost and
//     every later call fails; the worker must restart the process)
//   anything else              INTERNAL "cuda: <call> failed at file:line: ..."
//
// This is the correctness path: host Tensors are copied to the device for
// each call and the outputs copied back (device-resident tensors are future
// work, docs/gpu.md). Calls use device 0 (cudaSetDevice is left to the
// caller) and the legacy default stream, and synchronize before returning.
//
// Thread-safety: functions may be called from several threads as long as
// concurrent calls do not share output Tensors.
#ifndef LOCKSTEP_KERNELS_CUDA_CUDA_RUNTIME_H_
#define LOCKSTEP_KERNELS_CUDA_CUDA_RUNTIME_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/cuda/plan.h"
#include "kernels/hash/fingerprint.h"

namespace lockstep::kernels::cuda {

// Whether this binary's CUDA code was compiled by nvcc.
bool BuiltWithCuda();

// OK when a CUDA device can be used; otherwise why not ("built without
// CUDA", or the failing call with the CUDA error name and text).
absl::Status CudaDeviceStatus();

// Copies the call's inputs to the device, runs its launches with `config`,
// copies the outputs back. Outputs are untouched on error.
absl::Status RunOnDevice(const DeviceCall& call, const LaunchConfig& config);

// The device fingerprint's leaf hashes of `size` bytes already on the
// device: each 64 KiB leaf is hashed by one thread (leaf_hash.h) and the
// NumLeaves(size) hashes, 8 bytes each, are copied into `leaf_hashes`; pass
// them to hash::CombineLeafHashes. REQUIRES: device_bytes is device memory
// readable for `size` bytes. INVALID_ARGUMENT when leaf_hashes.size() !=
// hash::NumLeaves(size).
absl::Status DeviceLeafHashes(const void* device_bytes, size_t size,
                              absl::Span<uint64_t> leaf_hashes,
                              const LaunchConfig& config = LaunchConfig{});

// The fingerprint of a host tensor (see hash::HashTensorBytes) computed with
// the device hasher: the bytes are copied to the device, each 64 KiB leaf is
// hashed by one thread, the leaf hashes (8 bytes each) come back and are
// combined on the host with hash::CombineLeafHashes. Equal to
// HashTensorBytes for every input. Errors as HashTensorBytes (reported
// before any device work), plus the CUDA errors above.
absl::StatusOr<hash::Fingerprint> DeviceFingerprint(
    hash::DtypeCode dtype, absl::Span<const int64_t> shape, const void* bytes,
    size_t size, const LaunchConfig& config = LaunchConfig{});

// Runs the GPU benchmark (canonical GEMM GFLOP/s, device hashing GB/s vs a
// device-to-device copy) and returns its report, one result per line.
absl::StatusOr<std::string> RunGpuBenchmarks();

}  // namespace lockstep::kernels::cuda

#endif  // LOCKSTEP_KERNELS_CUDA_CUDA_RUNTIME_H_
