// Jobs from submission to verdict: validation, expansion into runs,
// scheduling with leases, fingerprint ingest, retries, cancellation,
// analysis and certificates.
//
// Scheduling: runs wait in a FIFO queue and are assigned to connected,
// ACTIVE workers with a free slot that match the placement (labels, worker
// ids, hardware classes, scope). An assignment carries a lease that every
// heartbeat listing the run renews; a run whose lease expires (worker dead,
// frozen or partitioned) gets a fresh attempt elsewhere, and fingerprints of
// the old attempt are deleted and refused from then on. A worker that
// disconnects keeps its runs until their leases expire, so a worker (or a
// coordinator) that comes back in time carries on where it was.
//
// Thread-safe. Lock order: JobManager::mu_ before the registry's and the
// store's locks; callbacks (watchers) run with no lock held.
#ifndef LOCKSTEP_SERVER_JOB_MANAGER_H_
#define LOCKSTEP_SERVER_JOB_MANAGER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lockstep/v1/lockstep_service.pb.h"
#include "lockstep/v1/worker_gateway.pb.h"
#include "model/plan.h"
#include "server/analysis.h"
#include "server/store/store.h"
#include "server/worker_registry.h"

namespace lockstep::server {

struct JobManagerOptions {
  // Lease of an assigned run; renewed by each heartbeat listing it.
  // Default 30 s.
  int64_t lease_ms = 30000;
  // Attempts per run before the run (and its job) fails. Default 3.
  int max_attempts = 3;
  // Model and config limits, as the workers enforce them.
  model::Limits limits;
  // Finished jobs kept in memory (the most recently finished ones); older
  // ones are dropped from memory at the next submission or sweep and served
  // from the store, so memory stays bounded on a long-lived coordinator.
  int finished_jobs_in_memory = 256;
};

class JobManager final : public WorkerRegistry::Listener {
 public:
  using Watcher = std::function<void(const lockstep::v1::JobEvent&)>;

  // `store` and `registry` must outlive the manager.
  JobManager(store::Store* store, WorkerRegistry* registry,
             JobManagerOptions options, Clock clock);
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // Loads unfinished jobs after a restart: queued runs are queued again;
  // assigned and running runs get a fresh lease so their workers can
  // reconnect and carry on.
  absl::Status Recover();

  // Label marking an audit's job; its value is the audit id. Run i of such
  // a job runs on placement.worker_ids[i], and a run that fails does not
  // end the others.
  static constexpr char kAuditLabel[] = "lockstep.audit";

  // Called once for every job that finishes (outside all locks).
  void SetJobFinishedHook(std::function<void(const lockstep::v1::Job&)> hook);

  // --- Public API -----------------------------------------------------------
  absl::StatusOr<lockstep::v1::Job> Submit(
      const lockstep::v1::SubmitJobRequest& request);
  // Loads a finished job's runs with their stored steps.
  absl::StatusOr<std::vector<RunData>> LoadRuns(const lockstep::v1::Job& job);
  absl::StatusOr<lockstep::v1::Job> GetJob(const std::string& job_id);
  absl::StatusOr<lockstep::v1::ListJobsResponse> ListJobs(
      const lockstep::v1::ListJobsRequest& request);
  absl::StatusOr<lockstep::v1::Job> Cancel(const std::string& job_id,
                                           const std::string& reason);
  absl::StatusOr<lockstep::v1::Report> GetReport(const std::string& job_id);
  absl::StatusOr<lockstep::v1::CompareRunsResponse> CompareRuns(
      const std::string& run_a, const std::string& run_b);
  absl::StatusOr<lockstep::v1::Certificate> GetCertificate(
      const std::string& id);
  absl::StatusOr<lockstep::v1::ListCertificatesResponse> ListCertificates(
      const lockstep::v1::ListCertificatesRequest& request);

  // Calls `watcher` with every change of the job until Unwatch; returns a
  // token. The first call (a snapshot) happens before Watch returns.
  absl::StatusOr<int64_t> Watch(const std::string& job_id, Watcher watcher);
  void Unwatch(int64_t token);

  // --- Worker side ----------------------------------------------------------
  // A session started (its welcome is queued): assign queued runs.
  void OnWorkerConnected(const std::string& worker_id);
  void OnWorkerDisconnected(const std::string& worker_id) override;
  void OnHeartbeat(const std::string& worker_id,
                   const lockstep::v1::Heartbeat& heartbeat);
  // Stores the batch; returns the ack to send. Errors become Rejected.
  absl::StatusOr<lockstep::v1::BatchAck> OnBatch(
      const std::string& worker_id, const lockstep::v1::FingerprintBatch& b);
  // Records a run's result. OK again for a result already recorded (the
  // worker resends results after reconnecting).
  absl::Status OnRunFinished(const std::string& worker_id,
                             const lockstep::v1::RunFinished& finished);
  // Re-queues runs whose lease expired, and drops the oldest finished jobs
  // from memory beyond options.finished_jobs_in_memory. Returns how many
  // runs were re-queued.
  int Sweep();
  // Jobs held in memory (unfinished ones plus recently finished ones).
  size_t JobsInMemory() const;

 private:
  struct JobState {
    lockstep::v1::Job job;
    lockstep::v1::TensorManifest manifest;
    std::string pinned_worker;  // SAME_WORKER
    std::string pinned_class;   // SAME_CLASS
    // Workers an attempt of each run failed on (lease expired, crashed):
    // the next attempt prefers any other worker.
    std::map<std::string, std::set<std::string>> failed_on;
    // Audit jobs: run i only on run_workers[i]; failures stay per run.
    std::vector<std::string> run_workers;
  };
  struct RunRef {
    std::string job_id;
    int index = 0;
    int64_t lease_expires_ms = 0;
  };
  using Events = std::vector<std::pair<std::string, lockstep::v1::JobEvent>>;

  lockstep::v1::Run* FindRunLocked(const std::string& run_id,
                                   JobState** job_out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AssignLocked(Events* events) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the oldest finished jobs beyond options_.finished_jobs_in_memory.
  // Invalidates JobState pointers: call only where none is held.
  void EvictFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends an attempt that did not succeed: a fresh attempt while attempts
  // remain, else the run fails (and with it the job).
  void RetryOrFailLocked(JobState* js, lockstep::v1::Run* run,
                         const std::string& reason, Events* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeFinishJobLocked(JobState* js, Events* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailJobLocked(JobState* js, const std::string& reason, Events* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EventLocked(JobState* js, const std::string& run_id,
                   const std::string& message, Events* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistRunLocked(const lockstep::v1::Run& run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistJobLocked(const lockstep::v1::Job& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::vector<RunData>> LoadRunsLocked(const JobState& js)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks a succeeded run's stored steps against its digests.
  absl::Status VerifyRunLocked(const JobState& js, const lockstep::v1::Run& run,
                               const std::string& reported_digest)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Dispatch(Events events);
  // Sets audit pins from the job's labels and placement.
  static void InitPins(JobState* js);
  bool IsFinished(lockstep::v1::JobState state) const;

  store::Store* const store_;
  WorkerRegistry* const registry_;
  const JobManagerOptions options_;
  const Clock clock_;

  mutable absl::Mutex mu_;
  // Unfinished jobs (and finished ones until evicted; see MaybeFinishJob).
  std::map<std::string, JobState> jobs_ ABSL_GUARDED_BY(mu_);
  // Assigned or running runs.
  std::map<std::string, RunRef> active_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);    // run ids
  std::map<std::string, int> load_ ABSL_GUARDED_BY(mu_);  // worker -> runs

  std::function<void(const lockstep::v1::Job&)> finished_hook_;

  absl::Mutex watch_mu_;
  int64_t next_token_ ABSL_GUARDED_BY(watch_mu_) = 1;
  std::map<int64_t, std::pair<std::string, Watcher>> watchers_
      ABSL_GUARDED_BY(watch_mu_);
};

// Deterministic digests of a model (its name excluded) and of a config (its
// thread count excluded: it never changes results).
std::string ModelDigest(const lockstep::v1::Model& model);
std::string ConfigDigest(const lockstep::v1::JobConfig& config);

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_JOB_MANAGER_H_
