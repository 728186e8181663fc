// The kernels a worker's run process registers.
//
// Always: the CPU backend's CANONICAL, DETERMINISTIC and DEFAULT kernels
// (kernels/cpu/cpu_backend.h). Also, when this binary was built with CUDA
// and a CUDA device is usable: the CUDA backend's CANONICAL kernels under
// backend "cuda" (kernels/cuda/cuda_backend.h); and when, besides, cuBLAS and
// cuDNN load (kernels/cudnn/vendor_libs.h, loaded at run time) the cuBLAS /
// cuDNN / atomic DETERMINISTIC and DEFAULT kernels
// (kernels/cudnn/vendor_backend.h).
// The executor (executor.h) then runs a job on "cuda" when its config asks for
// backend CUDA, or for ANY / unspecified and CUDA kernels are registered;
// otherwise on "cpu".
#ifndef LOCKSTEP_WORKER_EXEC_WORKER_KERNELS_H_
#define LOCKSTEP_WORKER_EXEC_WORKER_KERNELS_H_

#include <string>

#include "absl/status/status.h"
#include "kernels/registry.h"

namespace lockstep::worker {

struct WorkerKernels {
  bool cuda = false;      // CUDA kernels were registered
  std::string cuda_note;  // why not, when cuda is false
  // The vendor-library kernels were registered (implies cuda).
  bool vendor = false;
  // Why not, when cuda is true and vendor false: VendorLibrariesStatus's
  // message, e.g. "cuDNN not loaded: libcudnn.so.9: cannot open ...".
  std::string vendor_note;
};

// Registers the worker's kernels into an empty registry. Errors only for
// registration conflicts (a programming error); an absent GPU is not an
// error (see WorkerKernels::cuda_note).
absl::StatusOr<WorkerKernels> RegisterWorkerKernels(
    kernels::Registry* registry);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_EXEC_WORKER_KERNELS_H_
