#include "kernels/residency.h"

namespace lockstep::kernels {
namespace {

thread_local ScopedResidentRun* active_run = nullptr;

}  // namespace

ScopedResidentRun::ScopedResidentRun(ResidencyCounters* counters)
    : counters_(counters), outer_(active_run) {
  active_run = this;
}

// The queue's device memory is released in stream order (after the kernels
// that write it), so dropping uncollected results is safe.
ScopedResidentRun::~ScopedResidentRun() { active_run = outer_; }

ResidencyCounters* ActiveResidentRun() {
  return active_run != nullptr ? active_run->counters_ : nullptr;
}

std::unique_ptr<FingerprintQueue>* ActiveFingerprintQueue() {
  return active_run != nullptr ? &active_run->queue_ : nullptr;
}

absl::StatusOr<std::vector<hash::FingerprintAndStatsResult>>
CollectQueuedFingerprints() {
  std::unique_ptr<FingerprintQueue>* slot = ActiveFingerprintQueue();
  if (slot == nullptr) {
    return absl::FailedPreconditionError(
        "CollectQueuedFingerprints: no resident run is active on this thread");
  }
  std::vector<hash::FingerprintAndStatsResult> out;
  if (*slot == nullptr) return out;
  if (absl::Status s = (*slot)->Collect(&out); !s.ok()) return s;
  if (ResidencyCounters* c = ActiveResidentRun()) ++c->fingerprint_collections;
  return out;
}

ResidentMirror* NewerResidentMirror(const Tensor& t) {
  if (!t.has_mirror() || t.mirror_state() != MirrorState::kMirrorNewer) {
    return nullptr;
  }
  return dynamic_cast<ResidentMirror*>(t.mirror());
}

}  // namespace lockstep::kernels
