#include "common/blob_digest.h"

#include <string>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(BlobDigest, KnownValues) {
  // FIPS 180-2 test vectors.
  EXPECT_EQ(BlobDigest(""),
            "sha256:"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(BlobDigest("abc"),
            "sha256:"
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(BlobDigest, ChunkedEqualsWhole) {
  std::string bytes(3 * 1000 + 7, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i);
  BlobHasher h;
  for (size_t i = 0; i < bytes.size(); i += 1000) {
    h.Update(absl::string_view(bytes).substr(i, 1000));
  }
  EXPECT_EQ(h.Finish(), BlobDigest(bytes));
}

TEST(BlobDigest, Validation) {
  EXPECT_TRUE(ValidateBlobDigest(BlobDigest("x"), "f").ok());
  for (const char* bad :
       {"", "sha256:", "sha1:ba7816bf8f01cfea414140de5dae2223b00361a3",
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        "sha256:"
        "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD",
        "sha256:"
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015a"}) {
    absl::Status s = ValidateBlobDigest(bad, "model.parameters_digest");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("model.parameters_digest"), std::string::npos);
  }
}

}  // namespace
}  // namespace lockstep
