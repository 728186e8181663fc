// Comparing two runs tensor by tensor: digest first, then step, then
// tensor. The first differing tensor in execution order is the divergence;
// every later differing tensor (in that step and all later captured steps)
// is "downstream contaminated".
#ifndef LOCKSTEP_WORKER_EXEC_COMPARE_H_
#define LOCKSTEP_WORKER_EXEC_COMPARE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "lockstep/v1/fingerprint.pb.h"
#include "worker/exec/executor.h"

namespace lockstep::worker {

// |a - b| / max(|a|, |b|); 0 when both are 0. NaN inputs give NaN; +-inf
// against a finite value gives 1.
double RelativeDifference(double a, double b);

struct TensorDivergence {
  int step = 0;                       // training step
  lockstep::v1::ManifestEntry entry;  // which tensor
  lockstep::v1::TensorFingerprint a;  // run a's fingerprint (with stats)
  lockstep::v1::TensorFingerprint b;
  double rel_sum = 0.0;  // RelativeDifference of the stats
  double rel_l2 = 0.0;
  double rel_max_abs = 0.0;
};

struct RunComparison {
  enum class Verdict { kIdentical, kDiverged, kIncomparable };
  Verdict verdict = Verdict::kIdentical;
  // kIncomparable: why ("manifests differ: ...", "run b has no stored
  // fingerprints", ...).
  std::string reason;
  // kDiverged: the first differing tensor.
  std::optional<TensorDivergence> first;
  // kDiverged: the number of differing tensors after `first`, over the rest
  // of its step and every later captured step.
  int64_t downstream = 0;
  int64_t tensors_compared = 0;
};

// Compares two runs of the same job. Identical run digests short-cut to
// kIdentical; different manifest digests (or captured steps) are
// kIncomparable; otherwise the stored fingerprints are compared step by
// step (runs without stored fingerprints whose digests differ are
// kIncomparable: nothing can be localised).
RunComparison CompareRuns(const RunResult& a, const RunResult& b);

// Multi-line human description: "runs agree (run digest ...)" or
// "first divergence: step 3, #12 layer \"fc1\" GRAD_WEIGHT ... \n  sum ...".
std::string DescribeComparison(const RunComparison& c);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_EXEC_COMPARE_H_
