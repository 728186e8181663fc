#include "worker/data/npy.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "worker/data/byte_order.h"

namespace lockstep::worker {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr int64_t kMagicBytes = 6;
// Longest header accepted (NumPy's own reader stops at 10000 by default).
constexpr int64_t kMaxHeaderBytes = 65536;
// Most dimensions accepted in a header (NumPy's limit is 64).
constexpr int kMaxNpyRank = 64;
// NumPy aligns the array data to this many bytes.
constexpr int64_t kArrayAlign = 64;

// Whether `descr` has the form of a NumPy type string ("<f8", "|u1",
// "b1"): such a descr is named in errors. Anything else is file content,
// which errors never quote.
bool LooksLikeTypeString(absl::string_view descr) {
  size_t i = 0;
  if (i < descr.size() &&
      absl::string_view("<>|=").find(descr[i]) != absl::string_view::npos) {
    ++i;
  }
  if (i >= descr.size() || !absl::ascii_isalpha(descr[i])) return false;
  ++i;
  const size_t digits = descr.size() - i;
  if (digits > 2) return false;
  for (; i < descr.size(); ++i) {
    if (!absl::ascii_isdigit(descr[i])) return false;
  }
  return true;
}

// A recursive-descent parser for the one dict literal NPY headers hold:
//   { 'key': value, ... }  with value = 'string' | True | False | (int, ...)
class HeaderParser {
 public:
  HeaderParser(absl::string_view text, absl::string_view what)
      : text_(text), what_(what) {}

  absl::Status Parse(NpyHeader* h) {
    bool have_descr = false, have_order = false, have_shape = false;
    std::string descr;
    bool fortran_order = false;
    SkipSpace();
    LS_RETURN_IF_ERROR(Expect('{'));
    while (true) {
      SkipSpace();
      if (Peek() == '}') {
        ++pos_;
        break;
      }
      std::string key;
      LS_RETURN_IF_ERROR(ParseString(&key));
      SkipSpace();
      LS_RETURN_IF_ERROR(Expect(':'));
      SkipSpace();
      if (key == "descr") {
        if (have_descr) return Error("duplicate key 'descr'");
        have_descr = true;
        if (Peek() != '\'' && Peek() != '"') {
          return Error(
              "'descr' is not a plain dtype string (structured dtypes are not "
              "supported)");
        }
        LS_RETURN_IF_ERROR(ParseString(&descr));
      } else if (key == "fortran_order") {
        if (have_order) return Error("duplicate key 'fortran_order'");
        have_order = true;
        LS_RETURN_IF_ERROR(ParseBool(&fortran_order));
      } else if (key == "shape") {
        if (have_shape) return Error("duplicate key 'shape'");
        have_shape = true;
        LS_RETURN_IF_ERROR(ParseShape(&h->shape));
      } else {
        return Error("unexpected key (expected descr, fortran_order, shape)");
      }
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
      } else if (Peek() != '}') {
        return Error("expected ',' or '}'");
      }
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after '}'");
    if (!have_descr || !have_order || !have_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          what_, ": NPY header lacks ",
          !have_descr ? "'descr'"
                      : (!have_order ? "'fortran_order'" : "'shape'")));
    }
    if (fortran_order) {
      return absl::InvalidArgumentError(absl::StrCat(
          what_,
          ": fortran_order is True; only C-order arrays are supported (save "
          "numpy.ascontiguousarray(a) instead)"));
    }
    if (descr == "<f4") {
      h->dtype = NpyDType::kFloat32;
    } else if (descr == "<i4") {
      h->dtype = NpyDType::kInt32;
    } else if (descr == "<i8") {
      h->dtype = NpyDType::kInt64;
    } else if (descr == "|u1" || descr == "<u1" || descr == ">u1" ||
               descr == "=u1") {
      h->dtype = NpyDType::kUInt8;
    } else if (descr == ">f4" || descr == ">i4" || descr == ">i8") {
      return absl::InvalidArgumentError(
          absl::StrCat(what_, ": big-endian dtype '", descr,
                       "' is not supported; convert with a.astype('<",
                       descr.substr(1), "')"));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          what_, ": unsupported dtype",
          LooksLikeTypeString(descr) ? absl::StrCat(" '", descr, "'")
                                     : std::string(),
          " (supported: '<f4', '<i4', '<i8', '|u1')"));
    }
    return absl::OkStatus();
  }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void SkipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
            text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  absl::Status Error(absl::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat(
        what_, ": malformed NPY header at offset ", pos_, ": ", msg));
  }
  absl::Status Expect(char c) {
    if (Peek() != c)
      return Error(absl::StrCat("expected '", std::string(1, c), "'"));
    ++pos_;
    return absl::OkStatus();
  }
  // 'text' or "text"; escapes are not needed by any valid key or descr.
  absl::Status ParseString(std::string* out) {
    const char quote = Peek();
    if (quote != '\'' && quote != '"') return Error("expected a string");
    const size_t start = ++pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') return Error("escapes in strings not supported");
      ++pos_;
    }
    if (pos_ >= text_.size()) return Error("unterminated string");
    *out = std::string(text_.substr(start, pos_ - start));
    ++pos_;
    return absl::OkStatus();
  }
  absl::Status ParseBool(bool* out) {
    if (text_.substr(pos_, 4) == "True") {
      *out = true;
      pos_ += 4;
    } else if (text_.substr(pos_, 5) == "False") {
      *out = false;
      pos_ += 5;
    } else {
      return Error("'fortran_order' must be True or False");
    }
    return absl::OkStatus();
  }
  // A non-negative decimal integer, with the 'L' suffix of Python 2 headers.
  absl::Status ParseDim(int64_t* out) {
    if (Peek() < '0' || Peek() > '9') return Error("expected a dimension");
    int64_t v = 0;
    while (Peek() >= '0' && Peek() <= '9') {
      const int d = Peek() - '0';
      if (v > (std::numeric_limits<int64_t>::max() - d) / 10) {
        return Error("dimension too large");
      }
      v = v * 10 + d;
      ++pos_;
    }
    if (Peek() == 'L') ++pos_;
    *out = v;
    return absl::OkStatus();
  }
  absl::Status ParseShape(std::vector<int64_t>* shape) {
    shape->clear();
    LS_RETURN_IF_ERROR(Expect('('));
    while (true) {
      SkipSpace();
      if (Peek() == ')') {
        ++pos_;
        break;
      }
      if (static_cast<int>(shape->size()) == kMaxNpyRank) {
        return Error(absl::StrCat("more than ", kMaxNpyRank, " dimensions"));
      }
      int64_t d;
      LS_RETURN_IF_ERROR(ParseDim(&d));
      shape->push_back(d);
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
      } else if (Peek() != ')') {
        return Error("expected ',' or ')' in 'shape'");
      }
    }
    return absl::OkStatus();
  }

  absl::string_view text_;
  absl::string_view what_;
  size_t pos_ = 0;
};

// Python's repr of a shape tuple: "()", "(5,)", "(2, 3)".
std::string ShapeRepr(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

absl::StatusOr<NpyDType> NpyDTypeOf(kernels::DType dtype) {
  switch (dtype) {
    case kernels::DType::kFloat32:
      return NpyDType::kFloat32;
    case kernels::DType::kInt32:
      return NpyDType::kInt32;
    case kernels::DType::kUInt8:
      return NpyDType::kUInt8;
  }
  return absl::InvalidArgumentError("tensor has an unknown dtype");
}

}  // namespace

int64_t NpyDTypeSize(NpyDType dtype) {
  switch (dtype) {
    case NpyDType::kFloat32:
    case NpyDType::kInt32:
      return 4;
    case NpyDType::kInt64:
      return 8;
    case NpyDType::kUInt8:
      return 1;
  }
  return 1;
}

absl::string_view NpyDescr(NpyDType dtype) {
  switch (dtype) {
    case NpyDType::kFloat32:
      return "<f4";
    case NpyDType::kInt32:
      return "<i4";
    case NpyDType::kInt64:
      return "<i8";
    case NpyDType::kUInt8:
      return "|u1";
  }
  return "?";
}

absl::StatusOr<NpyHeader> ParseNpy(absl::string_view file,
                                   absl::string_view what) {
  const int64_t size = static_cast<int64_t>(file.size());
  const absl::string_view magic(kMagic, kMagicBytes);
  const size_t head = std::min<size_t>(file.size(), kMagicBytes);
  if (file.substr(0, head) != magic.substr(0, head)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": bad magic: expected \"\\x93NUMPY\" (not an .npy file)"));
  }
  if (size < kMagicBytes + 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": truncated file: expected at least ", kMagicBytes + 2,
        " bytes of NPY magic and version, got ", size));
  }
  NpyHeader h;
  h.major_version = static_cast<unsigned char>(file[6]);
  h.minor_version = static_cast<unsigned char>(file[7]);
  if (h.major_version < 1 || h.major_version > 3 || h.minor_version != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": unsupported NPY format version ", h.major_version,
                     ".", h.minor_version, " (supported: 1.0, 2.0, 3.0)"));
  }
  const int64_t len_bytes = h.major_version == 1 ? 2 : 4;
  const int64_t prefix = kMagicBytes + 2 + len_bytes;
  if (size < prefix) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": truncated file: expected at least ", prefix,
        " bytes of NPY magic, version and header length, got ", size));
  }
  const int64_t header_len = len_bytes == 2 ? LoadLittleEndian16(&file[8])
                                            : LoadLittleEndian32(&file[8]);
  if (header_len > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": NPY header length ", header_len,
                     " exceeds the limit of ", kMaxHeaderBytes, " bytes"));
  }
  h.data_offset = prefix + header_len;
  if (size < h.data_offset) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": truncated file: expected at least ",
                     h.data_offset, " bytes for the NPY header, got ", size));
  }
  HeaderParser parser(file.substr(prefix, header_len), what);
  LS_RETURN_IF_ERROR(parser.Parse(&h));

  const int64_t elem = NpyDTypeSize(h.dtype);
  const int64_t max_elements =
      (std::numeric_limits<int64_t>::max() - h.data_offset) / elem;
  int64_t n = 1;
  for (int64_t d : h.shape) {
    if (d != 0 && n > max_elements / d) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": NPY shape ", kernels::ShapeString(h.shape),
                       " is too large"));
    }
    n *= d;
  }
  h.num_elements = n;
  h.data_bytes = n * elem;
  const int64_t expected = h.data_offset + h.data_bytes;
  if (size < expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": truncated file: expected ", expected, " bytes (header ",
        h.data_offset, " + ", NpyDescr(h.dtype), " data ",
        kernels::ShapeString(h.shape), " ", h.data_bytes, "), got ", size));
  }
  if (size > expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": trailing bytes: expected ", expected, " bytes (header ",
        h.data_offset, " + ", NpyDescr(h.dtype), " data ",
        kernels::ShapeString(h.shape), " ", h.data_bytes, "), got ", size));
  }
  return h;
}

std::string NpyHeaderV1(NpyDType dtype, const std::vector<int64_t>& shape) {
  const std::string dict = absl::StrCat(
      "{'descr': '", NpyDescr(dtype),
      "', 'fortran_order': False, 'shape': ", ShapeRepr(shape), ", }");
  // As numpy.lib.format._wrap_header: hlen counts the final '\n'; the padding
  // makes magic + version + length + header a multiple of 64 (a full 64
  // spaces when it already is one).
  const int64_t hlen = static_cast<int64_t>(dict.size()) + 1;
  const int64_t pad =
      kArrayAlign - ((kMagicBytes + 2 + 2 + hlen) % kArrayAlign);
  std::string out(kMagic, kMagicBytes);
  out.push_back('\x01');
  out.push_back('\x00');
  AppendLittleEndian16(static_cast<uint16_t>(hlen + pad), &out);
  out += dict;
  out.append(static_cast<size_t>(pad), ' ');
  out.push_back('\n');
  return out;
}

absl::Status WriteNpy(const std::string& path, const kernels::Tensor& t) {
  LS_ASSIGN_OR_RETURN(const NpyDType dtype, NpyDTypeOf(t.dtype()));
  const std::string header = NpyHeaderV1(dtype, t.shape());
  const int elem = static_cast<int>(NpyDTypeSize(dtype));
  if (kHostIsLittleEndian || elem == 1) {
    const absl::string_view data(static_cast<const char*>(t.raw_data()),
                                 t.numel() == 0 ? 0 : t.bytes());
    return WriteFileAtomically(path, {header, data});
  }
  std::string data(static_cast<size_t>(t.bytes()), '\0');
  CopyLittleEndian(t.raw_data(), t.numel(), elem, data.data());
  return WriteFileAtomically(path, {header, data});
}

absl::StatusOr<kernels::Tensor> ReadNpy(const std::string& path,
                                        int64_t max_file_bytes) {
  const std::string what = QuotedPath(path);
  LS_ASSIGN_OR_RETURN(const std::string file,
                      ReadWholeFile(path, what, max_file_bytes));
  LS_ASSIGN_OR_RETURN(const NpyHeader h, ParseNpy(file, what));
  kernels::DType dtype;
  switch (h.dtype) {
    case NpyDType::kFloat32:
      dtype = kernels::DType::kFloat32;
      break;
    case NpyDType::kInt32:
      dtype = kernels::DType::kInt32;
      break;
    case NpyDType::kUInt8:
      dtype = kernels::DType::kUInt8;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": dtype '", NpyDescr(h.dtype),
          "' cannot be held in a tensor (supported: '<f4', '<i4', '|u1')"));
  }
  absl::StatusOr<kernels::Tensor> t = kernels::Tensor::Zeros(dtype, h.shape);
  if (!t.ok()) {
    return absl::Status(t.status().code(),
                        absl::StrCat(what, ": ", t.status().message()));
  }
  if (h.num_elements > 0) {
    CopyLittleEndian(file.data() + h.data_offset, h.num_elements,
                     static_cast<int>(NpyDTypeSize(h.dtype)), t->raw_data());
  }
  return t;
}

}  // namespace lockstep::worker
