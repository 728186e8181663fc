// Canonical synthetic classification data: a learnable, reproducible task.
//
// Class prototypes plus noise. The data set is one endless sequence of
// samples; sample s (s = 0, 1, ...) has `features` inputs and one label in
// [0, classes). With F = features and C = classes:
//
//   P[c][f]  = PhiloxUniform(teacher_seed, kStreamSyntheticTeacher,
//                            c * F + f, -1.0f, 1.0f)      (the "teacher")
//   y[s]     = (PhiloxBits(seed, kStreamSyntheticLabels, s) * C) >> 32
//              (64-bit unsigned product; uniform over classes, exact)
//   n[s][f]  = PhiloxUniform(seed, kStreamSyntheticInputs, s * F + f,
//                            -1.0f, 1.0f)
//   x[s][f]  = LsFma(kSyntheticNoiseScale, n[s][f], P[y[s]][f])
//              (one IEEE round-to-nearest-even; kSyntheticNoiseScale = 1)
//
// PhiloxUniform values are the 2^24 multiples of 2^-23 in [-1, 1) (exact),
// so x = P + n is a multiple of 2^-23 in [-2, 2) and the fused multiply-add
// is exact too. Each class is a fixed random pattern seen through noise of
// the same amplitude: a linear classifier separates the classes well, and
// the conv and residual nets of the zoo learn it in a few dozen steps. Training
// step `step` with batch size B takes samples [step * B, (step + 1) * B), so
// the sample stream does not depend on how it is cut into batches. Details in
// docs/canonical-arithmetic.md section 6.3.
#ifndef LOCKSTEP_KERNELS_RANDOM_SYNTHETIC_H_
#define LOCKSTEP_KERNELS_RANDOM_SYNTHETIC_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/canonical/hd.h"
#include "kernels/random/philox.h"

namespace lockstep::canonical {

// Philox streams of the synthetic data set ("SYNTH" in the high bytes).
inline constexpr uint64_t kStreamSyntheticInputs = 0x53594E5448000001ull;
inline constexpr uint64_t kStreamSyntheticTeacher = 0x53594E5448000002ull;
inline constexpr uint64_t kStreamSyntheticLabels = 0x53594E5448000003ull;

// Amplitude of the noise relative to the prototypes (both lie in [-1, 1)).
inline constexpr float kSyntheticNoiseScale = 1.0f;

// The label of sample `sample`: (PhiloxBits(seed, kStreamSyntheticLabels,
// sample) * classes) >> 32. REQUIRES: classes >= 1.
LS_HD_INLINE int32_t SyntheticLabel(uint64_t seed, uint64_t sample,
                                    int32_t classes) {
  const uint64_t bits = PhiloxBits(seed, kStreamSyntheticLabels, sample);
  return static_cast<int32_t>((bits * static_cast<uint64_t>(classes)) >> 32);
}

// Prototype (teacher) value P[c][f]. REQUIRES: 0 <= c, 0 <= f < features.
LS_HD_INLINE float SyntheticPrototype(uint64_t teacher_seed, int64_t features,
                                      int64_t c, int64_t f) {
  return PhiloxUniform(
      teacher_seed, kStreamSyntheticTeacher,
      static_cast<uint64_t>(c) * static_cast<uint64_t>(features) +
          static_cast<uint64_t>(f),
      -1.0f, 1.0f);
}

// Noise n[s][f] of sample `sample`. REQUIRES: 0 <= f < features and
// sample * features + f < 2^64.
LS_HD_INLINE float SyntheticNoise(uint64_t seed, uint64_t sample,
                                  int64_t features, int64_t f) {
  return PhiloxUniform(
      seed, kStreamSyntheticInputs,
      sample * static_cast<uint64_t>(features) + static_cast<uint64_t>(f),
      -1.0f, 1.0f);
}

// Input f of sample `sample`, whose label's prototype value at f is
// `prototype` (= SyntheticPrototype(teacher_seed, features,
// SyntheticLabel(seed, sample, classes), f)):
// LsFma(kSyntheticNoiseScale, SyntheticNoise(...), prototype).
LS_HD_INLINE float SyntheticInput(float prototype, uint64_t seed,
                                  uint64_t sample, int64_t features,
                                  int64_t f) {
  return LsFma(kSyntheticNoiseScale, SyntheticNoise(seed, sample, features, f),
               prototype);
}

// The same input from the noise's Philox bits (PhiloxBits(seed,
// kStreamSyntheticInputs, sample * features + f)).
LS_HD_INLINE float SyntheticInputOfBits(float prototype, uint32_t bits) {
  return LsFma(kSyntheticNoiseScale, BitsToUniform(bits, -1.0f, 1.0f),
               prototype);
}

// Writes the prototypes ("teacher") w[c * features + f] = P[c][f] for all
// c < classes, f < features. InvalidArgument unless features >= 1,
// classes >= 1, classes * features <= 2^40 and w is non-null.
absl::Status SyntheticTeacherWeights(uint64_t teacher_seed, int64_t features,
                                     int32_t classes, float* w);

// One batch of samples step * batch + b, b < batch, with the teacher drawn
// from `seed` too: labels[b] = SyntheticLabel(seed, step * batch + b,
// classes) and x[b * features + f] = that sample's input f. InvalidArgument
// unless step >= 0, batch >= 0, features >= 1, classes >= 1,
// classes * features <= 2^40, (step + 1) * batch * features <= 2^62, and x
// and labels are non-null when batch > 0.
absl::Status SyntheticBatch(uint64_t seed, int64_t step, int64_t batch,
                            int64_t features, int32_t classes, float* x,
                            int32_t* labels);

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_RANDOM_SYNTHETIC_H_
