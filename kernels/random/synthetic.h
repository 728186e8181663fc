// Canonical synthetic classification data: a learnable, reproducible task.
//
// The data set is one endless sequence of samples. Sample s (s = 0, 1, ...)
// has `features` inputs and one label:
//
//   x[s][f]  = PhiloxUniform(seed, kStreamSyntheticInputs,
//                            s * features + f, -1.0f, 1.0f)
//              (uniform on the 2^24 multiples of 2^-23 in [-1, 1), exact)
//   V[c][f]  = PhiloxUniform(seed, kStreamSyntheticTeacher,
//                            c * features + f, -1.0f, 1.0f)
//   n[c]     = CanonicalSqrt(CanonicalDot(V[c], V[c], features))
//   W[c][f]  = V[c][f] / n[c]        (IEEE division; W[c] = V[c] if n[c] = 0)
//   logit[c] = CanonicalDot(W[c], x[s], features)   (kernels/canonical)
//   label[s] = argmax_c logit[c], the lowest c winning ties
//
// i.e. a fixed random linear "teacher" with unit-norm rows labels uniform
// inputs, so a linear classifier (or anything bigger) can reach 100%
// accuracy. Normalising the rows keeps the classes roughly balanced; with
// features >= classes every class is common, with fewer features some
// classes get rarer. Training step
// `step` with batch size B takes samples [step * B, (step + 1) * B), so
// the sample stream does not depend on how it is cut into batches.
// Details in kernels/random/SPEC.md.
#ifndef LOCKSTEP_KERNELS_RANDOM_SYNTHETIC_H_
#define LOCKSTEP_KERNELS_RANDOM_SYNTHETIC_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/canonical/hd.h"
#include "kernels/canonical/reduce.h"
#include "kernels/math/portable_math.h"
#include "kernels/random/philox.h"

namespace lockstep::canonical {

// Philox streams of the synthetic data set ("SYNTH" in the high bytes).
inline constexpr uint64_t kStreamSyntheticInputs = 0x53594E5448000001ull;
inline constexpr uint64_t kStreamSyntheticTeacher = 0x53594E5448000002ull;

// Input f of sample `sample`. REQUIRES: 0 <= f < features and
// sample * features + f < 2^64.
LS_HD_INLINE float SyntheticInput(uint64_t seed, uint64_t sample,
                                  int64_t features, int64_t f) {
  return PhiloxUniform(
      seed, kStreamSyntheticInputs,
      sample * static_cast<uint64_t>(features) + static_cast<uint64_t>(f),
      -1.0f, 1.0f);
}

// Unnormalised teacher weight V[c][f]. REQUIRES: 0 <= c, 0 <= f < features.
LS_HD_INLINE float SyntheticTeacherRaw(uint64_t seed, int64_t features,
                                       int64_t c, int64_t f) {
  return PhiloxUniform(
      seed, kStreamSyntheticTeacher,
      static_cast<uint64_t>(c) * static_cast<uint64_t>(features) +
          static_cast<uint64_t>(f),
      -1.0f, 1.0f);
}

// Writes teacher row W[c][0 .. features-1] to row: V[c][f] / n[c] with
// n[c] = CanonicalSqrt(CanonicalDot(V[c], V[c])); left unnormalised (all
// zeros) if n[c] == 0. REQUIRES: features >= 1, row holds features floats.
LS_HD_INLINE void SyntheticTeacherRow(uint64_t seed, int64_t features,
                                      int64_t c, float* row) {
  for (int64_t f = 0; f < features; ++f) {
    row[f] = SyntheticTeacherRaw(seed, features, c, f);
  }
  const float norm = CanonicalSqrt(CanonicalDot(row, 1, row, 1, features));
  if (norm > 0.0f) {
    for (int64_t f = 0; f < features; ++f) row[f] = row[f] / norm;
  }
}

// The label of input row x[0 .. features-1] under teacher weights
// w[classes][features] (row-major): argmax over c of
// CanonicalDot(w + c * features, 1, x, 1, features), lowest c on ties.
// REQUIRES: classes >= 1, features >= 1, w and x valid for those sizes.
LS_HD_INLINE int32_t SyntheticLabel(const float* w, const float* x,
                                    int64_t features, int32_t classes) {
  int32_t best = 0;
  float best_logit = CanonicalDot(w, 1, x, 1, features);
  for (int32_t c = 1; c < classes; ++c) {
    const float logit = CanonicalDot(w + c * features, 1, x, 1, features);
    if (logit > best_logit) {  // Strict: ties keep the lower index.
      best = c;
      best_logit = logit;
    }
  }
  return best;
}

// Writes the teacher weights w[c * features + f] for all c < classes,
// f < features. InvalidArgument unless features >= 1, classes >= 1,
// classes * features <= 2^40 and w is non-null.
absl::Status SyntheticTeacherWeights(uint64_t seed, int64_t features,
                                     int32_t classes, float* w);

// One batch: x[b * features + f] = SyntheticInput(seed, step * batch + b,
// features, f) and labels[b] = the teacher's label for that row, for
// b < batch. InvalidArgument unless step >= 0, batch >= 0, features >= 1,
// classes >= 1, (step + 1) * batch * features <= 2^62, and x and labels are
// non-null when batch > 0.
absl::Status SyntheticBatch(uint64_t seed, int64_t step, int64_t batch,
                            int64_t features, int32_t classes, float* x,
                            int32_t* labels);

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_RANDOM_SYNTHETIC_H_
