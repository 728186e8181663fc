// The CUDA runtime of a build without CUDA (no toolkit at build time, or
// --define=cuda=off): every entry point reports "built without CUDA".
#include "kernels/cuda/cuda_runtime.h"

namespace lockstep::kernels::cuda {
namespace {

absl::Status NoCuda() {
  return absl::FailedPreconditionError("cuda: built without CUDA");
}

}  // namespace

bool BuiltWithCuda() { return false; }

absl::Status CudaDeviceStatus() { return NoCuda(); }

PlanOptions DevicePlanOptions() { return PlanOptions(); }

absl::Status RunOnDevice(const DeviceCall&, const LaunchConfig&) {
  return NoCuda();
}

absl::Status LaunchOnDevice(const DeviceCall&, absl::Span<void* const>,
                            const LaunchConfig&) {
  return NoCuda();
}

absl::Status LaunchTiledGemmConfig(int, const canonical::BatchedMatMulShape&,
                                   const float*, const float*, float*, float*,
                                   int64_t) {
  return NoCuda();
}

absl::Status RunTiledGemmConfig(int, const canonical::BatchedMatMulShape&,
                                absl::Span<const float>,
                                absl::Span<const float>, absl::Span<float>,
                                int64_t) {
  return NoCuda();
}

absl::StatusOr<float> TimeDeviceWorkMs(int, absl::FunctionRef<absl::Status()>) {
  return NoCuda();
}

absl::Status DeviceLeafHashes(const void*, size_t, absl::Span<uint64_t>,
                              const LaunchConfig&) {
  return NoCuda();
}

absl::StatusOr<hash::Fingerprint> DeviceFingerprint(hash::DtypeCode,
                                                    absl::Span<const int64_t>,
                                                    const void*, size_t,
                                                    const LaunchConfig&) {
  return NoCuda();
}

absl::StatusOr<hash::FingerprintAndStatsResult> DeviceFingerprintAndStats(
    hash::DtypeCode, absl::Span<const int64_t>, const void*, size_t,
    const LaunchConfig&) {
  return NoCuda();
}

absl::StatusOr<std::string> RunGpuBenchmarks(int) { return NoCuda(); }

}  // namespace lockstep::kernels::cuda
