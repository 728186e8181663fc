// The CPU backend's worker threads.
//
// The fast kernels split their OUTPUTS (row and column blocks) into tasks
// and run them with ParallelFor; no reduction is ever split across tasks,
// so results are bit-identical for any number of threads. (The DEFAULT
// "atomic" kernels are the deliberate exception: they split reductions.)
//
// One pool per process (CpuThreadPool()), sized by LOCKSTEP_CPU_THREADS or
// else the number of cores; tests may build their own pools or replace the
// process pool with SetCpuThreadsForTesting.
//
// Thread-safety: ParallelFor may be called from any thread. The pool runs
// one ParallelFor at a time; a call made while it is busy (another thread's
// kernel, or a nested call from inside a task) runs its tasks inline on the
// calling thread instead of waiting.
#ifndef LOCKSTEP_KERNELS_CPU_THREAD_POOL_H_
#define LOCKSTEP_KERNELS_CPU_THREAD_POOL_H_

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lockstep::kernels {

// A hint to the core that this thread is spinning (x86 PAUSE, Arm YIELD).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long a pool's idle worker, and a caller waiting for workers, spin
// before sleeping on a condition variable. A training step posts hundreds
// of jobs with serial work between them (inline fingerprints, small ops,
// the executor); a worker that has gone to sleep takes about 100 us to
// wake on a virtual machine (cpu_bench table (g)), and a job of two halves
// then waits that long for its second half. Spinning kPoolSpinMicros
// bridges the usual gaps (resnet18_cifar on two threads: about 10 % off
// the step, docs/benchmarks.md). Past its first kPoolShortSpinMicros the
// spin yields the core (sched_yield) between polls, so a thread of another
// process on the same core (a coordinator, other workers) runs instead of
// waiting for the spin to end; where the cores are oversubscribed anyway,
// LOCKSTEP_CPU_SPIN_MICROS (0 to 100000) sets a shorter spin.
inline constexpr int64_t kPoolSpinMicros = 2000;
inline constexpr int64_t kPoolShortSpinMicros = 50;

// LOCKSTEP_CPU_SPIN_MICROS when it is set to a valid value (0 to 100000),
// else -1. Threads that spin for work elsewhere (the executor's background
// fingerprints) take it too.
int64_t SpinMicrosFromEnvironment();

// Polls ready() until it holds (returns true) or about `micros` have passed
// (false), pausing (CpuRelax) between polls; past the first
// kPoolShortSpinMicros it yields the CPU (sched_yield) after every 64
// polls, so a thread of another process that needs the CPU runs. The
// pool's workers and callers spin this way, and so does any thread that
// waits for the pool's kind of work (the executor's background
// fingerprints).
template <typename Ready>
bool SpinUntil(const Ready& ready, int64_t micros) {
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + std::chrono::microseconds(micros);
  const auto polite = start + std::chrono::microseconds(std::min<int64_t>(
                                  micros, kPoolShortSpinMicros));
  while (!ready()) {
    for (int i = 0; i < 64 && !ready(); ++i) CpuRelax();
    const auto now = std::chrono::steady_clock::now();
    if (now > until) return ready();
    if (now > polite) sched_yield();
  }
  return true;
}

class ThreadPool {
 public:
  // num_threads >= 1 counts the calling thread: num_threads - 1 workers,
  // spinning spin_micros before they sleep, yielding the core between
  // polls after the first kPoolShortSpinMicros (< 0:
  // LOCKSTEP_CPU_SPIN_MICROS if set and valid, else kPoolSpinMicros).
  explicit ThreadPool(int num_threads, int64_t spin_micros = -1);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  int64_t spin_micros() const { return spin_micros_; }

  // Runs fn(0) .. fn(num_tasks - 1), each exactly once, spread over the
  // pool's threads (tasks are handed out in index order as threads free
  // up), and returns when all are done.
  void ParallelFor(int64_t num_tasks, const std::function<void(int64_t)>& fn);

 private:
  void WorkerLoop();
  void RunTasks();

  const int num_threads_;
  const int64_t spin_micros_;
  std::vector<std::thread> workers_;
  std::mutex busy_;  // held for the whole of one ParallelFor

  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;  // guarded by mu_
  int active_ = 0;           // workers inside the current job, guarded by mu_
  // Mirrors of generation_ and active_ that threads spin on, without mu_,
  // for spin_micros_ before they sleep on a condition variable: a
  // training step posts hundreds of short jobs, and a wake-up through the
  // condition variable costs more than many of them.
  std::atomic<uint64_t> posted_{0};
  std::atomic<int> running_{0};
  bool stop_ = false;  // guarded by mu_
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t num_tasks_ = 0;
  std::atomic<int64_t> next_{0};
};

// Runs fn over [0, num_tasks) on pool, or inline when pool is null.
void ParallelFor(ThreadPool* pool, int64_t num_tasks,
                 const std::function<void(int64_t)>& fn);

// Runs fn(begin, end) over [0, n) in blocks of `block` elements on pool,
// one task per block; a single block runs inline.
template <typename Fn>
void ParallelForBlocks(ThreadPool* pool, int64_t n, int64_t block,
                       const Fn& fn) {
  if (n <= 0) return;
  const int64_t tasks = (n + block - 1) / block;
  if (tasks == 1) {
    fn(int64_t{0}, n);
    return;
  }
  ParallelFor(pool, tasks, [&](int64_t t) {
    const int64_t begin = t * block;
    fn(begin, std::min(n, begin + block));
  });
}

// The same with a plain function pointer, for translation units built with
// ISA flags (gemm_*.cc) that must not instantiate std::function themselves.
void ParallelForRaw(ThreadPool* pool, int64_t num_tasks,
                    void (*fn)(void* context, int64_t task), void* context);

// The process pool: LOCKSTEP_CPU_THREADS threads if set (>= 1), else
// std::thread::hardware_concurrency().
ThreadPool* CpuThreadPool();
// Replaces the process pool with one of n threads (n <= 0: the default
// size). Not thread-safe: no kernel may be running. The executor calls it
// for a job whose config.threads is set (one run per process).
void SetCpuThreads(int n);
// The same, for tests.
void SetCpuThreadsForTesting(int n);

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_CPU_THREAD_POOL_H_
