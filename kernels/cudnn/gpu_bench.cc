// GPU benchmark: the device hashing report (kernels/cuda/cuda_runtime.h
// RunGpuBenchmarks: leaf hashing and hashing with statistics in GB/s next to
// a device-to-device copy) and the cost-of-determinism report
// (vendor_runtime.h RunVendorBenchmarks: CANONICAL CUDA kernels vs
// DETERMINISTIC and DEFAULT cuBLAS / cuDNN in GFLOP/s, GEMM and conv2d).
//
//   bazel run -c opt //kernels/cudnn:gpu_bench [-- --reps=N]
//
// Every figure is the best of N timed runs (default: 5 for hashing, 10 for
// the GFLOP/s table) after a warm-up run. Without a usable device prints
// "no GPU: <reason>" and exits 0, so it can run anywhere; exits 1 when a
// report fails (the other is still printed) or on a bad flag.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cudnn/vendor_runtime.h"

int main(int argc, char** argv) {
  namespace cuda = ::lockstep::kernels::cuda;
  namespace vendor = ::lockstep::kernels::vendor;
  int reps = 0;  // 0: each report's default
  for (int i = 1; i < argc; ++i) {
    constexpr char kReps[] = "--reps=";
    if (std::strncmp(argv[i], kReps, sizeof(kReps) - 1) == 0) {
      const char* value = argv[i] + sizeof(kReps) - 1;
      char* end = nullptr;
      const int64_t parsed = std::strtoll(value, &end, 10);
      if (*value != '\0' && *end == '\0' && parsed >= 1 && parsed <= 1000000) {
        reps = static_cast<int>(parsed);
        continue;
      }
    }
    std::fprintf(stderr,
                 "usage: gpu_bench [--reps=N] (1 <= N <= 1000000); got %s\n",
                 argv[i]);
    return 1;
  }
  const absl::Status device = cuda::CudaDeviceStatus();
  if (!device.ok()) {
    std::printf("no GPU: %s\n", std::string(device.message()).c_str());
    return 0;
  }
  int rc = 0;
  const absl::StatusOr<std::string> hashing =
      reps > 0 ? cuda::RunGpuBenchmarks(reps) : cuda::RunGpuBenchmarks();
  if (hashing.ok()) {
    std::printf("%s\n", hashing->c_str());
  } else {
    std::fprintf(stderr, "gpu_bench: device hashing: %s\n",
                 hashing.status().ToString().c_str());
    rc = 1;
  }
  std::fflush(stdout);
  const absl::StatusOr<std::string> determinism =
      reps > 0 ? vendor::RunVendorBenchmarks(reps)
               : vendor::RunVendorBenchmarks();
  if (determinism.ok()) {
    std::printf("%s", determinism->c_str());
  } else {
    std::fprintf(stderr, "gpu_bench: cost of determinism: %s\n",
                 determinism.status().ToString().c_str());
    rc = 1;
  }
  return rc;
}
