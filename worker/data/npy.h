// NumPy .npy files: read and write.
//
// The format (numpy.lib.format, "NEP 1"): the magic "\x93NUMPY", a major and
// a minor version byte, the header length (little-endian uint16 in version
// 1.0, uint32 in 2.0 and 3.0), then the header: a Python dict literal
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and a final '\n', then the raw array bytes.
//
// Supported here:
//   versions  1.0, 2.0 and 3.0 (read); 1.0 (written)
//   dtypes    '<f4' float32, '<i4' int32, '<i8' int64 (read only, for
//             labels), '|u1' uint8; everything else, big-endian included,
//             is rejected with a message naming the dtype
//   order     C order only: fortran_order True is rejected
// A file must hold exactly the header plus the array: a short file is
// "truncated", a longer one has "trailing bytes"; both are errors.
//
// Nothing here reads past the file's bytes, whatever they hold; every error is
// an absl::Status whose message starts with the file's label.
#ifndef LOCKSTEP_WORKER_DATA_NPY_H_
#define LOCKSTEP_WORKER_DATA_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/tensor.h"
#include "worker/data/file_io.h"

namespace lockstep::worker {

// Element types an .npy file may hold here.
enum class NpyDType : uint8_t {
  kFloat32,  // '<f4'
  kInt32,    // '<i4'
  kInt64,    // '<i8'
  kUInt8,    // '|u1'
};

// Bytes per element (4, 4, 8, 1).
int64_t NpyDTypeSize(NpyDType dtype);
// The descr string: "<f4", "<i4", "<i8", "|u1".
absl::string_view NpyDescr(NpyDType dtype);

// A parsed .npy header.
struct NpyHeader {
  int major_version = 1;
  int minor_version = 0;
  NpyDType dtype = NpyDType::kFloat32;
  // The array's shape; empty for a 0-d (scalar) array.
  std::vector<int64_t> shape;
  // Elements in the array (1 for a scalar).
  int64_t num_elements = 0;
  // Offset of the first array byte from the start of the file.
  int64_t data_offset = 0;
  // Bytes of array data: num_elements * NpyDTypeSize(dtype).
  int64_t data_bytes = 0;
};

// Parses and validates the .npy file whose complete contents are `file`.
// On success data_offset + data_bytes == file.size(). INVALID_ARGUMENT,
// prefixed by `what`, for a bad magic, an unsupported version, a malformed or
// oversized header, an unsupported dtype, fortran_order True, a negative or
// overflowing shape, and a file size that does not match the header.
absl::StatusOr<NpyHeader> ParseNpy(absl::string_view file,
                                   absl::string_view what);

// The complete version 1.0 header (magic through the final '\n') NumPy writes
// for a C-order array of `dtype` and `shape`: keys in sorted order, the shape
// as Python's tuple repr, padded with spaces so the data starts at a multiple
// of 64 bytes.
std::string NpyHeaderV1(NpyDType dtype, const std::vector<int64_t>& shape);

// Writes `t` (float32 as '<f4', int32 as '<i4', uint8 as '|u1'; shape as
// is, a rank-0 tensor as a 0-d array) to `path` in format 1.0, atomically
// (temporary file + rename, see WriteFileAtomically).
absl::Status WriteNpy(const std::string& path, const kernels::Tensor& t);

// Reads an .npy file holding '<f4', '<i4' or '|u1' data into a tensor of the
// same shape and bits ('<i8' cannot be held in a Tensor and is rejected; see
// ParseNpy for the other checks). INVALID_ARGUMENT when the shape exceeds the
// tensor limits (kernels/tensor.h); errors of ReadWholeFile for a missing or
// too large file.
absl::StatusOr<kernels::Tensor> ReadNpy(
    const std::string& path, int64_t max_file_bytes = kDefaultMaxFileBytes);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_DATA_NPY_H_
