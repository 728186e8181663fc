// Internal: the per-leaf work of fingerprinting, one table per instruction
// set. fingerprint.cc picks a table at run time; nothing else but
// leaf_kernels_test should include this header.
//
// The AVX2 table lives in its own translation unit compiled with -mavx2. That
// unit must not include any header that defines non-static inline functions
// shared with the rest of the program (the linker could keep its AVX2 copy
// and run it on a CPU without AVX2), so this header only declares a plain
// struct of function pointers.
#ifndef LOCKSTEP_KERNELS_HASH_LEAF_KERNELS_H_
#define LOCKSTEP_KERNELS_HASH_LEAF_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace lockstep::hash::internal {

// Statistics of one block of float32 values, defined in stats_portable.h
// (same fields as portable::StatsPartial; kept separate so the AVX2 unit
// needs no shared inline code).
struct LeafStats {
  double sum;
  double sum_sq;
  uint32_t max_abs_bits;
  int64_t nan_count;
  int64_t inf_count;
};

// A leaf's XXH3-64 and its statistics block.
struct LeafHashStats {
  uint64_t hash;
  LeafStats stats;
};

struct LeafKernels {
  // Name for logs and benchmarks ("baseline", "avx2", "avx512").
  const char* name;
  // XXH3-64, seed 0, of data[0 .. len): equals libxxhash's XXH3_64bits.
  uint64_t (*hash64)(const void* data, size_t len);
  // Statistics of one block x[0 .. n), n <= 16384, with the exact result of
  // portable::StatsOfBlock. Meanwhile it may prefetch
  // prefetch[0 .. prefetch_bytes) (the next leaf) towards the cache: a hint
  // only (prefetch instructions never fault); prefetch may be null.
  LeafStats (*block_stats)(const float* x, size_t n, const void* prefetch,
                           size_t prefetch_bytes);
  // Both of the above for one leaf x[0 .. n), n <= 16384: hash64(x, 4 * n)
  // and block_stats(x, n, prefetch, prefetch_bytes). The AVX-512 kernel reads
  // the leaf once for both; the AVX2 kernel hashes 4 KiB, then sums it from
  // L1, chunk by chunk; the baseline calls the two in turn.
  LeafHashStats (*hash_and_stats)(const float* x, size_t n,
                                  const void* prefetch, size_t prefetch_bytes);
};

// libxxhash's XXH3_64bits (as Debian builds it: SSE2 on x86-64) and scalar
// statistics. Always available.
const LeafKernels& BaselineLeafKernels();

// Its own XXH3 long loop and intrinsics compiled for AVX2 and FMA, or nullptr
// where this build has no AVX2 unit (not x86-64). Callers must also check the
// CPU.
const LeafKernels* Avx2LeafKernels();

// Inline XXH3 and intrinsics compiled for AVX-512F, AVX-512DQ and FMA, or
// nullptr where this build has no AVX-512 unit. Callers must also check the
// CPU.
const LeafKernels* Avx512LeafKernels();

// The same kernels, but whole stripes of a 64-byte-aligned leaf are read by
// non-temporal loads (vmovntdqa): same results. On an AMD Zen 4 core they
// fingerprint leaves from DRAM 11 - 15 % faster than ordinary loads, as a
// load loop with them reads 1.3 - 1.5 x faster (docs/benchmarks.md);
// fingerprint.cc picks them on AMD CPUs (on Intel's, the hint does nothing
// for ordinary write-back memory). nullptr where Avx512LeafKernels() is.
const LeafKernels* Avx512StreamLeafKernels();

}  // namespace lockstep::hash::internal

#endif  // LOCKSTEP_KERNELS_HASH_LEAF_KERNELS_H_
