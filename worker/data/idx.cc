#include "worker/data/idx.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/data/byte_order.h"

namespace lockstep::worker {
namespace {

std::string Hex32(uint32_t v) { return absl::StrFormat("0x%08x", v); }

// The name of an IDX element type code, or "" for an unknown code.
absl::string_view IdxTypeName(uint8_t code) {
  switch (code) {
    case 0x08:
      return "uint8";
    case 0x09:
      return "int8";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
    default:
      return "";
  }
}

std::string DescribeMagic(uint32_t magic) {
  if (magic == kIdxImagesMagic) return "uint8 images [n, rows, cols]";
  if (magic == kIdxLabelsMagic) return "uint8 labels [n]";
  return absl::StrCat("uint8, ", magic & 0xff, " dimensions");
}

}  // namespace

absl::StatusOr<IdxHeader> ParseIdx(absl::string_view file,
                                   absl::string_view what,
                                   uint32_t expected_magic) {
  const int64_t size = static_cast<int64_t>(file.size());
  if (size < 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": truncated file: expected at least 4 bytes of IDX magic, got ",
        size));
  }
  IdxHeader h;
  h.magic = LoadBigEndian32(file.data());
  // Only a magic of IDX form (two zero bytes, a known element type) is
  // named in errors; other leading bytes are file content, never quoted.
  const bool idx_form =
      (h.magic >> 16) == 0 && !IdxTypeName((h.magic >> 8) & 0xff).empty();
  if (expected_magic != 0 && h.magic != expected_magic) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": bad magic: expected ", Hex32(expected_magic), " (",
        DescribeMagic(expected_magic), "), got ",
        idx_form ? Hex32(h.magic) : "a non-IDX magic (not an IDX file)"));
  }
  if ((h.magic >> 16) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": bad magic: an IDX file starts with two zero bytes"));
  }
  h.type_code = static_cast<uint8_t>((h.magic >> 8) & 0xff);
  if (h.type_code != kIdxUInt8) {
    const absl::string_view name = IdxTypeName(h.type_code);
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ",
        name.empty()
            ? absl::StrFormat("unknown IDX element type 0x%02x", h.type_code)
            : absl::StrFormat("IDX element type 0x%02x (%s)", h.type_code,
                              name),
        " is not supported (only 0x08, uint8)"));
  }
  const int ndims = static_cast<int>(h.magic & 0xff);
  if (ndims == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": IDX magic ", Hex32(h.magic),
                     " declares 0 dimensions (at least 1 required)"));
  }
  h.data_offset = 4 + 4 * int64_t{ndims};
  if (size < h.data_offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": truncated file: expected at least ", h.data_offset,
        " bytes for the IDX header with ", ndims, " dimensions, got ", size));
  }
  // Every dim is < 2^32; stop multiplying once the product cannot fit.
  const int64_t max_elements =
      std::numeric_limits<int64_t>::max() - h.data_offset;
  int64_t n = 1;
  bool overflow = false;
  for (int i = 0; i < ndims; ++i) {
    const int64_t d = LoadBigEndian32(file.data() + 4 + 4 * i);
    h.dims.push_back(d);
    if (d != 0 && n > max_elements / d) overflow = true;
    if (!overflow) n *= d;
  }
  if (overflow) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": IDX dims ", kernels::ShapeString(h.dims), " are too large"));
  }
  h.num_elements = n;
  h.data_bytes = n;  // uint8
  const int64_t expected = h.data_offset + h.data_bytes;
  if (size != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, size < expected ? ": truncated file" : ": trailing bytes",
        ": expected ", expected, " bytes (header ", h.data_offset,
        " + uint8 data ", kernels::ShapeString(h.dims), " ", h.data_bytes,
        "), got ", size));
  }
  return h;
}

absl::StatusOr<kernels::Tensor> ReadIdx(const std::string& path,
                                        int64_t max_file_bytes) {
  const std::string what = QuotedPath(path);
  LS_ASSIGN_OR_RETURN(const std::string file,
                      ReadWholeFile(path, what, max_file_bytes));
  LS_ASSIGN_OR_RETURN(const IdxHeader h, ParseIdx(file, what));
  absl::StatusOr<kernels::Tensor> t =
      kernels::Tensor::Zeros(kernels::DType::kUInt8, h.dims);
  if (!t.ok()) {
    return absl::Status(t.status().code(),
                        absl::StrCat(what, ": ", t.status().message()));
  }
  if (h.num_elements > 0) {
    std::memcpy(t->raw_data(), file.data() + h.data_offset,
                static_cast<size_t>(h.data_bytes));
  }
  return t;
}

absl::Status WriteIdx(const std::string& path, const kernels::Tensor& t) {
  if (t.dtype() != kernels::DType::kUInt8) {
    return absl::InvalidArgumentError(absl::StrCat(
        QuotedPath(path), ": WriteIdx supports uint8 tensors, got ",
        t.DebugString()));
  }
  if (t.rank() < 1 || t.rank() > 255) {
    return absl::InvalidArgumentError(absl::StrCat(
        QuotedPath(path), ": IDX needs rank 1 .. 255, got ", t.DebugString()));
  }
  std::string header;
  AppendBigEndian32(
      (uint32_t{kIdxUInt8} << 8) | static_cast<uint32_t>(t.rank()), &header);
  for (int64_t d : t.shape()) {
    if (d > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(QuotedPath(path), ": IDX dims must be < 2^32, got ",
                       t.DebugString()));
    }
    AppendBigEndian32(static_cast<uint32_t>(d), &header);
  }
  const absl::string_view data(static_cast<const char*>(t.raw_data()),
                               t.numel() == 0 ? 0 : t.bytes());
  return WriteFileAtomically(path, {header, data});
}

}  // namespace lockstep::worker
