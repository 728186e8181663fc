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
  // Why `devices` is empty, in one line: "no NVIDIA driver: libcuda.so.1:
  // cannot open shared object file: ...", "NVIDIA driver too old: it supports
  // CUDA 12.4, this binary needs CUDA 13.0 or newer (upgrade the driver)",
  // otherwise the CUDA error text (e.g. "cudaGetDeviceCount: no CUDA-capable
  // device is detected (cudaErrorNoDevice)"), or "built without CUDA".
  std::string error;
  // Why cuBLAS / cuDNN are unusable (kernels/cudnn/vendor_libs.h
  // VendorLibrariesStatus), e.g. "cuDNN not loaded: libcudnn.so.9: cannot
  // open shared object file: No such file or directory"; "" when both
  // loaded. The vendor kernels are registered only when it is "".
  std::string vendor_libraries_error;
  int driver_version = 0;   // cudaDriverGetVersion; 0 without a driver.
  int runtime_version = 0;  // CUDA runtime the worker was built with.
  // Versions of the libraries loaded at run time, "major.minor.patch"
  // (cublasGetProperty, cudnnGetVersion); empty without a device or when
  // the libraries did not load.
  std::string cublas_version;
  std::string cudnn_version;
};

// Device discovery: cudaDriverGetVersion, cudaGetDeviceCount,
// cudaGetDeviceProperties and cudaDeviceGetPCIBusId, none of which creates a
// CUDA context, so a caller (the worker daemon) holds no GPU memory and does
// not lock its run processes out of a GPU in EXCLUSIVE_PROCESS mode.
GpuProbeResult ProbeGpus();

// Runs a canonical reduction on device `ordinal` and compares its bits with
// the host's. Returns "" on agreement, otherwise a description. Creates a
// CUDA context: call it only in a child process (the selftest's), never in
// the daemon.
std::string GpuCanonicalSmokeTest(int ordinal);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_GPU_PROBE_H_
