#include "worker/exec/fingerprint_pipeline.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "kernels/cpu/thread_pool.h"

namespace lockstep::worker {
namespace {

// How long the step's thread polls for a hash it waits for before it
// blocks: the hash of one tensor, most often.
constexpr int64_t kCallerPollMicros = 200;

int64_t DefaultSpinMicros() {
  const int64_t env = kernels::SpinMicrosFromEnvironment();
  return env >= 0 ? env : kPipelinePollMicros;
}

}  // namespace

FingerprintPipeline::FingerprintPipeline(HashFn hash, bool hold,
                                         int64_t spin_micros)
    : hash_(std::move(hash)),
      hold_(hold),
      spin_micros_(spin_micros >= 0 ? spin_micros : DefaultSpinMicros()),
      thread_([this] { Loop(); }) {}

FingerprintPipeline::~FingerprintPipeline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    work_cv_.notify_all();
  }
  thread_.join();
}

void FingerprintPipeline::Reset(size_t capacity) {
  // Every published job is done (the caller drained), so the thread reads
  // no slot until the next publication, which the release store below
  // orders after these writes.
  base_ = submitted_;
  if (jobs_.size() < capacity) jobs_.resize(capacity);
  // From here the thread naps instead of sleeping until woken: one wake-up
  // a step at most, instead of one per submission.
  in_step_.store(true);  // seq_cst: pairs with thread_sleeping_
  WakeThread();
}

void FingerprintPipeline::WakeThread() {
  if (thread_sleeping_.load()) {
    std::lock_guard<std::mutex> lock(mu_);
    work_cv_.notify_one();
  }
}

void FingerprintPipeline::Submit(const kernels::Tensor& tensor, int32_t index,
                                 lockstep::v1::TensorFingerprint* out) {
  Job& j = jobs_[submitted_ - base_];
  j.tensor = tensor;
  j.begin = static_cast<const char*>(tensor.raw_data());
  j.end = j.begin + tensor.bytes();
  j.index = index;
  j.out = out;
  ++submitted_;
  // No wake-up: within a step the thread looks again after every nap.
  published_.store(submitted_, std::memory_order_release);
}

void FingerprintPipeline::WaitFor(const void* data, size_t bytes) {
  const size_t done = done_.load(std::memory_order_acquire);
  if (done == submitted_ || bytes == 0) return;
  const char* begin = static_cast<const char*>(data);
  const char* end = begin + bytes;
  for (size_t i = submitted_; i-- > done;) {
    const Job& j = jobs_[i - base_];
    if (j.begin < end && begin < j.end) {
      WaitUntilDone(i);
      return;
    }
  }
}

absl::Status FingerprintPipeline::Drain() {
  if (submitted_ > base_) WaitUntilDone(submitted_ - 1);
  in_step_.store(false);  // the thread sleeps until the next Reset
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(error_, absl::OkStatus());
}

void FingerprintPipeline::WaitUntilDone(size_t last) {
  auto ready = [&] { return done_.load(std::memory_order_acquire) > last; };
  if (ready()) return;
  if (hold_ && release_.load() <= last) release_.store(last + 1);
  // The step's thread waits now anyway: no reason to let a nap run out.
  WakeThread();
  if (kernels::SpinUntil(ready, kCallerPollMicros)) return;
  std::unique_lock<std::mutex> lock(mu_);
  caller_waiting_.store(true);  // seq_cst: pairs with done_ in Loop
  done_cv_.wait(lock, ready);
  caller_waiting_.store(false);
}

void FingerprintPipeline::Loop() {
  size_t next = 0;  // == done_; only this thread writes done_
  auto limit = [&] {
    const size_t p = published_.load();
    return hold_ ? std::min(p, release_.load()) : p;
  };
  auto has_work = [&] { return stop_.load() || next < limit(); };
  while (true) {
    if (!kernels::SpinUntil(has_work, spin_micros_)) {
      std::unique_lock<std::mutex> lock(mu_);
      thread_sleeping_.store(true);  // seq_cst: pairs with in_step_
      if (in_step_.load()) {
        // Submit does not wake the thread: it looks again after a nap.
        work_cv_.wait_for(lock, std::chrono::microseconds(kPipelineNapMicros),
                          has_work);
      } else {
        work_cv_.wait(lock, [&] { return has_work() || in_step_.load(); });
      }
      thread_sleeping_.store(false);
    }
    if (stop_.load()) return;  // what is left is abandoned
    while (next < limit() && !stop_.load(std::memory_order_relaxed)) {
      Job& j = jobs_[next - base_];
      absl::Status st = hash_(j.tensor, j.index, j.out);
      j.tensor = kernels::Tensor();  // drop the storage share
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        if (error_.ok()) error_ = std::move(st);
      }
      ++next;
      done_.store(next);  // seq_cst: pairs with caller_waiting_
      if (caller_waiting_.load()) {
        std::lock_guard<std::mutex> lock(mu_);
        done_cv_.notify_all();
      }
    }
  }
}

int64_t BackgroundChooser::Position() const {
  return steps_ == 0 ? -1 : (steps_ - 1) % (kProbeSteps + kChosenSteps);
}

bool BackgroundChooser::Background() const {
  const int64_t p = Position();
  if (p < 0) return true;
  if (p < kProbeSteps) return p / kRunSteps % 2 == 1;
  return background_;
}

void BackgroundChooser::Record(double seconds) {
  const int64_t p = Position();
  const bool background = Background();  // the way this step hashed
  ++steps_;
  // Only the last step of each probe run counts, each way's fastest over
  // the probe's rounds; the probe's last step decides.
  if (p < 0 || p >= kProbeSteps || p % kRunSteps != kRunSteps - 1) return;
  double& fastest = background ? background_seconds_ : inline_seconds_;
  if (p < 2 * kRunSteps || seconds < fastest) fastest = seconds;
  if (p == kProbeSteps - 1) {
    background_ = background_seconds_ <= inline_seconds_;
  }
}

}  // namespace lockstep::worker
