// The worker's hardware profile and its canonical hardware class.
//
// A hardware class names everything that may change a run's bits besides
// the job itself: device model (GPU name, compute capability, SM count and
// whether it is a MIG slice, or CPU vendor, model and the ISA features
// Lockstep's kernels dispatch on), the CPU kernel path the kernels actually
// use (LOCKSTEP_CPU_ISA may force a narrower one than the CPU has), the
// driver and CUDA versions and the cuBLAS and cuDNN versions loaded at run
// time, the compiler and Lockstep's kernel and canonical-arithmetic
// versions. Core counts, memory sizes, host names and OS kernel versions
// are reported but are not part of the class.
//
// The profile also carries the device identity (common/device_identity.h):
// the host's machine id and the CPU packages the worker may run on, or the
// UUID of GPU 0.
#ifndef LOCKSTEP_WORKER_HARDWARE_PROBE_H_
#define LOCKSTEP_WORKER_HARDWARE_PROBE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lockstep/v1/worker.pb.h"
#include "worker/gpu_probe.h"

namespace lockstep::worker {

// Version of the hardware-class string format (its first field).
inline constexpr char kHardwareClassFormat[] = "lockstep-class/v2";

// Builds the canonical class string from a profile's class-relevant fields:
//   lockstep-class/v2|cpu=<vendor>/<model>/<arch>|isa=<f1>,<f2>,...
//   |kernel_path=<scalar|avx2|avx512>|compiler=<c>|kernels=<k>
//   |canonical=<n>[<GpuClassPart of device 0>]
// ISA features are sorted; the GPU part describes device 0 when present.
std::string HardwareClassString(const lockstep::v1::HardwareProfile& profile);

// The GPU part of the class:
//   |gpu=<name>/sm_<maj><min>|sms=<SM count>|mig=<0|1>|driver=<d>
//   |cuda=<runtime>|cublas=<loaded cuBLAS>|cudnn=<loaded cuDNN>
std::string GpuClassPart(const lockstep::v1::GpuInfo& gpu,
                         const lockstep::v1::SoftwareInfo& software);

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

// The host's machine id below `root` ("" for the real root): the first
// non-empty of <root>/etc/machine-id, <root>/var/lib/dbus/machine-id and
// <root>/proc/sys/kernel/random/boot_id, whitespace trimmed; "" when none.
std::string ReadMachineId(absl::string_view root);

// The physical package ids (sockets) of `cpus`, from
// <root>/sys/devices/system/cpu/cpu<N>/topology/physical_package_id; sorted,
// without duplicates; CPUs whose file is missing or unreadable are skipped.
std::vector<int> CpuPackagesOf(absl::string_view root,
                               const std::vector<int>& cpus);

// The device identity of a profile: `device` is the UUID of GPU 0 when the
// profile lists a GPU, else CpuDeviceName of profile.cpu().packages;
// `machine_id` falls back to "host:<hostname>" when empty. device_id is
// DeviceIdOf(machine_id, device).
lockstep::v1::DeviceIdentity MakeDeviceIdentity(
    const lockstep::v1::HardwareProfile& profile, absl::string_view machine_id);

class HardwareProbe {
 public:
  virtual ~HardwareProbe() = default;
  // The profile with hardware_class and its digest filled in.
  virtual absl::StatusOr<lockstep::v1::HardwareProfile> Probe() = 0;
};

// What the system probe reads; every field has the real machine as its
// default, tests replace them.
struct SystemProbeOptions {
  // Prefix of every file read (/proc/cpuinfo, /etc/os-release, the machine
  // id, /sys/devices/system/cpu/...). Default "": the real root.
  std::string root;
  // The CPUs this worker may run on. Default (null): the process's
  // affinity mask (sched_getaffinity).
  std::function<std::vector<int>()> cpus;
  // The CPU kernel path. Default (null): the ISA the CPU kernels dispatch
  // to now (kernels::ActiveCpuIsa(), which honours LOCKSTEP_CPU_ISA).
  std::function<std::string()> kernel_path;
  // CUDA devices and library versions. Default (null): ProbeGpus().
  std::function<GpuProbeResult()> gpus;
  // File holding this machine's id, for hosts whose id is not in the
  // standard places (containers that share one image, several simulated
  // machines on one host). Default "": /etc/machine-id, then
  // /var/lib/dbus/machine-id, then the boot id. A named file that is
  // missing or empty fails the probe.
  std::string machine_id_file;
};

// Reads the machine: /proc/cpuinfo, CPUID feature bits, the active CPU
// kernel path, the affinity mask and CPU topology, the machine id, uname,
// /etc/os-release, and CUDA devices through the GPU probe.
std::unique_ptr<HardwareProbe> NewSystemProbe(SystemProbeOptions options = {});

// Returns a fixed profile (hardware class assigned); for tests.
std::unique_ptr<HardwareProbe> NewFakeProbe(
    lockstep::v1::HardwareProfile profile);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_HARDWARE_PROBE_H_
