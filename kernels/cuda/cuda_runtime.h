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
// RunOnDevice and DeviceFingerprint* are the correctness path: host Tensors
// are copied to the device for each call and the outputs copied back
// (device-resident tensors are future work, docs/gpu.md). LaunchOnDevice
// and DeviceLeafHashes work on memory already on the device. Calls use the
// current device (device 0 unless the caller set another) and the legacy
// default stream; all but LaunchOnDevice synchronize before returning.
//
// Launch configurations: every function taking a LaunchConfig first checks
// it against the launch limits (CheckDeviceLaunchConfig, plan.h: threads
// per block a multiple of 32 in [32, 256]) and returns INVALID_ARGUMENT
// before any CUDA call; before each launch, FAILED_PRECONDITION if the
// kernel cannot run that block size on the device (cudaFuncGetAttributes).
//
// Thread-safety: functions may be called from several threads as long as
// concurrent calls do not share output Tensors.
#ifndef LOCKSTEP_KERNELS_CUDA_CUDA_RUNTIME_H_
#define LOCKSTEP_KERNELS_CUDA_CUDA_RUNTIME_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
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

// The planner's options for the current device: its multiprocessor count
// (read once per device), which picks the tiled GEMM configuration of small
// products (PlanOptions::device_multiprocessors). The defaults when no
// device can be asked, and in a build without CUDA.
PlanOptions DevicePlanOptions();

// Copies the call's inputs to the device, runs its launches with `config`,
// copies the outputs back. Outputs are untouched on error.
absl::Status RunOnDevice(const DeviceCall& call, const LaunchConfig& config);

// Queues the launches of a planned call (PlanCanonicalOp) on the legacy
// default stream, on device memory the caller owns: device_buffers[b] is
// the device region of call.buffers[b] (at least call.buffers[b].bytes
// bytes; the call's host pointers are not used). Nothing is copied, nothing
// is synchronized and the device is not checked (call CudaDeviceStatus
// first): this runs a CANONICAL op on device-resident data, exactly the
// launches RunOnDevice runs. INVALID_ARGUMENT for a bad config, a
// device_buffers of the wrong size or a null entry; launch errors as above
// (a fault while the kernels run surfaces at the next synchronization).
absl::Status LaunchOnDevice(const DeviceCall& call,
                            absl::Span<void* const> device_buffers,
                            const LaunchConfig& config = LaunchConfig{});

// Queues tiled GEMM configuration `config` (tiled_gemm.h, WithGemmConfig;
// the planner's kTiledMatMul launches run PlanGemmConfig's) on device
// memory: c = the product s of a and b, scratch holding
// GemmConfigScratchFloats(config, s) floats (may be null when that is 0), on
// `blocks` blocks (0: one per tile, at most kMaxAutoBlocks). For benchmarks and
// tests of every configuration; nothing is synchronized (as LaunchOnDevice).
// INVALID_ARGUMENT for a config outside [0, kGemmConfigs) or a negative
// block count.
absl::Status LaunchTiledGemmConfig(int config,
                                   const canonical::BatchedMatMulShape& s,
                                   const float* a, const float* b, float* c,
                                   float* scratch, int64_t blocks = 0);

// LaunchTiledGemmConfig on host data: copies a, b and c (whose values
// stay where the product writes nothing) to the device, runs the
// configuration with its scratch on `blocks` blocks, synchronizes and
// copies c back. For the GPU tests of every configuration. INVALID_ARGUMENT
// as LaunchTiledGemmConfig, or when a span is smaller than the batch
// entries of s reach.
absl::Status RunTiledGemmConfig(int config,
                                const canonical::BatchedMatMulShape& s,
                                absl::Span<const float> a,
                                absl::Span<const float> b, absl::Span<float> c,
                                int64_t blocks = 0);

// Benchmark timing on the device: runs `enqueue` once untimed (module
// loading, library warm-up), then `reps` times, each between two CUDA
// events recorded on the legacy default stream, and returns the fastest
// run in milliseconds. `enqueue` must only queue device work on that
// stream (no host<->device copies, no synchronization). INVALID_ARGUMENT
// for reps < 1; the first error `enqueue` returns; CUDA errors as above.
absl::StatusOr<float> TimeDeviceWorkMs(
    int reps, absl::FunctionRef<absl::Status()> enqueue);

// The device fingerprint's leaf hashes of `size` bytes already on the
// device: each 64 KiB leaf is hashed by one warp (LeafHashAndStatsWarp,
// leaf_hash.h), or a block of warps (LeafHashAndStatsBlock) as
// CurrentDeviceLeafKernel chooses (by one thread, LeafHashThread, when
// device_bytes is not 16-byte aligned) and the NumLeaves(size) hashes, 8 bytes
// each, are copied into `leaf_hashes`; pass them to hash::CombineLeafHashes.
// REQUIRES: device_bytes is device memory readable for `size` bytes.
// INVALID_ARGUMENT when leaf_hashes.size() != hash::NumLeaves(size).
absl::Status DeviceLeafHashes(const void* device_bytes, size_t size,
                              absl::Span<uint64_t> leaf_hashes,
                              const LaunchConfig& config = LaunchConfig{});

// The fingerprint of a host tensor (see hash::HashTensorBytes) computed with
// the device hasher: the bytes are copied to the device, each 64 KiB leaf is
// hashed by one warp, the leaf hashes (8 bytes each) come back and are
// combined on the host with hash::CombineLeafHashes. Equal to
// HashTensorBytes for every input. Errors as HashTensorBytes (reported
// before any device work), plus the CUDA errors above.
absl::StatusOr<hash::Fingerprint> DeviceFingerprint(
    hash::DtypeCode dtype, absl::Span<const int64_t> shape, const void* bytes,
    size_t size, const LaunchConfig& config = LaunchConfig{});

// DeviceFingerprint plus the tensor's statistics (hash::ComputeStats),
// computed entirely on the device: per 64 KiB leaf one warp (or, as
// CurrentDeviceLeafKernel chooses, a block of warps: LeafHashAndStatsBlock)
// hashes the leaf and computes its statistics block (LeafHashAndStatsWarp),
// then one
// warp combines the leaf hashes (XXH3-128 over header || leaf hashes) while
// a second one loads the partials for its lane 0, which adds them in leaf
// order (CombineLeavesWarp). Only the
// 16-byte hash and the 40-byte totals cross the bus. Equal, bit for bit, to
// hash::FingerprintAndStats. Errors as hash::FingerprintAndStats (float32
// only), reported before any device work, plus the CUDA errors above.
absl::StatusOr<hash::FingerprintAndStatsResult> DeviceFingerprintAndStats(
    hash::DtypeCode dtype, absl::Span<const int64_t> shape, const void* bytes,
    size_t size, const LaunchConfig& config = LaunchConfig{});

// Runs the device hashing benchmark on 1 MiB and 256 MiB already on the
// device and returns its report, one result per line: the device's name;
// per size a device-to-device copy of the bytes, then leaf hashing and leaf
// hashing with statistics, each with one warp per leaf (the device path;
// both variants), a block of warps per leaf (LeafHashAndStatsBlock) and
// one thread per leaf (the reference bodies), and the whole fingerprint
// with statistics (leaf warps or leaf blocks + the two-warp combination), in
// GB/s read and as a fraction of the copy's bytes per second. Each figure
// is the best of `reps` timed runs (TimeDeviceWorkMs). The canonical kernels'
// GFLOP/s next to cuBLAS and cuDNN are in kernels/cudnn/vendor_runtime.h,
// RunVendorBenchmarks.
absl::StatusOr<std::string> RunGpuBenchmarks(int reps = 5);

}  // namespace lockstep::kernels::cuda

#endif  // LOCKSTEP_KERNELS_CUDA_CUDA_RUNTIME_H_
