#include "server/message_checks.h"

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/digest.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/unknown_field_set.h"

namespace lockstep::server {
namespace {

using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::Message;
using ::google::protobuf::Reflection;
using ::google::protobuf::UnknownFieldSet;

// Whether `d` has exactly the message-typed fields named in `want`.
bool MessageFieldsAre(const google::protobuf::Descriptor* d,
                      std::initializer_list<absl::string_view> want) {
  size_t found = 0;
  for (int k = 0; k < d->field_count(); ++k) {
    const FieldDescriptor* f = d->field(k);
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (std::find(want.begin(), want.end(), f->name()) == want.end()) {
      return false;
    }
    ++found;
  }
  return found == want.size();
}

// The fingerprint batch's nesting, as FindUnknownInBatch walks it without
// reflection: batch.fingerprints[i].stats and nothing else message-typed.
// Checked against the descriptors once, so a field added to these messages
// later sends batches back to the generic walk instead of going unchecked.
bool BatchFastPathApplies() {
  static const bool applies =
      MessageFieldsAre(v1::FingerprintBatch::descriptor(), {"fingerprints"}) &&
      MessageFieldsAre(v1::TensorFingerprint::descriptor(), {"stats"}) &&
      MessageFieldsAre(v1::TensorStats::descriptor(), {});
  return applies;
}

// FindUnknown for a fingerprint batch, through the generated accessors: a
// batch holds thousands of fingerprints, and the reflective walk costs
// about as much as storing them. Same result and path as the walk.
std::optional<int> FindUnknownInBatch(const v1::FingerprintBatch& batch,
                                      std::string* path) {
  // GetUnknownFields of a generated message reads one member; no walk.
  auto unknown = [](const Message& m) -> const UnknownFieldSet& {
    return m.GetReflection()->GetUnknownFields(m);
  };
  if (!unknown(batch).empty()) return unknown(batch).field(0).number();
  for (int i = 0; i < batch.fingerprints_size(); ++i) {
    const v1::TensorFingerprint& fp = batch.fingerprints(i);
    if (!unknown(fp).empty()) {
      *path = absl::StrCat("fingerprints[", i, "]");
      return unknown(fp).field(0).number();
    }
    if (fp.has_stats() && !unknown(fp.stats()).empty()) {
      *path = absl::StrCat("fingerprints[", i, "].stats");
      return unknown(fp.stats()).field(0).number();
    }
  }
  return std::nullopt;
}

// The first unknown field in `m` or below (depth first, in field order):
// its number, and in `path` the field path to the message holding it,
// built only when one is found. Only message-typed fields can hold more
// unknown fields; walking the descriptor without allocating keeps this
// cheap on large repeated fields.
std::optional<int> FindUnknown(const Message& m, std::string* path) {
  if (const auto* batch =
          google::protobuf::DynamicCastToGenerated<v1::FingerprintBatch>(&m);
      batch != nullptr && BatchFastPathApplies()) {
    return FindUnknownInBatch(*batch, path);
  }
  const Reflection* r = m.GetReflection();
  const google::protobuf::UnknownFieldSet& unknown = r->GetUnknownFields(m);
  if (!unknown.empty()) return unknown.field(0).number();
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  for (int k = 0; k < d->field_count(); ++k) {
    const FieldDescriptor* f = d->field(k);
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (f->is_repeated()) {
      const int n = r->FieldSize(m, f);
      for (int i = 0; i < n; ++i) {
        std::optional<int> found =
            FindUnknown(r->GetRepeatedMessage(m, f, i), path);
        if (found.has_value()) {
          *path = absl::StrCat(f->name(), "[", i, "]", path->empty() ? "" : ".",
                               *path);
          return found;
        }
      }
    } else if (r->HasField(m, f)) {
      std::optional<int> found = FindUnknown(r->GetMessage(m, f), path);
      if (found.has_value()) {
        *path = absl::StrCat(f->name(), path->empty() ? "" : ".", *path);
        return found;
      }
    }
  }
  return std::nullopt;
}

absl::Status CheckRunId(const std::string& run_id, absl::string_view field) {
  if (run_id.empty() || run_id.size() > kMaxRunIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: length %d is outside 1..%d", field, run_id.size(),
                        kMaxRunIdBytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RefuseUnknownFields(const Message& message,
                                 absl::string_view root) {
  std::string path;
  std::optional<int> number = FindUnknown(message, &path);
  if (!number.has_value()) return absl::OkStatus();
  std::string where = root.empty()   ? path
                      : path.empty() ? std::string(root)
                                     : absl::StrCat(root, ".", path);
  if (where.empty()) where = message.GetDescriptor()->name();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: unknown field %d (refused: this coordinator does not know it; "
      "fields it does not know are never stored or ignored)",
      where, *number));
}

absl::Status ValidateBatchShape(const v1::FingerprintBatch& batch) {
  absl::Status s = CheckRunId(batch.run_id(), "batch.run_id");
  if (!s.ok()) return s;
  if (batch.sequence() < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("batch.sequence: %d is negative", batch.sequence()));
  }
  if (batch.step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("batch.step: %d is negative", batch.step()));
  }
  if (batch.fingerprints_size() > kMaxFingerprintsPerBatch) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "batch.fingerprints: %d fingerprints exceed the limit of %d per batch",
        batch.fingerprints_size(), kMaxFingerprintsPerBatch));
  }
  if (batch.step_complete()) {
    if (!IsDigest128Hex(batch.step_digest())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "batch.step_digest: must be 32 lowercase hex digits on a completed "
          "step (got %d bytes)",
          batch.step_digest().size()));
    }
  } else if (!batch.step_digest().empty()) {
    return absl::InvalidArgumentError(
        "batch.step_digest: must be empty unless step_complete is set");
  }
  return absl::OkStatus();
}

absl::Status ValidateRunFinishedShape(const v1::RunFinished& f) {
  absl::Status s = CheckRunId(f.run_id(), "finished.run_id");
  if (!s.ok()) return s;
  if (f.success()) {
    if (!IsDigest128Hex(f.run_digest())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "finished.run_digest: must be 32 lowercase hex digits on success "
          "(got %d bytes)",
          f.run_digest().size()));
    }
  } else if (!f.run_digest().empty()) {
    return absl::InvalidArgumentError(
        "finished.run_digest: must be empty unless success is set");
  }
  if (f.failure_reason().size() > kMaxFailureReasonBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "finished.failure_reason: %d bytes exceed the limit of %d",
        f.failure_reason().size(), kMaxFailureReasonBytes));
  }
  if (f.dataset_digest().size() > kMaxDatasetDigestBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "finished.dataset_digest: %d bytes exceed the limit of %d",
        f.dataset_digest().size(), kMaxDatasetDigestBytes));
  }
  if (f.kernels_size() > kMaxKernelEntries) {
    return absl::InvalidArgumentError(
        absl::StrFormat("finished.kernels: %d entries exceed the limit of %d",
                        f.kernels_size(), kMaxKernelEntries));
  }
  for (const auto& [op, variant] : f.kernels()) {
    if (op.empty() || op.size() > kMaxKernelNameBytes ||
        variant.size() > kMaxKernelNameBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "finished.kernels: key length %d and value length %d must be in "
          "1..%d and 0..%d",
          op.size(), variant.size(), kMaxKernelNameBytes, kMaxKernelNameBytes));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateProgressShape(const v1::RunProgress& p,
                                   absl::string_view field) {
  return CheckRunId(p.run_id(), absl::StrCat(field, ".run_id"));
}

absl::Status ValidateHeartbeatShape(const v1::Heartbeat& hb) {
  if (hb.runs_size() > kMaxHeartbeatRuns) {
    return absl::InvalidArgumentError(
        absl::StrFormat("heartbeat.runs: %d runs exceed the limit of %d",
                        hb.runs_size(), kMaxHeartbeatRuns));
  }
  for (int i = 0; i < hb.runs_size(); ++i) {
    absl::Status s = ValidateProgressShape(
        hb.runs(i), absl::StrCat("heartbeat.runs[", i, "]"));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace lockstep::server
