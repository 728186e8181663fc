#include "worker/hardware_probe.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/device_identity.h"
#include "common/digest.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "worker/gpu_probe.h"

namespace lockstep::worker {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::v1::HardwareProfile;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

HardwareProfile CpuProfile() {
  HardwareProfile p;
  p.set_hostname("node-17");
  p.mutable_cpu()->set_vendor("AuthenticAMD");
  p.mutable_cpu()->set_model("AMD EPYC 9R14 96-Core Processor");
  p.mutable_cpu()->set_arch("x86_64");
  p.mutable_cpu()->add_features("fma");
  p.mutable_cpu()->add_features("avx2");
  p.mutable_cpu()->set_cores(2);
  p.mutable_cpu()->set_kernel_path("avx2");
  p.mutable_software()->set_compiler("gcc 12.2.0");
  p.mutable_software()->set_kernel_library("lockstep-kernels/0.1.0");
  p.mutable_software()->set_canonical_version(1);
  p.mutable_software()->set_kernel("6.1.0-18-amd64");
  return p;
}

TEST(HardwareClass, CpuStringIsCanonical) {
  EXPECT_EQ(HardwareClassString(CpuProfile()),
            "lockstep-class/v2|cpu=AuthenticAMD/AMD EPYC 9R14 96-Core "
            "Processor/x86_64|isa=avx2,fma|kernel_path=avx2|compiler=gcc "
            "12.2.0|kernels=lockstep-kernels/0.1.0|canonical=1");
}

TEST(HardwareClass, IgnoresHostCoresAndKernel) {
  HardwareProfile a = CpuProfile();
  HardwareProfile b = CpuProfile();
  b.set_hostname("node-18");
  b.mutable_cpu()->set_cores(96);
  b.mutable_software()->set_kernel("6.5.0");
  AssignHardwareClass(&a);
  AssignHardwareClass(&b);
  EXPECT_EQ(a.hardware_class_digest(), b.hardware_class_digest());
  EXPECT_EQ(a.hardware_class_digest(), Digest128Hex(a.hardware_class()));
}

TEST(HardwareClass, DistinguishesWhatChangesBits) {
  HardwareProfile base = CpuProfile();
  AssignHardwareClass(&base);
  HardwareProfile isa = CpuProfile();
  isa.mutable_cpu()->add_features("avx512f");
  AssignHardwareClass(&isa);
  HardwareProfile canon = CpuProfile();
  canon.mutable_software()->set_canonical_version(2);
  AssignHardwareClass(&canon);
  HardwareProfile gpu = CpuProfile();
  auto* g = gpu.add_gpus();
  g->set_name("NVIDIA H100 80GB HBM3");
  g->set_compute_capability_major(9);
  g->set_compute_capability_minor(0);
  g->set_sm_count(132);
  gpu.mutable_software()->set_cuda_driver_version(13000);
  gpu.mutable_software()->set_cuda_runtime_version(13000);
  gpu.mutable_software()->set_cublas_version("13.0.2");
  gpu.mutable_software()->set_cudnn_version("9.19.0");
  AssignHardwareClass(&gpu);
  EXPECT_NE(base.hardware_class_digest(), isa.hardware_class_digest());
  EXPECT_NE(base.hardware_class_digest(), canon.hardware_class_digest());
  EXPECT_NE(base.hardware_class_digest(), gpu.hardware_class_digest());
  EXPECT_THAT(gpu.hardware_class(),
              HasSubstr("|gpu=NVIDIA H100 80GB HBM3/sm_90|sms=132|mig=0|"
                        "driver=13000|cuda=13000|cublas=13.0.2|cudnn=9.19.0"));
}

// One machine, three forced kernel paths: three classes.
TEST(HardwareClass, KernelPathSeparatesClasses) {
  std::set<std::string> digests;
  for (const char* path : {"scalar", "avx2", "avx512"}) {
    HardwareProfile p = CpuProfile();
    p.mutable_cpu()->add_features("avx512f");
    p.mutable_cpu()->set_kernel_path(path);
    AssignHardwareClass(&p);
    EXPECT_THAT(p.hardware_class(),
                HasSubstr(absl::StrCat("|kernel_path=", path, "|")));
    digests.insert(p.hardware_class_digest());
  }
  EXPECT_EQ(digests.size(), 3u);
}

// The system probe reports the path the CPU kernels dispatch to, so forcing
// a narrower ISA (LOCKSTEP_CPU_ISA, here its test hook) changes the class.
TEST(SystemProbe, ClassFollowsTheForcedKernelPath) {
  SystemProbeOptions options;
  options.gpus = [] { return GpuProbeResult{}; };
  std::set<std::string> digests;
  const std::vector<kernels::CpuIsa> isas = kernels::SupportedCpuIsas();
  for (const kernels::CpuIsa isa : isas) {
    kernels::SetCpuIsaForTesting(isa);
    auto p = NewSystemProbe(options)->Probe();
    ASSERT_THAT(p, IsOk());
    const std::string name(kernels::CpuIsaName(isa));
    EXPECT_EQ(p->cpu().kernel_path(), name);
    EXPECT_THAT(p->hardware_class(),
                HasSubstr(absl::StrCat("|kernel_path=", name, "|")));
    digests.insert(p->hardware_class_digest());
  }
  kernels::SetCpuIsaForTesting(std::nullopt);
  EXPECT_EQ(digests.size(), isas.size());
}

TEST(HardwareClass, GpuPartFormatsEveryField) {
  v1::GpuInfo g;
  g.set_name("NVIDIA A100-SXM4-40GB");
  g.set_compute_capability_major(8);
  g.set_compute_capability_minor(0);
  g.set_sm_count(14);
  g.set_mig(true);
  v1::SoftwareInfo sw;
  sw.set_cuda_driver_version(13010);
  sw.set_cuda_runtime_version(13000);
  sw.set_cublas_version("13.0.2");
  sw.set_cudnn_version("9.19.1");
  EXPECT_EQ(GpuClassPart(g, sw),
            "|gpu=NVIDIA A100-SXM4-40GB/sm_80|sms=14|mig=1|driver=13010|"
            "cuda=13000|cublas=13.0.2|cudnn=9.19.1");
  // Each field changes the class: a MIG slice with its parent's name and
  // fewer SMs, another driver, another loaded cuBLAS or cuDNN.
  std::set<std::string> parts = {GpuClassPart(g, sw)};
  v1::GpuInfo full = g;
  full.set_mig(false);
  parts.insert(GpuClassPart(full, sw));
  full.set_sm_count(108);
  parts.insert(GpuClassPart(full, sw));
  v1::GpuInfo cc = g;
  cc.set_compute_capability_minor(6);
  parts.insert(GpuClassPart(cc, sw));
  for (int field = 0; field < 4; ++field) {
    v1::SoftwareInfo other = sw;
    if (field == 0) other.set_cuda_driver_version(13020);
    if (field == 1) other.set_cuda_runtime_version(13010);
    if (field == 2) other.set_cublas_version("13.1.0");
    if (field == 3) other.set_cudnn_version("9.20.0");
    parts.insert(GpuClassPart(g, other));
  }
  EXPECT_EQ(parts.size(), 8u);
}

TEST(HardwareClass, SeparatorsInFreeTextAreNeutralised) {
  HardwareProfile p = CpuProfile();
  p.mutable_cpu()->set_model("Weird|CPU\n");
  EXPECT_THAT(HardwareClassString(p), HasSubstr("cpu=AuthenticAMD/Weird CPU/"));
}

TEST(ParseCpuInfo, X86AndArm) {
  const CpuInfoText x86 = ParseCpuInfo(
      "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n"
      "model name\t: AMD EPYC 9R14 96-Core Processor\nflags\t\t: fpu avx2\n\n"
      "processor\t: 1\nvendor_id\t: Other\nmodel name\t: Other\n");
  EXPECT_EQ(x86.vendor, "AuthenticAMD");
  EXPECT_EQ(x86.model, "AMD EPYC 9R14 96-Core Processor");
  const CpuInfoText arm = ParseCpuInfo(
      "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n"
      "CPU part\t: 0xd0c\n");
  EXPECT_EQ(arm.vendor, "arm-implementer-0x41");
  EXPECT_EQ(arm.model, "arm-part-0xd0c");
  EXPECT_EQ(ParseCpuInfo("").model, "");
}

TEST(ParseOsRelease, PrettyName) {
  EXPECT_EQ(ParseOsReleasePrettyName(
                "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 "
                "(bookworm)\"\nID=debian\n"),
            "Debian GNU/Linux 12 (bookworm)");
  EXPECT_EQ(ParseOsReleasePrettyName("ID=x\n"), "");
}

TEST(SystemProbe, DescribesThisMachine) {
  auto probe = NewSystemProbe();
  auto p = probe->Probe();
  ASSERT_THAT(p, IsOk());
  EXPECT_FALSE(p->cpu().model().empty());
  EXPECT_GT(p->cpu().cores(), 0);
  EXPECT_FALSE(p->software().kernel().empty());
  EXPECT_THAT(p->hardware_class(), StartsWith("lockstep-class/v2|cpu="));
  EXPECT_THAT(
      p->hardware_class(),
      HasSubstr(absl::StrCat(
          "|kernel_path=", kernels::CpuIsaName(kernels::ActiveCpuIsa()), "|")));
  EXPECT_FALSE(p->device().machine_id().empty());
  EXPECT_EQ(p->device().device_id(),
            DeviceIdOf(p->device().machine_id(), p->device().device()));
  EXPECT_TRUE(IsDigest128Hex(p->hardware_class_digest()));
  if (p->gpus_size() == 0) {
    // No GPU here: the probe must say why instead of failing.
    EXPECT_FALSE(p->gpu_error().empty());
    std::printf("no GPU: %s\n", p->gpu_error().c_str());
  } else {
    EXPECT_EQ(GpuCanonicalSmokeTest(0), "");
  }
  // Probing twice gives the same class.
  auto again = probe->Probe();
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->hardware_class_digest(), p->hardware_class_digest());
}

// A fake file system for the probe's reads.
class FakeRoot {
 public:
  FakeRoot() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ =
        absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/probe_root_", counter_++);
  }
  const std::string& root() const { return root_; }
  void Write(const std::string& path, const std::string& text) {
    mkdir(root_.c_str(), 0755);
    std::string dir = root_;
    const std::vector<std::string> parts = absl::StrSplit(path, '/');
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (parts[i].empty()) continue;
      dir = absl::StrCat(dir, "/", parts[i]);
      mkdir(dir.c_str(), 0755);
    }
    std::ofstream(root_ + path) << text;
  }

 private:
  static inline int counter_ = 0;
  std::string root_;
};

TEST(ReadMachineId, FallsBackFromMachineIdToDbusToBootId) {
  FakeRoot none;
  EXPECT_EQ(ReadMachineId(none.root()), "");
  FakeRoot boot;
  boot.Write("/proc/sys/kernel/random/boot_id",
             "6f1c1e0a-77f1-4c0b-9d55-3a1d2c2b9f10\n");
  EXPECT_EQ(ReadMachineId(boot.root()), "6f1c1e0a-77f1-4c0b-9d55-3a1d2c2b9f10");
  boot.Write("/var/lib/dbus/machine-id", "dbus0000000000000000000000000001\n");
  EXPECT_EQ(ReadMachineId(boot.root()), "dbus0000000000000000000000000001");
  boot.Write("/etc/machine-id", "  \n");  // empty: skipped
  EXPECT_EQ(ReadMachineId(boot.root()), "dbus0000000000000000000000000001");
  boot.Write("/etc/machine-id", "etc00000000000000000000000000001\n");
  EXPECT_EQ(ReadMachineId(boot.root()), "etc00000000000000000000000000001");
}

TEST(CpuPackagesOf, ReadsTheTopologyOfTheGivenCpus) {
  FakeRoot r;
  const int package_of[] = {0, 1, 0, 1};
  for (int cpu = 0; cpu < 4; ++cpu) {
    r.Write(absl::StrCat("/sys/devices/system/cpu/cpu", cpu,
                         "/topology/physical_package_id"),
            absl::StrCat(package_of[cpu], "\n"));
  }
  EXPECT_EQ(CpuPackagesOf(r.root(), {0, 2}), std::vector<int>({0}));
  EXPECT_EQ(CpuPackagesOf(r.root(), {3, 1}), std::vector<int>({1}));
  EXPECT_EQ(CpuPackagesOf(r.root(), {0, 1, 2, 3}), std::vector<int>({0, 1}));
  EXPECT_EQ(CpuPackagesOf(r.root(), {7}), std::vector<int>());
}

// Two CPU workers pinned to different packages of one machine are two
// devices; two pinned to the same package are one.
TEST(SystemProbe, CpuDeviceIdentityFromAFakeMachine) {
  FakeRoot r;
  r.Write("/etc/machine-id", "4c6f636b737465700000000000000001\n");
  r.Write("/proc/cpuinfo",
          "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Fake "
          "CPU\n\n");
  for (int cpu = 0; cpu < 4; ++cpu) {
    r.Write(absl::StrCat("/sys/devices/system/cpu/cpu", cpu,
                         "/topology/physical_package_id"),
            cpu < 2 ? "0\n" : "1\n");
  }
  auto probe_with = [&](std::vector<int> cpus) {
    SystemProbeOptions options;
    options.root = r.root();
    options.cpus = [cpus] { return cpus; };
    options.kernel_path = [] { return std::string("avx2"); };
    options.gpus = [] {
      GpuProbeResult none;
      none.error = "built without CUDA";
      return none;
    };
    auto p = NewSystemProbe(options)->Probe();
    EXPECT_THAT(p, IsOk());
    return p.ok() ? *p : HardwareProfile();
  };
  const HardwareProfile a = probe_with({0, 1});
  const HardwareProfile b = probe_with({1});
  const HardwareProfile c = probe_with({2, 3});
  const HardwareProfile both = probe_with({1, 2});
  EXPECT_EQ(a.cpu().model(), "Fake CPU");
  EXPECT_EQ(a.cpu().cores(), 2);
  EXPECT_EQ(a.cpu().packages(), "0");
  EXPECT_EQ(a.device().machine_id(), "4c6f636b737465700000000000000001");
  EXPECT_EQ(a.device().device(), "cpu:packages=0");
  EXPECT_EQ(a.device().device_id(),
            Digest128Hex("4c6f636b737465700000000000000001|cpu:packages=0"));
  EXPECT_EQ(a.device().device_id(), b.device().device_id());
  EXPECT_EQ(c.device().device(), "cpu:packages=1");
  EXPECT_NE(a.device().device_id(), c.device().device_id());
  EXPECT_EQ(both.cpu().packages(), "0,1");
  EXPECT_EQ(both.device().device(), "cpu:packages=0,1");
  // The device does not enter the class.
  EXPECT_EQ(a.hardware_class_digest(), c.hardware_class_digest());
  EXPECT_THAT(a.hardware_class(), HasSubstr("|kernel_path=avx2|"));
}

TEST(SystemProbe, MachineIdFileNamesTheMachine) {
  const std::string dir = ::testing::TempDir();
  const std::string a = dir + "/machine-a", b = dir + "/machine-b";
  std::ofstream(a) << "0123456789abcdef0123456789abcdef\n";
  std::ofstream(b) << "fedcba9876543210fedcba9876543210\n";
  SystemProbeOptions options;
  options.machine_id_file = a;
  auto pa = NewSystemProbe(options)->Probe();
  ASSERT_TRUE(pa.ok()) << pa.status();
  EXPECT_EQ(pa->device().machine_id(), "0123456789abcdef0123456789abcdef");
  options.machine_id_file = b;
  auto pb = NewSystemProbe(options)->Probe();
  ASSERT_TRUE(pb.ok()) << pb.status();
  // Same CPU, other machine: another device, the same hardware class.
  EXPECT_NE(pa->device().device_id(), pb->device().device_id());
  EXPECT_EQ(pa->hardware_class_digest(), pb->hardware_class_digest());
  options.machine_id_file = dir + "/no-such-machine-id";
  auto missing = NewSystemProbe(options)->Probe();
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()),
              ::testing::HasSubstr("machine_id_file"));
}

TEST(SystemProbe, GpuWorkerIsIdentifiedByTheGpuUuid) {
  FakeRoot r;
  r.Write("/var/lib/dbus/machine-id", "0000000000000000000000000000beef\n");
  SystemProbeOptions options;
  options.root = r.root();
  options.cpus = [] { return std::vector<int>{0}; };
  options.kernel_path = [] { return std::string("avx512"); };
  options.gpus = [] {
    GpuProbeResult g;
    g.built_with_cuda = true;
    g.driver_version = 13000;
    g.runtime_version = 13000;
    g.cublas_version = "13.0.2";
    g.cudnn_version = "9.19.0";
    GpuDevice d;
    d.name = "NVIDIA H100 80GB HBM3";
    d.cc_major = 9;
    d.sm_count = 132;
    d.uuid = "GPU-01234567-89ab-cdef-0123-456789abcdef";
    g.devices.push_back(d);
    return g;
  };
  auto p = NewSystemProbe(options)->Probe();
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ(p->device().device(), "GPU-01234567-89ab-cdef-0123-456789abcdef");
  EXPECT_EQ(p->device().device_id(),
            DeviceIdOf("0000000000000000000000000000beef",
                       "GPU-01234567-89ab-cdef-0123-456789abcdef"));
  EXPECT_EQ(p->software().cublas_version(), "13.0.2");
  EXPECT_THAT(p->hardware_class(),
              HasSubstr("|gpu=NVIDIA H100 80GB HBM3/sm_90|sms=132|mig=0|"
                        "driver=13000|cuda=13000|cublas=13.0.2|cudnn=9.19.0"));
}

TEST(SystemProbe, MissingVendorLibrariesAreReportedNotPartOfTheClass) {
  FakeRoot r;
  r.Write("/var/lib/dbus/machine-id", "0000000000000000000000000000beef\n");
  SystemProbeOptions options;
  options.root = r.root();
  options.cpus = [] { return std::vector<int>{0}; };
  options.kernel_path = [] { return std::string("avx512"); };
  options.gpus = [] {
    GpuProbeResult g;
    g.built_with_cuda = true;
    g.error = "no NVIDIA driver: libcuda.so.1: cannot open shared object file";
    g.vendor_libraries_error = "cuBLAS not loaded: libcublas.so.13: nope";
    return g;
  };
  auto p = NewSystemProbe(options)->Probe();
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ(p->software().vendor_libraries_error(),
            "cuBLAS not loaded: libcublas.so.13: nope");
  EXPECT_EQ(p->gpu_error(),
            "no NVIDIA driver: libcuda.so.1: cannot open shared object file");
  EXPECT_THAT(p->hardware_class(), Not(HasSubstr("cuBLAS")));
}

TEST(MakeDeviceIdentity, FallsBackToTheHostName) {
  HardwareProfile p = CpuProfile();
  p.mutable_cpu()->set_packages("1,0");
  const v1::DeviceIdentity d = MakeDeviceIdentity(p, "");
  EXPECT_EQ(d.machine_id(), "host:node-17");
  EXPECT_EQ(d.device(), "cpu:packages=0,1");
  EXPECT_EQ(d.device_id(), DeviceIdOf("host:node-17", "cpu:packages=0,1"));
}

TEST(FakeProbe, AssignsClass) {
  auto p = NewFakeProbe(CpuProfile())->Probe();
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ(p->hardware_class(), HardwareClassString(CpuProfile()));
}

}  // namespace
}  // namespace lockstep::worker
