#include "kernels/cpu/scratch.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace lockstep::kernels {
namespace {

struct Buffer {
  float* p;
  size_t bytes;
};

// One thread's free buffers.
class Cache {
 public:
  ~Cache() {
    for (const Buffer& b : free_) std::free(b.p);
  }

  // The smallest cached buffer of at least `bytes`, or a new one.
  Buffer Take(size_t bytes) {
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->bytes >= bytes &&
          (best == free_.end() || it->bytes < best->bytes)) {
        best = it;
      }
    }
    if (best != free_.end()) {
      Buffer b = *best;
      free_.erase(best);
      cached_bytes_ -= b.bytes;
      return b;
    }
    void* p = std::aligned_alloc(64, bytes);
    if (p == nullptr) throw std::bad_alloc();
    ++allocations_;
    return Buffer{static_cast<float*>(p), bytes};
  }

  void Give(Buffer b) {
    free_.push_back(b);
    cached_bytes_ += b.bytes;
    // Over the count: the smallest goes; over the bytes: the largest.
    while (static_cast<int>(free_.size()) > kScratchCachedBuffers ||
           cached_bytes_ > kScratchCachedBytes) {
      const bool by_count =
          static_cast<int>(free_.size()) > kScratchCachedBuffers;
      auto victim = std::min_element(
          free_.begin(), free_.end(),
          [by_count](const Buffer& x, const Buffer& y) {
            return by_count ? x.bytes < y.bytes : x.bytes > y.bytes;
          });
      cached_bytes_ -= victim->bytes;
      std::free(victim->p);
      free_.erase(victim);
    }
  }

  size_t cached_bytes() const { return cached_bytes_; }
  int64_t allocations() const { return allocations_; }

 private:
  std::vector<Buffer> free_;
  size_t cached_bytes_ = 0;
  int64_t allocations_ = 0;
};

std::atomic<bool> poison{false};

Cache& ThreadCache() {
  thread_local Cache cache;
  return cache;
}

}  // namespace

ScratchFloats::ScratchFloats(int64_t count) {
  const size_t n = count > 0 ? static_cast<size_t>(count) : 1;
  // Whole cache lines, so that a buffer serves any request of its size.
  const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  Buffer b = ThreadCache().Take(bytes);
  p_ = b.p;
  bytes_ = b.bytes;
  if (poison.load(std::memory_order_relaxed)) {
    const uint32_t nan = 0x7fc0dead;
    for (size_t i = 0; i < bytes_ / sizeof(float); ++i) {
      std::memcpy(p_ + i, &nan, sizeof(nan));
    }
  }
}

ScratchFloats::~ScratchFloats() { ThreadCache().Give(Buffer{p_, bytes_}); }

void SetScratchPoisonForTesting(bool on) { poison.store(on); }

size_t ScratchCachedBytesForTesting() { return ThreadCache().cached_bytes(); }
int64_t ScratchAllocationsForTesting() { return ThreadCache().allocations(); }

}  // namespace lockstep::kernels
