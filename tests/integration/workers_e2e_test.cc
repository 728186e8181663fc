// End to end: the real lockstep-coordinator, two lockstep-worker daemons and
// the lockstep CLI, as separate processes on loopback.
//
// Covers: both workers appear with the right hardware class (raw gRPC stub
// and CLI, table and JSON); a SIGKILLed worker is shown as gone within the
// heartbeat timeout; a frozen worker (SIGSTOP) is timed out by the
// coordinator and reconnects once thawed; the CLI fails clearly while the
// coordinator is down; after a coordinator restart on the same database the
// surviving worker reconnects by itself and the dead one is listed as gone.
// And, with the worker binary alone: workers forced onto the scalar, AVX2
// and AVX-512 kernel paths report three hardware classes but one device.
#include <signal.h>
#include <sys/wait.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/device_identity.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "lockstep/v1/lockstep_service.grpc.pb.h"
#include "tests/testing/subprocess.h"

namespace lockstep {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::ReadFileOrEmpty;
using ::lockstep::testing::RunCommand;
using ::lockstep::testing::RunfilePath;
using ::lockstep::testing::Subprocess;
using ::lockstep::testing::TempDir;
using ::lockstep::v1::ListWorkersResponse;
using ::lockstep::v1::Worker;
using ::testing::HasSubstr;

constexpr int64_t kHeartbeatIntervalMs = 200;
constexpr int64_t kHeartbeatTimeoutMs = 2000;

// Polls `done` every 20 ms until it holds or `limit` passes.
bool PollUntil(absl::Duration limit, const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + limit;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return done();
}

class WorkersE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    db_ = dir_ + "/e2e.db";
    coordinator_bin_ = RunfilePath("server/lockstep-coordinator");
    worker_bin_ = RunfilePath("worker/lockstep-worker");
    cli_bin_ = RunfilePath("client/lockstep");
  }

  void TearDown() override {
    if (HasFailure()) {
      for (const char* name :
           {"coordinator.log", "worker-a.log", "worker-b.log"}) {
        std::printf("----- %s -----\n%s\n", name,
                    ReadFileOrEmpty(dir_ + "/" + name).c_str());
      }
    }
  }

  // Starts the coordinator on `port` (0: any) and returns the bound port.
  int StartCoordinator(int port) {
    const std::string port_file = dir_ + "/port";
    std::remove(port_file.c_str());
    auto p = Subprocess::Start(
        {coordinator_bin_, absl::StrCat("--listen=127.0.0.1:", port),
         "--allow_plaintext", "--db=" + db_, "--port_file=" + port_file,
         absl::StrCat("--heartbeat_interval_ms=", kHeartbeatIntervalMs),
         absl::StrCat("--heartbeat_timeout_ms=", kHeartbeatTimeoutMs)},
        dir_ + "/coordinator.log");
    EXPECT_THAT(p, IsOk());
    coordinator_ = std::make_unique<Subprocess>(std::move(*p));
    int bound = 0;
    EXPECT_TRUE(PollUntil(absl::Seconds(30), [&] {
      std::string text = ReadFileOrEmpty(port_file);
      return absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &bound) &&
             bound > 0;
    })) << "coordinator did not report its port";
    return bound;
  }

  std::unique_ptr<Subprocess> StartWorker(const std::string& name) {
    auto p = Subprocess::Start(
        {worker_bin_, "daemon", absl::StrCat("--coordinator=", address_),
         "--name=" + name, "--labels=suite=e2e", "--initial_backoff_ms=100",
         "--max_backoff_ms=500"},
        dir_ + "/" + name + ".log");
    EXPECT_THAT(p, IsOk());
    return std::make_unique<Subprocess>(std::move(*p));
  }

  ListWorkersResponse List(bool include_gone) {
    auto channel =
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
    auto stub = v1::Lockstep::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(2));
    v1::ListWorkersRequest req;
    req.set_include_gone(include_gone);
    ListWorkersResponse resp;
    grpc::Status s = stub->ListWorkers(&ctx, req, &resp);
    if (!s.ok()) return ListWorkersResponse();
    return resp;
  }

  const Worker* Find(const ListWorkersResponse& r, const std::string& name) {
    for (const Worker& w : r.workers()) {
      if (w.name() == name) return &w;
    }
    return nullptr;
  }

  bool IsConnected(const std::string& name) {
    ListWorkersResponse r = List(true);
    const Worker* w = Find(r, name);
    return w != nullptr && w->state() == v1::WORKER_CONNECTED;
  }

  bool IsGone(const std::string& name) {
    ListWorkersResponse r = List(true);
    const Worker* w = Find(r, name);
    return w != nullptr && w->state() == v1::WORKER_GONE;
  }

  std::string dir_, db_, coordinator_bin_, worker_bin_, cli_bin_, address_;
  std::unique_ptr<Subprocess> coordinator_;
};

TEST_F(WorkersE2E, ConnectTimeoutKillRestart) {
  // The class this machine's probe reports, independently of the daemon.
  auto probe = RunCommand({worker_bin_, "probe", "--json"}, absl::Seconds(30));
  ASSERT_THAT(probe, IsOk());
  ASSERT_EQ(probe->exit_code, 0) << probe->err;
  v1::HardwareProfile expected;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(probe->out, &expected).ok());
  ASSERT_FALSE(expected.hardware_class_digest().empty());
  if (expected.gpus_size() == 0) {
    EXPECT_FALSE(expected.gpu_error().empty());
  }

  const int port = StartCoordinator(0);
  ASSERT_GT(port, 0);
  address_ = absl::StrCat("127.0.0.1:", port);
  auto a = StartWorker("worker-a");
  auto b = StartWorker("worker-b");

  // 1. Both appear, with the probe's hardware class, via a raw stub.
  ASSERT_TRUE(PollUntil(absl::Seconds(30), [&] {
    return IsConnected("worker-a") && IsConnected("worker-b");
  })) << "workers did not connect";
  {
    ListWorkersResponse r = List(false);
    ASSERT_EQ(r.workers_size(), 2);
    for (const Worker& w : r.workers()) {
      EXPECT_EQ(w.profile().hardware_class(), expected.hardware_class());
      EXPECT_EQ(w.profile().hardware_class_digest(),
                expected.hardware_class_digest());
      EXPECT_EQ(w.labels().at("suite"), "e2e");
      // Two daemons on one host and CPU are one device.
      EXPECT_EQ(w.profile().device().device_id(),
                expected.device().device_id());
      EXPECT_GT(w.last_heartbeat_unix_ms(), 0);
      // The daemon's start-up selftest is reported, and it passed.
      ASSERT_TRUE(w.profile().has_selftest()) << w.name();
      EXPECT_TRUE(w.profile().selftest().passed())
          << w.profile().selftest().summary();
      EXPECT_GT(w.profile().selftest().rows(), 26);
      EXPECT_THAT(w.profile().selftest().summary(), HasSubstr("PASS"));
      EXPECT_EQ(w.admin_state(), v1::ACTIVE);
    }
  }

  // 2. ... and through the CLI, JSON and table.
  {
    auto cli =
        RunCommand({cli_bin_, "--coordinator=" + address_, "workers", "--json"},
                   absl::Seconds(30));
    ASSERT_THAT(cli, IsOk());
    ASSERT_EQ(cli->exit_code, 0) << cli->err;
    ListWorkersResponse parsed;
    ASSERT_TRUE(
        google::protobuf::util::JsonStringToMessage(cli->out, &parsed).ok())
        << cli->out;
    ASSERT_EQ(parsed.workers_size(), 2);
    EXPECT_EQ(parsed.workers(0).name(), "worker-a");
    EXPECT_EQ(parsed.workers(1).name(), "worker-b");
    EXPECT_EQ(parsed.workers(0).profile().hardware_class_digest(),
              expected.hardware_class_digest());

    auto table = RunCommand({cli_bin_, "--coordinator=" + address_, "workers"},
                            absl::Seconds(30));
    ASSERT_THAT(table, IsOk());
    ASSERT_EQ(table->exit_code, 0);
    EXPECT_THAT(table->out, HasSubstr("worker-a"));
    EXPECT_THAT(table->out, HasSubstr("SELFTEST"));
    EXPECT_THAT(table->out, HasSubstr("pass ("));
    EXPECT_THAT(table->out, HasSubstr("worker-b"));
    EXPECT_THAT(table->out, HasSubstr(expected.hardware_class()));
    EXPECT_THAT(table->out,
                HasSubstr(expected.hardware_class_digest().substr(0, 12)));
  }

  // 3. SIGKILL worker-a: shown as gone within the heartbeat timeout.
  const absl::Time killed = absl::Now();
  a->Signal(SIGKILL);
  a->Wait(absl::Seconds(10));
  ASSERT_TRUE(PollUntil(absl::Seconds(30), [&] { return IsGone("worker-a"); }));
  EXPECT_LE(absl::ToInt64Milliseconds(absl::Now() - killed),
            kHeartbeatTimeoutMs)
      << "a killed worker must be gone within the heartbeat timeout";
  EXPECT_TRUE(IsConnected("worker-b"));

  // 4. Freeze worker-b: no heartbeats, connection open. The coordinator
  //    times it out; thawed, it reconnects by itself.
  b->Signal(SIGSTOP);
  const absl::Time frozen = absl::Now();
  ASSERT_TRUE(PollUntil(absl::Seconds(30), [&] { return IsGone("worker-b"); }));
  EXPECT_GE(absl::ToInt64Milliseconds(absl::Now() - frozen),
            kHeartbeatTimeoutMs - 2 * kHeartbeatIntervalMs);
  {
    ListWorkersResponse r = List(true);
    EXPECT_THAT(Find(r, "worker-b")->disconnect_reason(),
                HasSubstr("heartbeat timeout"));
  }
  b->Signal(SIGCONT);
  ASSERT_TRUE(PollUntil(absl::Seconds(30), [&] {
    return IsConnected("worker-b");
  })) << "thawed worker did not reconnect";
  {
    ListWorkersResponse r = List(true);
    EXPECT_EQ(Find(r, "worker-b")->sessions(), 2);
  }

  // 5. Coordinator down: the CLI says so and exits 3.
  coordinator_->Signal(SIGKILL);
  coordinator_->Wait(absl::Seconds(10));
  {
    auto cli = RunCommand(
        {cli_bin_, "--coordinator=" + address_, "--timeout_ms=1000", "workers"},
        absl::Seconds(30));
    ASSERT_THAT(cli, IsOk());
    EXPECT_EQ(cli->exit_code, 3);
    EXPECT_THAT(cli->err, HasSubstr("UNAVAILABLE"));
    EXPECT_THAT(cli->err,
                HasSubstr("cannot reach the coordinator at " + address_));
  }

  // 6. Restart on the same port and database: worker-b comes back by itself;
  //    worker-a is remembered, as gone.
  ASSERT_EQ(StartCoordinator(port), port);
  ASSERT_TRUE(PollUntil(absl::Seconds(30), [&] {
    return IsConnected("worker-b");
  })) << "worker-b did not reconnect after the coordinator restart";
  {
    ListWorkersResponse r = List(true);
    ASSERT_EQ(r.workers_size(), 2);
    const Worker* wa = Find(r, "worker-a");
    ASSERT_NE(wa, nullptr);
    EXPECT_EQ(wa->state(), v1::WORKER_GONE);
    EXPECT_EQ(wa->profile().hardware_class_digest(),
              expected.hardware_class_digest());
  }

  // 7. Graceful stop: SIGTERM ends both with exit code 0.
  b->Signal(SIGTERM);
  auto b_status = b->Wait(absl::Seconds(20));
  ASSERT_TRUE(b_status.has_value());
  EXPECT_TRUE(WIFEXITED(*b_status) && WEXITSTATUS(*b_status) == 0);
  coordinator_->Signal(SIGTERM);
  auto c_status = coordinator_->Wait(absl::Seconds(20));
  ASSERT_TRUE(c_status.has_value());
  EXPECT_TRUE(WIFEXITED(*c_status) && WEXITSTATUS(*c_status) == 0);
}

TEST_F(WorkersE2E, ForcedKernelPathsAreClassesOfOneDevice) {
  std::vector<v1::HardwareProfile> profiles;
  for (const char* isa : {"scalar", "avx2", "avx512"}) {
    auto probe =
        RunCommand({"/usr/bin/env", absl::StrCat("LOCKSTEP_CPU_ISA=", isa),
                    worker_bin_, "probe", "--json"},
                   absl::Seconds(30));
    ASSERT_THAT(probe, IsOk());
    ASSERT_EQ(probe->exit_code, 0) << probe->err;
    v1::HardwareProfile p;
    ASSERT_TRUE(
        google::protobuf::util::JsonStringToMessage(probe->out, &p).ok())
        << probe->out;
    EXPECT_THAT(p.hardware_class(),
                ::testing::StartsWith("lockstep-class/v2|"));
    profiles.push_back(p);
  }
  // scalar always runs; avx2 / avx512 where the CPU has them (a request the
  // CPU lacks is lowered to the best path it has).
  const v1::HardwareProfile& scalar = profiles[0];
  EXPECT_EQ(scalar.cpu().kernel_path(), "scalar");
  for (size_t i = 0; i < profiles.size(); ++i) {
    const v1::HardwareProfile& p = profiles[i];
    EXPECT_THAT(
        p.hardware_class(),
        HasSubstr(absl::StrCat("|kernel_path=", p.cpu().kernel_path(), "|")));
    // One machine, one CPU: one device whatever the kernel path.
    EXPECT_EQ(p.device().device_id(), scalar.device().device_id());
    EXPECT_EQ(p.device().device_id(),
              DeviceIdOf(p.device().machine_id(), p.device().device()));
    if (p.gpus_size() == 0) {
      EXPECT_THAT(p.device().device(), ::testing::StartsWith("cpu:packages="));
    }
    for (size_t j = 0; j < i; ++j) {
      if (profiles[j].cpu().kernel_path() == p.cpu().kernel_path()) continue;
      EXPECT_NE(profiles[j].hardware_class_digest(), p.hardware_class_digest())
          << profiles[j].cpu().kernel_path() << " vs " << p.cpu().kernel_path();
    }
  }
  const bool has_avx512 =
      absl::StrContains(absl::StrJoin(scalar.cpu().features(), ","), "avx512f");
  if (has_avx512) {
    EXPECT_EQ(profiles[1].cpu().kernel_path(), "avx2");
    EXPECT_EQ(profiles[2].cpu().kernel_path(), "avx512");
  }
}

}  // namespace
}  // namespace lockstep
