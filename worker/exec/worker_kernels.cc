#include "worker/exec/worker_kernels.h"

#include "common/status_macros.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cudnn/vendor_backend.h"
#include "kernels/cudnn/vendor_libs.h"

namespace lockstep::worker {

absl::StatusOr<WorkerKernels> RegisterWorkerKernels(
    kernels::Registry* registry) {
  LS_RETURN_IF_ERROR(kernels::RegisterCpuCanonicalKernels(registry));
  LS_RETURN_IF_ERROR(
      kernels::RegisterCpuDeterministicAndDefaultKernels(registry));
  WorkerKernels out;
  const absl::Status device = kernels::cuda::CudaDeviceStatus();
  if (!device.ok()) {
    out.cuda_note = std::string(device.message());
    return out;
  }
  LS_RETURN_IF_ERROR(kernels::RegisterCudaCanonicalKernels(registry));
  out.cuda = true;
  const absl::Status vendor = kernels::vendor::VendorLibrariesStatus();
  if (!vendor.ok()) {
    out.vendor_note = std::string(vendor.message());
    return out;
  }
  LS_RETURN_IF_ERROR(kernels::RegisterCudaVendorKernels(registry));
  out.vendor = true;
  return out;
}

}  // namespace lockstep::worker
