#include "kernels/random/synthetic.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace lockstep::canonical {
namespace {

constexpr int64_t kMaxTeacherSize = int64_t{1} << 40;
constexpr int64_t kMaxIndex = int64_t{1} << 62;

absl::Status CheckShape(int64_t features, int32_t classes) {
  if (features < 1 || classes < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "features and classes must be >= 1, got features = %d, classes = %d",
        features, classes));
  }
  if (features > kMaxTeacherSize / classes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "classes * features must be <= 2^40, got %d * %d", classes, features));
  }
  return absl::OkStatus();
}

void FillTeacher(uint64_t seed, int64_t features, int32_t classes, float* w) {
  for (int64_t c = 0; c < classes; ++c) {
    for (int64_t f = 0; f < features; ++f) {
      w[c * features + f] = SyntheticPrototype(seed, features, c, f);
    }
  }
}

}  // namespace

absl::Status SyntheticTeacherWeights(uint64_t teacher_seed, int64_t features,
                                     int32_t classes, float* w) {
  if (absl::Status s = CheckShape(features, classes); !s.ok()) return s;
  if (w == nullptr) return absl::InvalidArgumentError("w is null");
  FillTeacher(teacher_seed, features, classes, w);
  return absl::OkStatus();
}

absl::Status SyntheticBatch(uint64_t seed, int64_t step, int64_t batch,
                            int64_t features, int32_t classes, float* x,
                            int32_t* labels) {
  if (absl::Status s = CheckShape(features, classes); !s.ok()) return s;
  if (step < 0 || batch < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "step and batch must be >= 0, got step = %d, batch = %d", step, batch));
  }
  if (batch == 0) return absl::OkStatus();
  if (x == nullptr || labels == nullptr) {
    return absl::InvalidArgumentError("x or labels is null");
  }
  // (step + 1) * batch * features <= 2^62, checked without overflow.
  if (batch > kMaxIndex / features ||
      step + 1 > kMaxIndex / (batch * features)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "(step + 1) * batch * features must be <= 2^62, got step = %d, "
        "batch = %d, features = %d",
        step, batch, features));
  }
  std::vector<float> w(static_cast<size_t>(classes) * features);
  FillTeacher(seed, features, classes, w.data());
  const uint64_t first = static_cast<uint64_t>(step) * batch;
  for (int64_t b = 0; b < batch; ++b) {
    const uint64_t sample = first + static_cast<uint64_t>(b);
    const int32_t label = SyntheticLabel(seed, sample, classes);
    const float* prototype = w.data() + label * features;
    float* row = x + b * features;
    for (int64_t f = 0; f < features; ++f) {
      row[f] = SyntheticInput(prototype[f], seed, sample, features, f);
    }
    labels[b] = label;
  }
  return absl::OkStatus();
}

}  // namespace lockstep::canonical
