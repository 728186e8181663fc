// Verdicts of finished jobs: judged once, streaming over the stored steps
// (memory for one step of each run, whatever the job's length), and stored
// with the job's final state and its certificates in one transaction.
//
// VerdictWorker judges on its own thread, so neither the scheduler's lock
// nor a worker's stream ever waits for a verdict. Thread-safe.
#ifndef LOCKSTEP_SERVER_VERDICTS_H_
#define LOCKSTEP_SERVER_VERDICTS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lockstep/v1/job.pb.h"
#include "server/analysis.h"
#include "server/run_data.h"
#include "server/store/store.h"
#include "server/worker_registry.h"

namespace lockstep::server {

// Readers over the stored steps of `job`'s runs (none for runs that did
// not succeed). The store must outlive them.
std::vector<RunSteps> OpenRuns(store::Store* store,
                               const lockstep::v1::Job& job);

// Hardware-class digest -> class string, from the stored workers.
absl::StatusOr<std::map<std::string, std::string>> ClassNames(
    store::Store* store);

// Judges the finished `job` (state SUCCEEDED, FAILED or CANCELLED) over its
// stored steps and stores the job, its report and its certificates.
// Returns the stored report (the one already stored, if another verdict
// came first).
absl::StatusOr<lockstep::v1::Report> JudgeAndStore(
    store::Store* store, const lockstep::v1::Job& job,
    const lockstep::v1::TensorManifest& manifest, int64_t now_unix_ms);

class VerdictWorker {
 public:
  // Called on the worker's thread after a verdict was stored (the stored
  // report; `job` as stored) or could not be (an error; the job's verdict
  // is still missing in the store).
  using Done =
      std::function<void(const lockstep::v1::Job& job,
                         const absl::StatusOr<lockstep::v1::Report>& report)>;

  // `store` must outlive the worker.
  VerdictWorker(store::Store* store, Clock clock, Done done);
  ~VerdictWorker();  // Stop()
  VerdictWorker(const VerdictWorker&) = delete;
  VerdictWorker& operator=(const VerdictWorker&) = delete;

  // Queues a finished job (its final state set) for judging.
  void Enqueue(lockstep::v1::Job job, lockstep::v1::TensorManifest manifest);
  // Blocks until nothing is queued or being judged.
  void WaitIdle();
  // Judges what is queued, then ends the thread. Idempotent.
  void Stop();

 private:
  struct Item {
    lockstep::v1::Job job;
    lockstep::v1::TensorManifest manifest;
  };
  void Loop();

  store::Store* const store_;
  const Clock clock_;
  const Done done_;
  absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_VERDICTS_H_
