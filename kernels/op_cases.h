// Seeded kernel calls for every op: one or more calls per op of
// AllOpNames(), in two input families, with
// shapes whose reductions cross the 256-term chunk boundary, empty
// reductions, transposes, grouped / strided / dilated / asymmetrically
// padded convolutions, and pools with and without padding in the divisor.
//
// The same seed always gives the same inputs. Used by the backends' tests
// and by `lockstep-worker selftest` (worker/selftest.h).
#ifndef LOCKSTEP_KERNELS_OP_CASES_H_
#define LOCKSTEP_KERNELS_OP_CASES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"

namespace lockstep::kernels {

enum class InputFamily {
  kRandom,     // uniform [-1, 1), with some subnormals, +-0 sprinkled in
  kSmallInts,  // integers in [-8, 8]: sums are exact
};
// "random", "small_ints".
const char* InputFamilyName(InputFamily family);

// One kernel call.
struct OpCase {
  std::string label;  // "dense.forward m=3 k=600 n=300 tx=0 tw=0"
  std::string op;
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;  // initial contents (zeros, optimizer state)
  OpAttrs attrs;
};

// Every op of AllOpNames() at least once, in a
// fixed order (ops grouped together).
std::vector<OpCase> OpCases(InputFamily family, uint32_t seed);

// Deep copies (fresh storage) of `tensors`.
std::vector<Tensor> CloneAll(const std::vector<Tensor>& tensors);

// Runs the kernel registered under `key` on c's inputs and on fresh copies
// of c's outputs; returns those outputs. The lookup's or the kernel's error
// otherwise. (key.op is used as given; it should be c.op.)
absl::StatusOr<std::vector<Tensor>> RunOpCase(const Registry& registry,
                                              const KernelKey& key,
                                              const OpCase& c);

// -1 when got and want have the same dtype, shape and bytes; otherwise the
// flat (row-major) index of the first element whose bytes differ, or 0 when
// the dtypes or shapes differ.
int64_t FirstDifferingElement(const Tensor& got, const Tensor& want);

// The comparison of one hardware class with another: like
// FirstDifferingElement, except that two float32 NaNs are equal whatever
// their signs and payloads. docs/canonical-arithmetic.md, section 7: a NaN
// made by arithmetic is only specified to be NaN (x86 makes 0xFFC00000 and
// propagates payloads, CUDA makes 0x7FFFFFFF), so a CUDA kernel is
// bit-equal to the CPU's up to those bits; everything else, NaN positions
// included, must match.
int64_t FirstCrossClassDifference(const Tensor& got, const Tensor& want);

// Float32 elements where got and want are both NaN with different bits;
// 0 for other dtypes or when the shapes differ.
int64_t CountNanBitDifferences(const Tensor& got, const Tensor& want);

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_OP_CASES_H_
