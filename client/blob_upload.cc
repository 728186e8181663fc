#include "client/blob_upload.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/blob_digest.h"

namespace lockstep::client {
namespace {

namespace v1 = ::lockstep::v1;

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

void Prepare(const BlobUploadOptions& o, int64_t timeout_ms,
             grpc::ClientContext* ctx) {
  if (o.prepare) o.prepare(ctx);
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(timeout_ms));
}

}  // namespace

absl::StatusOr<std::string> EnsureBlobUploaded(
    v1::Lockstep::StubInterface& stub, const std::string& bytes,
    const BlobUploadOptions& options) {
  const std::string digest = BlobDigest(bytes);
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (options.uploaded != nullptr) *options.uploaded = false;
  {
    grpc::ClientContext ctx;
    Prepare(options, options.timeout_ms, &ctx);
    v1::StatBlobRequest req;
    req.set_digest(digest);
    v1::StatBlobResponse resp;
    absl::Status s = FromGrpc(stub.StatBlob(&ctx, req, &resp), "StatBlob");
    if (!s.ok()) return s;
    if (resp.exists()) {
      if (resp.blob().size() != size) {
        return absl::DataLossError(
            absl::StrCat("StatBlob: the coordinator's ", digest, " has ",
                         resp.blob().size(), " bytes, the local one ", size));
      }
      return digest;
    }
  }
  grpc::ClientContext ctx;
  Prepare(options, options.timeout_ms + 1000 * (size >> 20), &ctx);
  v1::BlobInfo info;
  std::unique_ptr<grpc::ClientWriterInterface<v1::UploadBlobRequest>> writer =
      stub.UploadBlob(&ctx, &info);
  v1::UploadBlobRequest req;
  req.mutable_header()->set_digest(digest);
  req.mutable_header()->set_size(size);
  bool open = writer->Write(req);
  for (int64_t sent = 0; open && sent < size;) {
    const int64_t n = std::min<int64_t>(kBlobChunkBytes, size - sent);
    req.set_chunk(bytes.data() + sent, n);
    open = writer->Write(req);
    sent += n;
    if (open && options.progress) options.progress(sent, size);
  }
  if (open) writer->WritesDone();
  absl::Status s = FromGrpc(writer->Finish(), "UploadBlob");
  if (!s.ok()) return s;
  if (info.digest() != digest || info.size() != size) {
    return absl::DataLossError(
        absl::StrCat("UploadBlob: the coordinator stored ", info.digest(), " (",
                     info.size(), " bytes), not ", digest));
  }
  if (options.uploaded != nullptr) *options.uploaded = true;
  return digest;
}

}  // namespace lockstep::client
