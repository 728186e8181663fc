// GPU benchmark of the CANONICAL CUDA backend: canonical GEMM GFLOP/s and
// device fingerprint hashing GB/s next to a device-to-device copy.
//
//   bazel run //kernels/cuda:gpu_bench
//
// Without a usable device prints "no GPU: <cuda error>" and exits 0, so it
// can run anywhere.
#include <cstdio>
#include <string>

#include "kernels/cuda/cuda_runtime.h"

int main() {
  namespace cuda = ::lockstep::kernels::cuda;
  const absl::Status device = cuda::CudaDeviceStatus();
  if (!device.ok()) {
    std::printf("no GPU: %s\n", std::string(device.message()).c_str());
    return 0;
  }
  const absl::StatusOr<std::string> report = cuda::RunGpuBenchmarks();
  if (!report.ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", report.status().ToString().c_str());
    return 1;
  }
  std::printf("%s", report->c_str());
  return 0;
}
