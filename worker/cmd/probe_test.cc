// `lockstep-worker probe` against a fake probe: the table, the JSON and a
// failing probe.
#include "worker/cmd/probe.h"

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::worker::cmd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class FakeProbe : public HardwareProbe {
 public:
  explicit FakeProbe(absl::StatusOr<v1::HardwareProfile> result)
      : result_(std::move(result)) {}
  absl::StatusOr<v1::HardwareProfile> Probe() override { return result_; }

 private:
  absl::StatusOr<v1::HardwareProfile> result_;
};

v1::HardwareProfile Profile() {
  v1::HardwareProfile p;
  p.set_hostname("node-7");
  p.mutable_cpu()->set_model("Test CPU");
  p.mutable_cpu()->set_vendor("TestVendor");
  p.mutable_cpu()->set_arch("x86_64");
  p.mutable_cpu()->set_cores(12);
  p.mutable_cpu()->add_features("avx2");
  p.set_gpu_error("no driver");
  p.set_hardware_class("lockstep-class/test");
  p.set_hardware_class_digest("0123abcd");
  return p;
}

struct Output {
  int code = -1;
  std::string out;
  std::string err;
};

Output RunProbe(const ProbeCommandOptions& options, HardwareProbe& probe) {
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  Output o;
  o.code = ProbeMain(options, probe, out, err);
  for (auto [file, text] : {std::pair{out, &o.out}, std::pair{err, &o.err}}) {
    std::rewind(file);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), file)) > 0) {
      text->append(buf, n);
    }
    std::fclose(file);
  }
  return o;
}

TEST(ProbeCommandTest, PrintsTheProfileAsATable) {
  FakeProbe probe(Profile());
  const Output o = RunProbe({}, probe);
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(o.err, "");
  EXPECT_THAT(o.out, HasSubstr("host:            node-7\n"));
  EXPECT_THAT(o.out,
              HasSubstr("cpu:             Test CPU (TestVendor, x86_64), 12 "
                        "logical cores\n"));
  EXPECT_THAT(o.out, HasSubstr("gpus:            none (no driver)\n"));
  EXPECT_THAT(o.out, HasSubstr("hardware class:  lockstep-class/test\n"));
  EXPECT_THAT(o.out, HasSubstr("class digest:    0123abcd\n"));
}

TEST(ProbeCommandTest, VendorLibrariesLineOnlyWithCuda) {
  v1::HardwareProfile p = Profile();
  {
    FakeProbe probe(p);
    EXPECT_THAT(RunProbe({}, probe).out, Not(HasSubstr("vendor libs:")));
  }
  p.mutable_software()->set_built_with_cuda(true);
  p.mutable_software()->set_vendor_libraries_error(
      "cuDNN not loaded: libcudnn.so.9: cannot open shared object file: No "
      "such file or directory");
  {
    FakeProbe probe(p);
    EXPECT_THAT(RunProbe({}, probe).out,
                HasSubstr("vendor libs:     cuDNN not loaded: libcudnn.so.9: "
                          "cannot open shared object file: No such file or "
                          "directory\n"));
  }
  p.mutable_software()->clear_vendor_libraries_error();
  {
    FakeProbe probe(p);
    EXPECT_THAT(RunProbe({}, probe).out,
                HasSubstr("vendor libs:     loaded\n"));
  }
  p.mutable_software()->set_cublas_version("13.0.2");
  p.mutable_software()->set_cudnn_version("9.19.0");
  {
    FakeProbe probe(p);
    EXPECT_THAT(
        RunProbe({}, probe).out,
        HasSubstr("vendor libs:     loaded (cuBLAS 13.0.2, cuDNN 9.19.0)\n"));
  }
}

TEST(ProbeCommandTest, PrintsTheProfileAsJsonWithProtoFieldNames) {
  FakeProbe probe(Profile());
  ProbeCommandOptions options;
  options.json = true;
  const Output o = RunProbe(options, probe);
  EXPECT_EQ(o.code, 0);
  EXPECT_THAT(o.out, HasSubstr("\"hostname\": \"node-7\""));
  EXPECT_THAT(o.out, HasSubstr("\"hardware_class_digest\": \"0123abcd\""));
  EXPECT_THAT(o.out, ::testing::Not(HasSubstr("host:")));
}

TEST(ProbeCommandTest, AFailingProbeExitsOneAndSaysWhy) {
  FakeProbe probe(absl::InternalError("cannot read /proc/cpuinfo"));
  const Output o = RunProbe({}, probe);
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.out, "");
  EXPECT_THAT(o.err, HasSubstr("lockstep-worker: probe failed: INTERNAL: "
                               "cannot read /proc/cpuinfo"));
}

}  // namespace
}  // namespace lockstep::worker::cmd
