// Atomic float accumulation for the DEFAULT ("atomic") CPU kernels.
//
// AtomicAddFloat adds with a compare-and-swap loop, so concurrent adders
// land in whatever order they arrive: float addition is not associative,
// and the result can change from run to run. That is the point of these
// kernels (they reproduce classic GPU atomicAdd nondeterminism); CANONICAL
// and DETERMINISTIC kernels never use this.
//
// The atomic kernels run their tasks through AtomicParallelFor. Tests can
// pin the arrival order with ScopedAtomicArrivalOrderForTesting: the tasks
// then run one after another in a permutation drawn from a seed, so a test
// can show that the kernels' bits follow the order (same order, same bits;
// another order, other bits) without waiting for a race.
#ifndef LOCKSTEP_KERNELS_CPU_ATOMIC_FLOAT_H_
#define LOCKSTEP_KERNELS_CPU_ATOMIC_FLOAT_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace lockstep::kernels {

inline void AtomicAddFloat(float* target, float value) {
  float expected;
  __atomic_load(target, &expected, __ATOMIC_RELAXED);
  float desired = expected + value;
  while (!__atomic_compare_exchange(target, &expected, &desired,
                                    /*weak=*/true, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED)) {
    desired = expected + value;
  }
}

// The permutation of [0, n) that `seed` draws (Fisher-Yates over
// SplitMix64): the task order of AtomicParallelFor under
// ScopedAtomicArrivalOrderForTesting(seed). The same on every platform.
inline std::vector<int64_t> AtomicArrivalOrder(uint64_t seed, int64_t n) {
  std::vector<int64_t> order(n > 0 ? n : 0);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  uint64_t state = seed;
  for (int64_t i = n - 1; i > 0; --i) {
    state += 0x9e3779b97f4a7c15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::swap(order[i], order[z % static_cast<uint64_t>(i + 1)]);
  }
  return order;
}

namespace atomic_internal {
// The seed of the pinned arrival order; meaningful while g_pinned is set.
inline std::atomic<bool> g_pinned{false};
inline std::atomic<uint64_t> g_seed{0};
}  // namespace atomic_internal

// While alive, every AtomicParallelFor runs its tasks sequentially on the
// calling thread in the order AtomicArrivalOrder(seed, num_tasks). Test
// only; not thread-safe: create and destroy it while no kernel runs, and do
// not nest.
class ScopedAtomicArrivalOrderForTesting {
 public:
  explicit ScopedAtomicArrivalOrderForTesting(uint64_t seed) {
    atomic_internal::g_seed.store(seed);
    atomic_internal::g_pinned.store(true);
  }
  ~ScopedAtomicArrivalOrderForTesting() {
    atomic_internal::g_pinned.store(false);
  }
  ScopedAtomicArrivalOrderForTesting(
      const ScopedAtomicArrivalOrderForTesting&) = delete;
  ScopedAtomicArrivalOrderForTesting& operator=(
      const ScopedAtomicArrivalOrderForTesting&) = delete;
};

// Whole partial products added in arrival order, a block of rows at a
// time: a task adds its rows x cols partial into y one block of
// kRowsPerLock rows after another, each block under a lock of its own, so
// every element receives its tasks' terms in the order the tasks take
// that block's lock, in whatever order they arrive (as AtomicAddFloat's
// per element), for one lock per block instead of one compare-and-swap
// per element. Tasks start at different blocks (first_block) so they
// rarely wait on each other.
class AtomicRowBlocks {
 public:
  static constexpr int64_t kRowsPerLock = 8;

  explicit AtomicRowBlocks(int64_t rows)
      : blocks_((rows + kRowsPerLock - 1) / kRowsPerLock),
        locks_(new std::atomic<bool>[blocks_ > 0 ? blocks_ : 1]) {
    for (int64_t b = 0; b < blocks_; ++b) locks_[b].store(false);
  }

  // The number of blocks (locks): a task's first_block in [0, blocks()).
  int64_t blocks() const { return blocks_; }

  // y(i, j) = y[i * c_row + j * c_col] += part[i * cols + j] for i < rows
  // (the rows given to the constructor), j < cols.
  void Add(float* y, int64_t c_row, int64_t c_col, const float* part,
           int64_t rows, int64_t cols, int64_t first_block) {
    for (int64_t k = 0; k < blocks_; ++k) {
      const int64_t b = (first_block + k) % blocks_;
      std::atomic<bool>& lock = locks_[b];
      while (lock.exchange(true, std::memory_order_acquire)) {
        while (lock.load(std::memory_order_relaxed)) std::this_thread::yield();
      }
      const int64_t r1 = std::min(rows, (b + 1) * kRowsPerLock);
      for (int64_t i = b * kRowsPerLock; i < r1; ++i) {
        float* yr = y + i * c_row;
        const float* pr = part + i * cols;
        if (c_col == 1) {
          for (int64_t j = 0; j < cols; ++j) yr[j] += pr[j];
        } else {
          for (int64_t j = 0; j < cols; ++j) yr[j * c_col] += pr[j];
        }
      }
      lock.store(false, std::memory_order_release);
    }
  }

 private:
  int64_t blocks_;
  std::unique_ptr<std::atomic<bool>[]> locks_;
};

// Runs fn(0) .. fn(num_tasks - 1) of an atomic kernel, each exactly once:
// on `pool` (the atomic adds arrive in whatever order the threads reach
// them), or in the pinned order under ScopedAtomicArrivalOrderForTesting.
inline void AtomicParallelFor(ThreadPool* pool, int64_t num_tasks,
                              const std::function<void(int64_t)>& fn) {
  if (atomic_internal::g_pinned.load()) {
    for (const int64_t t :
         AtomicArrivalOrder(atomic_internal::g_seed.load(), num_tasks)) {
      fn(t);
    }
    return;
  }
  pool->ParallelFor(num_tasks, fn);
}

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_CPU_ATOMIC_FLOAT_H_
