#include "model/job_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "kernels/backend.h"
#include "model/check.h"

namespace lockstep::model {
namespace {

namespace v1 = ::lockstep::v1;
using ::lockstep::model::internal::CheckRange;
using ::lockstep::model::internal::Invalid;
using ::lockstep::model::internal::kMaxLossBatch;
using ::lockstep::model::internal::Quote;

constexpr int kMaxOpAlgorithms = 64;
constexpr size_t kMaxAlgorithmNameLength = 64;
constexpr size_t kMaxPathLength = 4096;
constexpr size_t kMaxWorkerIdLength = 256;
constexpr size_t kMaxLabelLength = 256;
constexpr int kMaxPlacementEntries = 1024;

bool IsAlgorithmName(absl::string_view s) {
  if (s.empty() || s.size() > kMaxAlgorithmNameLength) return false;
  for (const char c : s) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

bool IsLowerHex(absl::string_view s, size_t length) {
  if (s.size() != length) return false;
  for (const char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Finite and > 0.
bool IsPositiveFinite(float v) { return std::isfinite(v) && v > 0.0f; }

absl::Status ValidateOptimizer(const v1::OptimizerConfig& o) {
  if (!v1::OptimizerKind_IsValid(o.kind())) {
    return Invalid(absl::StrFormat(
        "config.optimizer.kind: %d is not a known OptimizerKind", o.kind()));
  }
  const v1::OptimizerKind kind =
      o.kind() == v1::OPTIMIZER_KIND_UNSPECIFIED ? v1::SGD : o.kind();
  const std::string& kind_name = v1::OptimizerKind_Name(kind);
  if (!IsPositiveFinite(o.learning_rate())) {
    return Invalid(absl::StrCat(
        "config.optimizer.learning_rate: must be > 0 and finite, got ",
        o.learning_rate()));
  }
  // Fields of another optimizer are refused rather than ignored: a config
  // that sets momentum but forgets kind: MOMENTUM would silently run SGD.
  if (o.momentum() != 0.0f && kind != v1::MOMENTUM) {
    return Invalid(absl::StrCat(
        "config.optimizer.momentum: applies only to kind MOMENTUM, but kind "
        "is ",
        kind_name));
  }
  const bool adam = kind == v1::ADAM || kind == v1::ADAMW;
  if (o.weight_decay() != 0.0f && kind != v1::ADAMW) {
    return Invalid(absl::StrCat(
        "config.optimizer.weight_decay: applies only to kind ADAMW, but kind "
        "is ",
        kind_name));
  }
  if (kind == v1::ADAMW &&
      !(std::isfinite(o.weight_decay()) && o.weight_decay() >= 0.0f &&
        o.weight_decay() <= 1.0f)) {
    return Invalid(absl::StrCat(
        "config.optimizer.weight_decay: must be in [0, 1] (0 means the "
        "default 0.01), got ",
        o.weight_decay()));
  }
  if (!(std::isfinite(o.clip_grad_norm()) && o.clip_grad_norm() >= 0.0f)) {
    return Invalid(absl::StrCat(
        "config.optimizer.clip_grad_norm: must be >= 0 and finite (0: no "
        "clipping), got ",
        o.clip_grad_norm()));
  }
  if (!adam) {
    for (const auto& [field, value] :
         {std::pair<const char*, float>{"beta1", o.beta1()},
          {"beta2", o.beta2()},
          {"epsilon", o.epsilon()}}) {
      if (value != 0.0f) {
        return Invalid(absl::StrCat("config.optimizer.", field,
                                    ": applies only to kinds ADAM and ADAMW, "
                                    "but kind is ",
                                    kind_name));
      }
    }
  }
  if (kind == v1::MOMENTUM && !(std::isfinite(o.momentum()) &&
                                o.momentum() >= 0.0f && o.momentum() < 1.0f)) {
    return Invalid(absl::StrCat(
        "config.optimizer.momentum: must be in [0, 1), got ", o.momentum()));
  }
  if (adam) {
    for (const auto& [field, value] :
         {std::pair<const char*, float>{"beta1", o.beta1()},
          {"beta2", o.beta2()}}) {
      if (!(std::isfinite(value) && value >= 0.0f && value < 1.0f)) {
        return Invalid(absl::StrCat("config.optimizer.", field,
                                    ": must be in [0, 1) (0 means the "
                                    "default), got ",
                                    value));
      }
    }
    if (!(std::isfinite(o.epsilon()) && o.epsilon() >= 0.0f)) {
      return Invalid(absl::StrCat(
          "config.optimizer.epsilon: must be > 0 and finite (0 means the "
          "default 1e-7), got ",
          o.epsilon()));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateOpAlgorithms(const v1::JobConfig& config) {
  const auto& algos = config.op_algorithms();
  if (algos.size() > kMaxOpAlgorithms) {
    return Invalid(absl::StrFormat(
        "config.op_algorithms: %d entries exceeds the limit of %d",
        algos.size(), kMaxOpAlgorithms));
  }
  absl::flat_hash_set<std::string> known;
  for (std::string& name : kernels::AllOpNames()) {
    known.insert(std::move(name));
  }
  // Map order is unspecified; sort so the reported error is stable.
  std::vector<std::pair<std::string, std::string>> entries(algos.begin(),
                                                           algos.end());
  std::sort(entries.begin(), entries.end());
  for (const auto& [op, algorithm] : entries) {
    if (!known.contains(op)) {
      return Invalid(absl::StrFormat(
          "config.op_algorithms[%s]: unknown op; keys are kernel op names "
          "such as \"bias_add.grad\" or \"conv2d.grad_weight\" (see "
          "docs/nondeterminism.md)",
          Quote(op)));
    }
    if (!IsAlgorithmName(algorithm)) {
      return Invalid(absl::StrFormat(
          "config.op_algorithms[%s]: algorithm %s must match [a-z0-9_]{1,%d}",
          Quote(op), Quote(algorithm), kMaxAlgorithmNameLength));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateCapture(const v1::CapturePolicy& c) {
  if (!v1::CapturePolicy::Kind_IsValid(c.kind())) {
    return Invalid(absl::StrFormat(
        "config.capture.kind: %d is not a known CapturePolicy.Kind", c.kind()));
  }
  if (c.kind() == v1::CapturePolicy::EVERY_KTH_STEP) {
    if (c.every_k() < 1) {
      return Invalid(absl::StrFormat(
          "config.capture.every_k: must be >= 1 for EVERY_KTH_STEP, got %d",
          c.every_k()));
    }
  } else if (c.every_k() != 0) {
    return Invalid(absl::StrFormat(
        "config.capture.every_k: applies only to kind EVERY_KTH_STEP, but "
        "kind is %s",
        v1::CapturePolicy::Kind_Name(c.kind() ==
                                             v1::CapturePolicy::KIND_UNSPECIFIED
                                         ? v1::CapturePolicy::EVERY_STEP
                                         : c.kind())));
  }
  return absl::OkStatus();
}

absl::Status CheckPath(absl::string_view field, const std::string& path) {
  if (path.empty()) {
    return Invalid(absl::StrCat(field, ": must not be empty"));
  }
  if (path.size() > kMaxPathLength) {
    return Invalid(absl::StrFormat("%s: %d bytes exceeds the limit of %d",
                                   field, path.size(), kMaxPathLength));
  }
  if (path.find('\0') != std::string::npos) {
    return Invalid(absl::StrCat(field, ": contains a NUL byte"));
  }
  return absl::OkStatus();
}

absl::Status ValidateDataset(const v1::Dataset& d, int64_t batch_size) {
  switch (d.source_case()) {
    case v1::Dataset::SOURCE_NOT_SET:
      return absl::OkStatus();
    case v1::Dataset::kSynthetic: {
      const int64_t examples = d.synthetic().examples();
      if (examples < 0) {
        return Invalid(absl::StrFormat(
            "config.dataset.synthetic.examples: must be >= 0 (0 means an "
            "endless stream), got %d",
            examples));
      }
      if (examples != 0 && examples < batch_size) {
        return Invalid(absl::StrFormat(
            "config.dataset.synthetic.examples: %d is smaller than "
            "config.batch_size %d",
            examples, batch_size));
      }
      return absl::OkStatus();
    }
    case v1::Dataset::kFile: {
      const v1::FileDataset& f = d.file();
      if (!v1::FileDataset::Format_IsValid(f.format()) ||
          f.format() == v1::FileDataset::FORMAT_UNSPECIFIED) {
        return Invalid(absl::StrFormat(
            "config.dataset.file.format: must be IDX, NPY or CIFAR10, got %d",
            f.format()));
      }
      LS_RETURN_IF_ERROR(
          CheckPath("config.dataset.file.inputs_path", f.inputs_path()));
      if (f.format() == v1::FileDataset::CIFAR10) {
        if (!f.labels_path().empty()) {
          return Invalid(
              "config.dataset.file.labels_path: must be empty for CIFAR10 "
              "(the labels are inside the inputs file)");
        }
        return absl::OkStatus();
      }
      LS_RETURN_IF_ERROR(
          CheckPath("config.dataset.file.labels_path", f.labels_path()));
      return absl::OkStatus();
    }
    case v1::Dataset::kTokens:
      if (!d.tokens().text_path().empty()) {
        LS_RETURN_IF_ERROR(CheckPath("config.dataset.tokens.text_path",
                                     d.tokens().text_path()));
      }
      return absl::OkStatus();
  }
  return Invalid("config.dataset: unknown source");
}

}  // namespace

absl::Status ValidateJobConfig(const v1::JobConfig& config,
                               const Limits& limits) {
  LS_RETURN_IF_ERROR(CheckRange("config.batch_size", config.batch_size(), 1,
                                std::min(limits.max_batch, kMaxLossBatch)));
  LS_RETURN_IF_ERROR(
      CheckRange("config.steps", config.steps(), 1, limits.max_steps));
  LS_RETURN_IF_ERROR(ValidateOptimizer(config.optimizer()));
  if (config.dtype() != v1::DTYPE_UNSPECIFIED &&
      config.dtype() != v1::FLOAT32) {
    const std::string name = v1::DType_IsValid(config.dtype())
                                 ? v1::DType_Name(config.dtype())
                                 : absl::StrCat(config.dtype());
    return Invalid(
        absl::StrCat("config.dtype: only FLOAT32 is supported, got ", name));
  }
  if (!v1::DeterminismMode_IsValid(config.determinism())) {
    return Invalid(
        absl::StrFormat("config.determinism: %d is not a known DeterminismMode",
                        config.determinism()));
  }
  if (!v1::Backend_IsValid(config.backend())) {
    return Invalid(absl::StrFormat("config.backend: %d is not a known Backend",
                                   config.backend()));
  }
  LS_RETURN_IF_ERROR(
      CheckRange("config.threads", config.threads(), 0, limits.max_threads));
  LS_RETURN_IF_ERROR(ValidateOpAlgorithms(config));
  LS_RETURN_IF_ERROR(ValidateCapture(config.capture()));
  LS_RETURN_IF_ERROR(ValidateDataset(config.dataset(), config.batch_size()));
  return absl::OkStatus();
}

absl::Status ValidatePlacement(const v1::Placement& placement,
                               const v1::JobConfig& config,
                               const Limits& limits) {
  LS_RETURN_IF_ERROR(
      CheckRange("placement.runs", placement.runs(), 0, limits.max_runs));
  if (placement.runs() == 0 && limits.max_runs < 2) {
    return Invalid(absl::StrFormat(
        "placement.runs: 0 means 2, which exceeds the limit of %d",
        limits.max_runs));
  }
  if (!v1::PlacementScope_IsValid(placement.scope())) {
    return Invalid(
        absl::StrFormat("placement.scope: %d is not a known PlacementScope",
                        placement.scope()));
  }
  if (placement.scope() == v1::ACROSS_CLASSES &&
      config.determinism() != v1::CANONICAL &&
      config.determinism() != v1::DETERMINISM_MODE_UNSPECIFIED) {
    return Invalid(absl::StrFormat(
        "placement.scope: ACROSS_CLASSES needs config.determinism CANONICAL, "
        "got %s",
        v1::DeterminismMode_IsValid(config.determinism())
            ? v1::DeterminismMode_Name(config.determinism())
            : absl::StrCat(config.determinism())));
  }
  const int entries = placement.worker_labels_size() +
                      placement.worker_ids_size() +
                      placement.hardware_class_digests_size();
  if (entries > kMaxPlacementEntries) {
    return Invalid(absl::StrFormat(
        "placement: %d labels, worker ids and digests exceed the limit of %d",
        entries, kMaxPlacementEntries));
  }
  std::vector<std::pair<std::string, std::string>> labels(
      placement.worker_labels().begin(), placement.worker_labels().end());
  std::sort(labels.begin(), labels.end());
  for (const auto& [key, value] : labels) {
    if (key.empty() || key.size() > kMaxLabelLength) {
      return Invalid(absl::StrFormat(
          "placement.worker_labels: key %s must have 1 to %d bytes", Quote(key),
          kMaxLabelLength));
    }
    if (value.size() > kMaxLabelLength) {
      return Invalid(
          absl::StrFormat("placement.worker_labels[%s]: value exceeds %d bytes",
                          Quote(key), kMaxLabelLength));
    }
  }
  for (int i = 0; i < placement.worker_ids_size(); ++i) {
    const std::string& id = placement.worker_ids(i);
    if (id.empty() || id.size() > kMaxWorkerIdLength) {
      return Invalid(
          absl::StrFormat("placement.worker_ids[%d]: must have 1 to %d bytes",
                          i, kMaxWorkerIdLength));
    }
  }
  for (int i = 0; i < placement.hardware_class_digests_size(); ++i) {
    const std::string& d = placement.hardware_class_digests(i);
    if (!IsLowerHex(d, 32)) {
      return Invalid(absl::StrFormat(
          "placement.hardware_class_digests[%d]: %s is not 32 lowercase hex "
          "digits",
          i, Quote(d)));
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep::model
