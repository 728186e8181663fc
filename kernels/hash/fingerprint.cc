#include "kernels/hash/fingerprint.h"

// xxHash inline: the combine of a small tensor (header and one leaf hash)
// is a short XXH3-128, whose call into the shared library cost more than
// its arithmetic.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/hash/leaf_kernels.h"

namespace lockstep::hash {
namespace {

using internal::LeafKernels;
using internal::LeafStats;

// The bytes fed to XXH3-128: header plus leaf hashes. Tensors of up to about
// 256 leaves (16 MiB) need no heap allocation.
using HashInput = absl::InlinedVector<uint8_t, 1024 + 8 * 256>;

constexpr size_t kF32Size = 4;
constexpr size_t kBlockElems = kLeafBytes / kF32Size;

// Writes v as 8 little-endian bytes at out; returns the position after
// them. One unaligned store on a little-endian host (GCC 12 turned the
// byte loop into eight byte stores).
uint8_t* PutLe64(uint64_t v, uint8_t* out) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  std::memcpy(out, &v, sizeof(v));
#else
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
#endif
  return out + 8;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
bool CpuSupports(bool avx512) {
  __builtin_cpu_init();
  const bool fma = __builtin_cpu_supports("fma") != 0;
  return fma && (avx512 ? __builtin_cpu_supports("avx512f") != 0 &&
                              __builtin_cpu_supports("avx512dq") != 0
                        : __builtin_cpu_supports("avx2") != 0);
}
// AMD's cores read with non-temporal loads faster (leaf_kernels.h,
// Avx512StreamLeafKernels).
bool PreferStreamLoads() {
  __builtin_cpu_init();
  return __builtin_cpu_is("amd") != 0;
}
#else
bool CpuSupports(bool /*avx512*/) { return false; }
bool PreferStreamLoads() { return false; }
#endif

const LeafKernels* Avx2IfUsable() {
  static const bool cpu = CpuSupports(/*avx512=*/false);
  const LeafKernels* k = internal::Avx2LeafKernels();
  return (k != nullptr && cpu) ? k : nullptr;
}

const LeafKernels* Avx512IfUsable(bool stream = false) {
  static const bool cpu = CpuSupports(/*avx512=*/true);
  const LeafKernels* k = stream ? internal::Avx512StreamLeafKernels()
                                : internal::Avx512LeafKernels();
  return (k != nullptr && cpu) ? k : nullptr;
}

absl::StatusOr<const LeafKernels*> KernelsFor(HashIsa isa) {
  switch (isa) {
    case HashIsa::kAuto: {
      static const LeafKernels* const kAuto = [] {
        if (const LeafKernels* k = Avx512IfUsable(PreferStreamLoads())) {
          return k;
        }
        if (const LeafKernels* k = Avx2IfUsable()) return k;
        return &internal::BaselineLeafKernels();
      }();
      return kAuto;
    }
    case HashIsa::kBaseline:
      return &internal::BaselineLeafKernels();
    case HashIsa::kAvx2: {
      const LeafKernels* k = Avx2IfUsable();
      if (k == nullptr) {
        return absl::FailedPreconditionError(
            internal::Avx2LeafKernels() == nullptr
                ? "isa: avx2 requested but this build has no AVX2 kernels"
                : "isa: avx2 requested but this CPU does not support AVX2 "
                  "and FMA");
      }
      return k;
    }
    case HashIsa::kAvx512:
    case HashIsa::kAvx512Stream: {
      const LeafKernels* k = Avx512IfUsable(isa == HashIsa::kAvx512Stream);
      if (k == nullptr) {
        return absl::FailedPreconditionError(
            internal::Avx512LeafKernels() == nullptr
                ? absl::StrFormat(
                      "isa: %s requested but this build has no AVX-512 "
                      "kernels",
                      IsaName(isa))
                : absl::StrFormat(
                      "isa: %s requested but this CPU does not support "
                      "AVX-512F, AVX-512DQ and FMA",
                      IsaName(isa)));
      }
      return k;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("isa: unknown value %d", static_cast<int>(isa)));
}

// Checks dtype and shape and returns the tensor's size in bytes.
absl::StatusOr<size_t> CheckedByteSize(DtypeCode dtype,
                                       absl::Span<const int64_t> shape) {
  const size_t elem = DtypeSize(dtype);
  if (elem == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dtype: unknown code %d (known codes are %d..%d)",
        static_cast<int>(dtype), static_cast<int>(DtypeCode::kFloat32),
        static_cast<int>(DtypeCode::kBool)));
  }
  if (shape.size() > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shape: rank %d exceeds the limit of %d", shape.size(), kMaxRank));
  }
  bool empty = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("shape[%d]: dimension %d is negative", i, shape[i]));
    }
    if (shape[i] == 0) empty = true;
  }
  if (empty) return size_t{0};
  size_t bytes = elem;
  for (int64_t dim : shape) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(dim), &bytes)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("shape: [%s] of %s exceeds the addressable size",
                          absl::StrJoin(shape, ","), DtypeName(dtype)));
    }
  }
  return bytes;
}

absl::Status CheckBytes(DtypeCode dtype, absl::Span<const int64_t> shape,
                        const void* bytes, size_t size) {
  if (absl::Status s = CheckTensorSize(dtype, shape, size); !s.ok()) return s;
  if (bytes == nullptr && size > 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bytes: null with size %d", size));
  }
  return absl::OkStatus();
}

// Whether CheckBytes would return OK, without building a status: every
// tensor a run fingerprints passes the checks, and on their success path
// the status objects cost more than hashing a small tensor's header.
// CheckBytes stays the authority: a caller that gets false asks it for the
// error.
bool BytesOk(DtypeCode dtype, absl::Span<const int64_t> shape,
             const void* bytes, size_t size) {
  size_t want = DtypeSize(dtype);
  if (want == 0 || shape.size() > kMaxRank) return false;
  bool empty = false;
  bool overflow = false;
  for (int64_t d : shape) {
    if (d < 0) return false;
    empty |= d == 0;
    overflow |= __builtin_mul_overflow(want, static_cast<uint64_t>(d), &want);
  }
  if (empty) want = 0;
  return (empty || !overflow) && want == size &&
         (bytes != nullptr || size == 0);
}

// Appends the header (SPEC.md "Header"); dtype and rank already checked.
// The input is sized once and written in place: for small tensors the
// per-byte push_backs cost more than hashing the header.
size_t HeaderSize(absl::Span<const int64_t> shape) {
  return 3 + 8 * shape.size();
}

uint8_t* PutHeader(DtypeCode dtype, absl::Span<const int64_t> shape,
                   uint8_t* out) {
  out[0] = kTensorHeaderTag;
  out[1] = static_cast<uint8_t>(dtype);
  out[2] = static_cast<uint8_t>(shape.size());
  out += 3;
  for (int64_t d : shape) out = PutLe64(static_cast<uint64_t>(d), out);
  return out;
}

Fingerprint Hash128(const HashInput& in) {
  const XXH128_hash_t h = XXH3_128bits(in.data(), in.size());
  Fingerprint f;
  f.hi = h.high64;
  f.lo = h.low64;
  return f;
}

float FloatFromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Running totals over blocks, in block order (SPEC.md "Statistics").
class StatsTotals {
 public:
  void Add(const LeafStats& b) {
    sum_ = sum_ + b.sum;
    sum_sq_ = sum_sq_ + b.sum_sq;
    if (b.max_abs_bits > max_abs_bits_) max_abs_bits_ = b.max_abs_bits;
    nan_count_ += b.nan_count;
    inf_count_ += b.inf_count;
  }
  TensorStats Finish() const {
    TensorStats s;
    s.sum = sum_;
    s.l2 = std::sqrt(sum_sq_);
    s.max_abs = FloatFromBits(max_abs_bits_);
    s.nan_count = nan_count_;
    s.inf_count = inf_count_;
    return s;
  }

 private:
  double sum_ = 0.0;
  double sum_sq_ = 0.0;
  uint32_t max_abs_bits_ = 0;
  int64_t nan_count_ = 0;
  int64_t inf_count_ = 0;
};

// Bytes in the leaf that starts at byte `off` of a `size`-byte tensor.
size_t LeafLen(size_t size, size_t off) {
  return size - off < kLeafBytes ? size - off : kLeafBytes;
}

// How many leaf ranges a tensor of `leaves` leaves is cut into under
// `parallel`; 1 or less means the calling thread's own loop.
int64_t RangesFor(size_t leaves, const Parallelism* parallel) {
  if (parallel == nullptr || parallel->threads <= 1 || !parallel->run) {
    return 1;
  }
  const int64_t min_leaves =
      std::max<int64_t>(1, parallel->min_leaves_per_thread);
  return std::min<int64_t>(parallel->threads,
                           static_cast<int64_t>(leaves) / min_leaves);
}

// Runs fn(first, last) on `parallel`'s threads for `ranges` contiguous
// ranges covering leaves [0, leaves), as equal as whole leaves allow.
void ForLeafRanges(const Parallelism& parallel, size_t leaves, int64_t ranges,
                   absl::FunctionRef<void(size_t first, size_t last)> fn) {
  const size_t r_count = static_cast<size_t>(ranges);
  parallel.run(ranges, [&](int64_t r) {
    const size_t i = static_cast<size_t>(r);
    fn(leaves * i / r_count, leaves * (i + 1) / r_count);
  });
}

TensorStats StatsWith(const LeafKernels& k, const float* data, size_t n) {
  StatsTotals totals;
  for (size_t off = 0; off < n; off += kBlockElems) {
    const size_t len = n - off < kBlockElems ? n - off : kBlockElems;
    totals.Add(k.block_stats(data + off, len, nullptr, 0));
  }
  return totals.Finish();
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

size_t DtypeSize(DtypeCode dtype) {
  switch (dtype) {
    case DtypeCode::kInt8:
    case DtypeCode::kUInt8:
    case DtypeCode::kBool:
      return 1;
    case DtypeCode::kFloat16:
    case DtypeCode::kBFloat16:
    case DtypeCode::kInt16:
    case DtypeCode::kUInt16:
      return 2;
    case DtypeCode::kFloat32:
    case DtypeCode::kInt32:
    case DtypeCode::kUInt32:
      return 4;
    case DtypeCode::kFloat64:
    case DtypeCode::kInt64:
    case DtypeCode::kUInt64:
      return 8;
  }
  return 0;
}

const char* DtypeName(DtypeCode dtype) {
  switch (dtype) {
    case DtypeCode::kFloat32:
      return "float32";
    case DtypeCode::kFloat16:
      return "float16";
    case DtypeCode::kBFloat16:
      return "bfloat16";
    case DtypeCode::kFloat64:
      return "float64";
    case DtypeCode::kInt8:
      return "int8";
    case DtypeCode::kUInt8:
      return "uint8";
    case DtypeCode::kInt16:
      return "int16";
    case DtypeCode::kUInt16:
      return "uint16";
    case DtypeCode::kInt32:
      return "int32";
    case DtypeCode::kUInt32:
      return "uint32";
    case DtypeCode::kInt64:
      return "int64";
    case DtypeCode::kUInt64:
      return "uint64";
    case DtypeCode::kBool:
      return "bool";
  }
  return "unknown";
}

std::string Fingerprint::ToHex() const {
  return absl::StrFormat("%016x%016x", hi, lo);
}

absl::StatusOr<Fingerprint> Fingerprint::FromHex(absl::string_view hex) {
  if (hex.size() != 32) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hex: %d characters, a fingerprint has exactly 32", hex.size()));
  }
  Fingerprint f;
  for (size_t i = 0; i < 32; ++i) {
    const int v = HexValue(hex[i]);
    if (v < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "hex: character %d ('%c') is not a hex digit", i, hex[i]));
    }
    uint64_t& half = i < 16 ? f.hi : f.lo;
    half = (half << 4) | static_cast<uint64_t>(v);
  }
  return f;
}

void Fingerprint::ToLittleEndianBytes(uint8_t out[16]) const {
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<uint8_t>(lo >> (8 * i));
    out[8 + i] = static_cast<uint8_t>(hi >> (8 * i));
  }
}

Fingerprint Fingerprint::FromLittleEndianBytes(const uint8_t in[16]) {
  Fingerprint f;
  for (int i = 7; i >= 0; --i) {
    f.lo = (f.lo << 8) | in[i];
    f.hi = (f.hi << 8) | in[8 + i];
  }
  return f;
}

bool IsaAvailable(HashIsa isa) { return KernelsFor(isa).ok(); }

HashIsa SelectedIsa() {
  const LeafKernels* k = *KernelsFor(HashIsa::kAuto);
  if (k == &internal::BaselineLeafKernels()) return HashIsa::kBaseline;
  if (k == internal::Avx512StreamLeafKernels()) return HashIsa::kAvx512Stream;
  return k == internal::Avx512LeafKernels() ? HashIsa::kAvx512 : HashIsa::kAvx2;
}

const char* IsaName(HashIsa isa) {
  switch (isa) {
    case HashIsa::kAuto:
      return "auto";
    case HashIsa::kBaseline:
      return "baseline";
    case HashIsa::kAvx2:
      return "avx2";
    case HashIsa::kAvx512:
      return "avx512";
    case HashIsa::kAvx512Stream:
      return "avx512-stream";
  }
  return "unknown";
}

absl::StatusOr<std::vector<uint8_t>> EncodeTensorHeader(
    DtypeCode dtype, absl::Span<const int64_t> shape) {
  absl::StatusOr<size_t> size = CheckedByteSize(dtype, shape);
  if (!size.ok()) return size.status();
  std::vector<uint8_t> header(HeaderSize(shape));
  PutHeader(dtype, shape, header.data());
  return header;
}

absl::StatusOr<Fingerprint> HashTensorBytes(DtypeCode dtype,
                                            absl::Span<const int64_t> shape,
                                            const void* bytes, size_t size,
                                            HashIsa isa,
                                            const Parallelism* parallel) {
  absl::StatusOr<const LeafKernels*> kernels = KernelsFor(isa);
  if (!kernels.ok()) return kernels.status();
  if (!BytesOk(dtype, shape, bytes, size)) {
    if (absl::Status s = CheckBytes(dtype, shape, bytes, size); !s.ok()) {
      return s;
    }
  }
  const LeafKernels& k = **kernels;
  const auto* p = static_cast<const uint8_t*>(bytes);
  const size_t leaves = NumLeaves(size);
  HashInput in(HeaderSize(shape) + 8 * leaves);
  uint8_t* out = PutHeader(dtype, shape, in.data());
  if (const int64_t ranges = RangesFor(leaves, parallel); ranges > 1) {
    // Leaf i's hash goes to its own slot of the input, whichever thread
    // computes it: the input is the same bytes as the loop below writes.
    ForLeafRanges(*parallel, leaves, ranges, [&](size_t first, size_t last) {
      for (size_t i = first; i < last; ++i) {
        const size_t off = i * kLeafBytes;
        PutLe64(k.hash64(p + off, LeafLen(size, off)), out + 8 * i);
      }
    });
    return Hash128(in);
  }
  for (size_t off = 0; off < size; off += kLeafBytes) {
    out = PutLe64(k.hash64(p + off, LeafLen(size, off)), out);
  }
  return Hash128(in);
}

TensorStats CombineBlockStats(absl::Span<const portable::StatsPartial> blocks) {
  StatsTotals totals;
  for (const portable::StatsPartial& b : blocks) {
    totals.Add(
        LeafStats{b.sum, b.sum_sq, b.max_abs_bits, b.nan_count, b.inf_count});
  }
  return totals.Finish();
}

TensorStats ComputeStats(const float* data, size_t n) {
  return StatsWith(**KernelsFor(HashIsa::kAuto), data, n);
}

absl::StatusOr<TensorStats> ComputeStats(const float* data, size_t n,
                                         HashIsa isa) {
  absl::StatusOr<const LeafKernels*> kernels = KernelsFor(isa);
  if (!kernels.ok()) return kernels.status();
  return StatsWith(**kernels, data, n);
}

absl::StatusOr<FingerprintAndStatsResult> FingerprintAndStats(
    DtypeCode dtype, absl::Span<const int64_t> shape, const void* bytes,
    size_t size, HashIsa isa, const Parallelism* parallel) {
  absl::StatusOr<const LeafKernels*> kernels = KernelsFor(isa);
  if (!kernels.ok()) return kernels.status();
  if (dtype != DtypeCode::kFloat32) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dtype: statistics are defined for float32 only, got %s; use "
        "HashTensorBytes",
        DtypeName(dtype)));
  }
  if (!BytesOk(dtype, shape, bytes, size)) {
    if (absl::Status s = CheckBytes(dtype, shape, bytes, size); !s.ok()) {
      return s;
    }
  }
  if (reinterpret_cast<uintptr_t>(bytes) % alignof(float) != 0) {
    return absl::InvalidArgumentError(
        "bytes: float32 data must be 4-byte aligned");
  }
  const LeafKernels& k = **kernels;
  const auto* p = static_cast<const uint8_t*>(bytes);
  const size_t leaves = NumLeaves(size);
  HashInput in(HeaderSize(shape) + 8 * leaves);
  uint8_t* out = PutHeader(dtype, shape, in.data());
  StatsTotals totals;
  if (const int64_t ranges = RangesFor(leaves, parallel); ranges > 1) {
    // Each leaf's hash goes to its slot of the input and its statistics
    // block to blocks[i]; the blocks are then added in block order, the
    // same additions in the same order as the loop below.
    std::vector<LeafStats> blocks(leaves);
    ForLeafRanges(*parallel, leaves, ranges, [&](size_t first, size_t last) {
      for (size_t i = first; i < last; ++i) {
        const size_t off = i * kLeafBytes;
        const size_t len = LeafLen(size, off);
        // Prefetch the next leaf of this range only; the next range's
        // first leaf is another thread's.
        const size_t next = off + len;
        const size_t next_len = i + 1 < last ? LeafLen(size, next) : 0;
        const internal::LeafHashStats h =
            k.hash_and_stats(reinterpret_cast<const float*>(p + off),
                             len / kF32Size, p + next, next_len);
        PutLe64(h.hash, out + 8 * i);
        blocks[i] = h.stats;
      }
    });
    for (const LeafStats& b : blocks) totals.Add(b);
    FingerprintAndStatsResult r;
    r.fingerprint = Hash128(in);
    r.stats = totals.Finish();
    return r;
  }
  for (size_t off = 0; off < size; off += kLeafBytes) {
    const size_t len = size - off < kLeafBytes ? size - off : kLeafBytes;
    // A leaf is exactly one statistics block. While it is read, the next
    // leaf is prefetched.
    const size_t next = off + len;
    const size_t next_len = size - next < kLeafBytes ? size - next : kLeafBytes;
    const internal::LeafHashStats h =
        k.hash_and_stats(reinterpret_cast<const float*>(p + off),
                         len / kF32Size, p + next, next_len);
    out = PutLe64(h.hash, out);
    totals.Add(h.stats);
  }
  FingerprintAndStatsResult r;
  r.fingerprint = Hash128(in);
  r.stats = totals.Finish();
  return r;
}

absl::Status CheckTensorSize(DtypeCode dtype, absl::Span<const int64_t> shape,
                             size_t size) {
  absl::StatusOr<size_t> want = CheckedByteSize(dtype, shape);
  if (!want.ok()) return want.status();
  if (*want != size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "size: %d bytes given, but shape [%s] of %s needs %d", size,
        absl::StrJoin(shape, ","), DtypeName(dtype), *want));
  }
  return absl::OkStatus();
}

absl::StatusOr<Fingerprint> CombineLeafHashes(
    DtypeCode dtype, absl::Span<const int64_t> shape, size_t size,
    absl::Span<const uint64_t> leaf_hashes) {
  if (absl::Status s = CheckTensorSize(dtype, shape, size); !s.ok()) return s;
  if (leaf_hashes.size() != NumLeaves(size)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "leaf_hashes: %d given, a tensor of %d bytes has %d leaves",
        leaf_hashes.size(), size, NumLeaves(size)));
  }
  HashInput in(HeaderSize(shape) + 8 * leaf_hashes.size());
  uint8_t* out = PutHeader(dtype, shape, in.data());
  for (uint64_t h : leaf_hashes) out = PutLe64(h, out);
  return Hash128(in);
}

Fingerprint CombineDigests(absl::Span<const Fingerprint> digests) {
  HashInput in;
  in.reserve(1 + 16 * digests.size());
  in.push_back(kDigestListTag);
  uint8_t le[16];
  for (const Fingerprint& d : digests) {
    d.ToLittleEndianBytes(le);
    in.insert(in.end(), le, le + 16);
  }
  return Hash128(in);
}

}  // namespace lockstep::hash
