// Small helpers shared by the model validators (plan.cc, job_config.cc):
// INVALID_ARGUMENT messages that name the field and the limit.
#ifndef LOCKSTEP_MODEL_CHECK_H_
#define LOCKSTEP_MODEL_CHECK_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace lockstep::model::internal {

// softmax_xent takes at most 2^24 examples (float(N) must be exact; see
// kernels/ops/softmax_xent.h, kMaxSoftmaxBatch).
inline constexpr int64_t kMaxLossBatch = int64_t{1} << 24;

inline absl::Status Invalid(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

// A user-supplied string quoted for a message: escaped, cut at 64 bytes.
inline std::string Quote(absl::string_view s) {
  constexpr size_t kMax = 64;
  if (s.size() > kMax) {
    return absl::StrCat("\"", absl::CHexEscape(s.substr(0, kMax)), "\"...");
  }
  return absl::StrCat("\"", absl::CHexEscape(s), "\"");
}

// "<v> is outside <lo>..<hi>" below the range, "<v> exceeds the limit of
// <hi>" above it.
inline absl::Status CheckRange(absl::string_view field, int64_t value,
                               int64_t lo, int64_t hi) {
  if (value < lo) {
    return Invalid(
        absl::StrFormat("%s: %d is outside %d..%d", field, value, lo, hi));
  }
  if (value > hi) {
    return Invalid(
        absl::StrFormat("%s: %d exceeds the limit of %d", field, value, hi));
  }
  return absl::OkStatus();
}

}  // namespace lockstep::model::internal

#endif  // LOCKSTEP_MODEL_CHECK_H_
