#include "worker/hardware_probe.h"

#include "common/digest.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/gpu_probe.h"

namespace lockstep::worker {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::v1::HardwareProfile;
using ::testing::HasSubstr;
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
  p.mutable_software()->set_compiler("gcc 12.2.0");
  p.mutable_software()->set_kernel_library("lockstep-kernels/0.1.0");
  p.mutable_software()->set_canonical_version(1);
  p.mutable_software()->set_kernel("6.1.0-18-amd64");
  return p;
}

TEST(HardwareClass, CpuStringIsCanonical) {
  EXPECT_EQ(HardwareClassString(CpuProfile()),
            "lockstep-class/v1|cpu=AuthenticAMD/AMD EPYC 9R14 96-Core "
            "Processor/x86_64|isa=avx2,fma|compiler=gcc 12.2.0|kernels="
            "lockstep-kernels/0.1.0|canonical=1");
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
  gpu.mutable_software()->set_cuda_driver_version(13000);
  gpu.mutable_software()->set_cuda_runtime_version(13000);
  gpu.mutable_software()->set_cudnn_version("9.19.0");
  AssignHardwareClass(&gpu);
  EXPECT_NE(base.hardware_class_digest(), isa.hardware_class_digest());
  EXPECT_NE(base.hardware_class_digest(), canon.hardware_class_digest());
  EXPECT_NE(base.hardware_class_digest(), gpu.hardware_class_digest());
  EXPECT_THAT(gpu.hardware_class(),
              HasSubstr("|gpu=NVIDIA H100 80GB HBM3/sm_90|driver=13000|"
                        "cuda=13000|cudnn=9.19.0"));
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
  EXPECT_THAT(p->hardware_class(), StartsWith("lockstep-class/v1|cpu="));
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

TEST(FakeProbe, AssignsClass) {
  auto p = NewFakeProbe(CpuProfile())->Probe();
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ(p->hardware_class(), HardwareClassString(CpuProfile()));
}

}  // namespace
}  // namespace lockstep::worker
