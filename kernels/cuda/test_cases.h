// Test inputs for the CUDA backend's tests: one or more calls per CANONICAL
// op, in two input families, with shapes whose reductions cross the
// 256-term chunk boundary; and bit-exact comparison of results.
#ifndef LOCKSTEP_KERNELS_CUDA_TEST_CASES_H_
#define LOCKSTEP_KERNELS_CUDA_TEST_CASES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"

namespace lockstep::kernels::cuda::testing {

enum class Family {
  kRandom,     // uniform [-1, 1), with some subnormals, +-0 sprinkled in
  kSmallInts,  // integers in [-8, 8]: sums are exact
};
const char* FamilyName(Family family);

struct OpCase {
  std::string label;  // "dense.forward m=3 k=600 n=300"
  std::string op;
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;  // initial contents (zeros, optimizer state)
  OpAttrs attrs;
};

// Every op of DenseFamilyOpNames() and SpatialOpNames() at least once.
std::vector<OpCase> CanonicalOpCases(Family family, uint32_t seed);

// Deep copies (fresh storage) of `tensors`.
std::vector<Tensor> CloneAll(const std::vector<Tensor>& tensors);

// Runs the kernel registered for (c.op, CANONICAL, "canonical", backend) on
// fresh copies of c's outputs; returns them.
absl::StatusOr<std::vector<Tensor>> RunRegistered(const Registry& registry,
                                                  absl::string_view backend,
                                                  const OpCase& c);

// Same dtype, shape and bytes. On failure names the first differing element
// index in hex and both bit patterns.
::testing::AssertionResult SameBits(const Tensor& got, const Tensor& want);

}  // namespace lockstep::kernels::cuda::testing

#endif  // LOCKSTEP_KERNELS_CUDA_TEST_CASES_H_
