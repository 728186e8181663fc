#include "server/worker_registry.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/device_identity.h"
#include "common/digest.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/message_checks.h"

namespace lockstep::server {

using ::lockstep::v1::Hello;
using ::lockstep::v1::Worker;

int64_t SystemClockMs() { return absl::ToUnixMillis(absl::Now()); }

std::string WorkerIdForName(const std::string& name) {
  return absl::StrCat("w-", Digest128Hex(name).substr(0, 16));
}

namespace {

// A profile field as the worker writes it into the class string: trimmed,
// with the class's separators and line breaks turned into spaces.
std::string ClassComponent(absl::string_view s) {
  std::string out(absl::StripAsciiWhitespace(s));
  for (char& ch : out) {
    if (ch == '|' || ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
  }
  return out;
}

// True when `value` occurs in `cls` as a whole component: preceded by '='
// or '/', followed by '/', '|' or the end.
bool NamesComponent(absl::string_view cls, absl::string_view value) {
  if (value.empty()) return true;
  for (size_t pos = cls.find(value); pos != absl::string_view::npos;
       pos = cls.find(value, pos + 1)) {
    const bool starts = pos > 0 && (cls[pos - 1] == '=' || cls[pos - 1] == '/');
    const size_t end = pos + value.size();
    const bool ends = end == cls.size() || cls[end] == '/' || cls[end] == '|';
    if (starts && ends) return true;
  }
  return false;
}

// True when `cls` has the field "key=value" whole: preceded by '|',
// followed by '|' or the end.
bool HasField(absl::string_view cls, absl::string_view key,
              absl::string_view value) {
  const std::string field = absl::StrCat("|", key, "=", value);
  for (size_t pos = cls.find(field); pos != absl::string_view::npos;
       pos = cls.find(field, pos + 1)) {
    const size_t end = pos + field.size();
    if (end == cls.size() || cls[end] == '|') return true;
  }
  return false;
}

absl::Status CheckLength(absl::string_view field, size_t size, size_t min,
                         size_t max) {
  if (size < min || size > max) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: length %d is outside %d..%d", field, size, min, max));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckHardwareClass(const v1::HardwareProfile& profile) {
  const std::string& cls = profile.hardware_class();
  LS_RETURN_IF_ERROR(CheckLength("hello.profile.hardware_class", cls.size(), 1,
                                 kMaxHardwareClassBytes));
  if (!absl::StartsWith(cls, kHardwareClassPrefix)) {
    return absl::InvalidArgumentError(
        absl::StrCat("hello.profile.hardware_class: must start with \"",
                     kHardwareClassPrefix, "\""));
  }
  if (!IsDigest128Hex(profile.hardware_class_digest())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hello.profile.hardware_class_digest: must be 32 lowercase hex "
        "digits (got %d bytes)",
        profile.hardware_class_digest().size()));
  }
  if (profile.hardware_class_digest() != Digest128Hex(cls)) {
    return absl::InvalidArgumentError(
        "hello.profile.hardware_class_digest: is not the digest of "
        "hardware_class");
  }
  // Fields written as components ("cpu=<vendor>/<model>/<arch>",
  // "gpu=<name>/sm_<major><minor>").
  struct Claim {
    const char* field;
    std::string value;
  };
  std::vector<Claim> components = {
      {"cpu.vendor", ClassComponent(profile.cpu().vendor())},
      {"cpu.model", ClassComponent(profile.cpu().model())},
      {"cpu.arch", ClassComponent(profile.cpu().arch())},
  };
  // Fields written as "|key=value".
  struct FieldClaim {
    const char* field;
    const char* key;
    std::string value;
  };
  std::vector<FieldClaim> fields;
  if (!profile.cpu().kernel_path().empty()) {
    fields.push_back({"cpu.kernel_path", "kernel_path",
                      ClassComponent(profile.cpu().kernel_path())});
  }
  if (profile.gpus_size() > 0) {
    const v1::GpuInfo& g = profile.gpus(0);
    const v1::SoftwareInfo& sw = profile.software();
    components.push_back({"gpus[0].name", ClassComponent(g.name())});
    if (g.compute_capability_major() > 0) {
      components.push_back({"gpus[0].compute_capability",
                            absl::StrCat("sm_", g.compute_capability_major(),
                                         g.compute_capability_minor())});
    }
    if (g.sm_count() > 0) {
      fields.push_back({"gpus[0].sm_count", "sms", absl::StrCat(g.sm_count())});
    }
    if (g.mig()) fields.push_back({"gpus[0].mig", "mig", "1"});
    if (sw.cuda_driver_version() > 0) {
      fields.push_back({"software.cuda_driver_version", "driver",
                        absl::StrCat(sw.cuda_driver_version())});
    }
    if (!sw.cublas_version().empty()) {
      fields.push_back({"software.cublas_version", "cublas",
                        ClassComponent(sw.cublas_version())});
    }
    if (!sw.cudnn_version().empty()) {
      fields.push_back({"software.cudnn_version", "cudnn",
                        ClassComponent(sw.cudnn_version())});
    }
  }
  auto mismatch = [](absl::string_view field, absl::string_view value) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hello.profile.hardware_class: does not match the profile's %s "
        "\"%s\" (the class must be derived from the profile it comes with)",
        field, value.substr(0, 128)));
  };
  // Nor may the class claim what the profile does not list.
  if (profile.cpu().kernel_path().empty() &&
      absl::StrContains(cls, "|kernel_path=")) {
    return mismatch("cpu.kernel_path", "");
  }
  if (profile.gpus_size() == 0 && absl::StrContains(cls, "|gpu=")) {
    return absl::InvalidArgumentError(
        "hello.profile.hardware_class: names a GPU, but the profile's gpus "
        "list none");
  }
  for (const Claim& c : components) {
    if (!NamesComponent(cls, c.value)) return mismatch(c.field, c.value);
  }
  for (const FieldClaim& f : fields) {
    if (!HasField(cls, f.key, f.value)) return mismatch(f.field, f.value);
  }
  return absl::OkStatus();
}

absl::Status CheckDeviceIdentity(const v1::DeviceIdentity& d) {
  if (d.machine_id().empty() && d.device().empty() && d.device_id().empty()) {
    return absl::OkStatus();  // an unknown device
  }
  LS_RETURN_IF_ERROR(CheckLength("hello.profile.device.machine_id",
                                 d.machine_id().size(), 1, kMaxMachineIdBytes));
  LS_RETURN_IF_ERROR(CheckLength("hello.profile.device.device",
                                 d.device().size(), 1, kMaxDeviceBytes));
  if (d.device_id() != DeviceIdOf(d.machine_id(), d.device())) {
    return absl::InvalidArgumentError(
        "hello.profile.device.device_id: must be the 32-hex-digit digest of "
        "\"machine_id|device\"");
  }
  return absl::OkStatus();
}

absl::Status ValidateHello(const Hello& hello) {
  LS_RETURN_IF_ERROR(RefuseUnknownFields(hello, "hello"));
  LS_RETURN_IF_ERROR(
      CheckLength("hello.name", hello.name().size(), 1, kMaxWorkerNameBytes));
  for (char c : hello.name()) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '.' ||
                    c == ':' || c == '-';
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "hello.name: character '%c' is not allowed (use A-Z a-z 0-9 _ . : -)",
          c));
    }
  }
  LS_RETURN_IF_ERROR(CheckLength("hello.version", hello.version().size(), 0,
                                 kMaxWorkerVersionBytes));
  if (hello.slots() < 0 || hello.slots() > kMaxWorkerSlots) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hello.slots: %d is outside 0..%d", hello.slots(), kMaxWorkerSlots));
  }
  if (hello.labels_size() > kMaxWorkerLabels) {
    return absl::InvalidArgumentError(
        absl::StrFormat("hello.labels: %d labels exceed the limit of %d",
                        hello.labels_size(), kMaxWorkerLabels));
  }
  for (const auto& [key, value] : hello.labels()) {
    LS_RETURN_IF_ERROR(CheckLength("hello.labels key", key.size(), 1,
                                   kMaxWorkerLabelKeyBytes));
    LS_RETURN_IF_ERROR(CheckLength(absl::StrCat("hello.labels[\"", key, "\"]"),
                                   value.size(), 0, kMaxWorkerLabelValueBytes));
  }
  if (!hello.has_profile()) {
    return absl::InvalidArgumentError("hello.profile: must be set");
  }
  const size_t profile_bytes = hello.profile().ByteSizeLong();
  if (profile_bytes > kMaxProfileBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("hello.profile: %d bytes exceed the limit of %d",
                        profile_bytes, kMaxProfileBytes));
  }
  constexpr size_t kMaxSelftestSummary = 4096;
  if (hello.profile().selftest().summary().size() > kMaxSelftestSummary) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hello.profile.selftest.summary: %d bytes exceed the limit of %d",
        hello.profile().selftest().summary().size(), kMaxSelftestSummary));
  }
  LS_RETURN_IF_ERROR(CheckHardwareClass(hello.profile()));
  LS_RETURN_IF_ERROR(CheckDeviceIdentity(hello.profile().device()));
  return absl::OkStatus();
}

WorkerRegistry::WorkerRegistry(store::Store* store, RegistryOptions options,
                               Clock clock)
    : store_(store), options_(options), clock_(std::move(clock)) {}

void WorkerRegistry::SetListener(Listener* listener) { listener_ = listener; }

bool WorkerRegistry::Send(const std::string& worker_id,
                          v1::CoordinatorMessage msg) {
  Sender sender;
  {
    absl::MutexLock lock(&mu_);
    auto it = live_.find(worker_id);
    if (it == live_.end() || !it->second.sender) return false;
    sender = it->second.sender;
  }
  sender(std::move(msg));
  return true;
}

std::vector<LiveWorker> WorkerRegistry::LiveWorkers() {
  std::vector<LiveWorker> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, s] : live_) out.push_back(s.info);
  std::sort(
      out.begin(), out.end(),
      [](const LiveWorker& a, const LiveWorker& b) { return a.name < b.name; });
  return out;
}

bool WorkerRegistry::IsConnected(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  return live_.count(worker_id) > 0;
}

absl::StatusOr<int64_t> WorkerRegistry::Connect(const Hello& hello,
                                                const std::string& peer,
                                                Closer closer, Sender sender) {
  LS_RETURN_IF_ERROR(ValidateHello(hello));
  const std::string id = WorkerIdForName(hello.name());
  const int64_t now = clock_();
  // The operator's state survives reconnects: read it before the upsert.
  LS_ASSIGN_OR_RETURN(std::optional<Worker> stored, store_->GetWorker(id));

  Worker record;
  record.set_worker_id(id);
  record.set_name(hello.name());
  *record.mutable_labels() = hello.labels();
  *record.mutable_profile() = hello.profile();

  Closer stale_closer;
  int64_t session_id = 0;
  std::string selftest_reason;
  {
    absl::MutexLock lock(&mu_);
    auto it = live_.find(id);
    if (it != live_.end()) {
      if (now - it->second.last_heartbeat_ms < options_.heartbeat_timeout_ms) {
        return absl::AlreadyExistsError(absl::StrFormat(
            "hello.name: worker \"%s\" is already connected from %s (last "
            "heartbeat %d ms ago); names must be unique",
            hello.name(), it->second.peer, now - it->second.last_heartbeat_ms));
      }
      stale_closer = EndLocked(id, "replaced by a new session");
    }
    // Persist before the session is visible, so List never shows a worker
    // the store does not know.
    LS_RETURN_IF_ERROR(store_->UpsertWorker(record, now));
    session_id = next_session_id_++;
    Session s;
    s.id = session_id;
    s.name = hello.name();
    s.peer = peer;
    s.connected_ms = now;
    s.last_heartbeat_ms = now;
    s.closer = std::move(closer);
    s.sender = std::move(sender);
    s.info.worker_id = id;
    s.info.name = hello.name();
    s.info.labels = {hello.labels().begin(), hello.labels().end()};
    s.info.hardware_class = hello.profile().hardware_class();
    s.info.hardware_class_digest = hello.profile().hardware_class_digest();
    s.info.slots = hello.slots() > 0 ? hello.slots() : 1;
    s.info.gpus = hello.profile().gpus_size();
    s.info.device_id = hello.profile().device().device_id();
    s.info.admin_state =
        stored.has_value() &&
                stored->admin_state() != v1::WORKER_ADMIN_STATE_UNSPECIFIED
            ? stored->admin_state()
            : v1::ACTIVE;
    if (hello.profile().has_selftest() &&
        !hello.profile().selftest().passed()) {
      // A node whose kernels do not give the bits they must takes no runs.
      selftest_reason = absl::StrCat("selftest failed: ",
                                     hello.profile().selftest().summary())
                            .substr(0, 1024);
      if (s.info.admin_state != v1::QUARANTINED) {
        LS_RETURN_IF_ERROR(store_->SetWorkerAdminState(id, v1::QUARANTINED,
                                                       selftest_reason, now));
        s.info.admin_state = v1::QUARANTINED;
      }
    }
    live_[id] = std::move(s);
    ended_.erase(id);
    ++session_counts_[id];
  }
  if (stale_closer) stale_closer("replaced by a new session");
  absl::Status ev = store_->AppendWorkerEvent(
      id, now, "connected",
      absl::StrCat("from ", peer, "; class ",
                   hello.profile().hardware_class_digest()));
  if (!ev.ok()) LS_LOG(WARNING) << "worker event not stored: " << ev;
  if (!selftest_reason.empty()) {
    absl::Status q =
        store_->AppendWorkerEvent(id, now, "selftest", selftest_reason);
    if (!q.ok()) LS_LOG(WARNING) << "worker event not stored: " << q;
    LS_LOG(WARNING) << "worker " << hello.name() << " (" << id
                    << ") quarantined: " << selftest_reason;
  }
  LS_LOG(INFO) << "worker " << hello.name() << " (" << id << ") connected from "
               << peer;
  return session_id;
}

absl::Status WorkerRegistry::Heartbeat(const std::string& worker_id,
                                       int64_t session_id) {
  absl::MutexLock lock(&mu_);
  auto it = live_.find(worker_id);
  if (it == live_.end() || it->second.id != session_id) {
    return absl::NotFoundError(
        absl::StrCat("worker ", worker_id, ": session has ended"));
  }
  it->second.last_heartbeat_ms = clock_();
  return absl::OkStatus();
}

WorkerRegistry::Closer WorkerRegistry::EndLocked(const std::string& worker_id,
                                                 const std::string& reason) {
  auto it = live_.find(worker_id);
  if (it == live_.end()) return nullptr;
  Ended e;
  e.connected_ms = it->second.connected_ms;
  e.last_heartbeat_ms = it->second.last_heartbeat_ms;
  e.disconnected_ms = clock_();
  e.reason = reason;
  Closer closer = std::move(it->second.closer);
  ended_[worker_id] = e;
  live_.erase(it);
  return closer;
}

void WorkerRegistry::Disconnect(const std::string& worker_id,
                                int64_t session_id, const std::string& reason) {
  {
    absl::MutexLock lock(&mu_);
    auto it = live_.find(worker_id);
    if (it == live_.end() || it->second.id != session_id) return;
    EndLocked(worker_id, reason);  // the stream is already closing
  }
  absl::Status ev =
      store_->AppendWorkerEvent(worker_id, clock_(), "disconnected", reason);
  if (!ev.ok()) LS_LOG(WARNING) << "worker event not stored: " << ev;
  LS_LOG(INFO) << "worker " << worker_id << " disconnected: " << reason;
  if (listener_ != nullptr) listener_->OnWorkerDisconnected(worker_id);
}

int WorkerRegistry::Sweep() {
  std::vector<std::pair<std::string, Closer>> expired;
  const int64_t now = clock_();
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> ids;
    for (const auto& [id, s] : live_) {
      if (now - s.last_heartbeat_ms >= options_.heartbeat_timeout_ms) {
        ids.push_back(id);
      }
    }
    for (const std::string& id : ids) {
      expired.emplace_back(id, EndLocked(id, "heartbeat timeout"));
    }
  }
  for (auto& [id, closer] : expired) {
    const std::string reason =
        absl::StrFormat("heartbeat timeout (%d ms without a heartbeat)",
                        options_.heartbeat_timeout_ms);
    absl::Status ev =
        store_->AppendWorkerEvent(id, now, "disconnected", reason);
    if (!ev.ok()) LS_LOG(WARNING) << "worker event not stored: " << ev;
    LS_LOG(WARNING) << "worker " << id << ": " << reason;
    if (closer) closer(reason);
    if (listener_ != nullptr) listener_->OnWorkerDisconnected(id);
  }
  return static_cast<int>(expired.size());
}

absl::StatusOr<std::vector<Worker>> WorkerRegistry::List(bool include_gone) {
  LS_ASSIGN_OR_RETURN(std::vector<Worker> stored, store_->ListWorkers());
  std::vector<Worker> out;
  absl::MutexLock lock(&mu_);
  for (Worker& w : stored) {
    auto live = live_.find(w.worker_id());
    if (live != live_.end()) {
      w.set_state(v1::WORKER_CONNECTED);
      w.set_connected_unix_ms(live->second.connected_ms);
      w.set_last_heartbeat_unix_ms(live->second.last_heartbeat_ms);
      w.set_peer(live->second.peer);
    } else {
      if (!include_gone) continue;
      w.set_state(v1::WORKER_GONE);
      auto ended = ended_.find(w.worker_id());
      if (ended != ended_.end()) {
        w.set_connected_unix_ms(ended->second.connected_ms);
        w.set_last_heartbeat_unix_ms(ended->second.last_heartbeat_ms);
        w.set_disconnected_unix_ms(ended->second.disconnected_ms);
        w.set_disconnect_reason(ended->second.reason);
      } else {
        w.set_disconnect_reason("not connected since the coordinator started");
      }
    }
    auto count = session_counts_.find(w.worker_id());
    w.set_sessions(count == session_counts_.end() ? 0 : count->second);
    out.push_back(std::move(w));
  }
  return out;
}

absl::StatusOr<Worker> WorkerRegistry::SetAdminState(
    const v1::SetWorkerStateRequest& request) {
  if (request.worker_id().empty()) {
    return absl::InvalidArgumentError("worker_id: must be set");
  }
  if (!v1::WorkerAdminState_IsValid(request.admin_state()) ||
      request.admin_state() == v1::WORKER_ADMIN_STATE_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "admin_state: %d is not one of ACTIVE, DRAINING, QUARANTINED",
        static_cast<int>(request.admin_state())));
  }
  constexpr size_t kMaxReason = 1024;
  if (request.reason().size() > kMaxReason) {
    return absl::InvalidArgumentError(
        absl::StrFormat("reason: %d bytes exceed the limit of %d",
                        request.reason().size(), kMaxReason));
  }
  LS_RETURN_IF_ERROR(store_->SetWorkerAdminState(
      request.worker_id(), request.admin_state(), request.reason(), clock_()));
  {
    absl::MutexLock lock(&mu_);
    auto it = live_.find(request.worker_id());
    if (it != live_.end()) it->second.info.admin_state = request.admin_state();
  }
  LS_ASSIGN_OR_RETURN(std::vector<Worker> all, List(/*include_gone=*/true));
  for (Worker& w : all) {
    if (w.worker_id() == request.worker_id()) return std::move(w);
  }
  return absl::NotFoundError(
      absl::StrCat("worker_id: no worker \"", request.worker_id(), "\""));
}

}  // namespace lockstep::server
