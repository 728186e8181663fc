#include "server/lockstep_service.h"

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/job_events.h"
#include "server/message_checks.h"

namespace lockstep::server {
namespace {

using namespace ::lockstep::v1;  // NOLINT: request/response types

// Events a WatchJob stream keeps waiting behind the one being written.
constexpr size_t kWatchPendingEvents = 16;

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context,
                               const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// INVALID_ARGUMENT naming the path of the first field of `request` this
// build does not know ("request.spec: unknown field 99 ..."); OK otherwise.
grpc::Status Unknown(const google::protobuf::Message& request) {
  return ToGrpcStatus(RefuseUnknownFields(request, "request"));
}

// A WatchJob stream refused before it starts.
class RefusedWatch final : public grpc::ServerWriteReactor<JobEvent> {
 public:
  explicit RefusedWatch(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

template <typename T>
grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context,
                                absl::StatusOr<T> result, T* response) {
  if (!result.ok()) return Done(context, ToGrpcStatus(result.status()));
  *response = std::move(*result);
  return Done(context, grpc::Status::OK);
}

// WatchJob: writes the JobEvents of one job, one write in flight at a time,
// and finishes after the final one. At most kWatchPendingEvents wait behind
// the write in flight: a slow client gets the latest state instead of every
// intermediate one (WatchQueue), so it cannot grow the coordinator's memory.
// The watcher callback may run on any thread, also after OnDone: it reaches
// the reactor only through `link`, which OnDone clears.
class JobWatcher final : public grpc::ServerWriteReactor<JobEvent> {
 public:
  struct Link {
    absl::Mutex mu;
    JobWatcher* reactor ABSL_GUARDED_BY(mu) = nullptr;
  };

  JobWatcher(JobManager* jobs, const std::string& job_id)
      : jobs_(jobs),
        link_(std::make_shared<Link>()),
        queue_(kWatchPendingEvents) {
    {
      absl::MutexLock lock(&link_->mu);
      link_->reactor = this;
    }
    std::weak_ptr<Link> weak = link_;
    absl::StatusOr<int64_t> token =
        jobs_->Watch(job_id, [weak](const JobEvent& e) {
          std::shared_ptr<Link> link = weak.lock();
          if (!link) return;
          absl::MutexLock lock(&link->mu);
          if (link->reactor != nullptr) link->reactor->Push(e);
        });
    if (!token.ok()) {
      absl::MutexLock lock(&mu_);
      finished_ = true;
      Finish(ToGrpcStatus(token.status()));
      return;
    }
    absl::MutexLock lock(&mu_);
    token_ = *token;
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    bool was_final = false;
    const bool more = queue_.Pop(&was_final);
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "client gone"));
    } else if (was_final) {
      FinishLocked(grpc::Status::OK);
    } else if (more && !finished_) {
      StartWrite(&queue_.Front());
    }
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&link_->mu);
      link_->reactor = nullptr;
    }
    int64_t token;
    {
      absl::MutexLock lock(&mu_);
      token = token_;
    }
    if (token != 0) jobs_->Unwatch(token);
    delete this;
  }

 private:
  void Push(const JobEvent& e) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    if (queue_.Push(e)) StartWrite(&queue_.Front());
  }

  void FinishLocked(const grpc::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(s);
  }

  JobManager* const jobs_;
  const std::shared_ptr<Link> link_;
  absl::Mutex mu_;
  WatchQueue queue_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  int64_t token_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

grpc::ServerUnaryReactor* LockstepService::Refuse(
    grpc::CallbackServerContext* context, Role needed, Principal* who) const {
  absl::StatusOr<Principal> p = auth_->Authorize(*context, needed);
  if (!p.ok()) return Done(context, ToGrpcStatus(p.status()));
  *who = std::move(*p);
  return nullptr;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

grpc::ServerUnaryReactor* LockstepService::ListWorkers(
    grpc::CallbackServerContext* context, const ListWorkersRequest* request,
    ListWorkersResponse* response) {
  Principal who;
  if (auto* r = Refuse(context, Role::kViewer, &who)) return r;
  if (grpc::Status s = Unknown(*request); !s.ok()) return Done(context, s);
  absl::StatusOr<std::vector<Worker>> workers =
      registry_->List(request->include_gone());
  if (!workers.ok()) return Done(context, ToGrpcStatus(workers.status()));
  for (Worker& w : *workers) *response->add_workers() = std::move(w);
  response->set_server_unix_ms(clock_());
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* LockstepService::SetWorkerState(
    grpc::CallbackServerContext* context, const SetWorkerStateRequest* request,
    Worker* response) {
  Principal who;
  if (auto* r = Refuse(context, Role::kAdmin, &who)) return r;
  if (grpc::Status s = Unknown(*request); !s.ok()) return Done(context, s);
  absl::StatusOr<Worker> w = registry_->SetAdminState(*request);
  auth_->LogAdminAction(
      who, "set_worker_state", request->worker_id(),
      absl::StrCat(WorkerAdminState_Name(request->admin_state()), " reason=\"",
                   request->reason(), "\""),
      w.status());
  if (!w.ok()) return Done(context, ToGrpcStatus(w.status()));
  *response = std::move(*w);
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* LockstepService::SubmitJob(
    grpc::CallbackServerContext* context, const SubmitJobRequest* request,
    Job* response) {
  Principal who;
  if (auto* r = Refuse(context, Role::kSubmitter, &who)) return r;
  if (grpc::Status s = Unknown(*request); !s.ok()) return Done(context, s);
  return Reply(context, jobs_->Submit(*request, who.name), response);
}
grpc::ServerUnaryReactor* LockstepService::GetJob(
    grpc::CallbackServerContext* context, const GetJobRequest* request,
    Job* response) {
  Principal who;
  if (auto* r = Refuse(context, Role::kViewer, &who)) return r;
  if (grpc::Status s = Unknown(*request); !s.ok()) return Done(context, s);
  if (request->job_id().empty()) {
    return Done(context, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                      "job_id: must be set"));
  }
  return Reply(context, jobs_->GetJob(request->job_id()), response);
}
grpc::ServerWriteReactor<JobEvent>* LockstepService::WatchJob(
    grpc::CallbackServerContext* context, const WatchJobRequest* request) {
  if (absl::StatusOr<Principal> who = auth_->Authorize(*context, Role::kViewer);
      !who.ok()) {
    return new RefusedWatch(ToGrpcStatus(who.status()));
  }
  if (grpc::Status s = Unknown(*request); !s.ok()) {
    return new RefusedWatch(s);
  }
  return new JobWatcher(jobs_, request->job_id());
}
grpc::ServerUnaryReactor* LockstepService::ListJobs(
    grpc::CallbackServerContext* context, const ListJobsRequest* request,
    ListJobsResponse* response) {
  Principal who;
  if (auto* r = Refuse(context, Role::kViewer, &who)) return r;
  if (grpc::Status s = Unknown(*request); !s.ok()) return Done(context, s);
  return Reply(context, jobs_->ListJobs(*request), response);
}
grpc::ServerUnaryReactor* LockstepService::CancelJob(
    grpc::CallbackServerContext* context, const CancelJobRequest* request,
    Job* response) {
  Principal who;
  if (auto* r = Refuse(context, Role::kSubmitter, &who)) return r;
  if (grpc::Status s = Unknown(*request); !s.ok()) return Done(context, s);
  return Reply(context, jobs_->Cancel(request->job_id(), request->reason()),
               response);
}
grpc::ServerUnaryReactor* LockstepService::GetReport(
    grpc::CallbackServerContext* context, const GetReportRequest* request,
    Report* response) {
  Principal who;
  if (auto* r = Refuse(context, Role::kViewer, &who)) return r;
  if (grpc::Status s = Unknown(*request); !s.ok()) return Done(context, s);
  return Reply(context, jobs_->GetReport(request->job_id()), response);
}
grpc::ServerUnaryReactor* LockstepService::CompareRuns(
    grpc::CallbackServerContext* context, const CompareRunsRequest* request,
    CompareRunsResponse* response) {
  Principal who;
  if (auto* r = Refuse(context, Role::kViewer, &who)) return r;
  if (grpc::Status s = Unknown(*request); !s.ok()) return Done(context, s);
  return Reply(context, jobs_->CompareRuns(request->run_a(), request->run_b()),
               response);
}
grpc::ServerUnaryReactor* LockstepService::GetCertificate(
    grpc::CallbackServerContext* context, const GetCertificateRequest* request,
    Certificate* response) {
  Principal who;
  if (auto* r = Refuse(context, Role::kViewer, &who)) return r;
  if (grpc::Status s = Unknown(*request); !s.ok()) return Done(context, s);
  return Reply(context, jobs_->GetCertificate(request->certificate_id()),
               response);
}
grpc::ServerUnaryReactor* LockstepService::ListCertificates(
    grpc::CallbackServerContext* context,
    const ListCertificatesRequest* request,
    ListCertificatesResponse* response) {
  Principal who;
  if (auto* r = Refuse(context, Role::kViewer, &who)) return r;
  if (grpc::Status s = Unknown(*request); !s.ok()) return Done(context, s);
  return Reply(context, jobs_->ListCertificates(*request), response);
}
grpc::ServerUnaryReactor* LockstepService::StartAudit(
    grpc::CallbackServerContext* context, const StartAuditRequest* request,
    Audit* response) {
  Principal who;
  if (auto* r = Refuse(context, Role::kAdmin, &who)) return r;
  if (grpc::Status s = Unknown(*request); !s.ok()) return Done(context, s);
  absl::StatusOr<Audit> audit = audits_->Start(*request);
  auth_->LogAdminAction(
      who, "start_audit",
      request->spec().has_model()
          ? absl::StrCat("model:", request->spec().model().name())
          : request->spec().workload(),
      absl::StrCat(
          audit.ok() ? absl::StrCat("audit_id=", audit->audit_id(), " ") : "",
          "quarantine_outliers=",
          request->spec().quarantine_outliers() ? "true" : "false"),
      audit.status());
  return Reply(context, std::move(audit), response);
}
grpc::ServerUnaryReactor* LockstepService::GetAudit(
    grpc::CallbackServerContext* context, const GetAuditRequest* request,
    Audit* response) {
  Principal who;
  if (auto* r = Refuse(context, Role::kViewer, &who)) return r;
  if (grpc::Status s = Unknown(*request); !s.ok()) return Done(context, s);
  return Reply(context, audits_->Get(request->audit_id()), response);
}
grpc::ServerUnaryReactor* LockstepService::ListAudits(
    grpc::CallbackServerContext* context, const ListAuditsRequest* request,
    ListAuditsResponse* response) {
  Principal who;
  if (auto* r = Refuse(context, Role::kViewer, &who)) return r;
  if (grpc::Status s = Unknown(*request); !s.ok()) return Done(context, s);
  return Reply(context, audits_->List(*request), response);
}

}  // namespace lockstep::server
