// Tensor fingerprints and summary statistics (host side).
//
// A fingerprint is a 128-bit tree hash of a tensor's header (dtype, shape)
// and bytes: 64 KiB leaves hashed with XXH3-64, the leaf hashes combined with
// XXH3-128 over (header || leaf hashes). The exact definition, byte for byte,
// is kernels/hash/SPEC.md; the CUDA hasher computes the same function on the
// device with xxh3_portable.h. Beside it, TensorStats (sum, L2, max |x|,
// NaN/Inf counts; defined exactly in SPEC.md and stats_portable.h) give a
// divergence its magnitude.
//
//   LS_ASSIGN_OR_RETURN(Fingerprint fp,
//                       HashTensorBytes(DtypeCode::kFloat32, shape, p, n));
//   std::string hex = fp.ToHex();
//
// The host implementation picks, once per process, the fastest instruction
// set the CPU supports (AVX-512, AVX2 or baseline); every choice gives the
// same bits. A caller may lend threads (Parallelism) to spread a large
// tensor's leaves over them; the bits do not depend on it either.
// Thread-safety: every function is thread-safe (no shared mutable state).
#ifndef LOCKSTEP_KERNELS_HASH_FINGERPRINT_H_
#define LOCKSTEP_KERNELS_HASH_FINGERPRINT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/hash/stats_portable.h"

namespace lockstep::hash {

// Version of the format defined in docs/fingerprints.md. Version 2 redefined
// the statistics (64 lanes per block instead of 16;
// portable::kStatsVersion); the hashed bytes, and so every fingerprint and
// digest, are unchanged since version 1, which is why the tags below still
// say 1.
inline constexpr int kFormatVersion = 2;
// Leaf size of the tree hash, in bytes. Part of the fingerprint definition
// (SPEC.md): changing it changes every fingerprint.
inline constexpr size_t kLeafBytes = 64 * 1024;
// Largest tensor rank a fingerprint header can describe.
inline constexpr size_t kMaxRank = 64;
// First byte of every tensor header: hashed-byte layout of format version 1
// (unchanged in version 2).
inline constexpr uint8_t kTensorHeaderTag = 0xF1;
// First byte hashed by CombineDigests: digest of a digest list, layout of
// format version 1 (unchanged in version 2).
inline constexpr uint8_t kDigestListTag = 0xD1;

// Element types, with the codes written into the fingerprint header. The
// codes are part of the fingerprint definition: never renumber, only add.
enum class DtypeCode : uint8_t {
  kFloat32 = 1,
  kFloat16 = 2,
  kBFloat16 = 3,
  kFloat64 = 4,
  kInt8 = 5,
  kUInt8 = 6,
  kInt16 = 7,
  kUInt16 = 8,
  kInt32 = 9,
  kUInt32 = 10,
  kInt64 = 11,
  kUInt64 = 12,
  kBool = 13,  // one byte per element
};

// Size of one element in bytes, or 0 for a code outside the list above.
size_t DtypeSize(DtypeCode dtype);
// "float32", "int64", ...; "unknown" for a code outside the list.
const char* DtypeName(DtypeCode dtype);

// A 128-bit fingerprint. Value type; the halves are those of libxxhash's
// XXH128_hash_t (hi = high64, lo = low64).
struct Fingerprint {
  uint64_t hi = 0;
  uint64_t lo = 0;

  // 32 lowercase hex digits, most significant first (hi, then lo): the
  // canonical big-endian form of XXH128.
  std::string ToHex() const;
  // Parses ToHex()'s form (upper- or lowercase, exactly 32 digits).
  static absl::StatusOr<Fingerprint> FromHex(absl::string_view hex);

  // The 16-byte little-endian encoding of the 128-bit value
  // (lo's 8 bytes little-endian, then hi's): the form hashed by
  // CombineDigests and stored in fingerprint blobs.
  void ToLittleEndianBytes(uint8_t out[16]) const;
  static Fingerprint FromLittleEndianBytes(const uint8_t in[16]);

  friend bool operator==(const Fingerprint& a, const Fingerprint& b) {
    return a.hi == b.hi && a.lo == b.lo;
  }
  friend bool operator!=(const Fingerprint& a, const Fingerprint& b) {
    return !(a == b);
  }
  template <typename H>
  friend H AbslHashValue(H h, const Fingerprint& f) {
    return H::combine(std::move(h), f.hi, f.lo);
  }
};

// Summary statistics of a float32 tensor; exact definition in SPEC.md
// ("Statistics"). NaN and ±Inf elements are excluded from sum, l2 and
// max_abs and only counted. An empty tensor gives all zeros.
struct TensorStats {
  double sum = 0.0;      // float64 sum of the finite elements (fixed order)
  double l2 = 0.0;       // sqrt of the float64 sum of their squares
  float max_abs = 0.0f;  // largest |x| over finite x; +0.0 if none
  int64_t nan_count = 0;
  int64_t inf_count = 0;
};

// Which leaf-kernel implementation to run. kAuto (the default everywhere) is
// the fastest the CPU supports; the others exist so tests and benchmarks can
// force a path. All give identical results. kAvx512Stream is kAvx512 reading
// 64-byte-aligned leaves by non-temporal loads; kAuto takes it over kAvx512
// on AMD CPUs, where it reads leaves from DRAM faster.
enum class HashIsa { kAuto, kBaseline, kAvx2, kAvx512, kAvx512Stream };

// Whether `isa` can run here (kAuto and kBaseline always can; kAvx2 needs an
// x86-64 build and a CPU with AVX2 and FMA, kAvx512 and kAvx512Stream one
// with AVX-512F, AVX-512DQ and FMA).
bool IsaAvailable(HashIsa isa);
// What kAuto resolves to in this process.
HashIsa SelectedIsa();
// "auto", "baseline", "avx2", "avx512", "avx512-stream".
const char* IsaName(HashIsa isa);

// Fewest leaves one thread of a parallel fingerprint gets by default:
// below about 4 leaves (256 KiB, ~12 us of hashing and statistics on one
// core) per thread, handing work to another thread gains little or nothing
// (docs/benchmarks.md, "Tensor fingerprints").
inline constexpr int64_t kMinLeavesPerThread = 4;

// Threads a caller lends HashTensorBytes and FingerprintAndStats for large
// tensors (the worker passes its CPU kernels' pool). A tensor of at least
// 2 * min_leaves_per_thread leaves is cut into contiguous ranges of leaves,
// at most `threads` of them and none shorter than min_leaves_per_thread;
// each task of `run` hashes (and sums) one range, writing each leaf's
// results into that leaf's own slot, and the calling thread then combines
// the slots in leaf order exactly as it does alone. So the result is the
// same bits for any `threads`, any schedule, and with no Parallelism at
// all. Smaller tensors never call `run`.
struct Parallelism {
  // Threads `run` spreads its tasks over, the calling thread included.
  // 1 or less: `run` is never called.
  int threads = 1;
  // Runs task(0) .. task(num_tasks - 1), each exactly once, in any order
  // and on any threads (inline is fine), and returns when all are done,
  // their writes visible to the caller (as a thread pool's join gives).
  // Unset: the calling thread works alone, as with threads = 1.
  std::function<void(int64_t num_tasks,
                     absl::FunctionRef<void(int64_t task)> task)>
      run;
  // Fewest leaves per range (>= 1; smaller values count as 1).
  int64_t min_leaves_per_thread = kMinLeavesPerThread;
};

// The fingerprint header (SPEC.md "Header"): tag 0xF1, dtype code, rank,
// then each dimension as a little-endian u64. Errors as HashTensorBytes.
absl::StatusOr<std::vector<uint8_t>> EncodeTensorHeader(
    DtypeCode dtype, absl::Span<const int64_t> shape);

// Number of leaves a tensor of `size` bytes has: ceil(size / kLeafBytes).
inline size_t NumLeaves(size_t size) {
  return size / kLeafBytes + (size % kLeafBytes != 0 ? 1 : 0);
}

// The fingerprint of a tensor: `bytes` holds `size` bytes in the tensor's
// row-major layout. Does not take ownership; `bytes` is only read.
// Errors (INVALID_ARGUMENT, naming the argument): unknown dtype, rank above
// kMaxRank, a negative dimension, an element count that overflows, `size`
// not equal to elements * DtypeSize(dtype), null `bytes` with size > 0.
// FAILED_PRECONDITION: `isa` not available on this CPU.
// `parallel` (may be null: the calling thread alone; not owned) lends
// threads for a large tensor; see Parallelism.
absl::StatusOr<Fingerprint> HashTensorBytes(
    DtypeCode dtype, absl::Span<const int64_t> shape, const void* bytes,
    size_t size, HashIsa isa = HashIsa::kAuto,
    const Parallelism* parallel = nullptr);

// Statistics of data[0 .. n). REQUIRES: data readable for n floats (may be
// null when n == 0).
TensorStats ComputeStats(const float* data, size_t n);
// The same on a forced path; FAILED_PRECONDITION if `isa` is unavailable.
absl::StatusOr<TensorStats> ComputeStats(const float* data, size_t n,
                                         HashIsa isa);

struct FingerprintAndStatsResult {
  Fingerprint fingerprint;
  TensorStats stats;
};

// HashTensorBytes and ComputeStats in one pass over memory: each 64 KiB leaf
// is read from memory once for both (on the AVX-512 path in one loop; the
// other paths accumulate its statistics block right after hashing it, while
// it is in cache). Results equal the two separate calls. Errors as
// HashTensorBytes, plus INVALID_ARGUMENT when dtype is not float32
// (statistics are defined for float32 only; hash other tensors with
// HashTensorBytes). `parallel` as for HashTensorBytes: each range computes
// its leaves' statistics blocks too, and the calling thread adds the blocks
// in block order.
absl::StatusOr<FingerprintAndStatsResult> FingerprintAndStats(
    DtypeCode dtype, absl::Span<const int64_t> shape, const void* bytes,
    size_t size, HashIsa isa = HashIsa::kAuto,
    const Parallelism* parallel = nullptr);

// The statistics of a float32 tensor from its per-block partials
// (portable::StatsOfBlock of each 64 KiB leaf, e.g. computed on a device),
// added in block order exactly as ComputeStats does: equal to ComputeStats
// of the same data, bit for bit.
TensorStats CombineBlockStats(absl::Span<const portable::StatsPartial> blocks);

// OK when `size` bytes hold a tensor of `shape` and `dtype`: the checks of
// HashTensorBytes that do not read the bytes (unknown dtype, rank,
// negative or overflowing dimensions, size), with the same errors. For a
// caller that hashes the bytes elsewhere (a device) and wants the
// validation without CombineLeafHashes' hash.
absl::Status CheckTensorSize(DtypeCode dtype, absl::Span<const int64_t> shape,
                             size_t size);

// Combines already computed leaf hashes (e.g. from a device) into the
// fingerprint: XXH3-128 over header || leaf hashes (little-endian u64).
// Errors as HashTensorBytes (without the bytes checks), plus
// INVALID_ARGUMENT when leaf_hashes.size() != NumLeaves(size).
absl::StatusOr<Fingerprint> CombineLeafHashes(
    DtypeCode dtype, absl::Span<const int64_t> shape, size_t size,
    absl::Span<const uint64_t> leaf_hashes);

// Merkle-style digest of an ordered list of fingerprints (a step's tensors,
// a run's steps): XXH3-128 over kDigestListTag followed by each digest's
// 16-byte little-endian encoding, in order. Order-sensitive; an empty list
// hashes the tag byte alone. The tag keeps these digests apart from tensor
// fingerprints, whose input starts with kTensorHeaderTag.
Fingerprint CombineDigests(absl::Span<const Fingerprint> digests);

}  // namespace lockstep::hash

#endif  // LOCKSTEP_KERNELS_HASH_FINGERPRINT_H_
