#include "server/analysis.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/digest.h"
#include "common/status_macros.h"

namespace lockstep::server {

using ::lockstep::v1::CauseHint;
using ::lockstep::v1::Certificate;
using ::lockstep::v1::Divergence;
using ::lockstep::v1::Job;
using ::lockstep::v1::JobConfig;
using ::lockstep::v1::ManifestEntry;
using ::lockstep::v1::Report;
using ::lockstep::v1::TensorFingerprint;
using ::lockstep::v1::TensorManifest;
using ::lockstep::v1::TensorStats;

namespace {

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

// The catalogue entry of an op's known nondeterministic variant.
std::optional<CauseHint> KnownSource(const std::string& op) {
  if (op == "bias_add.grad") {
    return Hint("ND-ATOMIC-BIAS-GRAD",
                "bias gradient accumulated with atomic adds in arrival order");
  }
  if (op == "conv2d.grad_weight") {
    return Hint("ND-CUDNN-CONV-GRAD-WEIGHT",
                "convolution weight gradient reduced over the batch in a "
                "run-dependent order (atomic or autotuned algorithm)");
  }
  if (op == "conv2d.grad_input") {
    return Hint("ND-CUDNN-CONV-GRAD-INPUT",
                "convolution input gradient accumulated in a run-dependent "
                "order (atomic or autotuned algorithm)");
  }
  if (op == "max_pool2d.grad") {
    return Hint("ND-MAXPOOL-GRAD",
                "max-pool gradient scattered with atomic adds");
  }
  if (op == "resize_bilinear.grad") {
    return Hint("ND-RESIZE-BILINEAR-GRAD",
                "bilinear-resize gradient scattered with atomic adds");
  }
  if (absl::StartsWith(op, "dense.")) {
    return Hint("ND-SPLITK-GEMM",
                "matrix product split over K with partial sums added in "
                "arrival order");
  }
  return std::nullopt;
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
                   bool same_hardware_class) {
  const auto override_it = config.op_algorithms().find(entry.op());
  const bool overridden = override_it != config.op_algorithms().end() &&
                          override_it->second != "canonical";
  const v1::DeterminismMode mode =
      config.determinism() == v1::DETERMINISM_MODE_UNSPECIFIED
          ? v1::CANONICAL
          : config.determinism();
  if (mode == v1::DEFAULT || overridden) {
    if (std::optional<CauseHint> h = KnownSource(entry.op())) return *h;
    return Hint("ND-CPU-THREAD-REDUCTION",
                absl::StrCat(entry.op(),
                             " ran a fast path whose reduction order depends "
                             "on scheduling"));
  }
  if (!same_hardware_class && mode == v1::DETERMINISTIC) {
    return Hint("ND-CPU-VECTOR-WIDTH",
                "DETERMINISTIC kernels repeat on one hardware class only; "
                "classes differ in blocking, vector width and FMA use");
  }
  if (entry.role() == v1::INPUT || entry.role() == v1::LABEL) {
    return Hint("ND-DATA-PIPELINE",
                "the runs read different input data (dataset files differ "
                "between workers?)");
  }
  return Hint("LS-CANONICAL-MISMATCH",
              "deterministic kernels gave different bits: a faulty device "
              "(silent data corruption), an injected fault, or a kernel bug");
}

absl::StatusOr<std::optional<Divergence>> CompareRunData(
    const TensorManifest& manifest, const JobConfig& config, const RunData& a,
    const RunData& b) {
  if (a.steps.size() != b.steps.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "runs %s and %s have %d and %d recorded steps", a.run.run_id(),
        b.run.run_id(), a.steps.size(), b.steps.size()));
  }
  const int entries = manifest.entries_size();
  std::optional<Divergence> first;
  int64_t downstream = 0;
  int64_t compared = 0;
  for (size_t s = 0; s < a.steps.size(); ++s) {
    const store::StepRecord& sa = a.steps[s];
    const store::StepRecord& sb = b.steps[s];
    if (sa.step != sb.step) {
      return absl::InvalidArgumentError(
          absl::StrFormat("runs %s and %s recorded different steps (%d vs %d)",
                          a.run.run_id(), b.run.run_id(), sa.step, sb.step));
    }
    if (static_cast<int>(sa.fingerprints.size()) != entries ||
        static_cast<int>(sb.fingerprints.size()) != entries) {
      return absl::InvalidArgumentError(
          absl::StrFormat("step %d is not aligned to the manifest's %d entries",
                          sa.step, entries));
    }
    compared += entries;
    if (!sa.step_digest.empty() && sa.step_digest == sb.step_digest) {
      continue;  // digest first: identical steps need no tensor walk
    }
    for (int i = 0; i < entries; ++i) {
      if (SameFingerprint(sa.fingerprints[i], sb.fingerprints[i])) continue;
      if (!first.has_value()) {
        Divergence d;
        d.set_run_a(a.run.run_id());
        d.set_run_b(b.run.run_id());
        d.set_step(sa.step);
        *d.mutable_tensor() = manifest.entries(i);
        *d.mutable_stats_a() = sa.fingerprints[i].stats();
        *d.mutable_stats_b() = sb.fingerprints[i].stats();
        *d.mutable_magnitude() =
            MagnitudeOf(sa.fingerprints[i].stats(), sb.fingerprints[i].stats());
        *d.mutable_cause() = CauseFor(
            manifest.entries(i), config,
            a.run.hardware_class_digest() == b.run.hardware_class_digest());
        first = std::move(d);
      } else {
        ++downstream;
      }
    }
  }
  if (first.has_value()) {
    first->set_downstream_differing(downstream);
    first->set_tensors_compared(compared);
  }
  return first;
}

absl::StatusOr<Report> BuildReport(const Job& job,
                                   const TensorManifest& manifest,
                                   const std::vector<RunData>& runs) {
  Report report;
  report.set_job_id(job.job_id());
  std::vector<const RunData*> ok;
  int failed = 0;
  for (const RunData& r : runs) {
    if (r.run.state() == v1::RUN_SUCCEEDED) {
      ok.push_back(&r);
      (*report.mutable_run_digests())[r.run.run_id()] = r.run.run_digest();
    } else if (r.run.state() == v1::RUN_FAILED) {
      ++failed;
    }
  }
  std::sort(ok.begin(), ok.end(), [](const RunData* x, const RunData* y) {
    return x->run.index() < y->run.index();
  });
  if (failed > 0 && ok.size() < 2) {
    report.set_verdict(v1::FAILED);
    report.set_summary(
        absl::StrFormat("%d run(s) failed; %d succeeded: nothing to compare",
                        failed, ok.size()));
    return report;
  }
  if (ok.size() < 2) {
    report.set_verdict(v1::INCONCLUSIVE);
    report.set_summary(absl::StrFormat(
        "%d successful run(s): at least two are needed to compare", ok.size()));
    return report;
  }
  const RunData& ref = *ok[0];
  std::optional<Divergence> earliest;
  int differing_runs = 0;
  for (size_t i = 1; i < ok.size(); ++i) {
    if (ok[i]->run.run_digest() == ref.run.run_digest() &&
        !ref.run.run_digest().empty()) {
      continue;
    }
    LS_ASSIGN_OR_RETURN(
        std::optional<Divergence> d,
        CompareRunData(manifest, job.spec().config(), ref, *ok[i]));
    if (!d.has_value()) continue;  // digests differ but every tensor agrees
    ++differing_runs;
    const bool earlier = !earliest.has_value() ||
                         d->step() < earliest->step() ||
                         (d->step() == earliest->step() &&
                          d->tensor().index() < earliest->tensor().index());
    if (earlier) earliest = std::move(d);
  }
  if (!earliest.has_value()) {
    report.set_verdict(v1::REPRODUCIBLE);
    std::set<std::string> classes;
    std::map<std::string, int> per_worker;
    std::map<std::string, std::set<std::string>> workers_per_class;
    for (const RunData* r : ok) {
      classes.insert(r->run.hardware_class_digest());
      ++per_worker[r->run.worker_id()];
      workers_per_class[r->run.hardware_class_digest()].insert(
          r->run.worker_id());
    }
    v1::Level level = v1::LEVEL_UNSPECIFIED;
    for (const auto& [w, n] : per_worker) {
      if (n >= 2) level = v1::RUN_TO_RUN;
    }
    for (const auto& [c, ws] : workers_per_class) {
      if (ws.size() >= 2) level = v1::CROSS_DEVICE;
    }
    if (classes.size() >= 2) level = v1::CROSS_CLASS;
    report.set_level(level);
    report.set_summary(absl::StrFormat(
        "REPRODUCIBLE: %d runs on %d worker(s), %d hardware class(es) are "
        "bit-identical (run digest %s)",
        ok.size(), per_worker.size(), classes.size(), ref.run.run_digest()));
    return report;
  }
  report.set_verdict(v1::NONDETERMINISTIC);
  const Divergence& d = *earliest;
  report.set_summary(absl::StrFormat(
      "NONDETERMINISTIC: %d of %d runs differ from %s; first at step %d, "
      "layer \"%s\", %s %s (%s), relative L2 difference %.3g; %d later "
      "tensors differ too; likely cause %s",
      differing_runs, ok.size() - 1, ref.run.run_id(), d.step(),
      d.tensor().layer(), v1::Phase_Name(d.tensor().phase()),
      v1::TensorRole_Name(d.tensor().role()), d.tensor().op(),
      d.magnitude().l2_rel(), d.downstream_differing(), d.cause().id()));
  *report.mutable_divergence() = d;
  return report;
}

bool RunsAreNanFree(const std::vector<RunData>& runs) {
  for (const RunData& r : runs) {
    for (const store::StepRecord& step : r.steps) {
      for (const TensorFingerprint& f : step.fingerprints) {
        if (f.stats().nan_count() > 0) return false;
      }
    }
  }
  return true;
}

std::vector<Certificate> CertificatesFor(
    const Job& job, const Report& report,
    const std::map<std::string, std::string>& classes, int canonical_version,
    int64_t now_unix_ms, bool nan_free) {
  std::vector<Certificate> out;
  if (report.verdict() != v1::REPRODUCIBLE) return out;
  std::map<std::string, int> per_worker;
  std::map<std::string, std::string> worker_class;
  std::map<std::string, std::set<std::string>> workers_per_class;
  std::string golden;
  for (const v1::Run& r : job.runs()) {
    if (r.state() != v1::RUN_SUCCEEDED) continue;
    ++per_worker[r.worker_id()];
    worker_class[r.worker_id()] = r.hardware_class_digest();
    workers_per_class[r.hardware_class_digest()].insert(r.worker_id());
    golden = r.run_digest();
  }
  auto make = [&](v1::Level level, const std::string& class_digest) {
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
      auto it = classes.find(class_digest);
      if (it != classes.end()) c.set_hardware_class(it->second);
    }
    return c;
  };
  std::set<std::string> r2r_classes;
  for (const auto& [w, n] : per_worker) {
    if (n >= 2) r2r_classes.insert(worker_class[w]);
  }
  for (const std::string& c : r2r_classes) {
    out.push_back(make(v1::RUN_TO_RUN, c));
  }
  for (const auto& [c, ws] : workers_per_class) {
    if (ws.size() >= 2) out.push_back(make(v1::CROSS_DEVICE, c));
  }
  const bool canonical =
      job.spec().config().determinism() == v1::CANONICAL ||
      job.spec().config().determinism() == v1::DETERMINISM_MODE_UNSPECIFIED;
  if (workers_per_class.size() >= 2 && canonical && nan_free) {
    Certificate c = make(v1::CROSS_CLASS, "");
    for (const auto& [digest, ws] : workers_per_class) {
      c.add_hardware_classes(digest);
    }
    out.push_back(std::move(c));
  }
  return out;
}

absl::Status EvaluateAudit(
    const Job& job, const TensorManifest& manifest,
    const std::vector<RunData>& runs,
    const std::map<std::string, std::string>& class_names, v1::Audit* audit) {
  audit->clear_workers();
  audit->clear_classes();
  // Per class: digest -> the runs that produced it.
  std::map<std::string, std::map<std::string, std::vector<const RunData*>>>
      by_class;
  std::map<std::string, int> overall;  // digest -> workers
  for (const RunData& r : runs) {
    if (r.run.state() != v1::RUN_SUCCEEDED) continue;
    by_class[r.run.hardware_class_digest()][r.run.run_digest()].push_back(&r);
    ++overall[r.run.run_digest()];
  }
  // The reference digest across classes: the one most workers produced.
  std::string reference;
  int reference_count = 0;
  for (const auto& [digest, n] : overall) {
    if (n > reference_count) {
      reference = digest;
      reference_count = n;
    }
  }
  std::map<std::string, std::string> majority;  // class -> digest ("" = none)
  int outliers = 0, no_result = 0, disagreeing_classes = 0;
  for (const auto& [cls, digests] : by_class) {
    std::string best;
    size_t best_n = 0;
    bool tie = false;
    size_t total = 0;
    for (const auto& [digest, rs] : digests) {
      total += rs.size();
      if (rs.size() > best_n) {
        best = digest;
        best_n = rs.size();
        tie = false;
      } else if (rs.size() == best_n) {
        tie = true;
      }
    }
    majority[cls] = (tie && digests.size() > 1) ? "" : best;
    v1::AuditClassResult* c = audit->add_classes();
    c->set_hardware_class_digest(cls);
    auto name = class_names.find(cls);
    if (name != class_names.end()) c->set_hardware_class(name->second);
    c->set_majority_digest(majority[cls]);
    c->set_workers(static_cast<int32_t>(total));
    c->set_agreeing(majority[cls].empty() ? 0 : static_cast<int32_t>(best_n));
    c->set_agrees_with_other_classes(!majority[cls].empty() &&
                                     majority[cls] == reference);
    if (!c->agrees_with_other_classes()) ++disagreeing_classes;
  }
  const bool canonical =
      job.spec().config().determinism() == v1::CANONICAL ||
      job.spec().config().determinism() == v1::DETERMINISM_MODE_UNSPECIFIED;
  for (const RunData& r : runs) {
    v1::AuditWorkerResult* w = audit->add_workers();
    w->set_worker_id(r.run.worker_id());
    w->set_hardware_class_digest(r.run.hardware_class_digest());
    w->set_run_id(r.run.run_id());
    if (r.run.state() != v1::RUN_SUCCEEDED) {
      w->set_health(v1::NO_RESULT);
      ++no_result;
      continue;
    }
    w->set_run_digest(r.run.run_digest());
    const std::string& want = majority[r.run.hardware_class_digest()];
    if (!want.empty() && r.run.run_digest() == want) {
      w->set_health(v1::HEALTHY);
      continue;
    }
    w->set_health(v1::OUTLIER);
    ++outliers;
    // Localise against a run of the class majority (or, without one, of
    // the overall reference).
    const std::string& target = want.empty() ? reference : want;
    const RunData* ref = nullptr;
    for (const RunData& other : runs) {
      if (&other != &r && other.run.state() == v1::RUN_SUCCEEDED &&
          other.run.run_digest() == target) {
        ref = &other;
        break;
      }
    }
    if (ref != nullptr) {
      LS_ASSIGN_OR_RETURN(
          std::optional<Divergence> d,
          CompareRunData(manifest, job.spec().config(), *ref, r));
      if (d.has_value()) *w->mutable_divergence() = std::move(*d);
    }
  }
  std::string summary = absl::StrFormat(
      "%d worker(s) in %d hardware class(es): %d healthy, %d outlier(s), %d "
      "without a result",
      runs.size(), by_class.size(), runs.size() - outliers - no_result,
      outliers, no_result);
  if (canonical && by_class.size() > 1) {
    absl::StrAppend(&summary,
                    disagreeing_classes == 0
                        ? "; all classes agree (CANONICAL)"
                        : absl::StrFormat("; %d class(es) disagree with the "
                                          "others (CANONICAL)",
                                          disagreeing_classes));
  }
  for (const v1::AuditWorkerResult& w : audit->workers()) {
    if (w.health() != v1::OUTLIER || !w.has_divergence()) continue;
    absl::StrAppendFormat(&summary, "; outlier %s: step %d, layer \"%s\", %s",
                          w.worker_id(), w.divergence().step(),
                          w.divergence().tensor().layer(),
                          v1::TensorRole_Name(w.divergence().tensor().role()));
  }
  audit->set_summary(summary);
  return absl::OkStatus();
}

}  // namespace lockstep::server
