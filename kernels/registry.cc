#include "kernels/registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace lockstep::kernels {

std::string KernelKey::DebugString() const {
  return absl::StrCat(op, "/", ModeName(mode), "/", algorithm, "/", backend);
}

absl::Status Registry::Register(const KernelKey& key, KernelFn fn) {
  if (key.op.empty() || key.algorithm.empty() || key.backend.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kernel key '%s': op, algorithm and backend must be non-empty",
        key.DebugString()));
  }
  if (fn == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kernel key '%s': kernel function is null", key.DebugString()));
  }
  if (!kernels_.emplace(key, fn).second) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "a kernel is already registered for '%s'", key.DebugString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<KernelFn> Registry::Lookup(const KernelKey& key) const {
  auto it = kernels_.find(key);
  if (it != kernels_.end()) return it->second;

  std::vector<std::string> same_op;
  for (const auto& [k, fn] : kernels_) {
    if (k.op == key.op) {
      same_op.push_back(
          absl::StrFormat("(mode %s, algorithm '%s', backend '%s')",
                          ModeName(k.mode), k.algorithm, k.backend));
    }
  }
  const std::string asked = absl::StrFormat(
      "no kernel for op '%s', mode %s, algorithm '%s', backend '%s'", key.op,
      ModeName(key.mode), key.algorithm, key.backend);
  if (!same_op.empty()) {
    return absl::NotFoundError(
        absl::StrCat(asked, "; registered for '", key.op,
                     "': ", absl::StrJoin(same_op, ", ")));
  }
  const std::vector<std::string> ops = Ops();
  return absl::NotFoundError(absl::StrCat(
      asked, "; op '", key.op, "' has no kernels; registered ops: ",
      ops.empty() ? std::string("none") : absl::StrJoin(ops, ", ")));
}

std::vector<KernelKey> Registry::Keys() const {
  std::vector<KernelKey> keys;
  keys.reserve(kernels_.size());
  for (const auto& [k, fn] : kernels_) keys.push_back(k);
  return keys;
}

std::vector<std::string> Registry::Ops() const {
  std::vector<std::string> ops;
  for (const auto& [k, fn] : kernels_) {
    if (ops.empty() || ops.back() != k.op) ops.push_back(k.op);
  }
  return ops;
}

}  // namespace lockstep::kernels
