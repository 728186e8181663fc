#include "server/job_manager.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/blob_digest.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace lockstep::server {

using ::lockstep::v1::Job;

JobManager::JobManager(store::Store* store, WorkerRegistry* registry,
                       JobManagerOptions options, Clock clock)
    : store_(store),
      options_(std::move(options)),
      clock_(std::move(clock)),
      queries_(store, clock_),
      quotas_(options_.quotas) {
  // The verdict worker reports to the scheduler only about jobs the
  // scheduler handed it, so neither runs before both exist.
  verdicts_ = std::make_unique<VerdictWorker>(
      store, clock_,
      [this](const Job& job, const absl::StatusOr<v1::Report>& report) {
        if (report.ok()) quotas_.Release(job.job_id());
        scheduler_->OnVerdict(job, report);
      });
  scheduler_ = std::make_unique<Scheduler>(
      store, registry, &events_, options_.scheduler, clock_,
      [this](const Job& job, const v1::TensorManifest& manifest) {
        verdicts_->Enqueue(job, manifest);
      });
}

JobManager::~JobManager() { Shutdown(); }

void JobManager::Shutdown() { verdicts_->Stop(); }

void JobManager::WaitForVerdicts() { verdicts_->WaitIdle(); }

absl::Status JobManager::Recover() {
  LS_RETURN_IF_ERROR(scheduler_->Recover());
  // Unfinished jobs count against their principals' quotas again.
  LS_ASSIGN_OR_RETURN(std::vector<std::string> ids,
                      store_->ListUnfinishedJobIds());
  for (const std::string& id : ids) {
    LS_ASSIGN_OR_RETURN(std::optional<Job> job, store_->GetJob(id));
    if (!job.has_value() || job->spec().labels().count(kAuditLabel)) {
      continue;
    }
    LS_ASSIGN_OR_RETURN(v1::TensorManifest manifest, store_->GetManifest(id));
    quotas_.Charge(job->submitted_by(), id, job->runs_size(),
                   JobFingerprintBytes(manifest, job->runs_size()));
  }
  return absl::OkStatus();
}

void JobManager::SetJobFinishedHook(std::function<void(const Job&)> hook) {
  events_.SetFinalHook(std::move(hook));
}

absl::StatusOr<Job> JobManager::Submit(const v1::SubmitJobRequest& request,
                                       const std::string& submitted_by) {
  return SubmitFrom(request, SubmissionSource::kPublic, submitted_by);
}

absl::StatusOr<Job> JobManager::SubmitInternal(
    const v1::SubmitJobRequest& request) {
  return SubmitFrom(request, SubmissionSource::kInternal, "");
}

absl::StatusOr<Job> JobManager::SubmitFrom(const v1::SubmitJobRequest& request,
                                           SubmissionSource source,
                                           const std::string& submitted_by) {
  const std::string& key = request.idempotency_key();
  LS_RETURN_IF_ERROR(ValidateIdempotencyKey(key));
  if (const std::string& digest = request.spec().model().parameters_digest();
      !digest.empty()) {
    LS_RETURN_IF_ERROR(
        ValidateBlobDigest(digest, "spec.model.parameters_digest"));
  }
  if (!key.empty()) {
    LS_ASSIGN_OR_RETURN(std::optional<std::string> existing,
                        store_->FindJobByIdempotencyKey(key));
    if (existing.has_value()) return GetJob(*existing);
  }
  LS_ASSIGN_OR_RETURN(Submission s,
                      ExpandSubmission(request, options_.submission, source,
                                       NewJobId(), clock_()));
  s.job.set_submitted_by(submitted_by);
  if (source == SubmissionSource::kPublic) {
    LS_RETURN_IF_ERROR(quotas_.Reserve(submitted_by, s.job.job_id(),
                                       s.job.runs_size(), s.fingerprint_bytes));
  }
  absl::Status inserted = store_->InsertJob(s.job, s.manifest, key);
  if (!inserted.ok()) quotas_.Release(s.job.job_id());
  if (inserted.code() == absl::StatusCode::kAlreadyExists && !key.empty()) {
    LS_ASSIGN_OR_RETURN(std::optional<std::string> existing,
                        store_->FindJobByIdempotencyKey(key));
    if (existing.has_value()) return GetJob(*existing);
  }
  LS_RETURN_IF_ERROR(inserted);
  LS_LOG(INFO) << "job " << s.job.job_id() << " submitted: model "
               << s.job.spec().model().name() << ", " << s.job.runs_size()
               << " runs";
  scheduler_->Add(s.job, s.manifest);
  std::optional<Job> now = scheduler_->Find(s.job.job_id(), nullptr);
  return now.has_value() ? *now : s.job;
}

bool JobManager::WorkerRunsBlob(const std::string& worker_id,
                                const std::string& digest) {
  return scheduler_->WorkerRunsBlob(worker_id, digest);
}

absl::StatusOr<Job> JobManager::GetJob(const std::string& job_id) {
  std::optional<Job> held = scheduler_->Find(job_id, nullptr);
  if (held.has_value()) return *held;
  LS_ASSIGN_OR_RETURN(std::optional<Job> job, store_->GetJob(job_id));
  if (!job.has_value()) {
    return absl::NotFoundError(absl::StrCat("job_id: no job \"", job_id, "\""));
  }
  return *job;
}

absl::StatusOr<v1::ListJobsResponse> JobManager::ListJobs(
    const v1::ListJobsRequest& request) {
  return queries_.ListJobs(request);
}

absl::StatusOr<Job> JobManager::Cancel(const std::string& job_id,
                                       const std::string& reason) {
  if (reason.size() > 1024) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "reason: %d bytes exceed the limit of 1024", reason.size()));
  }
  if (scheduler_->Find(job_id, nullptr).has_value()) {
    return scheduler_->Cancel(job_id, reason);
  }
  // Not in memory: unknown, or finished before a restart or an eviction.
  LS_ASSIGN_OR_RETURN(std::optional<Job> stored, store_->GetJob(job_id));
  if (!stored.has_value()) {
    return absl::NotFoundError(absl::StrCat("job_id: no job \"", job_id, "\""));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "job ", job_id, " is already ", v1::JobState_Name(stored->state())));
}

absl::StatusOr<v1::Report> JobManager::GetReport(const std::string& job_id) {
  return queries_.GetReport(job_id);
}

absl::StatusOr<v1::CompareRunsResponse> JobManager::CompareRuns(
    const std::string& run_a, const std::string& run_b) {
  return queries_.CompareRuns(run_a, run_b);
}

absl::StatusOr<v1::Certificate> JobManager::GetCertificate(
    const std::string& id) {
  return queries_.GetCertificate(id);
}

absl::StatusOr<v1::ListCertificatesResponse> JobManager::ListCertificates(
    const v1::ListCertificatesRequest& request) {
  return queries_.ListCertificates(request);
}

absl::StatusOr<int64_t> JobManager::Watch(const std::string& job_id,
                                          Watcher watcher) {
  bool final = false;
  std::optional<Job> job = scheduler_->Find(job_id, &final);
  if (!job.has_value()) {
    // Not in memory: finished long ago (or unknown).
    LS_ASSIGN_OR_RETURN(Job stored, GetJob(job_id));
    job = std::move(stored);
    final = job->state() == v1::JOB_SUCCEEDED ||
            job->state() == v1::JOB_FAILED || job->state() == v1::JOB_CANCELLED;
  }
  v1::JobEvent first;
  *first.mutable_job() = *job;
  first.set_message("snapshot");
  first.set_final(final);
  first.set_event_unix_ms(clock_());
  return events_.Watch(job_id, first, std::move(watcher));
}

void JobManager::Unwatch(int64_t token) { events_.Unwatch(token); }

void JobManager::OnWorkerConnected(const std::string& worker_id) {
  scheduler_->AssignQueued();
}

void JobManager::OnWorkerDisconnected(const std::string& worker_id) {
  // Runs stay with the worker until their leases expire: a worker (or a
  // network) that comes back in time carries on. Free slots elsewhere may
  // have appeared meanwhile, though.
  scheduler_->AssignQueued();
}

void JobManager::OnHeartbeat(const std::string& worker_id,
                             const v1::Heartbeat& heartbeat) {
  scheduler_->OnHeartbeat(worker_id, heartbeat);
}

bool JobManager::SubmitBatch(const std::string& worker_id,
                             v1::FingerprintBatch batch,
                             Scheduler::BatchDone done) {
  return scheduler_->SubmitBatch(worker_id, std::move(batch), std::move(done));
}

absl::StatusOr<v1::BatchAck> JobManager::OnBatch(
    const std::string& worker_id, const v1::FingerprintBatch& batch) {
  return scheduler_->OnBatch(worker_id, batch);
}

absl::Status JobManager::OnRunFinished(const std::string& worker_id,
                                       const v1::RunFinished& finished) {
  return scheduler_->OnRunFinished(worker_id, finished);
}

int JobManager::Sweep() { return scheduler_->Sweep(); }

size_t JobManager::JobsInMemory() const { return scheduler_->JobsInMemory(); }

}  // namespace lockstep::server
