#include "worker/hardware_probe.h"

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/device_identity.h"
#include "common/digest.h"
#include "kernels/canonical/version.h"
#include "kernels/cpu/isa.h"
#include "worker/gpu_probe.h"

namespace lockstep::worker {
namespace {

using ::lockstep::v1::HardwareProfile;

std::vector<int> AffinityCpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int i = 0; i < CPU_SETSIZE; ++i) {
    if (CPU_ISSET(i, &set)) out.push_back(i);
  }
  return out;
}

std::string ActiveKernelPath() {
  return std::string(kernels::CpuIsaName(kernels::ActiveCpuIsa()));
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return "";
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string ReadFile(absl::string_view root, absl::string_view path) {
  return ReadFile(absl::StrCat(root, path));
}

std::vector<std::string> CpuFeatures() {
  std::vector<std::string> out;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  struct Feature {
    const char* name;
    bool present;
  };
  const Feature features[] = {
      {"sse4_2", __builtin_cpu_supports("sse4.2") != 0},
      {"avx", __builtin_cpu_supports("avx") != 0},
      {"avx2", __builtin_cpu_supports("avx2") != 0},
      {"fma", __builtin_cpu_supports("fma") != 0},
      {"avx512f", __builtin_cpu_supports("avx512f") != 0},
      {"avx512bw", __builtin_cpu_supports("avx512bw") != 0},
      {"avx512dq", __builtin_cpu_supports("avx512dq") != 0},
      {"avx512vl", __builtin_cpu_supports("avx512vl") != 0},
  };
  for (const Feature& f : features) {
    if (f.present) out.push_back(f.name);
  }
#endif
  std::sort(out.begin(), out.end());
  return out;
}

std::string CompilerVersion() {
#if defined(__clang__)
  return absl::StrCat("clang ", __clang_major__, ".", __clang_minor__, ".",
                      __clang_patchlevel__);
#elif defined(__GNUC__)
  return absl::StrCat("gcc ", __GNUC__, ".", __GNUC_MINOR__, ".",
                      __GNUC_PATCHLEVEL__);
#else
  return "unknown";
#endif
}

class SystemProbe final : public HardwareProbe {
 public:
  explicit SystemProbe(SystemProbeOptions options)
      : options_(std::move(options)) {
    if (!options_.cpus) options_.cpus = AffinityCpus;
    if (!options_.kernel_path) options_.kernel_path = ActiveKernelPath;
    if (!options_.gpus) options_.gpus = ProbeGpus;
  }

  absl::StatusOr<HardwareProfile> Probe() override {
    const std::string& root = options_.root;
    HardwareProfile p;
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) == 0) p.set_hostname(host);

    const CpuInfoText cpu = ParseCpuInfo(ReadFile(root, "/proc/cpuinfo"));
    struct utsname uts;
    const bool have_uts = uname(&uts) == 0;
    auto* c = p.mutable_cpu();
    c->set_vendor(cpu.vendor.empty() ? "unknown" : cpu.vendor);
    c->set_model(cpu.model.empty() ? "unknown" : cpu.model);
    c->set_arch(have_uts ? uts.machine : "unknown");
    for (const std::string& f : CpuFeatures()) c->add_features(f);
    const std::vector<int> cpus = options_.cpus();
    c->set_cores(cpus.empty()
                     ? static_cast<int32_t>(std::thread::hardware_concurrency())
                     : static_cast<int32_t>(cpus.size()));
    c->set_kernel_path(options_.kernel_path());
    c->set_packages(absl::StrJoin(CpuPackagesOf(root, cpus), ","));

    auto* sw = p.mutable_software();
    sw->set_os(have_uts ? uts.sysname : "unknown");
    sw->set_kernel(have_uts ? uts.release : "unknown");
    sw->set_distro(ParseOsReleasePrettyName(ReadFile(root, "/etc/os-release")));
    sw->set_compiler(CompilerVersion());
    sw->set_kernel_library(canonical::kKernelLibraryVersion);
    sw->set_canonical_version(canonical::kCanonicalArithmeticVersion);

    const GpuProbeResult gpu = options_.gpus();
    sw->set_built_with_cuda(gpu.built_with_cuda);
    sw->set_cuda_driver_version(gpu.driver_version);
    sw->set_cuda_runtime_version(gpu.runtime_version);
    sw->set_cudnn_version(gpu.cudnn_version);
    sw->set_cublas_version(gpu.cublas_version);
    sw->set_vendor_libraries_error(gpu.vendor_libraries_error);
    for (const GpuDevice& d : gpu.devices) {
      auto* g = p.add_gpus();
      g->set_ordinal(d.ordinal);
      g->set_name(d.name);
      g->set_compute_capability_major(d.cc_major);
      g->set_compute_capability_minor(d.cc_minor);
      g->set_sm_count(d.sm_count);
      g->set_uuid(d.uuid);
      g->set_memory_bytes(d.memory_bytes);
      g->set_mig(d.mig);
    }
    if (gpu.devices.empty()) {
      p.set_gpu_error(gpu.error.empty() ? "no GPU" : gpu.error);
    }
    std::string machine_id;
    if (options_.machine_id_file.empty()) {
      machine_id = ReadMachineId(root);
    } else {
      machine_id = std::string(
          absl::StripAsciiWhitespace(ReadFile("", options_.machine_id_file)));
      if (machine_id.empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat("machine_id_file: \"", options_.machine_id_file,
                         "\" is missing, unreadable or empty"));
      }
    }
    *p.mutable_device() = MakeDeviceIdentity(p, machine_id);
    AssignHardwareClass(&p);
    return p;
  }

 private:
  SystemProbeOptions options_;
};

class FakeProbe final : public HardwareProbe {
 public:
  explicit FakeProbe(HardwareProfile profile) : profile_(std::move(profile)) {
    AssignHardwareClass(&profile_);
  }
  absl::StatusOr<HardwareProfile> Probe() override { return profile_; }

 private:
  HardwareProfile profile_;
};

// Keeps the class string one line and unambiguous: separators in free text
// become spaces.
std::string Clean(absl::string_view s) {
  std::string out(absl::StripAsciiWhitespace(s));
  for (char& ch : out) {
    if (ch == '|' || ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
  }
  return out;
}

}  // namespace

CpuInfoText ParseCpuInfo(const std::string& text) {
  CpuInfoText out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() && !out.model.empty()) break;  // end of first block
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(':', 1));
    const absl::string_view key = absl::StripAsciiWhitespace(kv.first);
    const absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    if (key == "vendor_id" && out.vendor.empty())
      out.vendor = std::string(value);
    if (key == "model name" && out.model.empty())
      out.model = std::string(value);
    // Arm: no "model name"; use the implementer/part as the model.
    if (key == "CPU implementer" && out.vendor.empty()) {
      out.vendor = absl::StrCat("arm-implementer-", value);
    }
    if (key == "CPU part" && out.model.empty()) {
      out.model = absl::StrCat("arm-part-", value);
    }
  }
  return out;
}

std::string ParseOsReleasePrettyName(const std::string& text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, "PRETTY_NAME=")) {
      line = absl::StripAsciiWhitespace(line);
      if (line.size() >= 2 && line.front() == '"' && line.back() == '"') {
        line = line.substr(1, line.size() - 2);
      }
      return std::string(line);
    }
  }
  return "";
}

std::string ReadMachineId(absl::string_view root) {
  for (const char* path : {"/etc/machine-id", "/var/lib/dbus/machine-id",
                           "/proc/sys/kernel/random/boot_id"}) {
    const std::string id(absl::StripAsciiWhitespace(ReadFile(root, path)));
    if (!id.empty()) return id;
  }
  return "";
}

std::vector<int> CpuPackagesOf(absl::string_view root,
                               const std::vector<int>& cpus) {
  std::vector<int> out;
  for (const int cpu : cpus) {
    const std::string text =
        ReadFile(root, absl::StrCat("/sys/devices/system/cpu/cpu", cpu,
                                    "/topology/physical_package_id"));
    int id = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &id)) {
      out.push_back(id);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

v1::DeviceIdentity MakeDeviceIdentity(const HardwareProfile& profile,
                                      absl::string_view machine_id) {
  v1::DeviceIdentity d;
  d.set_machine_id(machine_id.empty()
                       ? absl::StrCat("host:", profile.hostname())
                       : std::string(machine_id));
  if (profile.gpus_size() > 0 && !profile.gpus(0).uuid().empty()) {
    d.set_device(profile.gpus(0).uuid());
  } else {
    std::vector<int> packages;
    for (absl::string_view id :
         absl::StrSplit(profile.cpu().packages(), ',', absl::SkipEmpty())) {
      int n = 0;
      if (absl::SimpleAtoi(id, &n)) packages.push_back(n);
    }
    d.set_device(CpuDeviceName(std::move(packages)));
  }
  d.set_device_id(DeviceIdOf(d.machine_id(), d.device()));
  return d;
}

std::string GpuClassPart(const v1::GpuInfo& g, const v1::SoftwareInfo& sw) {
  return absl::StrCat(
      "|gpu=", Clean(g.name()), "/sm_", g.compute_capability_major(),
      g.compute_capability_minor(), "|sms=", g.sm_count(),
      "|mig=", g.mig() ? 1 : 0, "|driver=", sw.cuda_driver_version(),
      "|cuda=", sw.cuda_runtime_version(),
      "|cublas=", Clean(sw.cublas_version()),
      "|cudnn=", Clean(sw.cudnn_version()));
}

std::string HardwareClassString(const HardwareProfile& p) {
  std::vector<std::string> features(p.cpu().features().begin(),
                                    p.cpu().features().end());
  std::sort(features.begin(), features.end());
  std::string s =
      absl::StrCat(kHardwareClassFormat, "|cpu=", Clean(p.cpu().vendor()), "/",
                   Clean(p.cpu().model()), "/", Clean(p.cpu().arch()),
                   "|isa=", absl::StrJoin(features, ","),
                   "|kernel_path=", Clean(p.cpu().kernel_path()),
                   "|compiler=", Clean(p.software().compiler()),
                   "|kernels=", Clean(p.software().kernel_library()),
                   "|canonical=", p.software().canonical_version());
  if (p.gpus_size() > 0)
    absl::StrAppend(&s, GpuClassPart(p.gpus(0), p.software()));
  return s;
}

void AssignHardwareClass(HardwareProfile* profile) {
  profile->set_hardware_class(HardwareClassString(*profile));
  profile->set_hardware_class_digest(Digest128Hex(profile->hardware_class()));
}

std::unique_ptr<HardwareProbe> NewSystemProbe(SystemProbeOptions options) {
  return std::make_unique<SystemProbe>(std::move(options));
}

std::unique_ptr<HardwareProbe> NewFakeProbe(HardwareProfile profile) {
  return std::make_unique<FakeProbe>(std::move(profile));
}

}  // namespace lockstep::worker
