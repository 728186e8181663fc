#include "common/digest.h"

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(Digest, KnownValueAndFormat) {
  // XXH3-128 of the empty input with seed 0 (from the XXH3 reference).
  EXPECT_EQ(Digest128Hex(""), "99aa06d3014798d86001c324468d497f");
  const std::string d = Digest128Hex("lockstep");
  EXPECT_TRUE(IsDigest128Hex(d));
  EXPECT_NE(d, Digest128Hex("lockstep "));
  EXPECT_EQ(d, Digest128Hex(std::string("lockstep")));
}

TEST(Digest, Validation) {
  EXPECT_FALSE(IsDigest128Hex(""));
  EXPECT_FALSE(IsDigest128Hex("99AA06D3014798D86001C324468D497F"));
  EXPECT_FALSE(IsDigest128Hex("99aa06d3014798d86001c324468d497"));
  EXPECT_TRUE(IsDigest128Hex("99aa06d3014798d86001c324468d497f"));
}

}  // namespace
}  // namespace lockstep
