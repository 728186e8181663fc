#include "server/audit_manager.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "model/spec_io.h"
#include "server/verdicts.h"

namespace lockstep::server {

using ::lockstep::v1::Audit;
using ::lockstep::v1::Job;

AuditManager::AuditManager(store::Store* store, WorkerRegistry* registry,
                           JobManager* jobs, std::string zoo_dir, Clock clock,
                           int64_t max_workers)
    : store_(store),
      registry_(registry),
      jobs_(jobs),
      zoo_dir_(std::move(zoo_dir)),
      clock_(std::move(clock)),
      max_workers_(max_workers) {
  jobs_->SetJobFinishedHook([this](const Job& job) { OnJobFinished(job); });
}

absl::StatusOr<Audit> AuditManager::Start(
    const v1::StartAuditRequest& request) {
  const v1::AuditSpec& spec = request.spec();
  absl::StatusOr<v1::Model> model;
  absl::StatusOr<v1::JobConfig> config;
  std::string name;  // what the log and the stored spec call the workload
  if (spec.has_model()) {
    // The team's own model: validated with the job, by SubmitInternal.
    if (!spec.workload().empty()) {
      return absl::InvalidArgumentError(
          "spec: set either workload (a standard workload) or model, not "
          "both");
    }
    if (!spec.has_config()) {
      return absl::InvalidArgumentError(
          "spec.config: required with spec.model");
    }
    model = spec.model();
    config = spec.config();
    name = spec.model().name().empty() ? "unnamed model" : spec.model().name();
    if (name.size() > 64) name = name.substr(0, 64);
    if (!spec.model().parameters_digest().empty()) {
      absl::StrAppend(&name, " (parameters ",
                      spec.model().parameters_digest().substr(0, 19), ")");
    }
  } else {
    if (spec.has_config()) {
      return absl::InvalidArgumentError(
          "spec.config: only with spec.model (a standard workload brings its "
          "own)");
    }
    name = spec.workload();
    if (name.empty() || name.size() > 64) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "spec.workload: length %d is outside 1..64 (or set spec.model)",
          name.size()));
    }
    for (char c : name) {
      if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' ||
            c == '-')) {
        return absl::InvalidArgumentError(
            "spec.workload: only A-Z a-z 0-9 _ - are allowed (a model-zoo "
            "name)");
      }
    }
    model =
        model::ReadModelFile(absl::StrCat(zoo_dir_, "/", name, "/model.json"));
    config = model::ReadJobConfigFile(
        absl::StrCat(zoo_dir_, "/", name, "/config.json"));
    if (!model.ok() || !config.ok()) {
      return absl::NotFoundError(absl::StrCat(
          "spec.workload: no standard workload \"", name, "\" in ", zoo_dir_,
          " (", (!model.ok() ? model.status() : config.status()).message(),
          ")"));
    }
  }
  // The selected workers: connected, matching, in name order.
  std::vector<LiveWorker> selected;
  const std::vector<LiveWorker> live = registry_->LiveWorkers();
  std::set<std::string> wanted(spec.worker_ids().begin(),
                               spec.worker_ids().end());
  if (!spec.all_workers() && wanted.empty() && spec.worker_labels().empty()) {
    return absl::InvalidArgumentError(
        "spec: set all_workers, worker_ids or worker_labels");
  }
  for (const LiveWorker& w : live) {
    if (!wanted.empty() && wanted.count(w.worker_id) == 0) continue;
    if (wanted.empty() && w.admin_state != v1::ACTIVE) continue;
    bool labels_ok = true;
    for (const auto& [k, v] : spec.worker_labels()) {
      auto it = w.labels.find(k);
      if (it == w.labels.end() || it->second != v) labels_ok = false;
    }
    if (!labels_ok) continue;
    selected.push_back(w);
  }
  for (const std::string& id : wanted) {
    if (std::none_of(selected.begin(), selected.end(),
                     [&](const LiveWorker& w) { return w.worker_id == id; })) {
      return absl::FailedPreconditionError(absl::StrCat(
          "spec.worker_ids: worker \"", id, "\" is not connected"));
    }
  }
  if (selected.empty()) {
    return absl::FailedPreconditionError(
        "spec: no connected, active worker matches the selection");
  }
  if (static_cast<int64_t>(selected.size()) > max_workers_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "spec: %d workers selected, an audit runs on at most %d (the "
        "coordinator's --max_runs)",
        selected.size(), max_workers_));
  }

  Audit audit;
  absl::BitGen gen;
  audit.set_audit_id(
      absl::StrFormat("audit-%016x", absl::Uniform<uint64_t>(gen)));
  *audit.mutable_spec() = spec;
  if (spec.has_model()) {
    // The job keeps the model and config; the audit record names them.
    audit.mutable_spec()->clear_model();
    audit.mutable_spec()->clear_config();
    audit.mutable_spec()->set_model_name(name);
  }
  audit.set_state(v1::AUDIT_RUNNING);
  audit.set_started_unix_ms(clock_());

  v1::SubmitJobRequest submit;
  v1::JobSpec* job = submit.mutable_spec();
  *job->mutable_model() = *model;
  *job->mutable_config() = *config;
  job->mutable_config()->set_determinism(v1::CANONICAL);
  job->mutable_config()->clear_op_algorithms();
  job->mutable_config()->clear_capture();  // every tensor, every step
  job->mutable_placement()->set_runs(static_cast<int32_t>(selected.size()));
  job->mutable_placement()->set_scope(v1::ACROSS_CLASSES);
  for (const LiveWorker& w : selected) {
    job->mutable_placement()->add_worker_ids(w.worker_id);
  }
  (*job->mutable_labels())[JobManager::kAuditLabel] = audit.audit_id();
  // The record first, so the job's end always finds its audit.
  LS_RETURN_IF_ERROR(store_->PutAudit(audit));
  // The reserved audit label: only this internal path may set it.
  absl::StatusOr<Job> submitted = jobs_->SubmitInternal(submit);
  if (!submitted.ok()) {
    audit.set_state(v1::AUDIT_FAILED);
    audit.set_summary(absl::StrCat("could not start the workload: ",
                                   submitted.status().message()));
    audit.set_finished_unix_ms(clock_());
    LS_RETURN_IF_ERROR(store_->PutAudit(audit));
    return submitted.status();
  }
  audit.set_job_id(submitted->job_id());
  LS_RETURN_IF_ERROR(store_->PutAudit(audit));
  LS_LOG(INFO) << "audit " << audit.audit_id() << " started: workload " << name
               << " on " << selected.size() << " worker(s), job "
               << submitted->job_id();
  return audit;
}

absl::StatusOr<Audit> AuditManager::Get(const std::string& audit_id) {
  LS_ASSIGN_OR_RETURN(std::optional<Audit> audit, store_->GetAudit(audit_id));
  if (!audit.has_value()) {
    return absl::NotFoundError(
        absl::StrCat("audit_id: no audit \"", audit_id, "\""));
  }
  return *audit;
}

absl::StatusOr<v1::ListAuditsResponse> AuditManager::List(
    const v1::ListAuditsRequest& request) {
  if (request.page_size() < 0 || request.page_size() > 500) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "page_size: %d is outside 0..500", request.page_size()));
  }
  LS_ASSIGN_OR_RETURN(
      std::vector<Audit> audits,
      store_->ListAudits(request.page_size() == 0 ? 50 : request.page_size()));
  v1::ListAuditsResponse response;
  for (Audit& a : audits) *response.add_audits() = std::move(a);
  return response;
}

void AuditManager::OnJobFinished(const Job& job) {
  auto label = job.spec().labels().find(JobManager::kAuditLabel);
  if (label == job.spec().labels().end()) return;
  absl::StatusOr<std::optional<Audit>> audit = store_->GetAudit(label->second);
  if (!audit.ok() || !audit->has_value()) {
    LS_LOG(ERROR) << "job " << job.job_id() << " ended but its audit "
                  << label->second << " is not stored";
    return;
  }
  Audit a = **audit;
  if (a.state() != v1::AUDIT_RUNNING) return;
  absl::Status s = Finish(&a, job);
  if (!s.ok()) LS_LOG(ERROR) << "audit " << a.audit_id() << ": " << s;
}

absl::Status AuditManager::Finish(Audit* audit, const Job& job) {
  audit->set_job_id(job.job_id());
  audit->set_finished_unix_ms(clock_());
  if (job.state() == v1::JOB_CANCELLED) {
    audit->set_state(v1::AUDIT_FAILED);
    audit->set_summary(
        absl::StrCat("the audit's job was cancelled: ", job.failure_reason()));
    return store_->PutAudit(*audit);
  }
  LS_ASSIGN_OR_RETURN(v1::TensorManifest manifest,
                      store_->GetManifest(job.job_id()));
  // Streamed: memory for one step of each run, whatever the workload.
  std::vector<RunSteps> runs = OpenRuns(store_, job);
  std::map<std::string, std::string> class_names;
  std::map<std::string, std::string> worker_names;
  LS_ASSIGN_OR_RETURN(std::vector<v1::Worker> workers, store_->ListWorkers());
  for (const v1::Worker& w : workers) {
    class_names[w.profile().hardware_class_digest()] =
        w.profile().hardware_class();
    worker_names[w.worker_id()] = w.name();
  }
  // A run that never started has no worker yet: report its pinned worker.
  const auto& pinned = job.spec().placement().worker_ids();
  for (RunSteps& r : runs) {
    if (r.run.worker_id().empty() && r.run.index() < pinned.size()) {
      r.run.set_worker_id(pinned[r.run.index()]);
    }
  }
  LS_RETURN_IF_ERROR(
      EvaluateAudit(job, manifest, std::move(runs), class_names, audit));
  const int64_t now = clock_();
  for (v1::AuditWorkerResult& w : *audit->mutable_workers()) {
    auto name = worker_names.find(w.worker_id());
    if (name != worker_names.end()) w.set_worker_name(name->second);
    std::string detail = absl::StrCat("audit ", audit->audit_id(), ": ",
                                      v1::WorkerHealth_Name(w.health()));
    if (w.has_divergence()) {
      absl::StrAppendFormat(
          &detail, " (first divergence at step %d, layer \"%s\", %s)",
          w.divergence().step(), w.divergence().tensor().layer(),
          v1::TensorRole_Name(w.divergence().tensor().role()));
    }
    absl::Status ev =
        store_->AppendWorkerEvent(w.worker_id(), now, "audit", detail);
    if (!ev.ok()) LS_LOG(WARNING) << "worker event not stored: " << ev;
    if (w.health() == v1::OUTLIER && audit->spec().quarantine_outliers()) {
      v1::SetWorkerStateRequest q;
      q.set_worker_id(w.worker_id());
      q.set_admin_state(v1::QUARANTINED);
      q.set_reason(detail);
      absl::StatusOr<v1::Worker> done = registry_->SetAdminState(q);
      w.set_quarantined(done.ok());
      if (!done.ok()) LS_LOG(WARNING) << "quarantine failed: " << done.status();
    }
  }
  audit->set_state(v1::AUDIT_DONE);
  LS_LOG(INFO) << "audit " << audit->audit_id()
               << " done: " << audit->summary();
  return store_->PutAudit(*audit);
}

absl::Status AuditManager::Recover() {
  LS_ASSIGN_OR_RETURN(std::vector<Audit> running, store_->ListRunningAudits());
  for (Audit& a : running) {
    if (a.job_id().empty()) {
      a.set_state(v1::AUDIT_FAILED);
      a.set_summary("the coordinator stopped before the audit's job started");
      LS_RETURN_IF_ERROR(store_->PutAudit(a));
      continue;
    }
    absl::StatusOr<Job> job = jobs_->GetJob(a.job_id());
    if (!job.ok()) continue;
    const v1::JobState s = job->state();
    if (s == v1::JOB_SUCCEEDED || s == v1::JOB_FAILED ||
        s == v1::JOB_CANCELLED) {
      LS_RETURN_IF_ERROR(Finish(&a, *job));
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep::server
