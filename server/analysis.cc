#include "server/analysis.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/digest.h"
#include "common/status_macros.h"
#include "kernels/hash/fingerprint.h"

namespace lockstep::server {

using ::lockstep::v1::CauseHint;
using ::lockstep::v1::Certificate;
using ::lockstep::v1::Divergence;
using ::lockstep::v1::Job;
using ::lockstep::v1::JobConfig;
using ::lockstep::v1::ManifestEntry;
using ::lockstep::v1::Report;
using ::lockstep::v1::Run;
using ::lockstep::v1::TensorFingerprint;
using ::lockstep::v1::TensorManifest;
using ::lockstep::v1::TensorStats;

namespace {

// ---------------------------------------------------------------------------
// Cause hints

double RelDiff(double a, double b) {
  const double scale = std::max(std::fabs(a), std::fabs(b));
  if (scale == 0.0) return 0.0;
  if (!std::isfinite(scale)) return a == b ? 0.0 : 1.0;
  return std::fabs(a - b) / scale;
}

bool SameFingerprint(const TensorFingerprint& a, const TensorFingerprint& b) {
  return a.hash_hi() == b.hash_hi() && a.hash_lo() == b.hash_lo();
}

CauseHint Hint(const char* id, std::string text) {
  CauseHint h;
  h.set_id(id);
  h.set_text(std::move(text));
  return h;
}

v1::DeterminismMode ModeOf(const JobConfig& config) {
  return config.determinism() == v1::DETERMINISM_MODE_UNSPECIFIED
             ? v1::CANONICAL
             : config.determinism();
}

bool IsGpuBackendName(absl::string_view backend) {
  return backend == "cuda" || backend == "cudnn" || backend == "cublas" ||
         backend == "gpu";
}

// The kernel variant a run recorded for an op (Run.kernels).
struct Variant {
  enum Kind { kUnrecorded, kDeterministic, kNondeterministic, kUnclassified };
  Kind kind = kUnrecorded;
  std::string name;       // as recorded, e.g. "cpu/default/atomic"
  std::string backend;    // first part: "cpu", "cuda", "cudnn", ...
  std::string algorithm;  // last part: "atomic", "canonical", "algo1", ...
  bool atomic = false;    // some part names atomic accumulation
  bool autotune = false;
  bool threaded = false;
};

Variant VariantOf(const Run& run, const std::string& op) {
  Variant v;
  auto it = run.kernels().find(op);
  if (it == run.kernels().end() || it->second.empty()) return v;
  v.name = it->second;
  std::vector<std::string> parts = absl::StrSplit(v.name, '/');
  v.backend = parts.front();
  v.algorithm = parts.back();
  bool deterministic = false;
  for (const std::string& p : parts) {
    if (absl::StrContains(p, "atomic")) v.atomic = true;
    if (p == "autotune") v.autotune = true;
    if (p == "threaded") v.threaded = true;
    if (p == "canonical" || p == "deterministic") deterministic = true;
  }
  if (v.atomic || v.autotune || v.threaded) {
    v.kind = Variant::kNondeterministic;
  } else if (deterministic) {
    v.kind = Variant::kDeterministic;
  } else {
    v.kind = Variant::kUnclassified;
  }
  return v;
}

// The catalogue entry of a GPU op's atomic (arrival-order) variant.
CauseHint GpuAtomicSource(const std::string& op, const std::string& ran) {
  if (op == "bias_add.grad") {
    return Hint("ND-ATOMIC-BIAS-GRAD",
                absl::StrCat("bias gradient accumulated with atomic adds in "
                             "arrival order (",
                             ran, ")"));
  }
  // A transposed convolution runs cuDNN's convolution backward-filter for
  // its weight gradient and backward-data for its forward.
  if (op == "conv2d.grad_weight" || op == "conv_transpose2d.grad_weight") {
    return Hint("ND-CUDNN-CONV-GRAD-WEIGHT",
                absl::StrCat("convolution weight gradient reduced over the "
                             "batch with atomics (",
                             ran, ")"));
  }
  if (op == "conv2d.grad_input" || op == "conv_transpose2d.forward") {
    return Hint("ND-CUDNN-CONV-GRAD-INPUT",
                absl::StrCat("convolution input gradient accumulated with "
                             "atomics (",
                             ran, ")"));
  }
  if (op == "max_pool2d.grad") {
    return Hint("ND-MAXPOOL-GRAD",
                absl::StrCat("max-pool gradient scattered with atomic adds (",
                             ran, ")"));
  }
  if (op == "resize_bilinear.grad") {
    return Hint("ND-RESIZE-BILINEAR-GRAD",
                absl::StrCat("bilinear-resize gradient scattered with atomic "
                             "adds (",
                             ran, ")"));
  }
  if (absl::StartsWith(op, "dense.")) {
    return Hint("ND-SPLITK-GEMM",
                absl::StrCat("matrix product split over K with partial sums "
                             "added in arrival order (",
                             ran, ")"));
  }
  if (absl::StartsWith(op, "depthwise_conv2d.")) {
    return Hint("ND-ATOMIC-DEPTHWISE-GRAD",
                absl::StrCat("depthwise filter gradient accumulated with "
                             "atomic adds (",
                             ran, ")"));
  }
  if (absl::StartsWith(op, "segment_sum.") || absl::StartsWith(op, "scatter") ||
      absl::StartsWith(op, "embedding.") || op == "gather.grad") {
    return Hint("ND-ATOMIC-SEGMENT-SUM",
                absl::StrCat(op,
                             " accumulated several inputs per output slot "
                             "with atomic adds (",
                             ran, ")"));
  }
  return Hint("ND-GPU-ATOMIC-ACCUMULATION",
              absl::StrCat(op,
                           " ran a GPU variant that adds partial sums with "
                           "atomic adds in arrival order (",
                           ran, ")"));
}

CauseHint CpuAtomicSource(const std::string& op, const std::string& ran) {
  return Hint("ND-CPU-ATOMIC-ACCUMULATION",
              absl::StrCat(op,
                           " ran a CPU variant that adds per-thread partial "
                           "sums with atomic adds in thread-arrival order (",
                           ran, ")"));
}

// A hint from a nondeterministic variant that one of the runs recorded.
CauseHint FromNondeterministicVariant(const std::string& op, const Variant& v) {
  const std::string ran = absl::StrCat("ran ", v.name);
  if (v.autotune) {
    if (v.backend == "cudnn") {
      return Hint(
          "ND-CUDNN-AUTOTUNE",
          absl::StrCat("cuDNN algorithm chosen by timing per run (", ran, ")"));
    }
    return Hint("ND-CPU-AUTOTUNE",
                absl::StrCat(op, " implementation chosen by timing per run (",
                             ran, ")"));
  }
  if (v.threaded) {
    return Hint("ND-CPU-THREAD-REDUCTION",
                absl::StrCat(op,
                             " split its reduction by thread count and "
                             "scheduling (",
                             ran, ")"));
  }
  if (IsGpuBackendName(v.backend)) return GpuAtomicSource(op, ran);
  return CpuAtomicSource(op, ran);
}

// Runs on different hardware classes that both ran deterministic but not
// portable kernels.
CauseHint CrossClassSource(bool gpu, const std::string& detail) {
  if (gpu) {
    return Hint("ND-LIBRARY-VERSION",
                absl::StrCat("deterministic GPU kernels repeat on one "
                             "hardware class only; classes differ in "
                             "architecture, SM count and library versions",
                             detail));
  }
  return Hint("ND-CPU-VECTOR-WIDTH",
              absl::StrCat("deterministic CPU kernels repeat on one hardware "
                           "class only; classes differ in blocking, vector "
                           "width and FMA use",
                           detail));
}

CauseHint CanonicalMismatch(const std::string& detail) {
  return Hint("LS-CANONICAL-MISMATCH",
              absl::StrCat("deterministic kernels gave different bits", detail,
                           ": a faulty device (silent data corruption), an "
                           "injected fault, or a kernel bug"));
}

// Ops whose DEFAULT kernel accumulates in arrival order (the catalogue's
// "Lockstep DEFAULT variant" column).
bool HasAtomicDefault(const std::string& op) {
  static const char* const kOps[] = {"bias_add.grad",
                                     "conv2d.grad_weight",
                                     "conv2d.grad_input",
                                     "max_pool2d.grad",
                                     "resize_bilinear.grad",
                                     "dense.forward",
                                     "segment_sum.forward",
                                     "depthwise_conv2d.grad_weight",
                                     "conv_transpose2d.grad_weight"};
  for (const char* o : kOps) {
    if (op == o) return true;
  }
  return false;
}

bool NanPayloadOnly(const TensorStats& a, const TensorStats& b) {
  return a.nan_count() > 0 && a.nan_count() == b.nan_count() &&
         a.inf_count() == b.inf_count() && a.sum() == b.sum() &&
         a.l2() == b.l2() && a.max_abs() == b.max_abs();
}

CauseHint CauseForImpl(const ManifestEntry& entry, const JobConfig& config,
                       const Run& a, const Run& b, const TensorStats* stats_a,
                       const TensorStats* stats_b) {
  const bool same_class =
      a.hardware_class_digest() == b.hardware_class_digest();
  if (stats_a != nullptr && stats_b != nullptr &&
      NanPayloadOnly(*stats_a, *stats_b)) {
    return Hint(
        "ND-NAN-PAYLOAD",
        absl::StrFormat(
            "both runs hold %d NaN(s) here with identical finite statistics: "
            "the bits differ in NaN payloads or signs, which IEEE-754 leaves "
            "to the %s; not evidence of a faulty device",
            stats_a->nan_count(),
            same_class ? "instruction that produced them"
                       : "hardware and instruction path (they differ "
                         "between these classes)"));
  }
  if (entry.role() == v1::INPUT || entry.role() == v1::LABEL) {
    return Hint("ND-DATA-PIPELINE",
                "the runs read different input data (dataset files differ "
                "between workers?)");
  }
  const std::string& op = entry.op();
  const Variant va = VariantOf(a, op);
  const Variant vb = VariantOf(b, op);
  const v1::DeterminismMode mode = ModeOf(config);

  // 1. A recorded nondeterministic variant explains the difference.
  if (va.kind == Variant::kNondeterministic) {
    return FromNondeterministicVariant(op, va);
  }
  if (vb.kind == Variant::kNondeterministic) {
    return FromNondeterministicVariant(op, vb);
  }
  // 2. Both runs recorded a variant, none of them nondeterministic.
  if (va.kind != Variant::kUnrecorded && vb.kind != Variant::kUnrecorded) {
    const bool gpu =
        IsGpuBackendName(va.backend) || IsGpuBackendName(vb.backend);
    if (va.name != vb.name) {
      if (va.backend == "cudnn" && vb.backend == "cudnn" && same_class) {
        return Hint("ND-CUDNN-AUTOTUNE",
                    absl::StrCat("the runs ran different cuDNN algorithms for ",
                                 op, " (", va.name, " vs ", vb.name, ")"));
      }
      const std::string detail =
          absl::StrCat(" (", op, " ran ", va.name, " vs ", vb.name, ")");
      if (va.algorithm == "canonical" && vb.algorithm == "canonical") {
        return CanonicalMismatch(detail);
      }
      if (!same_class) return CrossClassSource(gpu, detail);
      return Hint("LS-VARIANT-MISMATCH",
                  absl::StrCat("the runs ran different kernel variants", detail,
                               " on one hardware class"));
    }
    const std::string detail =
        absl::StrCat(" (both ran ", va.name, " for ", op, ")");
    if (va.kind == Variant::kDeterministic) {
      if (!same_class && va.algorithm != "canonical" && mode != v1::CANONICAL) {
        return CrossClassSource(gpu, detail);
      }
      if (va.algorithm == "canonical") return CanonicalMismatch(detail);
      return Hint(
          "LS-UPSTREAM-DIVERGENCE",
          absl::StrCat(
              "a deterministic kernel gives identical bits for identical "
              "inputs",
              detail,
              ", so the difference entered upstream of this tensor (in state "
              "the capture policy left out) or comes from the device (faulty "
              "hardware, injected fault, kernel bug)"));
    }
    // Recorded but not classifiable: name it, claim nothing more.
    return Hint("LS-UNCLASSIFIED-VARIANT",
                absl::StrCat(op, " ran ", va.name,
                             ", a variant whose determinism is not "
                             "catalogued; compare it with the catalogue "
                             "entries for ",
                             op));
  }
  // 3. No variant recorded: the job's mode, overrides and backend decide,
  // and the hint says so.
  const std::string unrecorded = " (kernel variant not recorded)";
  const auto override_it = config.op_algorithms().find(op);
  const bool overridden = override_it != config.op_algorithms().end() &&
                          override_it->second != "canonical" &&
                          override_it->second != "deterministic";
  const bool cpu_job = config.backend() == v1::CPU;
  const bool gpu_job = config.backend() == v1::CUDA;
  if (mode == v1::DEFAULT || overridden) {
    const std::string algorithm =
        overridden ? override_it->second : std::string("default");
    if (absl::StrContains(algorithm, "autotune")) {
      Variant v;
      v.autotune = true;
      v.backend = gpu_job ? "cudnn" : "cpu";
      v.name = algorithm;
      CauseHint h = FromNondeterministicVariant(op, v);
      absl::StrAppend(h.mutable_text(), unrecorded);
      return h;
    }
    if (absl::StrContains(algorithm, "threaded")) {
      return Hint("ND-CPU-THREAD-REDUCTION",
                  absl::StrCat(op,
                               " split its reduction by thread count and "
                               "scheduling",
                               unrecorded));
    }
    const bool atomic = overridden ? absl::StrContains(algorithm, "atomic")
                                   : HasAtomicDefault(op);
    if (atomic) {
      const std::string ran =
          absl::StrCat("likely ", algorithm, " for ", op, unrecorded);
      if (cpu_job) return CpuAtomicSource(op, ran);
      return GpuAtomicSource(op, ran);
    }
    // Otherwise the op's DEFAULT kernel is its deterministic one.
  }
  if (mode != v1::CANONICAL) {
    if (!same_class) return CrossClassSource(gpu_job, unrecorded);
    return Hint("LS-UPSTREAM-DIVERGENCE",
                absl::StrCat("deterministic kernels give identical bits for "
                             "identical inputs on one hardware class, so the "
                             "difference entered upstream of ",
                             op,
                             " (in state the capture policy left out) or "
                             "comes from the device (faulty hardware, "
                             "injected fault, kernel bug)",
                             unrecorded));
  }
  return CanonicalMismatch(unrecorded);
}

// ---------------------------------------------------------------------------
// Streaming several runs' steps side by side

// Reads one step of every run per Advance(): memory for one step of each.
class StepWalk {
 public:
  StepWalk(const TensorManifest& manifest, std::vector<const Run*> runs,
           std::vector<StepReader*> readers)
      : entries_(manifest.entries_size()),
        runs_(std::move(runs)),
        readers_(std::move(readers)),
        current_(readers_.size()),
        active_(readers_.size(), true) {}

  // Stops reading run i (its current step is dropped).
  void Drop(size_t i) {
    active_[i] = false;
    current_[i].reset();
  }

  // Reads the next step of every active run. false after the last step.
  // INVALID_ARGUMENT when the runs do not end together, record different
  // steps or a step is not aligned to the manifest.
  absl::StatusOr<bool> Advance() {
    int first = -1;
    for (size_t i = 0; i < readers_.size(); ++i) {
      if (!active_[i]) continue;
      current_[i].reset();
      LS_ASSIGN_OR_RETURN(current_[i], readers_[i]->Next());
      if (first < 0) first = static_cast<int>(i);
    }
    if (first < 0) return false;
    const std::optional<StepRecord>& lead = current_[first];
    for (size_t i = 0; i < readers_.size(); ++i) {
      if (!active_[i]) continue;
      const std::optional<StepRecord>& s = current_[i];
      if (s.has_value() != lead.has_value()) {
        const size_t has = s.has_value() ? i : first;
        const size_t lacks = s.has_value() ? first : i;
        return absl::InvalidArgumentError(absl::StrFormat(
            "run %s lacks step %d that run %s recorded", runs_[lacks]->run_id(),
            current_[has]->step, runs_[has]->run_id()));
      }
      if (!s.has_value()) continue;
      if (s->step != lead->step) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "runs %s and %s recorded different steps (%d vs %d)",
            runs_[first]->run_id(), runs_[i]->run_id(), lead->step, s->step));
      }
      if (static_cast<int>(s->fingerprints.size()) != entries_) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "run %s step %d has %d fingerprints, not aligned to the "
            "manifest's %d entries",
            runs_[i]->run_id(), s->step, s->fingerprints.size(), entries_));
      }
    }
    return lead.has_value();
  }

  const StepRecord& step(size_t i) const { return *current_[i]; }

 private:
  const int entries_;
  std::vector<const Run*> runs_;
  std::vector<StepReader*> readers_;
  std::vector<std::optional<StepRecord>> current_;
  std::vector<bool> active_;
};

// The comparison of one run against a reference run, fed step by step.
class PairComparison {
 public:
  PairComparison(const TensorManifest* manifest, const JobConfig* config,
                 const Run* a, const Run* b)
      : manifest_(manifest), config_(config), a_(a), b_(b) {}

  void Add(const StepRecord& sa, const StepRecord& sb) {
    const int entries = manifest_->entries_size();
    compared_ += entries;
    if (!sa.step_digest.empty() && sa.step_digest == sb.step_digest) return;
    for (int i = 0; i < entries; ++i) {
      const TensorFingerprint& fa = sa.fingerprints[i];
      const TensorFingerprint& fb = sb.fingerprints[i];
      if (SameFingerprint(fa, fb)) continue;
      if (first_.has_value()) {
        ++downstream_;
        continue;
      }
      first_ = MakeDivergence(*manifest_, *config_, *a_, *b_, sa.step, i,
                              fa.stats(), fb.stats());
    }
  }

  std::optional<Divergence> Finish() {
    if (first_.has_value()) {
      first_->set_downstream_differing(downstream_);
      first_->set_tensors_compared(compared_);
    }
    return std::move(first_);
  }

  static Divergence MakeDivergence(const TensorManifest& manifest,
                                   const JobConfig& config, const Run& a,
                                   const Run& b, int32_t step, int index,
                                   const TensorStats& stats_a,
                                   const TensorStats& stats_b) {
    Divergence d;
    d.set_run_a(a.run_id());
    d.set_run_b(b.run_id());
    d.set_step(step);
    *d.mutable_tensor() = manifest.entries(index);
    *d.mutable_stats_a() = stats_a;
    *d.mutable_stats_b() = stats_b;
    *d.mutable_magnitude() = MagnitudeOf(stats_a, stats_b);
    *d.mutable_cause() =
        CauseFor(manifest.entries(index), config, a, b, stats_a, stats_b);
    return d;
  }

 private:
  const TensorManifest* manifest_;
  const JobConfig* config_;
  const Run* a_;
  const Run* b_;
  std::optional<Divergence> first_;
  int64_t downstream_ = 0;
  int64_t compared_ = 0;
};

bool StepHasNan(const StepRecord& step) {
  for (const TensorFingerprint& f : step.fingerprints) {
    if (f.stats().nan_count() > 0) return true;
  }
  return false;
}

bool Earlier(const Divergence& x, const Divergence& y) {
  if (x.step() != y.step()) return x.step() < y.step();
  return x.tensor().index() < y.tensor().index();
}

bool IsCanonicalJob(const Job& job) {
  return ModeOf(job.spec().config()) == v1::CANONICAL;
}

// ---------------------------------------------------------------------------
// Certificates

struct Evidence {
  std::vector<const Run*> runs;  // succeeded, by index
  bool nan_free = true;
};

Certificate MakeCertificate(const Job& job, v1::Level level,
                            const std::string& class_digest,
                            const std::string& golden,
                            const std::map<std::string, std::string>& names,
                            int canonical_version, int64_t now_unix_ms) {
  Certificate c;
  c.set_certificate_id(absl::StrCat(
      "cert-",
      Digest128Hex(absl::StrCat(job.job_id(), "|", v1::Level_Name(level), "|",
                                class_digest))
          .substr(0, 20)));
  c.set_model_digest(job.model_digest());
  c.set_config_digest(job.config_digest());
  c.set_model_name(job.spec().model().name());
  c.set_level(level);
  c.add_evidence_job_ids(job.job_id());
  c.set_golden_run_digest(golden);
  c.set_canonical_version(canonical_version);
  c.set_issued_unix_ms(now_unix_ms);
  if (!class_digest.empty()) {
    c.set_hardware_class_digest(class_digest);
    auto it = names.find(class_digest);
    if (it != names.end()) c.set_hardware_class(it->second);
  }
  return c;
}

// Distinct physical devices among `device_ids`. Runs that did not record a
// device could have run on any of the recorded ones, so they add a device
// only when no run recorded one.
size_t DistinctDevices(const std::set<std::string>& device_ids) {
  size_t known = 0;
  for (const std::string& d : device_ids) {
    if (!d.empty()) ++known;
  }
  return known > 0 ? known : (device_ids.empty() ? 0 : 1);
}

std::vector<Certificate> CertificatesFor(
    const Job& job, const Evidence& evidence,
    const std::map<std::string, std::string>& names, int canonical_version,
    int64_t now_unix_ms) {
  std::vector<Certificate> out;
  const std::string golden = evidence.runs.front()->run_digest();
  std::map<std::string, int> runs_per_worker;
  std::map<std::string, std::string> worker_class;
  std::map<std::string, std::set<std::string>> devices_per_class;
  for (const Run* r : evidence.runs) {
    ++runs_per_worker[r->worker_id()];
    worker_class[r->worker_id()] = r->hardware_class_digest();
    devices_per_class[r->hardware_class_digest()].insert(r->device_id());
  }
  std::set<std::string> run_to_run_classes;
  for (const auto& [worker, n] : runs_per_worker) {
    if (n >= 2) run_to_run_classes.insert(worker_class[worker]);
  }
  for (const std::string& c : run_to_run_classes) {
    out.push_back(MakeCertificate(job, v1::RUN_TO_RUN, c, golden, names,
                                  canonical_version, now_unix_ms));
  }
  for (const auto& [c, devices] : devices_per_class) {
    if (DistinctDevices(devices) >= 2) {
      out.push_back(MakeCertificate(job, v1::CROSS_DEVICE, c, golden, names,
                                    canonical_version, now_unix_ms));
    }
  }
  if (devices_per_class.size() >= 2 && IsCanonicalJob(job) &&
      evidence.nan_free) {
    Certificate c = MakeCertificate(job, v1::CROSS_CLASS, "", golden, names,
                                    canonical_version, now_unix_ms);
    for (const auto& [digest, devices] : devices_per_class) {
      c.add_hardware_classes(digest);
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

v1::Magnitude MagnitudeOf(const TensorStats& a, const TensorStats& b) {
  v1::Magnitude m;
  m.set_sum_rel(RelDiff(a.sum(), b.sum()));
  m.set_l2_rel(RelDiff(a.l2(), b.l2()));
  m.set_max_abs_rel(RelDiff(a.max_abs(), b.max_abs()));
  return m;
}

CauseHint CauseFor(const ManifestEntry& entry, const JobConfig& config,
                   const Run& a, const Run& b) {
  return CauseForImpl(entry, config, a, b, nullptr, nullptr);
}

CauseHint CauseFor(const ManifestEntry& entry, const JobConfig& config,
                   const Run& a, const Run& b, const TensorStats& stats_a,
                   const TensorStats& stats_b) {
  return CauseForImpl(entry, config, a, b, &stats_a, &stats_b);
}

absl::Status VerifyRunSteps(const TensorManifest& manifest, const Run& run,
                            const std::string& reported_run_digest,
                            StepReader* steps) {
  const int expected_steps = manifest.captured_steps_size() > 0
                                 ? manifest.captured_steps_size()
                                 : std::max(0, manifest.steps());
  auto expected_step = [&manifest](int i) {
    return manifest.captured_steps_size() > 0 ? manifest.captured_steps(i) : i;
  };
  absl::StatusOr<hash::Fingerprint> manifest_fp =
      hash::Fingerprint::FromHex(manifest.manifest_digest());
  if (!manifest_fp.ok()) {
    return absl::DataLossError(
        absl::StrCat("run ", run.run_id(), ": manifest digest \"",
                     manifest.manifest_digest(), "\" is not a digest"));
  }
  // One 16-byte digest per step: the run digest is defined over all of them.
  std::vector<hash::Fingerprint> parts;
  parts.push_back(*manifest_fp);
  std::vector<hash::Fingerprint> fps;
  int stored = 0;
  while (true) {
    LS_ASSIGN_OR_RETURN(std::optional<StepRecord> step, steps->Next());
    if (!step.has_value()) break;
    if (stored >= expected_steps) {
      return absl::DataLossError(
          absl::StrFormat("run %s: stored step %d beyond the %d captured steps",
                          run.run_id(), step->step, expected_steps));
    }
    if (step->step != expected_step(stored)) {
      return absl::DataLossError(
          absl::StrFormat("run %s: stored step %d where step %d was expected",
                          run.run_id(), step->step, expected_step(stored)));
    }
    if (static_cast<int>(step->fingerprints.size()) !=
        manifest.entries_size()) {
      return absl::DataLossError(absl::StrFormat(
          "run %s step %d: %d fingerprints stored for %d manifest entries",
          run.run_id(), step->step, step->fingerprints.size(),
          manifest.entries_size()));
    }
    fps.clear();
    for (const TensorFingerprint& f : step->fingerprints) {
      fps.push_back(hash::Fingerprint{f.hash_hi(), f.hash_lo()});
    }
    const hash::Fingerprint step_digest = hash::CombineDigests(fps);
    if (step_digest.ToHex() != step->step_digest) {
      return absl::DataLossError(absl::StrFormat(
          "run %s step %d: the worker's step digest %s does not match its "
          "fingerprints (%s)",
          run.run_id(), step->step, step->step_digest, step_digest.ToHex()));
    }
    parts.push_back(step_digest);
    ++stored;
  }
  if (stored != expected_steps) {
    return absl::DataLossError(
        absl::StrFormat("run %s finished with %d of %d captured steps stored",
                        run.run_id(), stored, expected_steps));
  }
  const std::string run_digest = hash::CombineDigests(parts).ToHex();
  if (run_digest != reported_run_digest) {
    return absl::DataLossError(absl::StrFormat(
        "run %s: the reported run digest %s does not match the stored steps "
        "(%s)",
        run.run_id(), reported_run_digest, run_digest));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Divergence>> CompareRunSteps(
    const TensorManifest& manifest, const JobConfig& config, const Run& a,
    StepReader* a_steps, const Run& b, StepReader* b_steps) {
  StepWalk walk(manifest, {&a, &b}, {a_steps, b_steps});
  PairComparison pair(&manifest, &config, &a, &b);
  while (true) {
    LS_ASSIGN_OR_RETURN(bool more, walk.Advance());
    if (!more) break;
    pair.Add(walk.step(0), walk.step(1));
  }
  return pair.Finish();
}

absl::StatusOr<std::optional<Divergence>> CompareRunData(
    const TensorManifest& manifest, const JobConfig& config, const RunData& a,
    const RunData& b) {
  VectorStepReader ra(&a.steps);
  VectorStepReader rb(&b.steps);
  return CompareRunSteps(manifest, config, a.run, &ra, b.run, &rb);
}

std::string LayerLabel(const v1::Model& model, const std::string& layer) {
  std::string label = absl::StrFormat("layer \"%s\"", layer);
  for (const v1::Layer& l : model.layers()) {
    if (l.name() == layer && !l.origin().empty()) {
      absl::StrAppend(&label, " (from ", l.origin(), ")");
      break;
    }
  }
  return label;
}

absl::StatusOr<JobVerdict> JudgeJob(
    const Job& job, const TensorManifest& manifest, std::vector<RunSteps> runs,
    const std::map<std::string, std::string>& class_names,
    int canonical_version, int64_t now_unix_ms) {
  JobVerdict verdict;
  Report& report = verdict.report;
  report.set_job_id(job.job_id());
  std::vector<RunSteps*> ok;
  int failed = 0;
  for (RunSteps& r : runs) {
    if (r.run.state() == v1::RUN_SUCCEEDED && r.steps != nullptr) {
      ok.push_back(&r);
      (*report.mutable_run_digests())[r.run.run_id()] = r.run.run_digest();
    } else if (r.run.state() == v1::RUN_FAILED) {
      ++failed;
    }
  }
  std::sort(ok.begin(), ok.end(), [](const RunSteps* x, const RunSteps* y) {
    return x->run.index() < y->run.index();
  });
  switch (job.state()) {
    case v1::JOB_SUCCEEDED:
      break;
    case v1::JOB_FAILED:
      report.set_verdict(v1::FAILED);
      report.set_summary(absl::StrCat("FAILED: ", job.failure_reason().empty()
                                                      ? "the job failed"
                                                      : job.failure_reason()));
      return verdict;
    case v1::JOB_CANCELLED:
      report.set_verdict(v1::INCONCLUSIVE);
      report.set_summary(absl::StrCat("INCONCLUSIVE: the job was cancelled",
                                      job.failure_reason().empty() ? "" : ": ",
                                      job.failure_reason()));
      return verdict;
    default:
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job.job_id(), " is ", v1::JobState_Name(job.state()),
          ": only a finished job is judged"));
  }
  if (failed > 0 && ok.size() < 2) {
    report.set_verdict(v1::FAILED);
    report.set_summary(absl::StrFormat(
        "FAILED: %d run(s) failed; %d succeeded: nothing to compare", failed,
        ok.size()));
    return verdict;
  }
  if (ok.size() < 2) {
    report.set_verdict(v1::INCONCLUSIVE);
    report.set_summary(absl::StrFormat(
        "INCONCLUSIVE: %d successful run(s): at least two are needed to "
        "compare",
        ok.size()));
    return verdict;
  }

  // Every run against the reference (the first by index), side by side.
  const JobConfig& config = job.spec().config();
  std::vector<const Run*> run_ptrs;
  std::vector<StepReader*> readers;
  for (RunSteps* r : ok) {
    run_ptrs.push_back(&r->run);
    readers.push_back(r->steps.get());
  }
  StepWalk walk(manifest, run_ptrs, readers);
  std::vector<PairComparison> pairs;
  for (size_t i = 1; i < ok.size(); ++i) {
    pairs.emplace_back(&manifest, &config, run_ptrs[0], run_ptrs[i]);
  }
  Evidence evidence;
  evidence.runs = run_ptrs;
  while (true) {
    LS_ASSIGN_OR_RETURN(bool more, walk.Advance());
    if (!more) break;
    for (size_t i = 0; i < ok.size(); ++i) {
      if (evidence.nan_free && StepHasNan(walk.step(i))) {
        evidence.nan_free = false;
      }
      if (i > 0) pairs[i - 1].Add(walk.step(0), walk.step(i));
    }
  }
  std::optional<Divergence> earliest;
  int differing_runs = 0;
  for (PairComparison& pair : pairs) {
    std::optional<Divergence> d = pair.Finish();
    if (!d.has_value()) continue;
    ++differing_runs;
    if (!earliest.has_value() || Earlier(*d, *earliest))
      earliest = std::move(d);
  }
  const Run& ref = *run_ptrs[0];
  if (earliest.has_value()) {
    report.set_verdict(v1::NONDETERMINISTIC);
    const Divergence& d = *earliest;
    report.set_summary(absl::StrFormat(
        "NONDETERMINISTIC: %d of %d runs differ from %s; first at step %d, "
        "%s, %s %s (%s), relative L2 difference %.3g; %d later "
        "tensors differ too; likely cause %s",
        differing_runs, ok.size() - 1, ref.run_id(), d.step(),
        LayerLabel(job.spec().model(), d.tensor().layer()),
        v1::Phase_Name(d.tensor().phase()),
        v1::TensorRole_Name(d.tensor().role()), d.tensor().op(),
        d.magnitude().l2_rel(), d.downstream_differing(), d.cause().id()));
    *report.mutable_divergence() = std::move(*earliest);
    return verdict;
  }

  report.set_verdict(v1::REPRODUCIBLE);
  verdict.certificates = CertificatesFor(job, evidence, class_names,
                                         canonical_version, now_unix_ms);
  v1::Level level = v1::LEVEL_UNSPECIFIED;
  for (const Certificate& c : verdict.certificates) {
    level = std::max(level, c.level());
    report.add_certificate_ids(c.certificate_id());
  }
  report.set_level(level);
  std::set<std::string> workers, classes, devices;
  for (const Run* r : run_ptrs) {
    workers.insert(r->worker_id());
    classes.insert(r->hardware_class_digest());
    devices.insert(r->device_id());
  }
  std::string summary = absl::StrFormat(
      "REPRODUCIBLE: %d runs on %d worker(s), %d device(s), %d hardware "
      "class(es) are bit-identical (run digest %s); certified: %s",
      ok.size(), workers.size(), DistinctDevices(devices), classes.size(),
      ref.run_digest(),
      level == v1::LEVEL_UNSPECIFIED ? "nothing" : v1::Level_Name(level));
  if (classes.size() >= 2 && level != v1::CROSS_CLASS) {
    absl::StrAppend(&summary, IsCanonicalJob(job)
                                  ? "; no CROSS_CLASS: the runs hold NaNs"
                                  : "; no CROSS_CLASS: only CANONICAL jobs");
  }
  report.set_summary(summary);
  return verdict;
}

// ---------------------------------------------------------------------------
// Fleet audits

namespace {

// The devices of runs, where runs without a device id share one unknown
// device.
size_t DeviceCount(const std::vector<size_t>& runs,
                   const std::vector<const Run*>& all) {
  std::set<std::string> devices;
  for (size_t k : runs) devices.insert(all[k]->device_id());
  return devices.size();
}

// The per-tensor vote among an audit's runs, fed one step of every run at
// a time. Runs are split into groups (the whole fleet, or one class each);
// within a group, a run stays in the vote while it agrees with the strict
// majority (of at least 3 distinct devices) at every tensor.
class AuditVote {
 public:
  enum class Standing { kPending, kOutlier, kUndecided };

  AuditVote(const TensorManifest* manifest, const JobConfig* config,
            std::vector<const Run*> runs,
            std::vector<std::vector<size_t>> groups)
      : manifest_(manifest),
        config_(config),
        entries_(manifest->entries_size()),
        runs_(std::move(runs)),
        standing_(runs_.size(), Standing::kPending),
        divergence_(runs_.size()),
        downstream_(runs_.size(), 0),
        compared_(runs_.size(), 0) {
    for (std::vector<size_t>& members : groups) {
      Group g;
      g.members = std::move(members);
      groups_.push_back(std::move(g));
    }
  }

  // Votes on the current step of every run; stops reading the runs of a
  // group that reached no majority.
  void Step(StepWalk* walk) {
    for (Group& g : groups_) {
      if (g.ended) continue;
      StepGroup(&g, *walk);
      if (g.ended) {
        for (size_t k : g.members) walk->Drop(k);
      }
    }
  }

  Standing standing(size_t k) const { return standing_[k]; }

  // The divergence of an outlier, with its downstream count (up to where
  // its group's vote ended) and the tensors compared.
  std::optional<Divergence> TakeDivergence(size_t k) {
    if (divergence_[k].has_value()) {
      divergence_[k]->set_downstream_differing(downstream_[k]);
      divergence_[k]->set_tensors_compared(compared_[k]);
    }
    return std::move(divergence_[k]);
  }

  // Where each group without a majority stopped, "; "-separated.
  std::string NoMajorityWhere() const {
    std::vector<std::string> where;
    for (const Group& g : groups_) {
      if (g.ended) where.push_back(g.no_majority_where);
    }
    return absl::StrJoin(where, "; ");
  }

 private:
  struct Group {
    std::vector<size_t> members;  // indices into runs_
    bool ended = false;           // no majority reached: the vote stopped
    std::string no_majority_where;
  };

  void StepGroup(Group* g, const StepWalk& walk) {
    std::vector<size_t> pending, outliers;
    for (size_t k : g->members) {
      if (standing_[k] == Standing::kPending) pending.push_back(k);
      if (standing_[k] == Standing::kOutlier) outliers.push_back(k);
    }
    if (pending.empty()) return;
    for (size_t k : pending) compared_[k] += entries_;
    for (size_t k : outliers) compared_[k] += entries_;
    // Digest first: a step every pending run agrees on needs no vote, and
    // the outliers are compared against it for their downstream count.
    const StepRecord& lead = walk.step(pending.front());
    bool agree = !lead.step_digest.empty();
    for (size_t k : pending) {
      agree = agree && walk.step(k).step_digest == lead.step_digest;
    }
    if (agree) {
      for (size_t k : outliers) {
        const StepRecord& s = walk.step(k);
        if (s.step_digest == lead.step_digest) continue;
        for (int i = 0; i < entries_; ++i) {
          if (!SameFingerprint(s.fingerprints[i], lead.fingerprints[i])) {
            ++downstream_[k];
          }
        }
      }
      return;
    }
    std::vector<size_t> left_here;  // runs that leave the majority now
    for (int i = 0; i < entries_; ++i) {
      std::optional<size_t> ref = VoteTensor(g, walk, lead.step, i);
      if (!ref.has_value()) return;  // no majority: the group's vote ends
      const TensorFingerprint& want = walk.step(*ref).fingerprints[i];
      for (size_t k : pending) {
        if (standing_[k] != Standing::kPending) continue;
        const TensorFingerprint& f = walk.step(k).fingerprints[i];
        if (SameFingerprint(f, want)) continue;
        standing_[k] = Standing::kOutlier;
        divergence_[k] = PairComparison::MakeDivergence(
            *manifest_, *config_, *runs_[*ref], *runs_[k], lead.step, i,
            want.stats(), f.stats());
        compared_[k] -= entries_ - i - 1;  // counted below, as downstream
        left_here.push_back(k);
      }
      for (size_t k : outliers) {
        if (!SameFingerprint(walk.step(k).fingerprints[i], want)) {
          ++downstream_[k];
        }
      }
    }
    // The tensors after the divergence in the step where a run left the
    // majority, against a run still in it.
    size_t still = g->members.front();
    for (size_t p : pending) {
      if (standing_[p] == Standing::kPending) {
        still = p;
        break;
      }
    }
    for (size_t k : left_here) {
      const StepRecord& s = walk.step(k);
      const StepRecord& m = walk.step(still);
      const int from = divergence_[k]->tensor().index() + 1;
      for (int i = from; i < entries_; ++i) {
        if (!SameFingerprint(s.fingerprints[i], m.fingerprints[i])) {
          ++downstream_[k];
        }
      }
      compared_[k] += entries_ - from;
    }
  }

  // The run whose fingerprint at entry i the strict majority holds, among
  // the group's pending runs; nullopt (and the group's vote ends, its
  // pending runs UNDECIDED) when there is none.
  std::optional<size_t> VoteTensor(Group* g, const StepWalk& walk, int32_t step,
                                   int i) {
    std::map<std::pair<uint64_t, uint64_t>, std::vector<size_t>> by_value;
    for (size_t k : g->members) {
      if (standing_[k] != Standing::kPending) continue;
      const TensorFingerprint& f = walk.step(k).fingerprints[i];
      by_value[{f.hash_hi(), f.hash_lo()}].push_back(k);
    }
    if (by_value.size() == 1) return by_value.begin()->second.front();
    std::vector<size_t> voters;
    for (const auto& [value, ks] : by_value) {
      voters.insert(voters.end(), ks.begin(), ks.end());
    }
    const size_t devices = DeviceCount(voters, runs_);
    const std::vector<size_t>* majority = nullptr;
    int winners = 0;
    std::vector<std::string> split;
    for (const auto& [value, ks] : by_value) {
      const size_t d = DeviceCount(ks, runs_);
      split.push_back(absl::StrCat(d));
      if (d >= 3 && 2 * d > devices) {
        majority = &ks;
        ++winners;
      }
    }
    if (winners == 1) return majority->front();
    const ManifestEntry& e = manifest_->entries(i);
    g->ended = true;
    g->no_majority_where =
        absl::StrFormat("step %d, layer \"%s\", %s %s: %d device(s) split %s",
                        step, e.layer(), v1::TensorRole_Name(e.role()), e.op(),
                        devices, absl::StrJoin(split, "/"));
    for (size_t k : voters) standing_[k] = Standing::kUndecided;
    return std::nullopt;
  }

  const TensorManifest* manifest_;
  const JobConfig* config_;
  const int entries_;
  std::vector<const Run*> runs_;
  std::vector<Group> groups_;
  std::vector<Standing> standing_;
  std::vector<std::optional<Divergence>> divergence_;
  std::vector<int64_t> downstream_;
  std::vector<int64_t> compared_;
};

}  // namespace

absl::Status EvaluateAudit(
    const Job& job, const TensorManifest& manifest, std::vector<RunSteps> runs,
    const std::map<std::string, std::string>& class_names, v1::Audit* audit) {
  audit->clear_workers();
  audit->clear_classes();
  audit->set_no_majority(false);
  const bool canonical = IsCanonicalJob(job);

  // Runs with a result, read side by side.
  std::vector<size_t> with_result;  // indices into runs
  std::vector<const Run*> run_ptrs;
  std::vector<StepReader*> readers;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].run.state() == v1::RUN_SUCCEEDED && runs[i].steps != nullptr) {
      with_result.push_back(i);
      run_ptrs.push_back(&runs[i].run);
      readers.push_back(runs[i].steps.get());
    }
  }
  const size_t n = with_result.size();
  // CANONICAL: one vote over the fleet. Otherwise one vote per class.
  std::vector<std::vector<size_t>> groups;
  {
    std::map<std::string, size_t> group_of_class;
    for (size_t k = 0; k < n; ++k) {
      const std::string key =
          canonical ? std::string() : run_ptrs[k]->hardware_class_digest();
      auto [it, inserted] = group_of_class.emplace(key, groups.size());
      if (inserted) groups.emplace_back();
      groups[it->second].push_back(k);
    }
  }
  AuditVote vote(&manifest, &job.spec().config(), run_ptrs, std::move(groups));
  StepWalk walk(manifest, run_ptrs, readers);
  while (true) {
    LS_ASSIGN_OR_RETURN(bool more, walk.Advance());
    if (!more) break;
    vote.Step(&walk);
  }

  // Worker results in the order of the job's runs.
  std::map<size_t, size_t> result_of;  // runs index -> k
  for (size_t k = 0; k < n; ++k) result_of[with_result[k]] = k;
  int healthy = 0, outliers = 0, undecided = 0, no_result = 0;
  struct ClassTally {
    int workers = 0;
    int agreeing = 0;
    std::string digest;  // of the healthy runs
  };
  std::map<std::string, ClassTally> classes;
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& run = runs[i].run;
    v1::AuditWorkerResult* w = audit->add_workers();
    w->set_worker_id(run.worker_id());
    w->set_hardware_class_digest(run.hardware_class_digest());
    w->set_run_id(run.run_id());
    w->set_device_id(run.device_id());
    auto it = result_of.find(i);
    if (it == result_of.end()) {
      w->set_health(v1::NO_RESULT);
      ++no_result;
      continue;
    }
    const size_t k = it->second;
    w->set_run_digest(run.run_digest());
    ClassTally& tally = classes[run.hardware_class_digest()];
    ++tally.workers;
    switch (vote.standing(k)) {
      case AuditVote::Standing::kPending:
        w->set_health(v1::HEALTHY);
        ++healthy;
        ++tally.agreeing;
        tally.digest = run.run_digest();
        break;
      case AuditVote::Standing::kOutlier:
        w->set_health(v1::OUTLIER);
        ++outliers;
        if (std::optional<Divergence> d = vote.TakeDivergence(k)) {
          *w->mutable_divergence() = std::move(*d);
        }
        break;
      case AuditVote::Standing::kUndecided:
        w->set_health(v1::UNDECIDED);
        ++undecided;
        break;
    }
  }
  // Healthy runs agreed with their vote's majority at every tensor.
  std::set<std::string> healthy_digests;
  for (const auto& [cls, tally] : classes) {
    if (!tally.digest.empty()) healthy_digests.insert(tally.digest);
  }
  for (const auto& [cls, tally] : classes) {
    v1::AuditClassResult* c = audit->add_classes();
    c->set_hardware_class_digest(cls);
    auto name = class_names.find(cls);
    if (name != class_names.end()) c->set_hardware_class(name->second);
    c->set_majority_digest(tally.digest);
    c->set_workers(tally.workers);
    c->set_agreeing(tally.agreeing);
    c->set_agrees_with_other_classes(!tally.digest.empty() &&
                                     healthy_digests.size() == 1);
  }

  const std::string where = vote.NoMajorityWhere();
  const bool no_majority = !where.empty();
  audit->set_no_majority(no_majority);
  std::string summary = absl::StrFormat(
      "%d worker(s) in %d hardware class(es): %d healthy, %d outlier(s), %d "
      "undecided, %d without a result",
      runs.size(), classes.size(), healthy, outliers, undecided, no_result);
  absl::StrAppend(&summary,
                  canonical ? "; voted per tensor across the fleet (CANONICAL)"
                            : "; voted per tensor within each class");
  if (no_majority) {
    absl::StrAppend(&summary,
                    "; no majority (a strict majority of at least 3 agreeing "
                    "devices is needed) at ",
                    where, ": the undecided workers are not judged");
  }
  for (const v1::AuditWorkerResult& w : audit->workers()) {
    if (w.health() != v1::OUTLIER) continue;
    absl::StrAppendFormat(
        &summary, "; outlier %s: step %d, %s, %s %s", w.worker_id(),
        w.divergence().step(),
        LayerLabel(job.spec().model(), w.divergence().tensor().layer()),
        v1::TensorRole_Name(w.divergence().tensor().role()),
        w.divergence().tensor().op());
  }
  audit->set_summary(summary);
  return absl::OkStatus();
}

}  // namespace lockstep::server
