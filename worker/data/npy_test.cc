#include "worker/data/npy.h"

#include <cstdint>
#include <cstring>
#include <limits>
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

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Byte-for-byte equality of two tensors' dtype, shape and contents.
void ExpectBitIdentical(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.bytes(), b.bytes());
  if (a.bytes() > 0) {
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.bytes()), 0);
  }
}

std::string Le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A version 1.0 file with `dict` as its header text (padded like NumPy) and
// `data` after it.
std::string NpyV1(absl::string_view dict, absl::string_view data) {
  std::string header(dict);
  while ((10 + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  return out + header + std::string(data);
}

TEST(NpyHeaderTest, MatchesNumPyBytes) {
  const std::string h = NpyHeaderV1(NpyDType::kFloat32, {2, 3});
  const std::string dict =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  ASSERT_EQ(h.size(), 128u);
  EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(static_cast<unsigned char>(h[8]), 118);  // 128 - 10
  EXPECT_EQ(h[9], '\0');
  EXPECT_EQ(h.substr(10, dict.size()), dict);
  EXPECT_EQ(h.substr(10 + dict.size(), 58), std::string(58, ' '));
  EXPECT_EQ(h.back(), '\n');

  EXPECT_THAT(NpyHeaderV1(NpyDType::kUInt8, {5}),
              HasSubstr("{'descr': '|u1', 'fortran_order': False, "
                        "'shape': (5,), }"));
  EXPECT_THAT(NpyHeaderV1(NpyDType::kInt32, {}),
              HasSubstr("{'descr': '<i4', 'fortran_order': False, "
                        "'shape': (), }"));
}

TEST(NpyHeaderTest, AlwaysPaddedToMultipleOf64) {
  // Sweep shapes whose repr lengths hit every residue, including the one
  // where NumPy adds a full 64 spaces.
  for (int64_t a = 0; a < 70; ++a) {
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{a}, std::vector<int64_t>{a * 1000003, 7},
          std::vector<int64_t>{1, 2, 3, a * 17, 5, 6, 7, 8}}) {
      const std::string h = NpyHeaderV1(NpyDType::kFloat32, shape);
      EXPECT_EQ(h.size() % 64, 0u) << h;
      EXPECT_EQ(h.back(), '\n');
      const size_t hlen = static_cast<unsigned char>(h[8]) |
                          (static_cast<unsigned char>(h[9]) << 8);
      EXPECT_EQ(hlen + 10, h.size());
      // The padding is spaces only, at least one.
      const size_t close = h.rfind('}');
      EXPECT_GT(h.size() - 1, close + 1);
      for (size_t i = close + 1; i + 1 < h.size(); ++i) EXPECT_EQ(h[i], ' ');
      // Parses back to the same shape (data left out: the file is short by
      // exactly the data size).
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      absl::StatusOr<NpyHeader> parsed = ParseNpy(h, "x");
      if (n == 0) {
        ASSERT_THAT(parsed, IsOk());
        EXPECT_EQ(parsed->shape, shape);
        EXPECT_EQ(parsed->data_offset, static_cast<int64_t>(h.size()));
      } else {
        EXPECT_THAT(parsed,
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr(absl::StrCat(
                                 "truncated file: expected ", h.size() + 4 * n,
                                 " bytes (header ", h.size(), " + <f4 data ",
                                 kernels::ShapeString(shape)))));
      }
    }
  }
}

TEST(NpyTest, Float32RoundTripIsBitIdentical) {
  const std::string dir = TestDir();
  const std::vector<float> values = {
      0.0f,
      -0.0f,
      1.0f,
      -1.5f,
      std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(),
      FromBits(0x7fc00001u),  // quiet NaN with a payload
      FromBits(0xffbfffffu),  // negative NaN
      FromBits(0x00000001u),  // smallest subnormal
      FromBits(0x807fffffu),  // largest negative subnormal
      std::numeric_limits<float>::max(),
      0.1f};
  absl::StatusOr<Tensor> t =
      Tensor::FromValues<float>({3, 4}, absl::MakeConstSpan(values));
  ASSERT_THAT(t, IsOk());
  const std::string path = dir + "/f.npy";
  ASSERT_THAT(WriteNpy(path, *t), IsOk());

  // The file is NumPy's header followed by the little-endian floats.
  const std::string raw = ReadRaw(path);
  const std::string header = NpyHeaderV1(NpyDType::kFloat32, {3, 4});
  ASSERT_EQ(raw.size(), header.size() + 48);
  EXPECT_EQ(raw.substr(0, header.size()), header);
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], 4);
    EXPECT_EQ(raw.substr(header.size() + 4 * i, 4), Le32(bits)) << i;
  }

  absl::StatusOr<Tensor> back = ReadNpy(path);
  ASSERT_THAT(back, IsOk());
  ExpectBitIdentical(*t, *back);
}

TEST(NpyTest, Int32AndUInt8RoundTrip) {
  const std::string dir = TestDir();
  const std::vector<int32_t> ints = {0,
                                     -1,
                                     1,
                                     std::numeric_limits<int32_t>::min(),
                                     std::numeric_limits<int32_t>::max(),
                                     42};
  absl::StatusOr<Tensor> ti =
      Tensor::FromValues<int32_t>({6}, absl::MakeConstSpan(ints));
  ASSERT_THAT(ti, IsOk());
  ASSERT_THAT(WriteNpy(dir + "/i.npy", *ti), IsOk());
  absl::StatusOr<Tensor> bi = ReadNpy(dir + "/i.npy");
  ASSERT_THAT(bi, IsOk());
  ExpectBitIdentical(*ti, *bi);

  std::vector<uint8_t> bytes(256);
  for (int i = 0; i < 256; ++i) bytes[i] = static_cast<uint8_t>(i);
  absl::StatusOr<Tensor> tb =
      Tensor::FromValues<uint8_t>({2, 8, 16}, absl::MakeConstSpan(bytes));
  ASSERT_THAT(tb, IsOk());
  ASSERT_THAT(WriteNpy(dir + "/u.npy", *tb), IsOk());
  EXPECT_THAT(ReadRaw(dir + "/u.npy"), HasSubstr("'descr': '|u1'"));
  absl::StatusOr<Tensor> bb = ReadNpy(dir + "/u.npy");
  ASSERT_THAT(bb, IsOk());
  ExpectBitIdentical(*tb, *bb);
}

TEST(NpyTest, ScalarAndEmptyRoundTrip) {
  const std::string dir = TestDir();
  const float v = 3.25f;
  absl::StatusOr<Tensor> scalar =
      Tensor::FromValues<float>({}, absl::MakeConstSpan(&v, 1));
  ASSERT_THAT(scalar, IsOk());
  ASSERT_THAT(WriteNpy(dir + "/s.npy", *scalar), IsOk());
  EXPECT_THAT(ReadRaw(dir + "/s.npy"), HasSubstr("'shape': (), }"));
  absl::StatusOr<Tensor> s = ReadNpy(dir + "/s.npy");
  ASSERT_THAT(s, IsOk());
  ExpectBitIdentical(*scalar, *s);

  absl::StatusOr<Tensor> empty = Tensor::Zeros(DType::kInt32, {2, 0, 3});
  ASSERT_THAT(empty, IsOk());
  ASSERT_THAT(WriteNpy(dir + "/e.npy", *empty), IsOk());
  EXPECT_EQ(ReadRaw(dir + "/e.npy"), NpyHeaderV1(NpyDType::kInt32, {2, 0, 3}));
  absl::StatusOr<Tensor> e = ReadNpy(dir + "/e.npy");
  ASSERT_THAT(e, IsOk());
  EXPECT_THAT(e->shape(), ElementsAre(2, 0, 3));
  EXPECT_EQ(e->dtype(), DType::kInt32);
}

TEST(NpyTest, WriteReplacesAtomicallyAndLeavesNoTemporaries) {
  const std::string dir = TestDir();
  const std::string path = dir + "/t.npy";
  WriteRaw(path, "old contents");
  absl::StatusOr<Tensor> t = Tensor::Zeros(DType::kFloat32, {4});
  ASSERT_THAT(t, IsOk());
  ASSERT_THAT(WriteNpy(path, *t), IsOk());
  EXPECT_THAT(ListDir(dir), ElementsAre("t.npy"));
  EXPECT_THAT(ReadNpy(path), IsOk());
}

TEST(NpyTest, WriteIntoMissingDirectoryFails) {
  const std::string dir = TestDir();
  absl::StatusOr<Tensor> t = Tensor::Zeros(DType::kFloat32, {4});
  ASSERT_THAT(t, IsOk());
  EXPECT_THAT(
      WriteNpy(dir + "/no/such/dir/t.npy", *t),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("no/such/dir/t.npy")));
  EXPECT_THAT(ListDir(dir), ::testing::IsEmpty());
}

TEST(NpyTest, ReadsVersion2And3Headers) {
  const std::string dir = TestDir();
  const std::string dict =
      "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }\n";
  for (char major : {'\x02', '\x03'}) {
    std::string file("\x93NUMPY", 6);
    file.push_back(major);
    file.push_back('\0');
    file += Le32(static_cast<uint32_t>(dict.size()));
    file += dict;
    file += Le32(7) + Le32(0xfffffff9u);
    const std::string path = absl::StrCat(dir, "/v", int{major}, ".npy");
    WriteRaw(path, file);
    absl::StatusOr<Tensor> t = ReadNpy(path);
    ASSERT_THAT(t, IsOk());
    EXPECT_THAT(t->span<int32_t>(), ElementsAre(7, -7));
  }
}

TEST(NpyTest, AcceptsPythonVariantsOfTheHeader) {
  // Double quotes, other key order, no trailing comma, Python 2 longs.
  const std::string file = NpyV1(
      "{\"shape\": (2L, 1L), \"fortran_order\": False, \"descr\": \"|u1\"}",
      std::string("\x05\x06", 2));
  absl::StatusOr<NpyHeader> h = ParseNpy(file, "x");
  ASSERT_THAT(h, IsOk());
  EXPECT_EQ(h->dtype, NpyDType::kUInt8);
  EXPECT_THAT(h->shape, ElementsAre(2, 1));
}

TEST(NpyTest, Int64IsParsedButNotReadIntoATensor) {
  const std::string dir = TestDir();
  const std::string file =
      NpyV1("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }",
            std::string(8, '\0'));
  absl::StatusOr<NpyHeader> h = ParseNpy(file, "x");
  ASSERT_THAT(h, IsOk());
  EXPECT_EQ(h->dtype, NpyDType::kInt64);
  EXPECT_EQ(h->data_bytes, 8);
  WriteRaw(dir + "/l.npy", file);
  EXPECT_THAT(ReadNpy(dir + "/l.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'<i8' cannot be held in a tensor")));
}

struct BadCase {
  const char* name;
  std::string file;
  const char* message;
};

TEST(NpyTest, RejectsMalformedFilesWithClearMessages) {
  const std::string f4 = "'descr': '<f4', 'fortran_order': False";
  const std::string ok =
      NpyV1(absl::StrCat("{", f4, ", 'shape': (2,), }"), std::string(8, 'x'));
  const std::vector<BadCase> cases = {
      {"bad magic", "PK\x03\x04 not numpy",
       "bad magic: expected \"\\x93NUMPY\""},
      {"short magic", "\x93NUM", "truncated file: expected at least 8 bytes"},
      {"version", std::string("\x93NUMPY\x04\x00\x10\x00", 10),
       "unsupported NPY format version 4.0"},
      {"minor version", std::string("\x93NUMPY\x01\x01\x10\x00", 10),
       "unsupported NPY format version 1.1"},
      {"no length", std::string("\x93NUMPY\x02\x00\x10", 9),
       "truncated file: expected at least 12 bytes"},
      {"short header", ok.substr(0, 40),
       "truncated file: expected at least 128 bytes for the NPY header, got "
       "40"},
      {"huge header", std::string("\x93NUMPY\x02\x00\x00\x00\x00\x10", 12),
       "header length 268435456 exceeds the limit of 65536 bytes"},
      {"truncated data", ok.substr(0, ok.size() - 3),
       "truncated file: expected 136 bytes (header 128 + <f4 data [2] 8), got "
       "133"},
      {"trailing data", ok + "zz",
       "trailing bytes: expected 136 bytes (header 128 + <f4 data [2] 8), got "
       "138"},
      {"fortran",
       NpyV1("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }",
             std::string(16, 'x')),
       "fortran_order is True; only C-order arrays are supported"},
      {"big endian",
       NpyV1("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }",
             std::string(4, 'x')),
       "big-endian dtype '>f4' is not supported; convert with a.astype('<f4')"},
      {"float64",
       NpyV1("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }",
             std::string(8, 'x')),
       "unsupported dtype '<f8' (supported: '<f4', '<i4', '<i8', '|u1')"},
      {"structured",
       NpyV1(
           "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }",
           std::string(4, 'x')),
       "'descr' is not a plain dtype string"},
      {"missing shape", NpyV1(absl::StrCat("{", f4, "}"), std::string(4, 'x')),
       "NPY header lacks 'shape'"},
      {"unknown key",
       NpyV1(absl::StrCat("{", f4, ", 'shape': (1,), 'x': 1}"), ""),
       "unexpected key (expected descr, fortran_order, shape)"},
      {"duplicate key",
       NpyV1(absl::StrCat("{", f4, ", 'shape': (1,), 'shape': (1,)}"), ""),
       "duplicate key 'shape'"},
      {"negative dim", NpyV1(absl::StrCat("{", f4, ", 'shape': (-1,), }"), ""),
       "malformed NPY header at offset 51: expected a dimension"},
      {"float dim", NpyV1(absl::StrCat("{", f4, ", 'shape': (2.5,), }"), ""),
       "expected ',' or ')' in 'shape'"},
      {"overflowing dim",
       NpyV1(absl::StrCat("{", f4, ", 'shape': (99999999999999999999,), }"),
             ""),
       "dimension too large"},
      {"overflowing shape",
       NpyV1(absl::StrCat("{", f4, ", 'shape': (4294967296, 4294967296), }"),
             ""),
       "NPY shape [4294967296, 4294967296] is too large"},
      {"bad bool",
       NpyV1("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,), }", ""),
       "'fortran_order' must be True or False"},
      {"unterminated", NpyV1("{'descr': '<f4", ""), "unterminated string"},
      {"not a dict", NpyV1("[1, 2]", ""), "expected '{'"},
      {"junk after", NpyV1(absl::StrCat("{", f4, ", 'shape': (1,)} junk"), ""),
       "unexpected text after '}'"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_THAT(
        ParseNpy(c.file, "inputs \"a.npy\""),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 AllOf(HasSubstr("inputs \"a.npy\": "), HasSubstr(c.message))));
  }
}

TEST(NpyTest, EveryTruncationAndHeaderByteFlipIsHandled) {
  absl::StatusOr<Tensor> t = Tensor::Zeros(DType::kFloat32, {3, 5});
  ASSERT_THAT(t, IsOk());
  const std::string file =
      NpyHeaderV1(NpyDType::kFloat32, {3, 5}) + std::string(60, '\x01');
  ASSERT_THAT(ParseNpy(file, "x"), IsOk());
  for (size_t n = 0; n < file.size(); ++n) {
    EXPECT_THAT(ParseNpy(file.substr(0, n), "x"),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << n;
  }
  // Flipping any header byte either still parses to a consistent header or
  // fails cleanly (ASan checks nothing is read out of bounds).
  for (size_t i = 0; i < 128; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string mutated = file;
      mutated[i] = static_cast<char>(mutated[i] ^ (1 << bit));
      absl::StatusOr<NpyHeader> h = ParseNpy(mutated, "x");
      if (h.ok()) {
        EXPECT_EQ(h->data_offset + h->data_bytes,
                  static_cast<int64_t>(mutated.size()));
      }
    }
  }
}

TEST(NpyTest, ReadErrorsNameThePath) {
  const std::string dir = TestDir();
  EXPECT_THAT(
      ReadNpy(dir + "/missing.npy"),
      StatusIs(absl::StatusCode::kNotFound,
               AllOf(HasSubstr("missing.npy"), HasSubstr("no such file"))));
  EXPECT_THAT(ReadNpy(dir), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("not a regular file")));
  absl::StatusOr<Tensor> t = Tensor::Zeros(DType::kFloat32, {100});
  ASSERT_THAT(t, IsOk());
  ASSERT_THAT(WriteNpy(dir + "/big.npy", *t), IsOk());
  EXPECT_THAT(ReadNpy(dir + "/big.npy", /*max_file_bytes=*/400),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("big.npy\": file is 528 bytes, over the limit "
                                 "of 400 bytes")));
  EXPECT_THAT(ReadNpy(dir + "/big.npy", /*max_file_bytes=*/528), IsOk());
  // Tensor limits apply to what a file may declare.
  WriteRaw(dir + "/rank9.npy", NpyV1("{'descr': '|u1', 'fortran_order': False, "
                                     "'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }",
                                     "x"));
  EXPECT_THAT(
      ReadNpy(dir + "/rank9.npy"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank9.npy\": ")));
}

}  // namespace
}  // namespace lockstep::worker
