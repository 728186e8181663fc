// Fingerprints a step's tensors on a thread of their own while the step's
// thread goes on computing: the executor submits each captured tensor as it
// is produced, waits before a kernel overwrites one that is not hashed yet,
// and drains the queue at the end of the step. Each tensor is hashed by the
// same function as inline hashing, from the same bytes, so the fingerprints
// and digests are the same bits either way (worker/exec/README.md,
// "Fingerprinting in the background").
//
//   FingerprintPipeline p(hash_fn);
//   p.Reset(entries);                        // at the start of a step
//   p.Submit(tensor, index, &fps[i]);        // as each tensor is produced
//   p.WaitFor(out.raw_data(), out.bytes());  // before a kernel writes `out`
//   LS_RETURN_IF_ERROR(p.Drain());           // at the end of the step
//
// Thread-safety: Reset, Submit, WaitFor and Drain are called by one thread
// (the step's); the pipeline's own thread only runs the hash function.
// Submitted tensors are held (their storage shared) until hashed, and the
// output messages must stay in place until Drain returns.
#ifndef LOCKSTEP_WORKER_EXEC_FINGERPRINT_PIPELINE_H_
#define LOCKSTEP_WORKER_EXEC_FINGERPRINT_PIPELINE_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "kernels/tensor.h"
#include "lockstep/v1/fingerprint.pb.h"

namespace lockstep::worker {

// How the pipeline's thread waits for the next tensor. Like a worker of
// the CPU kernels' pool it polls kPipelinePollMicros, yielding its CPU
// between polls past the first 50 us; then it sleeps. Inside a step (from
// Reset to the end of Drain) it sleeps at most kPipelineNapMicros at a
// time and looks again, so Submit never has to wake it: waking a thread
// through the condition variable is a system call, 10 - 15 us on a virtual
// machine, paid by the step's thread, and a large model's tensors come
// milliseconds apart (gpt_block: 65 a step, one every 2 ms on average).
// When Submit woke a sleeping thread, those calls were 1.7 % of gpt_block's
// one-thread step. A tensor then waits up to one nap before its hash
// starts; Drain and WaitFor, which wait for hashes, wake the thread
// themselves. Between steps it sleeps until the next Reset. The thread
// only exists where the pool leaves a CPU free (docs/benchmarks.md, "the
// background thread's naps").
inline constexpr int64_t kPipelinePollMicros = 2000;
inline constexpr int64_t kPipelineNapMicros = 250;

class FingerprintPipeline {
 public:
  // Fills `out` with the fingerprint of `tensor` as manifest entry `index`.
  using HashFn =
      std::function<absl::Status(const kernels::Tensor& tensor, int32_t index,
                                 lockstep::v1::TensorFingerprint* out)>;

  // `hold` (tests only): the thread hashes nothing until WaitFor or Drain
  // asks for it, so any write to a submitted tensor that the step does not
  // announce with WaitFor shows up in its fingerprint every time.
  // `spin_micros`: how long the thread polls for work before it sleeps
  // (< 0: LOCKSTEP_CPU_SPIN_MICROS if set and valid, as for the CPU
  // kernels' pool, else kPipelinePollMicros).
  explicit FingerprintPipeline(HashFn hash, bool hold = false,
                               int64_t spin_micros = -1);
  // Abandons what is not hashed yet (a tensor being hashed is finished)
  // and joins the thread.
  ~FingerprintPipeline();

  FingerprintPipeline(const FingerprintPipeline&) = delete;
  FingerprintPipeline& operator=(const FingerprintPipeline&) = delete;

  // Starts a step of at most `capacity` submissions. REQUIRES: drained.
  void Reset(size_t capacity);

  // Queues `tensor` for hashing into `*out` (which must stay in place until
  // Drain returns). REQUIRES: fewer than `capacity` submissions this step.
  void Submit(const kernels::Tensor& tensor, int32_t index,
              lockstep::v1::TensorFingerprint* out);

  // Returns once every submitted tensor whose bytes overlap
  // [data, data + bytes) is hashed.
  void WaitFor(const void* data, size_t bytes);

  // Returns once every submitted tensor is hashed: the first error, if any.
  absl::Status Drain();

  int64_t spin_micros() const { return spin_micros_; }

  // True while a submitted tensor is not hashed yet.
  bool Busy() const {
    return done_.load(std::memory_order_acquire) != submitted_;
  }

 private:
  struct Job {
    kernels::Tensor tensor;
    const char* begin = nullptr;
    const char* end = nullptr;
    int32_t index = 0;
    lockstep::v1::TensorFingerprint* out = nullptr;
  };

  void Loop();
  // Wakes the thread if it sleeps (a system call; never per submission).
  void WakeThread();
  // Blocks until done_ > `last` (a job index).
  void WaitUntilDone(size_t last);

  const HashFn hash_;
  const bool hold_;
  const int64_t spin_micros_;
  // The step's jobs; job i (counted over the pipeline's life) is in slot
  // i - base_. Sized by Reset.
  std::vector<Job> jobs_;
  size_t base_ = 0;
  size_t submitted_ = 0;  // the step's thread's own count
  // Written by the step's thread and by the pipeline's thread respectively,
  // on cache lines of their own.
  alignas(64) std::atomic<size_t> published_{0};  // jobs the thread may take
  alignas(64) std::atomic<size_t> done_{0};       // jobs hashed
  alignas(64) std::atomic<size_t> release_{0};    // with hold_: may be hashed
  std::atomic<bool> thread_sleeping_{false};
  std::atomic<bool> in_step_{false};  // from Reset to the end of Drain
  std::atomic<bool> caller_waiting_{false};
  std::atomic<bool> stop_{false};

  std::mutex mu_;
  std::condition_variable work_cv_;  // the thread waits here for jobs
  std::condition_variable done_cv_;  // the step's thread waits here
  absl::Status error_;               // guarded by mu_

  std::thread thread_;
};

// Where an executor left to choose (FingerprintThread::kAuto) hashes a step's
// large tensors, step by step. A background thread pays off where the step's
// kernels do not mind another core reading their outputs, and costs a step far
// more than hashing inline where they do: on a 2-vCPU AMD EPYC host, in some
// minutes and not in others, the steps of models up to ResNet-18's size took
// 10 - 50 % longer with it than inline (docs/benchmarks.md, "AMD EPYC (Zen 4,
// AVX-512)"); on a Zen 2 host, the minutes in which the host had put the two
// vCPUs on different core complexes (a cache line's round trip 360 - 470 ns
// instead of 60 - 80: kernels/cpu/core_distance.h; "AMD EPYC (Zen 2, AVX2),
// 2026-12-06: the two vCPUs' distance"). So the run measures it on its own
// steps: the first capturing step hashes in the background (a warm-up, not
// compared); then a probe of kProbeRounds rounds, each a run of kRunSteps steps
// inline, then one in the background, of which only each run's last step is
// timed (its first one still pays for the cache lines the other way left on the
// other core); then whichever way's fastest timed step was faster (ties: the
// background) hashes the next kChosenSteps capturing steps, and it probes
// again. Taking each way's fastest of two keeps one slow step (an interrupt, a
// neighbour on the host) from deciding: with one round, a single background
// step 25 % slower than usual made a whole run of mobilenet_v2 hash inline at
// 1.1 x the background's step time (docs/benchmarks.md, "AMD EPYC (Zen 2,
// AVX2), 2026-12-06: the chooser's probe in two rounds"). A probe costs a long
// run little (four inline steps in 72 where the background is faster) and a
// short one a few steps. The fingerprints are the same bits either way.
//
//   BackgroundChooser c;
//   bool bg = c.Background();   // before each capturing step
//   ... run the step ...
//   c.Record(seconds);          // its wall time
class BackgroundChooser {
 public:
  static constexpr int kRunSteps = 2;
  static constexpr int kProbeRounds = 2;
  // kProbeRounds runs each way, in turns.
  static constexpr int kProbeSteps = kProbeRounds * 2 * kRunSteps;
  static constexpr int kChosenSteps = 64;

  // Whether the next capturing step hashes in the background.
  bool Background() const;
  // The wall time of that step; moves on to the next.
  void Record(double seconds);

  // Capturing steps recorded so far.
  int64_t steps() const { return steps_; }

 private:
  // The position of the next step in its probe-and-use cycle (< 0: the
  // warm-up), probes first.
  int64_t Position() const;

  int64_t steps_ = 0;
  // The current probe's fastest timed step each way.
  double inline_seconds_ = 0;
  double background_seconds_ = 0;
  bool background_ = true;
};

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_EXEC_FINGERPRINT_PIPELINE_H_
