#include "kernels/tensor.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace lockstep::kernels {

// Owned, 64-byte aligned, zero-filled bytes. Never resized.
struct Tensor::Storage {
  explicit Storage(void* p) : ptr(p) {}
  ~Storage() {
    mirror.reset();
    ::operator delete(ptr, std::align_val_t(kTensorAlignment));
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // Brings a newer mirror's bytes back; then the host copy is the newer one
  // when `host_writes`, else both are the same.
  void Sync(bool host_writes) {
    std::lock_guard<std::mutex> lock(mu);
    if (state == MirrorState::kMirrorNewer) {
      const absl::Status s = mirror->CopyToHost(ptr);
      if (!s.ok()) {
        std::fprintf(stderr,
                     "fatal: cannot copy a tensor back from its mirror: %s\n",
                     s.ToString().c_str());
        std::abort();
      }
      state = MirrorState::kSame;
    }
    if (host_writes) state = MirrorState::kHostNewer;
  }

  void* ptr;
  std::mutex mu;
  std::unique_ptr<StorageMirror> mirror;        // guarded by mu
  MirrorState state = MirrorState::kHostNewer;  // guarded by mu
  // mirror != nullptr, readable without the lock: the accessors' fast path.
  std::atomic<bool> mirrored{false};
};

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kInt32:
      return 4;
    case DType::kUInt8:
      return 1;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kInt32:
      return "int32";
    case DType::kUInt8:
      return "uint8";
  }
  return "unknown";
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<int64_t> CheckedNumElements(absl::Span<const int64_t> shape) {
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shape %s has rank %d, the limit is %d",
                        ShapeString(shape), shape.size(), kMaxRank));
  }
  int64_t numel = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t d = shape[i];
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("shape %s: dimension %d is %d, must be >= 0",
                          ShapeString(shape), i, d));
    }
    if (d > kMaxTensorElements) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "shape %s: dimension %d is %d, over the limit of %d elements",
          ShapeString(shape), i, d, kMaxTensorElements));
    }
    // Both factors are <= 2^31 - 1, so the product fits in int64.
    numel *= d;
    if (numel > kMaxTensorElements) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "shape %s has more than %d elements (the limit, 2^31 - 1)",
          ShapeString(shape), kMaxTensorElements));
    }
  }
  return numel;
}

Tensor::Tensor() = default;

Tensor::Tensor(DType dtype, std::vector<int64_t> shape, int64_t numel,
               std::shared_ptr<Storage> storage)
    : dtype_(dtype),
      shape_(std::move(shape)),
      numel_(numel),
      storage_(std::move(storage)) {}

absl::StatusOr<Tensor> Tensor::Zeros(DType dtype, std::vector<int64_t> shape) {
  absl::StatusOr<int64_t> numel = CheckedNumElements(shape);
  if (!numel.ok()) return numel.status();
  const int64_t bytes = *numel * DTypeSize(dtype);
  std::shared_ptr<Storage> storage;
  if (bytes > 0) {
    // Round up so vector code may read whole 64-byte lines.
    const size_t padded = (static_cast<size_t>(bytes) + kTensorAlignment - 1) /
                          kTensorAlignment * kTensorAlignment;
    void* p = ::operator new(padded, std::align_val_t(kTensorAlignment),
                             std::nothrow);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("cannot allocate %d bytes for a %s%s tensor", bytes,
                          DTypeName(dtype), ShapeString(shape)));
    }
    std::memset(p, 0, padded);
    storage = std::make_shared<Storage>(p);
  }
  return Tensor(dtype, std::move(shape), *numel, std::move(storage));
}

absl::StatusOr<Tensor> Tensor::Clone() const {
  absl::StatusOr<Tensor> copy = Zeros(dtype_, shape_);
  if (!copy.ok()) return copy.status();
  if (bytes() > 0) std::memcpy(copy->raw_data(), raw_data(), bytes());
  return copy;
}

absl::StatusOr<Tensor> Tensor::Reshape(std::vector<int64_t> shape) const {
  absl::StatusOr<int64_t> numel = CheckedNumElements(shape);
  if (!numel.ok()) return numel.status();
  if (*numel != numel_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot reshape %s (%d elements) to %s (%d elements)",
                        DebugString(), numel_, ShapeString(shape), *numel));
  }
  return Tensor(dtype_, std::move(shape), numel_, storage_);
}

std::vector<int64_t> Tensor::strides() const {
  std::vector<int64_t> s(shape_.size());
  int64_t stride = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    s[i] = stride;
    stride *= shape_[i];
  }
  return s;
}

void* Tensor::raw_data() {
  if (storage_ == nullptr) return nullptr;
  if (storage_->mirrored.load(std::memory_order_acquire)) {
    storage_->Sync(/*host_writes=*/true);
  }
  return storage_->ptr;
}
const void* Tensor::raw_data() const {
  if (storage_ == nullptr) return nullptr;
  if (storage_->mirrored.load(std::memory_order_acquire)) {
    storage_->Sync(/*host_writes=*/false);
  }
  return storage_->ptr;
}

void* Tensor::unsynced_data() const {
  return storage_ ? storage_->ptr : nullptr;
}

bool Tensor::has_mirror() const {
  return storage_ != nullptr &&
         storage_->mirrored.load(std::memory_order_acquire);
}

StorageMirror* Tensor::mirror() const {
  if (storage_ == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(storage_->mu);
  return storage_->mirror.get();
}

void Tensor::AttachMirror(std::unique_ptr<StorageMirror> mirror) {
  if (storage_ == nullptr) return;
  std::lock_guard<std::mutex> lock(storage_->mu);
  storage_->mirror = std::move(mirror);
  storage_->state = MirrorState::kHostNewer;
  storage_->mirrored.store(storage_->mirror != nullptr,
                           std::memory_order_release);
}

MirrorState Tensor::mirror_state() const {
  if (storage_ == nullptr) return MirrorState::kHostNewer;
  std::lock_guard<std::mutex> lock(storage_->mu);
  return storage_->state;
}

void Tensor::SetMirrorState(MirrorState state) const {
  std::lock_guard<std::mutex> lock(storage_->mu);
  storage_->state = state;
}

std::string Tensor::DebugString() const {
  return absl::StrCat(DTypeName(dtype_), ShapeString(shape_));
}

absl::Status CheckDType(const Tensor& t, DType dtype, absl::string_view name) {
  if (t.dtype() == dtype) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s must be %s, got %s", name, DTypeName(dtype), t.DebugString()));
}

absl::Status CheckShape(const Tensor& t, absl::Span<const int64_t> shape,
                        absl::string_view name) {
  if (absl::Span<const int64_t>(t.shape()) == shape) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s has shape %s, expected %s", name,
                      ShapeString(t.shape()), ShapeString(shape)));
}

}  // namespace lockstep::kernels
