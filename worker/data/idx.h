// IDX files, the format of the MNIST distribution (LeCun et al.):
//
//   magic      4 bytes: 0x00 0x00 <element type> <number of dimensions>
//   dims       one big-endian uint32 per dimension
//   data       the elements in C (row-major) order, big-endian
//
// MNIST images are magic 0x00000803 (uint8, [n, rows, cols]) and labels
// 0x00000801 (uint8, [n]). Only the uint8 element type (0x08) is supported;
// the others (int8 0x09, int16 0x0B, int32 0x0C, float32 0x0D, float64 0x0E)
// are rejected by name. A file must hold exactly the header plus the data:
// a short file is "truncated", a longer one has "trailing bytes".
//
// Nothing here reads past the file's bytes, whatever they hold; every error is
// an absl::Status whose message starts with the file's label.
#ifndef LOCKSTEP_WORKER_DATA_IDX_H_
#define LOCKSTEP_WORKER_DATA_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/tensor.h"
#include "worker/data/file_io.h"

namespace lockstep::worker {

// MNIST magics.
inline constexpr uint32_t kIdxImagesMagic = 0x00000803;  // uint8 [n, r, c]
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // uint8 [n]
// The uint8 element type code.
inline constexpr uint8_t kIdxUInt8 = 0x08;

// A parsed IDX header.
struct IdxHeader {
  uint32_t magic = 0;
  uint8_t type_code = kIdxUInt8;
  std::vector<int64_t> dims;  // At least one.
  int64_t num_elements = 0;
  // Offset of the first data byte: 4 + 4 * dims.size().
  int64_t data_offset = 0;
  // Bytes of data (num_elements, for uint8).
  int64_t data_bytes = 0;
};

// Parses and validates the IDX file whose complete contents are `file`.
// When expected_magic != 0 the magic must equal it ("bad magic: expected
// 0x00000803, got 0x00000801"); this is checked first. On success
// data_offset + data_bytes == file.size(). INVALID_ARGUMENT, prefixed by
// `what`, on every malformed input.
absl::StatusOr<IdxHeader> ParseIdx(absl::string_view file,
                                   absl::string_view what,
                                   uint32_t expected_magic = 0);

// Reads a uint8 IDX file into a uint8 tensor of its dims.
absl::StatusOr<kernels::Tensor> ReadIdx(
    const std::string& path, int64_t max_file_bytes = kDefaultMaxFileBytes);

// Writes a uint8 tensor of rank 1 .. 255 as an IDX file (magic
// 0x000008<rank>), atomically. Used by tests to create fixtures.
absl::Status WriteIdx(const std::string& path, const kernels::Tensor& t);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_DATA_IDX_H_
