#include "kernels/cpu/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>

namespace lockstep::kernels {

int64_t SpinMicrosFromEnvironment() {
  if (const char* env = std::getenv("LOCKSTEP_CPU_SPIN_MICROS");
      env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    if (*end == '\0' && v >= 0 && v <= 100000) return v;
  }
  return -1;
}

namespace {

int64_t DefaultSpinMicros() {
  const int64_t env = SpinMicrosFromEnvironment();
  return env >= 0 ? env : kPoolSpinMicros;
}

}  // namespace

ThreadPool::ThreadPool(int num_threads, int64_t spin_micros)
    : num_threads_(num_threads < 1 ? 1 : num_threads),
      spin_micros_(spin_micros < 0 ? DefaultSpinMicros() : spin_micros) {
  for (int i = 1; i < num_threads_; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunTasks() {
  for (;;) {
    const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= num_tasks_) return;
    (*fn_)(i);
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    SpinUntil([&] { return posted_.load(std::memory_order_acquire) != seen; },
              spin_micros_);
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++active_;
      running_.fetch_add(1, std::memory_order_relaxed);
    }
    RunTasks();
    {
      std::lock_guard<std::mutex> lock(mu_);
      --active_;
      running_.fetch_sub(1, std::memory_order_release);
    }
    done_cv_.notify_all();
  }
}

void ThreadPool::ParallelFor(int64_t num_tasks,
                             const std::function<void(int64_t)>& fn) {
  if (num_tasks <= 0) return;
  std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
  if (num_tasks == 1 || workers_.empty() || !busy.owns_lock()) {
    for (int64_t i = 0; i < num_tasks; ++i) fn(i);
    return;
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    // A worker that woke late for the previous job may still be leaving
    // RunTasks; set up the new job only once none is inside.
    done_cv_.wait(lock, [&] { return active_ == 0; });
    fn_ = &fn;
    num_tasks_ = num_tasks;
    next_.store(0, std::memory_order_relaxed);
    ++generation_;
    posted_.store(generation_, std::memory_order_release);
  }
  start_cv_.notify_all();
  RunTasks();
  SpinUntil([&] { return running_.load(std::memory_order_acquire) == 0; },
            spin_micros_);
  // Every task has been claimed; wait for the workers that joined this job
  // to finish theirs. A worker that wakes late finds no task left. It may
  // only join while fn_ is still valid, so fn_ is reset under mu_ below
  // once no worker is active.
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return active_ == 0; });
  // Late wakers of this generation: make them see an exhausted job.
  num_tasks_ = 0;
}

void ParallelFor(ThreadPool* pool, int64_t num_tasks,
                 const std::function<void(int64_t)>& fn) {
  if (pool == nullptr) {
    for (int64_t i = 0; i < num_tasks; ++i) fn(i);
    return;
  }
  pool->ParallelFor(num_tasks, fn);
}

void ParallelForRaw(ThreadPool* pool, int64_t num_tasks,
                    void (*fn)(void* context, int64_t task), void* context) {
  ParallelFor(pool, num_tasks, [fn, context](int64_t i) { fn(context, i); });
}

namespace {

int DefaultThreads() {
  if (const char* env = std::getenv("LOCKSTEP_CPU_THREADS"); env != nullptr) {
    const int n = std::atoi(env);
    if (n >= 1) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

std::unique_ptr<ThreadPool>& PoolSlot() {
  static auto* slot = new std::unique_ptr<ThreadPool>();
  return *slot;
}

}  // namespace

ThreadPool* CpuThreadPool() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (PoolSlot() == nullptr)
      PoolSlot().reset(new ThreadPool(DefaultThreads()));
  });
  return PoolSlot().get();
}

void SetCpuThreads(int n) {
  CpuThreadPool();  // run the once-initialisation first
  PoolSlot().reset(new ThreadPool(n <= 0 ? DefaultThreads() : n));
}

void SetCpuThreadsForTesting(int n) { SetCpuThreads(n); }

}  // namespace lockstep::kernels
