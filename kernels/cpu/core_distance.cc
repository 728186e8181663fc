#include "kernels/cpu/core_distance.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace lockstep::kernels {
namespace {

using Clock = std::chrono::steady_clock;

// The shared line: turn n of a batch is 2n + 1 for the first CPU's write,
// 2n + 2 for the second's. Either side gives up (sets `abort`) at the
// deadline.
struct alignas(64) Line {
  std::atomic<int64_t> value{0};
};

struct Shared {
  Line line;
  alignas(64) std::atomic<bool> abort{false};
  Clock::time_point deadline;
};

// Pins the calling thread to `cpu`; where it cannot, makes both sides give
// up and returns false.
bool PinOrAbort(Shared& s, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0) {
    return true;
  }
  s.abort.store(true);
  return false;
}

// Waits until line == want; false on abort or deadline.
bool WaitFor(Shared& s, int64_t want) {
  for (int64_t polls = 0;; ++polls) {
    if (s.line.value.load(std::memory_order_acquire) == want) return true;
    CpuRelax();
    if ((polls & 1023) == 1023) {
      if (s.abort.load(std::memory_order_relaxed)) return false;
      if (Clock::now() > s.deadline) {
        s.abort.store(true);
        return false;
      }
    }
  }
}

}  // namespace

std::optional<double> CacheLineRoundTripNanos(
    const CoreDistanceOptions& options) {
  if (options.round_trips < 1 || options.batches < 1) return std::nullopt;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (pthread_getaffinity_np(pthread_self(), sizeof(mask), &mask) != 0) {
    return std::nullopt;
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c) {
    if (CPU_ISSET(c, &mask)) cpus.push_back(c);
  }
  if (cpus.size() < 2) return std::nullopt;

  Shared s;
  s.deadline = Clock::now() + options.timeout;
  const int64_t turns = 2 * static_cast<int64_t>(options.round_trips);
  const int batches = options.batches;
  std::vector<double> nanos;
  // Each batch starts from value 0: the first side waits for the second to
  // be ready (value -1), then writes the odd turns; the second answers with
  // the even ones.
  std::thread second([&] {
    if (!PinOrAbort(s, cpus[1])) return;
    for (int b = 0; b < batches; ++b) {
      if (!WaitFor(s, 0)) return;
      s.line.value.store(-1, std::memory_order_release);
      for (int64_t t = 1; t < turns; t += 2) {
        if (!WaitFor(s, t)) return;
        s.line.value.store(t + 1, std::memory_order_release);
      }
    }
  });
  std::thread first([&] {
    if (!PinOrAbort(s, cpus[0])) return;
    for (int b = 0; b < batches; ++b) {
      if (!WaitFor(s, -1)) return;
      const Clock::time_point start = Clock::now();
      for (int64_t t = 1; t < turns; t += 2) {
        s.line.value.store(t, std::memory_order_release);
        if (!WaitFor(s, t + 1)) return;
      }
      const double ns =
          std::chrono::duration<double, std::nano>(Clock::now() - start)
              .count();
      nanos.push_back(ns / options.round_trips);
      if (Clock::now() > s.deadline) {
        s.abort.store(true);
        return;
      }
      s.line.value.store(0, std::memory_order_release);  // the next batch
    }
  });
  first.join();
  second.join();
  if (s.abort.load() || static_cast<int>(nanos.size()) != batches) {
    return std::nullopt;
  }
  std::nth_element(nanos.begin(), nanos.begin() + batches / 2, nanos.end());
  return nanos[batches / 2];
}

}  // namespace lockstep::kernels
