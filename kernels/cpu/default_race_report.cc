// default_race_report: how often the DEFAULT "atomic" CPU kernels give
// different bits on the same inputs when their threads really race. Runs
// each atomic kernel (and its CANONICAL counterpart) 50 times on 8 threads
// and prints the number of distinct results. A measurement, not a check:
// how many races a run sees depends on the machine and its load. The
// pass/fail checks of the same kernels pin the arrival order instead
// (default_nondeterminism_test.cc).
//
//   bazel run //kernels/cpu:default_race_report
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"
#include "kernels/testing/float_test_util.h"

namespace lockstep::kernels {
namespace {

using ::lockstep::testing::RandomFloats;

constexpr int kRuns = 50;
constexpr int kThreads = 8;

Tensor T(std::vector<int64_t> shape, std::vector<float> v) {
  // Wide dynamic range, so that the order of additions shows in the bits.
  for (size_t i = 0; i < v.size(); ++i) v[i] *= (i % 7 == 0) ? 1e4f : 1.0f;
  return *Tensor::FromValues<float>(std::move(shape), v);
}

// Distinct results of `runs` calls, or -1 when a call fails.
int DistinctResults(const Registry& r, const KernelKey& key,
                    const std::vector<Tensor>& in, std::vector<int64_t> shape,
                    const OpAttrs& attrs) {
  absl::StatusOr<KernelFn> fn = r.Lookup(key);
  if (!fn.ok()) return -1;
  std::set<std::string> seen;
  for (int i = 0; i < kRuns; ++i) {
    std::vector<Tensor> out = {*Tensor::Zeros(DType::kFloat32, shape)};
    if (!(*fn)(in, absl::MakeSpan(out), attrs).ok()) return -1;
    seen.insert(std::string(static_cast<const char*>(out[0].raw_data()),
                            out[0].bytes()));
  }
  return static_cast<int>(seen.size());
}

void Report(const Registry& r, const char* op, const char* algorithm,
            const std::vector<Tensor>& in, const std::vector<int64_t>& shape,
            const OpAttrs& attrs) {
  const int atomic = DistinctResults(
      r, {op, Mode::kDefault, algorithm, kCpuBackendName}, in, shape, attrs);
  const int canonical = DistinctResults(
      r, {op, Mode::kCanonical, kCanonicalAlgorithm, kCpuBackendName}, in,
      shape, attrs);
  std::printf("%-18s DEFAULT/%-14s %2d distinct of %d runs (CANONICAL: %d)\n",
              op, algorithm, atomic, kRuns, canonical);
}

int Main() {
  Registry r;
  if (!RegisterCpuCanonicalKernels(&r).ok() ||
      !RegisterCpuDeterministicAndDefaultKernels(&r).ok()) {
    std::fprintf(stderr, "default_race_report: kernel registration failed\n");
    return 1;
  }
  SetCpuThreadsForTesting(kThreads);
  std::printf("%d threads, %d runs per kernel on the same inputs\n", kThreads,
              kRuns);
  Report(r, op::kBiasAddGrad, kAtomicAlgorithm,
         {T({256, 16, 8, 8}, RandomFloats(256 * 16 * 64, 1))}, {16}, {});
  Report(r, op::kDenseForward, kSplitKAtomicAlgorithm,
         {T({64, 4096}, RandomFloats(64 * 4096, 2)),
          T({4096, 64}, RandomFloats(4096 * 64, 3))},
         {64, 64}, {});
  OpAttrs pad1;
  pad1.pad_top = pad1.pad_bottom = pad1.pad_left = pad1.pad_right = 1;
  Report(r, op::kConv2dGradWeight, kAtomicAlgorithm,
         {T({32, 8, 12, 12}, RandomFloats(32 * 8 * 144, 4)),
          T({32, 8, 12, 12}, RandomFloats(32 * 8 * 144, 5))},
         {8, 8, 3, 3}, pad1);
  return 0;
}

}  // namespace
}  // namespace lockstep::kernels

int main() { return lockstep::kernels::Main(); }
