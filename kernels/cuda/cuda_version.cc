#include "kernels/cuda/cuda_version.h"

namespace lockstep::kernels::cuda {

std::string CudaVersionString(int version) {
  return std::to_string(version / 1000) + "." +
         std::to_string(version % 1000 / 10);
}

std::string DriverVersionProblem(int driver_version, int runtime_version) {
  const int needed = runtime_version / 1000 * 1000;
  if (driver_version >= needed) return "";
  if (driver_version <= 0) {
    return "no NVIDIA driver: this binary needs one supporting CUDA " +
           CudaVersionString(needed) + " or newer";
  }
  return "NVIDIA driver too old: it supports CUDA " +
         CudaVersionString(driver_version) + ", this binary needs CUDA " +
         CudaVersionString(needed) + " or newer (upgrade the driver)";
}

}  // namespace lockstep::kernels::cuda
