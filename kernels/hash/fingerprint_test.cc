#include "kernels/hash/fingerprint.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/hash/stats_portable.h"

namespace lockstep::hash {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

constexpr HashIsa kAllIsas[] = {HashIsa::kAuto, HashIsa::kBaseline,
                                HashIsa::kAvx2, HashIsa::kAvx512,
                                HashIsa::kAvx512Stream};

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng() >> 56);
  return v;
}

uint64_t Bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof(u));
  return u;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float FloatFromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// ---- A from-scratch implementation of SPEC.md, written from the text. ----

Fingerprint SpecTreeHash(uint8_t dtype_code, const std::vector<int64_t>& shape,
                         const uint8_t* bytes, size_t size) {
  std::vector<uint8_t> in = {0xF1, dtype_code,
                             static_cast<uint8_t>(shape.size())};
  auto put_u64 = [&in](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      in.push_back(static_cast<uint8_t>(v >> (8 * i)));
    }
  };
  for (int64_t d : shape) put_u64(static_cast<uint64_t>(d));
  const size_t leaf = 65536;
  for (size_t i = 0; i * leaf < size; ++i) {
    const size_t begin = i * leaf;
    const size_t end = std::min(size, begin + leaf);
    put_u64(XXH3_64bits(bytes + begin, end - begin));
  }
  const XXH128_hash_t h = XXH3_128bits(in.data(), in.size());
  return Fingerprint{h.high64, h.low64};
}

TensorStats SpecStats(const std::vector<float>& x) {
  const size_t block = 16384;
  double total_sum = 0.0;
  double total_sq = 0.0;
  TensorStats s;
  for (size_t b = 0; b * block < x.size(); ++b) {
    std::vector<double> sum(64, 0.0);
    std::vector<double> sq(64, 0.0);
    for (size_t k = 0; k < block && b * block + k < x.size(); ++k) {
      const float v = x[b * block + k];
      if (std::isnan(v)) {
        ++s.nan_count;
      } else if (std::isinf(v)) {
        ++s.inf_count;
      } else {
        sum[k % 64] += static_cast<double>(v);
        sq[k % 64] += static_cast<double>(v) * static_cast<double>(v);
        if (std::fabs(v) > s.max_abs) s.max_abs = std::fabs(v);
      }
    }
    for (size_t w = 32; w >= 1; w /= 2) {
      for (size_t j = 0; j < w; ++j) {
        sum[j] += sum[j + w];
        sq[j] += sq[j + w];
      }
    }
    total_sum += sum[0];
    total_sq += sq[0];
  }
  s.sum = total_sum;
  s.l2 = std::sqrt(total_sq);
  return s;
}

std::string StatsDiff(const TensorStats& want, const TensorStats& got) {
  if (Bits(want.sum) != Bits(got.sum)) {
    return absl::StrFormat("sum: want %a (%016x) got %a (%016x)", want.sum,
                           Bits(want.sum), got.sum, Bits(got.sum));
  }
  if (Bits(want.l2) != Bits(got.l2)) {
    return absl::StrFormat("l2: want %a (%016x) got %a (%016x)", want.l2,
                           Bits(want.l2), got.l2, Bits(got.l2));
  }
  if (Bits(want.max_abs) != Bits(got.max_abs)) {
    return absl::StrFormat("max_abs: want %08x got %08x", Bits(want.max_abs),
                           Bits(got.max_abs));
  }
  if (want.nan_count != got.nan_count || want.inf_count != got.inf_count) {
    return absl::StrFormat("counts: want nan %d inf %d, got nan %d inf %d",
                           want.nan_count, want.inf_count, got.nan_count,
                           got.inf_count);
  }
  return "";
}

std::vector<float> RandomFloats(size_t n, uint64_t seed, bool specials) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& f : v) {
    f = normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
    if (specials) {
      switch (rng() % 64) {
        case 0:
          f = std::numeric_limits<float>::quiet_NaN();
          break;
        case 1:
          f = (rng() & 1) ? std::numeric_limits<float>::infinity()
                          : -std::numeric_limits<float>::infinity();
          break;
        case 2:
          f = -0.0f;
          break;
        case 3:
          f = FloatFromBits(
              static_cast<uint32_t>(rng() % 0x800000));  // subnormal
          break;
        case 4:  // NaN with a payload and either sign
          f = FloatFromBits(0x7f800001U |
                            static_cast<uint32_t>(rng() % 0x7fffff) |
                            ((rng() & 1) ? 0x80000000U : 0U));
          break;
        default:
          break;
      }
    }
  }
  return v;
}

// ---- Fingerprint value type. ----

TEST(FingerprintTest, HexRoundTripAndForm) {
  const Fingerprint f{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  EXPECT_EQ(f.ToHex(), "0123456789abcdeffedcba9876543210");
  absl::StatusOr<Fingerprint> parsed =
      Fingerprint::FromHex("0123456789ABCDEFfedcba9876543210");
  ASSERT_THAT(parsed, IsOk());
  EXPECT_EQ(*parsed, f);
  EXPECT_EQ((Fingerprint{0, 1}).ToHex(), "00000000000000000000000000000001");
}

TEST(FingerprintTest, FromHexRejectsBadInput) {
  EXPECT_THAT(
      Fingerprint::FromHex("0123"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("exactly 32")));
  EXPECT_THAT(
      Fingerprint::FromHex("0123456789abcdefXedcba9876543210"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("character 16")));
}

TEST(FingerprintTest, LittleEndianBytes) {
  const Fingerprint f{0x1112131415161718ULL, 0x0102030405060708ULL};
  uint8_t b[16];
  f.ToLittleEndianBytes(b);
  const uint8_t want[16] = {8,    7,    6,    5,    4,    3,    2,    1,
                            0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(b[i], want[i]) << "byte " << i;
  EXPECT_EQ(Fingerprint::FromLittleEndianBytes(b), f);
}

// ---- The tree hash. ----

// Pins the definition: if any of these change, every stored fingerprint and
// certificate changes too. Update only together with SPEC.md's version.
TEST(HashTensorBytesTest, GoldenValues) {
  const float six[6] = {0, 1, 2, 3, 4, 5};
  std::vector<uint8_t> ramp(kLeafBytes + 1);
  for (size_t i = 0; i < ramp.size(); ++i) {
    ramp[i] = static_cast<uint8_t>(i % 251);
  }
  struct Golden {
    DtypeCode dtype;
    std::vector<int64_t> shape;
    const void* bytes;
    size_t size;
    const char* hex;
  };
  const Golden cases[] = {
      {DtypeCode::kFloat32,
       {0},
       nullptr,
       0,
       "b57e691690fa31cee7cd8ee5c081cf1f"},
      {DtypeCode::kFloat32,
       {2, 3},
       six,
       sizeof(six),
       "152a7a737973e79ae21578e70e05f8cd"},
      {DtypeCode::kUInt8,
       {static_cast<int64_t>(ramp.size())},
       ramp.data(),
       ramp.size(),
       "85759ecc6bcf7b7ad578777fd0d0e3f3"},
  };
  for (const Golden& g : cases) {
    for (HashIsa isa : kAllIsas) {
      if (!IsaAvailable(isa)) continue;
      absl::StatusOr<Fingerprint> fp =
          HashTensorBytes(g.dtype, g.shape, g.bytes, g.size, isa);
      ASSERT_THAT(fp, IsOk());
      EXPECT_EQ(fp->ToHex(), g.hex) << IsaName(isa) << " size " << g.size;
    }
  }
}

TEST(HashTensorBytesTest, EqualsSpecReimplementation) {
  // uint8 so every byte count is reachable: 0 and 1 element, one leaf +- 1,
  // several leaves, and random sizes.
  std::vector<size_t> sizes = {0,
                               1,
                               2,
                               kLeafBytes - 1,
                               kLeafBytes,
                               kLeafBytes + 1,
                               2 * kLeafBytes - 1,
                               2 * kLeafBytes,
                               2 * kLeafBytes + 1,
                               5 * kLeafBytes + 333};
  std::mt19937_64 rng(11);
  for (int i = 0; i < 12; ++i) sizes.push_back(rng() % (4 * kLeafBytes));
  for (size_t size : sizes) {
    const std::vector<uint8_t> bytes = RandomBytes(size, size);
    const Fingerprint want =
        SpecTreeHash(static_cast<uint8_t>(DtypeCode::kUInt8),
                     {static_cast<int64_t>(size)}, bytes.data(), size);
    for (HashIsa isa : kAllIsas) {
      if (!IsaAvailable(isa)) continue;
      absl::StatusOr<Fingerprint> got =
          HashTensorBytes(DtypeCode::kUInt8, {static_cast<int64_t>(size)},
                          bytes.data(), size, isa);
      ASSERT_THAT(got, IsOk());
      EXPECT_EQ(got->ToHex(), want.ToHex())
          << "size " << size << " isa " << IsaName(isa);
    }
  }
  // A float32 tensor with rank 3 and a scalar (rank 0, one element).
  const std::vector<uint8_t> f = RandomBytes(4 * 3 * 5 * 7, 99);
  EXPECT_EQ(HashTensorBytes(DtypeCode::kFloat32, {3, 5, 7}, f.data(), f.size())
                ->ToHex(),
            SpecTreeHash(1, {3, 5, 7}, f.data(), f.size()).ToHex());
  EXPECT_EQ(HashTensorBytes(DtypeCode::kFloat32, {}, f.data(), 4)->ToHex(),
            SpecTreeHash(1, {}, f.data(), 4).ToHex());
}

TEST(HashTensorBytesTest, EverySingleBitFlipChangesTheHash) {
  const size_t size = 3 * kLeafBytes + 100;
  std::vector<uint8_t> bytes = RandomBytes(size, 5);
  const std::vector<int64_t> shape = {static_cast<int64_t>(size)};
  const Fingerprint base =
      *HashTensorBytes(DtypeCode::kUInt8, shape, bytes.data(), size);
  std::vector<size_t> positions = {0,
                                   1,
                                   kLeafBytes - 1,
                                   kLeafBytes,
                                   kLeafBytes + 1,
                                   3 * kLeafBytes,
                                   size - 2,
                                   size - 1};
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200; ++i) positions.push_back(rng() % size);
  std::set<std::string> seen = {base.ToHex()};
  for (size_t pos : positions) {
    for (int bit : {0, 7, static_cast<int>(rng() % 8)}) {
      bytes[pos] ^= static_cast<uint8_t>(1u << bit);
      for (HashIsa isa : {HashIsa::kBaseline, HashIsa::kAuto}) {
        const Fingerprint flipped =
            *HashTensorBytes(DtypeCode::kUInt8, shape, bytes.data(), size, isa);
        EXPECT_NE(flipped, base) << "byte " << pos << " bit " << bit;
        seen.insert(flipped.ToHex());
      }
      bytes[pos] ^= static_cast<uint8_t>(1u << bit);
    }
  }
  // Flips back restore the original.
  EXPECT_EQ(*HashTensorBytes(DtypeCode::kUInt8, shape, bytes.data(), size),
            base);
  EXPECT_GT(seen.size(), 200u);
}

TEST(HashTensorBytesTest, ShapeAndDtypeAreHashed) {
  const std::vector<uint8_t> bytes = RandomBytes(24, 1);
  struct Variant {
    DtypeCode dtype;
    std::vector<int64_t> shape;
  };
  const Variant variants[] = {
      {DtypeCode::kFloat32, {2, 3}}, {DtypeCode::kFloat32, {3, 2}},
      {DtypeCode::kFloat32, {6}},    {DtypeCode::kFloat32, {1, 6}},
      {DtypeCode::kFloat32, {6, 1}}, {DtypeCode::kInt32, {6}},
      {DtypeCode::kUInt32, {6}},     {DtypeCode::kUInt8, {24}},
      {DtypeCode::kInt8, {24}},      {DtypeCode::kBool, {24}},
      {DtypeCode::kFloat16, {12}},   {DtypeCode::kBFloat16, {12}},
      {DtypeCode::kInt16, {12}},     {DtypeCode::kUInt16, {12}},
      {DtypeCode::kFloat64, {3}},    {DtypeCode::kInt64, {3}},
      {DtypeCode::kUInt64, {3}},     {DtypeCode::kInt64, {1, 3}},
  };
  std::set<std::string> seen;
  for (const Variant& v : variants) {
    absl::StatusOr<Fingerprint> fp =
        HashTensorBytes(v.dtype, v.shape, bytes.data(), bytes.size());
    ASSERT_THAT(fp, IsOk());
    EXPECT_TRUE(seen.insert(fp->ToHex()).second)
        << DtypeName(v.dtype) << " collides";
  }
}

TEST(HashTensorBytesTest, ZeroSizedShapesDiffer) {
  std::set<std::string> seen;
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{0}, {0, 4}, {4, 0}, {0, 0}}) {
    absl::StatusOr<Fingerprint> fp =
        HashTensorBytes(DtypeCode::kFloat32, shape, nullptr, 0);
    ASSERT_THAT(fp, IsOk());
    EXPECT_TRUE(seen.insert(fp->ToHex()).second);
  }
}

TEST(HashTensorBytesTest, RejectsBadArguments) {
  const float x[6] = {};
  EXPECT_THAT(HashTensorBytes(static_cast<DtypeCode>(99), {6}, x, 24),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dtype: unknown code 99")));
  EXPECT_THAT(HashTensorBytes(static_cast<DtypeCode>(0), {6}, x, 24),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dtype")));
  EXPECT_THAT(HashTensorBytes(DtypeCode::kFloat32, {2, -3}, x, 24),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shape[1]: dimension -3 is negative")));
  EXPECT_THAT(HashTensorBytes(DtypeCode::kFloat32, {2, 3}, x, 20),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("size: 20 bytes given, but shape [2,3] of "
                                 "float32 needs 24")));
  EXPECT_THAT(
      HashTensorBytes(DtypeCode::kFloat32, {2, 3}, nullptr, 24),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bytes: null")));
  const std::vector<int64_t> huge = {int64_t{1} << 40, int64_t{1} << 40};
  EXPECT_THAT(HashTensorBytes(DtypeCode::kFloat32, huge, x, 24),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("exceeds the addressable size")));
  // 4 * 2^62 * 4 bytes is 0 modulo 2^64: an overflow that wraps to the size
  // given must still be refused, by both functions.
  const std::vector<int64_t> wraps = {int64_t{1} << 62, 4};
  EXPECT_THAT(HashTensorBytes(DtypeCode::kFloat32, wraps, nullptr, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("exceeds the addressable size")));
  EXPECT_THAT(FingerprintAndStats(DtypeCode::kFloat32, wraps, nullptr, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("exceeds the addressable size")));
  // A zero dimension makes the tensor empty, however large the others.
  EXPECT_THAT(
      HashTensorBytes(DtypeCode::kFloat32,
                      {int64_t{1} << 62, 0, int64_t{1} << 62}, nullptr, 0),
      IsOk());
  EXPECT_THAT(HashTensorBytes(DtypeCode::kFloat32, {0, 2}, x, 24),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("size: 24 bytes given")));
  const std::vector<int64_t> rank65(65, 1);
  EXPECT_THAT(HashTensorBytes(DtypeCode::kFloat32, rank65, x, 4),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 65 exceeds the limit of 64")));
  const std::vector<int64_t> rank64(64, 1);
  EXPECT_THAT(HashTensorBytes(DtypeCode::kFloat32, rank64, x, 4), IsOk());
}

TEST(HashTensorBytesTest, SelectsTheWidestAvailableIsa) {
  EXPECT_EQ(IsaAvailable(HashIsa::kAvx512Stream),
            IsaAvailable(HashIsa::kAvx512));
  if (IsaAvailable(HashIsa::kAvx512)) {
#if defined(__x86_64__)
    // Non-temporal loads on AMD CPUs only.
    EXPECT_EQ(SelectedIsa(), __builtin_cpu_is("amd") ? HashIsa::kAvx512Stream
                                                     : HashIsa::kAvx512);
#endif
  } else if (IsaAvailable(HashIsa::kAvx2)) {
    EXPECT_EQ(SelectedIsa(), HashIsa::kAvx2);
  } else {
    EXPECT_EQ(SelectedIsa(), HashIsa::kBaseline);
  }
}

TEST(HashTensorBytesTest, UnavailableIsaIsAnError) {
  const float x = 1.0f;
  if (!IsaAvailable(HashIsa::kAvx512)) {
    EXPECT_THAT(
        HashTensorBytes(DtypeCode::kFloat32, {1}, &x, 4, HashIsa::kAvx512),
        StatusIs(absl::StatusCode::kFailedPrecondition,
                 HasSubstr("isa: avx512 requested")));
    EXPECT_THAT(HashTensorBytes(DtypeCode::kFloat32, {1}, &x, 4,
                                HashIsa::kAvx512Stream),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("isa: avx512-stream requested")));
  }
  if (IsaAvailable(HashIsa::kAvx2)) GTEST_SKIP() << "this CPU has AVX2";
  EXPECT_EQ(SelectedIsa(), HashIsa::kBaseline);
  EXPECT_THAT(
      HashTensorBytes(DtypeCode::kFloat32, {1}, &x, 4, HashIsa::kAvx2),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("isa: avx2")));
}

TEST(HashTensorBytesTest, VectorPathsAndBaselineAgree) {
  for (HashIsa isa :
       {HashIsa::kAvx2, HashIsa::kAvx512, HashIsa::kAvx512Stream}) {
    if (!IsaAvailable(isa)) continue;
    std::mt19937_64 rng(21);
    for (int i = 0; i < 40; ++i) {
      const size_t size =
          i < 8 ? static_cast<size_t>(i) : rng() % (3 * kLeafBytes);
      const std::vector<uint8_t> bytes = RandomBytes(size, 1000 + i);
      const std::vector<int64_t> shape = {static_cast<int64_t>(size)};
      const Fingerprint a =
          *HashTensorBytes(DtypeCode::kUInt8, shape, bytes.data(), size, isa);
      const Fingerprint b = *HashTensorBytes(
          DtypeCode::kUInt8, shape, bytes.data(), size, HashIsa::kBaseline);
      EXPECT_EQ(a.ToHex(), b.ToHex()) << IsaName(isa) << " size " << size;
    }
  }
}

TEST(CombineLeafHashesTest, MatchesHashTensorBytesAndChecksCount) {
  const size_t size = 2 * kLeafBytes + 8;
  const std::vector<uint8_t> bytes = RandomBytes(size, 8);
  const std::vector<uint64_t> leaves = {
      XXH3_64bits(bytes.data(), kLeafBytes),
      XXH3_64bits(bytes.data() + kLeafBytes, kLeafBytes),
      XXH3_64bits(bytes.data() + 2 * kLeafBytes, 8)};
  const std::vector<int64_t> shape = {static_cast<int64_t>(size / 8)};
  EXPECT_EQ(*CombineLeafHashes(DtypeCode::kInt64, shape, size, leaves),
            *HashTensorBytes(DtypeCode::kInt64, shape, bytes.data(), size));
  EXPECT_THAT(CombineLeafHashes(DtypeCode::kInt64, shape, size,
                                absl::MakeSpan(leaves).subspan(0, 2)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("leaf_hashes: 2 given")));
}

TEST(CheckTensorSizeTest, SameVerdictsAsHashTensorBytes) {
  const std::vector<uint8_t> bytes(64, 0);
  EXPECT_TRUE(CheckTensorSize(DtypeCode::kFloat32, {4, 4}, 64).ok());
  EXPECT_TRUE(CheckTensorSize(DtypeCode::kUInt8, {0}, 0).ok());
  EXPECT_THAT(CheckTensorSize(DtypeCode::kFloat32, {4, 4}, 60),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("size: 60 bytes given, but shape [4,4] of "
                                 "float32 needs 64")));
  EXPECT_THAT(CheckTensorSize(DtypeCode::kFloat32, {-1}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CheckTensorSize(static_cast<DtypeCode>(99), {4}, 16),
              StatusIs(absl::StatusCode::kInvalidArgument));
  const std::vector<int64_t> too_deep(kMaxRank + 1, 1);
  EXPECT_THAT(CheckTensorSize(DtypeCode::kUInt8, too_deep, 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Whatever it refuses, HashTensorBytes refuses with the same message.
  for (const auto& [dtype, shape, size] :
       std::vector<std::tuple<DtypeCode, std::vector<int64_t>, size_t>>{
           {DtypeCode::kFloat32, {4, 4}, 60},
           {DtypeCode::kFloat32, {-1}, 0},
           {static_cast<DtypeCode>(99), {4}, 16},
           {DtypeCode::kUInt8, too_deep, 1},
           {DtypeCode::kInt64, {int64_t{1} << 62, 8}, 64}}) {
    const absl::Status checked = CheckTensorSize(dtype, shape, size);
    const absl::Status hashed =
        HashTensorBytes(dtype, shape, bytes.data(), size).status();
    EXPECT_FALSE(checked.ok());
    EXPECT_EQ(checked, hashed);
  }
}

// ---- Statistics. ----

TEST(ComputeStatsTest, SmallIntegersAreExact) {
  const std::vector<float> x = {1.0f, 2.0f, 3.0f, -4.0f};
  for (HashIsa isa : kAllIsas) {
    if (!IsaAvailable(isa)) continue;
    const TensorStats s = *ComputeStats(x.data(), x.size(), isa);
    EXPECT_EQ(s.sum, 2.0);
    EXPECT_EQ(Bits(s.l2), Bits(std::sqrt(30.0)));
    EXPECT_EQ(s.max_abs, 4.0f);
    EXPECT_EQ(s.nan_count, 0);
    EXPECT_EQ(s.inf_count, 0);
  }
  // Integers in [-8, 8] over several blocks: every partial sum is exact, so
  // the result is the integer sum whatever the order (indexing bugs show
  // here separately from ordering bugs).
  std::mt19937_64 rng(4);
  std::vector<float> ints(3 * 16384 + 77);
  int64_t want_sum = 0;
  int64_t want_sq = 0;
  for (float& f : ints) {
    const int v = static_cast<int>(rng() % 17) - 8;
    f = static_cast<float>(v);
    want_sum += v;
    want_sq += v * v;
  }
  const TensorStats s = ComputeStats(ints.data(), ints.size());
  EXPECT_EQ(s.sum, static_cast<double>(want_sum));
  EXPECT_EQ(Bits(s.l2), Bits(std::sqrt(static_cast<double>(want_sq))));
  EXPECT_EQ(s.max_abs, 8.0f);
}

TEST(ComputeStatsTest, NanInfAndNegativeZero) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {-0.0f,
                                nan,
                                inf,
                                -inf,
                                1.5f,
                                -2.5f,
                                FloatFromBits(0xffc00001U),
                                FloatFromBits(0x7f800001U)};
  for (HashIsa isa : kAllIsas) {
    if (!IsaAvailable(isa)) continue;
    const TensorStats s = *ComputeStats(x.data(), x.size(), isa);
    EXPECT_EQ(s.sum, -1.0) << IsaName(isa);
    EXPECT_EQ(Bits(s.l2), Bits(std::sqrt(8.5))) << IsaName(isa);
    EXPECT_EQ(s.max_abs, 2.5f) << IsaName(isa);
    EXPECT_EQ(s.nan_count, 3) << IsaName(isa);
    EXPECT_EQ(s.inf_count, 2) << IsaName(isa);
  }
  // Only zeros and non-finite values: sum and max are +0.0, never -0.0.
  const std::vector<float> zeros = {-0.0f, -0.0f, nan, -inf, -0.0f};
  for (HashIsa isa : kAllIsas) {
    if (!IsaAvailable(isa)) continue;
    const TensorStats s = *ComputeStats(zeros.data(), zeros.size(), isa);
    EXPECT_EQ(Bits(s.sum), 0u) << IsaName(isa);
    EXPECT_EQ(Bits(s.l2), 0u) << IsaName(isa);
    EXPECT_EQ(Bits(s.max_abs), 0u) << IsaName(isa);
    EXPECT_EQ(s.nan_count, 1);
    EXPECT_EQ(s.inf_count, 1);
  }
  // Empty.
  const TensorStats e = ComputeStats(nullptr, 0);
  EXPECT_EQ(Bits(e.sum), 0u);
  EXPECT_EQ(Bits(e.l2), 0u);
  EXPECT_EQ(Bits(e.max_abs), 0u);
  EXPECT_EQ(e.nan_count + e.inf_count, 0);
}

TEST(ComputeStatsTest, ExtremesNeitherOverflowNorFlush) {
  const float big = std::numeric_limits<float>::max();
  const float tiny = FloatFromBits(1);  // smallest subnormal
  const std::vector<float> x = {big, big, big, big};
  const TensorStats s = ComputeStats(x.data(), x.size());
  EXPECT_EQ(s.sum, 4.0 * static_cast<double>(big));
  EXPECT_EQ(s.l2, 2.0 * static_cast<double>(big));
  EXPECT_EQ(s.max_abs, big);
  const std::vector<float> t = {tiny, -tiny, tiny};
  const TensorStats st = ComputeStats(t.data(), t.size());
  EXPECT_EQ(st.sum, static_cast<double>(tiny));
  EXPECT_EQ(Bits(st.max_abs), 1u);
  EXPECT_GT(st.l2, 0.0);
}

TEST(ComputeStatsTest, EqualsSpecAndPortableReferenceOnRandomData) {
  const size_t b = 16384;
  const std::vector<size_t> sizes = {
      1,      15,     16,    17,        31,         63,          64,
      65,     127,    128,   129,       b - 1,      b,           b + 1,
      b + 16, b + 64, 2 * b, 3 * b + 5, 3 * b + 70, 5 * b + 1234};
  int seed = 0;
  for (size_t n : sizes) {
    for (bool specials : {false, true}) {
      const std::vector<float> x = RandomFloats(n, ++seed, specials);
      const TensorStats want = SpecStats(x);
      // The LS_HD reference, block by block.
      portable::StatsPartial total = portable::EmptyStatsPartial();
      for (size_t off = 0; off < n; off += b) {
        portable::AddBlockStats(
            &total,
            portable::StatsOfBlock(x.data() + off,
                                   static_cast<int64_t>(std::min(b, n - off))));
      }
      TensorStats ref;
      ref.sum = total.sum;
      ref.l2 = std::sqrt(total.sum_sq);
      ref.max_abs = FloatFromBits(total.max_abs_bits);
      ref.nan_count = total.nan_count;
      ref.inf_count = total.inf_count;
      EXPECT_EQ(StatsDiff(want, ref), "") << "portable, n " << n;
      for (HashIsa isa : kAllIsas) {
        if (!IsaAvailable(isa)) continue;
        const TensorStats got = *ComputeStats(x.data(), n, isa);
        EXPECT_EQ(StatsDiff(want, got), "")
            << IsaName(isa) << ", n " << n << ", specials " << specials;
      }
    }
  }
}

TEST(ComputeStatsTest, LaneOrderIsTheDefinedOne) {
  // 1e16 + 1 - 1e16 is 0 or 1 in float64 depending on grouping. With 64
  // lanes, x[0] = 1e16 and x[64] = -1e16 share lane 0 and cancel exactly,
  // while x[1] = 1 sits in lane 1: the defined sum is exactly 1. (With the
  // 16 lanes of statistics version 1, x[16] would share lane 0 instead.)
  std::vector<float> x(128, 0.0f);
  x[0] = 1e16f;
  x[1] = 1.0f;
  x[64] = -1e16f;
  for (HashIsa isa : kAllIsas) {
    if (!IsaAvailable(isa)) continue;
    EXPECT_EQ(ComputeStats(x.data(), x.size(), isa)->sum, 1.0) << IsaName(isa);
  }
  EXPECT_EQ(SpecStats(x).sum, 1.0);
}

// The vector paths add every element and redo a block that held NaN or Inf;
// one non-finite value anywhere (a full row, the tail, the last block) must
// give the reference bits.
TEST(ComputeStatsTest, OneNonFiniteValueAnywhere) {
  const size_t b = 16384;
  const size_t n = 2 * b + 70;
  const std::vector<float> clean = RandomFloats(n, 77, /*specials=*/false);
  for (size_t at : {size_t{0}, size_t{63}, size_t{64}, b - 1, b, 2 * b + 63,
                    2 * b + 64, n - 1}) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                      -std::numeric_limits<float>::infinity()}) {
      std::vector<float> x = clean;
      x[at] = bad;
      const TensorStats want = SpecStats(x);
      for (HashIsa isa : kAllIsas) {
        if (!IsaAvailable(isa)) continue;
        EXPECT_EQ(StatsDiff(want, *ComputeStats(x.data(), n, isa)), "")
            << IsaName(isa) << ", at " << at << ", " << bad;
      }
    }
  }
}

// Statistics version 2, pinned. Values computed independently (a plain
// Python loop over IEEE doubles following docs/fingerprints.md section 8).
// Under version 1 (16 lanes) the sum's bits were 0xc0d38520b9a1f5e9.
TEST(ComputeStatsTest, GoldenValuesOfVersion2) {
  static_assert(portable::kStatsVersion == 2,
                "statistics version changed: recompute these golden values");
  const size_t n = 3 * 16384 + 100;
  std::vector<float> x(n);
  for (size_t k = 0; k < n; ++k) {
    const uint32_t u = static_cast<uint32_t>(k * 2654435761ULL);
    x[k] = static_cast<float>(
        (static_cast<double>(u) / 536870912.0 - 4.0) *
        std::ldexp(1.0, static_cast<int>((k * 7) % 23) - 11));
  }
  for (HashIsa isa : kAllIsas) {
    if (!IsaAvailable(isa)) continue;
    const TensorStats s = *ComputeStats(x.data(), n, isa);
    EXPECT_EQ(Bits(s.sum), 0xc0d38520b9a1f5e5ULL) << IsaName(isa);
    EXPECT_EQ(Bits(s.l2), 0x410ed90f1a9fa2a7ULL) << IsaName(isa);
    EXPECT_EQ(Bits(s.max_abs), 0x45ffe621U) << IsaName(isa);
    EXPECT_EQ(s.nan_count, 0) << IsaName(isa);
    EXPECT_EQ(s.inf_count, 0) << IsaName(isa);
  }
}

TEST(FingerprintAndStatsTest, EqualsSeparateCalls) {
  const size_t b = 16384;
  for (size_t n : {size_t{0}, size_t{1}, b - 1, b, b + 1, 4 * b + 3}) {
    const std::vector<float> x = RandomFloats(n, n + 5, /*specials=*/true);
    const std::vector<int64_t> shape = {static_cast<int64_t>(n)};
    for (HashIsa isa : kAllIsas) {
      if (!IsaAvailable(isa)) continue;
      absl::StatusOr<FingerprintAndStatsResult> r =
          FingerprintAndStats(DtypeCode::kFloat32, shape, x.data(), 4 * n, isa);
      ASSERT_THAT(r, IsOk());
      EXPECT_EQ(r->fingerprint,
                *HashTensorBytes(DtypeCode::kFloat32, shape, x.data(), 4 * n))
          << "n " << n << " " << IsaName(isa);
      EXPECT_EQ(StatsDiff(SpecStats(x), r->stats), "")
          << "n " << n << " " << IsaName(isa);
    }
  }
}

TEST(FingerprintAndStatsTest, RejectsNonFloat32AndMisalignedData) {
  const std::vector<int32_t> i(4, 1);
  EXPECT_THAT(FingerprintAndStats(DtypeCode::kInt32, {4}, i.data(), 16),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("float32 only, got int32")));
  std::vector<uint8_t> raw(20, 0);
  EXPECT_THAT(FingerprintAndStats(DtypeCode::kFloat32, {4}, raw.data() + 1, 16),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("4-byte aligned")));
}

// ---- Leaves spread over threads (Parallelism). ----

// A Parallelism over `threads` real threads, the calling one included, that
// take tasks from a shared counter (last task first when `reverse`), so
// ranges finish in whatever order the scheduler gives. Counts its calls and
// tasks.
class TestThreads {
 public:
  TestThreads(int threads, int64_t min_leaves, bool reverse) {
    p_.threads = threads;
    p_.min_leaves_per_thread = min_leaves;
    p_.run = [this, threads, reverse](int64_t n,
                                      absl::FunctionRef<void(int64_t)> task) {
      ++calls_;
      last_tasks_ = n;
      std::atomic<int64_t> next{0};
      auto work = [&] {
        for (int64_t i; (i = next.fetch_add(1)) < n;) {
          task(reverse ? n - 1 - i : i);
        }
      };
      std::vector<std::thread> others;
      for (int t = 1; t < threads; ++t) others.emplace_back(work);
      work();
      for (std::thread& t : others) t.join();
    };
  }
  const Parallelism* get() const { return &p_; }
  int calls() const { return calls_; }
  int64_t last_tasks() const { return last_tasks_; }

 private:
  Parallelism p_;
  int calls_ = 0;
  int64_t last_tasks_ = 0;
};

// Float data of `leaves` full leaves plus one element, with NaN, ±Inf, -0.0
// and subnormals sprinkled in and placed on both sides of every leaf
// boundary.
std::vector<float> DataAcrossLeaves(size_t leaves) {
  const size_t b = kLeafBytes / 4;
  std::vector<float> x = RandomFloats(leaves * b + 1, 77, /*specials=*/true);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), -0.0f};
  for (size_t i = 1; i <= leaves; ++i) {
    x[i * b - 1] = specials[i % 4];
    x[i * b] = specials[(i + 1) % 4];
  }
  return x;
}

TEST(ParallelFingerprintTest, SameBitsAsTheCallingThreadAlone) {
  const size_t b = kLeafBytes / 4;  // floats per leaf
  const size_t kMaxLeaves = 17;
  const std::vector<float> x = DataAcrossLeaves(kMaxLeaves);
  std::vector<size_t> sizes;  // float counts: 0, 1, many leaves, +- 1
  for (size_t leaves : {0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17}) {
    for (size_t n : {leaves * b - 1, leaves * b, leaves * b + 1}) {
      // (leaves * b - 1 wraps around for 0 leaves and is skipped.)
      if (n <= x.size() && (sizes.empty() || sizes.back() != n)) {
        sizes.push_back(n);
      }
    }
  }
  for (size_t n : sizes) {
    const std::vector<int64_t> shape = {static_cast<int64_t>(n)};
    const size_t bytes = 4 * n;
    const std::vector<int64_t> byte_shape = {static_cast<int64_t>(bytes)};
    const size_t leaves = NumLeaves(bytes);
    for (HashIsa isa : kAllIsas) {
      if (!IsaAvailable(isa)) continue;
      const absl::StatusOr<FingerprintAndStatsResult> alone =
          FingerprintAndStats(DtypeCode::kFloat32, shape, x.data(), bytes, isa);
      ASSERT_THAT(alone, IsOk());
      const absl::StatusOr<Fingerprint> alone_u8 =
          HashTensorBytes(DtypeCode::kUInt8, byte_shape, x.data(), bytes, isa);
      ASSERT_THAT(alone_u8, IsOk());
      for (int threads : {1, 2, 3, 4}) {
        for (int64_t min_leaves : {int64_t{1}, kMinLeavesPerThread}) {
          for (bool reverse : {false, true}) {
            const std::string where = absl::StrFormat(
                "n %d (%d leaves), %s, %d threads, >= %d leaves each%s", n,
                leaves, IsaName(isa), threads, min_leaves,
                reverse ? ", last range first" : "");
            TestThreads pool(threads, min_leaves, reverse);
            const absl::StatusOr<FingerprintAndStatsResult> r =
                FingerprintAndStats(DtypeCode::kFloat32, shape, x.data(), bytes,
                                    isa, pool.get());
            ASSERT_THAT(r, IsOk()) << where;
            EXPECT_EQ(r->fingerprint.ToHex(), alone->fingerprint.ToHex())
                << where;
            EXPECT_EQ(StatsDiff(alone->stats, r->stats), "") << where;
            const absl::StatusOr<Fingerprint> h =
                HashTensorBytes(DtypeCode::kUInt8, byte_shape, x.data(), bytes,
                                isa, pool.get());
            ASSERT_THAT(h, IsOk()) << where;
            EXPECT_EQ(h->ToHex(), alone_u8->ToHex()) << where;
            // Spread only when every thread gets min_leaves leaves, over
            // at most `threads` ranges.
            const int64_t ranges =
                std::min<int64_t>(threads, leaves / min_leaves);
            if (threads > 1 && ranges > 1) {
              EXPECT_EQ(pool.calls(), 2) << where;
              EXPECT_EQ(pool.last_tasks(), ranges) << where;
            } else {
              EXPECT_EQ(pool.calls(), 0) << where;
            }
          }
        }
      }
    }
  }
}

TEST(ParallelFingerprintTest, EqualsTheDefinition) {
  // The parallel path against the from-scratch reimplementation directly.
  const size_t b = kLeafBytes / 4;
  const std::vector<float> x = DataAcrossLeaves(9);
  const size_t n = 9 * b - 3;
  const std::vector<int64_t> shape = {static_cast<int64_t>(n)};
  TestThreads pool(3, /*min_leaves=*/2, /*reverse=*/true);
  const absl::StatusOr<FingerprintAndStatsResult> r = FingerprintAndStats(
      DtypeCode::kFloat32, shape, x.data(), 4 * n, HashIsa::kAuto, pool.get());
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(pool.last_tasks(), 3);
  EXPECT_EQ(r->fingerprint,
            SpecTreeHash(1, shape, reinterpret_cast<const uint8_t*>(x.data()),
                         4 * n));
  EXPECT_EQ(StatsDiff(SpecStats(std::vector<float>(x.begin(), x.begin() + n)),
                      r->stats),
            "");
}

TEST(ParallelFingerprintTest, SmallTensorsStayOnTheCallingThread) {
  const size_t b = kLeafBytes / 4;
  const std::vector<float> x = DataAcrossLeaves(2 * kMinLeavesPerThread);
  TestThreads pool(4, kMinLeavesPerThread, /*reverse=*/false);
  // 2 * kMinLeavesPerThread leaves (the last one a float short) are spread
  // over two threads; one leaf fewer stays on the calling thread.
  const size_t spread_from = 2 * kMinLeavesPerThread;
  for (size_t leaves : {spread_from - 1, spread_from}) {
    const size_t n = leaves * b - 1;
    const std::vector<int64_t> shape = {static_cast<int64_t>(n)};
    const int calls_before = pool.calls();
    ASSERT_THAT(FingerprintAndStats(DtypeCode::kFloat32, shape, x.data(), 4 * n,
                                    HashIsa::kAuto, pool.get()),
                IsOk());
    ASSERT_THAT(HashTensorBytes(DtypeCode::kFloat32, shape, x.data(), 4 * n,
                                HashIsa::kAuto, pool.get()),
                IsOk());
    const bool spread = leaves >= spread_from;
    EXPECT_EQ(pool.calls() - calls_before, spread ? 2 : 0) << leaves;
    if (spread) {
      EXPECT_EQ(pool.last_tasks(), 2);
    }
  }
}

TEST(ParallelFingerprintTest, WithoutRunTheCallingThreadWorksAlone) {
  const std::vector<float> x = DataAcrossLeaves(16);
  const std::vector<int64_t> shape = {static_cast<int64_t>(x.size())};
  Parallelism unset;
  unset.threads = 4;
  const absl::StatusOr<FingerprintAndStatsResult> r =
      FingerprintAndStats(DtypeCode::kFloat32, shape, x.data(), 4 * x.size(),
                          HashIsa::kAuto, &unset);
  const absl::StatusOr<FingerprintAndStatsResult> alone =
      FingerprintAndStats(DtypeCode::kFloat32, shape, x.data(), 4 * x.size());
  ASSERT_THAT(r, IsOk());
  ASSERT_THAT(alone, IsOk());
  EXPECT_EQ(r->fingerprint, alone->fingerprint);
  EXPECT_EQ(StatsDiff(alone->stats, r->stats), "");
}

TEST(ParallelFingerprintTest, BadArgumentsAreReportedBeforeAnyWork) {
  TestThreads pool(4, 1, /*reverse=*/false);
  const std::vector<float> x(16 * kLeafBytes / 4, 1.0f);
  EXPECT_THAT(FingerprintAndStats(DtypeCode::kFloat32, {7}, x.data(),
                                  x.size() * 4, HashIsa::kAuto, pool.get()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("size")));
  EXPECT_EQ(pool.calls(), 0);
}

// ---- Digests of digest lists. ----

TEST(CombineDigestsTest, MatchesDefinitionAndIsOrderSensitive) {
  const Fingerprint a{1, 2};
  const Fingerprint b{3, 4};
  const Fingerprint c{0xffffffffffffffffULL, 0};
  // Reference: XXH3-128 over 0xD1 then each digest's 16 LE bytes.
  std::vector<uint8_t> in = {0xD1};
  for (const Fingerprint& f : {a, b, c}) {
    for (int i = 0; i < 8; ++i) {
      in.push_back(static_cast<uint8_t>(f.lo >> (8 * i)));
    }
    for (int i = 0; i < 8; ++i) {
      in.push_back(static_cast<uint8_t>(f.hi >> (8 * i)));
    }
  }
  const XXH128_hash_t want = XXH3_128bits(in.data(), in.size());
  const std::vector<Fingerprint> abc = {a, b, c};
  EXPECT_EQ(CombineDigests(abc), (Fingerprint{want.high64, want.low64}));

  std::set<std::string> seen;
  for (const std::vector<Fingerprint>& list :
       std::vector<std::vector<Fingerprint>>{{},
                                             {a},
                                             {b},
                                             {a, b},
                                             {b, a},
                                             {a, b, c},
                                             {a, c, b},
                                             {c, b, a},
                                             {a, a},
                                             {a, b, c, a}}) {
    EXPECT_TRUE(seen.insert(CombineDigests(list).ToHex()).second)
        << list.size() << " digests collide";
  }
  const uint8_t tag = 0xD1;
  const XXH128_hash_t empty = XXH3_128bits(&tag, 1);
  EXPECT_EQ(CombineDigests({}), (Fingerprint{empty.high64, empty.low64}));
}

}  // namespace
}  // namespace lockstep::hash
