// Test helpers shared by the spatial op tests: input families, bit-exact and
// error-bound comparisons (failures name the first bad index, values in hex),
// and shuffled-order evaluation of element functions. Test only.
#ifndef LOCKSTEP_KERNELS_SPATIAL_TEST_UTIL_H_
#define LOCKSTEP_KERNELS_SPATIAL_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/canonical/reduce.h"
#include "kernels/testing/float_test_util.h"
#include "kernels/spatial/reference.h"

namespace lockstep::spatial::testing {

// Shared float helpers (kernels/testing/float_test_util.h) under the names
// the spatial tests use.
using ::lockstep::testing::BitsEqual;
using ::lockstep::testing::FromBits;
using ::lockstep::testing::RandomFloats;
inline uint32_t Bits(float v) { return ::lockstep::testing::FloatBits(v); }
// The exact-integer family: integers in [-8, 8] as floats.
inline std::vector<float> RandomInts(int64_t n, uint32_t seed) {
  return ::lockstep::testing::SmallInts(static_cast<size_t>(n), seed);
}

// The float64 reference rounded to float (round to nearest even).
inline std::vector<float> RoundToFloat(const reference::RefTensor& ref) {
  std::vector<float> out(ref.value.size());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<float>(ref.value[i]);
  }
  return out;
}

// Error-bound factor c for a canonical reduction of n terms: the longest
// chain (min(n, 256) roundings) plus the tree depth, plus `extra` roundings
// (a division, a rounded weight, ...). The canonical result then satisfies
// |got - exact| <= c * 2^-24 * sum |term| (to first order).
inline double ReductionBound(int64_t n, int extra = 0) {
  const int64_t chain = std::min<int64_t>(n, canonical::kChunk);
  int64_t chunks = canonical::NumChunks(n);
  int depth = 0;
  while ((int64_t{1} << depth) < chunks) ++depth;
  return static_cast<double>(chain + depth + extra + 1);
}

// |got[i] - ref.value[i]| <= c * 2^-24 * (ref.magnitude[i] + floor_magnitude)
// for every i; on failure names the first bad index.
inline ::testing::AssertionResult WithinBound(const std::vector<float>& got,
                                              const reference::RefTensor& ref,
                                              double c,
                                              double floor_magnitude = 0.0) {
  if (static_cast<int64_t>(got.size()) != ref.size()) {
    return ::testing::AssertionFailure()
           << "size " << got.size() << " != " << ref.size();
  }
  const double u = std::ldexp(1.0, -24);
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref.value[i]);
    const double bound = c * u * (ref.magnitude[i] + floor_magnitude);
    if (!(err <= bound)) {
      return ::testing::AssertionFailure() << absl::StrFormat(
                 "index %d: got 0x%08x (%.9g), reference %.17g, error %.3g > "
                 "bound %.3g (magnitude %.3g)",
                 i, Bits(got[i]), got[i], ref.value[i], err, bound,
                 ref.magnitude[i]);
    }
  }
  return ::testing::AssertionSuccess();
}

// A permutation of 0 .. n-1.
inline std::vector<int64_t> ShuffledIndices(int64_t n, uint32_t seed) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::mt19937 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

// Evaluates element(i) for i = 0 .. n-1 in a shuffled order (what a GPU
// grid does: any thread, any order) and stores each at its own index.
template <typename Element>
std::vector<float> EvaluateShuffled(int64_t n, uint32_t seed,
                                    Element&& element) {
  std::vector<float> out(static_cast<size_t>(n), FromBits(0x7fc0dead));
  for (const int64_t i : ShuffledIndices(n, seed)) {
    out[static_cast<size_t>(i)] = element(i);
  }
  return out;
}

}  // namespace lockstep::spatial::testing

#endif  // LOCKSTEP_KERNELS_SPATIAL_TEST_UTIL_H_
