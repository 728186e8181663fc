// Test inputs for the CUDA backend's tests: the seeded calls of
// kernels/op_cases.h under their test names, and bit-exact comparison of
// results as a gtest assertion.
#ifndef LOCKSTEP_KERNELS_CUDA_TEST_CASES_H_
#define LOCKSTEP_KERNELS_CUDA_TEST_CASES_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/graph_op_cases.h"
#include "kernels/op_cases.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"

namespace lockstep::kernels::cuda::testing {

using Family = ::lockstep::kernels::InputFamily;
using ::lockstep::kernels::CloneAll;
using ::lockstep::kernels::OpCase;

inline const char* FamilyName(Family family) { return InputFamilyName(family); }

// Every op of CudaCanonicalOpNames() at least once: the op cases
// (kernels/op_cases.h) and the graph data ops' (kernels/graph_op_cases.h).
inline std::vector<OpCase> CanonicalOpCases(Family family, uint32_t seed) {
  std::vector<OpCase> cases = OpCases(family, seed);
  for (OpCase& c : GraphDataOpCases(family, seed)) {
    cases.push_back(std::move(c));
  }
  return cases;
}

// Runs the kernel registered for (c.op, CANONICAL, "canonical", backend) on
// fresh copies of c's outputs; returns them.
absl::StatusOr<std::vector<Tensor>> RunRegistered(const Registry& registry,
                                                  absl::string_view backend,
                                                  const OpCase& c);

// Calls whose products the planner runs as the tiled GEMM (tiled_gemm.h)
// or, for `tiled` false, just below its threshold: dense.* at every
// transpose (multi-chunk reductions, edge tiles), matmul.forward / grad
// (batched, scaled), and all six conv2d / conv_transpose2d directions
// (stride 1 and 2, dilation 2, asymmetric padding, 1 x 1, 3 x 3 and 5 x 5
// kernels, reductions of one to five chunks; a grouped one is not tiled).
// Inputs in [-1, 1) with sparse subnormals and signed zeros, no NaN or
// infinity.
struct TiledProductCase {
  OpCase c;
  bool tiled = false;  // PlanCanonicalOp's default plan has a tiled launch
};
std::vector<TiledProductCase> TiledProductCases(uint32_t seed);

// Same dtype, shape and bytes. On failure names the first differing element
// index in hex and both bit patterns.
::testing::AssertionResult SameBits(const Tensor& got, const Tensor& want);

// SameBits between hardware classes (a device's output against the CPU's):
// two float32 NaNs are equal whatever their bits (FirstCrossClassDifference,
// kernels/op_cases.h; docs/canonical-arithmetic.md, section 7).
::testing::AssertionResult SameBitsAcrossClasses(const Tensor& got,
                                                 const Tensor& want);

// Fingerprints queued in a resident run (kernels/residency.h) on
// `backend`'s CANONICAL relu.forward: y (1 MiB + 12 bytes, 17 leaves) is
// written and its fingerprint queued, then y is written again from other
// inputs (overwriting the bytes the first one saw) and queued again, then
// a 4-byte tensor; one collection must give hash::FingerprintAndStats of
// each as it was when queued, in queue order, and a second collection
// none; the counters must say 3 queued, 2 collections. Outside a scope,
// queueing and collecting are FAILED_PRECONDITION.
::testing::AssertionResult QueuedFingerprintsMatchHost(
    const Registry& registry, absl::string_view backend);

}  // namespace lockstep::kernels::cuda::testing

#endif  // LOCKSTEP_KERNELS_CUDA_TEST_CASES_H_
