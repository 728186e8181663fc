// The `lockstep` CLI's view of the coordinator: one method per command,
// each a unary call with a deadline, returning absl::StatusOr with the
// server's code and message.
//
// Thread-compatible.
#ifndef LOCKSTEP_CLIENT_CLIENT_H_
#define LOCKSTEP_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/grpc_limits.h"
#include "common/transport.h"
#include "grpcpp/grpcpp.h"
#include "lockstep/v1/lockstep_service.grpc.pb.h"

namespace lockstep::client {

struct ClientOptions {
  // Coordinator address, host:port. Default 127.0.0.1:7070.
  std::string coordinator = "127.0.0.1:7070";
  // Deadline of every unary call. Default 5 s.
  int64_t timeout_ms = 5000;
  // Largest message sent or received on the channel; a larger one fails
  // with RESOURCE_EXHAUSTED naming both sizes. Default 16 MiB, the
  // coordinator's default limit.
  int max_message_bytes = kDefaultMaxMessageBytes;
  // TLS (--ca, --cert, --key) and the bearer token sent on every call.
  ChannelSecurity security;
};

// A channel to options.coordinator with its security; INVALID_ARGUMENT
// naming the flag for unreadable or inconsistent TLS files.
absl::StatusOr<std::shared_ptr<grpc::Channel>> NewChannel(
    const ClientOptions& options);

class Client {
 public:
  Client(const ClientOptions& options, std::shared_ptr<grpc::Channel> channel);

  absl::StatusOr<lockstep::v1::ListWorkersResponse> ListWorkers(
      bool include_gone);
  absl::StatusOr<lockstep::v1::Worker> SetWorkerState(
      const std::string& worker, lockstep::v1::WorkerAdminState state,
      const std::string& reason);

  absl::StatusOr<lockstep::v1::Job> Submit(
      const lockstep::v1::SubmitJobRequest& request);
  absl::StatusOr<lockstep::v1::Job> GetJob(const std::string& job_id);
  absl::StatusOr<lockstep::v1::ListJobsResponse> ListJobs(
      const lockstep::v1::ListJobsRequest& request);
  absl::StatusOr<lockstep::v1::Job> Cancel(const std::string& job_id,
                                           const std::string& reason);
  absl::StatusOr<lockstep::v1::Report> GetReport(const std::string& job_id);
  // The golden reference of a check: the newest job carrying the label
  // `key`=`value` with exactly these model and config digests whose stored
  // verdict is REPRODUCIBLE, other than `exclude_job_id`. One ListJobs call
  // (page_size 1, label, model, config and verdict filters), which the
  // coordinator answers from its verdict index. NOT_FOUND naming the
  // label, model and config when no job qualifies.
  absl::StatusOr<lockstep::v1::Job> FindGoldenJob(
      const std::string& key, const std::string& value,
      const std::string& model_digest, const std::string& config_digest,
      const std::string& exclude_job_id);
  absl::StatusOr<lockstep::v1::CompareRunsResponse> CompareRuns(
      const std::string& run_a, const std::string& run_b);
  absl::StatusOr<lockstep::v1::ListCertificatesResponse> ListCertificates(
      const lockstep::v1::ListCertificatesRequest& request);
  absl::StatusOr<lockstep::v1::Audit> StartAudit(
      const lockstep::v1::StartAuditRequest& request);
  absl::StatusOr<lockstep::v1::Audit> GetAudit(const std::string& audit_id);
  absl::StatusOr<lockstep::v1::ListAuditsResponse> ListAudits();
  // Blobs: EnsureBlobUploaded with this client's token and deadline (the
  // upload's deadline grows with the size); `uploaded` (may be null) says
  // whether bytes were sent.
  absl::StatusOr<std::string> EnsureBlob(
      const std::string& bytes,
      const std::function<void(int64_t, int64_t)>& progress, bool* uploaded);
  absl::StatusOr<lockstep::v1::StatBlobResponse> StatBlob(
      const std::string& digest);
  absl::StatusOr<lockstep::v1::CollectBlobsResponse> CollectBlobs();
  // Streams the job's events to `on_event` until the final one (returns
  // the last job snapshot), the stream fails, or `timeout_ms` (0: none)
  // passes (DEADLINE_EXCEEDED).
  absl::StatusOr<lockstep::v1::Job> Watch(
      const std::string& job_id, int64_t timeout_ms,
      const std::function<void(const lockstep::v1::JobEvent&)>& on_event);

  const ClientOptions& options() const { return options_; }

 private:
  // Sets the unary deadline and, on a plaintext channel, the token.
  void SetDeadline(grpc::ClientContext* ctx) const;
  absl::Status Convert(const grpc::Status& s) const;
  // One unary call with the deadline, converted to StatusOr.
  template <typename Req, typename Resp, typename Method>
  absl::StatusOr<Resp> Call(Method method, const Req& request);

  ClientOptions options_;
  std::unique_ptr<lockstep::v1::Lockstep::Stub> stub_;
};

// Renders workers as an aligned table: NAME, ID, STATE, ADMIN, CLASS,
// HEARTBEAT ("0.4s ago"), then each class digest's full string once.
std::string FormatWorkersTable(const lockstep::v1::ListWorkersResponse& r);
// Renders the response as JSON (field names as in the .proto).
std::string FormatJson(const google::protobuf::Message& m);

}  // namespace lockstep::client

#endif  // LOCKSTEP_CLIENT_CLIENT_H_
