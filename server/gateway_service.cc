#include "server/gateway_service.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "server/message_checks.h"
#include "server/metrics.h"

namespace lockstep::server {
namespace {

using ::lockstep::v1::CoordinatorMessage;
using ::lockstep::v1::WorkerMessage;

constexpr char kCoordinatorVersion[] = "lockstep-coordinator/0.1.0";

// Lets the registry close a session from another thread without racing the
// reactor's deletion: the reactor clears `reactor` in OnDone under `mu`.
class Session;
struct SessionHandle {
  absl::Mutex mu;
  Session* reactor ABSL_GUARDED_BY(mu) = nullptr;
};

// One worker stream. Reads are kept outstanding one at a time; writes go
// through a queue so at most one StartWrite is in flight. Deletes itself in
// OnDone, or once the work still using it (store pool tasks, batches
// waiting for their commit) is done.
class Session final
    : public grpc::ServerBidiReactor<WorkerMessage, CoordinatorMessage> {
 public:
  Session(grpc::CallbackServerContext* context, WorkerRegistry* registry,
          JobManager* jobs, const GatewayOptions& options, TaskPool* pool,
          Principal principal)
      : principal_(std::move(principal)),
        registry_(registry),
        jobs_(jobs),
        options_(options),
        pool_(pool),
        peer_(context->peer()),
        handle_(std::make_shared<SessionHandle>()) {
    {
      absl::MutexLock lock(&handle_->mu);
      handle_->reactor = this;
    }
    absl::MutexLock lock(&mu_);
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      End(grpc::Status::OK, "stream closed by the worker");
      return;
    }
    RenewOnActivity(in_.kind_case());
    // Messages that wait on the store go to the store pool; the next read
    // starts once they are handled (a batch: once it is queued for the
    // store's committer), so a stream's messages stay in order and gRPC's
    // callback threads stay free for other streams. A run's result waits
    // until every batch before it is answered, so its check reads them.
    const WorkerMessage::KindCase kind = in_.kind_case();
    if (kind == WorkerMessage::kFinished) {
      absl::MutexLock lock(&mu_);
      if (next_ticket_ != next_reply_) {
        finished_waiting_ = true;  // handled by the batch answered last
        return;
      }
    }
    // (A batch refused for its shape never reaches the store: answered
    // here.)
    if (kind == WorkerMessage::kHello || kind == WorkerMessage::kFinished ||
        (kind == WorkerMessage::kBatch &&
         ValidateBatchShape(in_.batch()).ok())) {
      RunOnPool([this] { HandleAndReadNext(); });
      return;
    }
    HandleAndReadNext();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    out_.pop_front();
    if (!ok || out_.empty() || finished_) {
      writing_ = false;
    } else {
      StartWrite(&out_.front());
    }
  }

  void OnCancel() override { End(grpc::Status::CANCELLED, "stream cancelled"); }

  void OnDone() override {
    {
      absl::MutexLock lock(&handle_->mu);
      handle_->reactor = nullptr;
    }
    std::string worker_id;
    int64_t session_id = 0;
    std::string reason;
    {
      absl::MutexLock lock(&mu_);
      worker_id = worker_id_;
      session_id = session_id_;
      reason = end_reason_;
    }
    if (session_id != 0) registry_->Disconnect(worker_id, session_id, reason);
    {
      // A message still being handled on the store pool, or a batch still
      // waiting for its commit, deletes the session when it is done.
      absl::MutexLock lock(&mu_);
      done_ = true;
      if (pending_ > 0) return;
    }
    delete this;
  }

  // Ends the stream with `status` (once). Safe from any thread while the
  // reactor lives.
  void End(const grpc::Status& status, const std::string& reason) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
      end_reason_ = reason;
    }
    Finish(status);
  }

 private:
  // Runs `task` on the store pool, keeping the session alive until it is
  // done.
  void RunOnPool(std::function<void()> task) {
    Hold();
    pool_->Run([this, task = std::move(task)] {
      task();
      Release();
    });
  }

  // Work that uses the session after OnDone (a task on the store pool, a
  // batch waiting for its commit) holds it; the last release after OnDone
  // deletes it.
  void Hold() {
    absl::MutexLock lock(&mu_);
    ++pending_;
  }
  void Release() {
    bool release;
    {
      absl::MutexLock lock(&mu_);
      release = --pending_ == 0 && done_;
    }
    if (release) delete this;
  }

  // Answers to batches go out in the order the batches came, whether they
  // were refused at once or answered after their commit: each batch takes
  // a ticket, and an answer waits for those of earlier tickets.
  int64_t TakeTicket() {
    absl::MutexLock lock(&mu_);
    return next_ticket_++;
  }
  void Answer(int64_t ticket, CoordinatorMessage msg) {
    bool resume_reading = false, handle_finished = false;
    {
      absl::MutexLock lock(&mu_);
      answers_.emplace(ticket, std::move(msg));
      for (auto it = answers_.begin();
           it != answers_.end() && it->first == next_reply_;
           it = answers_.erase(it)) {
        ++next_reply_;
        SendLocked(std::move(it->second));
      }
      if (next_ticket_ == next_reply_) {
        // Every batch is answered: a paused stream reads on, a waiting
        // run result is handled.
        resume_reading = reading_paused_;
        handle_finished = finished_waiting_;
        reading_paused_ = finished_waiting_ = false;
      }
      if (resume_reading && !finished_) StartRead(&in_);
    }
    if (handle_finished) RunOnPool([this] { HandleAndReadNext(); });
  }

  // A stream's messages are handled in order, so under heavy ingest its
  // heartbeat may wait behind its own batches; any message of a live
  // session proves the worker alive, so receiving one renews the session
  // at once (the heartbeat still renews run leases when handled).
  void RenewOnActivity(WorkerMessage::KindCase kind) {
    if (kind == WorkerMessage::kHello || kind == WorkerMessage::kHeartbeat) {
      return;  // a hello starts the session; a heartbeat renews it anyway
    }
    std::string worker_id;
    int64_t session_id;
    {
      absl::MutexLock lock(&mu_);
      worker_id = worker_id_;
      session_id = session_id_;
    }
    if (session_id != 0) (void)registry_->Heartbeat(worker_id, session_id);
  }

  // Handles in_, then starts the next read (or ends the stream).
  void HandleAndReadNext() {
    std::string worker_id;
    bool session;
    {
      absl::MutexLock lock(&mu_);
      worker_id = worker_id_;
      session = session_id_ != 0;
    }
    if (session && in_.kind_case() == WorkerMessage::kBatch) {
      if (!HandleBatch(worker_id)) {
        // The store's queue is full: read on once this stream's batches
        // are answered (back-pressure through gRPC's flow control).
        absl::MutexLock lock(&mu_);
        if (next_ticket_ != next_reply_) {
          reading_paused_ = true;
          return;
        }
        if (!finished_) StartRead(&in_);
        return;
      }
    } else {
      grpc::Status error = Handle(in_);
      if (!error.ok()) {
        End(error, std::string(error.error_message()));
        return;
      }
    }
    // Checked and started under the lock so no read starts after Finish.
    // gRPC never runs a reaction inline from StartRead/StartWrite, so
    // holding mu_ here cannot deadlock.
    absl::MutexLock lock(&mu_);
    if (!finished_) StartRead(&in_);
  }

  grpc::Status Handle(const WorkerMessage& msg) {
    std::string worker_id;
    int64_t session_id;
    {
      absl::MutexLock lock(&mu_);
      worker_id = worker_id_;
      session_id = session_id_;
    }
    absl::Status unknown = RefuseUnknownFields(msg, "");
    if (!unknown.ok() && session_id != 0 &&
        (msg.kind_case() == WorkerMessage::kBatch ||
         msg.kind_case() == WorkerMessage::kFinished)) {
      // A refused result: the stream stays open, the worker is told why.
      const bool batch = msg.kind_case() == WorkerMessage::kBatch;
      CoordinatorMessage out;
      Reject(batch ? msg.batch().run_id() : msg.finished().run_id(),
             batch ? msg.batch().attempt() : msg.finished().attempt(), unknown,
             &out);
      Send(std::move(out));
      return grpc::Status::OK;
    }
    if (!unknown.ok()) return ToGrpc(unknown);
    if (session_id == 0) {
      if (msg.kind_case() != WorkerMessage::kHello) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "the first message of a worker stream must be "
                            "hello");
      }
      return HandleHello(msg.hello());
    }
    switch (msg.kind_case()) {
      case WorkerMessage::kHello:
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "hello: already received on this stream");
      case WorkerMessage::kHeartbeat: {
        absl::Status valid = ValidateHeartbeatShape(msg.heartbeat());
        if (!valid.ok()) return ToGrpc(valid);
        absl::Status s = registry_->Heartbeat(worker_id, session_id);
        if (!s.ok()) {
          return grpc::Status(grpc::StatusCode::ABORTED,
                              std::string(s.message()));
        }
        jobs_->OnHeartbeat(worker_id, msg.heartbeat());
        return grpc::Status::OK;
      }
      case WorkerMessage::kProgress: {
        absl::Status valid = ValidateProgressShape(msg.progress(), "progress");
        if (!valid.ok()) return ToGrpc(valid);
        lockstep::v1::Heartbeat hb;
        *hb.add_runs() = msg.progress();
        jobs_->OnHeartbeat(worker_id, hb);
        return grpc::Status::OK;
      }
      case WorkerMessage::kBatch:
        return grpc::Status::OK;  // HandleBatch
      case WorkerMessage::kFinished: {
        absl::Status s = ValidateRunFinishedShape(msg.finished());
        if (s.ok()) {
          const absl::Time start = absl::Now();
          s = jobs_->OnRunFinished(worker_id, msg.finished());
          if (s.ok()) {
            GlobalMetrics().commit_latency.Observe(
                {}, absl::ToDoubleSeconds(absl::Now() - start));
          }
        }
        CoordinatorMessage out;
        if (s.ok()) {
          out.mutable_ack()->set_run_id(msg.finished().run_id());
          out.mutable_ack()->set_attempt(msg.finished().attempt());
          out.mutable_ack()->set_result_recorded(true);
        } else {
          Reject(msg.finished().run_id(), msg.finished().attempt(), s, &out);
        }
        Send(std::move(out));
        return grpc::Status::OK;
      }
      case WorkerMessage::KIND_NOT_SET:
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "worker message: no kind set");
    }
    return grpc::Status::OK;
  }

  // Queues in_'s batch for the store (or refuses it), answering it in
  // order once it is committed. Returns false when the store's queue is
  // full.
  bool HandleBatch(const std::string& worker_id) {
    const int64_t ticket = TakeTicket();
    lockstep::v1::FingerprintBatch& batch = *in_.mutable_batch();
    absl::Status valid = RefuseUnknownFields(in_, "");
    if (valid.ok()) valid = ValidateBatchShape(batch);
    if (!valid.ok()) {
      RecordBatch(batch, false, absl::ZeroDuration());
      CoordinatorMessage out;
      Reject(batch.run_id(), batch.attempt(), valid, &out);
      Answer(ticket, std::move(out));
      return true;
    }
    const std::string run_id = batch.run_id();
    const int32_t attempt = batch.attempt();
    const int fingerprints = batch.fingerprints_size();
    const double bytes = FingerprintBytes(batch);
    const absl::Time start = absl::Now();
    Hold();  // until the batch is answered
    return jobs_->SubmitBatch(
        worker_id, std::move(batch),
        [this, ticket, run_id, attempt, fingerprints, bytes,
         start](absl::StatusOr<lockstep::v1::BatchAck> ack) {
          RecordBatch(ack.ok(), fingerprints, bytes, absl::Now() - start);
          CoordinatorMessage out;
          if (ack.ok()) {
            *out.mutable_ack() = *ack;
          } else {
            Reject(run_id, attempt, ack.status(), &out);
          }
          Answer(ticket, std::move(out));
          Release();
        });
  }

  // Ingest metrics of one batch: its result, and for an acknowledged one
  // its latency, fingerprints and bytes (a batch resent after a lost
  // acknowledgement is counted again).
  static void RecordBatch(bool stored, int fingerprints, double bytes,
                          absl::Duration took) {
    Metrics& m = GlobalMetrics();
    m.batches.Add({stored ? "acknowledged" : "refused"});
    if (!stored) return;
    m.ingest_latency.Observe({}, absl::ToDoubleSeconds(took));
    m.fingerprints_ingested.Add({}, fingerprints);
    m.fingerprint_bytes.Add({}, bytes);
  }
  static void RecordBatch(const lockstep::v1::FingerprintBatch& batch,
                          bool stored, absl::Duration took) {
    RecordBatch(stored, batch.fingerprints_size(), FingerprintBytes(batch),
                took);
  }
  static double FingerprintBytes(const lockstep::v1::FingerprintBatch& batch) {
    double bytes = 0;
    for (const auto& f : batch.fingerprints()) bytes += f.ByteSizeLong();
    return bytes;
  }

  static grpc::Status ToGrpc(const absl::Status& s) {
    return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                        std::string(s.message()));
  }

  // A refused message: the stream stays open, the worker is told why. An
  // over-long run id is echoed only up to its limit.
  static void Reject(const std::string& run_id, int32_t attempt,
                     const absl::Status& s, CoordinatorMessage* out) {
    auto* r = out->mutable_rejected();
    r->set_run_id(run_id.substr(0, kMaxRunIdBytes));
    r->set_attempt(attempt);
    r->set_code(static_cast<int32_t>(s.code()));
    r->set_message(std::string(s.message()));
  }

  grpc::Status HandleHello(const lockstep::v1::Hello& hello) {
    std::weak_ptr<SessionHandle> weak = handle_;
    auto closer = [weak](const std::string& reason) {
      std::shared_ptr<SessionHandle> handle = weak.lock();
      if (!handle) return;
      absl::MutexLock lock(&handle->mu);
      if (handle->reactor != nullptr) {
        handle->reactor->End(grpc::Status(grpc::StatusCode::ABORTED, reason),
                             reason);
      }
    };
    auto sender = [weak](CoordinatorMessage msg) {
      std::shared_ptr<SessionHandle> handle = weak.lock();
      if (!handle) return;
      absl::MutexLock lock(&handle->mu);
      if (handle->reactor != nullptr) handle->reactor->Send(std::move(msg));
    };
    if (absl::Status s = CheckWorkerName(principal_, hello.name()); !s.ok()) {
      return ToGrpc(s);
    }
    const std::string worker_id = WorkerIdForName(hello.name());
    absl::StatusOr<int64_t> session =
        registry_->Connect(hello, peer_, closer, sender);
    if (!session.ok()) return ToGrpc(session.status());
    {
      absl::MutexLock lock(&mu_);
      worker_id_ = worker_id;
      session_id_ = *session;
    }
    CoordinatorMessage out;
    auto* w = out.mutable_welcome();
    w->set_worker_id(worker_id);
    w->set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
    w->set_heartbeat_timeout_ms(options_.heartbeat_timeout_ms);
    w->set_coordinator_version(kCoordinatorVersion);
    Send(std::move(out));
    // Only now may assignments follow the welcome.
    jobs_->OnWorkerConnected(worker_id);
    return grpc::Status::OK;
  }

  void Send(CoordinatorMessage msg) {
    absl::MutexLock lock(&mu_);
    SendLocked(std::move(msg));
  }
  void SendLocked(CoordinatorMessage msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    out_.push_back(std::move(msg));
    if (!writing_) {
      writing_ = true;
      StartWrite(&out_.front());
    }
  }

  const Principal principal_;
  WorkerRegistry* const registry_;
  JobManager* const jobs_;
  const GatewayOptions options_;
  TaskPool* const pool_;
  const std::string peer_;
  const std::shared_ptr<SessionHandle> handle_;
  WorkerMessage in_;  // Only touched by the read chain.

  absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  int64_t session_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<CoordinatorMessage> out_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::string end_reason_ ABSL_GUARDED_BY(mu_);
  // Tasks on the store pool and batches waiting for their commit.
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  // OnDone ran (its deletion waits for the pending work).
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  // Batch answers: the next ticket to hand out, the next to send, and
  // those ready but waiting for an earlier one.
  int64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_reply_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, CoordinatorMessage> answers_ ABSL_GUARDED_BY(mu_);
  // No read is outstanding because the store's queue was full.
  bool reading_paused_ ABSL_GUARDED_BY(mu_) = false;
  // in_ holds a run result waiting for the batches before it.
  bool finished_waiting_ ABSL_GUARDED_BY(mu_) = false;
};

// A stream refused before its first read (no or a wrong credential).
class RefusedSession final
    : public grpc::ServerBidiReactor<WorkerMessage, CoordinatorMessage> {
 public:
  explicit RefusedSession(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

TaskPool::TaskPool(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this] { Loop(); });
  }
}

TaskPool::~TaskPool() { Stop(); }

void TaskPool::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void TaskPool::Run(std::function<void()> task) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      tasks_.push_back(std::move(task));
      return;
    }
  }
  task();
}

void TaskPool::Loop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &TaskPool::Ready));
      if (tasks_.empty()) return;  // stopping, nothing left
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

grpc::ServerBidiReactor<WorkerMessage, CoordinatorMessage>*
WorkerGatewayService::Connect(grpc::CallbackServerContext* context) {
  absl::StatusOr<Principal> who = auth_->AuthorizeWorker(*context);
  if (!who.ok()) {
    return new RefusedSession(
        grpc::Status(static_cast<grpc::StatusCode>(who.status().code()),
                     std::string(who.status().message())));
  }
  return new Session(context, registry_, jobs_, options_, store_pool_.get(),
                     std::move(*who));
}

}  // namespace lockstep::server
