// Run-time choice of the CPU instruction set the fast kernels use.
//
// The fast kernels (gemm.h) have one translation unit per ISA, each built
// with its own -m flags, so a binary runs on any x86-64 and uses the widest
// vectors the CPU has. Which one runs:
//   1. SetCpuIsaForTesting(isa), when set (tests);
//   2. else the environment variable LOCKSTEP_CPU_ISA = scalar | avx2 |
//      avx512, read once;
//   3. else the best ISA the CPU supports (__builtin_cpu_supports).
// A requested ISA the CPU lacks is lowered to the best supported one, so the
// choice never faults. CANONICAL kernels give the same bits on every ISA;
// only speed changes.
//
// Thread-safety: ActiveCpuIsa() is safe from any thread; SetCpuIsaForTesting
// must not race with running kernels.
#ifndef LOCKSTEP_KERNELS_CPU_ISA_H_
#define LOCKSTEP_KERNELS_CPU_ISA_H_

#include <optional>
#include <vector>

#include "absl/strings/string_view.h"

namespace lockstep::kernels {

enum class CpuIsa : int {
  kScalar = 0,  // portable C++, std::fma
  kAvx2 = 1,    // AVX2 + FMA3, 256-bit
  kAvx512 = 2,  // AVX-512F + VL (and AVX2 + FMA3), 512-bit
};

// "scalar", "avx2", "avx512".
absl::string_view CpuIsaName(CpuIsa isa);
// Parses a name above; nullopt otherwise.
std::optional<CpuIsa> ParseCpuIsa(absl::string_view name);

// Whether this CPU (and this build) can run isa.
bool CpuIsaSupported(CpuIsa isa);
// The widest supported ISA.
CpuIsa BestCpuIsa();
// Every supported ISA, narrowest first (always starts with kScalar).
std::vector<CpuIsa> SupportedCpuIsas();

// The ISA the fast kernels use now (see the file comment).
CpuIsa ActiveCpuIsa();
// Forces the ISA (lowered to a supported one); nullopt restores the default.
void SetCpuIsaForTesting(std::optional<CpuIsa> isa);

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_CPU_ISA_H_
