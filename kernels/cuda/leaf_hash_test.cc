// The device hasher's per-leaf body, run on emulated grids on the host,
// against the libxxhash-based host fingerprint.
#include "kernels/cuda/leaf_hash.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/plan.h"
#include "kernels/hash/fingerprint.h"

namespace lockstep::kernels::cuda {
namespace {

static_assert(kDeviceLeafBytes == hash::kLeafBytes,
              "device and host leaf sizes differ");

TEST(LeafHashTest, EmulatedDeviceFingerprintEqualsHost) {
  const int64_t leaf_floats = static_cast<int64_t>(hash::kLeafBytes / 4);
  const int64_t counts[] = {0,
                            1,
                            leaf_floats - 1,
                            leaf_floats,
                            leaf_floats + 1,
                            3 * leaf_floats + 12345,
                            4 * leaf_floats};
  std::mt19937 rng(7);
  for (int64_t n : counts) {
    std::vector<float> data(n);
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    for (float& x : data) x = dist(rng);
    const std::vector<int64_t> shape = {n};
    const size_t size = static_cast<size_t>(n) * 4;
    const hash::Fingerprint want =
        hash::HashTensorBytes(hash::DtypeCode::kFloat32, shape, data.data(),
                              size)
            .value();
    for (const LaunchConfig& config :
         {LaunchConfig{1, 32}, LaunchConfig{7, 128}, LaunchConfig{1, 1}}) {
      const std::vector<uint64_t> leaves =
          EmulateLeafHashes(data.data(), size, config);
      ASSERT_EQ(leaves.size(), hash::NumLeaves(size));
      const hash::Fingerprint got =
          hash::CombineLeafHashes(hash::DtypeCode::kFloat32, shape, size,
                                  leaves)
              .value();
      EXPECT_EQ(got.ToHex(), want.ToHex()) << n << " floats, " << config.blocks
                                           << " x " << config.threads_per_block;
    }
  }
}

uint64_t Bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, 8);
  return u;
}

TEST(LeafHashTest, EmulatedDeviceStatisticsEqualHost) {
  const int64_t leaf_floats = static_cast<int64_t>(hash::kLeafBytes / 4);
  std::mt19937 rng(5);
  for (int64_t n : {int64_t{0}, int64_t{1}, leaf_floats - 3, leaf_floats,
                    2 * leaf_floats + 17, 5 * leaf_floats}) {
    std::vector<float> data(n);
    std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
    for (float& x : data) x = dist(rng);
    if (n > 100) {  // non-finite values and subnormals are counted/kept
      data[7] = std::numeric_limits<float>::quiet_NaN();
      data[n - 1] = -std::numeric_limits<float>::infinity();
      data[50] = std::numeric_limits<float>::denorm_min();
    }
    const std::vector<int64_t> shape = {n};
    const size_t size = static_cast<size_t>(n) * 4;
    const hash::FingerprintAndStatsResult want =
        hash::FingerprintAndStats(hash::DtypeCode::kFloat32, shape, data.data(),
                                  size)
            .value();
    for (const LaunchConfig& config :
         {LaunchConfig{1, 32}, LaunchConfig{3, 64}}) {
      const LeafHashesAndStats got =
          EmulateLeafHashesAndStats(data.data(), size, config);
      const hash::Fingerprint fp =
          hash::CombineLeafHashes(hash::DtypeCode::kFloat32, shape, size,
                                  got.leaf_hashes)
              .value();
      EXPECT_EQ(fp, want.fingerprint) << n;
      const hash::TensorStats st = hash::CombineBlockStats(got.stats);
      EXPECT_EQ(Bits(st.sum), Bits(want.stats.sum)) << n;
      EXPECT_EQ(Bits(st.l2), Bits(want.stats.l2)) << n;
      EXPECT_EQ(Bits(st.max_abs), Bits(want.stats.max_abs)) << n;
      EXPECT_EQ(st.nan_count, want.stats.nan_count) << n;
      EXPECT_EQ(st.inf_count, want.stats.inf_count) << n;
    }
  }
}

TEST(LeafHashTest, EmulatedDeviceCombinationEqualsHost) {
  const int64_t leaf_floats = static_cast<int64_t>(hash::kLeafBytes / 4);
  std::mt19937 rng(13);
  for (int64_t n : {int64_t{0}, int64_t{3}, leaf_floats, 4 * leaf_floats + 9}) {
    std::vector<float> data(n);
    std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
    for (float& x : data) x = dist(rng);
    if (n > 4) data[2] = std::numeric_limits<float>::infinity();
    const std::vector<int64_t> shape = {1, n};
    const size_t size = static_cast<size_t>(n) * 4;
    const hash::FingerprintAndStatsResult want =
        hash::FingerprintAndStats(hash::DtypeCode::kFloat32, shape, data.data(),
                                  size)
            .value();
    for (const LaunchConfig& config :
         {LaunchConfig{1, 32}, LaunchConfig{5, 64}}) {
      const hash::FingerprintAndStatsResult got =
          EmulateDeviceFingerprint(hash::DtypeCode::kFloat32, shape,
                                   data.data(), size, true, config)
              .value();
      EXPECT_EQ(got.fingerprint, want.fingerprint) << n;
      EXPECT_EQ(Bits(got.stats.sum), Bits(want.stats.sum)) << n;
      EXPECT_EQ(Bits(got.stats.l2), Bits(want.stats.l2)) << n;
      EXPECT_EQ(Bits(got.stats.max_abs), Bits(want.stats.max_abs)) << n;
      EXPECT_EQ(got.stats.inf_count, want.stats.inf_count) << n;
      EXPECT_EQ(got.stats.nan_count, want.stats.nan_count) << n;
      const hash::FingerprintAndStatsResult hash_only =
          EmulateDeviceFingerprint(hash::DtypeCode::kFloat32, shape,
                                   data.data(), size, false, config)
              .value();
      EXPECT_EQ(hash_only.fingerprint, want.fingerprint) << n;
    }
  }
  // Not float32: the hash only; statistics are refused; bad sizes too.
  std::vector<uint8_t> bytes(hash::kLeafBytes + 5, 7);
  const std::vector<int64_t> shape = {static_cast<int64_t>(bytes.size())};
  EXPECT_EQ(EmulateDeviceFingerprint(hash::DtypeCode::kUInt8, shape,
                                     bytes.data(), bytes.size(), false, {3, 32})
                .value()
                .fingerprint,
            hash::HashTensorBytes(hash::DtypeCode::kUInt8, shape, bytes.data(),
                                  bytes.size())
                .value());
  EXPECT_EQ(EmulateDeviceFingerprint(hash::DtypeCode::kUInt8, shape,
                                     bytes.data(), bytes.size(), true, {3, 32})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      EmulateDeviceFingerprint(hash::DtypeCode::kUInt8, shape, bytes.data(),
                               bytes.size() - 1, false, {3, 32})
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(LeafHashTest, OddByteSizes) {
  // uint8 tensors of sizes around the leaf boundary.
  const size_t sizes[] = {1, 3, hash::kLeafBytes - 1, hash::kLeafBytes + 1,
                          2 * hash::kLeafBytes + 7};
  std::mt19937 rng(11);
  for (size_t size : sizes) {
    std::vector<uint8_t> data(size);
    for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
    const std::vector<int64_t> shape = {static_cast<int64_t>(size)};
    const hash::Fingerprint want =
        hash::HashTensorBytes(hash::DtypeCode::kUInt8, shape, data.data(), size)
            .value();
    const hash::Fingerprint got =
        hash::CombineLeafHashes(hash::DtypeCode::kUInt8, shape, size,
                                EmulateLeafHashes(data.data(), size, {7, 128}))
            .value();
    EXPECT_EQ(got, want) << size << " bytes";
  }
}

}  // namespace
}  // namespace lockstep::kernels::cuda
