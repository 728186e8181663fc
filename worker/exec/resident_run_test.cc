// Device-resident runs (kernels/residency.h) on the emulated CUDA backend:
// the CUDA plans and per-thread bodies on the host, with every tensor's
// "device" copy an EmulatedMirror kept between kernel calls, as a GPU run
// keeps them on the device. For zoo models covering every host access the
// executor makes (batch-norm running statistics, gradient clipping, the
// loss, embedding ids sorted on the host, dropout masks, a host-injected
// fault), the resident run gives the CPU's fingerprints, run digest and
// loss bits, and so does the same run copying every tensor in and out;
// the counters show the tensors stayed in their mirrors.
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/emulated_backend.h"
#include "kernels/registry.h"
#include "kernels/residency.h"
#include "worker/exec/dataset_batches.h"
#include "worker/exec/executor.h"
#include "worker/exec/fault.h"
#include "worker/exec/test_util.h"

namespace lockstep::worker {
namespace {

namespace v1 = ::lockstep::v1;
using ::lockstep::testing::IsOk;

const kernels::Registry& Registry() {
  static const kernels::Registry* r = [] {
    auto* registry = new kernels::Registry;
    EXPECT_THAT(kernels::RegisterCpuCanonicalKernels(registry), IsOk());
    EXPECT_THAT(kernels::cuda::RegisterEmulatedCudaKernels(registry), IsOk());
    return registry;
  }();
  return *r;
}

using Zoo = testing::ZooModel;

// The zoo model `name` with a small batch and `steps` steps, every step
// captured.
Zoo Load(const std::string& name, int batch, int steps) {
  Zoo z = testing::LoadZooModel(name, batch, steps);
  z.config.mutable_capture()->Clear();
  z.config.mutable_capture()->set_kind(v1::CapturePolicy::EVERY_STEP);
  return z;
}

absl::StatusOr<RunResult> RunZoo(const Zoo& z, v1::Backend backend,
                                 bool resident,
                                 std::optional<FaultSpec> fault = {},
                                 bool queue_fingerprints = true) {
  if (!z.dataset) return absl::InternalError("zoo model not loaded");
  v1::JobConfig config = z.config;
  config.set_backend(backend);
  ExecutorOptions options;
  options.initializer = z.model.initializer();
  options.keep_fingerprints = true;
  options.device_resident = resident;
  options.fault = fault;
  options.queue_device_fingerprints = queue_fingerprints;
  return RunJob(z.plan, config, &Registry(),
                DatasetBatches(z.dataset, config.batch_size()),
                std::move(options));
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

void ExpectSameRun(const RunResult& got, const RunResult& want) {
  EXPECT_EQ(got.run_digest, want.run_digest);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_EQ(Bits(got.losses[i]), Bits(want.losses[i])) << "step " << i;
  }
  ASSERT_EQ(got.fingerprints.size(), want.fingerprints.size());
  for (size_t s = 0; s < want.fingerprints.size(); ++s) {
    ASSERT_EQ(got.fingerprints[s].size(), want.fingerprints[s].size());
    for (size_t j = 0; j < want.fingerprints[s].size(); ++j) {
      const v1::TensorFingerprint& a = got.fingerprints[s][j];
      const v1::TensorFingerprint& b = want.fingerprints[s][j];
      EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString())
          << "step " << s << ", " << got.manifest.entries(j).layer() << " "
          << got.manifest.entries(j).role();
    }
  }
}

class ResidentRunTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ResidentRunTest, ResidentEqualsCopyingEqualsCpu) {
  const Zoo z = Load(GetParam(), 4, 3);
  auto cpu = RunZoo(z, v1::CPU, true);
  auto resident = RunZoo(z, v1::CUDA, true);
  auto waiting = RunZoo(z, v1::CUDA, true, {}, /*queue_fingerprints=*/false);
  auto copying = RunZoo(z, v1::CUDA, false);
  ASSERT_THAT(cpu, IsOk());
  ASSERT_THAT(resident, IsOk());
  ASSERT_THAT(waiting, IsOk());
  ASSERT_THAT(copying, IsOk());
  for (const KernelChoice& k : resident->kernels) {
    EXPECT_EQ(k.ran.backend, "cuda") << k.op;
  }
  ExpectSameRun(*resident, *cpu);
  ExpectSameRun(*waiting, *cpu);
  ExpectSameRun(*copying, *cpu);

  EXPECT_FALSE(cpu->device_resident);
  EXPECT_FALSE(copying->device_resident);
  EXPECT_EQ(copying->residency.uploads, 0);
  ASSERT_TRUE(resident->device_resident);
  const kernels::ResidencyCounters& c = resident->residency;
  // Every captured tensor of every step was fingerprinted, almost all of
  // them in their mirrors (the batch and labels are host-written).
  int64_t fingerprints = 0;
  for (const auto& step : resident->fingerprints) fingerprints += step.size();
  EXPECT_GT(c.mirror_fingerprints, fingerprints / 2);
  EXPECT_LE(c.mirror_fingerprints, fingerprints);
  // The float32 ones were queued and collected once per step; without the
  // queue each waited for its own result.
  EXPECT_GT(c.queued_fingerprints, fingerprints / 2);
  EXPECT_LE(c.queued_fingerprints, c.mirror_fingerprints);
  EXPECT_EQ(c.fingerprint_collections,
            static_cast<int64_t>(resident->fingerprints.size()));
  EXPECT_EQ(waiting->residency.mirror_fingerprints, c.mirror_fingerprints);
  EXPECT_EQ(waiting->residency.queued_fingerprints, 0);
  EXPECT_EQ(waiting->residency.fingerprint_collections, 0);
  // Parameters go up once; after that each step uploads only what the
  // host wrote (the batch, its labels, a few scalars): far fewer bytes
  // than a copy of every kernel's inputs would move.
  EXPECT_GT(c.uploads, 0);
  EXPECT_GT(c.mirrors_created, 0);
  EXPECT_LT(c.download_bytes, c.upload_bytes);
  RecordProperty("uploads", static_cast<int>(c.uploads));
  RecordProperty("downloads", static_cast<int>(c.downloads));
  RecordProperty("mirror_fingerprints",
                 static_cast<int>(c.mirror_fingerprints));
  RecordProperty("queued_fingerprints",
                 static_cast<int>(c.queued_fingerprints));
}

INSTANTIATE_TEST_SUITE_P(Zoo, ResidentRunTest,
                         ::testing::Values("mlp", "lenet5", "resnet_bn",
                                           "norm_mlp", "gauntlet", "char_lm",
                                           "mobilenet_tiny"));

// A bit flipped on the host in a tensor that lives in its mirror reaches
// the device: the resident run diverges exactly as the CPU run does.
TEST(ResidentRunFaultTest, HostInjectedFaultReachesTheMirror) {
  const Zoo z = Load("mlp", 4, 3);
  auto fault = ParseFaultSpec("step=1,layer=fc1,role=WEIGHT,bit=22");
  ASSERT_THAT(fault, IsOk());
  auto cpu = RunZoo(z, v1::CPU, true, *fault);
  auto resident = RunZoo(z, v1::CUDA, true, *fault);
  auto clean = RunZoo(z, v1::CUDA, true);
  ASSERT_THAT(cpu, IsOk());
  ASSERT_THAT(resident, IsOk());
  ASSERT_THAT(clean, IsOk());
  EXPECT_TRUE(resident->fault_injected);
  ExpectSameRun(*resident, *cpu);
  EXPECT_NE(resident->run_digest, clean->run_digest);
}

// A bit flipped in a softmax's output reaches its consumers but not the
// softmax's own gradient, which the spec recomputes from x: the CPU run,
// whose softmax.grad otherwise reads the forward's y, recomputes for the
// layer the fault hits, and diverges as the CUDA run (which always
// recomputes) does.
TEST(ResidentRunFaultTest, FaultInASoftmaxOutputLeavesItsGradientToX) {
  const Zoo z = Load("norm_mlp", 4, 3);
  auto fault = ParseFaultSpec("step=1,layer=attn,role=ACTIVATION,bit=22");
  ASSERT_THAT(fault, IsOk());
  auto cpu = RunZoo(z, v1::CPU, true, *fault);
  auto resident = RunZoo(z, v1::CUDA, true, *fault);
  auto clean = RunZoo(z, v1::CPU, true);
  ASSERT_THAT(cpu, IsOk());
  ASSERT_THAT(resident, IsOk());
  ASSERT_THAT(clean, IsOk());
  EXPECT_TRUE(cpu->fault_injected);
  ExpectSameRun(*cpu, *resident);
  EXPECT_NE(cpu->run_digest, clean->run_digest);
}

// An observer sees each tensor with its fingerprint as it is produced, so
// with one the fingerprints are not queued; the run is the same.
TEST(ResidentRunQueueTest, AnObserverGetsEachFingerprintAtOnce) {
  const Zoo z = Load("lenet5", 4, 2);
  v1::JobConfig config = z.config;
  config.set_backend(v1::CUDA);
  ExecutorOptions options;
  options.initializer = z.model.initializer();
  options.keep_fingerprints = true;
  int64_t observed = 0;
  int64_t zero_hashes = 0;
  options.observer = [&](int, const v1::ManifestEntry&, const kernels::Tensor&,
                         const v1::TensorFingerprint& fp) {
    ++observed;
    if (fp.hash_hi() == 0 && fp.hash_lo() == 0) ++zero_hashes;
    return absl::OkStatus();
  };
  auto observed_run = RunJob(z.plan, config, &Registry(),
                             DatasetBatches(z.dataset, config.batch_size()),
                             std::move(options));
  auto queued = RunZoo(z, v1::CUDA, true);
  ASSERT_THAT(observed_run, IsOk());
  ASSERT_THAT(queued, IsOk());
  ExpectSameRun(*observed_run, *queued);
  EXPECT_GT(observed, 0);
  EXPECT_EQ(zero_hashes, 0);
  EXPECT_GT(observed_run->residency.mirror_fingerprints, 0);
  EXPECT_EQ(observed_run->residency.queued_fingerprints, 0);
  EXPECT_GT(queued->residency.queued_fingerprints, 0);
}

}  // namespace
}  // namespace lockstep::worker
