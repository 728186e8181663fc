// MANUAL statistical check, not part of the pass/fail suite (tags =
// ["manual"]): the DEFAULT "atomic" kernels add partials in thread arrival
// order, so repeated runs on the same inputs can give different bits. Runs
// each one many times on 8 threads and prints how many distinct results it
// saw. Run with
//   bazel test //kernels/cpu:default_nondeterminism_test --test_output=all
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"
#include "kernels/testing/float_test_util.h"

namespace lockstep::kernels {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::RandomFloats;

Tensor T(std::vector<int64_t> shape, std::vector<float> v) {
  // Wide dynamic range, so that the order of additions shows in the bits.
  for (size_t i = 0; i < v.size(); ++i) v[i] *= (i % 7 == 0) ? 1e4f : 1.0f;
  return *Tensor::FromValues<float>(std::move(shape), v);
}

int DistinctResults(const Registry& r, const KernelKey& key,
                    const std::vector<Tensor>& in, std::vector<int64_t> shape,
                    const OpAttrs& attrs, int runs) {
  std::set<std::string> seen;
  KernelFn fn = *r.Lookup(key);
  for (int i = 0; i < runs; ++i) {
    std::vector<Tensor> out = {*Tensor::Zeros(DType::kFloat32, shape)};
    EXPECT_THAT(fn(in, absl::MakeSpan(out), attrs), IsOk());
    seen.insert(std::string(static_cast<const char*>(out[0].raw_data()),
                            out[0].bytes()));
  }
  return static_cast<int>(seen.size());
}

TEST(DefaultNondeterminism, AtomicKernelsCanDifferBetweenRuns) {
  Registry r;
  ASSERT_THAT(RegisterCpuCanonicalKernels(&r), IsOk());
  ASSERT_THAT(RegisterCpuDeterministicAndDefaultKernels(&r), IsOk());
  SetCpuThreadsForTesting(8);
  const int runs = 50;
  int total = 0;
  {
    const std::vector<Tensor> in = {
        T({256, 16, 8, 8}, RandomFloats(256 * 16 * 64, 1))};
    const int d =
        DistinctResults(r, {op::kBiasAddGrad, Mode::kDefault, "atomic", "cpu"},
                        in, {16}, {}, runs);
    const int c = DistinctResults(
        r, {op::kBiasAddGrad, Mode::kCanonical, "canonical", "cpu"}, in, {16},
        {}, runs);
    std::printf(
        "bias_add.grad      DEFAULT/atomic: %2d distinct of %d runs "
        "(CANONICAL: %d)\n",
        d, runs, c);
    EXPECT_EQ(c, 1);
    total += d;
  }
  {
    const std::vector<Tensor> in = {T({64, 4096}, RandomFloats(64 * 4096, 2)),
                                    T({4096, 64}, RandomFloats(4096 * 64, 3))};
    const int d = DistinctResults(
        r, {op::kDenseForward, Mode::kDefault, "split_k_atomic", "cpu"}, in,
        {64, 64}, {}, runs);
    const int c = DistinctResults(
        r, {op::kDenseForward, Mode::kCanonical, "canonical", "cpu"}, in,
        {64, 64}, {}, runs);
    std::printf(
        "dense.forward      DEFAULT/split_k_atomic: %2d distinct of %d "
        "runs (CANONICAL: %d)\n",
        d, runs, c);
    EXPECT_EQ(c, 1);
    total += d;
  }
  {
    OpAttrs a;
    a.pad_top = a.pad_bottom = a.pad_left = a.pad_right = 1;
    const std::vector<Tensor> in = {
        T({32, 8, 12, 12}, RandomFloats(32 * 8 * 144, 4)),
        T({32, 8, 12, 12}, RandomFloats(32 * 8 * 144, 5))};
    const int d = DistinctResults(
        r, {op::kConv2dGradWeight, Mode::kDefault, "atomic", "cpu"}, in,
        {8, 8, 3, 3}, a, runs);
    std::printf("conv2d.grad_weight DEFAULT/atomic: %2d distinct of %d runs\n",
                d, runs);
    total += d;
  }
  SetCpuThreadsForTesting(0);
  // Three kernels, each at least one result; more means the bits moved.
  EXPECT_GT(total, 3) << "no run-to-run difference observed this time";
}

}  // namespace
}  // namespace lockstep::kernels
