// DeviceBuffer: one region of device memory, freed on destruction. CUDA
// code only (included by .cu files; needs the CUDA runtime headers).
//
// Where the device supports memory pools (every GPU CUDA 13 runs on, in
// practice), the region comes from the device's default pool in stream
// order on the legacy default stream (cudaMallocAsync / cudaFreeAsync),
// and the pool keeps freed memory for the next allocation: a kernel call's
// scratch or a fingerprint's buffers cost neither a driver allocation nor a
// device synchronization. The legacy default stream orders the frees after
// every launch and copy that used the region. The pool gives its memory
// back to the driver only when the process ends. Elsewhere plain
// cudaMalloc / cudaFree.
//
// The region is at least 16 bytes, so that no pointer handed to a kernel or
// a library is null. Free errors are ignored: a failed free has nothing to
// undo, and a sticky error is reported by the next checked call.
#ifndef LOCKSTEP_KERNELS_CUDA_DEVICE_BUFFER_H_
#define LOCKSTEP_KERNELS_CUDA_DEVICE_BUFFER_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"

namespace lockstep::kernels::cuda {

// Whether DeviceBuffer allocates from device 0's default memory pool; the
// first call sets the pool to keep freed memory (release threshold: all).
inline bool StreamOrderedAllocation() {
  static const bool use = [] {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    int pools = 0;
    if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported,
                               device) != cudaSuccess ||
        pools == 0) {
      return false;
    }
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess) {
      return false;
    }
    uint64_t keep = ~uint64_t{0};
    return cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                                   &keep) == cudaSuccess;
  }();
  return use;
}

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ == nullptr) return;
    if (async_) {
      cudaFreeAsync(ptr_, stream_);
    } else {
      cudaFree(ptr_);
    }
  }
  // From the pool in the order of `stream` (the legacy default stream by
  // default), and freed in that stream's order: every use of the region on
  // another stream must be ordered before the free by the caller (an event
  // that `stream` waits for).
  absl::Status Allocate(size_t bytes, cudaStream_t stream = nullptr) {
    const size_t n = bytes < 16 ? 16 : bytes;
    if (StreamOrderedAllocation()) {
      LS_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&ptr_, n, stream));
      async_ = true;
      stream_ = stream;
    } else {
      LS_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr_, n));
    }
    return absl::OkStatus();
  }
  // Allocates room for `host` and copies it in.
  absl::Status CopyIn(absl::Span<const float> host) {
    LS_RETURN_IF_ERROR(Allocate(host.size() * sizeof(float)));
    if (!host.empty()) {
      LS_CUDA_RETURN_IF_ERROR(cudaMemcpy(ptr_, host.data(),
                                         host.size() * sizeof(float),
                                         cudaMemcpyHostToDevice));
    }
    return absl::OkStatus();
  }
  // Allocates `bytes` and copies them in (non-float data: int32 ids).
  absl::Status CopyInBytes(const void* host, size_t bytes) {
    LS_RETURN_IF_ERROR(Allocate(bytes));
    if (bytes > 0) {
      LS_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice));
    }
    return absl::OkStatus();
  }
  // Allocates room for `n` floats, all +0.0f.
  absl::Status Zeros(size_t n) {
    LS_RETURN_IF_ERROR(Allocate(n * sizeof(float)));
    if (n > 0) LS_CUDA_RETURN_IF_ERROR(cudaMemset(ptr_, 0, n * sizeof(float)));
    return absl::OkStatus();
  }
  float* f() const { return static_cast<float*>(ptr_); }
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  bool async_ = false;             // from the pool: freed with cudaFreeAsync
  cudaStream_t stream_ = nullptr;  // ... in this stream's order
};

}  // namespace lockstep::kernels::cuda

#endif  // LOCKSTEP_KERNELS_CUDA_DEVICE_BUFFER_H_
