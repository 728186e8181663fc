// Submission expansion: a SubmitJobRequest checked against the limits and
// expanded into the job record (runs, digests) and its tensor manifest.
// Pure: no lock, no store, no clock of its own; the scheduler stores and
// queues what this returns.
#ifndef LOCKSTEP_SERVER_SUBMISSION_H_
#define LOCKSTEP_SERVER_SUBMISSION_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "lockstep/v1/lockstep_service.pb.h"
#include "model/job_config.h"

namespace lockstep::server {

// Label keys starting with this are the coordinator's own; a public
// submission may not set them.
inline constexpr char kReservedLabelPrefix[] = "lockstep.";
// Job labels (spec.labels): keys of 1 to 128 bytes, values up to 256.
inline constexpr size_t kMaxLabelKeyBytes = 128;
inline constexpr size_t kMaxLabelValueBytes = 256;
// Label marking an audit's job; its value is the audit id. Run i of such a
// job runs on placement.worker_ids[i], and a run that fails does not end
// the others. Only the AuditManager sets it (SubmissionSource::kInternal).
inline constexpr char kAuditLabel[] = "lockstep.audit";

struct SubmissionLimits {
  // Model and config limits, as the workers enforce them.
  model::Limits model;
  // Fingerprints a job may store: manifest entries x captured steps x runs.
  // Default 200 million.
  int64_t max_fingerprints_per_job = 200'000'000;
  // Bytes those fingerprints take in the store (kStoredFingerprintBytes
  // each). Default 16 GiB.
  int64_t max_fingerprint_bytes_per_job = int64_t{16} << 30;
};

// Stored size of one fingerprint, as run_steps holds it: the serialized
// TensorFingerprint with every field at its widest.
int64_t StoredFingerprintBytes();

enum class SubmissionSource {
  kPublic,    // SubmitJob: `lockstep.` labels are refused
  kInternal,  // the coordinator's own jobs (audits)
};

struct Submission {
  lockstep::v1::Job job;  // JOB_QUEUED, runs RUN_QUEUED at attempt 1
  lockstep::v1::TensorManifest manifest;
  std::string idempotency_key;
  // Bytes the job's fingerprints will take in the store
  // (JobFingerprintBytes).
  int64_t fingerprint_bytes = 0;
};

// Fingerprints a job of `runs` runs stores: manifest entries x captured
// steps x runs.
int64_t JobFingerprints(const lockstep::v1::TensorManifest& manifest, int runs);
// The bytes they take in the store (x StoredFingerprintBytes()).
int64_t JobFingerprintBytes(const lockstep::v1::TensorManifest& manifest,
                            int runs);

// Validates `request` and expands it. INVALID_ARGUMENT naming the field and
// the limit for anything out of bounds. `job_id` names the job;
// `now_unix_ms` stamps it.
absl::StatusOr<Submission> ExpandSubmission(
    const lockstep::v1::SubmitJobRequest& request,
    const SubmissionLimits& limits, SubmissionSource source,
    const std::string& job_id, int64_t now_unix_ms);

// Checks only the idempotency key (before a store lookup).
absl::Status ValidateIdempotencyKey(const std::string& key);

// Deterministic digests of a model (its name excluded) and of a config (its
// thread count excluded: it never changes results).
std::string ModelDigest(const lockstep::v1::Model& model);
std::string ConfigDigest(const lockstep::v1::JobConfig& config);

// "job-<16 hex digits>", random.
std::string NewJobId();
// "<job id>-rNN".
std::string RunIdFor(const std::string& job_id, int index);
// The job id of a run id, or "" when it is not one.
std::string JobIdOfRun(const std::string& run_id);

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_SUBMISSION_H_
