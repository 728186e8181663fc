// Host side of the CANONICAL CUDA kernels: from a kernel call (Tensors and
// OpAttrs, kernels/backend.h) to a DeviceCall, the list of buffers to move
// and launches to run; and a host emulation of a CUDA grid that runs a
// DeviceCall with the device kernels' own per-thread bodies.
//
//   LS_ASSIGN_OR_RETURN(DeviceCall call,
//                       PlanCanonicalOp(op::kDenseForward, in, out, attrs));
//   LS_RETURN_IF_ERROR(RunOnDevice(call, LaunchConfig{}));   // cuda_runtime.h
//   LS_RETURN_IF_ERROR(RunEmulated(call, LaunchConfig{7, 128}));  // host
//
// PlanCanonicalOp validates exactly as the CPU backend does (same
// validators, same messages) and returns INVALID_ARGUMENT before anything is
// touched. A DeviceCall holds raw pointers into the call's Tensors: it is
// valid only while they are alive and must be run at most once (in-place
// optimizer state is read and written through it).
//
// Thread-safety: PlanCanonicalOp is thread-safe; running a DeviceCall writes
// the output Tensors, so concurrent runs must not share outputs.
#ifndef LOCKSTEP_KERNELS_CUDA_PLAN_H_
#define LOCKSTEP_KERNELS_CUDA_PLAN_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "kernels/cuda/leaf_hash.h"
#include "kernels/cuda/thread_bodies.h"
#include "kernels/hash/fingerprint.h"
#include "kernels/hash/stats_portable.h"
#include "kernels/residency.h"
#include "kernels/tensor.h"

namespace lockstep::kernels::cuda {

// A 1-D launch: `blocks` blocks of `threads_per_block` threads. blocks == 0
// picks ceil(work / threads_per_block), capped at kMaxAutoBlocks (the bodies
// are grid-stride, so any grid covers all the work). Results never depend
// on the configuration.
struct LaunchConfig {
  int64_t blocks = 0;
  int64_t threads_per_block = 256;
};
inline constexpr int64_t kMaxAutoBlocks = 4096;

// Blocks a launch of `work` items gets under `config` (>= 1).
int64_t BlocksFor(const LaunchConfig& config, int64_t work);

// The launch limits of every device launch (launch_limits.h), checked before
// any CUDA call: threads_per_block a multiple of kWarpSize in
// [kWarpSize, kMaxThreadsPerBlock], blocks 0 (automatic) or in
// [1, 2^31 - 1]. INVALID_ARGUMENT naming `what`, the field, its value and
// the limit. (RunEmulated accepts any positive block size: the host has no
// warps.)
absl::Status CheckDeviceLaunchConfig(const LaunchConfig& config,
                                     absl::string_view what);

// The grid one launch runs on under `config`: BlocksFor(config, work)
// blocks of config.threads_per_block threads, except the tiled GEMM
// (DeviceOp::kTiledMatMul), whose blocks always have
// PlannedGemmTile::kThreads threads: config.blocks blocks when set, else one
// block per tile up to kMaxAutoBlocks (its blocks walk the tiles
// grid-stride).
struct LaunchGrid {
  int64_t blocks = 1;
  int64_t threads_per_block = 1;
};
LaunchGrid GridFor(const KernelParams& params, const LaunchConfig& config);

// One memory region of a call.
struct CallBuffer {
  void* host = nullptr;  // the Tensor's storage; null for device scratch
  int64_t bytes = 0;
  bool copy_in = false;   // host -> device before the first launch
  bool copy_out = false;  // device -> host after the last launch
  // The Tensor whose storage `host` is (a handle sharing it), for resident
  // runs (kernels/residency.h): its mirror is the buffer's device memory.
  // Empty for scratch and for host data the plan computed.
  bool is_tensor = false;
  Tensor tensor;
};

// One kernel launch; the runner fills params.in / params.out from the
// buffer indices (-1: unused), each the buffer's address plus its offset
// in bytes (a launch that works on a part of a buffer).
struct Launch {
  KernelParams params;
  int in_buf[kMaxKernelBuffers] = {-1, -1, -1, -1};
  int out_buf[kMaxKernelBuffers] = {-1, -1, -1, -1};
  int64_t in_offset[kMaxKernelBuffers] = {0, 0, 0, 0};
  int64_t out_offset[kMaxKernelBuffers] = {0, 0, 0, 0};
};

struct DeviceCall {
  std::string op;  // e.g. "dense.forward", for error messages
  std::vector<CallBuffer> buffers;
  // Host data the plan computed (embedding.grad_weight's sorted positions)
  // that buffers point into; shared, so copies of the call stay valid.
  std::vector<std::shared_ptr<const std::vector<int64_t>>> host_data;
  std::vector<Launch> launches;  // run in order on one stream
};

// The ops PlanCanonicalOp knows: AllOpNames() and the graph data ops of
// op set v3 (GraphDataOpNames(), kernels/graph_ops.h), in that order: every
// op the CPU backend has a CANONICAL kernel for.
std::vector<std::string> CudaCanonicalOpNames();

struct PlanOptions {
  // The products of dense.* and matmul.* with at least kTiledGemmMinDim
  // rows, columns and reduction terms run as the tiled GEMM
  // (tiled_gemm.h), and so do conv2d forward, grad_input and grad_weight
  // with groups == 1 (and the conv_transpose2d directions that run them)
  // on their lowered matrices when the product is that large; smaller
  // ones, or all of them when false, run one thread per output. The bits
  // are the same either way.
  bool tiled_gemm = true;
  // A tiled conv2d grad_weight, whose few outputs reduce over N * H_out *
  // W_out terms, splits its reduction into runs of 2^L canonical chunks
  // (the smallest L that keeps runs * tiles <= split_blocks), one batch
  // entry per run, and then adds the runs' sums with the canonical tree.
  // The bits do not depend on it; 1 never splits.
  int64_t split_blocks = kMaxAutoBlocks;
  // The device's multiprocessor count: a tiled product of at most half as
  // many PlannedGemmTile tiles runs FewTilesGemmTile (tiled_gemm.h,
  // PlanGemmConfig). 0 (unknown, the emulation's default) always runs
  // PlannedGemmTile. The bits do not depend on it.
  int64_t device_multiprocessors = 0;
};
inline constexpr int64_t kTiledGemmMinDim = 16;

// Validates a CANONICAL kernel call and plans it. INVALID_ARGUMENT for a bad
// call (as the CPU kernel would report it), NOT_FOUND for an unknown op.
absl::StatusOr<DeviceCall> PlanCanonicalOp(
    absl::string_view op, absl::Span<const Tensor> inputs,
    absl::Span<Tensor> outputs, const OpAttrs& attrs,
    const PlanOptions& options = PlanOptions());

// Runs `call` on the host as a CUDA grid would: separate "device" copies of
// every buffer, then for each launch every thread id t of the
// GridFor(params, config) grid's n threads runs RunThread(params, t, n)
// (the tiled GEMM: EmulateTiledGemm on that grid's blocks), then the copies
// back. INVALID_ARGUMENT for a bad config.
// The emulation's mirror of a tensor in a resident run: host memory apart
// from the Tensor's, as a GPU's would be (filled with 0xA5 at creation).
class EmulatedMirror : public ResidentMirror {
 public:
  explicit EmulatedMirror(int64_t bytes);
  absl::Status CopyToHost(void* host) override;
  absl::StatusOr<hash::FingerprintAndStatsResult> FingerprintAndStats(
      hash::DtypeCode dtype, absl::Span<const int64_t> shape,
      size_t size) override;
  absl::StatusOr<hash::Fingerprint> HashBytes(hash::DtypeCode dtype,
                                              absl::Span<const int64_t> shape,
                                              size_t size) override;
  // Computes the fingerprint now (a device computes it in stream order,
  // before any later kernel writes the bytes: the same result) and keeps it
  // in the scope's EmulatedFingerprintQueue until collected.
  absl::StatusOr<size_t> QueueFingerprintAndStats(
      hash::DtypeCode dtype, absl::Span<const int64_t> shape,
      size_t size) override;
  // The "device" bytes of cb's tensor: its EmulatedMirror (made when
  // missing), filled from the host when cb is an input and the host copy
  // is newer (PrepareResidentMirror). REQUIRES: cb.is_tensor, cb.bytes > 0.
  static absl::StatusOr<unsigned char*> Prepare(const CallBuffer& cb);

 private:
  std::vector<unsigned char> bytes_;
};

// EmulatedMirror's FingerprintQueue: results held until collected.
class EmulatedFingerprintQueue : public FingerprintQueue {
 public:
  size_t Push(const hash::FingerprintAndStatsResult& r) {
    results_.push_back(r);
    return results_.size() - 1;
  }
  absl::Status Collect(
      std::vector<hash::FingerprintAndStatsResult>* out) override;

 private:
  std::vector<hash::FingerprintAndStatsResult> results_;
};

// Inside a ScopedResidentRun (kernels/residency.h) the tensors' "device"
// copies are EmulatedMirrors that stay attached to them (copied in only
// when the host copy is newer, outputs left there), as RunOnDevice keeps
// them on a GPU; scratch is still per call.
absl::Status RunEmulated(const DeviceCall& call, const LaunchConfig& config);

// The device fingerprint's leaf hashes computed by LeafHashThread on an
// emulated grid: NumDeviceLeaves(size) values.
std::vector<uint64_t> EmulateLeafHashes(const void* bytes, uint64_t size,
                                        const LaunchConfig& config);

// LeafHashAndStatsThread on an emulated grid: the leaf hashes and the
// per-leaf statistics partials of a float32 tensor of `size` bytes.
struct LeafHashesAndStats {
  std::vector<uint64_t> leaf_hashes;
  std::vector<hash::portable::StatsPartial> stats;
};
LeafHashesAndStats EmulateLeafHashesAndStats(const void* bytes, uint64_t size,
                                             const LaunchConfig& config);

// LeafHashAndStatsWarp (leaf_hash.h) on an emulated grid: the grid's
// BlocksFor(config, 32 * leaves) * threads_per_block threads form warps of
// 32 lanes, each run by EmulatedWarp (warp.h). Statistics (float32, size a
// multiple of 4) only when with_stats; `stats` is empty otherwise.
// `blocks_per_load`: the kernel variant (kLeafBlocksPerLoad or
// kFewLeavesBlocksPerLoad, leaf_hash.h). INVALID_ARGUMENT for a config the
// device would refuse (CheckDeviceLaunchConfig), statistics of a size not
// a multiple of 4, or another blocks_per_load.
absl::StatusOr<LeafHashesAndStats> EmulateLeafHashesWarp(
    const void* bytes, uint64_t size, bool with_stats,
    const LaunchConfig& config, int blocks_per_load = kLeafBlocksPerLoad);

// LeafHashAndStatsBlock (leaf_hash.h) on an emulated grid: the grid's
// LeafBlockGrid(config, leaves) blocks of kLeafBlockWarps warps, each
// block run by EmulatedBlock (warp.h); config.threads_per_block is not
// used (the block form's blocks have kLeafBlockThreads threads).
// Statistics as EmulateLeafHashesWarp. INVALID_ARGUMENT for a config the
// device would refuse (CheckDeviceLaunchConfig) or statistics of a size
// not a multiple of 4.
absl::StatusOr<LeafHashesAndStats> EmulateLeafHashesBlock(
    const void* bytes, uint64_t size, bool with_stats,
    const LaunchConfig& config);

// The blocks the block form's leaf kernel runs on for `leaves` leaves:
// one per leaf (at most kMaxAutoBlocks; the body is grid-stride), or
// config.blocks when set.
int64_t LeafBlockGrid(const LaunchConfig& config, uint64_t leaves);

// DeviceLeafKernel (leaf_hash.h) by name: "warp", "block" or "auto";
// INVALID_ARGUMENT naming the accepted values otherwise.
absl::StatusOr<DeviceLeafKernel> ParseDeviceLeafKernel(absl::string_view name);
const char* DeviceLeafKernelName(DeviceLeafKernel kernel);
// The process's choice: the last SetDeviceLeafKernel, else the environment
// variable LOCKSTEP_CUDA_LEAF_KERNEL (read once; a value
// ParseDeviceLeafKernel refuses is reported on stderr and ignored), else
// kWarp. Thread-safe.
DeviceLeafKernel CurrentDeviceLeafKernel();
void SetDeviceLeafKernel(DeviceLeafKernel kernel);

// Whether a resident run's queued device fingerprints run on a CUDA stream
// of their own (docs/gpu.md, "Hashing on a stream of its own"), so that
// they overlap the kernels launched after them, instead of in launch order
// on the legacy default stream with everything else. The bits are the same
// either way. By name: "on" or "off"; INVALID_ARGUMENT naming the accepted
// values otherwise.
absl::StatusOr<bool> ParseDeviceHashStream(absl::string_view name);
// The process's choice: the last SetDeviceHashStream, else the environment
// variable LOCKSTEP_CUDA_HASH_STREAM (read once; a value
// ParseDeviceHashStream refuses is reported on stderr and ignored), else
// off. Thread-safe.
bool CurrentDeviceHashStream();
void SetDeviceHashStream(bool on);

// The encoded header of a tensor (hash::EncodeTensorHeader) as the
// combination kernel's argument. Errors as hash::EncodeTensorHeader.
absl::StatusOr<TensorHeaderArg> DeviceHeaderArg(
    hash::DtypeCode dtype, absl::Span<const int64_t> shape);

// Which leaf body a device fingerprint runs: one thread per leaf (the
// reference), one warp per leaf, or a block of warps per leaf (the two
// the device path runs, DeviceLeafKernel).
enum class LeafBody { kOneThread, kWarp, kBlock };

// The whole device fingerprint on an emulated grid. kWarp, as
// DeviceFingerprintAndStats (cuda_runtime.h) runs it: the leaf kernel
// (LeafHashAndStatsWarp, with statistics or not) at `config` writing the
// leaf hashes after room for the encoded header, then CombineLeavesWarp on
// one warp (which writes the header there, DeviceHeaderArg); kBlock
// likewise with LeafHashAndStatsBlock (on LeafBlockGrid(config, leaves)
// blocks) as the leaf kernel; kOneThread: LeafHashAndStatsThread (or
// LeafHashThread) and CombineLeavesThread in one thread. The host only converts
// the 16-byte hash and the totals. Statistics need float32 (INVALID_ARGUMENT
// otherwise); kWarp and kBlock refuse configs as CheckDeviceLaunchConfig;
// other errors as hash::HashTensorBytes.
absl::StatusOr<hash::FingerprintAndStatsResult> EmulateDeviceFingerprint(
    hash::DtypeCode dtype, absl::Span<const int64_t> shape, const void* bytes,
    size_t size, bool with_stats, const LaunchConfig& config,
    LeafBody body = LeafBody::kWarp);

}  // namespace lockstep::kernels::cuda

#endif  // LOCKSTEP_KERNELS_CUDA_PLAN_H_
