// End to end with real binaries on loopback: the coordinator's promises
// about audits. A forged audit label is refused at submission, and a worker
// killed during an audit ends as NO_RESULT (the audit finishes; nothing
// waits forever for the vanished worker).
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"

namespace lockstep {
namespace {

using ::lockstep::testing::Cluster;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::PollUntil;
using ::lockstep::testing::TempDir;
using ::testing::HasSubstr;

class TrustE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir() + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::string mk = "mkdir -p " + dir_;
    ASSERT_EQ(std::system(mk.c_str()), 0);
    cluster_ = std::make_unique<Cluster>(dir_);
    ASSERT_GT(
        cluster_->StartCoordinator(
            0, {"--heartbeat_interval_ms=200", "--heartbeat_timeout_ms=2000",
                "--lease_ms=3000", "--pinned_wait_ms=2000",
                "--zoo_dir=" + cluster_->Runfile("examples")}),
        0);
  }

  void TearDown() override {
    if (HasFailure()) std::printf("%s\n", cluster_->Logs().c_str());
  }

  void WaitConnected(const std::vector<std::string>& names) {
    ASSERT_TRUE(PollUntil(absl::Seconds(30), [&] {
      for (const auto& n : names) {
        if (!cluster_->IsConnected(n)) return false;
      }
      return true;
    }));
  }

  std::string dir_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(TrustE2E, ForgedAuditLabelIsRefused) {
  // Through the CLI, as a user would try it.
  auto r =
      cluster_->Cli({"submit", cluster_->Runfile("examples/mlp/model.json"),
                     cluster_->Runfile("examples/mlp/config.json"),
                     "--labels=lockstep.audit=audit-forged"});
  ASSERT_THAT(r, IsOk());
  EXPECT_NE(r->exit_code, 0) << r->out;
  EXPECT_THAT(r->err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(r->err, HasSubstr("lockstep.audit"));

  // Through gRPC, with any key of the reserved prefix.
  auto stub = cluster_->Stub();
  v1::SubmitJobRequest req;
  v1::Model* m = req.mutable_spec()->mutable_model();
  m->set_name("tiny");
  m->add_input_shape(4);
  m->set_num_classes(2);
  v1::Layer* l = m->add_layers();
  l->set_name("fc");
  l->set_op(v1::DENSE);
  l->mutable_dense()->set_units(2);
  l = m->add_layers();
  l->set_name("loss");
  l->set_op(v1::SOFTMAX_XENT);
  v1::JobConfig* c = req.mutable_spec()->mutable_config();
  c->set_seed(1);
  c->set_batch_size(2);
  c->set_steps(2);
  c->mutable_optimizer()->set_kind(v1::SGD);
  c->mutable_optimizer()->set_learning_rate(0.1f);
  (*req.mutable_spec()->mutable_labels())["lockstep.quarantine"] = "x";
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::Job job;
  grpc::Status s = stub->SubmitJob(&ctx, req, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("spec.labels: \"lockstep."));

  // Nothing was stored.
  grpc::ClientContext list_ctx;
  list_ctx.set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(10));
  v1::ListJobsResponse list;
  ASSERT_TRUE(stub->ListJobs(&list_ctx, v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);
}

TEST_F(TrustE2E, WorkerKilledDuringAnAuditGetsNoResult) {
  // Runs pause at step 3, so the audit is still running when one worker
  // dies, however fast the kernels are.
  for (const char* name : {"node-1", "node-2", "node-3"}) {
    cluster_->StartWorker(
        name, {"--allow_drills", "--inject_stall=step=3,seconds=2"});
  }
  WaitConnected({"node-1", "node-2", "node-3"});
  std::string victim_id;
  const v1::ListWorkersResponse workers = cluster_->Workers(false);
  for (const auto& w : workers.workers()) {
    if (w.name() == "node-3") victim_id = w.worker_id();
  }
  ASSERT_FALSE(victim_id.empty());

  auto stub = cluster_->Stub();
  v1::StartAuditRequest start;
  start.mutable_spec()->set_workload("mlp");
  start.mutable_spec()->set_all_workers(true);
  v1::Audit audit;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    grpc::Status s = stub->StartAudit(&ctx, start, &audit);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  ASSERT_FALSE(audit.job_id().empty());
  // Kill node-3 once its run has started.
  ASSERT_TRUE(PollUntil(absl::Seconds(60), [&] {
    auto j = cluster_->GetJob(audit.job_id());
    if (!j.ok()) return false;
    for (const auto& r : j->runs()) {
      if (r.worker_id() == victim_id && r.state() == v1::RUN_RUNNING) {
        return true;
      }
    }
    return false;
  }));
  const auto killed_at = absl::Now();
  cluster_->worker("node-3")->Signal(SIGKILL);
  cluster_->worker("node-3")->Wait(absl::Seconds(10));

  // Lease (3 s) + pinned wait (2 s) + sweeps: well within 60 s.
  v1::Audit done;
  ASSERT_TRUE(PollUntil(absl::Seconds(60),
                        [&] {
                          grpc::ClientContext ctx;
                          ctx.set_deadline(std::chrono::system_clock::now() +
                                           std::chrono::seconds(5));
                          v1::GetAuditRequest get;
                          get.set_audit_id(audit.audit_id());
                          if (!stub->GetAudit(&ctx, get, &done).ok())
                            return false;
                          return done.state() != v1::AUDIT_RUNNING;
                        }))
      << "the audit is still running " << absl::Now() - killed_at
      << " after the kill";
  EXPECT_EQ(done.state(), v1::AUDIT_DONE) << done.summary();
  ASSERT_EQ(done.workers_size(), 3);
  for (const auto& w : done.workers()) {
    if (w.worker_id() == victim_id) {
      EXPECT_EQ(w.health(), v1::NO_RESULT);
      EXPECT_FALSE(w.quarantined());
    } else {
      EXPECT_NE(w.health(), v1::NO_RESULT) << w.worker_name();
    }
  }
  auto job = cluster_->GetJob(audit.job_id());
  ASSERT_THAT(job, IsOk());
  for (const auto& r : job->runs()) {
    if (r.worker_id() == victim_id || r.state() == v1::RUN_FAILED) {
      EXPECT_EQ(r.state(), v1::RUN_FAILED);
      EXPECT_THAT(r.failure_reason(), HasSubstr("vanished"));
    }
  }
}

}  // namespace
}  // namespace lockstep
