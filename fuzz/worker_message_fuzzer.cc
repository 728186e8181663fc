// Every WorkerMessage a worker sends on its stream, as the coordinator's
// gateway (server/gateway_service.cc) checks it before anything else sees
// it: the wire bytes parsed as lockstep.v1.WorkerMessage, unknown fields
// refused (server/message_checks.h RefuseUnknownFields), then the shape
// checks of its kind (ValidateHello, ValidateHeartbeatShape,
// ValidateProgressShape, ValidateBatchShape, ValidateRunFinishedShape).
//
// Invariants:
//   - RefuseUnknownFields agrees with an independent reflective walk of
//     the whole message (its fingerprint-batch fast path included);
//   - every refusal is INVALID_ARGUMENT naming the field;
//   - an accepted message is within the documented limits, and its
//     re-serialised bytes parse back to the same message.
// Seeds: corpus/worker_message_text/*.txtpb (text format, encoded to wire
// bytes at build time).
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/digest.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/proto_bytes.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "lockstep/v1/worker_gateway.pb.h"
#include "server/message_checks.h"
#include "server/worker_registry.h"

namespace {

namespace v1 = ::lockstep::v1;
namespace server = ::lockstep::server;
using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::Message;

// Whether `m` or any message below it holds unknown fields, by reflection
// over every message-typed field.
bool HasUnknown(const Message& m) {
  const google::protobuf::Reflection* r = m.GetReflection();
  if (!r->GetUnknownFields(m).empty()) return true;
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  for (int k = 0; k < d->field_count(); ++k) {
    const FieldDescriptor* f = d->field(k);
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (f->is_repeated()) {
      for (int i = 0; i < r->FieldSize(m, f); ++i) {
        if (HasUnknown(r->GetRepeatedMessage(m, f, i))) return true;
      }
    } else if (r->HasField(m, f) && HasUnknown(r->GetMessage(m, f))) {
      return true;
    }
  }
  return false;
}

void CheckRefusal(const absl::Status& s, absl::string_view field) {
  FUZZ_CHECK(s.code() == absl::StatusCode::kInvalidArgument, s.ToString());
  FUZZ_CHECK(absl::StartsWith(s.message(), field), s.ToString());
}

bool RunIdOk(const std::string& run_id) {
  return !run_id.empty() && run_id.size() <= server::kMaxRunIdBytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  v1::WorkerMessage msg;
  if (!msg.ParseFromArray(data, static_cast<int>(size))) return 0;

  const absl::Status unknown = server::RefuseUnknownFields(msg, "");
  FUZZ_CHECK(unknown.ok() == !HasUnknown(msg),
             absl::StrCat("RefuseUnknownFields disagrees with the walk: ",
                          unknown.ToString()));
  // The same walk rooted at the kind, as ValidateHello and the batch
  // fast path run it.
  if (msg.kind_case() == v1::WorkerMessage::kBatch) {
    FUZZ_CHECK(server::RefuseUnknownFields(msg.batch(), "batch").ok() ==
                   !HasUnknown(msg.batch()),
               "RefuseUnknownFields(batch) disagrees with the walk");
  }
  if (!unknown.ok()) {
    CheckRefusal(unknown, "");
    FUZZ_CHECK(absl::StrContains(unknown.message(), "unknown field"),
               unknown.ToString());
    return 0;
  }

  absl::Status s;
  switch (msg.kind_case()) {
    case v1::WorkerMessage::kHello:
      s = server::ValidateHello(msg.hello());
      if (!s.ok()) {
        CheckRefusal(s, "hello.");
      } else {
        FUZZ_CHECK(!msg.hello().name().empty() && msg.hello().slots() >= 0 &&
                       msg.hello().has_profile(),
                   "accepted a hello without name, slots or profile");
      }
      break;
    case v1::WorkerMessage::kHeartbeat:
      s = server::ValidateHeartbeatShape(msg.heartbeat());
      if (!s.ok()) {
        CheckRefusal(s, "heartbeat.");
      } else {
        FUZZ_CHECK(msg.heartbeat().runs_size() <= server::kMaxHeartbeatRuns,
                   "accepted too many heartbeat runs");
        for (const v1::RunProgress& p : msg.heartbeat().runs()) {
          FUZZ_CHECK(RunIdOk(p.run_id()), "accepted a bad heartbeat run_id");
        }
      }
      break;
    case v1::WorkerMessage::kProgress:
      s = server::ValidateProgressShape(msg.progress(), "progress");
      if (!s.ok()) {
        CheckRefusal(s, "progress.");
      } else {
        FUZZ_CHECK(RunIdOk(msg.progress().run_id()),
                   "accepted a bad progress run_id");
      }
      break;
    case v1::WorkerMessage::kBatch: {
      const v1::FingerprintBatch& b = msg.batch();
      s = server::ValidateBatchShape(b);
      if (!s.ok()) {
        CheckRefusal(s, "batch.");
      } else {
        FUZZ_CHECK(RunIdOk(b.run_id()) && b.sequence() >= 0 && b.step() >= 0,
                   "accepted a bad batch header");
        FUZZ_CHECK(b.fingerprints_size() <= server::kMaxFingerprintsPerBatch,
                   "accepted too many fingerprints");
        FUZZ_CHECK(b.step_complete() ? lockstep::IsDigest128Hex(b.step_digest())
                                     : b.step_digest().empty(),
                   "accepted a bad step_digest");
      }
      break;
    }
    case v1::WorkerMessage::kFinished: {
      const v1::RunFinished& f = msg.finished();
      s = server::ValidateRunFinishedShape(f);
      if (!s.ok()) {
        CheckRefusal(s, "finished.");
      } else {
        FUZZ_CHECK(RunIdOk(f.run_id()), "accepted a bad finished.run_id");
        FUZZ_CHECK(f.success() ? lockstep::IsDigest128Hex(f.run_digest())
                               : f.run_digest().empty(),
                   "accepted a bad run_digest");
        FUZZ_CHECK(
            f.failure_reason().size() <= server::kMaxFailureReasonBytes &&
                f.dataset_digest().size() <= server::kMaxDatasetDigestBytes &&
                f.kernels_size() <= server::kMaxKernelEntries,
            "accepted a run result over its limits");
      }
      break;
    }
    case v1::WorkerMessage::KIND_NOT_SET:
      return 0;
  }
  if (!s.ok()) return 0;

  // What the coordinator stores re-parses to the same message.
  const std::string bytes = lockstep::fuzz::DeterministicBytes(msg);
  v1::WorkerMessage again;
  FUZZ_CHECK(again.ParseFromString(bytes), "re-serialised bytes do not parse");
  FUZZ_CHECK(lockstep::fuzz::DeterministicBytes(again) == bytes,
             "re-serialised message changed");
  return 0;
}
