#include "kernels/random/init.h"

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "kernels/random/philox.h"

namespace lockstep::canonical {
namespace {

absl::Status CheckBuffer(const float* out, int64_t n) {
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("n must be >= 0, got %d", n));
  }
  if (out == nullptr && n > 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("out is null but n = %d", n));
  }
  return absl::OkStatus();
}

void FillSymmetric(uint64_t seed, uint64_t stream, float limit, float* out,
                   int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = SymmetricUniformAt(seed, stream, static_cast<uint64_t>(i), limit);
  }
}

constexpr int64_t kMaxFan = int64_t{1} << 61;

}  // namespace

absl::Status FillUniform(uint64_t seed, uint64_t stream, float a, float b,
                         float* out, int64_t n) {
  if (absl::Status s = CheckBuffer(out, n); !s.ok()) return s;
  if (!std::isfinite(a) || !std::isfinite(b) || !(a < b) ||
      !std::isfinite(b - a)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "uniform bounds must be finite with a < b and b - a finite, got "
        "a = %g, b = %g",
        a, b));
  }
  for (int64_t i = 0; i < n; ++i) {
    out[i] = PhiloxUniform(seed, stream, static_cast<uint64_t>(i), a, b);
  }
  return absl::OkStatus();
}

absl::Status GlorotUniform(uint64_t seed, uint64_t stream, int64_t fan_in,
                           int64_t fan_out, float* out, int64_t n) {
  if (absl::Status s = CheckBuffer(out, n); !s.ok()) return s;
  if (fan_in < 1 || fan_out < 1 || fan_in > kMaxFan || fan_out > kMaxFan) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fan_in and fan_out must be in [1, 2^61], got %d and %d", fan_in,
        fan_out));
  }
  FillSymmetric(seed, stream, GlorotUniformLimit(fan_in, fan_out), out, n);
  return absl::OkStatus();
}

absl::Status HeUniform(uint64_t seed, uint64_t stream, int64_t fan_in,
                       float* out, int64_t n) {
  if (absl::Status s = CheckBuffer(out, n); !s.ok()) return s;
  if (fan_in < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fan_in must be >= 1, got %d", fan_in));
  }
  FillSymmetric(seed, stream, HeUniformLimit(fan_in), out, n);
  return absl::OkStatus();
}

absl::Status FillZeros(float* out, int64_t n) {
  if (absl::Status s = CheckBuffer(out, n); !s.ok()) return s;
  for (int64_t i = 0; i < n; ++i) out[i] = 0.0f;
  return absl::OkStatus();
}

absl::Status FillConstant(float value, float* out, int64_t n) {
  if (absl::Status s = CheckBuffer(out, n); !s.ok()) return s;
  for (int64_t i = 0; i < n; ++i) out[i] = value;
  return absl::OkStatus();
}

}  // namespace lockstep::canonical
