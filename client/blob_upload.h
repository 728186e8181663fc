// Uploading a blob (a model's ParameterSet) to the coordinator once:
// StatBlob first, then, only if the coordinator lacks it, a streamed,
// chunked UploadBlob that the coordinator verifies against the digest.
// Used by `lockstep submit|check` and `lockstep import`.
#ifndef LOCKSTEP_CLIENT_BLOB_UPLOAD_H_
#define LOCKSTEP_CLIENT_BLOB_UPLOAD_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "lockstep/v1/lockstep_service.grpc.pb.h"

namespace lockstep::client {

struct BlobUploadOptions {
  // Applied to every call's context before it starts (e.g. AttachToken).
  std::function<void(grpc::ClientContext*)> prepare;
  // Deadline of StatBlob, and of the upload plus 1 s per MiB. Default 5 s.
  int64_t timeout_ms = 5000;
  // Called after each chunk written: bytes sent so far, total.
  std::function<void(int64_t sent, int64_t total)> progress;
  // Set to whether the bytes were sent (false: the coordinator had them).
  bool* uploaded = nullptr;
};

// Makes sure the coordinator stores `bytes`; returns their digest
// ("sha256:" + hex SHA-256). Uploads nothing when StatBlob finds it. The
// error of a failed call keeps the coordinator's code and message.
absl::StatusOr<std::string> EnsureBlobUploaded(
    lockstep::v1::Lockstep::StubInterface& stub, const std::string& bytes,
    const BlobUploadOptions& options = {});

}  // namespace lockstep::client

#endif  // LOCKSTEP_CLIENT_BLOB_UPLOAD_H_
