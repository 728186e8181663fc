// DeviceBuffer: one cudaMalloc'd region, freed on destruction. CUDA code
// only (included by .cu files; needs the CUDA runtime headers).
//
// The region is at least 16 bytes, so that no pointer handed to a kernel or
// a library is null. Free errors are ignored: a failed free has nothing to
// undo, and a sticky error is reported by the next checked call.
#ifndef LOCKSTEP_KERNELS_CUDA_DEVICE_BUFFER_H_
#define LOCKSTEP_KERNELS_CUDA_DEVICE_BUFFER_H_

#include <cuda_runtime.h>

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"

namespace lockstep::kernels::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  absl::Status Allocate(size_t bytes) {
    LS_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr_, bytes < 16 ? 16 : bytes));
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
};

}  // namespace lockstep::kernels::cuda

#endif  // LOCKSTEP_KERNELS_CUDA_DEVICE_BUFFER_H_
