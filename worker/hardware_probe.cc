#include "worker/hardware_probe.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/digest.h"
#include "kernels/canonical/version.h"
#include "worker/gpu_probe.h"

namespace lockstep::worker {
namespace {

using ::lockstep::v1::HardwareProfile;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return "";
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
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
  absl::StatusOr<HardwareProfile> Probe() override {
    HardwareProfile p;
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) == 0) p.set_hostname(host);

    const CpuInfoText cpu = ParseCpuInfo(ReadFile("/proc/cpuinfo"));
    struct utsname uts;
    const bool have_uts = uname(&uts) == 0;
    auto* c = p.mutable_cpu();
    c->set_vendor(cpu.vendor.empty() ? "unknown" : cpu.vendor);
    c->set_model(cpu.model.empty() ? "unknown" : cpu.model);
    c->set_arch(have_uts ? uts.machine : "unknown");
    for (const std::string& f : CpuFeatures()) c->add_features(f);
    c->set_cores(static_cast<int32_t>(std::thread::hardware_concurrency()));

    auto* sw = p.mutable_software();
    sw->set_os(have_uts ? uts.sysname : "unknown");
    sw->set_kernel(have_uts ? uts.release : "unknown");
    sw->set_distro(ParseOsReleasePrettyName(ReadFile("/etc/os-release")));
    sw->set_compiler(CompilerVersion());
    sw->set_kernel_library(canonical::kKernelLibraryVersion);
    sw->set_canonical_version(canonical::kCanonicalArithmeticVersion);

    const GpuProbeResult gpu = ProbeGpus();
    sw->set_built_with_cuda(gpu.built_with_cuda);
    sw->set_cuda_driver_version(gpu.driver_version);
    sw->set_cuda_runtime_version(gpu.runtime_version);
    sw->set_cudnn_version(gpu.cudnn_version);
    for (const GpuDevice& d : gpu.devices) {
      auto* g = p.add_gpus();
      g->set_ordinal(d.ordinal);
      g->set_name(d.name);
      g->set_compute_capability_major(d.cc_major);
      g->set_compute_capability_minor(d.cc_minor);
      g->set_sm_count(d.sm_count);
      g->set_uuid(d.uuid);
      g->set_memory_bytes(d.memory_bytes);
    }
    if (gpu.devices.empty()) {
      p.set_gpu_error(gpu.error.empty() ? "no GPU" : gpu.error);
    }
    AssignHardwareClass(&p);
    return p;
  }
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

std::string HardwareClassString(const HardwareProfile& p) {
  std::vector<std::string> features(p.cpu().features().begin(),
                                    p.cpu().features().end());
  std::sort(features.begin(), features.end());
  std::string s =
      absl::StrCat(kHardwareClassFormat, "|cpu=", Clean(p.cpu().vendor()), "/",
                   Clean(p.cpu().model()), "/", Clean(p.cpu().arch()),
                   "|isa=", absl::StrJoin(features, ","),
                   "|compiler=", Clean(p.software().compiler()),
                   "|kernels=", Clean(p.software().kernel_library()),
                   "|canonical=", p.software().canonical_version());
  if (p.gpus_size() > 0) {
    const auto& g = p.gpus(0);
    absl::StrAppend(&s, "|gpu=", Clean(g.name()), "/sm_",
                    g.compute_capability_major(), g.compute_capability_minor(),
                    "|driver=", p.software().cuda_driver_version(),
                    "|cuda=", p.software().cuda_runtime_version(),
                    "|cudnn=", Clean(p.software().cudnn_version()));
  }
  return s;
}

void AssignHardwareClass(HardwareProfile* profile) {
  profile->set_hardware_class(HardwareClassString(*profile));
  profile->set_hardware_class_digest(Digest128Hex(profile->hardware_class()));
}

std::unique_ptr<HardwareProbe> NewSystemProbe() {
  return std::make_unique<SystemProbe>();
}

std::unique_ptr<HardwareProbe> NewFakeProbe(HardwareProfile profile) {
  return std::make_unique<FakeProbe>(std::move(profile));
}

}  // namespace lockstep::worker
