#include "worker/daemon.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"

namespace lockstep::worker {

using ::lockstep::v1::CoordinatorMessage;
using ::lockstep::v1::WorkerMessage;

constexpr char kWorkerVersion[] = "lockstep-worker/0.1.0";

WorkerDaemon::WorkerDaemon(DaemonOptions options,
                           lockstep::v1::HardwareProfile profile)
    : options_(std::move(options)), profile_(std::move(profile)) {}

int64_t WorkerDaemon::sessions() const {
  absl::MutexLock lock(&mu_);
  return sessions_;
}

void WorkerDaemon::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  if (active_ != nullptr) active_->TryCancel();
}

absl::Status WorkerDaemon::Run() {
  if (options_.name.empty()) {
    return absl::InvalidArgumentError("name: must be set");
  }
  grpc::ChannelArguments args;
  // Reconnect promptly after a coordinator restart instead of gRPC's
  // default backoff of up to two minutes.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              static_cast<int>(options_.initial_backoff_ms));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(options_.initial_backoff_ms));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(options_.max_backoff_ms));
  // Detect a silently dead coordinator (no FIN/RST) within ~40 s.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  auto channel = grpc::CreateCustomChannel(
      options_.coordinator, grpc::InsecureChannelCredentials(), args);
  auto stub = lockstep::v1::WorkerGateway::NewStub(channel);

  std::mt19937_64 rng(std::random_device{}());
  int64_t backoff = options_.initial_backoff_ms;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::OkStatus();
    }
    const int64_t before = sessions();
    grpc::Status status = Session(stub.get());
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::OkStatus();
    }
    if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      return absl::InvalidArgumentError(absl::StrCat(
          "coordinator refused this worker: ", status.error_message()));
    }
    if (sessions() > before) backoff = options_.initial_backoff_ms;
    std::uniform_real_distribution<double> jitter(0.8, 1.2);
    const int64_t delay = static_cast<int64_t>(backoff * jitter(rng));
    LS_LOG(WARNING) << "session ended ("
                    << (status.ok() ? std::string("OK")
                                    : absl::StrCat(status.error_code(), ": ",
                                                   status.error_message()))
                    << "); reconnecting to " << options_.coordinator << " in "
                    << delay << " ms";
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]()
                          ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&stopping),
                           absl::Milliseconds(delay));
      if (stopping_) return absl::OkStatus();
    }
    backoff = std::min(backoff * 2, options_.max_backoff_ms);
  }
}

grpc::Status WorkerDaemon::Session(lockstep::v1::WorkerGateway::Stub* stub) {
  grpc::ClientContext ctx;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return grpc::Status::CANCELLED;
    active_ = &ctx;
  }
  auto clear_active = [this] {
    absl::MutexLock lock(&mu_);
    active_ = nullptr;
  };
  auto stream = stub->Connect(&ctx);

  WorkerMessage hello;
  auto* h = hello.mutable_hello();
  h->set_name(options_.name);
  *h->mutable_profile() = profile_;
  for (const auto& [k, v] : options_.labels) (*h->mutable_labels())[k] = v;
  h->set_slots(options_.slots);
  h->set_version(kWorkerVersion);

  // Until the welcome arrives a watchdog cancels the stream after the
  // welcome timeout, so a coordinator that accepts but never answers does
  // not hang the worker.
  absl::Notification welcomed;
  std::thread watchdog([&] {
    if (!welcomed.WaitForNotificationWithTimeout(
            absl::Milliseconds(options_.welcome_timeout_ms))) {
      ctx.TryCancel();
    }
  });

  CoordinatorMessage msg;
  bool ok = stream->Write(hello) && stream->Read(&msg) && msg.has_welcome();
  welcomed.Notify();
  watchdog.join();
  if (!ok) {
    ctx.TryCancel();
    grpc::Status s = stream->Finish();
    clear_active();
    if (s.ok()) {
      return grpc::Status(grpc::StatusCode::UNKNOWN,
                          "stream ended before the welcome");
    }
    return s;
  }
  const int64_t interval =
      std::max<int64_t>(10, msg.welcome().heartbeat_interval_ms());
  {
    absl::MutexLock lock(&mu_);
    ++sessions_;
  }
  LS_LOG(INFO) << "connected to " << options_.coordinator << " as "
               << msg.welcome().worker_id() << " ("
               << msg.welcome().coordinator_version() << "), heartbeat every "
               << interval << " ms";

  absl::Notification session_over;
  std::thread heartbeats([&] {
    while (!session_over.WaitForNotificationWithTimeout(
        absl::Milliseconds(interval))) {
      WorkerMessage hb;
      hb.mutable_heartbeat()->set_sent_unix_ms(absl::ToUnixMillis(absl::Now()));
      if (!stream->Write(hb)) {
        ctx.TryCancel();  // unblocks the reader
        return;
      }
    }
  });

  while (stream->Read(&msg)) {
    switch (msg.kind_case()) {
      case CoordinatorMessage::kAssignment:
        LS_LOG(WARNING) << "run " << msg.assignment().run_id()
                        << " assigned, but this worker version executes no "
                           "runs yet";
        break;
      case CoordinatorMessage::kRejected:
        LS_LOG(WARNING) << "coordinator rejected a message: "
                        << msg.rejected().message();
        break;
      default:
        break;
    }
  }
  session_over.Notify();
  heartbeats.join();
  grpc::Status s = stream->Finish();
  clear_active();
  return s;
}

}  // namespace lockstep::worker
