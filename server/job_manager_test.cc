// JobManager without gRPC: fake worker sessions registered with the real
// registry, a real (in-memory) store, a fake clock.
#include "server/job_manager.h"

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/device_identity.h"
#include "common/digest.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "kernels/hash/fingerprint.h"

namespace lockstep::server {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace ::lockstep::v1;  // NOLINT

constexpr int64_t kLeaseMs = 1000;
constexpr int64_t kPinnedWaitMs = 5000;

JobSpec MlpSpec(int runs, PlacementScope scope, DeterminismMode mode) {
  JobSpec spec;
  Model* m = spec.mutable_model();
  m->set_name("tiny-mlp");
  m->add_input_shape(8);
  m->set_num_classes(3);
  Layer* l = m->add_layers();
  l->set_name("fc1");
  l->set_op(DENSE);
  l->mutable_dense()->set_units(4);
  l->mutable_dense()->set_use_bias(true);
  l = m->add_layers();
  l->set_name("relu1");
  l->set_op(RELU);
  l = m->add_layers();
  l->set_name("fc2");
  l->set_op(DENSE);
  l->mutable_dense()->set_units(3);
  l->mutable_dense()->set_use_bias(true);
  l = m->add_layers();
  l->set_name("loss");
  l->set_op(SOFTMAX_XENT);
  JobConfig* c = spec.mutable_config();
  c->set_seed(7);
  c->set_batch_size(4);
  c->set_steps(3);
  c->mutable_optimizer()->set_kind(SGD);
  c->mutable_optimizer()->set_learning_rate(0.1f);
  c->set_determinism(mode);
  spec.mutable_placement()->set_runs(runs);
  spec.mutable_placement()->set_scope(scope);
  return spec;
}

// A worker session whose messages land in a queue.
struct FakeWorker {
  std::string name;
  std::string id;
  std::string cls;
  std::deque<CoordinatorMessage> inbox;
  int64_t session = 0;

  std::vector<RunAssignment> TakeAssignments() {
    std::vector<RunAssignment> out;
    for (auto it = inbox.begin(); it != inbox.end();) {
      if (it->has_assignment()) {
        out.push_back(it->assignment());
        it = inbox.erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }
  std::vector<CancelRun> TakeCancels() {
    std::vector<CancelRun> out;
    for (auto it = inbox.begin(); it != inbox.end();) {
      if (it->has_cancel()) {
        out.push_back(it->cancel());
        it = inbox.erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }
};

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::StoreOptions so;
    so.path = ":memory:";
    store_ = std::move(store::Store::Open(so).value());
    RegistryOptions ro;
    ro.heartbeat_timeout_ms = 1'000'000;
    registry_ = std::make_unique<WorkerRegistry>(
        store_.get(), ro, [this] { return now_.load(); });
    MakeManager();
  }

  void MakeManager(int finished_jobs_in_memory = 256,
                   std::function<void(JobManagerOptions*)> tweak = nullptr) {
    JobManagerOptions jo;
    jo.scheduler.lease_ms = kLeaseMs;
    jo.scheduler.max_attempts = 2;
    jo.scheduler.finished_jobs_in_memory = finished_jobs_in_memory;
    jo.scheduler.pinned_wait_ms = kPinnedWaitMs;
    if (tweak) tweak(&jo);
    if (jobs_ != nullptr) jobs_->Shutdown();
    jobs_ = std::make_unique<JobManager>(store_.get(), registry_.get(), jo,
                                         [this] { return now_.load(); });
    registry_->SetListener(jobs_.get());
  }

  FakeWorker* Connect(const std::string& name, const std::string& cls,
                      int slots = 1, int gpus = 0) {
    auto w = std::make_unique<FakeWorker>();
    w->name = name;
    w->cls = cls;
    Hello h;
    h.set_name(name);
    h.set_slots(slots);
    const std::string full_class =
        "lockstep-class/v1|cpu=" + cls + (gpus > 0 ? "|gpu=NVIDIA H100" : "");
    h.mutable_profile()->set_hardware_class(full_class);
    h.mutable_profile()->set_hardware_class_digest(Digest128Hex(full_class));
    // Each fake worker is a device of its own.
    DeviceIdentity* d = h.mutable_profile()->mutable_device();
    d->set_machine_id("machine-" + name);
    d->set_device("cpu:packages=0");
    d->set_device_id(DeviceIdOf(d->machine_id(), d->device()));
    for (int g = 0; g < gpus; ++g) {
      h.mutable_profile()->add_gpus()->set_name("NVIDIA H100");
    }
    FakeWorker* raw = w.get();
    auto session = registry_->Connect(
        h, "fake", nullptr,
        [raw](CoordinatorMessage m) { raw->inbox.push_back(std::move(m)); });
    EXPECT_THAT(session, IsOk());
    raw->session = *session;
    raw->id = WorkerIdForName(name);
    workers_.push_back(std::move(w));
    jobs_->OnWorkerConnected(raw->id);
    return raw;
  }

  // The batch of one step (sequence = step) of an assignment, with fake
  // fingerprints that depend only on (step, index), plus a flipped tensor
  // when asked; its step digest in *digest.
  static FingerprintBatch StepBatch(const RunAssignment& a, int step,
                                    int flip_step, int flip_index,
                                    hash::Fingerprint* digest) {
    const TensorManifest& m = a.manifest();
    FingerprintBatch b;
    b.set_run_id(a.run_id());
    b.set_attempt(a.attempt());
    b.set_sequence(step);
    b.set_step(step);
    std::vector<hash::Fingerprint> fps;
    for (int i = 0; i < m.entries_size(); ++i) {
      TensorFingerprint* f = b.add_fingerprints();
      f->set_index(i);
      f->set_hash_hi(step * 1000 + i);
      f->set_hash_lo(step == flip_step && i == flip_index ? 99 : 1);
      f->mutable_stats()->set_sum(1.0 + i);
      f->mutable_stats()->set_l2(2.0);
      fps.push_back(hash::Fingerprint{f->hash_hi(), f->hash_lo()});
    }
    *digest = hash::CombineDigests(fps);
    b.set_step_complete(true);
    b.set_step_digest(digest->ToHex());
    return b;
  }

  // Executes an assignment like a worker would (StepBatch's fingerprints),
  // sending the batches of the first `sent_steps` steps (< 0: all).
  // Returns the run digest it reported (or would report, over every step).
  std::string Execute(FakeWorker* w, const RunAssignment& a, int flip_step = -1,
                      int flip_index = -1, bool finish = true,
                      int sent_steps = -1) {
    const TensorManifest& m = a.manifest();
    std::vector<hash::Fingerprint> step_digests;
    step_digests.push_back(
        hash::Fingerprint::FromHex(m.manifest_digest()).value());
    for (int step = 0; step < m.steps(); ++step) {
      hash::Fingerprint d;
      const FingerprintBatch b = StepBatch(a, step, flip_step, flip_index, &d);
      step_digests.push_back(d);
      if (sent_steps >= 0 && step >= sent_steps) continue;
      auto ack = jobs_->OnBatch(w->id, b);
      EXPECT_THAT(ack, IsOk());
      if (ack.ok()) {
        EXPECT_EQ(ack->sequence(), b.sequence());
      }
    }
    const std::string digest = hash::CombineDigests(step_digests).ToHex();
    if (finish) {
      RunFinished f;
      f.set_run_id(a.run_id());
      f.set_attempt(a.attempt());
      f.set_success(true);
      f.set_run_digest(digest);
      EXPECT_THAT(jobs_->OnRunFinished(w->id, f), IsOk());
      jobs_->WaitForVerdicts();
    }
    return digest;
  }

  std::atomic<int64_t> now_{1'000'000};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<JobManager> jobs_;
  std::vector<std::unique_ptr<FakeWorker>> workers_;
};

TEST_F(JobManagerTest, ThreeRunsOverTwoWorkersAreCertified) {
  FakeWorker* a = Connect("a", "class-x");
  FakeWorker* b = Connect("b", "class-x");
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(3, SAME_CLASS, CANONICAL);
  auto job = jobs_->Submit(req);
  ASSERT_THAT(job, IsOk());
  EXPECT_EQ(job->state(), JOB_RUNNING);
  EXPECT_EQ(job->runs_size(), 3);
  EXPECT_TRUE(IsDigest128Hex(job->model_digest()));

  std::vector<JobEvent> events;
  auto token = jobs_->Watch(job->job_id(),
                            [&](const JobEvent& e) { events.push_back(e); });
  ASSERT_THAT(token, IsOk());

  auto on_a = a->TakeAssignments();
  auto on_b = b->TakeAssignments();
  ASSERT_EQ(on_a.size(), 1u);
  ASSERT_EQ(on_b.size(), 1u);
  EXPECT_GT(on_a[0].manifest().entries_size(), 10);
  const std::string d0 = Execute(a, on_a[0]);
  on_a = a->TakeAssignments();  // the third run goes to the free worker
  ASSERT_EQ(on_a.size(), 1u);
  EXPECT_EQ(Execute(b, on_b[0]), d0);
  EXPECT_EQ(Execute(a, on_a[0]), d0);

  auto done = jobs_->GetJob(job->job_id());
  ASSERT_THAT(done, IsOk());
  EXPECT_EQ(done->state(), JOB_SUCCEEDED);
  auto report = jobs_->GetReport(job->job_id());
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->verdict(), REPRODUCIBLE);
  EXPECT_EQ(report->level(), CROSS_DEVICE);
  ASSERT_EQ(report->certificate_ids_size(), 2);
  auto certs = jobs_->ListCertificates(ListCertificatesRequest());
  ASSERT_THAT(certs, IsOk());
  ASSERT_EQ(certs->certificates_size(), 2);
  std::set<Level> levels;
  for (const auto& c : certs->certificates()) {
    levels.insert(c.level());
    EXPECT_EQ(c.golden_run_digest(), d0);
    EXPECT_EQ(c.hardware_class(), "lockstep-class/v1|cpu=class-x");
    EXPECT_EQ(c.model_digest(), job->model_digest());
  }
  EXPECT_EQ(levels, (std::set<Level>{RUN_TO_RUN, CROSS_DEVICE}));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().message(), "snapshot");
  EXPECT_TRUE(events.back().final());
  EXPECT_THAT(events.back().message(), HasSubstr("REPRODUCIBLE"));
  jobs_->Unwatch(*token);
}

TEST_F(JobManagerTest, DivergenceIsLocalised) {
  FakeWorker* a = Connect("a", "class-x", /*slots=*/2);
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(2, SAME_WORKER, CANONICAL);
  auto job = jobs_->Submit(req);
  ASSERT_THAT(job, IsOk());
  auto runs = a->TakeAssignments();
  ASSERT_EQ(runs.size(), 2u);
  Execute(a, runs[0]);
  Execute(a, runs[1], /*flip_step=*/1, /*flip_index=*/5);
  auto report = jobs_->GetReport(job->job_id());
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->verdict(), NONDETERMINISTIC);
  EXPECT_EQ(report->divergence().step(), 1);
  EXPECT_EQ(report->divergence().tensor().index(), 5);
  EXPECT_EQ(report->divergence().downstream_differing(), 0);
  EXPECT_EQ(report->certificate_ids_size(), 0);

  auto cmp = jobs_->CompareRuns(runs[0].run_id(), runs[1].run_id());
  ASSERT_THAT(cmp, IsOk());
  EXPECT_FALSE(cmp->identical());
  EXPECT_EQ(cmp->divergence().step(), 1);
  cmp = jobs_->CompareRuns(runs[0].run_id(), runs[0].run_id());
  ASSERT_THAT(cmp, IsOk());
  EXPECT_TRUE(cmp->identical());
  EXPECT_THAT(jobs_->CompareRuns(runs[0].run_id(), "job-x-r00"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("run_b")));
}

TEST_F(JobManagerTest, ExpiredLeaseRequeuesAFreshAttempt) {
  FakeWorker* a = Connect("a", "class-x");
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(2, SAME_CLASS, CANONICAL);
  auto job = jobs_->Submit(req);
  ASSERT_THAT(job, IsOk());
  auto first = a->TakeAssignments();
  ASSERT_EQ(first.size(), 1u);
  // Part of the run arrives, then the worker goes silent.
  Execute(a, first[0], -1, -1, /*finish=*/false);
  FakeWorker* b = Connect("b", "class-x");
  auto on_b = b->TakeAssignments();  // the second run
  ASSERT_EQ(on_b.size(), 1u);
  now_ += kLeaseMs / 2;
  Heartbeat hb;
  RunProgress* p = hb.add_runs();
  p->set_run_id(on_b[0].run_id());
  p->set_attempt(on_b[0].attempt());
  jobs_->OnHeartbeat(b->id, hb);  // b renews its lease, a does not
  // a's stream breaks; its run stays leased to it until the lease expires.
  registry_->Disconnect(a->id, a->session, "stream broken");
  EXPECT_TRUE(a->TakeAssignments().empty());
  now_ += kLeaseMs / 2 + 1;
  EXPECT_EQ(jobs_->Sweep(), 1);
  EXPECT_TRUE(a->TakeCancels().empty());  // nobody to tell
  // The late batch of the dead attempt is refused and not counted.
  FingerprintBatch late;
  late.set_run_id(first[0].run_id());
  late.set_attempt(1);
  late.set_sequence(3);
  EXPECT_THAT(jobs_->OnBatch(a->id, late),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("re-queued")));

  const std::string d = Execute(b, on_b[0]);
  auto retry = b->TakeAssignments();
  ASSERT_EQ(retry.size(), 1u);
  EXPECT_EQ(retry[0].run_id(), first[0].run_id());
  EXPECT_EQ(retry[0].attempt(), 2);
  EXPECT_EQ(Execute(b, retry[0]), d);
  auto report = jobs_->GetReport(job->job_id());
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->verdict(), REPRODUCIBLE);
  auto stored = store_->LoadRunSteps(first[0].run_id(), 1);
  EXPECT_TRUE(stored->empty());  // the dead attempt's fingerprints are gone
}

// An assignment lost with its stream (sent as the worker's session broke,
// or just before a coordinator restart) is sent again, as the same
// attempt, while the worker neither lists the run in a heartbeat nor sends
// a batch of it: after resend_unlisted_ms, then after twice that, and never
// once the run is listed. (The default is a tenth of the lease, at least
// 500 ms.)
TEST_F(JobManagerTest, UnlistedAssignmentIsSentAgainAsTheSameAttempt) {
  MakeManager(
      256, [](JobManagerOptions* o) { o->scheduler.resend_unlisted_ms = 200; });
  FakeWorker* a = Connect("a", "class-x");
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(1, SAME_WORKER, CANONICAL);
  ASSERT_THAT(jobs_->Submit(req), IsOk());
  auto first = a->TakeAssignments();
  ASSERT_EQ(first.size(), 1u);
  // The message is lost: the worker's heartbeats list nothing.
  Heartbeat empty;
  now_ += 150;
  jobs_->OnHeartbeat(a->id, empty);
  EXPECT_EQ(jobs_->Sweep(), 0);
  EXPECT_TRUE(a->TakeAssignments().empty());
  now_ += 51;  // 201 ms
  EXPECT_EQ(jobs_->Sweep(), 0);
  auto again = a->TakeAssignments();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].run_id(), first[0].run_id());
  EXPECT_EQ(again[0].attempt(), first[0].attempt());
  // Backing off: the next one 400 ms later.
  now_ += 390;  // 591 ms
  EXPECT_EQ(jobs_->Sweep(), 0);
  EXPECT_TRUE(a->TakeAssignments().empty());
  now_ += 20;  // 611 ms
  EXPECT_EQ(jobs_->Sweep(), 0);
  EXPECT_EQ(a->TakeAssignments().size(), 1u);
  // The worker now runs it and lists it: no more resends, and the lease
  // stays with it.
  Heartbeat hb;
  RunProgress* p = hb.add_runs();
  p->set_run_id(first[0].run_id());
  p->set_attempt(first[0].attempt());
  for (int i = 0; i < 6; ++i) {
    now_ += 300;
    jobs_->OnHeartbeat(a->id, hb);
    EXPECT_EQ(jobs_->Sweep(), 0);
  }
  EXPECT_TRUE(a->TakeAssignments().empty());
  Execute(a, again[0]);
  auto job = jobs_->GetJob(first[0].job_id());
  ASSERT_THAT(job, IsOk());
  ASSERT_EQ(job->runs_size(), 1);
  EXPECT_EQ(job->runs(0).attempt(), 1);
  EXPECT_EQ(job->runs(0).state(), RUN_SUCCEEDED);
}

TEST_F(JobManagerTest, RetriesAreBounded) {
  FakeWorker* a = Connect("a", "class-x");
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(1, SAME_WORKER, CANONICAL);
  auto job = jobs_->Submit(req);
  ASSERT_THAT(job, IsOk());
  for (int attempt = 1; attempt <= 2; ++attempt) {
    auto runs = a->TakeAssignments();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].attempt(), attempt);
    RunFinished f;
    f.set_run_id(runs[0].run_id());
    f.set_attempt(attempt);
    f.set_success(false);
    f.set_failure_reason("killed by signal 9");
    ASSERT_THAT(jobs_->OnRunFinished(a->id, f), IsOk());
  }
  jobs_->WaitForVerdicts();
  auto done = jobs_->GetJob(job->job_id());
  EXPECT_EQ(done->state(), JOB_FAILED);
  EXPECT_THAT(done->failure_reason(), HasSubstr("failed after 2 attempts"));
  EXPECT_THAT(done->failure_reason(), HasSubstr("killed by signal 9"));
  EXPECT_EQ(jobs_->GetReport(job->job_id())->verdict(), FAILED);
}

TEST_F(JobManagerTest, InputErrorsFailOnTheFirstAttempt) {
  FakeWorker* a = Connect("a", "class-x");
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(2, SAME_WORKER, CANONICAL);
  auto job = jobs_->Submit(req);
  ASSERT_THAT(job, IsOk());
  auto runs = a->TakeAssignments();
  ASSERT_FALSE(runs.empty());
  EXPECT_EQ(runs[0].attempt(), 1);
  RunFinished f;
  f.set_run_id(runs[0].run_id());
  f.set_attempt(1);
  f.set_success(false);
  f.set_input_error(true);
  f.set_failure_reason(
      "INVALID_ARGUMENT: dataset.file.inputs_path \"/etc/shadow\": is outside "
      "the worker's --data_root");
  ASSERT_THAT(jobs_->OnRunFinished(a->id, f), IsOk());
  jobs_->WaitForVerdicts();
  // No second attempt: the job failed with the reason.
  for (const auto& r : a->TakeAssignments()) {
    EXPECT_NE(r.run_id(), runs[0].run_id());
  }
  auto done = jobs_->GetJob(job->job_id());
  ASSERT_THAT(done, IsOk());
  EXPECT_EQ(done->state(), JOB_FAILED);
  EXPECT_THAT(done->failure_reason(),
              AllOf(HasSubstr("failed on attempt 1"),
                    HasSubstr("outside the worker's --data_root")));
  for (const auto& r : done->runs()) {
    if (r.run_id() == runs[0].run_id()) {
      EXPECT_EQ(r.attempt(), 1);
      EXPECT_EQ(r.state(), RUN_FAILED);
    }
  }
}

TEST_F(JobManagerTest, WrongDigestIsNotAccepted) {
  FakeWorker* a = Connect("a", "class-x");
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(1, SAME_WORKER, CANONICAL);
  auto job = jobs_->Submit(req);
  auto runs = a->TakeAssignments();
  ASSERT_EQ(runs.size(), 1u);
  Execute(a, runs[0], -1, -1, /*finish=*/false);
  RunFinished f;
  f.set_run_id(runs[0].run_id());
  f.set_attempt(1);
  f.set_success(true);
  f.set_run_digest("00000000000000000000000000000000");
  EXPECT_THAT(jobs_->OnRunFinished(a->id, f),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("does not match the stored steps")));
  auto retry = a->TakeAssignments();
  ASSERT_EQ(retry.size(), 1u);
  EXPECT_EQ(retry[0].attempt(), 2);
}

TEST_F(JobManagerTest, BadSubmissionsAreRefusedAndStoreNothing) {
  struct Case {
    std::function<void(SubmitJobRequest*)> mutate;
    const char* message;
  };
  const Case cases[] = {
      {[](SubmitJobRequest* r) { r->clear_spec(); }, "spec: must be set"},
      {[](SubmitJobRequest* r) {
         r->mutable_spec()->mutable_config()->set_determinism(
             static_cast<DeterminismMode>(42));
       },
       "spec.config.determinism: 42"},
      {[](SubmitJobRequest* r) {
         r->mutable_spec()->mutable_placement()->set_scope(
             static_cast<PlacementScope>(9));
       },
       "spec.placement.scope: 9"},
      {[](SubmitJobRequest* r) {
         r->mutable_spec()->mutable_placement()->set_runs(1000);
       },
       "spec.placement.runs: 1000 exceeds the limit of 64"},
      {[](SubmitJobRequest* r) {
         r->mutable_spec()->mutable_placement()->set_scope(ACROSS_CLASSES);
         r->mutable_spec()->mutable_config()->set_determinism(DEFAULT);
       },
       "ACROSS_CLASSES needs config.determinism CANONICAL"},
      {[](SubmitJobRequest* r) {
         r->mutable_spec()->mutable_config()->set_steps(10'000'000);
       },
       "steps"},
      {[](SubmitJobRequest* r) {
         r->mutable_spec()
             ->mutable_model()
             ->mutable_layers(0)
             ->mutable_dense()
             ->set_units(0);
       },
       "fc1"},
      {[](SubmitJobRequest* r) { r->set_idempotency_key("has space"); },
       "idempotency_key"},
      {[](SubmitJobRequest* r) {
         r->mutable_spec()->mutable_placement()->add_hardware_class_digests(
             "xyz");
       },
       "hardware_class_digests[0]"},
  };
  for (const Case& c : cases) {
    SubmitJobRequest req;
    *req.mutable_spec() = MlpSpec(2, SAME_CLASS, CANONICAL);
    c.mutate(&req);
    EXPECT_THAT(jobs_->Submit(req), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr(c.message)));
  }
  auto list = jobs_->ListJobs(ListJobsRequest());
  ASSERT_THAT(list, IsOk());
  EXPECT_EQ(list->jobs_size(), 0);
}

TEST_F(JobManagerTest, IdempotencyKeyReturnsTheSameJob) {
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(2, SAME_CLASS, CANONICAL);
  req.set_idempotency_key("pr-1234");
  auto first = jobs_->Submit(req);
  auto second = jobs_->Submit(req);
  ASSERT_THAT(first, IsOk());
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(first->job_id(), second->job_id());
  EXPECT_EQ(jobs_->ListJobs(ListJobsRequest())->jobs_size(), 1);
}

TEST_F(JobManagerTest, FinishedJobsLeaveMemoryButNotTheStore) {
  MakeManager(/*finished_jobs_in_memory=*/1);
  FakeWorker* a = Connect("a", "class-x", /*slots=*/2);
  std::vector<std::string> ids;
  std::vector<RunAssignment> first_runs;
  for (int i = 0; i < 3; ++i) {
    SubmitJobRequest req;
    *req.mutable_spec() = MlpSpec(2, SAME_WORKER, CANONICAL);
    auto job = jobs_->Submit(req);
    ASSERT_THAT(job, IsOk());
    ids.push_back(job->job_id());
    auto runs = a->TakeAssignments();
    ASSERT_EQ(runs.size(), 2u);
    Execute(a, runs[0]);
    Execute(a, runs[1]);
    first_runs.push_back(runs[0]);
    now_ += 10;
  }
  jobs_->Sweep();
  EXPECT_EQ(jobs_->JobsInMemory(), 1u);
  for (const std::string& id : ids) {
    auto job = jobs_->GetJob(id);
    ASSERT_THAT(job, IsOk());
    EXPECT_EQ(job->state(), JOB_SUCCEEDED);
    auto report = jobs_->GetReport(id);
    ASSERT_THAT(report, IsOk());
    EXPECT_EQ(report->verdict(), REPRODUCIBLE);
  }
  // A late, resent result of an evicted job is refused cleanly.
  RunFinished late;
  late.set_run_id(first_runs[0].run_id());
  late.set_attempt(first_runs[0].attempt());
  late.set_success(true);
  EXPECT_THAT(jobs_->OnRunFinished(a->id, late),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(jobs_->Cancel(ids[0], ""),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("already JOB_SUCCEEDED")));
}

TEST_F(JobManagerTest, CudaRunsGoOnlyToWorkersWithAGpu) {
  FakeWorker* cpu = Connect("cpu-only", "class-cpu");
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(2, SAME_CLASS, CANONICAL);
  req.mutable_spec()->mutable_config()->set_backend(CUDA);
  auto job = jobs_->Submit(req);
  ASSERT_THAT(job, IsOk());
  EXPECT_TRUE(cpu->TakeAssignments().empty());
  EXPECT_EQ(jobs_->GetJob(job->job_id())->state(), JOB_QUEUED);

  FakeWorker* gpu = Connect("gpu-node", "class-gpu", /*slots=*/2, /*gpus=*/1);
  const std::vector<RunAssignment> got = gpu->TakeAssignments();
  EXPECT_EQ(got.size(), 2u);
  EXPECT_TRUE(cpu->TakeAssignments().empty());

  // A CPU job still runs on either.
  SubmitJobRequest cpu_req;
  *cpu_req.mutable_spec() = MlpSpec(1, SAME_CLASS, CANONICAL);
  cpu_req.mutable_spec()->mutable_config()->set_backend(CPU);
  ASSERT_THAT(jobs_->Submit(cpu_req), IsOk());
  EXPECT_EQ(cpu->TakeAssignments().size(), 1u);
}

TEST_F(JobManagerTest, CancelStopsRuns) {
  FakeWorker* a = Connect("a", "class-x");
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(2, SAME_WORKER, CANONICAL);
  auto job = jobs_->Submit(req);
  ASSERT_EQ(a->TakeAssignments().size(), 1u);
  auto cancelled = jobs_->Cancel(job->job_id(), "no longer needed");
  ASSERT_THAT(cancelled, IsOk());
  EXPECT_EQ(cancelled->state(), JOB_CANCELLED);
  EXPECT_EQ(a->TakeCancels().size(), 1u);
  EXPECT_THAT(jobs_->Cancel(job->job_id(), ""),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("already JOB_CANCELLED")));
  EXPECT_THAT(jobs_->Cancel("job-nope", ""),
              StatusIs(absl::StatusCode::kNotFound));
  jobs_->WaitForVerdicts();
  EXPECT_EQ(store_->GetJob(job->job_id())->value().state(), JOB_CANCELLED);
  auto report = jobs_->GetReport(job->job_id());
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->verdict(), INCONCLUSIVE);
  EXPECT_EQ(report->certificate_ids_size(), 0);
}

TEST_F(JobManagerTest, HostileBatchesAreRefused) {
  FakeWorker* a = Connect("a", "class-x");
  FakeWorker* b = Connect("b", "class-x");
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(1, SAME_WORKER, CANONICAL);
  auto job = jobs_->Submit(req);
  auto runs = a->TakeAssignments();
  if (runs.empty()) runs = b->TakeAssignments();
  ASSERT_EQ(runs.size(), 1u);
  FakeWorker* owner = runs[0].run_id().empty() ? nullptr : a;
  FakeWorker* other = b;
  if (!b->inbox.empty() ||
      store_->GetJob(job->job_id())->value().runs(0).worker_id() == b->id) {
    owner = b;
    other = a;
  }
  FingerprintBatch batch;
  batch.set_run_id(runs[0].run_id());
  batch.set_attempt(1);
  batch.set_step(0);
  EXPECT_THAT(jobs_->OnBatch(other->id, batch),
              StatusIs(absl::StatusCode::kAborted));
  batch.set_step(99);
  EXPECT_THAT(jobs_->OnBatch(owner->id, batch),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch.step: 99")));
  batch.set_run_id("job-nope-r00");
  EXPECT_THAT(jobs_->OnBatch(owner->id, batch),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(*store_->NextSequence(runs[0].run_id()), 0);
}

TEST_F(JobManagerTest, RecoversAfterRestart) {
  FakeWorker* a = Connect("a", "class-x", 2);
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(2, SAME_WORKER, CANONICAL);
  auto job = jobs_->Submit(req);
  auto runs = a->TakeAssignments();
  ASSERT_EQ(runs.size(), 2u);
  const std::string d = Execute(a, runs[0]);
  Execute(a, runs[1], -1, -1, /*finish=*/false);
  // The coordinator restarts: a new manager over the same store.
  MakeManager();
  ASSERT_THAT(jobs_->Recover(), IsOk());
  RunFinished f;
  f.set_run_id(runs[1].run_id());
  f.set_attempt(1);
  f.set_success(true);
  f.set_run_digest(d);
  ASSERT_THAT(jobs_->OnRunFinished(a->id, f), IsOk());
  jobs_->WaitForVerdicts();
  EXPECT_EQ(jobs_->GetJob(job->job_id())->state(), JOB_SUCCEEDED);
  EXPECT_EQ(jobs_->GetReport(job->job_id())->verdict(), REPRODUCIBLE);
}

// --- Finding 1 and 4: verdicts computed once, stored, served -------------

TEST_F(JobManagerTest, VerdictIsStoredWithTheJobAndServedFromTheStore) {
  FakeWorker* a = Connect("a", "class-x", /*slots=*/2);
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(2, SAME_WORKER, CANONICAL);
  auto job = jobs_->Submit(req);
  ASSERT_THAT(job, IsOk());
  auto runs = a->TakeAssignments();
  ASSERT_EQ(runs.size(), 2u);
  Execute(a, runs[0]);
  Execute(a, runs[1]);
  auto stored = store_->GetJobReport(job->job_id());
  ASSERT_THAT(stored, IsOk());
  ASSERT_TRUE(stored->has_value());
  EXPECT_EQ((*stored)->verdict(), REPRODUCIBLE);
  EXPECT_EQ((*stored)->level(), RUN_TO_RUN);
  ASSERT_EQ((*stored)->certificate_ids_size(), 1);
  // Every certificate id the report names was stored with it.
  EXPECT_TRUE(
      store_->GetCertificate((*stored)->certificate_ids(0))->has_value());
  auto report = jobs_->GetReport(job->job_id());
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(*report, **stored));

  // After a restart the stored verdict stands: it is not recomputed, even
  // when the fingerprints it was computed from would now say otherwise.
  v1::Job finished = *store_->GetJob(job->job_id()).value();
  v1::Report marked = **stored;
  marked.set_summary("the verdict stored when the job finished");
  ASSERT_THAT(store_->FinishJob(finished, marked, {}), IsOk());
  MakeManager();
  ASSERT_THAT(jobs_->Recover(), IsOk());
  jobs_->WaitForVerdicts();
  EXPECT_EQ(jobs_->GetReport(job->job_id())->summary(), (*stored)->summary());
}

TEST_F(JobManagerTest, RecoverJudgesOnlyFinishedJobsWithoutAVerdict) {
  FakeWorker* a = Connect("a", "class-x", /*slots=*/2);
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(2, SAME_WORKER, CANONICAL);
  auto job = jobs_->Submit(req);
  auto runs = a->TakeAssignments();
  ASSERT_EQ(runs.size(), 2u);
  Execute(a, runs[0]);
  Execute(a, runs[1], -1, -1, /*finish=*/false);
  // The job failed and the coordinator stopped before its verdict was
  // stored.
  v1::Job failed = *store_->GetJob(job->job_id()).value();
  failed.set_state(JOB_FAILED);
  failed.set_failure_reason("run 1 failed after 2 attempts: out of memory");
  failed.set_finished_unix_ms(now_);
  ASSERT_THAT(store_->UpdateJob(failed), IsOk());
  ASSERT_FALSE(store_->GetJobReport(job->job_id())->has_value());
  MakeManager();
  ASSERT_THAT(jobs_->Recover(), IsOk());
  jobs_->WaitForVerdicts();
  auto stored = store_->GetJobReport(job->job_id());
  ASSERT_TRUE(stored->has_value());
  EXPECT_EQ((*stored)->verdict(), FAILED);
  EXPECT_THAT((*stored)->summary(), HasSubstr("out of memory"));
  EXPECT_EQ((*stored)->certificate_ids_size(), 0);
  EXPECT_EQ((*stored)->level(), LEVEL_UNSPECIFIED);
}

TEST_F(JobManagerTest, FailedJobReportSaysFailedAndListsNoCertificates) {
  FakeWorker* a = Connect("a", "class-x");
  FakeWorker* b = Connect("b", "class-x");
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(2, SAME_CLASS, CANONICAL);
  auto job = jobs_->Submit(req);
  ASSERT_THAT(job, IsOk());
  auto on_a = a->TakeAssignments();
  auto on_b = b->TakeAssignments();
  ASSERT_EQ(on_a.size(), 1u);
  ASSERT_EQ(on_b.size(), 1u);
  Execute(a, on_a[0]);  // one run succeeds
  for (int attempt = 1; attempt <= 2; ++attempt) {
    std::vector<RunAssignment> got = b->TakeAssignments();
    if (got.empty()) got = a->TakeAssignments();
    if (attempt == 1) got = on_b;
    ASSERT_EQ(got.size(), 1u);
    RunFinished f;
    f.set_run_id(got[0].run_id());
    f.set_attempt(got[0].attempt());
    f.set_success(false);
    f.set_failure_reason("segfault in the data loader");
    FakeWorker* w =
        store_->GetJob(job->job_id())
                    ->value()
                    .runs(got[0].run_id() == on_a[0].run_id() ? 0 : 1)
                    .worker_id() == a->id
            ? a
            : b;
    ASSERT_THAT(jobs_->OnRunFinished(w->id, f), IsOk());
  }
  jobs_->WaitForVerdicts();
  auto report = jobs_->GetReport(job->job_id());
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->verdict(), FAILED);
  EXPECT_THAT(report->summary(), HasSubstr("segfault in the data loader"));
  EXPECT_EQ(report->certificate_ids_size(), 0);
  EXPECT_EQ(report->level(), LEVEL_UNSPECIFIED);
  EXPECT_EQ(
      jobs_->ListCertificates(ListCertificatesRequest())->certificates_size(),
      0);
}

TEST_F(JobManagerTest, FingerprintLimitNamesTheLimitAndTheJobsFigure) {
  MakeManager(256, [](JobManagerOptions* o) {
    o->submission.max_fingerprints_per_job = 100;
  });
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(2, SAME_CLASS, CANONICAL);
  auto refused = jobs_->Submit(req);
  EXPECT_THAT(
      refused,
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("over the limit of 100 fingerprints per job")));
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("x 3 captured steps x 2 runs")));
  MakeManager(256, [](JobManagerOptions* o) {
    o->submission.max_fingerprint_bytes_per_job = 1000;
  });
  EXPECT_THAT(jobs_->Submit(req),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("over the limit of 1000 bytes")));
  EXPECT_EQ(jobs_->ListJobs(ListJobsRequest())->jobs_size(), 0);
}

TEST_F(JobManagerTest, TheLargestAllowedJobIsWithinTheDefaultFingerprintLimit) {
  // 100,000 steps x every tensor x 64 runs of the small MLP fits; the same
  // with a much wider capture does not.
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(64, SAME_CLASS, CANONICAL);
  req.mutable_spec()->mutable_config()->set_steps(100000);
  EXPECT_THAT(jobs_->Submit(req), IsOk());
  JobSpec* spec = req.mutable_spec();
  Model* m = spec->mutable_model();
  for (int i = 0; i < 40; ++i) {
    Layer* l = m->add_layers();
    *l = m->layers(1);  // relu
    l->set_name("extra" + std::to_string(i));
  }
  // Keep the loss last.
  std::swap(*m->mutable_layers(3), *m->mutable_layers(m->layers_size() - 1));
  EXPECT_THAT(jobs_->Submit(req),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("limit of 200000000 fingerprints per job")));
}

// --- Finding 2: reserved labels -------------------------------------------

TEST_F(JobManagerTest, ReservedLabelsAreRefusedOnPublicSubmission) {
  for (const char* key : {"lockstep.audit", "lockstep.anything"}) {
    SubmitJobRequest req;
    *req.mutable_spec() = MlpSpec(2, SAME_CLASS, CANONICAL);
    (*req.mutable_spec()->mutable_labels())["team"] = "ml";
    (*req.mutable_spec()->mutable_labels())[key] = "audit-forged";
    EXPECT_THAT(jobs_->Submit(req),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(std::string("spec.labels: \"") + key)));
  }
  EXPECT_EQ(jobs_->ListJobs(ListJobsRequest())->jobs_size(), 0);
  // The coordinator's own path may set them.
  SubmitJobRequest internal;
  *internal.mutable_spec() = MlpSpec(1, ACROSS_CLASSES, CANONICAL);
  (*internal.mutable_spec()->mutable_labels())[kAuditLabel] = "audit-1";
  EXPECT_THAT(jobs_->SubmitInternal(internal), IsOk());
}

// --- Finding 3: pinned runs get a deadline --------------------------------

TEST_F(JobManagerTest, AuditRunOfAVanishedWorkerFailsAndTheJobFinishes) {
  FakeWorker* a = Connect("a", "class-x");
  FakeWorker* b = Connect("b", "class-y");
  std::vector<v1::Job> finished;
  jobs_->SetJobFinishedHook([&](const v1::Job& j) { finished.push_back(j); });
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(2, ACROSS_CLASSES, CANONICAL);
  req.mutable_spec()->mutable_placement()->add_worker_ids(a->id);
  req.mutable_spec()->mutable_placement()->add_worker_ids(b->id);
  (*req.mutable_spec()->mutable_labels())[kAuditLabel] = "audit-1";
  auto job = jobs_->SubmitInternal(req);
  ASSERT_THAT(job, IsOk());
  auto on_a = a->TakeAssignments();
  ASSERT_EQ(on_a.size(), 1u);
  ASSERT_EQ(b->TakeAssignments().size(), 1u);
  // b dies: its lease expires and its run waits for it, pinned.
  registry_->Disconnect(b->id, b->session, "killed");
  Execute(a, on_a[0]);
  now_ += kLeaseMs + 1;
  jobs_->Sweep();
  EXPECT_EQ(jobs_->GetJob(job->job_id())->runs(1).state(), RUN_QUEUED);
  now_ += kPinnedWaitMs - 1;
  jobs_->Sweep();
  jobs_->WaitForVerdicts();
  EXPECT_EQ(jobs_->GetJob(job->job_id())->state(), JOB_RUNNING);
  EXPECT_TRUE(finished.empty());
  now_ += 2;
  jobs_->Sweep();
  jobs_->WaitForVerdicts();
  auto done = jobs_->GetJob(job->job_id());
  ASSERT_THAT(done, IsOk());
  EXPECT_EQ(done->state(), JOB_SUCCEEDED);
  EXPECT_EQ(done->runs(1).state(), RUN_FAILED);
  EXPECT_THAT(done->runs(1).failure_reason(),
              HasSubstr("worker " + b->id + " vanished"));
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].job_id(), job->job_id());
}

TEST_F(JobManagerTest, SameWorkerJobMovesToAnotherWorkerOfItsClass) {
  FakeWorker* a = Connect("a", "class-x", /*slots=*/2);
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(2, SAME_WORKER, CANONICAL);
  auto job = jobs_->Submit(req);
  ASSERT_THAT(job, IsOk());
  auto on_a = a->TakeAssignments();
  ASSERT_EQ(on_a.size(), 2u);
  Execute(a, on_a[0]);  // one run done on a, then a vanishes
  registry_->Disconnect(a->id, a->session, "killed");
  FakeWorker* other_class = Connect("c", "class-y", /*slots=*/2);
  FakeWorker* b = Connect("b", "class-x", /*slots=*/2);
  now_ += kLeaseMs + 1;
  jobs_->Sweep();
  EXPECT_TRUE(b->TakeAssignments().empty());  // still pinned to a
  now_ += kPinnedWaitMs;
  jobs_->Sweep();
  now_ += 1;
  jobs_->Sweep();
  EXPECT_TRUE(other_class->TakeAssignments().empty());
  auto on_b = b->TakeAssignments();
  ASSERT_EQ(on_b.size(), 2u);  // both runs start afresh on b
  auto moved = jobs_->GetJob(job->job_id());
  for (const v1::Run& r : moved->runs()) {
    EXPECT_EQ(r.worker_id(), b->id);
    EXPECT_THAT(r.failure_reason(), HasSubstr("worker " + a->id + " vanished"));
  }
  EXPECT_EQ(store_->LoadRunSteps(on_a[0].run_id(), on_a[0].attempt())->size(),
            0u);
  Execute(b, on_b[0]);
  Execute(b, on_b[1]);
  auto report = jobs_->GetReport(job->job_id());
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->verdict(), REPRODUCIBLE);
  EXPECT_EQ(report->level(), RUN_TO_RUN);
}

TEST_F(JobManagerTest, SameWorkerJobFailsNamingTheVanishedWorker) {
  FakeWorker* a = Connect("a", "class-x", /*slots=*/2);
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(2, SAME_WORKER, CANONICAL);
  auto job = jobs_->Submit(req);
  ASSERT_EQ(a->TakeAssignments().size(), 2u);
  registry_->Disconnect(a->id, a->session, "killed");
  Connect("c", "class-y");  // another class does not count
  now_ += kLeaseMs + 1;
  jobs_->Sweep();
  now_ += kPinnedWaitMs;
  jobs_->Sweep();
  now_ += 1;
  jobs_->Sweep();
  jobs_->WaitForVerdicts();
  auto done = jobs_->GetJob(job->job_id());
  EXPECT_EQ(done->state(), JOB_FAILED);
  EXPECT_THAT(done->failure_reason(),
              HasSubstr("worker " + a->id + " (SAME_WORKER) vanished"));
  EXPECT_EQ(jobs_->GetReport(job->job_id())->verdict(), FAILED);
}

// --- Finding 10: no acknowledgement without a committed write -------------

TEST_F(JobManagerTest, ResultIsNotAcknowledgedWhenTheStoreRefusesIt) {
  FakeWorker* a = Connect("a", "class-x", /*slots=*/2);
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(1, SAME_WORKER, CANONICAL);
  auto job = jobs_->Submit(req);
  auto runs = a->TakeAssignments();
  ASSERT_EQ(runs.size(), 1u);
  const std::string digest = Execute(a, runs[0], -1, -1, /*finish=*/false);
  RunFinished f;
  f.set_run_id(runs[0].run_id());
  f.set_attempt(1);
  f.set_success(true);
  f.set_run_digest(digest);
  ASSERT_THAT(store_->SetReadOnlyForTesting(true), IsOk());
  EXPECT_THAT(jobs_->OnRunFinished(a->id, f),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("could not be stored")));
  ASSERT_THAT(store_->SetReadOnlyForTesting(false), IsOk());
  EXPECT_EQ(store_->GetJob(job->job_id())->value().runs(0).state(),
            RUN_RUNNING);
  EXPECT_EQ(jobs_->GetJob(job->job_id())->runs(0).state(), RUN_RUNNING);
  // The worker resends; now it is recorded and acknowledged.
  ASSERT_THAT(jobs_->OnRunFinished(a->id, f), IsOk());
  jobs_->WaitForVerdicts();
  EXPECT_EQ(store_->GetJob(job->job_id())->value().runs(0).state(),
            RUN_SUCCEEDED);
  EXPECT_EQ(jobs_->GetJob(job->job_id())->state(), JOB_SUCCEEDED);
}

// A result that overtakes batches the store refused (the database was
// full): the worker still holds them, so the result is refused as
// retryable, naming where to resend from, and the attempt is neither
// judged nor re-queued; once the batches are stored the resent result is
// recorded.
TEST_F(JobManagerTest, ResultAheadOfItsBatchesWaitsForThem) {
  FakeWorker* a = Connect("a", "class-x", /*slots=*/2);
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(1, SAME_WORKER, CANONICAL);
  auto job = jobs_->Submit(req);
  auto runs = a->TakeAssignments();
  ASSERT_EQ(runs.size(), 1u);
  const int steps = runs[0].manifest().steps();
  ASSERT_GE(steps, 3);
  const std::string digest =
      Execute(a, runs[0], -1, -1, /*finish=*/false, /*sent_steps=*/steps - 2);
  RunFinished f;
  f.set_run_id(runs[0].run_id());
  f.set_attempt(1);
  f.set_success(true);
  f.set_run_digest(digest);
  f.set_batches(steps);
  EXPECT_THAT(
      jobs_->OnRunFinished(a->id, f),
      StatusIs(absl::StatusCode::kUnavailable,
               HasSubstr(absl::StrFormat(
                   "sent %d batches, %d are stored; resend the batches from "
                   "sequence %d",
                   steps, steps - 2, steps - 2))));
  EXPECT_EQ(store_->GetJob(job->job_id())->value().runs(0).state(),
            RUN_RUNNING);
  EXPECT_EQ(jobs_->GetJob(job->job_id())->runs(0).attempt(), 1);
  // The worker resends the refused batches, then the result.
  for (int step = steps - 2; step < steps; ++step) {
    hash::Fingerprint d;
    ASSERT_THAT(jobs_->OnBatch(a->id, StepBatch(runs[0], step, -1, -1, &d)),
                IsOk());
  }
  ASSERT_THAT(jobs_->OnRunFinished(a->id, f), IsOk());
  jobs_->WaitForVerdicts();
  EXPECT_EQ(store_->GetJob(job->job_id())->value().runs(0).state(),
            RUN_SUCCEEDED);
  EXPECT_EQ(jobs_->GetJob(job->job_id())->state(), JOB_SUCCEEDED);
}

TEST_F(JobManagerTest, VerdictThatCannotBeStoredIsRetried) {
  FakeWorker* a = Connect("a", "class-x", /*slots=*/2);
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(2, SAME_WORKER, CANONICAL);
  auto job = jobs_->Submit(req);
  auto runs = a->TakeAssignments();
  ASSERT_EQ(runs.size(), 2u);
  Execute(a, runs[0]);
  const std::string digest = Execute(a, runs[1], -1, -1, /*finish=*/false);
  RunFinished f;
  f.set_run_id(runs[1].run_id());
  f.set_attempt(1);
  f.set_success(true);
  f.set_run_digest(digest);
  ASSERT_THAT(jobs_->OnRunFinished(a->id, f), IsOk());
  // The store refuses writes before the verdict is judged... or after: in
  // either case the job is not finished until its verdict is stored.
  ASSERT_THAT(store_->SetReadOnlyForTesting(true), IsOk());
  jobs_->WaitForVerdicts();
  const bool stored_before = store_->GetJobReport(job->job_id())->has_value();
  jobs_->Sweep();
  jobs_->WaitForVerdicts();
  ASSERT_THAT(store_->SetReadOnlyForTesting(false), IsOk());
  if (!stored_before) {
    EXPECT_EQ(jobs_->GetJob(job->job_id())->state(), JOB_RUNNING);
  }
  jobs_->Sweep();
  jobs_->WaitForVerdicts();
  EXPECT_EQ(jobs_->GetJob(job->job_id())->state(), JOB_SUCCEEDED);
  EXPECT_TRUE(store_->GetJobReport(job->job_id())->has_value());
  EXPECT_EQ(store_->GetJob(job->job_id())->value().state(), JOB_SUCCEEDED);
}

// --- Finding 12: comparisons only between comparable runs ------------------

TEST_F(JobManagerTest, RunsOfDifferentConfigsAreIncomparable) {
  FakeWorker* a = Connect("a", "class-x", /*slots=*/2);
  std::vector<std::string> run_ids;
  for (int seed : {7, 8}) {
    SubmitJobRequest req;
    *req.mutable_spec() = MlpSpec(1, SAME_WORKER, CANONICAL);
    req.mutable_spec()->mutable_config()->set_seed(seed);
    auto job = jobs_->Submit(req);
    ASSERT_THAT(job, IsOk());
    auto runs = a->TakeAssignments();
    ASSERT_EQ(runs.size(), 1u);
    Execute(a, runs[0], seed == 8 ? 1 : -1, 2);
    run_ids.push_back(runs[0].run_id());
  }
  auto cmp = jobs_->CompareRuns(run_ids[0], run_ids[1]);
  ASSERT_THAT(cmp, IsOk());
  EXPECT_THAT(cmp->incomparable_reason(),
              HasSubstr("config differs: seed: 7 vs 8"));
  EXPECT_FALSE(cmp->identical());
  EXPECT_FALSE(cmp->has_divergence());
}

TEST_F(JobManagerTest, CancelIsNotAcknowledgedUntilTheStoreHasIt) {
  FakeWorker* a = Connect("a", "class-x");
  SubmitJobRequest req;
  *req.mutable_spec() = MlpSpec(1, SAME_WORKER, CANONICAL);
  auto job = jobs_->Submit(req);
  ASSERT_THAT(job, IsOk());
  ASSERT_EQ(a->TakeAssignments().size(), 1u);
  ASSERT_THAT(store_->SetReadOnlyForTesting(true), IsOk());
  EXPECT_THAT(jobs_->Cancel(job->job_id(), "stop"),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("has not stored it yet")));
  ASSERT_THAT(store_->SetReadOnlyForTesting(false), IsOk());
  // The queued writes land at the next sweep, in order.
  jobs_->Sweep();
  jobs_->WaitForVerdicts();
  EXPECT_EQ(store_->GetJob(job->job_id())->value().state(), JOB_CANCELLED);
  EXPECT_EQ(jobs_->GetReport(job->job_id())->verdict(), INCONCLUSIVE);
}

}  // namespace
}  // namespace lockstep::server
