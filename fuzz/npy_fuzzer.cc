// .npy files (worker/data/npy.h ParseNpy), as the worker reads dataset
// files and `lockstep` reads dumped tensors.
//
// Invariants for an accepted file:
//   - the element count is the product of the shape, and element count x
//     element size = data_bytes = the bytes after the header, exactly;
//   - the version is 1.0, 2.0 or 3.0 and the shape has at most 64 dims;
//   - NpyHeaderV1 for the parsed dtype and shape, followed by the same
//     data, parses to the same dtype, shape and element count.
// Every refusal is INVALID_ARGUMENT starting with the file's label.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_check.h"
#include "worker/data/npy.h"

using ::lockstep::worker::NpyDTypeSize;
using ::lockstep::worker::NpyHeader;
using ::lockstep::worker::NpyHeaderV1;
using ::lockstep::worker::ParseNpy;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view file(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<NpyHeader> h = ParseNpy(file, "x.npy");
  if (!h.ok()) {
    FUZZ_CHECK(h.status().code() == absl::StatusCode::kInvalidArgument,
               h.status().ToString());
    FUZZ_CHECK(absl::StartsWith(h.status().message(), "x.npy: "),
               h.status().ToString());
    return 0;
  }
  FUZZ_CHECK(
      h->major_version >= 1 && h->major_version <= 3 && h->minor_version == 0,
      "accepted an unsupported version");
  FUZZ_CHECK(h->shape.size() <= 64, "accepted more than 64 dims");
  int64_t n = 1;
  for (int64_t d : h->shape) {
    FUZZ_CHECK(d >= 0, "accepted a negative dim");
    FUZZ_CHECK(d == 0 || n <= std::numeric_limits<int64_t>::max() / d,
               "element count overflows");
    n *= d;
  }
  FUZZ_CHECK(n == h->num_elements, "num_elements is not the shape product");
  const int64_t elem = NpyDTypeSize(h->dtype);
  FUZZ_CHECK(h->num_elements <= std::numeric_limits<int64_t>::max() / elem,
             "data_bytes overflows");
  FUZZ_CHECK(h->num_elements * elem == h->data_bytes,
             "data_bytes is not num_elements x element size");
  FUZZ_CHECK(
      h->data_offset >= 10 && h->data_offset <= h->data_offset + h->data_bytes,
      "data_offset out of range");
  FUZZ_CHECK(h->data_bytes <= static_cast<int64_t>(size) - h->data_offset,
             "element count x size exceeds the data after the header");
  FUZZ_CHECK(h->data_offset + h->data_bytes == static_cast<int64_t>(size),
             "accepted a file whose size does not match its header");

  // What the writer emits for this array parses back to the same header.
  const std::string rewritten =
      NpyHeaderV1(h->dtype, h->shape) +
      std::string(file.substr(static_cast<size_t>(h->data_offset)));
  absl::StatusOr<NpyHeader> again = ParseNpy(rewritten, "rewritten.npy");
  FUZZ_CHECK(again.ok(), again.status().ToString());
  FUZZ_CHECK(again->dtype == h->dtype && again->shape == h->shape &&
                 again->num_elements == h->num_elements &&
                 again->data_bytes == h->data_bytes,
             "NpyHeaderV1 round trip changed the header");
  FUZZ_CHECK(again->data_offset % 64 == 0, "NpyHeaderV1 is not 64-aligned");
  return 0;
}
