// Service tests: the real coordinator, in process, on a loopback port.
#include "server/coordinator.h"

#include <memory>
#include <string>
#include <vector>

#include "common/digest.h"
#include "common/grpc_limits.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "lockstep/v1/lockstep_service.grpc.pb.h"
#include "lockstep/v1/worker_gateway.grpc.pb.h"

namespace lockstep::server {
namespace {

using ::lockstep::testing::IsOk;
using ::testing::HasSubstr;
using namespace ::lockstep::v1;  // NOLINT

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions o;
    o.listen_address = "127.0.0.1:0";
    o.store.path = ":memory:";
    o.heartbeat_interval_ms = 100;
    o.heartbeat_timeout_ms = 500;
    auto c = Coordinator::Start(o);
    ASSERT_THAT(c, IsOk());
    coordinator_ = std::move(*c);
    channel_ =
        grpc::CreateChannel("127.0.0.1:" + std::to_string(coordinator_->port()),
                            grpc::InsecureChannelCredentials());
    stub_ = Lockstep::NewStub(channel_);
    gateway_ = WorkerGateway::NewStub(channel_);
  }

  static Hello MakeHello(const std::string& name) {
    Hello h;
    h.set_name(name);
    h.set_slots(1);
    h.mutable_profile()->set_hardware_class("lockstep-class/v1|cpu=test");
    h.mutable_profile()->set_hardware_class_digest(
        Digest128Hex("lockstep-class/v1|cpu=test"));
    return h;
  }

  std::vector<Worker> ListWorkers(bool include_gone) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    ListWorkersRequest req;
    req.set_include_gone(include_gone);
    ListWorkersResponse resp;
    grpc::Status s = stub_->ListWorkers(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return {resp.workers().begin(), resp.workers().end()};
  }

  std::unique_ptr<Coordinator> coordinator_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Lockstep::Stub> stub_;
  std::unique_ptr<WorkerGateway::Stub> gateway_;
};

TEST_F(CoordinatorTest, HealthServiceServes) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

// Server reflection is on: ServerReflectionInfo's list_services names both
// Lockstep services. The request and response are handled as raw protobuf
// bytes (grpc.reflection.v1alpha is not shipped as a .proto by Debian).
TEST_F(CoordinatorTest, ReflectionListsServices) {
  grpc::GenericStub generic(channel_);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  auto call = generic.PrepareCall(
      &ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      &cq);
  auto wait = [&cq](intptr_t expected) {
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), expected);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(wait(1));
  // ServerReflectionRequest { list_services = "" } (field 7, string).
  const char request_bytes[] = {0x3a, 0x00};
  grpc::Slice slice(request_bytes, sizeof(request_bytes));
  grpc::ByteBuffer request(&slice, 1);
  call->Write(request, reinterpret_cast<void*>(2));
  ASSERT_TRUE(wait(2));
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(3));
  ASSERT_TRUE(wait(3));
  call->WritesDone(reinterpret_cast<void*>(4));
  ASSERT_TRUE(wait(4));
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  ASSERT_TRUE(wait(5));
  EXPECT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  EXPECT_THAT(bytes, HasSubstr("lockstep.v1.Lockstep"));
  EXPECT_THAT(bytes, HasSubstr("lockstep.v1.WorkerGateway"));
  EXPECT_THAT(bytes, HasSubstr("grpc.health.v1.Health"));
}

TEST_F(CoordinatorTest, AuditRpcsValidate) {
  grpc::ClientContext ctx;
  StartAuditRequest req;
  Audit audit;
  grpc::Status s = stub_->StartAudit(&ctx, req, &audit);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("spec.workload"));

  grpc::ClientContext ctx2;
  req.mutable_spec()->set_workload("../../etc");
  s = stub_->StartAudit(&ctx2, req, &audit);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // The team's own model: exactly one of workload and model, and a config
  // with the model.
  grpc::ClientContext ctx_both;
  req.mutable_spec()->set_workload("mlp");
  req.mutable_spec()->mutable_model()->set_name("mine");
  s = stub_->StartAudit(&ctx_both, req, &audit);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("not both"));

  grpc::ClientContext ctx_no_config;
  req.mutable_spec()->clear_workload();
  s = stub_->StartAudit(&ctx_no_config, req, &audit);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("spec.config: required"));

  grpc::ClientContext ctx_config_only;
  req.mutable_spec()->clear_model();
  req.mutable_spec()->set_workload("mlp");
  req.mutable_spec()->mutable_config()->set_steps(1);
  s = stub_->StartAudit(&ctx_config_only, req, &audit);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("spec.config: only with"));

  grpc::ClientContext ctx3;
  GetAuditRequest get;
  get.set_audit_id("audit-nope");
  s = stub_->GetAudit(&ctx3, get, &audit);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
}

// Adds field 99, which no Lockstep message has, to `m`'s unknown fields.
void AddUnknownField(google::protobuf::Message* m) {
  m->GetReflection()->MutableUnknownFields(m)->AddVarint(99, 1);
}

TEST_F(CoordinatorTest, PublicRequestsWithUnknownFieldsAreRefused) {
  {
    grpc::ClientContext ctx;
    GetJobRequest req;
    req.set_job_id("job-unknown");
    AddUnknownField(&req);
    Job job;
    grpc::Status s = stub_->GetJob(&ctx, req, &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("request: unknown field 99"));
  }
  {
    // Nested: the path names the message that carries it.
    grpc::ClientContext ctx;
    SubmitJobRequest req;
    req.mutable_spec()->mutable_model()->set_name("m");
    AddUnknownField(req.mutable_spec()->mutable_model());
    Job job;
    grpc::Status s = stub_->SubmitJob(&ctx, req, &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(),
                HasSubstr("request.spec.model: unknown field 99"));
  }
  {
    grpc::ClientContext ctx;
    ListJobsRequest req;
    AddUnknownField(&req);
    ListJobsResponse resp;
    grpc::Status s = stub_->ListJobs(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("request: unknown field 99"));
  }
  {
    grpc::ClientContext ctx;
    ListWorkersRequest req;
    AddUnknownField(&req);
    ListWorkersResponse resp;
    grpc::Status s = stub_->ListWorkers(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("request: unknown field 99"));
  }
  {
    grpc::ClientContext ctx;
    WatchJobRequest req;
    req.set_job_id("job-unknown");
    AddUnknownField(&req);
    auto reader = stub_->WatchJob(&ctx, req);
    JobEvent ev;
    EXPECT_FALSE(reader->Read(&ev));
    grpc::Status s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("request: unknown field 99"));
  }
  {
    // The same request without the unknown field gets past the check.
    grpc::ClientContext ctx;
    GetJobRequest req;
    req.set_job_id("job-unknown");
    Job job;
    EXPECT_EQ(stub_->GetJob(&ctx, req, &job).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
}

TEST_F(CoordinatorTest, ListJobsValidatesItsFilters) {
  {
    grpc::ClientContext ctx;
    ListJobsRequest req;
    req.set_config_digest("not-a-digest");
    ListJobsResponse resp;
    grpc::Status s = stub_->ListJobs(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("config_digest"));
  }
  {
    grpc::ClientContext ctx;
    ListJobsRequest req;
    req.set_verdict(static_cast<Verdict>(17));
    ListJobsResponse resp;
    grpc::Status s = stub_->ListJobs(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("verdict: 17"));
  }
}

TEST(CoordinatorOptionsTest, MessageLimitDefaultsTo16MiBEverywhere) {
  EXPECT_EQ(kDefaultMaxMessageBytes, 16 << 20);
  EXPECT_EQ(CoordinatorOptions().max_message_bytes, kDefaultMaxMessageBytes);
  EXPECT_EQ(GatewayOptions().max_message_bytes, kDefaultMaxMessageBytes);
}

TEST_F(CoordinatorTest, JobRpcsValidate) {
  grpc::ClientContext ctx;
  SubmitJobRequest req;
  Job job;
  grpc::Status s = stub_->SubmitJob(&ctx, req, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("spec: must be set"));

  grpc::ClientContext ctx2;
  WatchJobRequest wreq;
  wreq.set_job_id("job-unknown");
  auto reader = stub_->WatchJob(&ctx2, wreq);
  JobEvent ev;
  EXPECT_FALSE(reader->Read(&ev));
  s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("job-unknown"));
}

TEST_F(CoordinatorTest, WorkerStreamHelloWelcomeListGone) {
  grpc::ClientContext ctx;
  auto stream = gateway_->Connect(&ctx);
  WorkerMessage hello;
  *hello.mutable_hello() = MakeHello("alpha");
  ASSERT_TRUE(stream->Write(hello));
  CoordinatorMessage msg;
  ASSERT_TRUE(stream->Read(&msg));
  ASSERT_TRUE(msg.has_welcome());
  EXPECT_EQ(msg.welcome().worker_id(), WorkerIdForName("alpha"));
  EXPECT_EQ(msg.welcome().heartbeat_interval_ms(), 100);
  EXPECT_EQ(msg.welcome().heartbeat_timeout_ms(), 500);

  auto workers = ListWorkers(false);
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].name(), "alpha");
  EXPECT_EQ(workers[0].state(), WORKER_CONNECTED);

  // Heartbeats keep it alive past the timeout.
  for (int i = 0; i < 8; ++i) {
    WorkerMessage hb;
    hb.mutable_heartbeat()->set_sent_unix_ms(0);
    ASSERT_TRUE(stream->Write(hb));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(ListWorkers(false).size(), 1u);

  // Silence: the coordinator ends the session with ABORTED.
  EXPECT_FALSE(stream->Read(&msg));
  grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(s.error_message(), HasSubstr("heartbeat timeout"));
  EXPECT_TRUE(ListWorkers(false).empty());
  auto all = ListWorkers(true);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].state(), WORKER_GONE);
}

TEST_F(CoordinatorTest, FirstMessageMustBeHello) {
  grpc::ClientContext ctx;
  auto stream = gateway_->Connect(&ctx);
  WorkerMessage hb;
  hb.mutable_heartbeat();
  ASSERT_TRUE(stream->Write(hb));
  CoordinatorMessage msg;
  EXPECT_FALSE(stream->Read(&msg));
  grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("must be hello"));
}

TEST_F(CoordinatorTest, BadHelloIsRefusedAndNothingStored) {
  grpc::ClientContext ctx;
  auto stream = gateway_->Connect(&ctx);
  WorkerMessage hello;
  *hello.mutable_hello() = MakeHello("no spaces allowed");
  ASSERT_TRUE(stream->Write(hello));
  CoordinatorMessage msg;
  EXPECT_FALSE(stream->Read(&msg));
  grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("hello.name"));
  EXPECT_TRUE(ListWorkers(true).empty());
}

TEST_F(CoordinatorTest, ClosedStreamMarksWorkerGone) {
  {
    grpc::ClientContext ctx;
    auto stream = gateway_->Connect(&ctx);
    WorkerMessage hello;
    *hello.mutable_hello() = MakeHello("beta");
    ASSERT_TRUE(stream->Write(hello));
    CoordinatorMessage msg;
    ASSERT_TRUE(stream->Read(&msg));
    ASSERT_TRUE(stream->WritesDone());
    EXPECT_FALSE(stream->Read(&msg));
    EXPECT_TRUE(stream->Finish().ok());
  }
  // The server ends the session right after the stream; poll (bounded).
  std::vector<Worker> all;
  for (int i = 0; i < 100; ++i) {
    all = ListWorkers(true);
    if (all.size() == 1 && all[0].state() == WORKER_GONE) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].state(), WORKER_GONE);
  EXPECT_EQ(all[0].disconnect_reason(), "stream closed by the worker");
}

TEST_F(CoordinatorTest, SetWorkerStateValidates) {
  grpc::ClientContext ctx;
  SetWorkerStateRequest req;
  req.set_worker_id("w-unknown");
  req.set_admin_state(DRAINING);
  Worker w;
  grpc::Status s = stub_->SetWorkerState(&ctx, req, &w);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("w-unknown"));
}

// A worker streams batches without waiting for acknowledgements: those
// stored are acknowledged after their commits, one refused before reaching
// the store is answered in its place in the stream's order, never ahead of
// the batches before it.
TEST(CoordinatorIngest, PipelinedBatchesAreAnsweredInStreamOrder) {
  CoordinatorOptions o;
  o.listen_address = "127.0.0.1:0";
  o.store.path = ":memory:";
  o.heartbeat_timeout_ms = 60000;
  auto c = Coordinator::Start(o);
  ASSERT_THAT(c, IsOk());
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string((*c)->port()),
                          grpc::InsecureChannelCredentials());
  auto gateway = WorkerGateway::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = gateway->Connect(&ctx);
  WorkerMessage hello;
  hello.mutable_hello()->set_name("pipeliner");
  hello.mutable_hello()->set_slots(1);
  hello.mutable_hello()->mutable_profile()->set_hardware_class(
      "lockstep-class/v1|cpu=test");
  hello.mutable_hello()->mutable_profile()->set_hardware_class_digest(
      Digest128Hex("lockstep-class/v1|cpu=test"));
  ASSERT_TRUE(stream->Write(hello));
  CoordinatorMessage msg;
  ASSERT_TRUE(stream->Read(&msg));
  ASSERT_TRUE(msg.has_welcome());

  SubmitJobRequest req;
  Model* m = req.mutable_spec()->mutable_model();
  m->set_name("tiny");
  m->add_input_shape(4);
  m->set_num_classes(2);
  Layer* fc = m->add_layers();
  fc->set_name("fc");
  fc->set_op(DENSE);
  fc->mutable_dense()->set_units(2);
  Layer* loss = m->add_layers();
  loss->set_name("loss");
  loss->set_op(SOFTMAX_XENT);
  JobConfig* config = req.mutable_spec()->mutable_config();
  config->set_seed(1);
  config->set_batch_size(2);
  config->set_steps(4);
  config->mutable_optimizer()->set_kind(SGD);
  config->mutable_optimizer()->set_learning_rate(0.1f);
  req.mutable_spec()->mutable_placement()->set_runs(1);
  auto stub = Lockstep::NewStub(channel);
  grpc::ClientContext submit_ctx;
  Job job;
  grpc::Status submitted = stub->SubmitJob(&submit_ctx, req, &job);
  ASSERT_TRUE(submitted.ok()) << submitted.error_message();
  RunAssignment assignment;
  while (stream->Read(&msg)) {
    if (msg.has_assignment()) {
      assignment = msg.assignment();
      break;
    }
  }
  ASSERT_FALSE(assignment.run_id().empty());
  const int entries = assignment.manifest().entries_size();
  ASSERT_GT(entries, 0);

  auto batch = [&](int64_t sequence, int step) {
    WorkerMessage w;
    FingerprintBatch* b = w.mutable_batch();
    b->set_run_id(assignment.run_id());
    b->set_attempt(assignment.attempt());
    b->set_sequence(sequence);
    b->set_step(step);
    for (int i = 0; i < entries; ++i) {
      TensorFingerprint* f = b->add_fingerprints();
      f->set_index(i);
      f->set_hash_hi(step * 100 + i);
    }
    b->set_step_complete(true);
    b->set_step_digest("0123456789abcdef0123456789abcdef");
    return w;
  };
  // Three batches, one for a step the job does not capture (refused by the
  // scheduler at once), then the next step: all written before any answer
  // is read.
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(stream->Write(batch(s, s)));
  ASSERT_TRUE(stream->Write(batch(3, 99)));
  ASSERT_TRUE(stream->Write(batch(3, 3)));
  std::vector<std::string> answers;
  while (answers.size() < 5 && stream->Read(&msg)) {
    if (msg.has_ack()) {
      answers.push_back("ack " + std::to_string(msg.ack().sequence()));
    } else if (msg.has_rejected()) {
      answers.push_back("rejected " + std::to_string(msg.rejected().code()) +
                        " " + msg.rejected().message());
    }
  }
  ASSERT_EQ(answers.size(), 5u);
  EXPECT_EQ(answers[0], "ack 0");
  EXPECT_EQ(answers[1], "ack 1");
  EXPECT_EQ(answers[2], "ack 2");
  EXPECT_THAT(answers[3],
              HasSubstr("rejected 3 batch.step: 99 is not a captured step"));
  EXPECT_EQ(answers[4], "ack 3");
  ctx.TryCancel();
  (void)stream->Finish();
  (*c)->Shutdown();
}

TEST(CoordinatorStart, RejectsBadOptions) {
  CoordinatorOptions o;
  o.listen_address = "127.0.0.1:0";
  o.store.path = ":memory:";
  o.heartbeat_timeout_ms = o.heartbeat_interval_ms;
  EXPECT_THAT(Coordinator::Start(o).status().message(),
              HasSubstr("heartbeat_timeout_ms"));
  o = CoordinatorOptions();
  o.listen_address = "127.0.0.1:0";
  o.store.path = ":memory:";
  o.jobs.scheduler.finished_jobs_in_memory = -1;
  EXPECT_THAT(Coordinator::Start(o).status().message(),
              HasSubstr("finished_jobs_in_memory: -1 is outside 0..1000000"));
  o = CoordinatorOptions();
  o.store.path = ":memory:";
  o.listen_address = "not-an-address";
  EXPECT_FALSE(Coordinator::Start(o).ok());
}

}  // namespace
}  // namespace lockstep::server
