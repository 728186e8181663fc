// Block-size limits shared by every CUDA kernel of the project
// (kernels/cuda and kernels/cudnn).
//
// Each __global__ function is declared __launch_bounds__(kMaxThreadsPerBlock),
// so nvcc budgets registers for blocks of that many threads, and every
// launch uses blocks of a multiple of kWarpSize threads, at most
// kMaxThreadsPerBlock (cuda::CheckDeviceLaunchConfig, plan.h, enforces it
// before any CUDA call). A launch with more threads than a kernel's bounds
// would fail with cudaErrorInvalidConfiguration, or, without bounds, spill
// registers silently.
#ifndef LOCKSTEP_KERNELS_CUDA_LAUNCH_LIMITS_H_
#define LOCKSTEP_KERNELS_CUDA_LAUNCH_LIMITS_H_

namespace lockstep::kernels::cuda {

// Threads of a warp; block sizes are multiples of it.
inline constexpr int kWarpSize = 32;
// The largest block any launch uses, and every kernel's __launch_bounds__.
inline constexpr int kMaxThreadsPerBlock = 256;

}  // namespace lockstep::kernels::cuda

#endif  // LOCKSTEP_KERNELS_CUDA_LAUNCH_LIMITS_H_
