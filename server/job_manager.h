// Jobs from submission to verdict, composed of one class per
// responsibility:
//   ExpandSubmission (submission.h)  validation, plan, manifest, runs and
//                                    digests; pure
//   Scheduler (scheduler.h)          queue, leases, pins, the one mutex
//   VerdictWorker (verdicts.h)       judges each finished job once, on its
//                                    own thread, and stores the verdict
//   JobEvents (job_events.h)         watchers
//   JobQueries (job_queries.h)       reports, comparisons, lists and
//                                    certificates, read from the store
// JobManager wires them together behind the API the services use.
//
// Thread-safe.
#ifndef LOCKSTEP_SERVER_JOB_MANAGER_H_
#define LOCKSTEP_SERVER_JOB_MANAGER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lockstep/v1/lockstep_service.pb.h"
#include "lockstep/v1/worker_gateway.pb.h"
#include "model/job_config.h"
#include "server/job_events.h"
#include "server/job_queries.h"
#include "server/quotas.h"
#include "server/scheduler.h"
#include "server/store/store.h"
#include "server/submission.h"
#include "server/verdicts.h"
#include "server/worker_registry.h"

namespace lockstep::server {

struct JobManagerOptions {
  // Leases, attempts, finished jobs in memory, pinned-run deadlines.
  SchedulerOptions scheduler;
  // Model and config limits and the fingerprint limits per job.
  SubmissionLimits submission;
  // What each principal's unfinished jobs may hold (user submissions only;
  // audits are the coordinator's own).
  QuotaOptions quotas;
};

class JobManager final : public WorkerRegistry::Listener {
 public:
  using Watcher = JobEvents::Watcher;

  // `store` and `registry` must outlive the manager.
  JobManager(store::Store* store, WorkerRegistry* registry,
             JobManagerOptions options, Clock clock);
  ~JobManager() override;  // Shutdown()
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // Loads unfinished jobs after a restart and judges finished jobs whose
  // verdict is missing (never one already stored).
  absl::Status Recover();

  static constexpr const char* kAuditLabel = ::lockstep::server::kAuditLabel;

  // Called once for every job that finishes, after its verdict is stored
  // (outside all locks, on the verdict worker's thread).
  void SetJobFinishedHook(std::function<void(const lockstep::v1::Job&)> hook);

  // --- Public API -----------------------------------------------------------
  // A user's submission: labels starting with "lockstep." are refused.
  // `submitted_by` (the caller's principal; "" without tokens) is stored in
  // Job.submitted_by.
  absl::StatusOr<lockstep::v1::Job> Submit(
      const lockstep::v1::SubmitJobRequest& request,
      const std::string& submitted_by = "");
  // The coordinator's own jobs (audits), which may carry reserved labels.
  absl::StatusOr<lockstep::v1::Job> SubmitInternal(
      const lockstep::v1::SubmitJobRequest& request);
  absl::StatusOr<lockstep::v1::Job> GetJob(const std::string& job_id);
  // Whether `worker_id` holds a run of a job whose parameters are blob
  // `digest` (WorkerGateway.FetchBlob).
  bool WorkerRunsBlob(const std::string& worker_id, const std::string& digest);
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
  // token. The first call (a snapshot) happens before Watch returns; the
  // last one is final (the job's verdict is stored).
  absl::StatusOr<int64_t> Watch(const std::string& job_id, Watcher watcher);
  void Unwatch(int64_t token);

  // --- Worker side ----------------------------------------------------------
  void OnWorkerConnected(const std::string& worker_id);
  void OnWorkerDisconnected(const std::string& worker_id) override;
  void OnHeartbeat(const std::string& worker_id,
                   const lockstep::v1::Heartbeat& heartbeat);
  // Queues the batch for storing; `done` receives the ack to send once it
  // is committed, or why it was refused (see Scheduler::SubmitBatch).
  // Returns false when the store's ingest queue is full.
  bool SubmitBatch(const std::string& worker_id,
                   lockstep::v1::FingerprintBatch batch,
                   Scheduler::BatchDone done);
  // Stores the batch; returns the ack to send. Errors become Rejected.
  absl::StatusOr<lockstep::v1::BatchAck> OnBatch(
      const std::string& worker_id, const lockstep::v1::FingerprintBatch& b);
  // Records a run's result; OK only once it is committed to the store.
  absl::Status OnRunFinished(const std::string& worker_id,
                             const lockstep::v1::RunFinished& finished);
  // See Scheduler::Sweep. Returns how many runs were re-queued.
  int Sweep();
  // Jobs held in memory (unfinished ones plus recently finished ones).
  size_t JobsInMemory() const;

  // Blocks until every finished job handed to the verdict worker so far
  // has been judged (tests, tools).
  void WaitForVerdicts();
  // Judges what is queued and stops the verdict worker. Idempotent.
  void Shutdown();

 private:
  absl::StatusOr<lockstep::v1::Job> SubmitFrom(
      const lockstep::v1::SubmitJobRequest& request, SubmissionSource source,
      const std::string& submitted_by);

  store::Store* const store_;
  const JobManagerOptions options_;
  const Clock clock_;
  JobEvents events_;
  JobQueries queries_;
  Quotas quotas_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<VerdictWorker> verdicts_;
};

// Deterministic digests (see submission.h), kept here for callers.
using ::lockstep::server::ConfigDigest;
using ::lockstep::server::ModelDigest;

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_JOB_MANAGER_H_
