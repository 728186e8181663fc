// Scratch memory of the CPU kernels, kept between calls.
//
// The GEMM packs its operands and the convolutions lower theirs into
// buffers of tens of MiB (a ResNet-18 step at batch 32 lowers about 2 GB).
// Freshly allocated, each such buffer is mapped and faulted in page by page
// (zeroed by the kernel) on every call; a ScratchFloats instead takes a
// buffer its thread used before and gives it back when destroyed. The
// contents are left uninitialised: every caller writes each element before
// reading it, so results do not depend on what a buffer held.
//
// Each thread keeps at most kScratchCachedBuffers buffers and
// kScratchCachedBytes bytes; past that the smallest are freed. A thread's
// buffers are freed when it exits.
//
// Thread-compatible: a ScratchFloats is used and destroyed on the thread
// that made it.
#ifndef LOCKSTEP_KERNELS_CPU_SCRATCH_H_
#define LOCKSTEP_KERNELS_CPU_SCRATCH_H_

#include <cstddef>
#include <cstdint>

namespace lockstep::kernels {

inline constexpr int kScratchCachedBuffers = 8;
inline constexpr size_t kScratchCachedBytes = size_t{1} << 30;

class ScratchFloats {
 public:
  // At least `count` floats (one when `count` <= 0), 64-byte aligned.
  explicit ScratchFloats(int64_t count);
  ~ScratchFloats();
  ScratchFloats(const ScratchFloats&) = delete;
  ScratchFloats& operator=(const ScratchFloats&) = delete;

  float* get() const { return p_; }
  float* data() const { return p_; }

 private:
  float* p_ = nullptr;
  size_t bytes_ = 0;
};

// Tests: while on, every buffer handed out is first filled with a quiet NaN
// pattern, so that a kernel reading an element it did not write gives
// different bits. Process-wide.
void SetScratchPoisonForTesting(bool on);

// Bytes this thread keeps cached (for tests).
size_t ScratchCachedBytesForTesting();
// Buffers this thread allocated anew so far (for tests).
int64_t ScratchAllocationsForTesting();

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_CPU_SCRATCH_H_
