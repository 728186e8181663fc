#include "server/lockstep_service.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace lockstep::server {
namespace {

using namespace ::lockstep::v1;  // NOLINT: request/response types

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context,
                               const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::Status NotBuilt(const char* rpc) {
  return grpc::Status(
      grpc::StatusCode::UNIMPLEMENTED,
      absl::StrCat("lockstep.v1.Lockstep/", rpc,
                   " is not available in this coordinator version (0.1.0): "
                   "it serves workers (ListWorkers, SetWorkerState) only"));
}

// A server-streaming reactor that ends at once with a status.
class FinishedWriter final : public grpc::ServerWriteReactor<JobEvent> {
 public:
  explicit FinishedWriter(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

grpc::ServerUnaryReactor* LockstepService::ListWorkers(
    grpc::CallbackServerContext* context, const ListWorkersRequest* request,
    ListWorkersResponse* response) {
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
  absl::StatusOr<Worker> w = registry_->SetAdminState(*request);
  if (!w.ok()) return Done(context, ToGrpcStatus(w.status()));
  *response = std::move(*w);
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* LockstepService::SubmitJob(
    grpc::CallbackServerContext* context, const SubmitJobRequest*, Job*) {
  return Done(context, NotBuilt("SubmitJob"));
}
grpc::ServerUnaryReactor* LockstepService::GetJob(
    grpc::CallbackServerContext* context, const GetJobRequest*, Job*) {
  return Done(context, NotBuilt("GetJob"));
}
grpc::ServerWriteReactor<JobEvent>* LockstepService::WatchJob(
    grpc::CallbackServerContext* context, const WatchJobRequest*) {
  return new FinishedWriter(NotBuilt("WatchJob"));
}
grpc::ServerUnaryReactor* LockstepService::ListJobs(
    grpc::CallbackServerContext* context, const ListJobsRequest*,
    ListJobsResponse*) {
  return Done(context, NotBuilt("ListJobs"));
}
grpc::ServerUnaryReactor* LockstepService::CancelJob(
    grpc::CallbackServerContext* context, const CancelJobRequest*, Job*) {
  return Done(context, NotBuilt("CancelJob"));
}
grpc::ServerUnaryReactor* LockstepService::GetReport(
    grpc::CallbackServerContext* context, const GetReportRequest*, Report*) {
  return Done(context, NotBuilt("GetReport"));
}
grpc::ServerUnaryReactor* LockstepService::CompareRuns(
    grpc::CallbackServerContext* context, const CompareRunsRequest*,
    CompareRunsResponse*) {
  return Done(context, NotBuilt("CompareRuns"));
}
grpc::ServerUnaryReactor* LockstepService::GetCertificate(
    grpc::CallbackServerContext* context, const GetCertificateRequest*,
    Certificate*) {
  return Done(context, NotBuilt("GetCertificate"));
}
grpc::ServerUnaryReactor* LockstepService::ListCertificates(
    grpc::CallbackServerContext* context, const ListCertificatesRequest*,
    ListCertificatesResponse*) {
  return Done(context, NotBuilt("ListCertificates"));
}
grpc::ServerUnaryReactor* LockstepService::StartAudit(
    grpc::CallbackServerContext* context, const StartAuditRequest*, Audit*) {
  return Done(context, NotBuilt("StartAudit"));
}
grpc::ServerUnaryReactor* LockstepService::GetAudit(
    grpc::CallbackServerContext* context, const GetAuditRequest*, Audit*) {
  return Done(context, NotBuilt("GetAudit"));
}
grpc::ServerUnaryReactor* LockstepService::ListAudits(
    grpc::CallbackServerContext* context, const ListAuditsRequest*,
    ListAuditsResponse*) {
  return Done(context, NotBuilt("ListAudits"));
}

}  // namespace lockstep::server
