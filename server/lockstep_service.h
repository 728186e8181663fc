// lockstep.v1.Lockstep, the public API. This class only validates and
// translates; the work is done by WorkerRegistry, JobManager (submission,
// scheduler, verdicts, queries) and AuditManager. Status converts to
// grpc::Status here.
#ifndef LOCKSTEP_SERVER_LOCKSTEP_SERVICE_H_
#define LOCKSTEP_SERVER_LOCKSTEP_SERVICE_H_

#include "lockstep/v1/lockstep_service.grpc.pb.h"
#include "server/audit_manager.h"
#include "server/auth.h"
#include "server/job_manager.h"
#include "server/worker_registry.h"

namespace lockstep::server {

class LockstepService final : public lockstep::v1::Lockstep::CallbackService {
 public:
  // `registry`, `jobs`, `audits` and `auth` must outlive the service. Every
  // RPC is authorised by `auth` first: reads need viewer, SubmitJob and
  // CancelJob submitter, SetWorkerState and StartAudit admin (both are
  // recorded in the admin log).
  LockstepService(WorkerRegistry* registry, JobManager* jobs,
                  AuditManager* audits, const Authorizer* auth, Clock clock)
      : registry_(registry),
        jobs_(jobs),
        audits_(audits),
        auth_(auth),
        clock_(std::move(clock)) {}

  grpc::ServerUnaryReactor* ListWorkers(
      grpc::CallbackServerContext* context,
      const lockstep::v1::ListWorkersRequest* request,
      lockstep::v1::ListWorkersResponse* response) override;
  grpc::ServerUnaryReactor* SetWorkerState(
      grpc::CallbackServerContext* context,
      const lockstep::v1::SetWorkerStateRequest* request,
      lockstep::v1::Worker* response) override;

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* context,
                                      const lockstep::v1::SubmitJobRequest*,
                                      lockstep::v1::Job*) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const lockstep::v1::GetJobRequest*,
                                   lockstep::v1::Job*) override;
  grpc::ServerWriteReactor<lockstep::v1::JobEvent>* WatchJob(
      grpc::CallbackServerContext* context,
      const lockstep::v1::WatchJobRequest*) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const lockstep::v1::ListJobsRequest*,
                                     lockstep::v1::ListJobsResponse*) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context,
                                      const lockstep::v1::CancelJobRequest*,
                                      lockstep::v1::Job*) override;
  grpc::ServerUnaryReactor* GetReport(grpc::CallbackServerContext* context,
                                      const lockstep::v1::GetReportRequest*,
                                      lockstep::v1::Report*) override;
  grpc::ServerUnaryReactor* CompareRuns(
      grpc::CallbackServerContext* context,
      const lockstep::v1::CompareRunsRequest*,
      lockstep::v1::CompareRunsResponse*) override;
  grpc::ServerUnaryReactor* GetCertificate(
      grpc::CallbackServerContext* context,
      const lockstep::v1::GetCertificateRequest*,
      lockstep::v1::Certificate*) override;
  grpc::ServerUnaryReactor* ListCertificates(
      grpc::CallbackServerContext* context,
      const lockstep::v1::ListCertificatesRequest*,
      lockstep::v1::ListCertificatesResponse*) override;
  grpc::ServerUnaryReactor* StartAudit(grpc::CallbackServerContext* context,
                                       const lockstep::v1::StartAuditRequest*,
                                       lockstep::v1::Audit*) override;
  grpc::ServerUnaryReactor* GetAudit(grpc::CallbackServerContext* context,
                                     const lockstep::v1::GetAuditRequest*,
                                     lockstep::v1::Audit*) override;
  grpc::ServerUnaryReactor* ListAudits(
      grpc::CallbackServerContext* context,
      const lockstep::v1::ListAuditsRequest*,
      lockstep::v1::ListAuditsResponse*) override;

 private:
  // The refusal when the caller may not do what needs `needed` (the
  // reactor to return), or nullptr with `*who` set.
  grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* context,
                                   Role needed, Principal* who) const;

  WorkerRegistry* const registry_;
  JobManager* const jobs_;
  AuditManager* const audits_;
  const Authorizer* const auth_;
  const Clock clock_;
};

// absl::Status -> grpc::Status, keeping code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_LOCKSTEP_SERVICE_H_
