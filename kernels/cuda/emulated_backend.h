// A stand-in for the CUDA backend on machines without a GPU: every op of
// CudaCanonicalOpNames() registered under (op, CANONICAL, "canonical",
// "cuda") as a kernel that plans the call exactly as the CUDA kernel does
// (PlanCanonicalOp: the same validation) and runs it with RunEmulated, i.e.
// the device kernels' own per-thread bodies on an emulated grid of 3 blocks
// of 64 threads. For tests of what a CUDA job or a CUDA selftest row
// computes (kernel resolution, whole models, the selftest) without a
// device; the GPU suite runs the real kernels.
#ifndef LOCKSTEP_KERNELS_CUDA_EMULATED_BACKEND_H_
#define LOCKSTEP_KERNELS_CUDA_EMULATED_BACKEND_H_

#include "absl/status/status.h"
#include "kernels/registry.h"

namespace lockstep::kernels::cuda {

// ALREADY_EXISTS if one of the keys is taken (e.g. by the real CUDA
// kernels).
absl::Status RegisterEmulatedCudaKernels(Registry* registry);

}  // namespace lockstep::kernels::cuda

#endif  // LOCKSTEP_KERNELS_CUDA_EMULATED_BACKEND_H_
