// Tensor: a dense, contiguous, row-major (NCHW for images) host array.
//
// A Tensor is a cheap handle: copying it shares the underlying storage (like
// a shared_ptr), so kernels receive their outputs as handles and write into
// them. Clone() makes an independent deep copy. Storage is 64-byte aligned
// and zero-filled at creation, so a fresh tensor's bytes are deterministic.
//
// Thread-safety: a Tensor handle may be copied and read from several threads;
// writes to the elements must be synchronised by the caller (nothing here
// locks). Handles sharing storage see each other's writes.
//
// Mirrors: a backend that keeps a whole run's tensors in another memory (a
// GPU's, kernels/residency.h) attaches a StorageMirror to the storage and
// says which copy is newer. Host access (raw_data(), data<T>(), span<T>())
// then brings the mirror's bytes back first when they are newer, so code
// that reads or writes tensors on the host never sees stale bytes; a
// non-const access also marks the host copy newer. Without a mirror (every
// CPU run) the accessors cost one null check.
//
// Limits: rank <= kMaxRank, every dimension >= 0, and the element count
// <= kMaxTensorElements (2^31 - 1, so every element index fits in int32 on a
// GPU). Violations are reported as INVALID_ARGUMENT by the factories; nothing
// here aborts on bad input.
#ifndef LOCKSTEP_KERNELS_TENSOR_H_
#define LOCKSTEP_KERNELS_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace lockstep::kernels {

// Element types. Float32 carries all CANONICAL arithmetic; int32 holds class
// labels, uint8 raw data (e.g. images before normalisation).
enum class DType : uint8_t {
  kFloat32 = 0,
  kInt32 = 1,
  kUInt8 = 2,
};

// Bytes per element (4, 4, 1).
int64_t DTypeSize(DType dtype);
// "float32", "int32", "uint8".
absl::string_view DTypeName(DType dtype);

// The C++ element type of each DType.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kInt32;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kUInt8;
};

inline constexpr int kMaxRank = 8;
inline constexpr int64_t kMaxTensorElements = (int64_t{1} << 31) - 1;
inline constexpr size_t kTensorAlignment = 64;

// Checks a shape against the limits above and returns its element count.
// Errors name the offending dimension and the limit.
absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> shape);

// "[2, 3, 4]"; "[]" for a scalar.
std::string ShapeString(absl::Span<const int64_t> shape);

// A copy of a storage's bytes in another memory, owned by the storage (see
// "Mirrors" above). Implementations free their memory when destroyed.
class StorageMirror {
 public:
  virtual ~StorageMirror() = default;
  // Copies the mirror's bytes (as many as the storage's tensor has) to
  // `host`.
  virtual absl::Status CopyToHost(void* host) = 0;
};

// Which copy of a mirrored storage is current.
enum class MirrorState : uint8_t {
  kHostNewer,    // the host bytes; the mirror is stale (or was never filled)
  kSame,         // both hold the same bytes
  kMirrorNewer,  // the mirror's (a backend wrote it); the host bytes are stale
};

class Tensor {
 public:
  // An empty float32 tensor of shape [0] with no storage.
  Tensor();

  // A zero-filled tensor. INVALID_ARGUMENT on a bad shape,
  // RESOURCE_EXHAUSTED when the allocation fails.
  static absl::StatusOr<Tensor> Zeros(DType dtype, std::vector<int64_t> shape);

  // A tensor holding a copy of `values` (row-major). INVALID_ARGUMENT when
  // values.size() differs from the shape's element count.
  template <typename T>
  static absl::StatusOr<Tensor> FromValues(std::vector<int64_t> shape,
                                           absl::Span<const T> values);

  // Copies are cheap and share storage; see Clone().
  Tensor(const Tensor&) = default;
  Tensor& operator=(const Tensor&) = default;
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;

  // A deep copy with its own storage.
  absl::StatusOr<Tensor> Clone() const;

  // A handle on the same storage with another shape of the same element
  // count (a view: writes through either handle are visible in both).
  absl::StatusOr<Tensor> Reshape(std::vector<int64_t> shape) const;

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  // REQUIRES: 0 <= i < rank().
  int64_t dim(int i) const { return shape_[i]; }
  // Row-major strides in elements (the last one is 1).
  std::vector<int64_t> strides() const;
  int64_t numel() const { return numel_; }
  int64_t bytes() const { return numel_ * DTypeSize(dtype_); }
  // True when two handles share storage.
  bool SharesStorageWith(const Tensor& other) const {
    return storage_ != nullptr && storage_ == other.storage_;
  }

  // Typed element access. Returns nullptr when T does not match dtype()
  // (callers validate dtypes first, see CheckDType) or when numel() == 0.
  template <typename T>
  T* data() {
    return DTypeOf<T>::value == dtype_ ? static_cast<T*>(raw_data()) : nullptr;
  }
  template <typename T>
  const T* data() const {
    return DTypeOf<T>::value == dtype_ ? static_cast<const T*>(raw_data())
                                       : nullptr;
  }
  // Typed span over all elements; empty on a dtype mismatch.
  template <typename T>
  absl::Span<T> span() {
    T* p = data<T>();
    return p == nullptr ? absl::Span<T>() : absl::Span<T>(p, numel_);
  }
  template <typename T>
  absl::Span<const T> span() const {
    const T* p = data<T>();
    return p == nullptr ? absl::Span<const T>()
                        : absl::Span<const T>(p, numel_);
  }
  // The host bytes, brought back from a newer mirror first; the non-const
  // form marks the host copy newer. A mirror that cannot copy back (a lost
  // device) ends the process with a message on stderr: no caller could
  // use stale bytes safely.
  void* raw_data();
  const void* raw_data() const;

  // For backends that keep tensors in a mirror (kernels/residency.h). The
  // host address without bringing anything back: the storage's identity, or
  // the place to copy the host bytes from once MirrorStateIs(kHostNewer).
  void* unsynced_data() const;
  // The storage's mirror, or null (also for an empty tensor).
  StorageMirror* mirror() const;
  // mirror() != nullptr, without taking the storage's lock.
  bool has_mirror() const;
  // Attaches `mirror` in state kHostNewer (a storage has at most one; a
  // second call replaces it). No-op for an empty tensor.
  void AttachMirror(std::unique_ptr<StorageMirror> mirror);
  MirrorState mirror_state() const;
  // REQUIRES: mirror() != nullptr.
  void SetMirrorState(MirrorState state) const;

  // "float32[2, 3, 4]".
  std::string DebugString() const;

 private:
  struct Storage;
  Tensor(DType dtype, std::vector<int64_t> shape, int64_t numel,
         std::shared_ptr<Storage> storage);

  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> shape_ = {0};
  int64_t numel_ = 0;
  std::shared_ptr<Storage> storage_;
};

// INVALID_ARGUMENT "<name> must be float32, got int32" unless t has dtype.
absl::Status CheckDType(const Tensor& t, DType dtype, absl::string_view name);
// INVALID_ARGUMENT "<name> has shape [..], expected [..]" unless equal.
absl::Status CheckShape(const Tensor& t, absl::Span<const int64_t> shape,
                        absl::string_view name);

template <typename T>
absl::StatusOr<Tensor> Tensor::FromValues(std::vector<int64_t> shape,
                                          absl::Span<const T> values) {
  absl::StatusOr<Tensor> t = Zeros(DTypeOf<T>::value, std::move(shape));
  if (!t.ok()) return t.status();
  if (static_cast<int64_t>(values.size()) != t->numel()) {
    return absl::InvalidArgumentError(
        "FromValues: shape " + ShapeString(t->shape()) + " has " +
        std::to_string(t->numel()) + " elements but " +
        std::to_string(values.size()) + " values were given");
  }
  T* dst = t->template data<T>();
  for (size_t i = 0; i < values.size(); ++i) dst[i] = values[i];
  return t;
}

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_TENSOR_H_
