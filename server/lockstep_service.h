// lockstep.v1.Lockstep, the public API. This class only validates and
// translates; the work is done by WorkerRegistry, JobManager (submission,
// scheduler, verdicts, queries) and AuditManager. Status converts to
// grpc::Status here.
#ifndef LOCKSTEP_SERVER_LOCKSTEP_SERVICE_H_
#define LOCKSTEP_SERVER_LOCKSTEP_SERVICE_H_

#include "lockstep/v1/lockstep_service.grpc.pb.h"
#include "server/audit_manager.h"
#include "server/auth.h"
#include "server/blob_store.h"
#include "server/job_manager.h"
#include "server/worker_registry.h"

namespace lockstep::server {

class LockstepService final : public lockstep::v1::Lockstep::CallbackService {
 public:
  // `registry`, `jobs`, `audits`, `blobs` and `auth` must outlive the
  // service. Every RPC is authorised by `auth` first: reads (and StatBlob)
  // need viewer, SubmitJob, CancelJob and UploadBlob submitter,
  // SetWorkerState, StartAudit and CollectBlobs admin (recorded in the
  // admin log).
  LockstepService(WorkerRegistry* registry, JobManager* jobs,
                  AuditManager* audits, BlobStore* blobs,
                  const Authorizer* auth, Clock clock)
      : registry_(registry),
        jobs_(jobs),
        audits_(audits),
        blobs_(blobs),
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

  // Blobs (lockstep_service_blobs.cc).
  grpc::ServerReadReactor<lockstep::v1::UploadBlobRequest>* UploadBlob(
      grpc::CallbackServerContext* context,
      lockstep::v1::BlobInfo* response) override;
  grpc::ServerUnaryReactor* StatBlob(grpc::CallbackServerContext* context,
                                     const lockstep::v1::StatBlobRequest*,
                                     lockstep::v1::StatBlobResponse*) override;
  grpc::ServerUnaryReactor* CollectBlobs(
      grpc::CallbackServerContext* context,
      const lockstep::v1::CollectBlobsRequest*,
      lockstep::v1::CollectBlobsResponse*) override;

 private:
  // The refusal when the caller may not do what needs `needed` (the
  // reactor to return), or nullptr with `*who` set.
  grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* context,
                                   Role needed, Principal* who) const;

  WorkerRegistry* const registry_;
  JobManager* const jobs_;
  AuditManager* const audits_;
  BlobStore* const blobs_;
  const Authorizer* const auth_;
  const Clock clock_;
};

// absl::Status -> grpc::Status, keeping code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// The public form of a blob row.
lockstep::v1::BlobInfo ToBlobInfo(const store::BlobRecord& r);

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_LOCKSTEP_SERVICE_H_
