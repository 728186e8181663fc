// The GPU suite (tag "gpu"; `bazel test //kernels/cuda/...
// --test_tag_filters=gpu`): every op through the CUDA registry against the
// CPU backend's bits, under two launch configurations and twice in a row;
// the op set v3 graph primitives' edge cases; device fingerprints against
// host fingerprints. Skips without a device.
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cuda/plan.h"
#include "kernels/cuda/test_cases.h"
#include "kernels/cuda/thread_bodies.h"
#include "kernels/cuda/tiled_gemm.h"
#include "kernels/graph_op_cases.h"
#include "kernels/hash/fingerprint.h"
#include "kernels/registry.h"

namespace lockstep::kernels::cuda {
namespace {

using testing::CanonicalOpCases;
using testing::CloneAll;
using testing::Family;
using testing::OpCase;
using testing::RunRegistered;
using testing::SameBits;
using testing::SameBitsAcrossClasses;

class CudaGpuTest : public ::testing::TestWithParam<Family> {
 protected:
  void SetUp() override {
    const absl::Status device = CudaDeviceStatus();
    if (!device.ok()) {
      GTEST_SKIP() << "no usable CUDA device, skipping the GPU suite: "
                   << device;
    }
    ASSERT_TRUE(RegisterCpuCanonicalKernels(&registry_).ok());
    ASSERT_TRUE(RegisterCudaCanonicalKernels(&registry_).ok());
  }
  Registry registry_;
};

TEST_P(CudaGpuTest, RegistryKernelsMatchCpuBitsTwiceInARow) {
  for (const OpCase& c : CanonicalOpCases(GetParam(), 4321)) {
    SCOPED_TRACE(c.label);
    absl::StatusOr<std::vector<Tensor>> want =
        RunRegistered(registry_, kCpuBackendName, c);
    ASSERT_TRUE(want.ok()) << want.status();
    std::vector<Tensor> first;
    for (int run = 0; run < 2; ++run) {
      absl::StatusOr<std::vector<Tensor>> got =
          RunRegistered(registry_, kCudaBackendName, c);
      ASSERT_TRUE(got.ok()) << got.status();
      for (size_t o = 0; o < got->size(); ++o) {
        // The CPU's bits up to the bits of arithmetic NaNs
        // (canonical-arithmetic.md, section 7); the device's own runs
        // repeat every bit, NaNs included.
        EXPECT_TRUE(SameBitsAcrossClasses((*got)[o], (*want)[o]))
            << "run " << run << ", output " << o;
        if (run > 0) {
          EXPECT_TRUE(SameBits((*got)[o], first[o])) << "output " << o;
        }
      }
      if (run == 0) first = std::move(*got);
    }
  }
}

TEST_P(CudaGpuTest, LaunchConfigurationsMatchCpuBits) {
  for (const OpCase& c : CanonicalOpCases(GetParam(), 77)) {
    absl::StatusOr<std::vector<Tensor>> want =
        RunRegistered(registry_, kCpuBackendName, c);
    ASSERT_TRUE(want.ok()) << want.status();
    for (const LaunchConfig& config :
         {LaunchConfig{1, 32}, LaunchConfig{7, 128}}) {
      SCOPED_TRACE(absl::StrFormat("%s, %d x %d", c.label, config.blocks,
                                   config.threads_per_block));
      std::vector<Tensor> got = CloneAll(c.outputs);
      absl::StatusOr<DeviceCall> call =
          PlanCanonicalOp(c.op, c.inputs, absl::MakeSpan(got), c.attrs);
      ASSERT_TRUE(call.ok()) << call.status();
      const absl::Status s = RunOnDevice(*call, config);
      ASSERT_TRUE(s.ok()) << s;
      for (size_t o = 0; o < got.size(); ++o) {
        EXPECT_TRUE(SameBitsAcrossClasses(got[o], (*want)[o]))
            << "output " << o;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, CudaGpuTest,
                         ::testing::Values(Family::kRandom, Family::kSmallInts),
                         [](const ::testing::TestParamInfo<Family>& info) {
                           return std::string(testing::FamilyName(info.param));
                         });

// The tiled GEMM on the device (dense.*, matmul.*, the lowered conv2d
// forward): the CPU's bits at the automatic grid and at 3 blocks (fewer than
// the tiles: grid-stride), with either planned configuration, and with
// tiling off.
TEST(CudaGpuTiledGemmTest, TiledProductsMatchCpuBits) {
  const absl::Status device = CudaDeviceStatus();
  if (!device.ok()) {
    GTEST_SKIP() << "no usable CUDA device, skipping: " << device;
  }
  Registry cpu;
  ASSERT_TRUE(RegisterCpuCanonicalKernels(&cpu).ok());
  for (const testing::TiledProductCase& t : testing::TiledProductCases(42)) {
    const OpCase& c = t.c;
    absl::StatusOr<std::vector<Tensor>> want =
        RunRegistered(cpu, kCpuBackendName, c);
    ASSERT_TRUE(want.ok()) << want.status();
    // Tiled with the planned tile, with this device's choice, with the
    // few-tiles tile for every product, and not tiled.
    PlanOptions few_tiles;
    few_tiles.device_multiprocessors = int64_t{1} << 40;
    PlanOptions untiled;
    untiled.tiled_gemm = false;
    for (const PlanOptions& options :
         {PlanOptions(), DevicePlanOptions(), few_tiles, untiled}) {
      for (const LaunchConfig& config :
           {LaunchConfig{0, 256}, LaunchConfig{3, 64}}) {
        SCOPED_TRACE(absl::StrFormat(
            "%s, tiling %d, %d SMs, %d blocks", c.label, options.tiled_gemm,
            options.device_multiprocessors, config.blocks));
        std::vector<Tensor> got = CloneAll(c.outputs);
        absl::StatusOr<DeviceCall> call = PlanCanonicalOp(
            c.op, c.inputs, absl::MakeSpan(got), c.attrs, options);
        ASSERT_TRUE(call.ok()) << call.status();
        const absl::Status s = RunOnDevice(*call, config);
        ASSERT_TRUE(s.ok()) << s;
        for (size_t o = 0; o < got.size(); ++o) {
          EXPECT_TRUE(SameBits(got[o], (*want)[o])) << "output " << o;
        }
      }
    }
  }
}

// Every tiled GEMM configuration (tiled_gemm.h, WithGemmConfig), launched
// directly, = the one-thread body's bits (BatchedMatMulThread on the host):
// every transpose, edge tiles, K = 0, one to five chunks, -0 and subnormal
// inputs (no NaN: device and host NaN payloads differ, docs/gpu.md), batch
// entries at odd offsets (so vector loads fall back to scalar ones), at the
// automatic grid and at 3 blocks.
TEST(CudaGpuTiledGemmTest, EveryConfigurationMatchesOneThreadBits) {
  const absl::Status device = CudaDeviceStatus();
  if (!device.ok()) {
    GTEST_SKIP() << "no usable CUDA device, skipping: " << device;
  }
  struct Dims {
    int64_t m, k, n, batch;
  };
  const Dims dims[] = {{130, 1100, 200, 1}, {37, 131, 53, 3},
                       {256, 512, 128, 1},  {65, 0, 70, 2},
                       {129, 17, 257, 1},   {64, 1280, 64, 2}};
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  for (const Dims& d : dims) {
    for (int transposes = 0; transposes < 4; ++transposes) {
      c::DenseShape ds;
      ds.m = d.m;
      ds.k = d.k;
      ds.n = d.n;
      ds.transpose_x = (transposes & 1) != 0;
      ds.transpose_w = (transposes & 2) != 0;
      c::BatchedMatMulShape s;
      s.m = c::DenseForwardShape(ds);
      s.batch = d.batch;
      s.a_batch = d.m * d.k;
      s.b_batch = d.k * d.n;
      s.c_batch = d.m * d.n;
      s.scale = d.batch > 1 ? -0.17677669f : 1.0f;
      std::vector<float> a(static_cast<size_t>(d.batch * d.m * d.k));
      std::vector<float> b(static_cast<size_t>(d.batch * d.k * d.n));
      for (std::vector<float>* v : {&a, &b}) {
        for (size_t i = 0; i < v->size(); ++i) {
          float x = real(rng);
          if (i % 89 == 3) x = 1.5e-39f;
          if (i % 97 == 5) x = -0.0f;
          (*v)[i] = x;
        }
      }
      std::vector<float> want(static_cast<size_t>(d.batch * d.m * d.n), 0.0f);
      BatchedMatMulThread(s, a.data(), b.data(), want.data(), 0, 1);
      for (int config = 0; config < kGemmConfigs; ++config) {
        for (const int64_t blocks : {int64_t{0}, int64_t{3}}) {
          SCOPED_TRACE(absl::StrFormat(
              "%s: m=%d k=%d n=%d batch=%d tx=%d tw=%d, %d blocks",
              GemmConfigName(config), d.m, d.k, d.n, d.batch, ds.transpose_x,
              ds.transpose_w, blocks));
          std::vector<float> got(want.size());
          uint32_t poison = 0xA5A5A5A5u;
          for (float& f : got) std::memcpy(&f, &poison, 4);
          const absl::Status run =
              RunTiledGemmConfig(config, s, a, b, absl::MakeSpan(got), blocks);
          ASSERT_TRUE(run.ok()) << run;
          int differ = 0;
          for (size_t i = 0; i < got.size(); ++i) {
            uint32_t g, w;
            std::memcpy(&g, &got[i], 4);
            std::memcpy(&w, &want[i], 4);
            if (g != w && differ++ == 0) {
              ADD_FAILURE() << "output " << i << ": 0x" << std::hex << g
                            << ", want 0x" << w;
            }
          }
          EXPECT_EQ(differ, 0);
        }
      }
    }
  }
}

// The op set v3 graph primitives' edge cases (kernels/graph_op_cases.h):
// NaN, +-Inf, -0 and subnormals where the spec fixes the result's bits
// (canonical NaN results, copies), rank 0..4 broadcasting, reductions over
// 256 terms, at a one-warp grid and a grid larger than the work.
TEST(CudaGpuGraphTest, GraphEdgeCasesMatchCpuBits) {
  const absl::Status device = CudaDeviceStatus();
  if (!device.ok()) {
    GTEST_SKIP() << "no usable CUDA device, skipping: " << device;
  }
  Registry cpu;
  ASSERT_TRUE(RegisterCpuCanonicalKernels(&cpu).ok());
  for (const OpCase& c : GraphEdgeOpCases(2024)) {
    absl::StatusOr<std::vector<Tensor>> want =
        RunRegistered(cpu, kCpuBackendName, c);
    ASSERT_TRUE(want.ok()) << c.label << ": " << want.status();
    for (const LaunchConfig& config :
         {LaunchConfig{1, 32}, LaunchConfig{64, 256}}) {
      SCOPED_TRACE(absl::StrFormat("%s, %d x %d", c.label, config.blocks,
                                   config.threads_per_block));
      std::vector<Tensor> got = CloneAll(c.outputs);
      absl::StatusOr<DeviceCall> call =
          PlanCanonicalOp(c.op, c.inputs, absl::MakeSpan(got), c.attrs);
      ASSERT_TRUE(call.ok()) << call.status();
      const absl::Status s = RunOnDevice(*call, config);
      ASSERT_TRUE(s.ok()) << s;
      for (size_t o = 0; o < got.size(); ++o) {
        EXPECT_TRUE(SameBits(got[o], (*want)[o])) << "output " << o;
      }
    }
  }
}

// A resident run's fingerprints queued on the device and collected in one
// copy: each the host fingerprint of the bytes as they were when queued,
// though the next kernel overwrote them before the collection. With the
// hash stream on, that kernel runs on the legacy stream after waiting for
// the hash's event (CudaMirror::WaitForHashes); without the wait it could
// overwrite the bytes while they are hashed.
TEST(CudaGpuFingerprintTest, QueuedFingerprintsMatchHost) {
  const absl::Status device = CudaDeviceStatus();
  if (!device.ok()) GTEST_SKIP() << "no usable CUDA device: " << device;
  Registry registry;
  ASSERT_TRUE(RegisterCudaCanonicalKernels(&registry).ok());
  const DeviceLeafKernel before = CurrentDeviceLeafKernel();
  const bool stream_before = CurrentDeviceHashStream();
  for (const bool stream : {false, true}) {
    for (const DeviceLeafKernel kernel :
         {DeviceLeafKernel::kWarp, DeviceLeafKernel::kBlock}) {
      SCOPED_TRACE(absl::StrCat(DeviceLeafKernelName(kernel),
                                stream ? ", hash stream" : ""));
      SetDeviceLeafKernel(kernel);
      SetDeviceHashStream(stream);
      EXPECT_TRUE(
          testing::QueuedFingerprintsMatchHost(registry, kCudaBackendName));
    }
  }
  SetDeviceLeafKernel(before);
  SetDeviceHashStream(stream_before);
}

TEST(CudaGpuFingerprintTest, DeviceFingerprintEqualsHost) {
  const absl::Status device = CudaDeviceStatus();
  if (!device.ok()) {
    GTEST_SKIP() << "no usable CUDA device, skipping: " << device;
  }
  const int64_t leaf_floats = static_cast<int64_t>(hash::kLeafBytes / 4);
  const int64_t counts[] = {
      0, 1, leaf_floats - 1, leaf_floats, leaf_floats + 1, 5 * leaf_floats + 3};
  std::mt19937 rng(3);
  for (int64_t n : counts) {
    std::vector<float> data(n);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& x : data) x = dist(rng);
    const std::vector<int64_t> shape = {n};
    const size_t size = static_cast<size_t>(n) * 4;
    const hash::Fingerprint want =
        hash::HashTensorBytes(hash::DtypeCode::kFloat32, shape, data.data(),
                              size)
            .value();
    for (const LaunchConfig& config :
         {LaunchConfig{1, 32}, LaunchConfig{7, 128}}) {
      absl::StatusOr<hash::Fingerprint> got = DeviceFingerprint(
          hash::DtypeCode::kFloat32, shape, data.data(), size, config);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->ToHex(), want.ToHex()) << n << " floats";
    }
  }
}

TEST(CudaGpuFingerprintTest, DeviceStatisticsEqualHost) {
  const absl::Status device = CudaDeviceStatus();
  if (!device.ok()) {
    GTEST_SKIP() << "no usable CUDA device, skipping: " << device;
  }
  const int64_t leaf_floats = static_cast<int64_t>(hash::kLeafBytes / 4);
  std::mt19937 rng(9);
  for (int64_t n : {int64_t{0}, int64_t{5}, leaf_floats, 3 * leaf_floats + 7}) {
    std::vector<float> data(n);
    std::uniform_real_distribution<float> dist(-50.0f, 50.0f);
    for (float& x : data) x = dist(rng);
    if (n > 2) data[1] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<int64_t> shape = {n};
    const size_t size = static_cast<size_t>(n) * 4;
    const hash::FingerprintAndStatsResult want =
        hash::FingerprintAndStats(hash::DtypeCode::kFloat32, shape, data.data(),
                                  size)
            .value();
    for (const LaunchConfig& config :
         {LaunchConfig{1, 32}, LaunchConfig{7, 128}}) {
      absl::StatusOr<hash::FingerprintAndStatsResult> got =
          DeviceFingerprintAndStats(hash::DtypeCode::kFloat32, shape,
                                    data.data(), size, config);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->fingerprint, want.fingerprint) << n;
      EXPECT_EQ(std::memcmp(&got->stats.sum, &want.stats.sum, 8), 0) << n;
      EXPECT_EQ(std::memcmp(&got->stats.l2, &want.stats.l2, 8), 0) << n;
      EXPECT_EQ(std::memcmp(&got->stats.max_abs, &want.stats.max_abs, 4), 0)
          << n;
      EXPECT_EQ(got->stats.nan_count, want.stats.nan_count) << n;
      EXPECT_EQ(got->stats.inf_count, want.stats.inf_count) << n;
    }
  }
}

// The header as the combination kernel's argument, written on the device
// in front of the leaf hashes: ranks 0, 28 and 29 (header || leaf hash on
// either side of XXH3's 240-byte short inputs) and 64 (the longest
// header), one and three leaves.
TEST(CudaGpuFingerprintTest, HeaderArgumentAtEveryLength) {
  const absl::Status device = CudaDeviceStatus();
  if (!device.ok()) {
    GTEST_SKIP() << "no usable CUDA device, skipping: " << device;
  }
  const int64_t leaf_floats = static_cast<int64_t>(hash::kLeafBytes / 4);
  std::mt19937 rng(13);
  for (size_t rank : {size_t{0}, size_t{28}, size_t{29}, hash::kMaxRank}) {
    for (int64_t n : {int64_t{3}, 2 * leaf_floats + 5}) {
      if (rank == 0 && n != 3) continue;
      std::vector<int64_t> shape(rank, 1);
      if (rank > 0) shape[rank / 2] = n;
      const int64_t count = rank > 0 ? n : 1;
      std::vector<float> data(count);
      std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
      for (float& x : data) x = dist(rng);
      const size_t size = static_cast<size_t>(count) * 4;
      const hash::FingerprintAndStatsResult want =
          hash::FingerprintAndStats(hash::DtypeCode::kFloat32, shape,
                                    data.data(), size)
              .value();
      // The block-per-leaf kernel combines a one-leaf tensor itself up to
      // rank 28 (CombinesInLeafBlock), the warp kernel never.
      const DeviceLeafKernel before = CurrentDeviceLeafKernel();
      for (const DeviceLeafKernel kernel :
           {DeviceLeafKernel::kWarp, DeviceLeafKernel::kBlock}) {
        SetDeviceLeafKernel(kernel);
        absl::StatusOr<hash::FingerprintAndStatsResult> got =
            DeviceFingerprintAndStats(hash::DtypeCode::kFloat32, shape,
                                      data.data(), size, LaunchConfig{});
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_EQ(got->fingerprint, want.fingerprint)
            << "rank " << rank << ", " << count << " floats, "
            << DeviceLeafKernelName(kernel);
        EXPECT_EQ(std::memcmp(&got->stats.sum, &want.stats.sum, 8), 0);
        EXPECT_EQ(std::memcmp(&got->stats.l2, &want.stats.l2, 8), 0);
      }
      SetDeviceLeafKernel(before);
    }
  }
}

// The warp-per-leaf path around its boundaries (XXH3's short inputs, the
// 1 KiB block, the 64 KiB leaf, a short last leaf) with NaN, Inf, -0 and
// subnormals, at 1, 2 and 8 warps per block and grids smaller and larger
// than the leaf count; statistics compared as bit patterns.
// Device fingerprints with statistics of float32 tensors at the
// boundaries of the leaf bodies, at three launch configurations, against
// the host's bits.
void ExpectDevicePathEqualsHostBits();

// Both leaf kernels (a warp per leaf, a block of warps per leaf) at the
// boundaries of their bodies.
TEST(CudaGpuFingerprintTest, WarpAndBlockPathsEqualHostBits) {
  const absl::Status device = CudaDeviceStatus();
  if (!device.ok()) {
    GTEST_SKIP() << "no usable CUDA device, skipping: " << device;
  }
  const DeviceLeafKernel before = CurrentDeviceLeafKernel();
  for (const DeviceLeafKernel kernel :
       {DeviceLeafKernel::kWarp, DeviceLeafKernel::kBlock}) {
    SCOPED_TRACE(DeviceLeafKernelName(kernel));
    SetDeviceLeafKernel(kernel);
    ExpectDevicePathEqualsHostBits();
  }
  SetDeviceLeafKernel(before);
}

void ExpectDevicePathEqualsHostBits() {
  std::mt19937 rng(21);
  for (uint64_t size :
       {uint64_t{4}, uint64_t{240}, uint64_t{244}, uint64_t{1024},
        uint64_t{1028}, hash::kLeafBytes - 4, hash::kLeafBytes,
        hash::kLeafBytes + 4, (uint64_t{1} << 20) + 12}) {
    std::vector<float> data(size / 4);
    std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
    for (float& x : data) x = dist(rng);
    const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              -0.0f,
                              std::numeric_limits<float>::denorm_min(),
                              -std::numeric_limits<float>::max()};
    for (size_t i = 0; i < data.size(); i += 37) data[i] = specials[i % 6];
    const std::vector<int64_t> shape = {static_cast<int64_t>(data.size())};
    const hash::FingerprintAndStatsResult want =
        hash::FingerprintAndStats(hash::DtypeCode::kFloat32, shape, data.data(),
                                  size)
            .value();
    for (const LaunchConfig& config :
         {LaunchConfig{1, 32}, LaunchConfig{40, 64}, LaunchConfig{0, 256}}) {
      SCOPED_TRACE(absl::StrFormat("%d bytes, %d x %d", size, config.blocks,
                                   config.threads_per_block));
      absl::StatusOr<hash::Fingerprint> fp = DeviceFingerprint(
          hash::DtypeCode::kFloat32, shape, data.data(), size, config);
      ASSERT_TRUE(fp.ok()) << fp.status();
      EXPECT_EQ(*fp, want.fingerprint);
      absl::StatusOr<hash::FingerprintAndStatsResult> got =
          DeviceFingerprintAndStats(hash::DtypeCode::kFloat32, shape,
                                    data.data(), size, config);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->fingerprint, want.fingerprint);
      EXPECT_EQ(std::memcmp(&got->stats.sum, &want.stats.sum, 8), 0);
      EXPECT_EQ(std::memcmp(&got->stats.l2, &want.stats.l2, 8), 0);
      EXPECT_EQ(std::memcmp(&got->stats.max_abs, &want.stats.max_abs, 4), 0);
      EXPECT_EQ(got->stats.nan_count, want.stats.nan_count);
      EXPECT_EQ(got->stats.inf_count, want.stats.inf_count);
    }
  }
}

// The two-warp combination around its own boundaries: its statistics warp
// stages 64 partials per batch in two alternating buffers, so leaf counts
// around 32, 64 and 128 and a count of several batches (300), each with a
// short last leaf; statistics compared as bit patterns.
TEST(CudaGpuFingerprintTest, CombinationBoundariesEqualHostBits) {
  const absl::Status device = CudaDeviceStatus();
  if (!device.ok()) {
    GTEST_SKIP() << "no usable CUDA device, skipping: " << device;
  }
  std::mt19937 rng(23);
  for (uint64_t leaves : {1, 31, 33, 64, 65, 129, 300}) {
    const uint64_t size = (leaves - 1) * hash::kLeafBytes + 1028;
    std::vector<float> data(size / 4);
    std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
    for (float& x : data) x = dist(rng);
    for (size_t i = 0; i < data.size(); i += 4099) {
      data[i] = i % 2 == 0 ? std::numeric_limits<float>::quiet_NaN()
                           : -std::numeric_limits<float>::infinity();
    }
    const std::vector<int64_t> shape = {static_cast<int64_t>(data.size())};
    const hash::FingerprintAndStatsResult want =
        hash::FingerprintAndStats(hash::DtypeCode::kFloat32, shape, data.data(),
                                  size)
            .value();
    for (const LaunchConfig& config :
         {LaunchConfig{40, 64}, LaunchConfig{0, 256}}) {
      SCOPED_TRACE(absl::StrFormat("%d leaves, %d x %d", leaves, config.blocks,
                                   config.threads_per_block));
      absl::StatusOr<hash::FingerprintAndStatsResult> got =
          DeviceFingerprintAndStats(hash::DtypeCode::kFloat32, shape,
                                    data.data(), size, config);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->fingerprint, want.fingerprint);
      EXPECT_EQ(std::memcmp(&got->stats.sum, &want.stats.sum, 8), 0);
      EXPECT_EQ(std::memcmp(&got->stats.l2, &want.stats.l2, 8), 0);
      EXPECT_EQ(std::memcmp(&got->stats.max_abs, &want.stats.max_abs, 4), 0);
      EXPECT_EQ(got->stats.nan_count, want.stats.nan_count);
      EXPECT_EQ(got->stats.inf_count, want.stats.inf_count);
    }
  }
}

}  // namespace
}  // namespace lockstep::kernels::cuda
