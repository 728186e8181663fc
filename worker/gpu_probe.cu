#include <cublas_api.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/canonical/reduce.h"
#include "kernels/cuda/cuda_version.h"
#include "kernels/cudnn/vendor_libs.h"
#include "worker/gpu_probe.h"

namespace lockstep::worker {
namespace {

std::string CudaError(const char* call, cudaError_t err) {
  return std::string(call) + ": " + cudaGetErrorString(err) + " (" +
         cudaGetErrorName(err) + ")";
}

std::string FormatUuid(const cudaUUID_t& uuid) {
  const unsigned char* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char out[64];
  std::snprintf(out, sizeof(out),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
                "%02x%02x%02x%02x%02x%02x",
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
                b[10], b[11], b[12], b[13], b[14], b[15]);
  return out;
}

// cuBLAS as loaded at run time ("13.0.2"), not the header's version.
std::string LoadedCublasVersion() {
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS) {
    return "";
  }
  return std::to_string(major) + "." + std::to_string(minor) + "." +
         std::to_string(patch);
}

// cuDNN as loaded at run time: cudnnGetVersion() is
// major * 10000 + minor * 100 + patch for cuDNN 9.
std::string LoadedCudnnVersion() {
  const size_t v = cudnnGetVersion();
  if (v == 0) return "";
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) +
         "." + std::to_string(v % 100);
}

// Whether CUDA device `ordinal` is a MIG slice: CUDA_VISIBLE_DEVICES names
// MIG instances, or NVML (loaded only if the driver ships it) reports MIG
// mode enabled on the physical GPU at the device's PCI address (CUDA then
// only sees MIG instances of that GPU).
bool IsMigDevice(int ordinal) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr && std::strstr(visible, "MIG-") != nullptr) {
    return true;
  }
  char bus[64] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), ordinal) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr) return false;
  using InitFn = int (*)();
  using ByBusFn = int (*)(const char*, void**);
  using MigModeFn = int (*)(void*, unsigned int*, unsigned int*);
  auto init = reinterpret_cast<InitFn>(dlsym(nvml, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<InitFn>(dlsym(nvml, "nvmlShutdown"));
  auto by_bus = reinterpret_cast<ByBusFn>(
      dlsym(nvml, "nvmlDeviceGetHandleByPciBusId_v2"));
  auto mig_mode =
      reinterpret_cast<MigModeFn>(dlsym(nvml, "nvmlDeviceGetMigMode"));
  bool mig = false;
  if (init != nullptr && shutdown != nullptr && by_bus != nullptr &&
      mig_mode != nullptr && init() == 0) {
    void* device = nullptr;
    unsigned int current = 0, pending = 0;
    // NVML_SUCCESS is 0; NVML_DEVICE_MIG_ENABLE is 1.
    if (by_bus(bus, &device) == 0 &&
        mig_mode(device, &current, &pending) == 0) {
      mig = current == 1;
    }
    shutdown();
  }
  dlclose(nvml);
  return mig;
}

__global__ void CanonicalSumKernel(const float* x, int64_t n, float* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *out = lockstep::canonical::CanonicalSum(x, n, 1);
  }
}

// "no NVIDIA driver: <the loader's message>" when the driver library does
// not load, "" otherwise. The CUDA runtime loads the same library itself;
// this only recovers the reason it reports as cudaErrorInsufficientDriver.
std::string DriverLibraryProblem() {
  dlerror();
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda != nullptr) {
    dlclose(cuda);
    return "";
  }
  const char* why = dlerror();
  return std::string("no NVIDIA driver: ") +
         (why != nullptr ? why : "libcuda.so.1 not loadable");
}

}  // namespace

GpuProbeResult ProbeGpus() {
  GpuProbeResult r;
  r.built_with_cuda = true;
  r.runtime_version = CUDART_VERSION;
  const absl::Status vendor = kernels::vendor::VendorLibrariesStatus();
  if (!vendor.ok()) r.vendor_libraries_error = std::string(vendor.message());
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess) r.driver_version = driver;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    r.error = CudaError("cudaGetDeviceCount", err);
    cudaGetLastError();  // clear the non-sticky error
    if (r.driver_version == 0) {
      const std::string missing = DriverLibraryProblem();
      if (!missing.empty()) r.error = missing;
    } else if (std::string old = kernels::cuda::DriverVersionProblem(
                   r.driver_version, r.runtime_version);
               !old.empty()) {
      r.error = old;
    }
    return r;
  }
  if (count == 0) {
    r.error = "cudaGetDeviceCount: 0 devices";
    return r;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    err = cudaGetDeviceProperties(&prop, i);
    if (err != cudaSuccess) {
      r.error = CudaError("cudaGetDeviceProperties", err);
      continue;
    }
    GpuDevice d;
    d.ordinal = i;
    d.name = prop.name;
    d.cc_major = prop.major;
    d.cc_minor = prop.minor;
    d.sm_count = prop.multiProcessorCount;
    d.uuid = FormatUuid(prop.uuid);
    d.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    d.mig = IsMigDevice(i);
    r.devices.push_back(d);
  }
  if (!r.devices.empty() && vendor.ok()) {
    r.cublas_version = LoadedCublasVersion();
    r.cudnn_version = LoadedCudnnVersion();
  }
  return r;
}

std::string GpuCanonicalSmokeTest(int ordinal) {
  constexpr int64_t kN = 1000;  // four chunks: exercises chains and the tree
  float host[kN];
  for (int64_t i = 0; i < kN; ++i) {
    host[i] = 1.0f / static_cast<float>(i + 1) * ((i % 3) ? 1.0f : -1.0f);
  }
  const float expected = lockstep::canonical::CanonicalSum(host, kN, 1);
  cudaError_t err = cudaSetDevice(ordinal);
  if (err != cudaSuccess) return CudaError("cudaSetDevice", err);
  float* dx = nullptr;
  float* dout = nullptr;
  if ((err = cudaMalloc(&dx, sizeof(host))) != cudaSuccess) {
    return CudaError("cudaMalloc", err);
  }
  if ((err = cudaMalloc(&dout, sizeof(float))) != cudaSuccess) {
    cudaFree(dx);
    return CudaError("cudaMalloc", err);
  }
  std::string result;
  float got = 0.0f;
  if ((err = cudaMemcpy(dx, host, sizeof(host), cudaMemcpyHostToDevice)) !=
      cudaSuccess) {
    result = CudaError("cudaMemcpy", err);
  } else {
    CanonicalSumKernel<<<1, 32>>>(dx, kN, dout);
    if ((err = cudaGetLastError()) != cudaSuccess ||
        (err = cudaMemcpy(&got, dout, sizeof(float), cudaMemcpyDeviceToHost)) !=
            cudaSuccess) {
      result = CudaError("CanonicalSumKernel", err);
    } else {
      uint32_t a, b;
      std::memcpy(&a, &expected, 4);
      std::memcpy(&b, &got, 4);
      if (a != b) {
        char buf[128];
        std::snprintf(buf, sizeof(buf),
                      "canonical sum differs: host 0x%08x, device 0x%08x", a,
                      b);
        result = buf;
      }
    }
  }
  cudaFree(dx);
  cudaFree(dout);
  return result;
}

}  // namespace lockstep::worker
