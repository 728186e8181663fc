// Baseline leaf kernels: libxxhash for XXH3-64 and the reference statistics
// of stats_portable.h. Compiled without any ISA flags, so they run on every
// x86-64 CPU (and on other architectures).
#include <xxhash.h>

#include <cstddef>
#include <cstdint>

#include "kernels/hash/leaf_kernels.h"
#include "kernels/hash/stats_portable.h"

namespace lockstep::hash::internal {
namespace {

uint64_t BaselineHash64(const void* data, size_t len) {
  return XXH3_64bits(data, len);
}

// The baseline does not prefetch: its statistics are compute-bound anyway.
LeafStats BaselineBlockStats(const float* x, size_t n, const void* /*prefetch*/,
                             size_t /*prefetch_bytes*/) {
  const portable::StatsPartial p =
      portable::StatsOfBlock(x, static_cast<int64_t>(n));
  return LeafStats{p.sum, p.sum_sq, p.max_abs_bits, p.nan_count, p.inf_count};
}

// Hash, then statistics while the leaf is in cache.
LeafHashStats BaselineHashAndStats(const float* x, size_t n,
                                   const void* prefetch,
                                   size_t prefetch_bytes) {
  LeafHashStats r;
  r.hash = BaselineHash64(x, n * sizeof(float));
  r.stats = BaselineBlockStats(x, n, prefetch, prefetch_bytes);
  return r;
}

}  // namespace

const LeafKernels& BaselineLeafKernels() {
  static constexpr LeafKernels kKernels = {
      "baseline", &BaselineHash64, &BaselineBlockStats, &BaselineHashAndStats};
  return kKernels;
}

}  // namespace lockstep::hash::internal
