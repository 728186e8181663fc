#include "server/submission.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/digest.h"
#include "common/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "model/manifest.h"
#include "model/plan.h"

namespace lockstep::server {
namespace {

std::string DeterministicBytes(const google::protobuf::Message& m) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    m.SerializeToCodedStream(&coded);
  }
  return out;
}

}  // namespace

std::string ModelDigest(const v1::Model& model) {
  v1::Model copy = model;
  copy.clear_name();
  return Digest128Hex(DeterministicBytes(copy));
}

std::string ConfigDigest(const v1::JobConfig& config) {
  v1::JobConfig copy = config;
  copy.clear_threads();
  return Digest128Hex(DeterministicBytes(copy));
}

std::string NewJobId() {
  absl::BitGen gen;
  return absl::StrFormat("job-%016x", absl::Uniform<uint64_t>(gen));
}

std::string RunIdFor(const std::string& job_id, int index) {
  return absl::StrFormat("%s-r%02d", job_id, index);
}

std::string JobIdOfRun(const std::string& run_id) {
  const size_t cut = run_id.rfind("-r");
  if (cut == std::string::npos) return "";
  return run_id.substr(0, cut);
}

int64_t StoredFingerprintBytes() {
  // The widest encoding of every field, plus the length prefix of the
  // fingerprint in its step's record.
  v1::TensorFingerprint f;
  f.set_index(std::numeric_limits<int32_t>::min());
  f.set_hash_hi(~uint64_t{0});
  f.set_hash_lo(~uint64_t{0});
  f.mutable_stats()->set_sum(1.5);
  f.mutable_stats()->set_l2(1.5);
  f.mutable_stats()->set_max_abs(1.5f);
  f.mutable_stats()->set_nan_count(std::numeric_limits<int64_t>::min());
  f.mutable_stats()->set_inf_count(std::numeric_limits<int64_t>::min());
  return static_cast<int64_t>(f.ByteSizeLong()) + 3;
}

absl::Status ValidateIdempotencyKey(const std::string& key) {
  if (key.size() > 64) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "idempotency_key: %d characters exceed the limit of 64", key.size()));
  }
  for (char ch : key) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(ch)) || ch == '_' ||
          ch == '-')) {
      return absl::InvalidArgumentError(
          "idempotency_key: only A-Z a-z 0-9 _ - are allowed");
    }
  }
  return absl::OkStatus();
}

int64_t JobFingerprints(const v1::TensorManifest& manifest, int runs) {
  const int64_t steps =
      static_cast<int64_t>(model::ExpandCapturedSteps(manifest).size());
  return static_cast<int64_t>(manifest.entries_size()) * steps * runs;
}

int64_t JobFingerprintBytes(const v1::TensorManifest& manifest, int runs) {
  return JobFingerprints(manifest, runs) * StoredFingerprintBytes();
}

absl::StatusOr<Submission> ExpandSubmission(const v1::SubmitJobRequest& request,
                                            const SubmissionLimits& limits,
                                            SubmissionSource source,
                                            const std::string& job_id,
                                            int64_t now_unix_ms) {
  const v1::JobSpec& spec = request.spec();
  if (!request.has_spec()) {
    return absl::InvalidArgumentError("spec: must be set");
  }
  LS_RETURN_IF_ERROR(ValidateIdempotencyKey(request.idempotency_key()));
  // The same validators as the workers': every message names the field
  // and the limit ("spec.config.steps: ...", "spec.layers[3] ...").
  absl::StatusOr<model::ModelPlan> plan =
      model::PlanModel(spec.model(), spec.config(), limits.model);
  if (!plan.ok()) {
    const absl::string_view m = plan.status().message();
    return absl::Status(
        plan.status().code(),
        absl::StrCat(absl::StartsWith(m, "layers[") ? "spec.model." : "spec.",
                     m));
  }
  absl::Status placed =
      model::ValidatePlacement(spec.placement(), spec.config(), limits.model);
  if (!placed.ok()) {
    return absl::Status(placed.code(), absl::StrCat("spec.", placed.message()));
  }
  if (spec.labels_size() > 64) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "spec.labels: %d labels exceed the limit of 64", spec.labels_size()));
  }
  // Sorted, so the error names the same label every time.
  std::vector<std::string> keys;
  for (const auto& [k, v] : spec.labels()) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  for (const std::string& k : keys) {
    if (k.empty() || k.size() > kMaxLabelKeyBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "spec.labels: key \"%s\" has %d bytes; keys need 1 to %d",
          absl::CHexEscape(k.substr(0, 64)), k.size(), kMaxLabelKeyBytes));
    }
    const std::string& v = spec.labels().at(k);
    if (v.size() > kMaxLabelValueBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "spec.labels[%s]: the value has %d bytes, over the limit of %d",
          absl::CHexEscape(k), v.size(), kMaxLabelValueBytes));
    }
  }
  if (source == SubmissionSource::kPublic) {
    for (const std::string& k : keys) {
      if (absl::StartsWith(k, kReservedLabelPrefix)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "spec.labels: \"", k, "\" uses the prefix \"", kReservedLabelPrefix,
            "\", which is reserved for the coordinator"));
      }
    }
  }
  absl::StatusOr<v1::TensorManifest> manifest =
      model::BuildManifest(*plan, spec.config());
  if (!manifest.ok()) {
    return absl::Status(manifest.status().code(),
                        absl::StrCat("spec: ", manifest.status().message()));
  }
  const v1::Placement& placement = spec.placement();
  const int runs = placement.runs() == 0 ? 2 : placement.runs();

  // What the job will store, before anything is stored.
  const int64_t steps =
      static_cast<int64_t>(model::ExpandCapturedSteps(*manifest).size());
  const int64_t fingerprints = JobFingerprints(*manifest, runs);
  if (fingerprints > limits.max_fingerprints_per_job) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "spec: the job would store %d fingerprints (%d tensors x %d captured "
        "steps x %d runs), over the limit of %d fingerprints per job; capture "
        "fewer steps or tensors (spec.config.capture) or run fewer steps",
        fingerprints, manifest->entries_size(), steps, runs,
        limits.max_fingerprints_per_job));
  }
  const int64_t bytes = fingerprints * StoredFingerprintBytes();
  if (bytes > limits.max_fingerprint_bytes_per_job) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "spec: the job's %d fingerprints would take %d bytes in the store, "
        "over the limit of %d bytes of fingerprints per job",
        fingerprints, bytes, limits.max_fingerprint_bytes_per_job));
  }

  Submission out;
  out.idempotency_key = request.idempotency_key();
  out.fingerprint_bytes = bytes;
  out.manifest = std::move(*manifest);
  v1::Job& job = out.job;
  job.set_job_id(job_id);
  *job.mutable_spec() = spec;
  job.set_state(v1::JOB_QUEUED);
  job.set_model_digest(ModelDigest(spec.model()));
  job.set_config_digest(ConfigDigest(spec.config()));
  job.set_created_unix_ms(now_unix_ms);
  for (int i = 0; i < runs; ++i) {
    v1::Run* r = job.add_runs();
    r->set_run_id(RunIdFor(job_id, i));
    r->set_job_id(job_id);
    r->set_index(i);
    r->set_attempt(1);
    r->set_state(v1::RUN_QUEUED);
    r->set_steps_total(spec.config().steps());
    r->set_created_unix_ms(now_unix_ms);
  }
  return out;
}

}  // namespace lockstep::server
