#include "kernels/cuda/test_cases.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace lockstep::kernels::cuda::testing {

absl::StatusOr<std::vector<Tensor>> RunRegistered(const Registry& registry,
                                                  absl::string_view backend,
                                                  const OpCase& c) {
  return RunOpCase(registry,
                   KernelKey{c.op, Mode::kCanonical, kCanonicalAlgorithm,
                             std::string(backend)},
                   c);
}

::testing::AssertionResult SameBits(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) {
    return ::testing::AssertionFailure()
           << "got " << got.DebugString() << ", want " << want.DebugString();
  }
  const int64_t i = FirstDifferingElement(got, want);
  if (i < 0) return ::testing::AssertionSuccess();
  if (DTypeSize(got.dtype()) != 4) {
    return ::testing::AssertionFailure()
           << absl::StrFormat("first differing element at index 0x%x", i);
  }
  uint32_t a, b;
  std::memcpy(&a, static_cast<const char*>(got.raw_data()) + 4 * i, 4);
  std::memcpy(&b, static_cast<const char*>(want.raw_data()) + 4 * i, 4);
  float fa, fb;
  std::memcpy(&fa, &a, 4);
  std::memcpy(&fb, &b, 4);
  return ::testing::AssertionFailure() << absl::StrFormat(
             "first differing element at index 0x%x: got 0x%08x (%.9g), "
             "want 0x%08x (%.9g)",
             i, a, fa, b, fb);
}

}  // namespace lockstep::kernels::cuda::testing
