// Device-resident runs: a whole job's tensors kept in a backend's memory.
//
// By default a kernel of the CUDA backend copies its host inputs to the
// device, runs, and copies its outputs back (docs/gpu.md, "The data path").
// While a ScopedResidentRun is alive on a thread, the CANONICAL kernels of
// the backends that support residency (the CUDA backend, and its host
// emulation in tests) instead keep every tensor they touch in a mirror that
// stays attached to the tensor's storage (kernels/tensor.h, "Mirrors"):
//
//   - an input is copied in only when the host copy is newer (parameters
//     after their host initialisation, a new data batch, a host-written
//     bit flip), once; an output stays in the mirror, marked newer;
//   - host code that touches a tensor (the loss read, batch-norm running
//     statistics, gradient clipping's scalars, dumps) gets the mirror's
//     bytes back first, automatically, through Tensor's accessors;
//   - the executor fingerprints a tensor whose mirror is newer where it is
//     (ResidentMirror::FingerprintAndStats: on a GPU, the device
//     fingerprint; only 56 bytes come back), so the run's fingerprints need
//     no copies either;
//   - better still, it queues those fingerprints
//     (ResidentMirror::QueueFingerprintAndStats) and collects a whole
//     step's results at once (CollectQueuedFingerprints): on a GPU one
//     copy back, so the device waits for the host once per step instead of
//     once per tensor, and the host plans the next kernels while the device
//     hashes.
//
// The bits are the same either way: residency moves bytes, never changes
// what a kernel computes. The counters say how many copies a run needed.
//
// Thread-safety: the scope is per thread (the executor's); kernels consult
// it on the thread that calls them.
#ifndef LOCKSTEP_KERNELS_RESIDENCY_H_
#define LOCKSTEP_KERNELS_RESIDENCY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/hash/fingerprint.h"
#include "kernels/tensor.h"

namespace lockstep::kernels {

struct ResidencyCounters {
  int64_t uploads = 0;  // host -> mirror copies of a tensor
  int64_t upload_bytes = 0;
  int64_t downloads = 0;  // mirror -> host copies of a tensor
  int64_t download_bytes = 0;
  int64_t mirror_fingerprints = 0;  // tensors fingerprinted in their mirror
  int64_t mirrors_created = 0;
  // Of mirror_fingerprints, those queued, and the collections that brought
  // their results back (one wait for the device each).
  int64_t queued_fingerprints = 0;
  int64_t fingerprint_collections = 0;
};

// Fingerprints queued in a backend's memory (ResidentMirror::
// QueueFingerprintAndStats) whose results come back together.
class FingerprintQueue {
 public:
  virtual ~FingerprintQueue() = default;
  // Appends the results of every fingerprint queued since the last
  // collection to `out`, in queue order, and empties the queue.
  virtual absl::Status Collect(
      std::vector<hash::FingerprintAndStatsResult>* out) = 0;
};

// Makes the calling thread's kernel calls resident until destroyed (scopes
// nest; the innermost one counts).
// `counters` (not owned; must outlive the scope) collects what the calls
// copy, so one run's counters can span several scopes (one per step).
class ScopedResidentRun {
 public:
  explicit ScopedResidentRun(ResidencyCounters* counters);
  ~ScopedResidentRun();
  ScopedResidentRun(const ScopedResidentRun&) = delete;
  ScopedResidentRun& operator=(const ScopedResidentRun&) = delete;

 private:
  friend ResidencyCounters* ActiveResidentRun();
  friend std::unique_ptr<FingerprintQueue>* ActiveFingerprintQueue();
  ResidencyCounters* counters_;
  ScopedResidentRun* outer_;
  // Fingerprints queued inside this scope and not collected yet; a scope
  // that ends with some discards them (a failed step).
  std::unique_ptr<FingerprintQueue> queue_;
};

// The innermost scope's counters on this thread, or null: whether the
// calling thread's kernel calls are resident.
ResidencyCounters* ActiveResidentRun();

// The innermost scope's fingerprint queue on this thread (null inside: no
// fingerprint queued yet; a backend's mirror makes its own kind), or null
// without a scope.
std::unique_ptr<FingerprintQueue>* ActiveFingerprintQueue();

// The results of every fingerprint queued in the innermost scope since the
// last collection, in queue order (ResidentMirror::
// QueueFingerprintAndStats returned each one's position); empty when none
// was. FAILED_PRECONDITION without a scope; the backend's error (a lost
// device) otherwise.
absl::StatusOr<std::vector<hash::FingerprintAndStatsResult>>
CollectQueuedFingerprints();

// A backend's mirror: copies back, and fingerprints its bytes where they
// are. A backend increments the active scope's counters for what it does.
class ResidentMirror : public StorageMirror {
 public:
  // hash::FingerprintAndStats of the mirror's bytes (float32).
  virtual absl::StatusOr<hash::FingerprintAndStatsResult> FingerprintAndStats(
      hash::DtypeCode dtype, absl::Span<const int64_t> shape, size_t size) = 0;
  // hash::HashTensorBytes of the mirror's bytes (any dtype).
  virtual absl::StatusOr<hash::Fingerprint> HashBytes(
      hash::DtypeCode dtype, absl::Span<const int64_t> shape, size_t size) = 0;
  // FingerprintAndStats of the mirror's bytes as they are now (float32),
  // queued on the active scope's FingerprintQueue: later kernel calls may
  // overwrite the bytes, the result is still theirs as of this call. Its
  // result is element `position` of the next CollectQueuedFingerprints;
  // returns that position. Errors as FingerprintAndStats, before anything
  // is queued; FAILED_PRECONDITION without an active scope, or when the
  // scope's queue belongs to another backend.
  virtual absl::StatusOr<size_t> QueueFingerprintAndStats(
      hash::DtypeCode dtype, absl::Span<const int64_t> shape, size_t size) = 0;
};

// The active scope's queue as a Q, made when the scope has none yet (the
// backend side of QueueFingerprintAndStats). FAILED_PRECONDITION without an
// active scope or when the queue is another backend's.
template <class Q>
absl::StatusOr<Q*> ActiveFingerprintQueueOf() {
  std::unique_ptr<FingerprintQueue>* slot = ActiveFingerprintQueue();
  if (slot == nullptr) {
    return absl::FailedPreconditionError(
        "QueueFingerprintAndStats: no resident run is active on this thread");
  }
  if (*slot == nullptr) *slot = std::make_unique<Q>();
  auto* q = dynamic_cast<Q*>(slot->get());
  if (q == nullptr) {
    return absl::FailedPreconditionError(
        "QueueFingerprintAndStats: this step's queued fingerprints belong to "
        "another backend; collect them first");
  }
  return q;
}

// The tensor's ResidentMirror when it holds the newer bytes; else null (the
// host bytes are current: hash them there).
ResidentMirror* NewerResidentMirror(const Tensor& t);

// A backend's side of a kernel call in a resident run: the mirror of type M
// that holds `tensor`'s bytes in the backend's memory, ready for the call.
//
//   - When the tensor has no M (none yet, or another backend's mirror), its
//     host bytes are made current first, then `create(bytes)` makes an M,
//     which is attached to the tensor's storage.
//   - When the call reads the tensor (`copy_in`) and the host copy is newer,
//     `upload(m, host, bytes)` copies the host bytes into m, and the two
//     copies are marked the same.
//
// The active scope counts the mirrors made and the uploads. The backend
// marks each output it wrote kMirrorNewer after its kernels are launched.
// create: absl::StatusOr<std::unique_ptr<M>>(int64_t bytes);
// upload: absl::Status(M*, const void* host, int64_t bytes).
// REQUIRES: an active ScopedResidentRun; bytes == the tensor's size, > 0.
template <class M, class Create, class Upload>
absl::StatusOr<M*> PrepareResidentMirror(Tensor tensor, int64_t bytes,
                                         bool copy_in, Create&& create,
                                         Upload&& upload) {
  auto* m = dynamic_cast<M*>(tensor.mirror());
  if (m == nullptr) {
    std::as_const(tensor).raw_data();  // another mirror's bytes come home
    absl::StatusOr<std::unique_ptr<M>> fresh = create(bytes);
    if (!fresh.ok()) return fresh.status();
    m = fresh->get();
    tensor.AttachMirror(*std::move(fresh));
    if (ResidencyCounters* c = ActiveResidentRun()) ++c->mirrors_created;
  }
  if (copy_in && tensor.mirror_state() == MirrorState::kHostNewer) {
    const absl::Status s = upload(m, tensor.unsynced_data(), bytes);
    if (!s.ok()) return s;
    tensor.SetMirrorState(MirrorState::kSame);
    if (ResidencyCounters* c = ActiveResidentRun()) {
      ++c->uploads;
      c->upload_bytes += bytes;
    }
  }
  return m;
}

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_RESIDENCY_H_
