// The coordinator's hardware-class check against the worker's own class
// builder: every class a worker derives from its profile is accepted, and
// each class-relevant profile field is bound to the class (a profile that
// differs in it no longer matches).
#include <functional>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/worker_registry.h"
#include "worker/hardware_probe.h"

namespace lockstep::server {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

v1::HardwareProfile CpuProfile() {
  v1::HardwareProfile p;
  p.set_hostname("node-1");
  v1::CpuInfo* c = p.mutable_cpu();
  c->set_vendor("GenuineIntel");
  c->set_model("Intel(R) Xeon(R) Platinum 8480+");
  c->set_arch("x86_64");
  c->add_features("avx2");
  c->add_features("avx");
  c->add_features("avx512f");
  c->add_features("fma");
  c->set_cores(16);
  c->set_kernel_path("avx2");
  c->set_packages("0");
  v1::SoftwareInfo* sw = p.mutable_software();
  sw->set_compiler("gcc 12.2.0");
  sw->set_kernel_library("0.1.0");
  sw->set_canonical_version(1);
  return p;
}

v1::HardwareProfile GpuProfile() {
  v1::HardwareProfile p = CpuProfile();
  v1::GpuInfo* g = p.add_gpus();
  g->set_name("NVIDIA H100 80GB HBM3");
  g->set_compute_capability_major(9);
  g->set_compute_capability_minor(0);
  g->set_sm_count(132);
  g->set_uuid("GPU-00000000-1111-2222-3333-444444444444");
  v1::SoftwareInfo* sw = p.mutable_software();
  sw->set_cuda_driver_version(13000);
  sw->set_cuda_runtime_version(13000);
  sw->set_cublas_version("13.0.0");
  sw->set_cudnn_version("9.19.0");
  return p;
}

struct Mutation {
  const char* field;  // as the refusal names it
  std::function<void(v1::HardwareProfile*)> apply;
};

TEST(HardwareClassCompatTest, WorkerDerivedClassesAreAccepted) {
  for (v1::HardwareProfile p : {CpuProfile(), GpuProfile()}) {
    worker::AssignHardwareClass(&p);
    EXPECT_THAT(CheckHardwareClass(p), IsOk()) << p.hardware_class();
    // Fields outside the class change nothing.
    p.set_hostname("node-2");
    p.mutable_cpu()->set_cores(2);
    EXPECT_THAT(CheckHardwareClass(p), IsOk());
  }
  v1::HardwareProfile scalar = CpuProfile();
  scalar.mutable_cpu()->set_kernel_path("scalar");
  worker::AssignHardwareClass(&scalar);
  EXPECT_THAT(CheckHardwareClass(scalar), IsOk());
}

TEST(HardwareClassCompatTest, EachClassFieldIsBoundToTheProfile) {
  const std::vector<Mutation> mutations = {
      {"cpu.kernel_path",
       [](auto* p) { p->mutable_cpu()->set_kernel_path("avx512"); }},
      {"cpu.kernel_path",
       [](auto* p) { p->mutable_cpu()->set_kernel_path("scalar"); }},
      {"cpu.model",
       [](auto* p) { p->mutable_cpu()->set_model("AMD EPYC 9R14"); }},
      {"cpu.vendor",
       [](auto* p) { p->mutable_cpu()->set_vendor("AuthenticAMD"); }},
      {"cpu.arch", [](auto* p) { p->mutable_cpu()->set_arch("aarch64"); }},
      {"gpus[0].name",
       [](auto* p) { p->mutable_gpus(0)->set_name("NVIDIA A100-SXM4-80GB"); }},
      {"gpus[0].compute_capability",
       [](auto* p) { p->mutable_gpus(0)->set_compute_capability_minor(1); }},
      // A MIG slice reports its parent's name with fewer SMs.
      {"gpus[0].sm_count",
       [](auto* p) { p->mutable_gpus(0)->set_sm_count(16); }},
      {"gpus[0].mig", [](auto* p) { p->mutable_gpus(0)->set_mig(true); }},
      {"software.cuda_driver_version",
       [](auto* p) { p->mutable_software()->set_cuda_driver_version(12080); }},
      {"software.cublas_version",
       [](auto* p) { p->mutable_software()->set_cublas_version("12.9.1"); }},
      {"software.cudnn_version",
       [](auto* p) { p->mutable_software()->set_cudnn_version("9.1.0"); }},
  };
  for (const Mutation& m : mutations) {
    v1::HardwareProfile p = GpuProfile();
    worker::AssignHardwareClass(&p);
    m.apply(&p);  // the profile changes; the claimed class does not
    EXPECT_THAT(CheckHardwareClass(p),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("the profile's ", m.field))))
        << m.field << " in " << p.hardware_class();
    // Re-deriving the class from the changed profile makes it match again.
    worker::AssignHardwareClass(&p);
    EXPECT_THAT(CheckHardwareClass(p), IsOk()) << m.field;
  }
}

}  // namespace
}  // namespace lockstep::server
