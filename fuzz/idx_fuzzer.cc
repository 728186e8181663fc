// IDX files (worker/data/idx.h ParseIdx), the MNIST format of file
// datasets. The first input byte picks the expected magic (any, images,
// labels), the rest is the file.
//
// Invariants for an accepted file: the magic is the expected one (when
// given) of the form 0x000008NN with NN >= 1 dims; dims are < 2^32;
// num_elements = data_bytes = the dims' product = the bytes after the
// header, exactly. Every refusal is INVALID_ARGUMENT starting with the
// file's label.
#include <cstddef>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_check.h"
#include "worker/data/idx.h"

using ::lockstep::worker::IdxHeader;
using ::lockstep::worker::kIdxImagesMagic;
using ::lockstep::worker::kIdxLabelsMagic;
using ::lockstep::worker::ParseIdx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint32_t magics[] = {0, kIdxImagesMagic, kIdxLabelsMagic};
  const uint32_t expected = magics[data[0] % 3];
  const absl::string_view file(reinterpret_cast<const char*>(data + 1),
                               size - 1);
  absl::StatusOr<IdxHeader> h = ParseIdx(file, "x.idx", expected);
  if (!h.ok()) {
    FUZZ_CHECK(h.status().code() == absl::StatusCode::kInvalidArgument,
               h.status().ToString());
    FUZZ_CHECK(absl::StartsWith(h.status().message(), "x.idx: "),
               h.status().ToString());
    return 0;
  }
  FUZZ_CHECK(expected == 0 || h->magic == expected, "wrong magic accepted");
  FUZZ_CHECK((h->magic >> 8) == 0x08, "non-uint8 magic accepted");
  const size_t ndims = h->magic & 0xff;
  FUZZ_CHECK(ndims >= 1 && h->dims.size() == ndims,
             "dims do not match the magic");
  FUZZ_CHECK(h->data_offset == 4 + 4 * static_cast<int64_t>(ndims),
             "data_offset is not 4 + 4 x dims");
  int64_t n = 1;
  for (int64_t d : h->dims) {
    FUZZ_CHECK(d >= 0 && d <= std::numeric_limits<uint32_t>::max(),
               "dim outside [0, 2^32)");
    FUZZ_CHECK(d == 0 || n <= std::numeric_limits<int64_t>::max() / d,
               "element count overflows");
    n *= d;
  }
  FUZZ_CHECK(n == h->num_elements && n == h->data_bytes,
             "num_elements / data_bytes are not the dims' product");
  FUZZ_CHECK(
      h->data_offset + h->data_bytes == static_cast<int64_t>(file.size()),
      "accepted a file whose size does not match its header");
  return 0;
}
