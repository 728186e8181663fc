// Discovers CUDA devices. Built by nvcc where the CUDA toolkit was found at
// build time; elsewhere (or with --define=cuda=off) a fallback reports
// "built without CUDA". Never fails: problems are described in `error`.
#ifndef LOCKSTEP_WORKER_GPU_PROBE_H_
#define LOCKSTEP_WORKER_GPU_PROBE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::worker {

struct GpuDevice {
  int ordinal = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  std::string uuid;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  int64_t memory_bytes = 0;
  // A MIG slice: the driver reports its parent's name with fewer SMs.
  bool mig = false;
};

struct GpuProbeResult {
  bool built_with_cuda = false;
  std::vector<GpuDevice> devices;
  // Why `devices` is empty: the CUDA error text (e.g. "cudaGetDeviceCount:
  // no CUDA-capable device is detected (cudaErrorNoDevice)") or "built
  // without CUDA".
  std::string error;
  int driver_version = 0;   // cudaDriverGetVersion; 0 without a driver.
  int runtime_version = 0;  // CUDA runtime the worker was built with.
  // Versions of the libraries loaded at run time, "major.minor.patch"
  // (cublasGetProperty, cudnnGetVersion); empty without a device.
  std::string cublas_version;
  std::string cudnn_version;
};

GpuProbeResult ProbeGpus();

// Runs a canonical reduction on device `ordinal` and compares its bits with
// the host's. Returns "" on agreement, otherwise a description.
std::string GpuCanonicalSmokeTest(int ordinal);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_GPU_PROBE_H_
