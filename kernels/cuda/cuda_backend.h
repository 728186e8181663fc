// The CUDA backend of CANONICAL mode.
//
// Every kernel takes the usual host Tensors (kernels/backend.h), validates
// the call exactly as the CPU backend does (plan.h), copies the inputs to
// device 0, runs the canonical per-thread bodies (thread_bodies.h) and
// copies the outputs back (cuda_runtime.h). This is the correctness path:
// its results are bit-identical to the CPU backend's, its speed is bounded
// by the copies. Registered under (op, Mode::kCanonical, "canonical",
// "cuda").
//
// A kernel called without a usable device returns FAILED_PRECONDITION
// ("no usable CUDA device: cudaGetDeviceCount failed at ...: ..."); after a
// sticky device error, FAILED_PRECONDITION "device unusable: ...".
//
// Thread-safety: as the CPU backend's kernels (concurrent calls must not
// share output Tensors).
#ifndef LOCKSTEP_KERNELS_CUDA_CUDA_BACKEND_H_
#define LOCKSTEP_KERNELS_CUDA_CUDA_BACKEND_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"
#include "kernels/registry.h"

namespace lockstep::kernels {

// Registers the CANONICAL CUDA kernel of every op in CudaCanonicalOpNames()
// (plan.h: AllOpNames() and the graph data ops of op set v3). Needs no
// device (kernels check for one when called). In a build without CUDA
// registers nothing and returns FAILED_PRECONDITION "cuda backend: built
// without CUDA". ALREADY_EXISTS if one of the keys is taken.
absl::Status RegisterCudaCanonicalKernels(Registry* registry);

class CudaBackend final : public Backend {
 public:
  absl::string_view name() const override { return kCudaBackendName; }
  absl::Status RegisterKernels(Registry* registry) const override {
    return RegisterCudaCanonicalKernels(registry);
  }
};

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_CUDA_CUDA_BACKEND_H_
