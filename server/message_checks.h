// Checks applied to messages as they arrive, before any other code sees
// them: fields this coordinator does not know, and the size limits of the
// worker messages that are stored (fingerprint batches, run results,
// heartbeats). Hello limits live with the registry (ValidateHello).
//
// Unknown fields are refused, not discarded: proto3 keeps them, so they
// would be stored with the records and change the bytes that stored
// records and digests are built from while meaning nothing here; and a
// sender that relies on a field must learn that it is not understood.
//
// Every refusal is INVALID_ARGUMENT naming the field and the limit.
// Thread-safe (pure functions).
#ifndef LOCKSTEP_SERVER_MESSAGE_CHECKS_H_
#define LOCKSTEP_SERVER_MESSAGE_CHECKS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "lockstep/v1/fingerprint.pb.h"
#include "lockstep/v1/worker_gateway.pb.h"

namespace lockstep::server {

inline constexpr size_t kMaxRunIdBytes = 128;
// Above any manifest's entries per step (2048 layers of a few tensors each).
inline constexpr int kMaxFingerprintsPerBatch = 65536;
inline constexpr size_t kMaxFailureReasonBytes = 4096;
inline constexpr size_t kMaxDatasetDigestBytes = 128;
inline constexpr int kMaxKernelEntries = 256;
inline constexpr size_t kMaxKernelNameBytes = 128;
// Runs one heartbeat may list (at most one per slot; see kMaxWorkerSlots).
inline constexpr int kMaxHeartbeatRuns = 64;

// OK when neither `message` nor any message inside it carries a field this
// build does not know; otherwise INVALID_ARGUMENT naming the path from
// `root` and the field number, e.g.
// "hello.profile.cpu: unknown field 99 (refused: ...)".
absl::Status RefuseUnknownFields(const google::protobuf::Message& message,
                                 absl::string_view root);

// run_id length, sequence and step >= 0, at most kMaxFingerprintsPerBatch
// fingerprints, step_digest 32 lowercase hex on a completed step and empty
// otherwise.
absl::Status ValidateBatchShape(const lockstep::v1::FingerprintBatch& batch);

// run_id length; run_digest 32 lowercase hex on success and empty
// otherwise; failure_reason, dataset_digest and the kernels map within
// their limits.
absl::Status ValidateRunFinishedShape(const lockstep::v1::RunFinished& f);

// At most kMaxHeartbeatRuns runs, each run_id within its limit.
absl::Status ValidateHeartbeatShape(const lockstep::v1::Heartbeat& hb);
absl::Status ValidateProgressShape(const lockstep::v1::RunProgress& p,
                                   absl::string_view field);

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_MESSAGE_CHECKS_H_
