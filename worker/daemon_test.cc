// WorkerDaemon against a scripted coordinator: an in-process WorkerGateway
// on 127.0.0.1 (port 0) that keeps the real coordinator's ingest rules (an
// old sequence is a duplicate and acknowledged again, a gap is OUT_OF_RANGE,
// the result is accepted once every batch is stored) and refuses chosen
// batches or breaks the stream on cue. The run process is this test binary
// started with --fake_run_child: it emits one batch per step.
#include "worker/daemon.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "lockstep/v1/worker_gateway.grpc.pb.h"
#include "worker/frames.h"

namespace lockstep::worker {
namespace {

namespace v1 = ::lockstep::v1;
using ::testing::ElementsAreArray;

constexpr char kFakeChildFlag[] = "--fake_run_child";

// The run process: reads the assignment, writes `steps` batches (one per
// step, `delay_ms` apart) and a successful result.
int FakeRunChild(int delay_ms) {
  v1::RunAssignment a;
  if (!ReadFrame(0, &a).ok()) return 2;
  for (int step = 0; step < a.config().steps(); ++step) {
    if (delay_ms > 0) usleep(static_cast<useconds_t>(delay_ms) * 1000);
    v1::WorkerMessage m;
    auto* b = m.mutable_batch();
    b->set_step(step);
    b->set_step_complete(true);
    b->set_step_digest(absl::StrCat("digest-", step));
    if (!WriteFrame(1, m).ok()) return 3;
  }
  v1::WorkerMessage f;
  f.mutable_finished()->set_run_id(a.run_id());
  f.mutable_finished()->set_attempt(a.attempt());
  f.mutable_finished()->set_success(true);
  f.mutable_finished()->set_run_digest("run-digest");
  return WriteFrame(1, f).ok() ? 0 : 4;
}

// What the coordinator saw, in order.
struct Event {
  int session = 0;
  enum Kind { kBatch, kFinished } kind = kBatch;
  int64_t sequence = -1;  // batches
  // The answer: "ack", "duplicate", "gap", "refused" (scripted), "recorded",
  // "early" (result before its batches), "" (stream broken).
  std::string answer;
};

class ScriptedCoordinator final : public v1::WorkerGateway::Service {
 public:
  explicit ScriptedCoordinator(int steps) : steps_(steps) {}

  // The first `times` arrivals of batch `sequence` (when it is the next one
  // expected) are refused with `code`.
  void RefuseBatch(int64_t sequence, absl::StatusCode code, int times) {
    absl::MutexLock lock(&mu_);
    refusals_[sequence] = {code, times};
  }
  // The stream breaks (UNAVAILABLE) when batch `sequence` first arrives,
  // before it is stored or answered.
  void BreakStreamAt(int64_t sequence) {
    absl::MutexLock lock(&mu_);
    break_at_ = sequence;
  }

  bool WaitForResult(absl::Duration limit) {
    absl::MutexLock lock(&mu_);
    auto done = [this]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return recorded_; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), limit);
  }
  std::vector<int64_t> stored() const {
    absl::MutexLock lock(&mu_);
    return stored_;
  }
  std::vector<Event> events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  int sessions() const {
    absl::MutexLock lock(&mu_);
    return sessions_;
  }

  grpc::Status Connect(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>*
          stream) override {
    v1::WorkerMessage in;
    if (!stream->Read(&in) || !in.has_hello()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "hello first");
    }
    int session;
    bool assign;
    {
      absl::MutexLock lock(&mu_);
      session = ++sessions_;
      assign = !assigned_;
      assigned_ = true;
    }
    v1::CoordinatorMessage out;
    out.mutable_welcome()->set_worker_id("w-test");
    out.mutable_welcome()->set_heartbeat_interval_ms(200);
    out.mutable_welcome()->set_heartbeat_timeout_ms(10000);
    if (!stream->Write(out)) return grpc::Status::CANCELLED;
    if (assign) {
      out.Clear();
      auto* a = out.mutable_assignment();
      a->set_run_id("r-1");
      a->set_attempt(1);
      a->set_job_id("j-1");
      a->mutable_config()->set_steps(steps_);
      a->set_lease_ms(60000);
      if (!stream->Write(out)) return grpc::Status::CANCELLED;
    }
    while (stream->Read(&in)) {
      out.Clear();
      if (in.has_batch()) {
        const v1::FingerprintBatch& b = in.batch();
        absl::MutexLock lock(&mu_);
        Event e{session, Event::kBatch, b.sequence(), ""};
        if (b.sequence() == break_at_) {
          break_at_ = -1;
          events_.push_back(e);
          return grpc::Status(grpc::StatusCode::UNAVAILABLE, "scripted break");
        }
        auto refusal = refusals_.find(b.sequence());
        if (b.sequence() < expected_) {
          e.answer = "duplicate";
          Ack(b, expected_ - 1, &out);
        } else if (b.sequence() > expected_) {
          e.answer = "gap";
          Reject(b.run_id(), b.attempt(), absl::StatusCode::kOutOfRange,
                 absl::StrCat("batch ", b.sequence(), ": expected ", expected_),
                 &out);
        } else if (refusal != refusals_.end() && refusal->second.second > 0) {
          --refusal->second.second;
          e.answer = "refused";
          Reject(b.run_id(), b.attempt(), refusal->second.first,
                 "scripted refusal", &out);
        } else {
          e.answer = "ack";
          stored_.push_back(b.sequence());
          ++expected_;
          Ack(b, b.sequence(), &out);
        }
        events_.push_back(e);
      } else if (in.has_finished()) {
        const v1::RunFinished& f = in.finished();
        absl::MutexLock lock(&mu_);
        Event e{session, Event::kFinished, -1, ""};
        if (f.batches() == expected_) {
          e.answer = "recorded";
          recorded_ = true;
          out.mutable_ack()->set_run_id(f.run_id());
          out.mutable_ack()->set_attempt(f.attempt());
          out.mutable_ack()->set_result_recorded(true);
        } else {
          e.answer = "early";
          Reject(f.run_id(), f.attempt(), absl::StatusCode::kOutOfRange,
                 absl::StrCat("result after ", expected_, " of ", f.batches(),
                              " batches"),
                 &out);
        }
        events_.push_back(e);
      } else {
        continue;  // heartbeats and progress are not answered
      }
      if (!stream->Write(out)) break;
    }
    return grpc::Status::OK;
  }

 private:
  static void Ack(const v1::FingerprintBatch& b, int64_t upto,
                  v1::CoordinatorMessage* out) {
    out->mutable_ack()->set_run_id(b.run_id());
    out->mutable_ack()->set_attempt(b.attempt());
    out->mutable_ack()->set_sequence(upto);
  }
  static void Reject(const std::string& run_id, int32_t attempt,
                     absl::StatusCode code, const std::string& message,
                     v1::CoordinatorMessage* out) {
    auto* r = out->mutable_rejected();
    r->set_run_id(run_id);
    r->set_attempt(attempt);
    r->set_code(static_cast<int32_t>(code));
    r->set_message(message);
  }

  const int steps_;
  mutable absl::Mutex mu_;
  int sessions_ ABSL_GUARDED_BY(mu_) = 0;
  bool assigned_ ABSL_GUARDED_BY(mu_) = false;
  int64_t expected_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> stored_ ABSL_GUARDED_BY(mu_);
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
  bool recorded_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int64_t, std::pair<absl::StatusCode, int>> refusals_
      ABSL_GUARDED_BY(mu_);
  int64_t break_at_ ABSL_GUARDED_BY(mu_) = -1;
};

std::string SelfPath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : std::string();
}

// One coordinator, one daemon whose runs are this binary as a fake child.
class DaemonResendTest : public ::testing::Test {
 protected:
  void Start(ScriptedCoordinator* coordinator, int child_delay_ms) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(coordinator);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    DaemonOptions options;
    options.coordinator = absl::StrCat("127.0.0.1:", port);
    options.name = "resend-test";
    options.initial_backoff_ms = 50;
    options.max_backoff_ms = 200;
    options.resend_initial_backoff_ms = 50;
    options.resend_max_backoff_ms = 400;
    options.run_argv = {SelfPath(), kFakeChildFlag,
                        absl::StrCat(child_delay_ms)};
    v1::HardwareProfile profile;
    profile.set_hostname("test");
    daemon_ = std::make_unique<WorkerDaemon>(options, profile);
    daemon_thread_ = std::thread([this] { daemon_status_ = daemon_->Run(); });
  }

  void TearDown() override {
    if (daemon_ != nullptr) {
      daemon_->Stop();
      if (daemon_thread_.joinable()) daemon_thread_.join();
      EXPECT_TRUE(daemon_status_.ok()) << daemon_status_;
      daemon_.reset();
    }
    if (server_ != nullptr) {
      server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    }
  }

  static std::vector<int64_t> Iota(int n) {
    std::vector<int64_t> out(n);
    for (int i = 0; i < n; ++i) out[i] = i;
    return out;
  }

  static std::string Describe(const std::vector<Event>& events) {
    std::string out;
    for (const Event& e : events) {
      absl::StrAppend(&out, " [s", e.session, " ",
                      e.kind == Event::kBatch
                          ? absl::StrCat("batch ", e.sequence)
                          : std::string("result"),
                      " -> ", e.answer, "]");
    }
    return out;
  }

  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<WorkerDaemon> daemon_;
  std::thread daemon_thread_;
  absl::Status daemon_status_;
};

// One batch refused with OUT_OF_RANGE, the later ones then refused as gaps:
// the daemon resends from the refused batch at once, in order, and the
// coordinator ends up with every batch and the result, on one session.
TEST_F(DaemonResendTest, RefusedBatchIsResentInOrderAndNothingIsLost) {
  constexpr int kSteps = 12;
  ScriptedCoordinator coordinator(kSteps);
  coordinator.RefuseBatch(3, absl::StatusCode::kOutOfRange, 1);
  Start(&coordinator, 0);
  ASSERT_TRUE(coordinator.WaitForResult(absl::Seconds(20)))
      << Describe(coordinator.events());
  EXPECT_THAT(coordinator.stored(), ElementsAreArray(Iota(kSteps)));
  EXPECT_EQ(coordinator.sessions(), 1) << "resent without a reconnect";
  // The refused batch came again before anything after it was stored.
  const std::vector<Event> events = coordinator.events();
  int refused = 0;
  for (const Event& e : events) refused += e.answer == "refused";
  EXPECT_EQ(refused, 1) << Describe(events);
}

// UNAVAILABLE and RESOURCE_EXHAUSTED (twice) are retried too, with backoff;
// while a resend waits, no newer batch of the run is written: after each
// refusal the next batch the coordinator sees is the refused one again.
TEST_F(DaemonResendTest, RetryableRefusalsBackOffAndHoldNewerBatches) {
  constexpr int kSteps = 8;
  ScriptedCoordinator coordinator(kSteps);
  coordinator.RefuseBatch(2, absl::StatusCode::kUnavailable, 1);
  coordinator.RefuseBatch(5, absl::StatusCode::kResourceExhausted, 2);
  Start(&coordinator, 100);
  ASSERT_TRUE(coordinator.WaitForResult(absl::Seconds(30)))
      << Describe(coordinator.events());
  EXPECT_THAT(coordinator.stored(), ElementsAreArray(Iota(kSteps)));
  EXPECT_EQ(coordinator.sessions(), 1);
  const std::vector<Event> events = coordinator.events();
  int refusals = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].answer != "refused") continue;
    ++refusals;
    ASSERT_LT(i + 1, events.size()) << Describe(events);
    EXPECT_EQ(events[i + 1].kind, Event::kBatch) << Describe(events);
    EXPECT_EQ(events[i + 1].sequence, events[i].sequence) << Describe(events);
  }
  EXPECT_EQ(refusals, 3);
  for (const Event& e : events) {
    EXPECT_NE(e.answer, "gap") << Describe(events);
  }
}

// The stream breaks before batch 4 is stored: after the reconnect the
// unacknowledged batches go first and in order, so no batch arrives as a
// gap and nothing is lost.
TEST_F(DaemonResendTest, AfterReconnectResendsGoFirst) {
  constexpr int kSteps = 10;
  ScriptedCoordinator coordinator(kSteps);
  coordinator.BreakStreamAt(4);
  Start(&coordinator, 30);
  ASSERT_TRUE(coordinator.WaitForResult(absl::Seconds(30)))
      << Describe(coordinator.events());
  EXPECT_THAT(coordinator.stored(), ElementsAreArray(Iota(kSteps)));
  EXPECT_GE(coordinator.sessions(), 2);
  const std::vector<Event> events = coordinator.events();
  int64_t first_of_second = -1;
  for (const Event& e : events) {
    EXPECT_NE(e.answer, "gap") << Describe(events);
    EXPECT_NE(e.answer, "early") << Describe(events);
    if (e.session == 2 && e.kind == Event::kBatch && first_of_second < 0) {
      first_of_second = e.sequence;
    }
  }
  EXPECT_GE(first_of_second, 0) << Describe(events);
  EXPECT_LE(first_of_second, 4) << Describe(events);
}

}  // namespace
}  // namespace lockstep::worker

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == lockstep::worker::kFakeChildFlag) {
    int delay_ms = 0;
    if (argc >= 3 && !absl::SimpleAtoi(argv[2], &delay_ms)) delay_ms = 0;
    return lockstep::worker::FakeRunChild(delay_ms);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
