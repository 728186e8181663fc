// The scheduler: unfinished jobs in memory, the run queue, leases, pins and
// the one mutex that guards them.
//
// Runs wait in a FIFO queue and are assigned to connected, ACTIVE workers
// with a free slot that match the placement (labels, worker ids, hardware
// classes, scope). An assignment carries a lease that every heartbeat
// listing the run renews; a run whose lease expires (worker dead, frozen or
// partitioned) gets a fresh attempt elsewhere, and fingerprints of the old
// attempt are deleted and refused from then on. A worker that disconnects
// keeps its runs until their leases expire.
//
// Pinned runs (audit runs, SAME_WORKER jobs) wait at most
// options.pinned_wait_ms for a pinned worker that is gone: an audit run then
// fails (its audit reports NO_RESULT for that worker); a SAME_WORKER job is
// re-pinned to another ACTIVE worker of its hardware class, all its runs
// starting afresh there, or fails naming the vanished worker.
//
// Locking: mu_ is never held across a SQLite write or a verdict. State
// changes are written through an ordered write queue right after mu_ is
// released; a run's result is written (and must commit) before it changes
// anything in memory, so nothing acknowledged is lost. When every run of a
// job has ended, the job goes to the verdict worker; it counts as finished
// here once its verdict is stored (OnVerdict).
//
// Events are built only for jobs someone watches (and for the final one);
// one assignment pass sends one event per job, however many of its runs it
// assigned. Runs are found by index, not by scanning their job, and a
// pinned run is matched against its own worker only, so heartbeats and
// batches cost the same in a fleet of any size.
//
// Thread-safe. Lock order: mu_ before the registry's lock, the watcher
// list's and the write queue's; events and verdict hand-offs happen with
// mu_ released.
#ifndef LOCKSTEP_SERVER_SCHEDULER_H_
#define LOCKSTEP_SERVER_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lockstep/v1/lockstep_service.pb.h"
#include "lockstep/v1/worker_gateway.pb.h"
#include "server/job_events.h"
#include "server/store/store.h"
#include "server/worker_registry.h"

namespace lockstep::server {

struct SchedulerOptions {
  // Lease of an assigned run; renewed by each heartbeat listing it.
  // Default 30 s.
  int64_t lease_ms = 30000;
  // Attempts per run before the run (and its job) fails. Default 3.
  int max_attempts = 3;
  // Finished jobs kept in memory (the most recently finished ones); older
  // ones are served from the store. Default 256.
  int finished_jobs_in_memory = 256;
  // How long a queued run pinned to a worker (audit runs, SAME_WORKER jobs)
  // waits for that worker while it is not connected (or, for SAME_WORKER,
  // not ACTIVE). Default 60 s.
  int64_t pinned_wait_ms = 60000;
  // An assigned run that its worker has neither listed in a heartbeat nor
  // sent a batch of is assigned to it again (the same attempt; the worker
  // ignores an attempt it already has) after this long, then after twice
  // as long, and so on: an assignment lost with a stream that broke as it
  // was sent (a coordinator restart, a reconnect) is not left to wait for
  // its lease and run twice. 0: a tenth of lease_ms, at least 500 ms.
  int64_t resend_unlisted_ms = 0;
};

// Writes to the store in the order they were queued, on the caller's
// thread, never under the scheduler's lock. Thread-safe.
class OrderedWriter {
 public:
  using Write = std::function<absl::Status(store::Store*)>;
  explicit OrderedWriter(store::Store* store) : store_(store) {}
  // Queues `write`; `what` names it in the log if it fails.
  void Enqueue(Write write, std::string what);
  // Performs the queued writes in order. A write the store refuses for a
  // passing reason (busy, read-only, I/O) stays queued, with everything
  // after it, for the next flush; one refused for good (the row is gone)
  // is logged and dropped.
  // Returns the first refusal that keeps writes queued (logged as well).
  absl::Status Flush();
  // Flushes, then performs `write` and returns its status; an error when a
  // queued write is still waiting (nothing may overtake it).
  absl::Status WriteNow(const Write& write);

 private:
  absl::Status FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  store::Store* const store_;
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(queue_mu_);
  absl::Mutex queue_mu_;
  std::deque<std::pair<Write, std::string>> queue_ ABSL_GUARDED_BY(queue_mu_);
};

class Scheduler {
 public:
  // Receives a finished job (its final state set) and its manifest to
  // judge; the verdict comes back through OnVerdict.
  using VerdictSink = std::function<void(const lockstep::v1::Job&,
                                         const lockstep::v1::TensorManifest&)>;

  // Everything must outlive the scheduler.
  Scheduler(store::Store* store, WorkerRegistry* registry, JobEvents* events,
            SchedulerOptions options, Clock clock, VerdictSink verdicts);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // A job already stored (JOB_QUEUED): queue its runs.
  void Add(const lockstep::v1::Job& job,
           const lockstep::v1::TensorManifest& manifest);
  // Loads unfinished jobs after a restart: queued runs are queued again;
  // assigned and running runs get a fresh lease. Jobs whose runs all ended
  // go to the verdict worker.
  absl::Status Recover();

  // The job as held in memory, or nullopt. `final` is set when its verdict
  // is stored.
  std::optional<lockstep::v1::Job> Find(const std::string& job_id,
                                        bool* final) const;
  absl::StatusOr<lockstep::v1::Job> Cancel(const std::string& job_id,
                                           const std::string& reason);
  // Whether a run assigned to or running on `worker_id` belongs to a job
  // whose model's parameters_digest is `digest`.
  bool WorkerRunsBlob(const std::string& worker_id,
                      const std::string& digest) const;
  // A verdict was stored (report OK) or not (error: retried by Sweep).
  void OnVerdict(const lockstep::v1::Job& job,
                 const absl::StatusOr<lockstep::v1::Report>& report);

  // --- Worker side ----------------------------------------------------------
  void AssignQueued();
  void OnHeartbeat(const std::string& worker_id,
                   const lockstep::v1::Heartbeat& heartbeat);
  // Receives a batch's acknowledgement, or why it was refused.
  using BatchDone = std::function<void(absl::StatusOr<lockstep::v1::BatchAck>)>;
  // Checks a batch against its run in memory (active, assigned to this
  // worker, a captured step), then queues it for the store's committer.
  // `done` runs inline for a batch refused here, otherwise on the
  // committer thread once the batch's transaction has committed (or the
  // store refused it); batches submitted in order are answered in order.
  // Never waits for a commit. Returns false when the committer's queue is
  // full (Store::SubmitIngest): submit no more until `done` has run for the
  // batches already submitted.
  bool SubmitBatch(const std::string& worker_id,
                   lockstep::v1::FingerprintBatch batch, BatchDone done);
  // SubmitBatch, waiting for the answer.
  absl::StatusOr<lockstep::v1::BatchAck> OnBatch(
      const std::string& worker_id, const lockstep::v1::FingerprintBatch& b);
  // Records a run's result; OK only once the result is committed to the
  // store (the worker resends anything else). OK again for a result
  // already recorded.
  absl::Status OnRunFinished(const std::string& worker_id,
                             const lockstep::v1::RunFinished& finished);
  // Re-queues runs whose lease expired, ends pinned waits past their
  // deadline, retries verdicts that could not be stored, and drops the
  // oldest finished jobs from memory. Returns how many leases expired.
  int Sweep();
  size_t JobsInMemory() const;

 private:
  // After a batch was stored: renews the run's lease, marks it running
  // and counts its completed steps; queues the state write (written by the
  // next flush) and publishes the events, never touching the store itself.
  lockstep::v1::BatchAck BatchStored(const std::string& run_id, int32_t attempt,
                                     int32_t step, int64_t sequence,
                                     const store::IngestResult& result);
  struct JobState {
    lockstep::v1::Job job;
    lockstep::v1::TensorManifest manifest;
    std::string pinned_worker;  // SAME_WORKER
    std::string pinned_class;   // SAME_CLASS, and the class of SAME_WORKER
    // Workers an attempt of each run failed on: the next attempt prefers
    // any other worker.
    std::map<std::string, std::set<std::string>> failed_on;
    // Audit jobs: run i only on run_workers[i]; failures stay per run.
    std::vector<std::string> run_workers;
    // With the verdict worker.
    bool judging = false;
    // Its verdict is stored: the job is finished.
    bool verdict_stored = false;
  };
  struct RunRef {
    std::string job_id;
    int64_t lease_expires_ms = 0;
    // Its result is being verified and written (not swept meanwhile).
    bool recording = false;
    // Listed by its worker's heartbeat at least once.
    bool listed = false;
    // While unlisted and ASSIGNED: when the assignment is sent again, and
    // the wait after that.
    int64_t resend_at_ms = 0;
    int64_t resend_gap_ms = 0;
  };
  // What a call produced under mu_, delivered after mu_ is released.
  struct Outbox {
    JobEventList events;
    std::vector<std::pair<lockstep::v1::Job, lockstep::v1::TensorManifest>>
        verdicts;
  };

  JobState* FindJobLocked(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  lockstep::v1::Run* FindRunLocked(const std::string& run_id,
                                   JobState** job_out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether worker `w` may run `run` of `js`, slots aside.
  bool EligibleLocked(const JobState& js, const lockstep::v1::Run& run,
                      const LiveWorker& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AssignLocked(Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The RunAssignment message of `run` (its current attempt).
  lockstep::v1::CoordinatorMessage AssignmentLocked(
      const JobState& js, const lockstep::v1::Run& run) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A fresh lease entry for a run assigned (or recovered) at `now`.
  RunRef NewRunRefLocked(const std::string& job_id, int64_t now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends again the assignments of ASSIGNED runs whose workers have not
  // listed them (SchedulerOptions::resend_unlisted_ms).
  void ResendUnlistedLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The record that ends an attempt that did not succeed: a fresh attempt
  // while attempts remain and `retry`, else the failed run.
  lockstep::v1::Run EndAttempt(const lockstep::v1::Run& run,
                               const std::string& reason,
                               bool retry = true) const;
  // Applies `next` (from EndAttempt) to `run`; `persisted` when the store
  // already holds it.
  void ApplyEndedAttemptLocked(JobState* js, lockstep::v1::Run* run,
                               const lockstep::v1::Run& next,
                               const std::string& reason, bool persisted,
                               Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops the job's unfinished runs and marks it FAILED with `reason`.
  void FailJobLocked(JobState* js, const std::string& reason, Outbox* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // When every run has ended, hands the job to the verdict worker.
  void MaybeFinishJobLocked(JobState* js, Outbox* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pinned runs whose worker has been gone past pinned_wait_ms.
  void EndPinnedWaitsLocked(Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves a SAME_WORKER job whose worker vanished to another ACTIVE worker
  // of its class, restarting every run; fails it when there is none.
  void RepinLocked(JobState* js, const std::string& vanished,
                   const std::vector<LiveWorker>& live, Outbox* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopActiveLocked(const lockstep::v1::Run& run, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EventLocked(const JobState& js, const std::string& run_id,
                   const std::string& message, Outbox* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistRunLocked(const lockstep::v1::Run& run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistRestartLocked(const lockstep::v1::Run& run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistJobLocked(const lockstep::v1::Job& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes, then events and verdict hand-offs. Returns the writes' status.
  absl::Status Deliver(Outbox out) ABSL_LOCKS_EXCLUDED(mu_);
  static void InitPins(JobState* js);
  static bool IsSameWorker(const JobState& js);

  store::Store* const store_;
  WorkerRegistry* const registry_;
  JobEvents* const events_;
  const SchedulerOptions options_;
  const Clock clock_;
  const VerdictSink verdicts_;
  OrderedWriter writer_;

  mutable absl::Mutex mu_;
  std::map<std::string, JobState> jobs_ ABSL_GUARDED_BY(mu_);
  // Assigned or running runs.
  std::map<std::string, RunRef> active_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);    // run ids
  std::map<std::string, int> load_ ABSL_GUARDED_BY(mu_);  // worker -> runs
  // Queued pinned run -> since when its worker has been missing.
  std::map<std::string, int64_t> pin_missing_since_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_SCHEDULER_H_
