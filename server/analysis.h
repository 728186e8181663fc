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
#include "server/run_data.h"

namespace lockstep::server {

// |a - b| / max(|a|, |b|) for sum, L2 and max |x|; 0 where both are 0.
lockstep::v1::Magnitude MagnitudeOf(const lockstep::v1::TensorStats& a,
                                    const lockstep::v1::TensorStats& b);

// Likely cause of a divergence at `entry` between runs `a` and `b`, from
// docs/nondeterminism.md. Names what actually ran: the kernel variants the
// two runs recorded for entry.op (Run.kernels), the job's mode, and whether
// the runs were on the same hardware class. Never blames a kernel that did
// not run (a deterministic kernel is not "split-K", a CPU run is not
// "cuDNN"), and NaN-payload differences are not "faulty hardware".
//
// Run.kernels values read "<backend>/<mode or ISA>/<algorithm>", e.g.
// "cpu/avx512/canonical", "cpu/default/atomic", "cudnn/deterministic/algo1":
// a variant with an "atomic", "autotune" or "threaded" part is
// nondeterministic, one with a "canonical" or "deterministic" part is not.
// Where neither run recorded a variant for entry.op the hint falls back on
// the job's mode and backend and says "kernel variant not recorded".
lockstep::v1::CauseHint CauseFor(const lockstep::v1::ManifestEntry& entry,
                                 const lockstep::v1::JobConfig& config,
                                 const lockstep::v1::Run& a,
                                 const lockstep::v1::Run& b);

// As above, with both sides' statistics of the diverging tensor: when both
// hold NaNs (same NaN and Inf counts) and their finite statistics are
// identical, the bits differ in NaN payloads or signs only
// ("ND-NAN-PAYLOAD"). The comparisons below use this form.
lockstep::v1::CauseHint CauseFor(const lockstep::v1::ManifestEntry& entry,
                                 const lockstep::v1::JobConfig& config,
                                 const lockstep::v1::Run& a,
                                 const lockstep::v1::Run& b,
                                 const lockstep::v1::TensorStats& stats_a,
                                 const lockstep::v1::TensorStats& stats_b);

// Checks a succeeded run's stored steps (read one at a time) against the
// manifest's captured steps, the step digests and the reported run digest.
// DATA_LOSS naming the run and the step on any mismatch.
absl::Status VerifyRunSteps(const lockstep::v1::TensorManifest& manifest,
                            const lockstep::v1::Run& run,
                            const std::string& reported_run_digest,
                            StepReader* steps);

// Compares two runs recorded against the same manifest, streaming: memory
// for one step of each. nullopt when every captured tensor is identical.
// INVALID_ARGUMENT when a run lacks a step the other has or a step is not
// aligned to the manifest.
absl::StatusOr<std::optional<lockstep::v1::Divergence>> CompareRunSteps(
    const lockstep::v1::TensorManifest& manifest,
    const lockstep::v1::JobConfig& config, const lockstep::v1::Run& a,
    StepReader* a_steps, const lockstep::v1::Run& b, StepReader* b_steps);

// In-memory form of CompareRunSteps (tests).
absl::StatusOr<std::optional<lockstep::v1::Divergence>> CompareRunData(
    const lockstep::v1::TensorManifest& manifest,
    const lockstep::v1::JobConfig& config, const RunData& a, const RunData& b);

// A finished job's verdict: computed once when the job ends, stored, and
// served from the store afterwards.
struct JobVerdict {
  // verdict; level = the highest level among `certificates`
  // (LEVEL_UNSPECIFIED when none); certificate_ids = their ids; run
  // digests; the first divergence; a one-line summary. A FAILED job's
  // report says FAILED with the reason, a CANCELLED one INCONCLUSIVE.
  lockstep::v1::Report report;
  // What the evidence supports (only for REPRODUCIBLE):
  //  RUN_TO_RUN   per worker that ran >= 2 runs (its hardware class),
  //  CROSS_DEVICE per hardware class with >= 2 distinct devices
  //               (Run.device_id; two workers on one device count once;
  //               runs without a device id never add a second device),
  //  CROSS_CLASS  when >= 2 hardware classes took part, the job is
  //               CANONICAL and every run is NaN-free.
  // Ids are derived from (job id, level, class), so issuing is idempotent.
  std::vector<lockstep::v1::Certificate> certificates;
};

// How reports name a layer: `layer "name"`, followed by " (from <origin>)"
// when `model` gives the layer an origin (Layer.origin, e.g. the ONNX node
// "/blocks.0/attn/MatMul (MatMul)" it was imported from).
std::string LayerLabel(const lockstep::v1::Model& model,
                       const std::string& layer);

// Judges a finished job (SUCCEEDED, FAILED or CANCELLED) over all its runs,
// streaming every succeeded run's steps side by side: memory for one step
// of each run, whatever the job's length. `class_names` maps hardware-class
// digests to their strings. FAILED_PRECONDITION for a job that has not
// finished; INVALID_ARGUMENT when succeeded runs do not align.
absl::StatusOr<JobVerdict> JudgeJob(
    const lockstep::v1::Job& job, const lockstep::v1::TensorManifest& manifest,
    std::vector<RunSteps> runs,
    const std::map<std::string, std::string>& class_names,
    int canonical_version, int64_t now_unix_ms);

// Evaluates a fleet audit's job: one run per audited worker (Run.worker_id,
// Run.device_id), streamed. In CANONICAL mode every class must agree bit for
// bit, so the vote is per tensor across the whole fleet: at the first
// tensor where the runs disagree, the fingerprint held by a strict majority
// of distinct devices, at least 3 of them, wins; each run that differs from
// the majority there (or later, checked the same way) is an OUTLIER with
// the first tensor where it leaves the majority. Without such a majority
// the audit reports no_majority, the undecided runs get UNDECIDED, nobody
// is named an outlier. A worker whose run failed or never ran has
// NO_RESULT. Fills audit->workers, audit->classes, audit->no_majority and
// audit->summary. `class_names` maps class digests to their strings.
absl::Status EvaluateAudit(
    const lockstep::v1::Job& job, const lockstep::v1::TensorManifest& manifest,
    std::vector<RunSteps> runs,
    const std::map<std::string, std::string>& class_names,
    lockstep::v1::Audit* audit);

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_ANALYSIS_H_
