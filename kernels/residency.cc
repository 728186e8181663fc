#include "kernels/residency.h"

namespace lockstep::kernels {
namespace {

thread_local ResidencyCounters* active_run = nullptr;

}  // namespace

ScopedResidentRun::ScopedResidentRun(ResidencyCounters* counters)
    : outer_(active_run) {
  active_run = counters;
}

ScopedResidentRun::~ScopedResidentRun() { active_run = outer_; }

ResidencyCounters* ActiveResidentRun() { return active_run; }

ResidentMirror* NewerResidentMirror(const Tensor& t) {
  if (!t.has_mirror() || t.mirror_state() != MirrorState::kMirrorNewer) {
    return nullptr;
  }
  return dynamic_cast<ResidentMirror*>(t.mirror());
}

}  // namespace lockstep::kernels
