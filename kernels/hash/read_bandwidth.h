// Benchmark helpers: the single-core memory-read bandwidth reference that
// fingerprint_bench prints beside the fingerprint throughput. Built with
// -mavx2 on x86-64 (see BUILD), so every function here may only run where
// IsaAvailable(HashIsa::kAvx2) holds; elsewhere they are no-ops.
#ifndef LOCKSTEP_KERNELS_HASH_READ_BANDWIDTH_H_
#define LOCKSTEP_KERNELS_HASH_READ_BANDWIDTH_H_

#include <cstddef>
#include <cstdint>

namespace lockstep::hash::bench {

// Reads data[0 .. n) with 256-bit loads into eight independent 64-bit-lane
// accumulators (no other work) and returns their sum, so the loads cannot be
// optimised away. REQUIRES: AVX2 (see above); data 32-byte aligned; n a
// multiple of 256.
uint64_t ReadSum(const void* data, size_t n);

// The same with non-temporal loads (vmovntdqa). On ordinary write-back
// memory these are normal loads with a hint; on the AMD build machine they
// read 256 MiB up to 30 % faster than ReadSum in some runs and no faster in
// others, so the benchmark shows both references. Same REQUIRES.
uint64_t ReadSumNonTemporal(const void* data, size_t n);

// Executes vzeroupper. Debian 12's libxxhash XXH3_64bits_dispatch returns
// with the upper vector-register halves dirty; legacy-SSE code that runs
// afterwards (libxxhash's own XXH3_64bits, the baseline statistics) was then
// measured about 3.5x slower until some code executed vzeroupper. The
// benchmark calls this after each dispatch call so one row cannot slow the
// others. REQUIRES: AVX2.
void ZeroUpperState();

}  // namespace lockstep::hash::bench

#endif  // LOCKSTEP_KERNELS_HASH_READ_BANDWIDTH_H_
