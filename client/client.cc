#include "client/client.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/blob_upload.h"
#include "google/protobuf/util/json_util.h"

namespace lockstep::client {

using ::lockstep::v1::ListWorkersResponse;
using ::lockstep::v1::Worker;

absl::StatusOr<std::shared_ptr<grpc::Channel>> NewChannel(
    const ClientOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
      ChannelCredentials(options.security);
  if (!creds.ok()) return creds.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  return grpc::CreateCustomChannel(options.coordinator, *creds, args);
}

Client::Client(const ClientOptions& options,
               std::shared_ptr<grpc::Channel> channel)
    : options_(options), stub_(lockstep::v1::Lockstep::NewStub(channel)) {}

void Client::SetDeadline(grpc::ClientContext* ctx) const {
  AttachToken(options_.security, ctx);
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(options_.timeout_ms));
}

absl::Status Client::Convert(const grpc::Status& s) const {
  if (s.ok()) return absl::OkStatus();
  std::string message = s.error_message();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    message = absl::StrCat("cannot reach the coordinator at ",
                           options_.coordinator, ": ", message);
  }
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), message);
}

absl::StatusOr<ListWorkersResponse> Client::ListWorkers(bool include_gone) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  lockstep::v1::ListWorkersRequest req;
  req.set_include_gone(include_gone);
  ListWorkersResponse resp;
  absl::Status s = Convert(stub_->ListWorkers(&ctx, req, &resp));
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<Worker> Client::SetWorkerState(
    const std::string& worker, lockstep::v1::WorkerAdminState state,
    const std::string& reason) {
  // Accept a worker name as well as an id.
  std::string id = worker;
  if (worker.rfind("w-", 0) != 0) {
    absl::StatusOr<ListWorkersResponse> all = ListWorkers(true);
    if (!all.ok()) return all.status();
    bool found = false;
    for (const Worker& w : all->workers()) {
      if (w.name() == worker) {
        id = w.worker_id();
        found = true;
      }
    }
    if (!found) {
      return absl::NotFoundError(
          absl::StrCat("worker: no worker named \"", worker, "\""));
    }
  }
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  lockstep::v1::SetWorkerStateRequest req;
  req.set_worker_id(id);
  req.set_admin_state(state);
  req.set_reason(reason);
  Worker resp;
  absl::Status s = Convert(stub_->SetWorkerState(&ctx, req, &resp));
  if (!s.ok()) return s;
  return resp;
}

template <typename Req, typename Resp, typename Method>
absl::StatusOr<Resp> Client::Call(Method method, const Req& request) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  Resp response;
  absl::Status s = Convert(((*stub_).*method)(&ctx, request, &response));
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<lockstep::v1::Job> Client::Submit(
    const lockstep::v1::SubmitJobRequest& request) {
  return Call<lockstep::v1::SubmitJobRequest, lockstep::v1::Job>(
      &lockstep::v1::Lockstep::Stub::SubmitJob, request);
}

absl::StatusOr<lockstep::v1::Job> Client::GetJob(const std::string& job_id) {
  lockstep::v1::GetJobRequest req;
  req.set_job_id(job_id);
  return Call<lockstep::v1::GetJobRequest, lockstep::v1::Job>(
      &lockstep::v1::Lockstep::Stub::GetJob, req);
}

absl::StatusOr<lockstep::v1::ListJobsResponse> Client::ListJobs(
    const lockstep::v1::ListJobsRequest& request) {
  return Call<lockstep::v1::ListJobsRequest, lockstep::v1::ListJobsResponse>(
      &lockstep::v1::Lockstep::Stub::ListJobs, request);
}

absl::StatusOr<lockstep::v1::Job> Client::Cancel(const std::string& job_id,
                                                 const std::string& reason) {
  lockstep::v1::CancelJobRequest req;
  req.set_job_id(job_id);
  req.set_reason(reason);
  return Call<lockstep::v1::CancelJobRequest, lockstep::v1::Job>(
      &lockstep::v1::Lockstep::Stub::CancelJob, req);
}

absl::StatusOr<lockstep::v1::Report> Client::GetReport(
    const std::string& job_id) {
  lockstep::v1::GetReportRequest req;
  req.set_job_id(job_id);
  return Call<lockstep::v1::GetReportRequest, lockstep::v1::Report>(
      &lockstep::v1::Lockstep::Stub::GetReport, req);
}

absl::StatusOr<lockstep::v1::Job> Client::FindGoldenJob(
    const std::string& key, const std::string& value,
    const std::string& model_digest, const std::string& config_digest,
    const std::string& exclude_job_id) {
  // A golden lookup: the coordinator answers it from its verdict index.
  lockstep::v1::ListJobsRequest req;
  req.set_page_size(1);
  req.set_model_digest(model_digest);
  req.set_config_digest(config_digest);
  req.set_verdict(lockstep::v1::REPRODUCIBLE);
  req.set_exclude_job_id(exclude_job_id);
  (*req.mutable_labels())[key] = value;
  absl::StatusOr<lockstep::v1::ListJobsResponse> jobs = ListJobs(req);
  if (!jobs.ok()) return jobs.status();
  if (jobs->jobs_size() == 0) {
    return absl::NotFoundError(
        absl::StrCat("--golden: no REPRODUCIBLE job carries the label ", key,
                     "=", value, " with model digest ", model_digest,
                     " and config digest ", config_digest));
  }
  // A coordinator that ignored a filter would hand back a wrong reference,
  // and with it a false verdict.
  const lockstep::v1::Job& job = jobs->jobs(0);
  auto label = job.spec().labels().find(key);
  if (job.job_id() == exclude_job_id || job.model_digest() != model_digest ||
      job.config_digest() != config_digest ||
      label == job.spec().labels().end() || label->second != value) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--golden: the coordinator answered the lookup with job ", job.job_id(),
        ", which does not match the label, model and config; "
        "it does not support golden lookups"));
  }
  return job;
}

absl::StatusOr<lockstep::v1::CompareRunsResponse> Client::CompareRuns(
    const std::string& run_a, const std::string& run_b) {
  lockstep::v1::CompareRunsRequest req;
  req.set_run_a(run_a);
  req.set_run_b(run_b);
  return Call<lockstep::v1::CompareRunsRequest,
              lockstep::v1::CompareRunsResponse>(
      &lockstep::v1::Lockstep::Stub::CompareRuns, req);
}

absl::StatusOr<lockstep::v1::ListCertificatesResponse> Client::ListCertificates(
    const lockstep::v1::ListCertificatesRequest& request) {
  return Call<lockstep::v1::ListCertificatesRequest,
              lockstep::v1::ListCertificatesResponse>(
      &lockstep::v1::Lockstep::Stub::ListCertificates, request);
}

absl::StatusOr<lockstep::v1::Audit> Client::StartAudit(
    const lockstep::v1::StartAuditRequest& request) {
  return Call<lockstep::v1::StartAuditRequest, lockstep::v1::Audit>(
      &lockstep::v1::Lockstep::Stub::StartAudit, request);
}

absl::StatusOr<lockstep::v1::Audit> Client::GetAudit(
    const std::string& audit_id) {
  lockstep::v1::GetAuditRequest req;
  req.set_audit_id(audit_id);
  return Call<lockstep::v1::GetAuditRequest, lockstep::v1::Audit>(
      &lockstep::v1::Lockstep::Stub::GetAudit, req);
}

absl::StatusOr<lockstep::v1::ListAuditsResponse> Client::ListAudits() {
  return Call<lockstep::v1::ListAuditsRequest,
              lockstep::v1::ListAuditsResponse>(
      &lockstep::v1::Lockstep::Stub::ListAudits,
      lockstep::v1::ListAuditsRequest());
}

absl::StatusOr<std::string> Client::EnsureBlob(
    const std::string& bytes,
    const std::function<void(int64_t, int64_t)>& progress, bool* uploaded) {
  BlobUploadOptions o;
  o.prepare = [this](grpc::ClientContext* ctx) {
    AttachToken(options_.security, ctx);
  };
  o.timeout_ms = options_.timeout_ms;
  o.progress = progress;
  o.uploaded = uploaded;
  absl::StatusOr<std::string> digest = EnsureBlobUploaded(*stub_, bytes, o);
  if (!digest.ok()) {
    const absl::Status& s = digest.status();
    return Convert(grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                                std::string(s.message())));
  }
  return digest;
}

absl::StatusOr<lockstep::v1::StatBlobResponse> Client::StatBlob(
    const std::string& digest) {
  lockstep::v1::StatBlobRequest req;
  req.set_digest(digest);
  return Call<lockstep::v1::StatBlobRequest, lockstep::v1::StatBlobResponse>(
      &lockstep::v1::Lockstep::Stub::StatBlob, req);
}

absl::StatusOr<lockstep::v1::CollectBlobsResponse> Client::CollectBlobs() {
  return Call<lockstep::v1::CollectBlobsRequest,
              lockstep::v1::CollectBlobsResponse>(
      &lockstep::v1::Lockstep::Stub::CollectBlobs,
      lockstep::v1::CollectBlobsRequest());
}

absl::StatusOr<lockstep::v1::Job> Client::Watch(
    const std::string& job_id, int64_t timeout_ms,
    const std::function<void(const lockstep::v1::JobEvent&)>& on_event) {
  grpc::ClientContext ctx;
  AttachToken(options_.security, &ctx);
  if (timeout_ms > 0) {
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(timeout_ms));
  }
  lockstep::v1::WatchJobRequest req;
  req.set_job_id(job_id);
  auto reader = stub_->WatchJob(&ctx, req);
  lockstep::v1::JobEvent event;
  lockstep::v1::Job last;
  bool final_seen = false;
  while (reader->Read(&event)) {
    last = event.job();
    on_event(event);
    if (event.final()) final_seen = true;
  }
  absl::Status s = Convert(reader->Finish());
  if (!s.ok()) return s;
  if (!final_seen) {
    return absl::UnavailableError(
        absl::StrCat("the watch of ", job_id, " ended before the job did"));
  }
  return last;
}

namespace {

std::string Ago(int64_t now_ms, int64_t then_ms) {
  if (then_ms <= 0) return "-";
  const double s = std::max<int64_t>(0, now_ms - then_ms) / 1000.0;
  if (s < 120) return absl::StrFormat("%.1fs ago", s);
  if (s < 7200) return absl::StrFormat("%.0fm ago", s / 60);
  return absl::StrFormat("%.0fh ago", s / 3600);
}

std::string StateName(const Worker& w) {
  switch (w.state()) {
    case lockstep::v1::WORKER_CONNECTED:
      return "connected";
    case lockstep::v1::WORKER_GONE:
      return "gone";
    default:
      return "unknown";
  }
}

std::string AdminName(const Worker& w) {
  switch (w.admin_state()) {
    case lockstep::v1::DRAINING:
      return "draining";
    case lockstep::v1::QUARANTINED:
      return "quarantined";
    default:
      return "active";
  }
}

}  // namespace

std::string FormatWorkersTable(const ListWorkersResponse& r) {
  if (r.workers().empty()) return "no workers connected\n";
  std::vector<std::vector<std::string>> rows = {{"NAME", "ID", "STATE", "ADMIN",
                                                 "CLASS", "GPU", "SELFTEST",
                                                 "HEARTBEAT"}};
  std::map<std::string, std::string> classes;
  for (const Worker& w : r.workers()) {
    const std::string digest = w.profile().hardware_class_digest();
    classes[digest.substr(0, 12)] = w.profile().hardware_class();
    std::string gpu = "-";
    if (w.profile().gpus_size() > 0) {
      gpu = absl::StrCat(w.profile().gpus_size(), "x ",
                         w.profile().gpus(0).name());
    }
    std::string selftest = "-";
    if (w.profile().has_selftest()) {
      selftest =
          w.profile().selftest().passed()
              ? absl::StrCat("pass (", w.profile().selftest().rows(), " rows)")
              : absl::StrCat("FAIL (", w.profile().selftest().failed_rows(),
                             " rows)");
    }
    rows.push_back({w.name(), w.worker_id(), StateName(w), AdminName(w),
                    digest.substr(0, 12), gpu, selftest,
                    Ago(r.server_unix_ms(), w.last_heartbeat_unix_ms())});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  std::string out;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&out, row[i]);
      if (i + 1 < row.size()) {
        absl::StrAppend(&out, std::string(width[i] - row[i].size() + 2, ' '));
      }
    }
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, "\nhardware classes:\n");
  for (const auto& [digest, text] : classes) {
    absl::StrAppend(&out, "  ", digest, "  ", text, "\n");
  }
  return out;
}

std::string FormatJson(const google::protobuf::Message& m) {
  std::string json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &json, opts);
  return json;
}

}  // namespace lockstep::client
