// The kernel registry: (op, mode, algorithm, backend) -> KernelFn.
//
// Filled explicitly at start-up (e.g. RegisterCpuCanonicalKernels in
// kernels/cpu/cpu_backend.h; no static initialisers), then only read.
//
// Thread-safety: Register() must not run concurrently with anything else;
// once filling is done, any number of threads may call the const methods.
#ifndef LOCKSTEP_KERNELS_REGISTRY_H_
#define LOCKSTEP_KERNELS_REGISTRY_H_

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace lockstep::kernels {

struct KernelKey {
  std::string op;  // e.g. "dense.forward"
  Mode mode = Mode::kCanonical;
  std::string algorithm;  // e.g. "canonical"
  std::string backend;    // e.g. "cpu"

  // "dense.forward/CANONICAL/canonical/cpu".
  std::string DebugString() const;
  friend bool operator<(const KernelKey& a, const KernelKey& b) {
    return std::tie(a.op, a.mode, a.algorithm, a.backend) <
           std::tie(b.op, b.mode, b.algorithm, b.backend);
  }
  friend bool operator==(const KernelKey& a, const KernelKey& b) {
    return std::tie(a.op, a.mode, a.algorithm, a.backend) ==
           std::tie(b.op, b.mode, b.algorithm, b.backend);
  }
};

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Adds a kernel. INVALID_ARGUMENT for an empty op, algorithm or backend or
  // a null fn; ALREADY_EXISTS when the key is taken (the first one stays).
  absl::Status Register(const KernelKey& key, KernelFn fn);

  // The kernel for exactly this key. NOT_FOUND otherwise, with a message
  // naming the op, mode, algorithm and backend asked for and listing what is
  // registered for that op (or, for an unknown op, the registered ops).
  absl::StatusOr<KernelFn> Lookup(const KernelKey& key) const;

  bool Contains(const KernelKey& key) const { return kernels_.count(key) > 0; }
  // All keys, sorted by (op, mode, algorithm, backend).
  std::vector<KernelKey> Keys() const;
  // Distinct op names, sorted.
  std::vector<std::string> Ops() const;
  size_t size() const { return kernels_.size(); }

 private:
  std::map<KernelKey, KernelFn> kernels_;
};

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_REGISTRY_H_
