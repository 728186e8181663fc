// Divergence analysis, verdicts and certificates: pure functions over stored
// fingerprints, unit-tested without gRPC or SQLite.
//
// Runs are compared digest first, then step by step, then tensor by tensor:
// the first fingerprint that differs in execution order (step-major, then
// manifest order) is the divergence; every later differing tensor is counted
// as downstream.
#ifndef LOCKSTEP_SERVER_ANALYSIS_H_
#define LOCKSTEP_SERVER_ANALYSIS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lockstep/v1/audit.pb.h"
#include "lockstep/v1/fingerprint.pb.h"
#include "lockstep/v1/job.pb.h"
#include "lockstep/v1/report.pb.h"
#include "server/store/store.h"

namespace lockstep::server {

// A finished run and its stored steps.
struct RunData {
  lockstep::v1::Run run;
  std::vector<store::StepRecord> steps;  // ordered by step
};

// |a - b| / max(|a|, |b|) for sum, L2 and max |x|; 0 where both are 0.
lockstep::v1::Magnitude MagnitudeOf(const lockstep::v1::TensorStats& a,
                                    const lockstep::v1::TensorStats& b);

// Likely cause of a divergence at `entry`, from docs/nondeterminism.md:
// the op, the job's mode and algorithm overrides, and whether the runs were
// on the same hardware class.
lockstep::v1::CauseHint CauseFor(const lockstep::v1::ManifestEntry& entry,
                                 const lockstep::v1::JobConfig& config,
                                 bool same_hardware_class);

// Compares two runs recorded against the same manifest. nullopt when every
// captured tensor is identical. INVALID_ARGUMENT when a run lacks a step the
// other has or a step is not aligned to the manifest.
absl::StatusOr<std::optional<lockstep::v1::Divergence>> CompareRunData(
    const lockstep::v1::TensorManifest& manifest,
    const lockstep::v1::JobConfig& config, const RunData& a, const RunData& b);

// The verdict over a finished job's runs. `runs` holds every run of the job
// (succeeded ones with their steps). The reference run is the first
// succeeded one by index; the reported divergence is the earliest among
// the other runs' divergences from it.
absl::StatusOr<lockstep::v1::Report> BuildReport(
    const lockstep::v1::Job& job, const lockstep::v1::TensorManifest& manifest,
    const std::vector<RunData>& runs);

// True when no captured tensor of any succeeded run holds a NaN (NaN
// payloads are not canonical across hardware classes; see
// docs/canonical-arithmetic.md section 7).
bool RunsAreNanFree(const std::vector<RunData>& runs);

// Certificates a REPRODUCIBLE report supports:
//  RUN_TO_RUN   per worker that ran >= 2 runs (its hardware class),
//  CROSS_DEVICE per hardware class with >= 2 distinct workers,
//  CROSS_CLASS  when >= 2 hardware classes took part, the job is CANONICAL
//               and its runs are NaN-free (`nan_free`).
// `classes` maps hardware-class digest to its string. Ids are derived from
// (job id, level, class) so re-issuing is idempotent.
std::vector<lockstep::v1::Certificate> CertificatesFor(
    const lockstep::v1::Job& job, const lockstep::v1::Report& report,
    const std::map<std::string, std::string>& classes, int canonical_version,
    int64_t now_unix_ms, bool nan_free);

// Evaluates a fleet audit's job: one run per audited worker. Per hardware
// class the digest most workers produced wins (a unique plurality; with a
// tie every member is an outlier); every other worker is an OUTLIER with its
// first divergence from a majority run; a worker whose run failed has
// NO_RESULT. In CANONICAL mode the classes' majority digests must agree
// too: the digest of most workers overall is the reference and a class that
// differs is marked agrees_with_other_classes = false. Fills
// audit->workers, audit->classes and audit->summary. `class_names` maps
// class digests to their strings.
absl::Status EvaluateAudit(
    const lockstep::v1::Job& job, const lockstep::v1::TensorManifest& manifest,
    const std::vector<RunData>& runs,
    const std::map<std::string, std::string>& class_names,
    lockstep::v1::Audit* audit);

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_ANALYSIS_H_
