// The device hasher's per-leaf body, run on emulated grids on the host,
// against the libxxhash-based host fingerprint.
#include "kernels/cuda/leaf_hash.h"

#include <cstdint>
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
