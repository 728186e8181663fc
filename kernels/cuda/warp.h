// Warp-cooperative bodies: code that runs on the 32 lanes of a warp and
// exchanges values between them, written once for the device and for the
// host emulation.
//
// A body is a function template on a warp type W that provides
//
//   W::Lane                 the per-lane state (a struct of the body's)
//   w.Each(f)               runs f(lane, state) for every lane of the warp
//   w.XorCombine(m, get, op)
//                           for every lane at once: get(state) :=
//                           op(get(state), get(state of lane ^ m)); every
//                           lane takes part (call it in warp-uniform
//                           control flow)
//   w.Sync()                what a lane wrote to memory before the call
//                           (shared memory, say) is visible to every lane
//                           after it; a body that passes values between
//                           lanes through memory calls it between the
//                           writing and the reading Each, and again before
//                           the memory is written anew (every lane takes
//                           part: warp-uniform control flow)
//
// DeviceWarp (nvcc device code): one thread is one lane; its state lives in
// registers, XorCombine is __shfl_xor_sync and Sync __syncwarp over the
// full warp. EmulatedWarp (host): the 32 states in an array; Each runs f
// lane after lane, XorCombine snapshots the 32 values and combines each
// with its partner's, and Sync has nothing to order. A body whose lanes
// talk only through XorCombine, or through memory with Sync between the
// writes and the reads, therefore computes the same values in both, which
// is how the warp bodies are tested on machines without a GPU
// (kernels/cuda/leaf_hash_test.cc).
//
// A block of warps runs a body in phases with a barrier between them:
//
//   block.Phase(f)          runs f(w, warp) on every warp of the block (w
//                           that warp's W, warp its index), then waits
//                           until every warp of the block has finished it;
//                           what a phase wrote to memory is visible to
//                           every warp in the next phase
//
// DeviceBlockWarp (nvcc): the calling thread's warp, __syncthreads as the
// barrier; EmulatedBlock (host): the warps one after another, each to the
// end of the phase. Warps of one block that talk only through memory
// written in one phase and read in a later one compute the same values in
// both. Every thread of the block calls Phase the same number of times
// (block-uniform control flow).
//
// Thread-safety: a warp object belongs to one warp (device) or one host
// thread.
#ifndef LOCKSTEP_KERNELS_CUDA_WARP_H_
#define LOCKSTEP_KERNELS_CUDA_WARP_H_

#include <cstdint>
#include <memory>
#include <type_traits>

#include "kernels/canonical/hd.h"
#include "kernels/cuda/launch_limits.h"

namespace lockstep::kernels::cuda {

#if defined(__CUDACC__)
template <class LaneState>
struct DeviceWarp {
  using Lane = LaneState;
  int lane = 0;  // threadIdx.x % kWarpSize
  LaneState state;

  template <class F>
  LS_HD_INLINE void Each(F&& f) {
    f(lane, state);
  }

  template <class Get, class Op>
  LS_HD_INLINE void XorCombine(int mask, Get&& get, Op&& op) {
#if defined(__CUDA_ARCH__)
    auto& value = get(state);
    value = op(value, ShuffleXor(value, mask));
#endif
  }

  LS_HD_INLINE void Sync() {
#if defined(__CUDA_ARCH__)
    __syncwarp();
#endif
  }

 private:
#if defined(__CUDA_ARCH__)
  __device__ __forceinline__ static uint64_t ShuffleXor(uint64_t v, int m) {
    return __shfl_xor_sync(0xffffffffU, static_cast<unsigned long long>(v), m);
  }
  __device__ __forceinline__ static double ShuffleXor(double v, int m) {
    return __shfl_xor_sync(0xffffffffU, v, m);
  }
#endif
};

template <class LaneState>
struct DeviceBlockWarp {
  DeviceWarp<LaneState> w;
  int warp = 0;  // threadIdx.x / kWarpSize

  template <class F>
  LS_HD_INLINE void Phase(F&& f) {
    f(w, warp);
#if defined(__CUDA_ARCH__)
    __syncthreads();
#endif
  }
};
#endif  // __CUDACC__

#if !defined(__CUDA_ARCH__)
template <class LaneState>
struct EmulatedWarp {
  using Lane = LaneState;
  LaneState state[kWarpSize];

  template <class F>
  void Each(F&& f) {
    for (int lane = 0; lane < kWarpSize; ++lane) f(lane, state[lane]);
  }

  template <class Get, class Op>
  void XorCombine(int mask, Get&& get, Op&& op) {
    using T = typename std::remove_reference<decltype(get(state[0]))>::type;
    T before[kWarpSize];
    for (int lane = 0; lane < kWarpSize; ++lane)
      before[lane] = get(state[lane]);
    for (int lane = 0; lane < kWarpSize; ++lane) {
      get(state[lane]) = op(before[lane], before[lane ^ mask]);
    }
  }

  // Each runs every lane to the end before it returns: nothing to order.
  void Sync() {}
};

template <class LaneState, int kWarps>
struct EmulatedBlock {
  // On the heap: a warp's states are kWarpSize lane structs.
  std::unique_ptr<EmulatedWarp<LaneState>[]> warps {
    new EmulatedWarp<LaneState>[ kWarps ]
  };

  template <class F>
  void Phase(F&& f) {
    for (int i = 0; i < kWarps; ++i) f(warps[i], i);
  }
};
#endif  // !__CUDA_ARCH__

}  // namespace lockstep::kernels::cuda

#endif  // LOCKSTEP_KERNELS_CUDA_WARP_H_
