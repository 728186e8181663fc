#include "kernels/cpu/isa.h"

#include <atomic>
#include <cstdlib>

namespace lockstep::kernels {
namespace {

// -1: not forced; else the forced CpuIsa.
std::atomic<int> g_forced{-1};

CpuIsa Lower(CpuIsa isa) {
  while (isa != CpuIsa::kScalar && !CpuIsaSupported(isa)) {
    isa = static_cast<CpuIsa>(static_cast<int>(isa) - 1);
  }
  return isa;
}

CpuIsa FromEnvironment() {
  const char* env = std::getenv("LOCKSTEP_CPU_ISA");
  if (env != nullptr) {
    if (std::optional<CpuIsa> isa = ParseCpuIsa(env); isa.has_value()) {
      return Lower(*isa);
    }
  }
  return BestCpuIsa();
}

}  // namespace

absl::string_view CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

std::optional<CpuIsa> ParseCpuIsa(absl::string_view name) {
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (name == CpuIsaName(isa)) return isa;
  }
  return std::nullopt;
}

bool CpuIsaSupported(CpuIsa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case CpuIsa::kScalar:
      return true;
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  return false;
#else
  return isa == CpuIsa::kScalar;
#endif
}

CpuIsa BestCpuIsa() { return Lower(CpuIsa::kAvx512); }

std::vector<CpuIsa> SupportedCpuIsas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (CpuIsaSupported(isa)) out.push_back(isa);
  }
  return out;
}

CpuIsa ActiveCpuIsa() {
  const int forced = g_forced.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<CpuIsa>(forced);
  static const CpuIsa from_env = FromEnvironment();
  return from_env;
}

void SetCpuIsaForTesting(std::optional<CpuIsa> isa) {
  g_forced.store(isa.has_value() ? static_cast<int>(Lower(*isa)) : -1,
                 std::memory_order_relaxed);
}

}  // namespace lockstep::kernels
