// WorkerGatewayService::FetchBlob: a worker reads the parameters blob of a
// job it runs, one chunk in flight at a time.
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/gateway_service.h"
#include "server/lockstep_service.h"
#include "server/message_checks.h"

namespace lockstep::server {
namespace {

using ::lockstep::v1::BlobChunk;
using ::lockstep::v1::FetchBlobRequest;

class BlobSender final : public grpc::ServerWriteReactor<BlobChunk> {
 public:
  // Finishes at once with `status` when it is not OK.
  BlobSender(const grpc::Status& status, const std::string& path, int64_t size)
      : size_(size) {
    if (!status.ok()) {
      Finish(status);
      return;
    }
    in_.open(path, std::ios::binary);
    if (!in_) {
      Finish(grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrCat("cannot open ", path)));
      return;
    }
    chunk_.set_size(size_);
    Next();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "worker gone"));
      return;
    }
    if (sent_ >= size_) {
      Finish(grpc::Status::OK);
      return;
    }
    chunk_.Clear();
    Next();
  }

  void OnDone() override { delete this; }

 private:
  void Next() {
    const int64_t n = std::min<int64_t>(kBlobChunkBytes, size_ - sent_);
    std::string* data = chunk_.mutable_data();
    data->resize(n);
    if (n > 0 && !in_.read(data->data(), n)) {
      Finish(grpc::Status(grpc::StatusCode::DATA_LOSS,
                          "blob file shorter than its recorded size"));
      return;
    }
    sent_ += n;
    StartWrite(&chunk_);
  }

  const int64_t size_;
  std::ifstream in_;
  BlobChunk chunk_;
  int64_t sent_ = 0;
};

}  // namespace

grpc::ServerWriteReactor<BlobChunk>* WorkerGatewayService::FetchBlob(
    grpc::CallbackServerContext* context, const FetchBlobRequest* request) {
  auto refuse = [](const absl::Status& s) {
    return new BlobSender(ToGrpcStatus(s), "", 0);
  };
  absl::StatusOr<Principal> who = auth_->AuthorizeWorker(*context);
  if (!who.ok()) return refuse(who.status());
  if (absl::Status s = RefuseUnknownFields(*request, "request"); !s.ok()) {
    return refuse(s);
  }
  if (absl::Status s = CheckWorkerName(*who, request->worker_name()); !s.ok()) {
    return refuse(s);
  }
  absl::StatusOr<std::optional<store::BlobRecord>> blob =
      blobs_->Stat(request->digest());
  if (!blob.ok()) return refuse(blob.status());
  if (!blob->has_value()) {
    return refuse(absl::NotFoundError(
        absl::StrCat("digest: no blob \"", request->digest(), "\" is stored")));
  }
  if (!jobs_->WorkerRunsBlob(WorkerIdForName(request->worker_name()),
                             request->digest())) {
    return refuse(absl::PermissionDeniedError(
        absl::StrCat("worker \"", request->worker_name(),
                     "\" runs no job whose parameters are ", request->digest(),
                     "; a worker fetches only those")));
  }
  absl::StatusOr<std::string> path = blobs_->PathOf(request->digest());
  if (!path.ok()) return refuse(path.status());
  return new BlobSender(grpc::Status::OK, *path, (*blob)->size);
}

}  // namespace lockstep::server
