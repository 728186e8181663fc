// GPU probe of a worker built without CUDA (no toolkit at build time, or
// --define=cuda=off).
#include "worker/gpu_probe.h"

namespace lockstep::worker {

GpuProbeResult ProbeGpus() {
  GpuProbeResult r;
  r.built_with_cuda = false;
  r.error = "built without CUDA";
  return r;
}

std::string GpuCanonicalSmokeTest(int ordinal) { return "built without CUDA"; }

}  // namespace lockstep::worker
