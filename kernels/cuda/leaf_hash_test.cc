// The device hasher's per-leaf body, run on emulated grids on the host,
// against the libxxhash-based host fingerprint.
#include "kernels/cuda/leaf_hash.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/cuda/plan.h"
#include "kernels/cuda/warp.h"
#include "kernels/hash/fingerprint.h"
#include "kernels/hash/stats_portable.h"
#include "kernels/hash/xxh3_portable.h"

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

// The emulated warp's exchange is a simultaneous one: every lane combines
// with its partner's value from before the call, as __shfl_xor_sync does.
TEST(EmulatedWarpTest, XorCombineUsesValuesFromBeforeTheCall) {
  struct Lane {
    uint64_t v;
  };
  EmulatedWarp<Lane> w;
  w.Each([](int lane, Lane& s) { s.v = uint64_t{1} << lane; });
  w.XorCombine(
      1, [](Lane& s) -> uint64_t& { return s.v; },
      [](uint64_t, uint64_t theirs) { return theirs; });
  for (int lane = 0; lane < 32; ++lane) {
    EXPECT_EQ(w.state[lane].v, uint64_t{1} << (lane ^ 1)) << lane;
  }
  // A butterfly of sums gives every lane the total.
  for (int m = 1; m < 32; m *= 2) {
    w.XorCombine(
        m, [](Lane& s) -> uint64_t& { return s.v; },
        [](uint64_t mine, uint64_t theirs) { return mine + theirs; });
  }
  for (int lane = 0; lane < 32; ++lane) {
    EXPECT_EQ(w.state[lane].v, 0xffffffffULL) << lane;
  }
}

// Sizes around every boundary of the warp body: XXH3's short paths (<= 240
// bytes, one lane), the 1 KiB block, the 512 bytes a warp loads at once,
// the 64 KiB leaf, and a multi-leaf tensor with a short last leaf. The
// float32 sizes end with 1, 2 or 3 floats in a lane of either half of the
// warp (the statistics pair lane L with lane L + 16): 244 (lane 15, 1),
// 264 (lane 16, 2), 764 (lane 15, 3), 2308 (lane 16, 1), 64 KiB - 4 (lane
// 31, 3), 1 MiB + 12 (lane 0, 3).
constexpr uint64_t kWarpSizes[] = {0,
                                   1,
                                   3,
                                   4,
                                   240,
                                   241,
                                   244,
                                   264,
                                   764,
                                   1023,
                                   1024,
                                   1025,
                                   2048,
                                   2308,
                                   hash::kLeafBytes - 4,
                                   hash::kLeafBytes,
                                   hash::kLeafBytes + 4,
                                   (uint64_t{1} << 20) + 12};

// Launch configurations: 1, 2 and 8 warps per block, grids smaller than
// the leaf count (1 block), larger (40 blocks) and automatic.
constexpr LaunchConfig kWarpConfigs[] = {{1, 32}, {40, 32}, {1, 64},
                                         {0, 64}, {1, 256}, {40, 256}};

// Random bytes; where the size allows float32, random floats with NaN
// (quiet, signalling, negative), +-Inf, -0, +0, subnormals and the largest
// finite values sprinkled in.
std::vector<uint8_t> WarpTestBytes(uint64_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(size);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  if (size % 4 != 0) return bytes;
  const uint32_t specials[] = {0x7fc00000U, 0x7f800001U, 0xffc00123U,
                               0x7f800000U, 0xff800000U, 0x80000000U,
                               0x00000000U, 0x00000001U, 0x807fffffU,
                               0x7f7fffffU, 0xff7fffffU, 0x00800000U};
  std::uniform_real_distribution<float> dist(-1e4f, 1e4f);
  for (uint64_t i = 0; i < size / 4; ++i) {
    const uint32_t pick = rng() % 16;
    uint32_t bits;
    if (pick < 12 && rng() % 8 == 0) {
      bits = specials[pick];
    } else {
      const float f = dist(rng);
      std::memcpy(&bits, &f, 4);
    }
    std::memcpy(bytes.data() + 4 * i, &bits, 4);
  }
  return bytes;
}

std::string Label(uint64_t size, const LaunchConfig& config) {
  return absl::StrFormat("%d bytes, %d blocks x %d threads", size,
                         config.blocks, config.threads_per_block);
}

TEST(LeafHashWarpTest, LeafHashesEqualOneThreadBodyAndXxh3) {
  for (uint64_t size : kWarpSizes) {
    const std::vector<uint8_t> bytes = WarpTestBytes(size, 100 + size % 97);
    const std::vector<uint64_t> want =
        EmulateLeafHashes(bytes.data(), size, {0, 256});
    for (uint64_t l = 0; l < want.size(); ++l) {
      const uint64_t begin = l * hash::kLeafBytes;
      const uint64_t len =
          size - begin < hash::kLeafBytes ? size - begin : hash::kLeafBytes;
      ASSERT_EQ(want[l], hash::portable::Xxh3Hash64(bytes.data() + begin, len));
    }
    for (const int blocks : {kLeafBlocksPerLoad, kFewLeavesBlocksPerLoad}) {
      for (const LaunchConfig& config : kWarpConfigs) {
        SCOPED_TRACE(Label(size, config) +
                     absl::StrFormat(", %d blocks per load", blocks));
        const absl::StatusOr<LeafHashesAndStats> got =
            EmulateLeafHashesWarp(bytes.data(), size, false, config, blocks);
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_EQ(got->leaf_hashes, want);
        EXPECT_TRUE(got->stats.empty());
      }
    }
  }
}

TEST(LeafHashWarpTest, LeafStatisticsEqualReferenceBits) {
  for (uint64_t size : kWarpSizes) {
    if (size % 4 != 0) continue;
    const std::vector<uint8_t> bytes = WarpTestBytes(size, 200 + size % 89);
    const LeafHashesAndStats want =
        EmulateLeafHashesAndStats(bytes.data(), size, {0, 256});
    for (const int blocks : {kLeafBlocksPerLoad, kFewLeavesBlocksPerLoad})
      for (const LaunchConfig& config : kWarpConfigs) {
        SCOPED_TRACE(Label(size, config) +
                     absl::StrFormat(", %d blocks per load", blocks));
        const absl::StatusOr<LeafHashesAndStats> got =
            EmulateLeafHashesWarp(bytes.data(), size, true, config, blocks);
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_EQ(got->leaf_hashes, want.leaf_hashes);
        ASSERT_EQ(got->stats.size(), want.stats.size());
        for (size_t l = 0; l < want.stats.size(); ++l) {
          EXPECT_EQ(Bits(got->stats[l].sum), Bits(want.stats[l].sum)) << l;
          EXPECT_EQ(Bits(got->stats[l].sum_sq), Bits(want.stats[l].sum_sq))
              << l;
          EXPECT_EQ(got->stats[l].max_abs_bits, want.stats[l].max_abs_bits)
              << l;
          EXPECT_EQ(got->stats[l].nan_count, want.stats[l].nan_count) << l;
          EXPECT_EQ(got->stats[l].inf_count, want.stats[l].inf_count) << l;
        }
      }
  }
}

TEST(LeafHashWarpTest, WholeFingerprintEqualsHost) {
  for (uint64_t size : kWarpSizes) {
    const std::vector<uint8_t> bytes = WarpTestBytes(size, 300 + size % 83);
    const bool f32 = size % 4 == 0;
    const hash::DtypeCode dtype =
        f32 ? hash::DtypeCode::kFloat32 : hash::DtypeCode::kUInt8;
    const std::vector<int64_t> shape = {
        static_cast<int64_t>(f32 ? size / 4 : size)};
    const hash::Fingerprint want_hash =
        hash::HashTensorBytes(dtype, shape, bytes.data(), size).value();
    for (const LaunchConfig& config : kWarpConfigs) {
      SCOPED_TRACE(Label(size, config));
      for (LeafBody body :
           {LeafBody::kWarp, LeafBody::kBlock, LeafBody::kOneThread}) {
        const absl::StatusOr<hash::FingerprintAndStatsResult> hash_only =
            EmulateDeviceFingerprint(dtype, shape, bytes.data(), size, false,
                                     config, body);
        ASSERT_TRUE(hash_only.ok()) << hash_only.status();
        EXPECT_EQ(hash_only->fingerprint, want_hash);
        if (!f32) continue;
        const hash::FingerprintAndStatsResult want =
            hash::FingerprintAndStats(dtype, shape, bytes.data(), size).value();
        const absl::StatusOr<hash::FingerprintAndStatsResult> got =
            EmulateDeviceFingerprint(dtype, shape, bytes.data(), size, true,
                                     config, body);
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_EQ(got->fingerprint, want.fingerprint);
        EXPECT_EQ(Bits(got->stats.sum), Bits(want.stats.sum));
        EXPECT_EQ(Bits(got->stats.l2), Bits(want.stats.l2));
        EXPECT_EQ(Bits(got->stats.max_abs), Bits(want.stats.max_abs));
        EXPECT_EQ(got->stats.nan_count, want.stats.nan_count);
        EXPECT_EQ(got->stats.inf_count, want.stats.inf_count);
      }
    }
  }
}

TEST(LeafHashWarpTest, CombinationOfManyLeaves) {
  // 40 leaves: header || leaf hashes is 320 bytes and more, so the warp
  // combination takes XXH3-128's large-input path (the tests above reach
  // its short paths).
  const uint64_t size = 40 * hash::kLeafBytes + 8;
  const std::vector<uint8_t> bytes = WarpTestBytes(size, 77);
  const std::vector<int64_t> shape = {2, static_cast<int64_t>(size / 8)};
  const hash::FingerprintAndStatsResult want =
      hash::FingerprintAndStats(hash::DtypeCode::kFloat32, shape, bytes.data(),
                                size)
          .value();
  for (const LaunchConfig& config :
       {LaunchConfig{1, 32}, LaunchConfig{3, 64}, LaunchConfig{0, 256}}) {
    SCOPED_TRACE(Label(size, config));
    const hash::FingerprintAndStatsResult got =
        EmulateDeviceFingerprint(hash::DtypeCode::kFloat32, shape, bytes.data(),
                                 size, true, config, LeafBody::kWarp)
            .value();
    EXPECT_EQ(got.fingerprint, want.fingerprint);
    EXPECT_EQ(Bits(got.stats.sum), Bits(want.stats.sum));
    EXPECT_EQ(Bits(got.stats.l2), Bits(want.stats.l2));
    EXPECT_EQ(Bits(got.stats.max_abs), Bits(want.stats.max_abs));
    EXPECT_EQ(got.stats.nan_count, want.stats.nan_count);
    EXPECT_EQ(got.stats.inf_count, want.stats.inf_count);
  }
}

// Leaf counts around the combination's own boundaries: its statistics
// warp takes 64 partials per batch (2 per lane) and alternates two
// buffers, its hash warp loads 2 KiB of header || leaf hashes at a time.
constexpr uint64_t kCombineLeafCounts[] = {
    1, 2, 31, 32, 33, 63, 64, 65, 127, 128, 129, 130, 191, 192, 193, 300, 4096};

// Statistics partials whose float64 sums depend on the order of the
// additions: full 53-bit mantissas, magnitudes from 2^-12 to 2^12, both
// signs, -0.0, and a few leaves with NaN / Inf counts and large max |x|
// bits.
std::vector<hash::portable::StatsPartial> OrderSensitivePartials(
    uint64_t leaves, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<hash::portable::StatsPartial> p(leaves);
  for (hash::portable::StatsPartial& b : p) {
    const int e = static_cast<int>(rng() % 25) - 12;
    const double m = 1.0 + std::ldexp(static_cast<double>(rng() >> 12), -52);
    b.sum = std::ldexp(rng() % 2 == 0 ? m : -m, e);
    b.sum_sq = std::ldexp(m * m, 2 * (e / 2) + 3);
    if (rng() % 17 == 0) b.sum = -0.0;
    b.max_abs_bits = static_cast<uint32_t>(rng() % 0x7f800000U);
    b.nan_count = rng() % 5 == 0 ? static_cast<int64_t>(rng() % 1000) : 0;
    b.inf_count = rng() % 7 == 0 ? static_cast<int64_t>(rng() % 1000) : 0;
  }
  return p;
}

// The warp combination alone, on leaf hashes and partials made up for it:
// the fingerprint = hash::CombineLeafHashes, the totals = the one-thread
// combination's sequential sums, as bit patterns. The lanes' state starts
// as garbage, so everything the body reads it has written.
TEST(LeafHashWarpTest, CombinationBoundariesEqualOneThreadBits) {
  // Counts of 64 leaves and more whose sum, added back to front, has other
  // bits: the data would catch a change of order.
  int order_sensitive = 0;
  for (uint64_t leaves : kCombineLeafCounts) {
    SCOPED_TRACE(absl::StrFormat("%d leaves", leaves));
    std::mt19937_64 rng(leaves);
    std::vector<uint64_t> leaf_hashes(leaves);
    for (uint64_t& h : leaf_hashes) h = rng();
    const std::vector<hash::portable::StatsPartial> partials =
        OrderSensitivePartials(leaves, static_cast<uint32_t>(leaves) + 1);
    const uint64_t size = leaves * hash::kLeafBytes;
    const std::vector<int64_t> shape = {static_cast<int64_t>(size)};
    const std::vector<uint8_t> header =
        hash::EncodeTensorHeader(hash::DtypeCode::kUInt8, shape).value();
    std::vector<unsigned char> input(header.size() + 8 * leaves);
    std::copy(header.begin(), header.end(), input.begin());
    for (uint64_t l = 0; l < leaves; ++l) {
      for (int b = 0; b < 8; ++b) {
        input[header.size() + 8 * l + b] =
            static_cast<unsigned char>(leaf_hashes[l] >> (8 * b));
      }
    }
    std::vector<unsigned char> scratch = input;
    hash::portable::Hash128 want_hash;
    hash::portable::StatsPartial want;
    CombineLeavesThread(scratch.data(), header.size(), leaf_hashes.data(),
                        leaves, partials.data(), &want_hash, &want);
    const hash::Fingerprint host =
        hash::CombineLeafHashes(hash::DtypeCode::kUInt8, shape, size,
                                leaf_hashes)
            .value();
    ASSERT_EQ(want_hash.hi, host.hi);
    ASSERT_EQ(want_hash.lo, host.lo);
    double reversed = 0.0;
    for (uint64_t l = leaves; l-- > 0;) reversed = reversed + partials[l].sum;
    if (leaves >= 64 && Bits(reversed) != Bits(want.sum)) ++order_sensitive;
    auto warp = std::make_unique<EmulatedWarp<WarpHashLane>>();
    std::memset(static_cast<void*>(warp->state), 0xa5, sizeof(warp->state));
    // The header's room as the device's scratch may leave it: the warp
    // writes the header there from its argument.
    std::vector<unsigned char> device_input = input;
    std::fill(device_input.begin(), device_input.begin() + header.size(), 0xa5);
    const TensorHeaderArg header_arg =
        DeviceHeaderArg(hash::DtypeCode::kUInt8, shape).value();
    ASSERT_EQ(header_arg.len, header.size());
    hash::portable::Hash128 got_hash;
    hash::portable::StatsPartial got;
    CombineLeavesWarp(*warp, header_arg, device_input.data(),
                      device_input.size(), leaves, partials.data(), &got_hash,
                      &got);
    EXPECT_EQ(device_input, input);
    EXPECT_EQ(got_hash.hi, host.hi);
    EXPECT_EQ(got_hash.lo, host.lo);
    EXPECT_EQ(Bits(got.sum), Bits(want.sum));
    EXPECT_EQ(Bits(got.sum_sq), Bits(want.sum_sq));
    EXPECT_EQ(got.max_abs_bits, want.max_abs_bits);
    EXPECT_EQ(got.nan_count, want.nan_count);
    EXPECT_EQ(got.inf_count, want.inf_count);
    // The statistics part alone (the device runs it on its own warp).
    std::memset(static_cast<void*>(warp->state), 0x5a, sizeof(warp->state));
    hash::portable::StatsPartial alone;
    PartialStage stage;
    SumLeafStatsWarp(*warp, partials.data(), leaves, &stage, &alone);
    EXPECT_EQ(Bits(alone.sum), Bits(want.sum));
    EXPECT_EQ(Bits(alone.sum_sq), Bits(want.sum_sq));
  }
  EXPECT_GE(order_sensitive, 8);  // of the 10 counts >= 64
}

// The whole emulated device fingerprint at leaf counts around the
// combination's boundaries = FingerprintAndStats, as bit patterns.
// The header as the combination's argument: every rank up to the limit
// (the longest header fills the argument), written by the warp's lanes
// over garbage, gives the host's fingerprint of the tensor; a rank over
// the limit is refused as the host refuses it.
TEST(LeafHashWarpTest, HeaderArgumentUpToTheLargestRank) {
  EXPECT_EQ(kMaxHeaderBytes, 3 + 8 * hash::kMaxRank);
  // Ranks 28 and 29: header || leaf hash is 235 and 243 bytes, either
  // side of XXH3's short inputs (240).
  for (size_t rank : {size_t{0}, size_t{1}, size_t{4}, size_t{28}, size_t{29},
                      hash::kMaxRank}) {
    SCOPED_TRACE(absl::StrFormat("rank %d", rank));
    std::vector<int64_t> shape(rank, 1);
    if (rank > 0) shape[0] = 3;
    const size_t size = rank > 0 ? 12 : 4;  // float32 elements
    const std::vector<float> data = {1.5f, -2.0f, 0.25f};
    const hash::Fingerprint host =
        hash::HashTensorBytes(hash::DtypeCode::kFloat32, shape, data.data(),
                              size)
            .value();
    const TensorHeaderArg arg =
        DeviceHeaderArg(hash::DtypeCode::kFloat32, shape).value();
    ASSERT_EQ(arg.len, 3 + 8 * rank);
    const std::vector<uint8_t> header =
        hash::EncodeTensorHeader(hash::DtypeCode::kFloat32, shape).value();
    EXPECT_TRUE(std::equal(header.begin(), header.end(), arg.bytes));
    // The block form combines a one-leaf tensor in its leaf kernel up to
    // rank 28, and launches the combination above.
    EXPECT_EQ(CombinesInLeafBlock(1, arg.len), rank <= 28);
    for (const LeafBody body : {LeafBody::kWarp, LeafBody::kBlock}) {
      const hash::FingerprintAndStatsResult device =
          EmulateDeviceFingerprint(hash::DtypeCode::kFloat32, shape,
                                   data.data(), size, /*with_stats=*/true,
                                   LaunchConfig{0, 64}, body)
              .value();
      EXPECT_EQ(device.fingerprint.hi, host.hi);
      EXPECT_EQ(device.fingerprint.lo, host.lo);
      EXPECT_EQ(device.stats.sum, rank > 0 ? 1.5 - 2.0 + 0.25 : 1.5);
    }
  }
  const std::vector<int64_t> too_many(hash::kMaxRank + 1, 1);
  const absl::StatusOr<TensorHeaderArg> refused =
      DeviceHeaderArg(hash::DtypeCode::kFloat32, too_many);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("rank"), std::string::npos)
      << refused.status();
}

TEST(LeafHashWarpTest, WholeFingerprintAtCombinationBoundaries) {
  for (uint64_t leaves : {1, 31, 32, 33, 65, 300}) {
    // A short last leaf (4 floats past the last whole leaf) but for 1 leaf.
    const uint64_t size =
        leaves == 1 ? hash::kLeafBytes : (leaves - 1) * hash::kLeafBytes + 16;
    SCOPED_TRACE(absl::StrFormat("%d leaves, %d bytes", leaves, size));
    const std::vector<uint8_t> bytes = WarpTestBytes(size, 400 + leaves);
    const std::vector<int64_t> shape = {static_cast<int64_t>(size / 4)};
    const hash::FingerprintAndStatsResult want =
        hash::FingerprintAndStats(hash::DtypeCode::kFloat32, shape,
                                  bytes.data(), size)
            .value();
    for (const LeafBody body : {LeafBody::kWarp, LeafBody::kBlock}) {
      SCOPED_TRACE(body == LeafBody::kWarp ? "warp per leaf"
                                           : "block per leaf");
      const absl::StatusOr<hash::FingerprintAndStatsResult> got =
          EmulateDeviceFingerprint(hash::DtypeCode::kFloat32, shape,
                                   bytes.data(), size, true, {0, 256}, body);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->fingerprint, want.fingerprint);
      EXPECT_EQ(Bits(got->stats.sum), Bits(want.stats.sum));
      EXPECT_EQ(Bits(got->stats.l2), Bits(want.stats.l2));
      EXPECT_EQ(Bits(got->stats.max_abs), Bits(want.stats.max_abs));
      EXPECT_EQ(got->stats.nan_count, want.stats.nan_count);
      EXPECT_EQ(got->stats.inf_count, want.stats.inf_count);
    }
  }
}

// The block form's grids: one block per leaf (automatic), one block for
// every leaf, and grids that leave blocks 1 .. 2 leaves each or none.
constexpr LaunchConfig kBlockConfigs[] = {
    {0, 256}, {1, 256}, {3, 32}, {40, 64}};

TEST(LeafHashBlockTest, LeafHashesAndStatisticsEqualReferenceBits) {
  for (uint64_t size : kWarpSizes) {
    const std::vector<uint8_t> bytes = WarpTestBytes(size, 500 + size % 79);
    const bool f32 = size % 4 == 0;
    const LeafHashesAndStats want =
        f32 ? EmulateLeafHashesAndStats(bytes.data(), size, {0, 256})
            : LeafHashesAndStats{
                  EmulateLeafHashes(bytes.data(), size, {0, 256}), {}};
    for (const LaunchConfig& config : kBlockConfigs) {
      SCOPED_TRACE(Label(size, config));
      const absl::StatusOr<LeafHashesAndStats> hashes =
          EmulateLeafHashesBlock(bytes.data(), size, false, config);
      ASSERT_TRUE(hashes.ok()) << hashes.status();
      EXPECT_EQ(hashes->leaf_hashes, want.leaf_hashes);
      EXPECT_TRUE(hashes->stats.empty());
      if (!f32) continue;
      const absl::StatusOr<LeafHashesAndStats> got =
          EmulateLeafHashesBlock(bytes.data(), size, true, config);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->leaf_hashes, want.leaf_hashes);
      ASSERT_EQ(got->stats.size(), want.stats.size());
      for (size_t l = 0; l < want.stats.size(); ++l) {
        EXPECT_EQ(Bits(got->stats[l].sum), Bits(want.stats[l].sum)) << l;
        EXPECT_EQ(Bits(got->stats[l].sum_sq), Bits(want.stats[l].sum_sq)) << l;
        EXPECT_EQ(got->stats[l].max_abs_bits, want.stats[l].max_abs_bits) << l;
        EXPECT_EQ(got->stats[l].nan_count, want.stats[l].nan_count) << l;
        EXPECT_EQ(got->stats[l].inf_count, want.stats[l].inf_count) << l;
      }
    }
  }
}

// Every length of a leaf's last 1 KiB block, and every float count of the
// statistics' last row: the scramble count, the last block's stripes, the
// last stripe's overlap and the chains that end early.
TEST(LeafHashBlockTest, EveryTailLength) {
  const std::vector<uint8_t> bytes = WarpTestBytes(4 * 1024 + 1024, 77);
  for (uint64_t size = 3 * 1024 - 68; size <= 4 * 1024 + 68; size += 4) {
    SCOPED_TRACE(size);
    const LeafHashesAndStats want =
        EmulateLeafHashesAndStats(bytes.data(), size, {0, 256});
    const absl::StatusOr<LeafHashesAndStats> got =
        EmulateLeafHashesBlock(bytes.data(), size, true, {0, 256});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->leaf_hashes, want.leaf_hashes);
    ASSERT_EQ(got->stats.size(), 1u);
    EXPECT_EQ(Bits(got->stats[0].sum), Bits(want.stats[0].sum));
    EXPECT_EQ(Bits(got->stats[0].sum_sq), Bits(want.stats[0].sum_sq));
    EXPECT_EQ(got->stats[0].max_abs_bits, want.stats[0].max_abs_bits);
    EXPECT_EQ(got->stats[0].nan_count, want.stats[0].nan_count);
    EXPECT_EQ(got->stats[0].inf_count, want.stats[0].inf_count);
  }
}

TEST(LeafHashBlockTest, RefusesWhatTheDeviceWould) {
  const std::vector<uint8_t> bytes = WarpTestBytes(1024, 2);
  for (const LaunchConfig& config :
       {LaunchConfig{1, 1}, LaunchConfig{1, 48}, LaunchConfig{-1, 32}}) {
    EXPECT_EQ(EmulateLeafHashesBlock(bytes.data(), bytes.size(), false, config)
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << Label(1024, config);
    EXPECT_EQ(
        EmulateDeviceFingerprint(hash::DtypeCode::kUInt8, {1024}, bytes.data(),
                                 bytes.size(), false, config, LeafBody::kBlock)
            .status()
            .code(),
        absl::StatusCode::kInvalidArgument)
        << Label(1024, config);
  }
  const absl::Status odd =
      EmulateLeafHashesBlock(bytes.data(), 1022, true, {0, 256}).status();
  EXPECT_EQ(odd.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(odd.message()).find("size = 1022"), std::string::npos)
      << odd;
  EXPECT_EQ(LeafBlockGrid({0, 32}, 17), 17);
  EXPECT_EQ(LeafBlockGrid({5, 32}, 17), 5);
  EXPECT_EQ(LeafBlockGrid({0, 32}, 1u << 20), kMaxAutoBlocks);
}

TEST(LeafHashBlockTest, KernelChoice) {
  // kWarp: never; kBlock: always; kAuto: few leaves on a known device.
  EXPECT_FALSE(UseLeafBlocksFor(DeviceLeafKernel::kWarp, 1, 132));
  EXPECT_TRUE(UseLeafBlocksFor(DeviceLeafKernel::kBlock, 1u << 20, 0));
  EXPECT_FALSE(UseLeafBlocksFor(DeviceLeafKernel::kAuto, 16, 0));
  EXPECT_TRUE(UseLeafBlocksFor(DeviceLeafKernel::kAuto, 8 * 132, 132));
  EXPECT_FALSE(UseLeafBlocksFor(DeviceLeafKernel::kAuto, 8 * 132 + 1, 132));
  for (const DeviceLeafKernel k :
       {DeviceLeafKernel::kWarp, DeviceLeafKernel::kBlock,
        DeviceLeafKernel::kAuto}) {
    const absl::StatusOr<DeviceLeafKernel> parsed =
        ParseDeviceLeafKernel(DeviceLeafKernelName(k));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, k);
  }
  const absl::Status bad = ParseDeviceLeafKernel("blocks").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.message()).find("LOCKSTEP_CUDA_LEAF_KERNEL"),
            std::string::npos)
      << bad;
  const DeviceLeafKernel before = CurrentDeviceLeafKernel();
  SetDeviceLeafKernel(DeviceLeafKernel::kAuto);
  EXPECT_EQ(CurrentDeviceLeafKernel(), DeviceLeafKernel::kAuto);
  SetDeviceLeafKernel(before);
  EXPECT_EQ(CurrentDeviceLeafKernel(), before);
}

// The hash stream's switch: "on" / "off" by name, anything else refused
// naming the variable; Set overrides the environment's choice.
TEST(DeviceHashStreamTest, ParsesAndSets) {
  for (const bool on : {false, true}) {
    const absl::StatusOr<bool> parsed =
        ParseDeviceHashStream(on ? "on" : "off");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, on);
  }
  for (const char* bad : {"1", "ON", "", "yes"}) {
    const absl::Status s = ParseDeviceHashStream(bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(std::string(s.message()).find("LOCKSTEP_CUDA_HASH_STREAM"),
              std::string::npos)
        << s;
  }
  const bool before = CurrentDeviceHashStream();
  SetDeviceHashStream(!before);
  EXPECT_EQ(CurrentDeviceHashStream(), !before);
  SetDeviceHashStream(before);
  EXPECT_EQ(CurrentDeviceHashStream(), before);
}

TEST(LeafHashWarpTest, RefusesWhatTheDeviceWould) {
  const std::vector<uint8_t> bytes = WarpTestBytes(1024, 1);
  for (const LaunchConfig& config :
       {LaunchConfig{1, 1}, LaunchConfig{1, 48}, LaunchConfig{1, 512},
        LaunchConfig{-1, 32}}) {
    EXPECT_EQ(EmulateLeafHashesWarp(bytes.data(), bytes.size(), false, config)
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << Label(1024, config);
    EXPECT_EQ(
        EmulateDeviceFingerprint(hash::DtypeCode::kUInt8, {1024}, bytes.data(),
                                 bytes.size(), false, config, LeafBody::kWarp)
            .status()
            .code(),
        absl::StatusCode::kInvalidArgument)
        << Label(1024, config);
  }
  const absl::Status odd =
      EmulateLeafHashesWarp(bytes.data(), 1023, true, {1, 32}).status();
  EXPECT_EQ(odd.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(odd.message()).find("size = 1023"), std::string::npos)
      << odd;
  const absl::Status blocks =
      EmulateLeafHashesWarp(bytes.data(), 1024, false, {1, 32}, 3).status();
  EXPECT_EQ(blocks.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(blocks.message()).find("blocks_per_load = 3"),
            std::string::npos)
      << blocks;
  // The variant for few leaves: on a known device only, up to
  // kFewLeavesPerSm leaves per multiprocessor.
  EXPECT_EQ(LeafBlocksPerLoadFor(16, 0), kLeafBlocksPerLoad);
  EXPECT_EQ(LeafBlocksPerLoadFor(16, 132), kFewLeavesBlocksPerLoad);
  EXPECT_EQ(LeafBlocksPerLoadFor(8 * 132, 132), kFewLeavesBlocksPerLoad);
  EXPECT_EQ(LeafBlocksPerLoadFor(8 * 132 + 1, 132), kLeafBlocksPerLoad);
}

}  // namespace
}  // namespace lockstep::kernels::cuda
