// The worker's hardware profile and its canonical hardware class.
//
// A hardware class names everything that may change a run's bits besides
// the job itself: device model (GPU name and compute capability, or CPU
// vendor, model and the ISA features Lockstep's kernels dispatch on), the
// driver, CUDA and cuDNN versions, the compiler and Lockstep's kernel and
// canonical-arithmetic versions. Core counts, memory sizes, host names and
// kernel versions are reported but are not part of the class.
#ifndef LOCKSTEP_WORKER_HARDWARE_PROBE_H_
#define LOCKSTEP_WORKER_HARDWARE_PROBE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lockstep/v1/worker.pb.h"

namespace lockstep::worker {

// Version of the hardware-class string format (its first field).
inline constexpr char kHardwareClassFormat[] = "lockstep-class/v1";

// Builds the canonical class string from a profile's class-relevant fields:
//   lockstep-class/v1|cpu=<vendor>/<model>/<arch>|isa=<f1>,<f2>,...
//   |compiler=<c>|kernels=<k>|canonical=<n>[|gpu=<name>/sm_<maj><min>
//   |driver=<d>|cuda=<r>|cudnn=<v>]
// ISA features are sorted; the GPU part describes device 0 when present.
std::string HardwareClassString(const lockstep::v1::HardwareProfile& profile);

// Fills profile.hardware_class and hardware_class_digest.
void AssignHardwareClass(lockstep::v1::HardwareProfile* profile);

// Parsed /proc/cpuinfo essentials (first processor block).
struct CpuInfoText {
  std::string vendor;
  std::string model;
};
CpuInfoText ParseCpuInfo(const std::string& text);

// PRETTY_NAME from /etc/os-release text ("" when absent).
std::string ParseOsReleasePrettyName(const std::string& text);

class HardwareProbe {
 public:
  virtual ~HardwareProbe() = default;
  // The profile with hardware_class and its digest filled in.
  virtual absl::StatusOr<lockstep::v1::HardwareProfile> Probe() = 0;
};

// Reads the real machine: /proc/cpuinfo, CPUID feature bits, uname,
// /etc/os-release, and CUDA devices through the GPU probe.
std::unique_ptr<HardwareProbe> NewSystemProbe();

// Returns a fixed profile (hardware class assigned); for tests.
std::unique_ptr<HardwareProbe> NewFakeProbe(
    lockstep::v1::HardwareProfile profile);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_HARDWARE_PROBE_H_
