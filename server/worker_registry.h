// Live state of connected workers, backed by the store.
//
// Each worker stream is a session. Connect() registers it (persisting the
// worker's identity and profile), Heartbeat() renews it, Disconnect() ends
// it. Sweep() ends sessions whose last heartbeat is older than the timeout
// and asks their streams to close. List() merges the store's workers with
// the live sessions.
//
// Thread-safe.
#ifndef LOCKSTEP_SERVER_WORKER_REGISTRY_H_
#define LOCKSTEP_SERVER_WORKER_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lockstep/v1/lockstep_service.pb.h"
#include "lockstep/v1/worker_gateway.pb.h"
#include "server/store/store.h"

namespace lockstep::server {

// Milliseconds since the Unix epoch; injectable for tests.
using Clock = std::function<int64_t()>;
int64_t SystemClockMs();

// Stable worker id for a worker name: "w-" + the first 16 hex digits of the
// name's digest.
std::string WorkerIdForName(const std::string& name);

// Limits of a Hello. Each refusal is INVALID_ARGUMENT naming the field and
// the limit.
inline constexpr size_t kMaxWorkerNameBytes = 128;
inline constexpr size_t kMaxWorkerVersionBytes = 128;
inline constexpr int kMaxWorkerLabels = 64;
inline constexpr size_t kMaxWorkerLabelKeyBytes = 128;
inline constexpr size_t kMaxWorkerLabelValueBytes = 256;
inline constexpr size_t kMaxHardwareClassBytes = 4096;
inline constexpr size_t kMaxMachineIdBytes = 128;
inline constexpr size_t kMaxDeviceBytes = 256;
// The whole profile, serialized (host name, GPU list, error texts, ...).
inline constexpr size_t kMaxProfileBytes = 64 * 1024;
inline constexpr int kMaxWorkerSlots = 64;

// Prefix every hardware-class string starts with.
inline constexpr char kHardwareClassPrefix[] = "lockstep-class/";

// Checks that profile.hardware_class describes the profile it came with:
// its digest is Digest128Hex(hardware_class), the string starts with
// kHardwareClassPrefix and is at most kMaxHardwareClassBytes, and every
// class-relevant field the profile claims appears in it, cleaned as the
// worker writes it (worker/hardware_probe.h): cpu.vendor, cpu.model,
// cpu.arch and, for GPU 0, its name and "sm_<major><minor>" as whole
// components (after '=' or '/', before '/', '|' or the end); cpu.kernel_path
// and, with a GPU, sm_count, mig, the driver, cuBLAS and cuDNN versions as
// whole "|key=value" fields (kernel_path, sms, mig, driver, cublas, cudnn).
// An empty (or zero) field claims nothing and is not checked, but the class
// may not name a kernel path or a GPU the profile does not list.
// INVALID_ARGUMENT names the profile field that does not match.
absl::Status CheckHardwareClass(const lockstep::v1::HardwareProfile& profile);

// Checks profile.device. All three fields empty is an unknown device: the
// worker connects, but its runs count as no device for CROSS_DEVICE (empty
// ids never count as distinct devices). Otherwise machine_id and device
// must be set, within their limits, and device_id must equal
// DeviceIdOf(machine_id, device) (common/device_identity.h).
absl::Status CheckDeviceIdentity(const lockstep::v1::DeviceIdentity& device);

// Validates a Hello: no unknown fields; name charset and length; version,
// labels (count, key and value lengths), slots and the profile's size
// within their limits; the hardware class (CheckHardwareClass) and the
// device identity (CheckDeviceIdentity).
absl::Status ValidateHello(const lockstep::v1::Hello& hello);

struct RegistryOptions {
  // A session whose last heartbeat is older than this is ended. Default 10 s.
  int64_t heartbeat_timeout_ms = 10000;
};

// A connected worker as the scheduler sees it.
struct LiveWorker {
  std::string worker_id;
  std::string name;
  std::map<std::string, std::string> labels;
  std::string hardware_class;
  std::string hardware_class_digest;
  int slots = 1;
  // GPUs the worker's hardware profile lists (usable CUDA devices).
  int gpus = 0;
  // profile.device.device_id: the physical device the worker's runs execute
  // on. Empty for an unknown device, which never counts as a device of its
  // own (two unknown devices are not two devices).
  std::string device_id;
  lockstep::v1::WorkerAdminState admin_state = lockstep::v1::ACTIVE;
};

class WorkerRegistry {
 public:
  // Called (outside the registry's lock) to close a session's stream.
  using Closer = std::function<void(const std::string& reason)>;
  // Queues a message on a session's stream; never blocks on the network.
  using Sender = std::function<void(lockstep::v1::CoordinatorMessage)>;

  // Told about sessions ending, outside the registry's lock. (The gateway
  // reports session starts itself, once its welcome is queued.)
  class Listener {
   public:
    virtual ~Listener() = default;
    virtual void OnWorkerDisconnected(const std::string& worker_id) = 0;
  };

  WorkerRegistry(store::Store* store, RegistryOptions options, Clock clock);
  WorkerRegistry(const WorkerRegistry&) = delete;
  WorkerRegistry& operator=(const WorkerRegistry&) = delete;

  // Starts a session for a hello (ValidateHello first: INVALID_ARGUMENT).
  // Returns its session id (> 0). ALREADY_EXISTS when a live session of the
  // same name has heartbeated less than the heartbeat timeout ago; a session
  // silent for the timeout or longer (the same bound Sweep applies) is
  // ended and replaced. After a coordinator restart no session is live: the
  // first hello of a name starts it, a second one is refused.
  absl::StatusOr<int64_t> Connect(const lockstep::v1::Hello& hello,
                                  const std::string& peer, Closer closer,
                                  Sender sender = nullptr);
  // Set once, before sessions start; not owned.
  void SetListener(Listener* listener);
  // Queues `msg` to the worker's live session. False when it has none.
  bool Send(const std::string& worker_id, lockstep::v1::CoordinatorMessage msg);
  // Connected workers, ordered by name.
  std::vector<LiveWorker> LiveWorkers();
  bool IsConnected(const std::string& worker_id);
  // Renews the session. NOT_FOUND when the session has ended.
  absl::Status Heartbeat(const std::string& worker_id, int64_t session_id);
  // Ends the session (no-op when it already ended).
  void Disconnect(const std::string& worker_id, int64_t session_id,
                  const std::string& reason);
  // Ends every session older than the heartbeat timeout. Returns how many.
  int Sweep();

  // Workers from the store merged with live state, ordered by name.
  absl::StatusOr<std::vector<lockstep::v1::Worker>> List(bool include_gone);
  absl::StatusOr<lockstep::v1::Worker> SetAdminState(
      const lockstep::v1::SetWorkerStateRequest& request);

  int64_t heartbeat_timeout_ms() const { return options_.heartbeat_timeout_ms; }

 private:
  struct Session {
    int64_t id = 0;
    std::string name;
    std::string peer;
    int64_t connected_ms = 0;
    int64_t last_heartbeat_ms = 0;
    Closer closer;
    Sender sender;
    LiveWorker info;
  };
  struct Ended {
    int64_t connected_ms = 0;
    int64_t last_heartbeat_ms = 0;
    int64_t disconnected_ms = 0;
    std::string reason;
  };
  // Ends `it`'s session; returns its closer for the caller to run unlocked.
  Closer EndLocked(const std::string& worker_id, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  store::Store* const store_;
  const RegistryOptions options_;
  const Clock clock_;

  absl::Mutex mu_;
  int64_t next_session_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, Session> live_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Ended> ended_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> session_counts_ ABSL_GUARDED_BY(mu_);
  Listener* listener_ = nullptr;
};

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_WORKER_REGISTRY_H_
