// The portable XXH3 must equal libxxhash bit for bit on every length class
// (empty, 1-3, 4-8, 9-16, 17-128, 129-240, large with partial/full last
// blocks), and the tree hash built from it must equal HashTensorBytes.
#include "kernels/hash/xxh3_portable.h"

#include <xxhash.h>

#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/hash/fingerprint.h"

namespace lockstep::hash {
namespace {

std::vector<unsigned char> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng() >> 56);
  return v;
}

// Compares both widths on data[0 .. len); returns "" or a description of the
// first mismatch, with the values in hex.
std::string CompareAt(const unsigned char* data, size_t len) {
  const uint64_t want64 = XXH3_64bits(data, len);
  const uint64_t got64 = portable::Xxh3Hash64(data, len);
  if (want64 != got64) {
    return absl::StrFormat("len %d: XXH3-64 libxxhash %016x portable %016x",
                           len, want64, got64);
  }
  const XXH128_hash_t want128 = XXH3_128bits(data, len);
  const portable::Hash128 got128 = portable::Xxh3Hash128(data, len);
  if (want128.low64 != got128.lo || want128.high64 != got128.hi) {
    return absl::StrFormat(
        "len %d: XXH3-128 libxxhash %016x%016x portable %016x%016x", len,
        want128.high64, want128.low64, got128.hi, got128.lo);
  }
  return "";
}

void ExpectMatchesLibxxhash(const std::vector<size_t>& lengths,
                            int contents_per_length) {
  for (size_t len : lengths) {
    for (int c = 0; c < contents_per_length; ++c) {
      // +3 bytes so the input can start at an odd address.
      const std::vector<unsigned char> buf =
          RandomBytes(len + 3, len * 1000003u + static_cast<uint64_t>(c));
      const unsigned char* data = buf.data() + (c % 4);
      const std::string diff = CompareAt(data, len);
      ASSERT_EQ(diff, "") << "content " << c;
    }
  }
}

TEST(Xxh3PortableTest, EmptyInputIncludingNullPointer) {
  EXPECT_EQ(portable::Xxh3Hash64(nullptr, 0), XXH3_64bits(nullptr, 0));
  const XXH128_hash_t want = XXH3_128bits(nullptr, 0);
  const portable::Hash128 got = portable::Xxh3Hash128(nullptr, 0);
  EXPECT_EQ(got.lo, want.low64);
  EXPECT_EQ(got.hi, want.high64);
}

TEST(Xxh3PortableTest, SmallAndMediumLengthsAllValues) {
  // 0, 1..3, 4..8, 9..16, 17..128, 129..240, 241..300: every length.
  std::vector<size_t> lengths;
  for (size_t len = 0; len <= 300; ++len) lengths.push_back(len);
  ExpectMatchesLibxxhash(lengths, 6);
}

TEST(Xxh3PortableTest, LargeLengthsAroundBlockAndStripeBoundaries) {
  // Blocks are 1024 bytes, stripes 64: cover last blocks that are full,
  // one byte long, and one stripe plus or minus a byte.
  std::vector<size_t> lengths = {255,  256,  257,  319,  320,  321,  511,
                                 512,  513,  1023, 1024, 1025, 1087, 1088,
                                 1089, 2047, 2048, 2049, 3071, 4095, 4096,
                                 4097, 5001, 8191, 8192, 8193};
  ExpectMatchesLibxxhash(lengths, 4);
}

TEST(Xxh3PortableTest, OddLengths) {
  std::vector<size_t> lengths;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 60; ++i) lengths.push_back((rng() % 20000) | 1);
  ExpectMatchesLibxxhash(lengths, 2);
}

TEST(Xxh3PortableTest, LeafSizedInputs) {
  std::vector<size_t> lengths;
  for (int delta = -17; delta <= 17; ++delta) {
    lengths.push_back(
        static_cast<size_t>(static_cast<int64_t>(kLeafBytes) + delta));
  }
  ExpectMatchesLibxxhash(lengths, 3);
}

TEST(Xxh3PortableTest, MultiMegabyteInputs) {
  ExpectMatchesLibxxhash({(1u << 20) + 5, (3u << 20) + 7, 4u << 20}, 3);
}

// Tree hash per SPEC.md computed only with the portable functions (as the
// CUDA hasher will) equals the libxxhash-based HashTensorBytes.
TEST(Xxh3PortableTest, PortableTreeHashEqualsHashTensorBytes) {
  struct Case {
    DtypeCode dtype;
    std::vector<int64_t> shape;
  };
  const int64_t leaf_floats = static_cast<int64_t>(kLeafBytes / 4);
  const std::vector<Case> cases = {
      {DtypeCode::kFloat32, {}},
      {DtypeCode::kFloat32, {0, 5}},
      {DtypeCode::kUInt8, {1}},
      {DtypeCode::kFloat32, {2, 3}},
      {DtypeCode::kFloat32, {leaf_floats}},
      {DtypeCode::kFloat32, {leaf_floats + 1}},
      {DtypeCode::kUInt8, {static_cast<int64_t>(kLeafBytes) - 1}},
      {DtypeCode::kInt64, {3, 7, 4099}},
      {DtypeCode::kFloat16, {5, leaf_floats + 3}},
  };
  for (const Case& c : cases) {
    size_t size = DtypeSize(c.dtype);
    for (int64_t d : c.shape) size *= static_cast<size_t>(d);
    const std::vector<unsigned char> bytes = RandomBytes(size, size + 17);

    absl::StatusOr<std::vector<uint8_t>> header =
        EncodeTensorHeader(c.dtype, c.shape);
    ASSERT_TRUE(header.ok()) << header.status();
    std::vector<unsigned char> input(header->begin(), header->end());
    for (size_t off = 0; off < size; off += kLeafBytes) {
      const size_t len = size - off < kLeafBytes ? size - off : kLeafBytes;
      const uint64_t h = portable::Xxh3Hash64(bytes.data() + off, len);
      for (int i = 0; i < 8; ++i) {
        input.push_back(static_cast<unsigned char>(h >> (8 * i)));
      }
    }
    const portable::Hash128 tree =
        portable::Xxh3Hash128(input.data(), input.size());

    absl::StatusOr<Fingerprint> fp =
        HashTensorBytes(c.dtype, c.shape, bytes.data(), size);
    ASSERT_TRUE(fp.ok()) << fp.status();
    EXPECT_EQ(fp->ToHex(), (Fingerprint{tree.hi, tree.lo}.ToHex()))
        << DtypeName(c.dtype) << " with " << size << " bytes";
  }
}

}  // namespace
}  // namespace lockstep::hash
