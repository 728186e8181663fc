// Test helpers for the canonical ops: input families and comparisons that
// report the first differing index with both values in hex.
#ifndef LOCKSTEP_KERNELS_TESTING_FLOAT_TEST_UTIL_H_
#define LOCKSTEP_KERNELS_TESTING_FLOAT_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace lockstep::testing {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline std::string HexFloat(float f) {
  return absl::StrFormat("0x%08x (%.9g)", FloatBits(f), f);
}

// Uniform floats in [lo, hi).
inline std::vector<float> RandomFloats(size_t n, uint32_t seed,
                                       float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// The exact-integer family: integers in [lo, hi] stored as floats.
inline std::vector<float> SmallInts(size_t n, uint32_t seed, int lo = -8,
                                    int hi = 8) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(dist(gen));
  return v;
}

// got[i] and want[i] have identical bit patterns for every i.
inline ::testing::AssertionResult BitsEqual(const std::vector<float>& got,
                                            const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << "sizes differ: " << got.size() << " vs " << want.size();
  }
  size_t mismatches = 0;
  size_t first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (FloatBits(got[i]) != FloatBits(want[i])) {
      if (mismatches++ == 0) first = i;
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << mismatches << " of " << got.size()
         << " elements differ; first at index " << first << ": got "
         << HexFloat(got[first]) << ", want " << HexFloat(want[first]);
}

// Bit-for-bit equality with a float64 reference rounded to float32.
inline ::testing::AssertionResult BitsEqualRounded(
    const std::vector<float>& got, const std::vector<double>& want) {
  std::vector<float> rounded(want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    rounded[i] = static_cast<float>(want[i]);
  }
  return BitsEqual(got, rounded);
}

// |got[i] - want[i]| <= bound[i] for every i (NaN fails). Reports the first
// violation and the largest error / bound ratio.
inline ::testing::AssertionResult WithinBound(const std::vector<float>& got,
                                              const std::vector<double>& want,
                                              const std::vector<double>& bound,
                                              double* worst_ratio = nullptr) {
  if (got.size() != want.size() || got.size() != bound.size()) {
    return ::testing::AssertionFailure() << "sizes differ";
  }
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= bound[i])) {
      return ::testing::AssertionFailure()
             << "index " << i << ": got " << HexFloat(got[i]) << ", want "
             << absl::StrFormat("%.17g", want[i]) << ", error "
             << absl::StrFormat("%.3g", err) << " > bound "
             << absl::StrFormat("%.3g", bound[i]);
    }
    if (bound[i] > 0) worst = std::max(worst, err / bound[i]);
  }
  if (worst_ratio != nullptr) *worst_ratio = worst;
  return ::testing::AssertionSuccess();
}

// Unit roundoff of float32 (2^-24).
inline constexpr double kFloatU = 5.9604644775390625e-08;

// Error bound of a canonical reduction of `n` terms whose absolute values
// sum to abs_sum: each term passes through at most min(n, 256) chain
// roundings plus ceil(log2(chunks)) tree roundings, so
//   |error| <= gamma_L * abs_sum,  L = min(n, 256) + ceil(log2(chunks)),
// gamma_L = L u / (1 - L u); one extra u covers the final rounding.
inline double CanonicalSumBound(int64_t n, double abs_sum) {
  int64_t chunks = (n + 255) / 256;
  int64_t depth = 0;
  while ((int64_t{1} << depth) < chunks) ++depth;
  const double l = static_cast<double>(std::min<int64_t>(n, 256) + depth + 1);
  return l * kFloatU / (1.0 - l * kFloatU) * abs_sum;
}

}  // namespace lockstep::testing

#endif  // LOCKSTEP_KERNELS_TESTING_FLOAT_TEST_UTIL_H_
