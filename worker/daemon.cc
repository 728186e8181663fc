#include "worker/daemon.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_limits.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace lockstep::worker {

using ::lockstep::v1::CoordinatorMessage;
using ::lockstep::v1::WorkerMessage;

constexpr char kWorkerVersion[] = "lockstep-worker/0.2.0";

WorkerDaemon::WorkerDaemon(DaemonOptions options,
                           lockstep::v1::HardwareProfile profile)
    : options_(std::move(options)), profile_(std::move(profile)) {}

WorkerDaemon::~WorkerDaemon() {
  Stop();
  Reap();
}

int64_t WorkerDaemon::sessions() const {
  absl::MutexLock lock(&mu_);
  return sessions_;
}

void WorkerDaemon::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  if (active_ != nullptr) active_->TryCancel();
  for (auto& [id, run] : runs_) {
    if (run.supervisor) {
      run.supervisor->Kill();
      reap_.push_back(std::move(run.supervisor));
    }
  }
  runs_.clear();
}

void WorkerDaemon::Reap() {
  std::vector<std::unique_ptr<RunSupervisor>> done;
  {
    absl::MutexLock lock(&mu_);
    done.swap(reap_);
  }
  done.clear();  // joins reader threads, outside mu_
}

bool WorkerDaemon::Send(const WorkerMessage& m) {
  absl::MutexLock w(&write_mu_);
  Stream* stream;
  {
    absl::MutexLock lock(&mu_);
    stream = stream_;
  }
  return stream != nullptr && stream->Write(m);
}

v1::Heartbeat WorkerDaemon::MakeHeartbeat() {
  v1::Heartbeat hb;
  hb.set_sent_unix_ms(absl::ToUnixMillis(absl::Now()));
  absl::MutexLock lock(&mu_);
  for (const auto& [id, run] : runs_) {
    if (run.finished.has_value()) continue;
    v1::RunProgress* p = hb.add_runs();
    p->set_run_id(id);
    p->set_attempt(run.assignment.attempt());
    p->set_steps_done(run.steps_done);
    p->set_last_loss(run.last_loss);
  }
  return hb;
}

void WorkerDaemon::Publish() {
  absl::MutexLock w(&write_mu_);
  Stream* stream;
  std::vector<WorkerMessage> out;
  {
    absl::MutexLock lock(&mu_);
    stream = stream_;
    if (stream == nullptr) return;
    const absl::Time now = absl::Now();
    for (auto& [id, run] : runs_) {
      if (now < run.hold_until) continue;  // resend backoff
      for (const v1::FingerprintBatch& b : run.unacked) {
        if (b.sequence() < run.send_cursor) continue;
        WorkerMessage m;
        *m.mutable_batch() = b;
        out.push_back(std::move(m));
        run.send_cursor = b.sequence() + 1;
        ++run.stream_sent;
      }
      if (run.finished.has_value() && !run.finished_sent) {
        WorkerMessage m;
        *m.mutable_finished() = *run.finished;
        out.push_back(std::move(m));
        run.finished_sent = true;
        ++run.stream_sent;
      }
    }
  }
  // write_mu_ is held throughout: nothing else is written in between, so
  // the stream carries each run's messages in the order chosen above. A
  // failed write ends the session; the next one publishes from the oldest
  // unacknowledged batch again.
  for (const WorkerMessage& m : out) {
    if (!stream->Write(m)) return;
  }
}

void WorkerDaemon::OnRetryableRejection(ActiveRun* run) {
  if (run->stream_answers <= run->stale_answers) {
    // An answer to a message written before the latest resend (e.g. the
    // later batches of the same gap): that resend covers it already.
    return;
  }
  run->send_cursor = run->unacked.empty() ? run->next_sequence
                                          : run->unacked.front().sequence();
  run->finished_sent = false;
  run->stale_answers = run->stream_sent;
  const int64_t delay = run->resend_backoff_ms;
  run->resend_backoff_ms =
      std::min(options_.resend_max_backoff_ms,
               delay == 0 ? options_.resend_initial_backoff_ms : delay * 2);
  run->hold_until = absl::Now() + absl::Milliseconds(delay);
  LS_LOG(INFO) << "run " << run->assignment.run_id() << ": resending "
               << run->unacked.size() << " unacknowledged batch(es)"
               << (run->finished.has_value() ? " and the result" : "")
               << " from sequence " << run->send_cursor
               << (delay > 0 ? absl::StrCat(" in ", delay, " ms") : "");
  publish_kick_ = true;
}

void WorkerDaemon::ResendLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = absl::Now();
      absl::Time deadline = now + absl::Seconds(1);
      for (const auto& [id, run] : runs_) {
        if (run.hold_until > now && run.hold_until < deadline) {
          deadline = run.hold_until;
        }
      }
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return publish_kick_ || resender_stop_;
      };
      mu_.AwaitWithDeadline(absl::Condition(&woken), deadline);
      if (resender_stop_) return;
      publish_kick_ = false;
    }
    Publish();
  }
}

void WorkerDaemon::StartRun(const v1::RunAssignment& a) {
  {
    absl::MutexLock lock(&mu_);
    auto it = runs_.find(a.run_id());
    if (it != runs_.end() && it->second.assignment.attempt() == a.attempt()) {
      return;  // already running this attempt
    }
    if (it != runs_.end()) {
      // An older attempt: stop it; its fingerprints are void.
      if (it->second.supervisor) {
        it->second.supervisor->Kill();
        reap_.push_back(std::move(it->second.supervisor));
      }
      runs_.erase(it);
    }
  }
  if (const std::string& digest = a.model().parameters_digest();
      !digest.empty() && !options_.run_argv.empty()) {
    absl::StatusOr<std::string> path = Parameters(digest);
    if (!path.ok()) {
      WorkerMessage m;
      m.mutable_finished()->set_run_id(a.run_id());
      m.mutable_finished()->set_attempt(a.attempt());
      m.mutable_finished()->set_failure_reason(
          absl::StrCat("cannot get the model's parameters ", digest, ": ",
                       path.status().ToString()));
      Send(m);
      return;
    }
  }
  if (options_.run_argv.empty()) {
    WorkerMessage m;
    m.mutable_finished()->set_run_id(a.run_id());
    m.mutable_finished()->set_attempt(a.attempt());
    m.mutable_finished()->set_failure_reason("this worker executes no runs");
    Send(m);
    return;
  }
  LS_LOG(INFO) << "run " << a.run_id() << " attempt " << a.attempt()
               << ": starting (" << a.model().name() << ", "
               << a.config().steps() << " steps)";
  SupervisorOptions so;
  so.argv = options_.run_argv;
  so.timeout_ms = options_.run_timeout_ms;
  absl::StatusOr<RunResourceLimits> limits =
      DeriveRunLimits(a, profile_.gpus_size() > 0, options_.run_limits);
  if (limits.ok()) {
    so.limits = *limits;
    LS_LOG(INFO) << "run " << a.run_id()
                 << ": limits: " << DescribeRunLimits(so.limits);
  }
  const std::string run_id = a.run_id();
  {
    absl::MutexLock lock(&mu_);
    ActiveRun& run = runs_[run_id];
    run.assignment = a;
    run.next_sequence = a.next_sequence();
    run.send_cursor = a.next_sequence();
    absl::StatusOr<std::unique_ptr<RunSupervisor>> supervisor =
        limits.ok()
            ? RunSupervisor::Start(so, a,
                                   [this, run_id](WorkerMessage m) {
                                     OnRunMessage(run_id, std::move(m));
                                   })
            : absl::StatusOr<std::unique_ptr<RunSupervisor>>(limits.status());
    if (supervisor.ok()) {
      run.supervisor = std::move(*supervisor);
      return;
    }
    v1::RunFinished f;
    f.set_run_id(a.run_id());
    f.set_attempt(a.attempt());
    f.set_failure_reason(supervisor.status().ToString());
    run.finished = f;
  }
  Publish();
}

void WorkerDaemon::OnRunMessage(const std::string& run_id, WorkerMessage m) {
  {
    absl::MutexLock lock(&mu_);
    auto it = runs_.find(run_id);
    if (it == runs_.end()) return;  // cancelled meanwhile
    ActiveRun& run = it->second;
    if (m.has_progress()) {
      run.steps_done = m.progress().steps_done();
      run.last_loss = m.progress().last_loss();
    } else if (m.has_batch()) {
      v1::FingerprintBatch b = std::move(*m.mutable_batch());
      b.set_run_id(run_id);
      b.set_attempt(run.assignment.attempt());
      b.set_sequence(run.next_sequence++);
      run.unacked.push_back(std::move(b));
    } else if (m.has_finished()) {
      run.finished = m.finished();
      run.finished->set_batches(run.next_sequence);
      if (run.supervisor) reap_.push_back(std::move(run.supervisor));
      LS_LOG(INFO) << "run " << run_id << ": "
                   << (run.finished->success()
                           ? "succeeded, digest " + run.finished->run_digest()
                           : "failed: " + run.finished->failure_reason());
    } else {
      return;
    }
  }
  if (m.has_progress()) {
    Send(m);  // unanswered; may go any time
    return;
  }
  // Batches and results stay queued until acknowledged and go out in order,
  // behind any resend of the run.
  Publish();
}

void WorkerDaemon::OnCoordinatorMessage(const CoordinatorMessage& m) {
  switch (m.kind_case()) {
    case CoordinatorMessage::kAssignment:
      StartRun(m.assignment());
      break;
    case CoordinatorMessage::kCancel: {
      absl::MutexLock lock(&mu_);
      auto it = runs_.find(m.cancel().run_id());
      if (it != runs_.end() &&
          it->second.assignment.attempt() == m.cancel().attempt()) {
        LS_LOG(WARNING) << "run " << m.cancel().run_id()
                        << " cancelled: " << m.cancel().reason();
        if (it->second.supervisor) {
          it->second.supervisor->Kill();
          reap_.push_back(std::move(it->second.supervisor));
        }
        runs_.erase(it);
      }
      break;
    }
    case CoordinatorMessage::kAck: {
      absl::MutexLock lock(&mu_);
      auto it = runs_.find(m.ack().run_id());
      if (it == runs_.end() ||
          it->second.assignment.attempt() != m.ack().attempt()) {
        break;
      }
      if (m.ack().result_recorded()) {
        runs_.erase(it);  // the coordinator has the result: forget the run
        break;
      }
      ActiveRun& run = it->second;
      ++run.stream_answers;
      auto& q = run.unacked;
      bool progress = false;
      while (!q.empty() && q.front().sequence() <= m.ack().sequence()) {
        q.pop_front();
        progress = true;
      }
      if (progress) run.resend_backoff_ms = 0;
      break;
    }
    case CoordinatorMessage::kRejected: {
      LS_LOG(WARNING) << "coordinator rejected a message"
                      << (m.rejected().run_id().empty()
                              ? ""
                              : " of run " + m.rejected().run_id())
                      << ": " << m.rejected().message();
      const auto code = static_cast<absl::StatusCode>(m.rejected().code());
      if (code == absl::StatusCode::kOutOfRange ||
          code == absl::StatusCode::kUnavailable ||
          code == absl::StatusCode::kResourceExhausted) {
        absl::MutexLock lock(&mu_);
        auto it = runs_.find(m.rejected().run_id());
        if (it != runs_.end() &&
            it->second.assignment.attempt() == m.rejected().attempt()) {
          ++it->second.stream_answers;
          OnRetryableRejection(&it->second);
        }
      } else if (code == absl::StatusCode::kAborted ||
                 code == absl::StatusCode::kNotFound) {
        // The coordinator no longer wants this run: stop it.
        absl::MutexLock lock(&mu_);
        auto it = runs_.find(m.rejected().run_id());
        if (it != runs_.end() &&
            it->second.assignment.attempt() == m.rejected().attempt()) {
          if (it->second.supervisor) {
            it->second.supervisor->Kill();
            reap_.push_back(std::move(it->second.supervisor));
          }
          runs_.erase(it);
        }
      } else {
        absl::MutexLock lock(&mu_);
        auto it = runs_.find(m.rejected().run_id());
        if (it != runs_.end() &&
            it->second.assignment.attempt() == m.rejected().attempt()) {
          ++it->second.stream_answers;  // refused for good: not resent
        }
      }
      break;
    }
    default:
      break;
  }
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
  // The coordinator's default limit: a batch at its largest is far below.
  args.SetMaxSendMessageSize(kDefaultMaxMessageBytes);
  args.SetMaxReceiveMessageSize(kDefaultMaxMessageBytes);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
      ChannelCredentials(options_.security);
  if (!creds.ok()) return creds.status();
  auto channel = grpc::CreateCustomChannel(options_.coordinator, *creds, args);
  auto stub = lockstep::v1::WorkerGateway::NewStub(channel);
  stub_ = stub.get();

  std::mt19937_64 rng(std::random_device{}());
  int64_t backoff = options_.initial_backoff_ms;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::OkStatus();
    }
    const int64_t before = sessions();
    grpc::Status status = Session(stub.get());
    Reap();
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::OkStatus();
    }
    if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
        status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
        status.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
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

absl::StatusOr<std::string> WorkerDaemon::Parameters(
    const std::string& digest) {
  BlobCache* cache = nullptr;
  {
    absl::MutexLock lock(&cache_mu_);
    if (options_.blob_cache.dir.empty()) {
      return absl::FailedPreconditionError(
          "this worker has no blob cache (--blob_cache_dir)");
    }
    if (blob_cache_ == nullptr) {
      LS_ASSIGN_OR_RETURN(blob_cache_, BlobCache::Open(options_.blob_cache));
    }
    cache = blob_cache_.get();
  }
  auto fetch = [this](const std::string& d) -> absl::StatusOr<std::string> {
    lockstep::v1::WorkerGateway::Stub* stub = stub_;
    grpc::ClientContext ctx;
    AttachToken(options_.security, &ctx);
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::minutes(10));
    lockstep::v1::FetchBlobRequest req;
    req.set_worker_name(options_.name);
    req.set_digest(d);
    auto reader = stub->FetchBlob(&ctx, req);
    lockstep::v1::BlobChunk chunk;
    std::string bytes;
    bool first = true;
    while (reader->Read(&chunk)) {
      if (first) bytes.reserve(chunk.size());
      first = false;
      bytes += chunk.data();
    }
    grpc::Status s = reader->Finish();
    if (!s.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                          absl::StrCat("FetchBlob: ", s.error_message()));
    }
    return bytes;
  };
  bool fetched = false;
  absl::StatusOr<std::string> path = cache->Get(digest, fetch, &fetched);
  if (path.ok()) {
    LS_LOG(INFO) << "parameters " << digest << ": "
                 << (fetched ? "fetched from the coordinator"
                             : "read from the cache");
  }
  return path;
}

grpc::Status WorkerDaemon::Session(lockstep::v1::WorkerGateway::Stub* stub) {
  grpc::ClientContext ctx;
  AttachToken(options_.security, &ctx);
  // Wait for the channel to connect instead of failing fast while it is
  // reconnecting (the welcome watchdog bounds the wait).
  ctx.set_wait_for_ready(true);
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return grpc::Status::CANCELLED;
    active_ = &ctx;
  }
  auto end_session = [this] {
    {
      absl::MutexLock lock(&mu_);
      stream_ = nullptr;
      active_ = nullptr;
    }
    absl::MutexLock w(&write_mu_);  // no writer holds the old stream now
  };
  std::unique_ptr<Stream> stream = stub->Connect(&ctx);

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
  const bool answered = stream->Write(hello) && stream->Read(&msg);
  const bool ok = answered && msg.has_welcome();
  welcomed.Notify();
  watchdog.join();
  if (!ok) {
    // A stream the coordinator ended (a refused hello, token or
    // certificate) is not cancelled, so its status and message arrive
    // intact; one that answered with something else is.
    if (answered) ctx.TryCancel();
    grpc::Status s = stream->Finish();
    end_session();
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
    stream_ = stream.get();
    // A new stream: every run publishes again from its oldest
    // unacknowledged batch, before anything newer.
    for (auto& [id, run] : runs_) {
      run.send_cursor = run.unacked.empty() ? run.next_sequence
                                            : run.unacked.front().sequence();
      run.finished_sent = false;
      run.hold_until = absl::InfinitePast();
      run.resend_backoff_ms = 0;
      run.stream_sent = 0;
      run.stream_answers = 0;
      run.stale_answers = 0;
    }
    resender_stop_ = false;
    publish_kick_ = false;
  }
  LS_LOG(INFO) << "connected to " << options_.coordinator << " as "
               << msg.welcome().worker_id() << " ("
               << msg.welcome().coordinator_version() << "), heartbeat every "
               << interval << " ms";
  // Runs that lived through the disconnect: tell the coordinator at once.
  {
    WorkerMessage hb;
    *hb.mutable_heartbeat() = MakeHeartbeat();
    Send(hb);
  }
  Publish();
  std::thread resender([this] { ResendLoop(); });

  absl::Notification session_over;
  std::thread heartbeats([&] {
    while (!session_over.WaitForNotificationWithTimeout(
        absl::Milliseconds(interval))) {
      Reap();
      WorkerMessage hb;
      *hb.mutable_heartbeat() = MakeHeartbeat();
      if (!Send(hb)) {
        ctx.TryCancel();  // unblocks the reader
        return;
      }
    }
  });

  while (stream->Read(&msg)) OnCoordinatorMessage(msg);
  session_over.Notify();
  {
    absl::MutexLock lock(&mu_);
    resender_stop_ = true;
  }
  resender.join();
  heartbeats.join();
  end_session();
  return stream->Finish();
}

}  // namespace lockstep::worker
