// LockstepService: UploadBlob, StatBlob and CollectBlobs.
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/lockstep_service.h"
#include "server/message_checks.h"

namespace lockstep::server {
namespace {

using namespace ::lockstep::v1;  // NOLINT: request/response types

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context,
                               const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// An UploadBlob refused before its first read.
class RefusedUpload final : public grpc::ServerReadReactor<UploadBlobRequest> {
 public:
  explicit RefusedUpload(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

// UploadBlob: the header, then chunks fed to a BlobStore::Upload; the blob
// is stored when the client half-closes and everything matches. Any error
// ends the call, and the upload (its temporary file) is dropped in OnDone.
// gRPC runs one reaction of a call at a time, so no lock is needed.
class BlobUploader final : public grpc::ServerReadReactor<UploadBlobRequest> {
 public:
  BlobUploader(BlobStore* blobs, std::string principal, BlobInfo* response)
      : blobs_(blobs), principal_(std::move(principal)), response_(response) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      End();
      return;
    }
    absl::Status s = Take();
    if (!s.ok()) {
      Finish(ToGrpcStatus(s));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  absl::Status Take() {
    if (!started_) {
      started_ = true;
      if (!request_.has_header()) {
        return absl::InvalidArgumentError(
            "header: the first message must carry the blob's digest and "
            "size");
      }
      absl::StatusOr<std::unique_ptr<BlobStore::Upload>> u =
          blobs_->BeginUpload(request_.header().digest(),
                              request_.header().size(), principal_, &exists_);
      if (!u.ok()) return u.status();
      upload_ = std::move(*u);
      return absl::OkStatus();
    }
    if (request_.has_header()) {
      return absl::InvalidArgumentError(
          "header: only the first message may carry one");
    }
    // A blob already stored: the chunks are read and dropped.
    if (exists_.has_value()) return absl::OkStatus();
    return upload_->Append(request_.chunk());
  }

  void End() {
    if (!started_) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "header: the upload sent no message"));
      return;
    }
    if (exists_.has_value()) {
      *response_ = ToBlobInfo(*exists_);
      Finish(grpc::Status::OK);
      return;
    }
    absl::StatusOr<store::BlobRecord> r = upload_->Finish();
    if (!r.ok()) {
      Finish(ToGrpcStatus(r.status()));
      return;
    }
    *response_ = ToBlobInfo(*r);
    Finish(grpc::Status::OK);
  }

  BlobStore* const blobs_;
  const std::string principal_;
  BlobInfo* const response_;
  UploadBlobRequest request_;
  bool started_ = false;
  std::optional<store::BlobRecord> exists_;
  std::unique_ptr<BlobStore::Upload> upload_;
};

}  // namespace

BlobInfo ToBlobInfo(const store::BlobRecord& r) {
  BlobInfo b;
  b.set_digest(r.digest);
  b.set_size(r.size);
  b.set_created_unix_ms(r.created_unix_ms);
  b.set_uploaded_by(r.uploaded_by);
  b.set_last_referenced_unix_ms(r.last_referenced_unix_ms);
  b.set_referencing_jobs(static_cast<int32_t>(r.referencing_jobs));
  return b;
}

grpc::ServerReadReactor<UploadBlobRequest>* LockstepService::UploadBlob(
    grpc::CallbackServerContext* context, BlobInfo* response) {
  absl::StatusOr<Principal> who = auth_->Authorize(*context, Role::kSubmitter);
  if (!who.ok()) return new RefusedUpload(ToGrpcStatus(who.status()));
  return new BlobUploader(blobs_, who->name, response);
}

grpc::ServerUnaryReactor* LockstepService::StatBlob(
    grpc::CallbackServerContext* context, const StatBlobRequest* request,
    StatBlobResponse* response) {
  Principal who;
  if (auto* r = Refuse(context, Role::kViewer, &who)) return r;
  if (absl::Status s = RefuseUnknownFields(*request, "request"); !s.ok()) {
    return Done(context, ToGrpcStatus(s));
  }
  absl::StatusOr<std::optional<store::BlobRecord>> r =
      blobs_->Stat(request->digest());
  if (!r.ok()) return Done(context, ToGrpcStatus(r.status()));
  response->set_exists(r->has_value());
  if (r->has_value()) *response->mutable_blob() = ToBlobInfo(**r);
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* LockstepService::CollectBlobs(
    grpc::CallbackServerContext* context, const CollectBlobsRequest* request,
    CollectBlobsResponse* response) {
  Principal who;
  if (auto* r = Refuse(context, Role::kAdmin, &who)) return r;
  if (absl::Status s = RefuseUnknownFields(*request, "request"); !s.ok()) {
    return Done(context, ToGrpcStatus(s));
  }
  absl::StatusOr<std::vector<store::BlobRecord>> gone = blobs_->Collect();
  int64_t bytes = 0;
  if (gone.ok()) {
    for (const store::BlobRecord& b : *gone) {
      response->add_deleted_digests(b.digest);
      bytes += b.size;
    }
    response->set_deleted_bytes(bytes);
  }
  auth_->LogAdminAction(
      who, "collect_blobs", "blobs",
      gone.ok() ? absl::StrCat(gone->size(), " blobs, ", bytes, " bytes") : "",
      gone.status());
  return Done(context, ToGrpcStatus(gone.status()));
}

}  // namespace lockstep::server
