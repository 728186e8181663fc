// CUDA version numbers (cudaDriverGetVersion, CUDART_VERSION) in words, and
// whether a driver can run a runtime. Plain C++: no CUDA headers needed.
#ifndef LOCKSTEP_KERNELS_CUDA_CUDA_VERSION_H_
#define LOCKSTEP_KERNELS_CUDA_CUDA_VERSION_H_

#include <string>

namespace lockstep::kernels::cuda {

// "" when a driver reporting `driver_version` (cudaDriverGetVersion, e.g.
// 12040; 0 without a driver) can run a runtime of `runtime_version`
// (CUDART_VERSION, e.g. 13000): a driver of the runtime's major version or
// newer (CUDA minor version compatibility). Otherwise one line naming both
// versions and what to do.
std::string DriverVersionProblem(int driver_version, int runtime_version);

// 12040 -> "12.4".
std::string CudaVersionString(int version);

}  // namespace lockstep::kernels::cuda

#endif  // LOCKSTEP_KERNELS_CUDA_CUDA_VERSION_H_
