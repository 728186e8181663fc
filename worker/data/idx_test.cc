#include "worker/data/idx.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/tensor.h"
#include "worker/data/test_util.h"

namespace lockstep::worker {
namespace {

using ::lockstep::kernels::DType;
using ::lockstep::kernels::Tensor;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::lockstep::worker::testing::ListDir;
using ::lockstep::worker::testing::ReadRaw;
using ::lockstep::worker::testing::TestDir;
using ::lockstep::worker::testing::WriteRaw;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Be32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (8 * (3 - i)));
  return s;
}

TEST(IdxTest, WritesMnistLayoutAndReadsItBack) {
  const std::string dir = TestDir();
  std::vector<uint8_t> pixels(2 * 3 * 4);
  for (size_t i = 0; i < pixels.size(); ++i)
    pixels[i] = static_cast<uint8_t>(i * 11);
  absl::StatusOr<Tensor> images =
      Tensor::FromValues<uint8_t>({2, 3, 4}, absl::MakeConstSpan(pixels));
  ASSERT_THAT(images, IsOk());
  const std::string path = dir + "/images.idx3-ubyte";
  ASSERT_THAT(WriteIdx(path, *images), IsOk());

  const std::string raw = ReadRaw(path);
  EXPECT_EQ(raw.substr(0, 16), Be32(0x00000803) + Be32(2) + Be32(3) + Be32(4));
  EXPECT_EQ(raw.substr(16), std::string(pixels.begin(), pixels.end()));
  EXPECT_THAT(ListDir(dir), ElementsAre("images.idx3-ubyte"));

  absl::StatusOr<Tensor> back = ReadIdx(path);
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->dtype(), DType::kUInt8);
  EXPECT_THAT(back->shape(), ElementsAre(2, 3, 4));
  EXPECT_EQ(std::memcmp(back->raw_data(), pixels.data(), pixels.size()), 0);

  absl::StatusOr<IdxHeader> h = ParseIdx(raw, "x", kIdxImagesMagic);
  ASSERT_THAT(h, IsOk());
  EXPECT_EQ(h->magic, kIdxImagesMagic);
  EXPECT_EQ(h->data_offset, 16);
  EXPECT_EQ(h->data_bytes, 24);
}

TEST(IdxTest, LabelsRoundTrip) {
  const std::string dir = TestDir();
  const std::vector<uint8_t> labels = {7, 2, 1, 0, 4, 1, 4, 9, 5, 9};
  absl::StatusOr<Tensor> t =
      Tensor::FromValues<uint8_t>({10}, absl::MakeConstSpan(labels));
  ASSERT_THAT(t, IsOk());
  ASSERT_THAT(WriteIdx(dir + "/labels", *t), IsOk());
  EXPECT_EQ(ReadRaw(dir + "/labels").substr(0, 8), Be32(0x00000801) + Be32(10));
  absl::StatusOr<Tensor> back = ReadIdx(dir + "/labels");
  ASSERT_THAT(back, IsOk());
  EXPECT_THAT(back->span<uint8_t>(), ElementsAre(7, 2, 1, 0, 4, 1, 4, 9, 5, 9));
}

TEST(IdxTest, WriterRejectsWhatIdxCannotHold) {
  const std::string dir = TestDir();
  absl::StatusOr<Tensor> f = Tensor::Zeros(DType::kFloat32, {2});
  ASSERT_THAT(f, IsOk());
  EXPECT_THAT(WriteIdx(dir + "/f", *f),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("supports uint8 tensors, got float32[2]")));
  absl::StatusOr<Tensor> scalar = Tensor::Zeros(DType::kUInt8, {});
  ASSERT_THAT(scalar, IsOk());
  EXPECT_THAT(WriteIdx(dir + "/s", *scalar),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("IDX needs rank 1 .. 255")));
  EXPECT_THAT(ListDir(dir), ::testing::IsEmpty());
}

struct BadCase {
  const char* name;
  std::string file;
  uint32_t expected_magic;
  const char* message;
};

TEST(IdxTest, RejectsMalformedFilesWithClearMessages) {
  const std::string images =
      Be32(0x803) + Be32(2) + Be32(2) + Be32(2) + std::string(8, '\x7f');
  const std::vector<BadCase> cases = {
      {"empty", "", 0,
       "truncated file: expected at least 4 bytes of IDX magic, got 0"},
      {"labels for images", Be32(0x801) + Be32(1) + "x", kIdxImagesMagic,
       "bad magic: expected 0x00000803 (uint8 images [n, rows, cols]), got "
       "0x00000801"},
      {"images for labels", images, kIdxLabelsMagic,
       "bad magic: expected 0x00000801 (uint8 labels [n]), got 0x00000803"},
      {"not idx", "\x89PNG\r\n\x1a\n", 0,
       "bad magic: an IDX file starts with two zero bytes"},
      {"text for images", "root:*:1:0", kIdxImagesMagic,
       "bad magic: expected 0x00000803 (uint8 images [n, rows, cols]), got a "
       "non-IDX magic (not an IDX file)"},
      {"float type", Be32(0xD01) + Be32(1) + std::string(4, '\0'), 0,
       "IDX element type 0x0d (float32) is not supported (only 0x08, uint8)"},
      {"unknown type", Be32(0x701) + Be32(1) + "x", 0,
       "unknown IDX element type 0x07 is not supported"},
      {"no dims", Be32(0x800), 0, "declares 0 dimensions"},
      {"short dims", images.substr(0, 10), kIdxImagesMagic,
       "truncated file: expected at least 16 bytes for the IDX header with 3 "
       "dimensions, got 10"},
      {"short data", images.substr(0, 20), kIdxImagesMagic,
       "truncated file: expected 24 bytes (header 16 + uint8 data [2, 2, 2] "
       "8), "
       "got 20"},
      {"trailing", images + "!", kIdxImagesMagic,
       "trailing bytes: expected 24 bytes (header 16 + uint8 data [2, 2, 2] "
       "8), "
       "got 25"},
      {"huge dims",
       Be32(0x804) + Be32(0xffffffff) + Be32(0xffffffff) + Be32(0xffffffff) +
           Be32(0xffffffff),
       0,
       "IDX dims [4294967295, 4294967295, 4294967295, 4294967295] are too "
       "large"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_THAT(
        ParseIdx(c.file, "images \"a.idx\"", c.expected_magic),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 AllOf(HasSubstr("images \"a.idx\": "), HasSubstr(c.message))));
  }
}

TEST(IdxTest, EveryTruncationIsReportedAndByteFlipsAreSafe) {
  const std::string file =
      Be32(0x803) + Be32(3) + Be32(2) + Be32(2) + std::string(12, '\x01');
  ASSERT_THAT(ParseIdx(file, "x", kIdxImagesMagic), IsOk());
  for (size_t n = 0; n < file.size(); ++n) {
    EXPECT_THAT(ParseIdx(file.substr(0, n), "x"),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << n;
  }
  for (size_t i = 0; i < 16; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string mutated = file;
      mutated[i] = static_cast<char>(mutated[i] ^ (1 << bit));
      absl::StatusOr<IdxHeader> h = ParseIdx(mutated, "x");
      if (h.ok()) {
        EXPECT_EQ(h->data_offset + h->data_bytes,
                  static_cast<int64_t>(mutated.size()));
      }
    }
  }
}

TEST(IdxTest, ReadErrorsNameThePathAndTheLimit) {
  const std::string dir = TestDir();
  EXPECT_THAT(
      ReadIdx(dir + "/nope"),
      StatusIs(absl::StatusCode::kNotFound,
               HasSubstr(absl::StrCat("\"", dir, "/nope\": no such file"))));
  WriteRaw(dir + "/l", Be32(0x801) + Be32(100) + std::string(100, '\0'));
  EXPECT_THAT(
      ReadIdx(dir + "/l", /*max_file_bytes=*/107),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("file is 108 bytes, over the limit of 107 bytes")));
  EXPECT_THAT(ReadIdx(dir + "/l", /*max_file_bytes=*/108), IsOk());
  // A rank beyond the tensor limit parses but cannot become a tensor.
  std::string rank9 = Be32(0x809);
  for (int i = 0; i < 9; ++i) rank9 += Be32(1);
  WriteRaw(dir + "/r9", rank9 + "x");
  EXPECT_THAT(ReadIdx(dir + "/r9"), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("/r9\": ")));
}

}  // namespace
}  // namespace lockstep::worker
