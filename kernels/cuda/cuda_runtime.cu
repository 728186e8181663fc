// CANONICAL CUDA kernels: thin __global__ wrappers around the per-thread
// bodies of thread_bodies.h and the per-thread and per-warp bodies of
// leaf_hash.h, and the host code that moves buffers and launches them.
// Compiled with -fmad=false --ftz=false --prec-div=true --prec-sqrt=true
// (bazel/ls.bzl): no contraction, no flush-to-zero, IEEE division and sqrt;
// fma only where a body writes LsFma. Every kernel is declared
// __launch_bounds__(kMaxThreadsPerBlock) and every launch is checked first
// (CheckDeviceLaunchConfig, then CheckKernelFits).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/launch_limits.h"
#include "kernels/cuda/leaf_hash.h"
#include "kernels/cuda/thread_bodies.h"
#include "kernels/cuda/tiled_gemm.h"
#include "kernels/cuda/warp.h"
#include "kernels/residency.h"

namespace lockstep::kernels::cuda {
namespace {

__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// One kernel per DeviceOp: with the op a compile-time constant, RunThread's
// switch folds to the one body.
template <DeviceOp kOp>
__global__ void __launch_bounds__(kMaxThreadsPerBlock)
    CanonicalKernel(KernelParams p) {
  p.op = kOp;
  RunThread(p, GlobalThread(), GridThreads());
}

// The tiled GEMM (tiled_gemm.h) in configuration T: the shared phase
// sequence (GemmBlock), with a barrier after every phase. Launched with
// T::kThreads threads per block. T::kMinBlocksPerSm = 2 lets one block's
// barrier waits overlap the other's fma chains (ptxas then caps the kernel
// at 128 registers); docs/gpu.md "Tiled GEMM" has each configuration's
// resource report.
template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocksPerSm)
    TiledMatMulKernel(KernelParams p) {
  __shared__ GemmSharedOf<T> sh;
  GemmStateOf<T> state = {};
  const int thread = static_cast<int>(threadIdx.x);
  GemmBlock<T>(p.batched_matmul, static_cast<const float*>(p.in[0]),
               static_cast<const float*>(p.in[1]),
               static_cast<float*>(p.out[0]), static_cast<float*>(p.out[1]), sh,
               blockIdx.x, gridDim.x, [&](auto&& phase) {
                 phase(thread, state);
                 __syncthreads();
               });
}

// The one-thread-per-leaf reference bodies (the benchmark's baseline, and
// DeviceLeafHashes' path for bytes not 16-byte aligned).
__global__ void __launch_bounds__(kMaxThreadsPerBlock)
    LeafHashKernel(const unsigned char* bytes, uint64_t size,
                   uint64_t* leaf_hashes) {
  LeafHashThread(bytes, size, leaf_hashes, GlobalThread(), GridThreads());
}

__global__ void __launch_bounds__(kMaxThreadsPerBlock)
    LeafHashAndStatsKernel(const unsigned char* bytes, uint64_t size,
                           uint64_t* leaf_hashes,
                           hash::portable::StatsPartial* stats) {
  LeafHashAndStatsThread(bytes, size, leaf_hashes, stats, GlobalThread(),
                         GridThreads());
}

// One warp per leaf (LeafHashAndStatsWarp), kBlocks 1 KiB blocks loaded
// at once; stats and combine_input may be null. REQUIRES: blockDim.x a
// multiple of kWarpSize; bytes 16-byte aligned.
template <int kBlocks>
__global__ void __launch_bounds__(kMaxThreadsPerBlock)
    LeafHashWarpBlocksKernel(const unsigned char* bytes, uint64_t size,
                             uint64_t* leaf_hashes,
                             hash::portable::StatsPartial* stats,
                             unsigned char* combine_input) {
  DeviceWarp<WarpHashLane> w;
  w.lane = static_cast<int>(threadIdx.x % kWarpSize);
  LeafHashAndStatsWarp<kBlocks>(w, bytes, size, leaf_hashes, stats,
                                combine_input, GlobalThread() / kWarpSize,
                                GridThreads() / kWarpSize);
}

// A block of kLeafBlockWarps warps per leaf (LeafHashAndStatsBlock):
// leaves blockIdx.x, blockIdx.x + gridDim.x, ...; stats and combine_input
// may be null. With `fingerprint` not null (a one-leaf tensor,
// CombinesInLeafBlock; combine_input = scratch + header.len), the block
// also combines it (CombineOneLeafInBlock, the header written at scratch)
// and no combination kernel follows. REQUIRES: blockDim.x ==
// kLeafBlockThreads; bytes 16-byte aligned.
__global__ void __launch_bounds__(kLeafBlockThreads) LeafHashBlockKernel(
    const unsigned char* bytes, uint64_t size, uint64_t* leaf_hashes,
    hash::portable::StatsPartial* stats, unsigned char* combine_input,
    const TensorHeaderArg header, hash::portable::Hash128* fingerprint,
    hash::portable::StatsPartial* total) {
  __shared__ LeafBlockShared sh;
  DeviceBlockWarp<WarpHashLane> block;
  block.w.lane = static_cast<int>(threadIdx.x % kWarpSize);
  block.warp = static_cast<int>(threadIdx.x / kWarpSize);
  LeafHashAndStatsBlock(block, sh, bytes, size, leaf_hashes, stats,
                        combine_input, blockIdx.x, gridDim.x);
  if (fingerprint != nullptr) {
    CombineOneLeafInBlock(block, header, combine_input - header.len, stats,
                          fingerprint, total);
  }
}

// The header argument of the block kernel's launches that combine nothing.
TensorHeaderArg NoHeader() {
  TensorHeaderArg h;
  h.len = 0;
  return h;
}

// Whether the device fingerprint of `leaves` leaves runs the block form
// (CurrentDeviceLeafKernel, UseLeafBlocksFor).
bool UseLeafBlocks(uint64_t leaves) {
  const DeviceLeafKernel kernel = CurrentDeviceLeafKernel();
  if (kernel == DeviceLeafKernel::kWarp) return false;  // no device query
  return UseLeafBlocksFor(kernel, leaves,
                          DevicePlanOptions().device_multiprocessors);
}

// Queues the block form's leaf kernel on LeafBlockGrid(config, leaves)
// blocks, after checking that the device runs its blocks; `what` names
// the caller in errors. `header`, `fingerprint` and `total` as
// LeafHashBlockKernel's (fingerprint null: no combination).
absl::Status LaunchLeafHashBlock(
    absl::string_view what, const LaunchConfig& config,
    const unsigned char* bytes, uint64_t size, uint64_t* leaf_hashes,
    hash::portable::StatsPartial* stats, unsigned char* combine_input,
    const TensorHeaderArg& header, hash::portable::Hash128* fingerprint,
    hash::portable::StatsPartial* total, cudaStream_t stream = nullptr);

// The leaf kernel of `blocks_per_load` (kLeafBlocksPerLoad, or
// kFewLeavesBlocksPerLoad), as a pointer and queued.
const void* LeafHashWarpKernelOf(int blocks_per_load) {
  return blocks_per_load == kFewLeavesBlocksPerLoad
             ? reinterpret_cast<const void*>(
                   &LeafHashWarpBlocksKernel<kFewLeavesBlocksPerLoad>)
             : reinterpret_cast<const void*>(
                   &LeafHashWarpBlocksKernel<kLeafBlocksPerLoad>);
}
void LaunchLeafHashWarp(int blocks_per_load, dim3 grid, dim3 block,
                        const unsigned char* bytes, uint64_t size,
                        uint64_t* leaf_hashes,
                        hash::portable::StatsPartial* stats,
                        unsigned char* combine_input,
                        cudaStream_t stream = nullptr) {
  if (blocks_per_load == kFewLeavesBlocksPerLoad) {
    LeafHashWarpBlocksKernel<kFewLeavesBlocksPerLoad>
        <<<grid, block, 0, stream>>>(bytes, size, leaf_hashes, stats,
                                     combine_input);
  } else {
    LeafHashWarpBlocksKernel<kLeafBlocksPerLoad><<<grid, block, 0, stream>>>(
        bytes, size, leaf_hashes, stats, combine_input);
  }
}

// The combination (CombineLeavesWarp), launched as one block of
// kCombineThreads: warp 0 writes the header (a kernel argument) in front
// of the leaf hashes and hashes header || leaf hashes while warp 1 adds
// the statistics partials, staged in shared memory (stats may be null).
__global__ void __launch_bounds__(kMaxThreadsPerBlock)
    CombineLeavesWarpKernel(const TensorHeaderArg header, unsigned char* input,
                            uint64_t input_len, uint64_t leaves,
                            const hash::portable::StatsPartial* stats,
                            hash::portable::Hash128* fingerprint,
                            hash::portable::StatsPartial* total) {
  __shared__ PartialStage stage;
  DeviceWarp<WarpHashLane> w;
  w.lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int64_t warp = GlobalThread() / kWarpSize;
  if (warp == 0) {
    PutHeaderWarp(w, header, input);
    CombineLeafHashesWarp(w, input, input_len, fingerprint);
  } else if (warp == 1 && stats != nullptr) {
    SumLeafStatsWarp(w, stats, leaves, &stage, total);
  }
}

static_assert(sizeof(KernelParams) <= 4096,
              "kernel parameters must fit the 4 KiB launch limit");

using KernelPtr = void (*)(KernelParams);

KernelPtr KernelFor(const KernelParams& params) {
  switch (params.op) {
#define LS_CASE(name)  \
  case DeviceOp::name: \
    return &CanonicalKernel<DeviceOp::name>;
    LS_CASE(kMatMul)
    LS_CASE(kBiasAdd)
    LS_CASE(kBiasAddGrad)
    LS_CASE(kRelu)
    LS_CASE(kReluGrad)
    LS_CASE(kAdd)
    LS_CASE(kCopyWords)
    LS_CASE(kCopyBytes)
    LS_CASE(kSoftmaxExampleLoss)
    LS_CASE(kSoftmaxMeanLoss)
    LS_CASE(kSoftmaxRowStats)
    LS_CASE(kSoftmaxGrad)
    LS_CASE(kSgd)
    LS_CASE(kMomentum)
    LS_CASE(kAdam)
    LS_CASE(kConv2dForward)
    LS_CASE(kConv2dGradInput)
    LS_CASE(kConv2dGradWeight)
    LS_CASE(kMaxPool2dForward)
    LS_CASE(kMaxPool2dGrad)
    LS_CASE(kAvgPool2dForward)
    LS_CASE(kAvgPool2dGrad)
    LS_CASE(kGlobalAvgPoolForward)
    LS_CASE(kGlobalAvgPoolGrad)
    LS_CASE(kResizeForward)
    LS_CASE(kResizeGrad)
    LS_CASE(kActivation)
    LS_CASE(kActivationGrad)
    LS_CASE(kSoftmaxLast)
    LS_CASE(kSoftmaxLastGrad)
    LS_CASE(kLayerNorm)
    LS_CASE(kLayerNormGradInput)
    LS_CASE(kLayerNormStats)
    LS_CASE(kLayerNormGradParams)
    LS_CASE(kBatchNorm)
    LS_CASE(kBatchNormGradInput)
    LS_CASE(kBatchNormGradParams)
    LS_CASE(kSumSquares)
    LS_CASE(kScale)
    LS_CASE(kEmbedding)
    LS_CASE(kEmbeddingGrad)
    LS_CASE(kDropout)
    LS_CASE(kDropoutGrad)
    LS_CASE(kBatchedMatMul)
    LS_CASE(kTranspose)
    LS_CASE(kGather)
    LS_CASE(kGatherGrad)
    LS_CASE(kSliceGrad)
    LS_CASE(kBlockCopy)
    LS_CASE(kBinary)
    LS_CASE(kCompare)
    LS_CASE(kWhere)
    LS_CASE(kBinaryGradTerms)
    LS_CASE(kWhereGradTerms)
    LS_CASE(kUnary)
    LS_CASE(kUnaryGrad)
    LS_CASE(kSumTo)
    LS_CASE(kReduceGrad)
    LS_CASE(kConv2dIm2Col)
    LS_CASE(kConv2dGradInputCol)
    LS_CASE(kConv2dGradWeightCol)
    LS_CASE(kTreeSumParts)
    LS_CASE(kBnChunks)
    LS_CASE(kBnOutput)
    LS_CASE(kBnRunning)
    LS_CASE(kBnGradInput)
    LS_CASE(kSumSquaresChunks)
    LS_CASE(kConv2dGradWeightChunks)
#undef LS_CASE
    case DeviceOp::kTiledMatMul: {
      KernelPtr kernel = nullptr;
      WithGemmConfig(params.gemm_config, [&](auto tile) {
        kernel = &TiledMatMulKernel<decltype(tile)>;
      });
      return kernel;
    }
    case DeviceOp::kNumOps:
      break;
  }
  return nullptr;
}

// FAILED_PRECONDITION unless `kernel` can run blocks of `threads` threads
// on the current device (cudaFuncGetAttributes' maxThreadsPerBlock, which
// the registers, shared memory and launch bounds of the kernel decide);
// the attribute is read once per (device, kernel).
absl::Status CheckKernelFits(const void* kernel, absl::string_view name,
                             int64_t threads) {
  static std::mutex mu;
  static auto* max_threads = new std::map<std::pair<int, const void*>, int>();
  int device = 0;
  LS_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  int limit = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = max_threads->find({device, kernel});
    if (it != max_threads->end()) limit = it->second;
  }
  if (limit == 0) {
    cudaFuncAttributes attributes;
    LS_CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&attributes, kernel));
    limit = attributes.maxThreadsPerBlock;
    std::lock_guard<std::mutex> lock(mu);
    (*max_threads)[{device, kernel}] = limit;
  }
  if (threads > limit) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: the kernel runs at most %d threads per block on CUDA device %d "
        "(cudaFuncGetAttributes maxThreadsPerBlock: registers, shared memory, "
        "launch bounds %d), the launch asks for threads_per_block = %d",
        name, limit, device, kMaxThreadsPerBlock, threads));
  }
  return absl::OkStatus();
}

absl::Status LaunchLeafHashBlock(
    absl::string_view what, const LaunchConfig& config,
    const unsigned char* bytes, uint64_t size, uint64_t* leaf_hashes,
    hash::portable::StatsPartial* stats, unsigned char* combine_input,
    const TensorHeaderArg& header, hash::portable::Hash128* fingerprint,
    hash::portable::StatsPartial* total, cudaStream_t stream) {
  LS_RETURN_IF_ERROR(
      CheckKernelFits(reinterpret_cast<const void*>(&LeafHashBlockKernel), what,
                      kLeafBlockThreads));
  const dim3 grid(
      static_cast<unsigned>(LeafBlockGrid(config, NumDeviceLeaves(size))));
  LeafHashBlockKernel<<<grid, kLeafBlockThreads, 0, stream>>>(
      bytes, size, leaf_hashes, stats, combine_input, header, fingerprint,
      total);
  LS_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

bool BuiltWithCuda() { return true; }

PlanOptions DevicePlanOptions() {
  static std::mutex mu;
  static auto* multiprocessors = new std::map<int, int>();
  PlanOptions options;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    return options;
  }
  std::lock_guard<std::mutex> lock(mu);
  auto it = multiprocessors->find(device);
  if (it == multiprocessors->end()) {
    int count = 0;
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount,
                               device) != cudaSuccess) {
      cudaGetLastError();
      return options;
    }
    it = multiprocessors->emplace(device, count).first;
  }
  options.device_multiprocessors = it->second;
  return options;
}

namespace {

// CudaDeviceStatus without its synchronization, for the calls that must
// not wait for the device (a resident run's kernel calls, queued
// fingerprints): the device count is read until it is found usable, then
// never again. An error of an earlier asynchronous launch (a sticky one)
// is not looked for here: the next CUDA call that meets it returns it,
// and a resident run's next copy (its step's fingerprint results, the
// loss) waits for the device and reports it.
absl::Status CudaDeviceReady() {
  static std::atomic<bool> usable{false};
  if (usable.load(std::memory_order_acquire)) return absl::OkStatus();
  int count = 0;
  LS_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (count == 0) {
    return absl::FailedPreconditionError(
        "no usable CUDA device: cudaGetDeviceCount returned 0 devices");
  }
  usable.store(true, std::memory_order_release);
  return absl::OkStatus();
}

}  // namespace

// The leaf kernel's blocks per load for `leaves` leaves on the current
// device (LeafBlocksPerLoadFor).
int LeafBlocksPerLoad(uint64_t leaves) {
  return LeafBlocksPerLoadFor(leaves,
                              DevicePlanOptions().device_multiprocessors);
}

absl::Status CudaDeviceStatus() {
  int count = 0;
  LS_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (count == 0) {
    return absl::FailedPreconditionError(
        "no usable CUDA device: cudaGetDeviceCount returned 0 devices");
  }
  // A sticky error from an earlier call surfaces here.
  LS_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

absl::Status LaunchOnDevice(const DeviceCall& call,
                            absl::Span<void* const> device_buffers,
                            const LaunchConfig& config) {
  LS_RETURN_IF_ERROR(CheckDeviceLaunchConfig(config, call.op));
  if (device_buffers.size() != call.buffers.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d device buffers for a call of %d buffers",
                        call.op, device_buffers.size(), call.buffers.size()));
  }
  for (size_t b = 0; b < device_buffers.size(); ++b) {
    if (device_buffers[b] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: device buffer %d is null", call.op, b));
    }
  }
  const int num_buffers = static_cast<int>(device_buffers.size());
  for (const Launch& l : call.launches) {
    KernelParams p = l.params;
    for (int k = 0; k < kMaxKernelBuffers; ++k) {
      if (l.in_buf[k] >= num_buffers || l.out_buf[k] >= num_buffers) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: a launch names a buffer beyond the call's %d",
                            call.op, num_buffers));
      }
      p.in[k] = l.in_buf[k] >= 0
                    ? static_cast<const char*>(device_buffers[l.in_buf[k]]) +
                          l.in_offset[k]
                    : nullptr;
      p.out[k] = l.out_buf[k] >= 0
                     ? static_cast<char*>(device_buffers[l.out_buf[k]]) +
                           l.out_offset[k]
                     : nullptr;
    }
    KernelPtr kernel = KernelFor(p);
    if (kernel == nullptr) {
      return absl::InternalError(
          absl::StrFormat("%s: no device kernel for launch op %d", call.op,
                          static_cast<int>(p.op)));
    }
    if (p.work == 0) continue;
    const LaunchGrid g = GridFor(p, config);
    LS_RETURN_IF_ERROR(CheckKernelFits(reinterpret_cast<const void*>(kernel),
                                       call.op, g.threads_per_block));
    const dim3 grid(static_cast<unsigned>(g.blocks));
    const dim3 block(static_cast<unsigned>(g.threads_per_block));
    void* args[] = {&p};
    LS_CUDA_RETURN_IF_ERROR(cudaLaunchKernel(
        reinterpret_cast<const void*>(kernel), grid, block, args, 0, 0));
    LS_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return absl::OkStatus();
}

absl::StatusOr<hash::FingerprintAndStatsResult> FingerprintAndStatsOnDevice(
    hash::DtypeCode dtype, absl::Span<const int64_t> shape, const void* bytes,
    const void* device_bytes, size_t size, const LaunchConfig& config);

// CombineLeavesWarpKernel's two results, side by side in one device
// buffer, so that one copy brings both back.
struct CombineResults {
  hash::portable::Hash128 hash;
  hash::portable::StatsPartial total;
};

// Everything about a DeviceFingerprintAndStats call that can be wrong
// before any device work; the combination kernel's header argument.
absl::StatusOr<TensorHeaderArg> CheckFingerprintAndStats(
    hash::DtypeCode dtype, absl::Span<const int64_t> shape, const void* bytes,
    const void* device_bytes, size_t size, const LaunchConfig& config);

// The fingerprint's kernels for a call CheckFingerprintAndStats accepted
// (`header` its result), queued with their results written to `out`
// (device memory); nothing waits for the device.
// With a `stream` other than the legacy default one (the hash stream), the
// caller orders it after the work that wrote device_bytes, and orders what
// later writes or frees device_bytes and `out` after it; REQUIRES then
// device_bytes (no host copy).
absl::Status EnqueueFingerprintAndStats(const TensorHeaderArg& header,
                                        const void* bytes,
                                        const void* device_bytes, size_t size,
                                        const LaunchConfig& config,
                                        CombineResults* out,
                                        cudaStream_t stream = nullptr);

namespace {

// The fingerprint of CombineLeavesWarpKernel's results.
hash::FingerprintAndStatsResult FingerprintOfResults(const CombineResults& r) {
  hash::FingerprintAndStatsResult f;
  f.fingerprint.hi = r.hash.hi;
  f.fingerprint.lo = r.hash.lo;
  f.stats = hash::CombineBlockStats({r.total});
  return f;
}

// Records *event (made on first use, without timing) on `stream`.
absl::Status RecordEvent(cudaEvent_t* event, cudaStream_t stream) {
  if (*event == nullptr) {
    LS_CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(event, cudaEventDisableTiming));
  }
  LS_CUDA_RETURN_IF_ERROR(cudaEventRecord(*event, stream));
  return absl::OkStatus();
}

// CudaMirror's FingerprintQueue: each queued fingerprint's 56 result bytes
// land in a slot of device memory; Collect brings back every used slot of
// a chunk in one copy (a step of up to kSlotsPerChunk tensors: one copy,
// one wait for the device).
//
// With the hash stream (`stream` not null in Enqueue), each fingerprint
// waits on that stream for everything launched before it on the legacy
// default stream (an event recorded there), and Collect and the queue's
// end make the legacy stream wait for the hash stream before the slots are
// copied back or freed.
class CudaFingerprintQueue : public FingerprintQueue {
 public:
  CudaFingerprintQueue() = default;
  CudaFingerprintQueue(const CudaFingerprintQueue&) = delete;
  CudaFingerprintQueue& operator=(const CudaFingerprintQueue&) = delete;
  ~CudaFingerprintQueue() override {
    // The chunks are freed on the legacy stream: after the hashes that
    // write them. Errors have nowhere to go (a sticky one is reported by
    // the next checked call).
    (void)JoinHashStream();
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    if (hashed_ != nullptr) cudaEventDestroy(hashed_);
  }

  absl::StatusOr<size_t> Enqueue(hash::DtypeCode dtype,
                                 absl::Span<const int64_t> shape,
                                 const void* device_bytes, size_t size,
                                 cudaStream_t stream) {
    LS_ASSIGN_OR_RETURN(
        const TensorHeaderArg header,
        CheckFingerprintAndStats(dtype, shape, nullptr, device_bytes, size,
                                 LaunchConfig{}));
    const size_t chunk = count_ / kSlotsPerChunk;
    if (chunk == chunks_.size()) {
      auto fresh = std::make_unique<DeviceBuffer>();
      LS_RETURN_IF_ERROR(
          fresh->Allocate(kSlotsPerChunk * sizeof(CombineResults)));
      chunks_.push_back(std::move(fresh));
    }
    auto* slot = static_cast<CombineResults*>(chunks_[chunk]->get()) +
                 count_ % kSlotsPerChunk;
    if (stream != nullptr) {
      // The hash starts after the kernels that wrote the tensor (and the
      // chunk's allocation), all on the legacy stream before this point.
      LS_RETURN_IF_ERROR(RecordEvent(&ready_, nullptr));
      LS_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, ready_, 0));
      stream_ = stream;
    }
    LS_RETURN_IF_ERROR(EnqueueFingerprintAndStats(
        header, nullptr, device_bytes, size, LaunchConfig{}, slot, stream));
    return count_++;
  }
  absl::Status Collect(
      std::vector<hash::FingerprintAndStatsResult>* out) override {
    LS_RETURN_IF_ERROR(JoinHashStream());
    std::vector<CombineResults> back(count_);
    for (size_t first = 0; first < count_; first += kSlotsPerChunk) {
      const size_t n = std::min(kSlotsPerChunk, count_ - first);
      LS_CUDA_RETURN_IF_ERROR(cudaMemcpy(
          back.data() + first, chunks_[first / kSlotsPerChunk]->get(),
          n * sizeof(CombineResults), cudaMemcpyDeviceToHost));
    }
    count_ = 0;
    out->reserve(out->size() + back.size());
    for (const CombineResults& r : back) {
      out->push_back(FingerprintOfResults(r));
    }
    return absl::OkStatus();
  }

 private:
  // Makes the legacy stream's later work (the results' copy, the chunks'
  // frees) wait for every fingerprint queued on the hash stream so far.
  absl::Status JoinHashStream() {
    if (stream_ == nullptr) return absl::OkStatus();
    LS_RETURN_IF_ERROR(RecordEvent(&hashed_, stream_));
    LS_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(nullptr, hashed_, 0));
    stream_ = nullptr;
    return absl::OkStatus();
  }

  static constexpr size_t kSlotsPerChunk = 1024;
  std::vector<std::unique_ptr<DeviceBuffer>> chunks_;
  size_t count_ = 0;
  // The hash stream when a fingerprint was queued on it since the last
  // join, and the events of the two directions (made on first use).
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  cudaEvent_t hashed_ = nullptr;
};

// The stream queued fingerprints run on: a non-blocking stream of their
// own when CurrentDeviceHashStream is on (made on first use, kept for the
// process), so that they overlap the kernels launched after them, else the
// legacy default stream (nullptr), in launch order with everything else.
absl::StatusOr<cudaStream_t> QueuedFingerprintStream() {
  if (!CurrentDeviceHashStream()) return cudaStream_t{nullptr};
  static cudaStream_t stream = nullptr;
  static const cudaError_t created =
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  LS_CUDA_RETURN_IF_ERROR(created);
  return stream;
}

// A tensor's device copy in a resident run (kernels/residency.h): device
// memory owned by the tensor's storage, freed with it.
class CudaMirror : public ResidentMirror {
 public:
  static absl::StatusOr<std::unique_ptr<CudaMirror>> Create(int64_t bytes) {
    auto m = std::unique_ptr<CudaMirror>(new CudaMirror(bytes));
    LS_RETURN_IF_ERROR(m->buffer_.Allocate(static_cast<size_t>(bytes)));
    return m;
  }
  CudaMirror(const CudaMirror&) = delete;
  CudaMirror& operator=(const CudaMirror&) = delete;
  ~CudaMirror() override {
    // The buffer is freed on the legacy stream: after the hashes reading it.
    (void)WaitForHashes();
    if (hashed_ != nullptr) cudaEventDestroy(hashed_);
  }
  // Orders the legacy stream's work from here on (a kernel or a copy that
  // writes the mirror, its free) after the fingerprints of the mirror
  // queued on the hash stream, which read it. Call before each write.
  absl::Status WaitForHashes() {
    if (!hash_pending_) return absl::OkStatus();
    LS_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(nullptr, hashed_, 0));
    hash_pending_ = false;
    return absl::OkStatus();
  }
  void* device() { return buffer_.get(); }
  absl::Status CopyToHost(void* host) override {
    LS_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(host, buffer_.get(), bytes_, cudaMemcpyDeviceToHost));
    if (ResidencyCounters* c = ActiveResidentRun()) {
      ++c->downloads;
      c->download_bytes += bytes_;
    }
    return absl::OkStatus();
  }
  absl::StatusOr<hash::FingerprintAndStatsResult> FingerprintAndStats(
      hash::DtypeCode dtype, absl::Span<const int64_t> shape,
      size_t size) override {
    if (ResidencyCounters* c = ActiveResidentRun()) ++c->mirror_fingerprints;
    return FingerprintAndStatsOnDevice(dtype, shape, nullptr, buffer_.get(),
                                       size, LaunchConfig{});
  }
  absl::StatusOr<hash::Fingerprint> HashBytes(hash::DtypeCode dtype,
                                              absl::Span<const int64_t> shape,
                                              size_t size) override {
    if (ResidencyCounters* c = ActiveResidentRun()) ++c->mirror_fingerprints;
    std::vector<uint64_t> leaf_hashes(NumDeviceLeaves(size));
    LS_RETURN_IF_ERROR(
        DeviceLeafHashes(buffer_.get(), size, absl::MakeSpan(leaf_hashes)));
    return hash::CombineLeafHashes(dtype, shape, size, leaf_hashes);
  }
  absl::StatusOr<size_t> QueueFingerprintAndStats(
      hash::DtypeCode dtype, absl::Span<const int64_t> shape,
      size_t size) override {
    LS_ASSIGN_OR_RETURN(CudaFingerprintQueue * q,
                        ActiveFingerprintQueueOf<CudaFingerprintQueue>());
    LS_ASSIGN_OR_RETURN(const cudaStream_t stream, QueuedFingerprintStream());
    LS_ASSIGN_OR_RETURN(const size_t position,
                        q->Enqueue(dtype, shape, buffer_.get(), size, stream));
    if (stream != nullptr) {
      // The next writer of the mirror waits for this event (WaitForHashes).
      LS_RETURN_IF_ERROR(RecordEvent(&hashed_, stream));
      hash_pending_ = true;
    }
    if (ResidencyCounters* c = ActiveResidentRun()) {
      ++c->mirror_fingerprints;
      ++c->queued_fingerprints;
    }
    return position;
  }

 private:
  explicit CudaMirror(int64_t bytes) : bytes_(bytes) {}
  int64_t bytes_;
  DeviceBuffer buffer_;
  // Recorded on the hash stream after the mirror's latest queued
  // fingerprint; pending until the legacy stream has been made to wait.
  cudaEvent_t hashed_ = nullptr;
  bool hash_pending_ = false;
};

// The device memory of cb's tensor in a resident run: its CudaMirror (made
// when missing), filled from the host when cb is an input and the host copy
// is newer (PrepareResidentMirror).
// A call that writes the buffer (copy_out), or an upload into it, first
// waits for the mirror's fingerprints on the hash stream.
absl::StatusOr<void*> PrepareResident(const CallBuffer& cb) {
  LS_ASSIGN_OR_RETURN(
      CudaMirror * m,
      PrepareResidentMirror<CudaMirror>(
          cb.tensor, cb.bytes, cb.copy_in, &CudaMirror::Create,
          [](CudaMirror* mirror, const void* host,
             int64_t bytes) -> absl::Status {
            LS_RETURN_IF_ERROR(mirror->WaitForHashes());
            LS_CUDA_RETURN_IF_ERROR(cudaMemcpy(mirror->device(), host,
                                               static_cast<size_t>(bytes),
                                               cudaMemcpyHostToDevice));
            return absl::OkStatus();
          }));
  if (cb.copy_out) LS_RETURN_IF_ERROR(m->WaitForHashes());
  return m->device();
}

}  // namespace

absl::Status LaunchTiledGemmConfig(int config,
                                   const canonical::BatchedMatMulShape& s,
                                   const float* a, const float* b, float* c,
                                   float* scratch, int64_t blocks) {
  KernelPtr kernel = nullptr;
  int64_t threads = 0;
  int64_t tiles = 0;
  if (!WithGemmConfig(config, [&](auto tile) {
        using T = decltype(tile);
        kernel = &TiledMatMulKernel<T>;
        threads = T::kThreads;
        tiles = GemmTiles<T>(s);
      })) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "LaunchTiledGemmConfig: config = %d: must be in [0, %d)", config,
        kGemmConfigs));
  }
  if (blocks < 0 || blocks > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "LaunchTiledGemmConfig: blocks = %d: must be 0 (automatic) or in "
        "[1, %d]",
        blocks, 0x7fffffff));
  }
  if (tiles == 0) return absl::OkStatus();
  KernelParams p;
  p.op = DeviceOp::kTiledMatMul;
  p.gemm_config = config;
  p.work = tiles;
  p.batched_matmul = s;
  p.in[0] = a;
  p.in[1] = b;
  p.out[0] = c;
  p.out[1] = scratch;
  if (blocks == 0) blocks = std::min<int64_t>(tiles, kMaxAutoBlocks);
  LS_RETURN_IF_ERROR(CheckKernelFits(reinterpret_cast<const void*>(kernel),
                                     GemmConfigName(config), threads));
  const dim3 grid(static_cast<unsigned>(blocks));
  const dim3 block(static_cast<unsigned>(threads));
  void* args[] = {&p};
  LS_CUDA_RETURN_IF_ERROR(cudaLaunchKernel(
      reinterpret_cast<const void*>(kernel), grid, block, args, 0, 0));
  LS_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status RunTiledGemmConfig(int config,
                                const canonical::BatchedMatMulShape& s,
                                absl::Span<const float> a,
                                absl::Span<const float> b, absl::Span<float> c,
                                int64_t blocks) {
  // The last element each operand's batch entries reach, plus one.
  const auto reach = [&](int64_t batch_stride, int64_t rows, int64_t row,
                         int64_t cols, int64_t col) -> int64_t {
    if (s.batch == 0 || rows == 0 || cols == 0) return 0;
    return (s.batch - 1) * batch_stride + (rows - 1) * row + (cols - 1) * col +
           1;
  };
  const struct {
    const char* name;
    size_t size;
    int64_t need;
  } spans[] = {
      {"a", a.size(),
       reach(s.a_batch, s.m.rows, s.m.a_row, s.m.depth, s.m.a_depth)},
      {"b", b.size(),
       reach(s.b_batch, s.m.depth, s.m.b_depth, s.m.cols, s.m.b_col)},
      {"c", c.size(),
       reach(s.c_batch, s.m.rows, s.m.c_row, s.m.cols, s.m.c_col)},
  };
  for (const auto& span : spans) {
    if (static_cast<int64_t>(span.size) < span.need) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "RunTiledGemmConfig: %s has %d floats, the product reaches %d",
          span.name, span.size, span.need));
    }
  }
  LS_RETURN_IF_ERROR(CudaDeviceStatus());
  DeviceBuffer da, db, dc, scratch;
  LS_RETURN_IF_ERROR(da.CopyIn(a));
  LS_RETURN_IF_ERROR(db.CopyIn(b));
  LS_RETURN_IF_ERROR(dc.CopyIn(c));
  const int64_t scratch_floats = GemmConfigScratchFloats(config, s);
  if (scratch_floats > 0) {
    LS_RETURN_IF_ERROR(scratch.Allocate(scratch_floats * sizeof(float)));
  }
  LS_RETURN_IF_ERROR(LaunchTiledGemmConfig(
      config, s, da.f(), db.f(), dc.f(),
      scratch_floats > 0 ? scratch.f() : nullptr, blocks));
  LS_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  if (!c.empty()) {
    LS_CUDA_RETURN_IF_ERROR(cudaMemcpy(
        c.data(), dc.get(), c.size() * sizeof(float), cudaMemcpyDeviceToHost));
  }
  return absl::OkStatus();
}

absl::Status RunOnDevice(const DeviceCall& call, const LaunchConfig& config) {
  LS_RETURN_IF_ERROR(CheckDeviceLaunchConfig(config, call.op));
  // No wait for the device here: a call that copies back waits at its end
  // (so its own faults are its own), and a resident call must not wait.
  if (absl::Status s = CudaDeviceReady(); !s.ok()) return s;
  const bool resident = ActiveResidentRun() != nullptr;
  std::vector<DeviceBuffer> mem(call.buffers.size());
  std::vector<void*> device(call.buffers.size());
  for (size_t b = 0; b < call.buffers.size(); ++b) {
    const CallBuffer& cb = call.buffers[b];
    if (resident && cb.is_tensor && cb.bytes > 0) {
      LS_ASSIGN_OR_RETURN(device[b], PrepareResident(cb));
      continue;
    }
    if (absl::Status s = mem[b].Allocate(cb.bytes); !s.ok()) return s;
    device[b] = mem[b].get();
    if (cb.copy_in && cb.bytes > 0) {
      LS_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(mem[b].get(), cb.host, cb.bytes, cudaMemcpyHostToDevice));
    }
  }
  if (absl::Status s = LaunchOnDevice(call, device, config); !s.ok()) {
    return s;
  }
  // A resident call returns without waiting for the device: its outputs
  // stay there, newer than their host copies, and its scratch goes back to
  // the pool in stream order. A call that copies back waits here, so a
  // kernel fault is reported by the call that launched it.
  if (!resident) LS_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  for (size_t b = 0; b < call.buffers.size(); ++b) {
    const CallBuffer& cb = call.buffers[b];
    if (!cb.copy_out || cb.bytes == 0) continue;
    if (resident && cb.is_tensor) {
      cb.tensor.SetMirrorState(MirrorState::kMirrorNewer);
    } else {
      LS_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(cb.host, mem[b].get(), cb.bytes, cudaMemcpyDeviceToHost));
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceLeafHashes(const void* device_bytes, size_t size,
                              absl::Span<uint64_t> leaf_hashes,
                              const LaunchConfig& config) {
  LS_RETURN_IF_ERROR(CheckDeviceLaunchConfig(config, "DeviceLeafHashes"));
  const uint64_t leaves = NumDeviceLeaves(size);
  if (leaf_hashes.size() != leaves) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DeviceLeafHashes: leaf_hashes has %d entries, %d bytes need %d",
        leaf_hashes.size(), size, leaves));
  }
  if (device_bytes == nullptr && size > 0) {
    return absl::InvalidArgumentError(
        "DeviceLeafHashes: device_bytes is null but size > 0");
  }
  if (absl::Status s = CudaDeviceStatus(); !s.ok()) return s;
  if (leaves == 0) return absl::OkStatus();
  DeviceBuffer hashes;
  if (absl::Status s = hashes.Allocate(leaves * 8); !s.ok()) return s;
  const auto* in = static_cast<const unsigned char*>(device_bytes);
  auto* out = static_cast<uint64_t*>(hashes.get());
  const dim3 block(static_cast<unsigned>(config.threads_per_block));
  if (reinterpret_cast<uintptr_t>(device_bytes) % 16 == 0 &&
      UseLeafBlocks(leaves)) {
    LS_RETURN_IF_ERROR(LaunchLeafHashBlock("DeviceLeafHashes", config, in, size,
                                           out, nullptr, nullptr, NoHeader(),
                                           nullptr, nullptr));
  } else if (reinterpret_cast<uintptr_t>(device_bytes) % 16 == 0) {
    const int blocks_per_load = LeafBlocksPerLoad(leaves);
    LS_RETURN_IF_ERROR(CheckKernelFits(LeafHashWarpKernelOf(blocks_per_load),
                                       "DeviceLeafHashes",
                                       config.threads_per_block));
    const dim3 grid(static_cast<unsigned>(
        BlocksFor(config, static_cast<int64_t>(leaves) * kWarpSize)));
    LaunchLeafHashWarp(blocks_per_load, grid, block, in, size, out, nullptr,
                       nullptr);
  } else {  // the warp body's 16-byte loads need 16-byte alignment
    LS_RETURN_IF_ERROR(
        CheckKernelFits(reinterpret_cast<const void*>(&LeafHashKernel),
                        "DeviceLeafHashes", config.threads_per_block));
    const dim3 grid(static_cast<unsigned>(BlocksFor(config, leaves)));
    LeafHashKernel<<<grid, block>>>(in, size, out);
  }
  LS_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  LS_CUDA_RETURN_IF_ERROR(cudaMemcpy(leaf_hashes.data(), hashes.get(),
                                     leaves * 8, cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

absl::StatusOr<hash::Fingerprint> DeviceFingerprint(
    hash::DtypeCode dtype, absl::Span<const int64_t> shape, const void* bytes,
    size_t size, const LaunchConfig& config) {
  static_assert(kDeviceLeafBytes == hash::kLeafBytes,
                "device and host leaf sizes differ");
  LS_RETURN_IF_ERROR(CheckDeviceLaunchConfig(config, "DeviceFingerprint"));
  if (bytes == nullptr && size > 0) {
    return absl::InvalidArgumentError(
        "DeviceFingerprint: bytes is null but size > 0");
  }
  // Dtype, shape and size before any device work.
  LS_RETURN_IF_ERROR(hash::CheckTensorSize(dtype, shape, size));
  std::vector<uint64_t> leaf_hashes(NumDeviceLeaves(size));
  if (absl::Status s = CudaDeviceStatus(); !s.ok()) return s;
  DeviceBuffer data;
  if (absl::Status s = data.Allocate(size); !s.ok()) return s;
  if (size > 0) {
    LS_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(data.get(), bytes, size, cudaMemcpyHostToDevice));
  }
  if (absl::Status s = DeviceLeafHashes(data.get(), size,
                                        absl::MakeSpan(leaf_hashes), config);
      !s.ok()) {
    return s;
  }
  return hash::CombineLeafHashes(dtype, shape, size, leaf_hashes);
}

// Everything about a DeviceFingerprintAndStats call that can be wrong
// before any device work; the combination kernel's header argument.
absl::StatusOr<TensorHeaderArg> CheckFingerprintAndStats(
    hash::DtypeCode dtype, absl::Span<const int64_t> shape, const void* bytes,
    const void* device_bytes, size_t size, const LaunchConfig& config) {
  LS_RETURN_IF_ERROR(
      CheckDeviceLaunchConfig(config, "DeviceFingerprintAndStats"));
  if (dtype != hash::DtypeCode::kFloat32) {
    return absl::InvalidArgumentError(
        "dtype: statistics are defined for float32 only");
  }
  if (bytes == nullptr && device_bytes == nullptr && size > 0) {
    return absl::InvalidArgumentError(
        "DeviceFingerprintAndStats: bytes is null but size > 0");
  }
  LS_RETURN_IF_ERROR(hash::CheckTensorSize(dtype, shape, size));
  return DeviceHeaderArg(dtype, shape);
}

// DeviceFingerprintAndStats's kernels: the host bytes are copied to the
// device first, or `device_bytes` (16-byte aligned) are already there. The
// buffers made here are freed in stream order, after the kernels.
absl::Status EnqueueFingerprintAndStats(const TensorHeaderArg& header,
                                        const void* bytes,
                                        const void* device_bytes, size_t size,
                                        const LaunchConfig& config,
                                        CombineResults* out,
                                        cudaStream_t stream) {
  const uint64_t leaves = NumDeviceLeaves(size);
  if (stream != nullptr && device_bytes == nullptr) {
    return absl::InternalError(
        "EnqueueFingerprintAndStats: the hash stream takes device bytes only");
  }
  // Queued fingerprints must not wait for the device.
  if (absl::Status s = CudaDeviceReady(); !s.ok()) return s;
  using hash::portable::Hash128;
  using hash::portable::StatsPartial;
  // Device memory: the tensor (unless it is there already), then one
  // region for the rest, so that a queued fingerprint costs one allocation
  // and one free in stream order, not three: the statistics partials, the
  // leaf hashes and the combination's input (header || leaf hashes), each
  // starting on a 16-byte boundary (the combination loads its input 16
  // bytes at a time).
  DeviceBuffer data, scratch;
  if (device_bytes == nullptr) {
    if (absl::Status s = data.Allocate(size); !s.ok()) return s;
  }
  const auto align16 = [](uint64_t n) { return (n + 15) / 16 * 16; };
  const uint64_t hashes_at = align16(leaves * sizeof(StatsPartial));
  const uint64_t input_at = hashes_at + align16(leaves * 8);
  if (absl::Status s =
          scratch.Allocate(input_at + header.len + 8 * leaves, stream);
      !s.ok()) {
    return s;
  }
  if (device_bytes == nullptr && size > 0) {
    LS_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(data.get(), bytes, size, cudaMemcpyHostToDevice));
  }
  const void* leaves_in = device_bytes != nullptr ? device_bytes : data.get();
  auto* const region = static_cast<unsigned char*>(scratch.get());
  auto* const partials = reinterpret_cast<StatsPartial*>(region);
  auto* const hashes = reinterpret_cast<uint64_t*>(region + hashes_at);
  unsigned char* const combine_input = region + input_at;
  const bool blocks = leaves > 0 && UseLeafBlocks(leaves);
  // A one-leaf tensor's leaf block combines it itself.
  const bool combined = blocks && CombinesInLeafBlock(leaves, header.len);
  if (blocks) {
    LS_RETURN_IF_ERROR(LaunchLeafHashBlock(
        "DeviceFingerprintAndStats", config,
        static_cast<const unsigned char*>(leaves_in), size, hashes, partials,
        combine_input + header.len, header, combined ? &out->hash : nullptr,
        combined ? &out->total : nullptr, stream));
  } else if (leaves > 0) {
    const int blocks_per_load = LeafBlocksPerLoad(leaves);
    LS_RETURN_IF_ERROR(CheckKernelFits(LeafHashWarpKernelOf(blocks_per_load),
                                       "DeviceFingerprintAndStats",
                                       config.threads_per_block));
    const dim3 grid(static_cast<unsigned>(
        BlocksFor(config, static_cast<int64_t>(leaves) * kWarpSize)));
    const dim3 block(static_cast<unsigned>(config.threads_per_block));
    // Each leaf's hash also lands after the header: the combination's
    // input.
    LaunchLeafHashWarp(blocks_per_load, grid, block,
                       static_cast<const unsigned char*>(leaves_in), size,
                       hashes, partials, combine_input + header.len, stream);
    LS_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  if (combined) return absl::OkStatus();
  LS_RETURN_IF_ERROR(
      CheckKernelFits(reinterpret_cast<const void*>(&CombineLeavesWarpKernel),
                      "DeviceFingerprintAndStats", kCombineThreads));
  CombineLeavesWarpKernel<<<1, kCombineThreads, 0, stream>>>(
      header, combine_input, header.len + 8 * leaves, leaves, partials,
      &out->hash, &out->total);
  LS_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

// DeviceFingerprintAndStats's work, waiting for its result.
absl::StatusOr<hash::FingerprintAndStatsResult> FingerprintAndStatsOnDevice(
    hash::DtypeCode dtype, absl::Span<const int64_t> shape, const void* bytes,
    const void* device_bytes, size_t size, const LaunchConfig& config) {
  LS_ASSIGN_OR_RETURN(const TensorHeaderArg header,
                      CheckFingerprintAndStats(dtype, shape, bytes,
                                               device_bytes, size, config));
  DeviceBuffer result;
  LS_RETURN_IF_ERROR(result.Allocate(sizeof(CombineResults)));
  auto* out = static_cast<CombineResults*>(result.get());
  LS_RETURN_IF_ERROR(EnqueueFingerprintAndStats(header, bytes, device_bytes,
                                                size, config, out));
  // Only these 56 bytes come back, in one copy (one wait for the device).
  CombineResults back;
  LS_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(&back, out, sizeof(back), cudaMemcpyDeviceToHost));
  return FingerprintOfResults(back);
}

absl::StatusOr<hash::FingerprintAndStatsResult> DeviceFingerprintAndStats(
    hash::DtypeCode dtype, absl::Span<const int64_t> shape, const void* bytes,
    size_t size, const LaunchConfig& config) {
  return FingerprintAndStatsOnDevice(dtype, shape, bytes, nullptr, size,
                                     config);
}

absl::StatusOr<float> TimeDeviceWorkMs(
    int reps, absl::FunctionRef<absl::Status()> enqueue) {
  if (reps < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("TimeDeviceWorkMs: reps must be >= 1, got %d", reps));
  }
  // Warm-up: lazy module loading and library heuristics stay out of the
  // timed runs.
  if (absl::Status s = enqueue(); !s.ok()) return s;
  LS_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  LS_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  if (const cudaError_t e = cudaEventCreate(&stop); e != cudaSuccess) {
    cudaEventDestroy(start);
    return CudaErrorToStatus(e, "cudaEventCreate(&stop)", __FILE__, __LINE__);
  }
  float best = -1.0f;
  absl::Status status;
  for (int r = 0; r < reps && status.ok(); ++r) {
    cudaError_t err = cudaEventRecord(start);
    if (err == cudaSuccess) {
      status = enqueue();
      if (!status.ok()) break;
      err = cudaEventRecord(stop);
    }
    if (err == cudaSuccess) err = cudaEventSynchronize(stop);
    float ms = 0.0f;
    if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, start, stop);
    if (err != cudaSuccess) {
      status =
          CudaErrorToStatus(err, "timed benchmark run", __FILE__, __LINE__);
    } else if (best < 0.0f || ms < best) {
      best = ms;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!status.ok()) return status;
  return best;
}

absl::StatusOr<std::string> RunGpuBenchmarks(int reps) {
  if (absl::Status s = CudaDeviceStatus(); !s.ok()) return s;
  std::string report;
  int device = 0;
  LS_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  cudaDeviceProp prop;
  LS_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  report += absl::StrFormat("device: %s (sm_%d%d, %d SMs)\n", prop.name,
                            prop.major, prop.minor, prop.multiProcessorCount);

  // Device hashing, warp per leaf and thread per leaf, with and without
  // statistics, vs a device-to-device copy of the same bytes (float32
  // 0x3c3c3c3c, about 0.0115: finite, so the statistics take their common
  // path). The ratio is the copy's time over the hash's: hash bytes read
  // per second over copy bytes copied per second (the target is >= 0.8).
  using hash::portable::Hash128;
  using hash::portable::StatsPartial;
  constexpr size_t kMaxBytes = size_t{256} << 20;
  const uint64_t max_leaves = NumDeviceLeaves(kMaxBytes);
  DeviceBuffer src, dst, hashes, partials, combine_input, result;
  LS_RETURN_IF_ERROR(src.Allocate(kMaxBytes));
  LS_RETURN_IF_ERROR(dst.Allocate(kMaxBytes));
  LS_RETURN_IF_ERROR(hashes.Allocate(max_leaves * 8));
  LS_RETURN_IF_ERROR(partials.Allocate(max_leaves * sizeof(StatsPartial)));
  // A header's worth of bytes (the combination writes it and hashes
  // header || leaf hashes; its contents do not change the timing).
  constexpr uint64_t kHeader = 32;
  TensorHeaderArg header;
  header.len = kHeader;
  std::memset(header.bytes, 0, sizeof(header.bytes));
  LS_RETURN_IF_ERROR(combine_input.Allocate(kHeader + 8 * max_leaves));
  LS_RETURN_IF_ERROR(result.Allocate(sizeof(CombineResults)));
  LS_CUDA_RETURN_IF_ERROR(cudaMemset(src.get(), 0x3c, kMaxBytes));
  LS_CUDA_RETURN_IF_ERROR(
      cudaMemset(combine_input.get(), 0, kHeader + 8 * max_leaves));
  const LaunchConfig config{0, kMaxThreadsPerBlock};
  const dim3 block(static_cast<unsigned>(config.threads_per_block));
  for (const void* kernel :
       {reinterpret_cast<const void*>(&LeafHashKernel),
        reinterpret_cast<const void*>(&LeafHashAndStatsKernel),
        LeafHashWarpKernelOf(kLeafBlocksPerLoad),
        LeafHashWarpKernelOf(kFewLeavesBlocksPerLoad)}) {
    LS_RETURN_IF_ERROR(
        CheckKernelFits(kernel, "RunGpuBenchmarks", config.threads_per_block));
  }
  LS_RETURN_IF_ERROR(
      CheckKernelFits(reinterpret_cast<const void*>(&CombineLeavesWarpKernel),
                      "RunGpuBenchmarks", kCombineThreads));
  LS_RETURN_IF_ERROR(
      CheckKernelFits(reinterpret_cast<const void*>(&LeafHashBlockKernel),
                      "RunGpuBenchmarks", kLeafBlockThreads));
  const auto* in = static_cast<const unsigned char*>(src.get());
  auto* leaf_out = static_cast<uint64_t*>(hashes.get());
  auto* stats_out = static_cast<StatsPartial*>(partials.get());
  auto* combine = static_cast<unsigned char*>(combine_input.get());
  auto* out = static_cast<CombineResults*>(result.get());
  auto launched = []() -> absl::Status {
    LS_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  };
  for (const size_t bytes : {size_t{1} << 20, kMaxBytes}) {
    const uint64_t leaves = NumDeviceLeaves(bytes);
    const int64_t n = static_cast<int64_t>(leaves);
    const dim3 thread_grid(static_cast<unsigned>(BlocksFor(config, n)));
    const dim3 warp_grid(
        static_cast<unsigned>(BlocksFor(config, n * kWarpSize)));
    static_assert(kLeafBlockWarps == 8, "the rows below say 8 warps");
    const dim3 leaf_block_grid(
        static_cast<unsigned>(LeafBlockGrid(config, leaves)));
    LS_ASSIGN_OR_RETURN(
        const float copy_ms, TimeDeviceWorkMs(reps, [&]() {
          LS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst.get(), src.get(), bytes,
                                                  cudaMemcpyDeviceToDevice, 0));
          return absl::OkStatus();
        }));
    const double gb = static_cast<double>(bytes) / 1e9;
    report += absl::StrFormat(
        "d2d_copy %d MiB: %.3f ms, %.1f GB/s copied (%.1f GB/s read+write)\n",
        bytes >> 20, copy_ms, gb / (copy_ms * 1e-3), 2 * gb / (copy_ms * 1e-3));
    struct Row {
      const char* name;
      const char* what;
      std::function<void()> enqueue;
    };
    // The leaf kernel the fingerprints run for this many leaves, and the
    // other one.
    const int chosen = LeafBlocksPerLoad(leaves);
    const int other = chosen == kLeafBlocksPerLoad ? kFewLeavesBlocksPerLoad
                                                   : kLeafBlocksPerLoad;
    const std::string chosen_what =
        absl::StrFormat("warp per leaf, %d KiB per load", chosen);
    const std::string other_what =
        absl::StrFormat("warp per leaf, %d KiB per load, not chosen", other);
    const std::string chosen_stats =
        "float32, hash + statistics, " + chosen_what;
    const std::string other_stats = "float32, hash + statistics, " + other_what;
    const Row rows[] = {
        {"device_hash", chosen_what.c_str(),
         [&]() {
           LaunchLeafHashWarp(chosen, warp_grid, block, in, bytes, leaf_out,
                              nullptr, nullptr);
         }},
        {"device_hash", other_what.c_str(),
         [&]() {
           LaunchLeafHashWarp(other, warp_grid, block, in, bytes, leaf_out,
                              nullptr, nullptr);
         }},
        {"device_hash", "block of 8 warps per leaf",
         [&]() {
           LeafHashBlockKernel<<<leaf_block_grid, kLeafBlockThreads>>>(
               in, bytes, leaf_out, nullptr, nullptr, NoHeader(), nullptr,
               nullptr);
         }},
        {"device_hash", "thread per leaf",
         [&]() {
           LeafHashKernel<<<thread_grid, block>>>(in, bytes, leaf_out);
         }},
        {"device_hash_stats", chosen_stats.c_str(),
         [&]() {
           LaunchLeafHashWarp(chosen, warp_grid, block, in, bytes, leaf_out,
                              stats_out, nullptr);
         }},
        {"device_hash_stats", other_stats.c_str(),
         [&]() {
           LaunchLeafHashWarp(other, warp_grid, block, in, bytes, leaf_out,
                              stats_out, nullptr);
         }},
        {"device_hash_stats",
         "float32, hash + statistics, block of 8 warps per leaf",
         [&]() {
           LeafHashBlockKernel<<<leaf_block_grid, kLeafBlockThreads>>>(
               in, bytes, leaf_out, stats_out, nullptr, NoHeader(), nullptr,
               nullptr);
         }},
        {"device_hash_stats", "float32, thread per leaf, hash + statistics",
         [&]() {
           LeafHashAndStatsKernel<<<thread_grid, block>>>(in, bytes, leaf_out,
                                                          stats_out);
         }},
        {"device_fingerprint_stats",
         "float32, warp per leaf, then the two-warp combination",
         [&]() {
           LaunchLeafHashWarp(chosen, warp_grid, block, in, bytes, leaf_out,
                              stats_out, combine + kHeader);
           CombineLeavesWarpKernel<<<1, kCombineThreads>>>(
               header, combine, kHeader + 8 * leaves, leaves, stats_out,
               &out->hash, &out->total);
         }},
        {"device_fingerprint_stats",
         "float32, block of 8 warps per leaf, then the two-warp combination",
         [&]() {
           LeafHashBlockKernel<<<leaf_block_grid, kLeafBlockThreads>>>(
               in, bytes, leaf_out, stats_out, combine + kHeader, NoHeader(),
               nullptr, nullptr);
           CombineLeavesWarpKernel<<<1, kCombineThreads>>>(
               header, combine, kHeader + 8 * leaves, leaves, stats_out,
               &out->hash, &out->total);
         }},
    };
    for (const Row& row : rows) {
      LS_ASSIGN_OR_RETURN(const float ms, TimeDeviceWorkMs(reps, [&]() {
                            row.enqueue();
                            return launched();
                          }));
      report += absl::StrFormat(
          "%s %d MiB (%d leaves, %s): %.3f ms, %.1f GB/s read, %.2f of "
          "d2d_copy\n",
          row.name, bytes >> 20, leaves, row.what, ms, gb / (ms * 1e-3),
          copy_ms / ms);
    }
  }
  return report;
}

}  // namespace lockstep::kernels::cuda
