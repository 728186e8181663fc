// End to end: input limits and hello checks of the real lockstep-coordinator
// binary (loopback, port 0), driven through a raw WorkerGateway stub that
// sends what no honest worker would: forged classes and device ids, oversized
// hellos and batches, unknown fields, a second daemon with a live name.
#include <signal.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/digest.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "lockstep/v1/worker_gateway.grpc.pb.h"
#include "tests/testing/subprocess.h"

namespace lockstep {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::ReadFileOrEmpty;
using ::lockstep::testing::RunfilePath;
using ::lockstep::testing::Subprocess;
using ::lockstep::testing::TempDir;
using ::lockstep::v1::CoordinatorMessage;
using ::lockstep::v1::Hello;
using ::lockstep::v1::WorkerMessage;
using ::testing::HasSubstr;

using Stream = grpc::ClientReaderWriter<WorkerMessage, CoordinatorMessage>;

bool PollUntil(absl::Duration limit, const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + limit;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return done();
}

// A hello as an honest CPU worker sends it: class derived from the profile,
// device id derived from machine id and device.
Hello HonestHello(const std::string& name) {
  Hello h;
  h.set_name(name);
  h.set_slots(1);
  h.set_version("limits-e2e");
  v1::HardwareProfile* p = h.mutable_profile();
  p->mutable_cpu()->set_vendor("GenuineIntel");
  p->mutable_cpu()->set_model("Test CPU");
  p->mutable_cpu()->set_arch("x86_64");
  p->mutable_cpu()->set_kernel_path("avx2");
  const std::string cls =
      "lockstep-class/v1|cpu=GenuineIntel/Test CPU/x86_64|isa=avx,avx2|"
      "kernel_path=avx2|compiler=gcc 12.2.0|kernels=0.1.0|canonical=1";
  p->set_hardware_class(cls);
  p->set_hardware_class_digest(Digest128Hex(cls));
  v1::DeviceIdentity* d = p->mutable_device();
  d->set_machine_id("limits-e2e-machine");
  d->set_device("cpu:packages=0");
  d->set_device_id(Digest128Hex("limits-e2e-machine|cpu:packages=0"));
  return h;
}

class LimitsE2E : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = TempDir(); }

  // Starts the coordinator with `extra` flags and connects the stub.
  void StartCoordinator(const std::vector<std::string>& extra = {}) {
    const std::string port_file = dir_ + "/limits.port";
    const std::string db = dir_ + "/limits.db";
    std::remove(port_file.c_str());
    std::remove(db.c_str());
    std::vector<std::string> argv = {RunfilePath("server/lockstep-coordinator"),
                                     "--listen=127.0.0.1:0",
                                     "--allow_plaintext",
                                     "--db=" + db,
                                     "--port_file=" + port_file,
                                     "--synchronous=NORMAL"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = Subprocess::Start(argv, dir_ + "/limits-coordinator.log");
    ASSERT_THAT(p, IsOk());
    coordinator_ = std::make_unique<Subprocess>(std::move(*p));
    int port = 0;
    ASSERT_TRUE(PollUntil(absl::Seconds(30), [&] {
      return absl::SimpleAtoi(
                 absl::StripAsciiWhitespace(ReadFileOrEmpty(port_file)),
                 &port) &&
             port > 0;
    })) << "coordinator did not report its port";
    // The worker side may send more than the coordinator accepts: the
    // refusal must come from the coordinator.
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(64 << 20);
    stub_ = v1::WorkerGateway::NewStub(
        grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                  grpc::InsecureChannelCredentials(), args));
  }

  void TearDown() override {
    if (coordinator_ != nullptr && coordinator_->running()) {
      coordinator_->Signal(SIGTERM);
      coordinator_->Wait(absl::Seconds(10));
    }
    if (HasFailure()) {
      std::printf("----- coordinator log -----\n%s\n",
                  ReadFileOrEmpty(dir_ + "/limits-coordinator.log").c_str());
    }
  }

  struct Session {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<Stream> stream;
  };

  Session Open() {
    Session s;
    s.ctx = std::make_unique<grpc::ClientContext>();
    s.ctx->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(20));
    s.stream = stub_->Connect(s.ctx.get());
    return s;
  }

  // Sends `msg` as the first message of a new stream; returns the status
  // the coordinator ends the stream with (OK with `welcome` set when it
  // answered with a welcome instead).
  grpc::Status SendFirst(const WorkerMessage& msg,
                         CoordinatorMessage* welcome = nullptr) {
    Session s = Open();
    s.stream->Write(msg);
    CoordinatorMessage reply;
    if (s.stream->Read(&reply)) {
      if (welcome != nullptr) *welcome = reply;
      s.ctx->TryCancel();
      s.stream->Finish();
      return grpc::Status::OK;
    }
    return s.stream->Finish();
  }

  grpc::Status SendHello(const Hello& h) {
    WorkerMessage m;
    *m.mutable_hello() = h;
    return SendFirst(m);
  }

  std::string dir_;
  std::unique_ptr<Subprocess> coordinator_;
  std::unique_ptr<v1::WorkerGateway::Stub> stub_;
};

TEST_F(LimitsE2E, ForgedAndOversizedHellosAreRefusedNamingTheLimit) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  // Messages above the coordinator's default 16 MiB limit.
  Hello h = HonestHello("huge");
  (*h.mutable_labels())["pad"] = std::string(17 << 20, 'x');
  grpc::Status s = SendHello(h);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("16777216"));

  h = HonestHello("forged-class");
  h.mutable_profile()->mutable_cpu()->set_kernel_path("scalar");
  s = SendHello(h);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("hello.profile.hardware_class: does not match the "
                        "profile's cpu.kernel_path \"scalar\""));

  h = HonestHello("forged-digest");
  h.mutable_profile()->set_hardware_class_digest(std::string(32, 'A'));
  s = SendHello(h);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("hardware_class_digest"));

  h = HonestHello("forged-device");
  h.mutable_profile()->mutable_device()->set_device("cpu:packages=1");
  s = SendHello(h);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("hello.profile.device.device_id"));

  h = HonestHello("labels");
  for (int i = 0; i < 65; ++i) (*h.mutable_labels())[absl::StrCat(i)] = "v";
  s = SendHello(h);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("hello.labels: 65 labels exceed the limit of 64"));

  h = HonestHello("long-class");
  const std::string cls = absl::StrCat(h.profile().hardware_class(),
                                       "|pad=", std::string(5000, 'p'));
  h.mutable_profile()->set_hardware_class(cls);
  h.mutable_profile()->set_hardware_class_digest(Digest128Hex(cls));
  s = SendHello(h);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("is outside 1..4096"));

  h = HonestHello("unknown-field");
  h.mutable_profile()
      ->GetReflection()
      ->MutableUnknownFields(h.mutable_profile())
      ->AddLengthDelimited(77, "from the future");
  s = SendHello(h);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("hello.profile: unknown field 77"));

  // The honest hello is welcomed.
  WorkerMessage m;
  *m.mutable_hello() = HonestHello("honest");
  CoordinatorMessage welcome;
  ASSERT_TRUE(SendFirst(m, &welcome).ok());
  EXPECT_TRUE(welcome.has_welcome());
}

TEST_F(LimitsE2E, LiveNameAndBadSessionMessages) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  Session first = Open();
  WorkerMessage hello;
  *hello.mutable_hello() = HonestHello("alpha");
  ASSERT_TRUE(first.stream->Write(hello));
  CoordinatorMessage reply;
  ASSERT_TRUE(first.stream->Read(&reply));
  ASSERT_TRUE(reply.has_welcome());

  // A second daemon with the live name, even with a valid profile.
  grpc::Status s = SendHello(HonestHello("alpha"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(s.error_message(), HasSubstr("names must be unique"));

  // Batches over their limits are rejected; the stream stays open.
  WorkerMessage batch;
  v1::FingerprintBatch* b = batch.mutable_batch();
  b->set_run_id("r-none");
  b->set_attempt(1);
  b->set_step_complete(true);
  b->set_step_digest(std::string(4096, 'f'));
  ASSERT_TRUE(first.stream->Write(batch));
  ASSERT_TRUE(first.stream->Read(&reply));
  ASSERT_TRUE(reply.has_rejected()) << reply.DebugString();
  EXPECT_EQ(reply.rejected().code(),
            static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(reply.rejected().message(),
              HasSubstr("batch.step_digest: must be 32 lowercase hex digits"));

  b->set_step_digest(Digest128Hex("step"));
  for (int i = 0; i < 65537; ++i) b->add_fingerprints()->set_index(i);
  ASSERT_TRUE(first.stream->Write(batch));
  ASSERT_TRUE(first.stream->Read(&reply));
  ASSERT_TRUE(reply.has_rejected()) << reply.DebugString();
  EXPECT_THAT(reply.rejected().message(),
              HasSubstr("batch.fingerprints: 65537 fingerprints exceed the "
                        "limit of 65536 per batch"));

  // A heartbeat carrying a field this coordinator does not know ends the
  // session, naming the field.
  WorkerMessage hb;
  hb.mutable_heartbeat()->set_sent_unix_ms(1);
  hb.mutable_heartbeat()
      ->GetReflection()
      ->MutableUnknownFields(hb.mutable_heartbeat())
      ->AddVarint(9, 1);
  ASSERT_TRUE(first.stream->Write(hb));
  while (first.stream->Read(&reply)) {
  }
  s = first.stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("heartbeat: unknown field 9"));

  // The name is free again once that session has ended.
  EXPECT_TRUE(PollUntil(absl::Seconds(5),
                        [&] { return SendHello(HonestHello("alpha")).ok(); }));
}

TEST_F(LimitsE2E, MessageLimitIsConfigurable) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator({"--max_message_bytes=1048576"}));
  Hello h = HonestHello("big");
  (*h.mutable_labels())["pad"] = std::string(2 << 20, 'x');
  grpc::Status s = SendHello(h);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("1048576"));
  // Below the limit, the same worker is welcomed.
  WorkerMessage m;
  *m.mutable_hello() = HonestHello("big");
  CoordinatorMessage welcome;
  ASSERT_TRUE(SendFirst(m, &welcome).ok());
  EXPECT_TRUE(welcome.has_welcome());
}

TEST_F(LimitsE2E, OutOfRangeMessageLimitIsAUsageError) {
  auto r = lockstep::testing::RunCommand(
      {RunfilePath("server/lockstep-coordinator"), "--listen=127.0.0.1:0",
       "--allow_plaintext", "--db=" + dir_ + "/unused.db",
       "--max_message_bytes=0"},
      absl::Seconds(30));
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("--max_message_bytes: 0 is outside "
                                "1024..268435456"));
}

}  // namespace
}  // namespace lockstep
