#include "worker/exec/compare.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/manifest.h"

namespace lockstep::worker {

namespace v1 = ::lockstep::v1;

double RelativeDifference(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::nan("");
  if (a == b) return 0.0;  // includes both zero and equal infinities
  if (std::isinf(a) || std::isinf(b)) return 1.0;
  const double m = std::max(std::fabs(a), std::fabs(b));
  return std::fabs(a - b) / m;
}

namespace {

bool SameHash(const v1::TensorFingerprint& a, const v1::TensorFingerprint& b) {
  return a.hash_hi() == b.hash_hi() && a.hash_lo() == b.hash_lo();
}

RunComparison Incomparable(std::string reason) {
  RunComparison c;
  c.verdict = RunComparison::Verdict::kIncomparable;
  c.reason = std::move(reason);
  return c;
}

}  // namespace

RunComparison CompareRuns(const RunResult& a, const RunResult& b) {
  if (a.manifest.manifest_digest() != b.manifest.manifest_digest()) {
    std::string detail;
    const int n =
        std::min(a.manifest.entries_size(), b.manifest.entries_size());
    for (int i = 0; i < n; ++i) {
      const std::string da = model::DescribeEntry(a.manifest.entries(i));
      const std::string db = model::DescribeEntry(b.manifest.entries(i));
      if (da != db) {
        detail = absl::StrFormat("; first difference at entry %d: %s vs %s", i,
                                 da, db);
        break;
      }
    }
    if (detail.empty()) {
      detail = absl::StrFormat(
          "; %d vs %d entries, %d vs %d steps", a.manifest.entries_size(),
          b.manifest.entries_size(), a.manifest.steps(), b.manifest.steps());
    }
    return Incomparable(
        absl::StrCat("manifests differ: ", a.manifest.manifest_digest(), " vs ",
                     b.manifest.manifest_digest(), detail));
  }
  if (a.captured_steps != b.captured_steps ||
      a.step_digests.size() != b.step_digests.size()) {
    return Incomparable("the runs captured different steps");
  }
  RunComparison c;
  if (a.run_digest == b.run_digest) {
    c.tensors_compared = static_cast<int64_t>(a.captured_steps.size()) *
                         a.manifest.entries_size();
    return c;
  }
  const size_t steps = a.captured_steps.size();
  if (a.fingerprints.size() != steps || b.fingerprints.size() != steps) {
    return Incomparable(
        "the run digests differ but a run has no stored fingerprints to "
        "localise the difference");
  }
  c.verdict = RunComparison::Verdict::kDiverged;
  for (size_t s = 0; s < steps; ++s) {
    const auto& fa = a.fingerprints[s];
    const auto& fb = b.fingerprints[s];
    if (fa.size() != fb.size() ||
        fa.size() != static_cast<size_t>(a.manifest.entries_size())) {
      return Incomparable(absl::StrFormat(
          "step %d: %d vs %d fingerprints for %d manifest entries",
          a.captured_steps[s], fa.size(), fb.size(),
          a.manifest.entries_size()));
    }
    // A step whose digests agree has no differing tensor.
    const bool skip = a.step_digests[s] == b.step_digests[s];
    for (size_t i = 0; i < fa.size(); ++i) {
      ++c.tensors_compared;
      if (skip || SameHash(fa[i], fb[i])) continue;
      if (!c.first.has_value()) {
        TensorDivergence d;
        d.step = a.captured_steps[s];
        d.entry = a.manifest.entries(static_cast<int>(i));
        d.a = fa[i];
        d.b = fb[i];
        d.rel_sum =
            RelativeDifference(fa[i].stats().sum(), fb[i].stats().sum());
        d.rel_l2 = RelativeDifference(fa[i].stats().l2(), fb[i].stats().l2());
        d.rel_max_abs = RelativeDifference(fa[i].stats().max_abs(),
                                           fb[i].stats().max_abs());
        c.first = std::move(d);
      } else {
        ++c.downstream;
      }
    }
  }
  if (!c.first.has_value()) {
    // Digests differ although every fingerprint agrees: only possible when
    // the stored fingerprints do not belong to the digests.
    return Incomparable(
        "run digests differ but every stored fingerprint agrees (inconsistent "
        "results)");
  }
  return c;
}

std::string DescribeComparison(const RunComparison& c) {
  switch (c.verdict) {
    case RunComparison::Verdict::kIdentical:
      return absl::StrFormat("runs agree (%d tensors)", c.tensors_compared);
    case RunComparison::Verdict::kIncomparable:
      return absl::StrCat("runs are incomparable: ", c.reason);
    case RunComparison::Verdict::kDiverged:
      break;
  }
  const TensorDivergence& d = *c.first;
  const v1::TensorStats& sa = d.a.stats();
  const v1::TensorStats& sb = d.b.stats();
  std::string s = absl::StrFormat(
      "runs differ: first divergence at step %d, %s\n"
      "  sum     %.9g vs %.9g (relative difference %.3g)\n"
      "  l2      %.9g vs %.9g (relative difference %.3g)\n"
      "  max_abs %.9g vs %.9g (relative difference %.3g)\n",
      d.step, model::DescribeEntry(d.entry), sa.sum(), sb.sum(), d.rel_sum,
      sa.l2(), sb.l2(), d.rel_l2, sa.max_abs(), sb.max_abs(), d.rel_max_abs);
  if (sa.nan_count() != sb.nan_count() || sa.inf_count() != sb.inf_count()) {
    absl::StrAppendFormat(&s, "  nan/inf %d/%d vs %d/%d\n", sa.nan_count(),
                          sa.inf_count(), sb.nan_count(), sb.inf_count());
  }
  absl::StrAppendFormat(
      &s, "  downstream contaminated: %d later tensors differ", c.downstream);
  return s;
}

}  // namespace lockstep::worker
