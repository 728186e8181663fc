// End to end with real binaries on loopback: jobs from submission to
// verdict, certificates, `lockstep check` exit codes, and recovery from a
// worker and a coordinator killed mid-job.
#include <signal.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"

namespace lockstep {
namespace {

using ::lockstep::testing::Cluster;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::PollUntil;
using ::lockstep::testing::ReadFileOrEmpty;
using ::lockstep::testing::RunCommand;
using ::lockstep::testing::Subprocess;
using ::lockstep::testing::TempDir;
using ::testing::HasSubstr;

const std::vector<std::string> kCoordinatorFlags = {
    "--heartbeat_interval_ms=200", "--heartbeat_timeout_ms=2000",
    "--lease_ms=3000"};

class JobsE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir() + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::string mk = "mkdir -p " + dir_;
    ASSERT_EQ(std::system(mk.c_str()), 0);
    cluster_ = std::make_unique<Cluster>(dir_);
    flags_ = kCoordinatorFlags;
    flags_.push_back("--zoo_dir=" + cluster_->Runfile("examples"));
    ASSERT_GT(cluster_->StartCoordinator(0, flags_), 0);
    mlp_model_ = cluster_->Runfile("examples/mlp/model.json");
    mlp_config_ = cluster_->Runfile("examples/mlp/config.json");
    lenet_model_ = cluster_->Runfile("examples/lenet5/model.json");
    // A longer LeNet run that fingerprints every step, so there is time to
    // kill something in the middle.
    lenet_long_ = dir_ + "/lenet_long.json";
    std::ofstream(lenet_long_)
        << "{\"seed\": 11, \"batch_size\": 16, \"steps\": 80, "
           "\"optimizer\": {\"kind\": \"MOMENTUM\", \"learning_rate\": 0.05, "
           "\"momentum\": 0.9}, \"determinism\": \"CANONICAL\"}";
  }

  void TearDown() override {
    if (HasFailure()) std::printf("%s\n", cluster_->Logs().c_str());
  }

  template <typename M>
  M ParseJson(const std::string& text) {
    M m;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(text, &m).ok())
        << text;
    return m;
  }

  std::string Submit(const std::vector<std::string>& args) {
    std::vector<std::string> full = {"submit"};
    full.insert(full.end(), args.begin(), args.end());
    full.push_back("--json");
    auto r = cluster_->Cli(full);
    EXPECT_THAT(r, IsOk());
    EXPECT_EQ(r->exit_code, 0) << r->err;
    return ParseJson<v1::Job>(r->out).job_id();
  }

  // Flags that make a worker a simulated machine of its own (its own
  // machine id, so its own device): several devices on one host.
  std::vector<std::string> OwnMachine(const std::string& name) {
    const std::string path = dir_ + "/" + name + ".machine-id";
    std::ofstream(path) << "simulated-machine-" << name << "\n";
    return {"--machine_id_file=" + path};
  }

  void WaitConnected(const std::vector<std::string>& names) {
    ASSERT_TRUE(PollUntil(absl::Seconds(30), [&] {
      for (const auto& n : names) {
        if (!cluster_->IsConnected(n)) return false;
      }
      return true;
    }));
  }

  bool XmlIsValid(const std::string& path) {
    auto r = RunCommand(
        {"/usr/bin/python3", "-c",
         "import sys, xml.etree.ElementTree as E; "
         "r = E.parse(sys.argv[1]).getroot(); "
         "assert r.tag == 'testsuites' and len(r.findall('.//testcase')) == 2",
         path},
        absl::Seconds(30));
    return r.ok() && r->exit_code == 0;
  }

  std::vector<std::string> flags_;
  std::string dir_, mlp_model_, mlp_config_, lenet_model_, lenet_long_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(JobsE2E, CanonicalJobOverTwoWorkersIsCertified) {
  // Two machines (simulated): CROSS_DEVICE needs two distinct devices.
  cluster_->StartWorker("w1", OwnMachine("w1"));
  cluster_->StartWorker("w2", OwnMachine("w2"));
  WaitConnected({"w1", "w2"});
  const std::string job =
      Submit({mlp_model_, mlp_config_, "--runs=3", "--scope=same_class"});
  auto watch = cluster_->Cli({"watch", job});
  ASSERT_THAT(watch, IsOk());
  ASSERT_EQ(watch->exit_code, 0) << watch->out << watch->err;
  EXPECT_THAT(watch->out, HasSubstr("REPRODUCIBLE at CROSS_DEVICE"));
  EXPECT_THAT(watch->out, HasSubstr("50/50 steps"));

  auto report = cluster_->Cli({"report", job, "--json"});
  ASSERT_THAT(report, IsOk());
  auto r = ParseJson<v1::Report>(report->out);
  EXPECT_EQ(r.verdict(), v1::REPRODUCIBLE);
  EXPECT_EQ(r.level(), v1::CROSS_DEVICE);
  EXPECT_EQ(r.run_digests_size(), 3);
  std::set<std::string> digests;
  for (const auto& [run, d] : r.run_digests()) digests.insert(d);
  EXPECT_EQ(digests.size(), 1u);

  auto certs = cluster_->Cli({"certificates", "--json"});
  ASSERT_THAT(certs, IsOk());
  auto list = ParseJson<v1::ListCertificatesResponse>(certs->out);
  std::set<v1::Level> levels;
  for (const auto& c : list.certificates()) {
    levels.insert(c.level());
    EXPECT_EQ(c.golden_run_digest(), *digests.begin());
    EXPECT_EQ(c.evidence_job_ids(0), job);
    EXPECT_THAT(c.hardware_class(), HasSubstr("lockstep-class/v"));
    EXPECT_THAT(c.hardware_class(), HasSubstr("|cpu="));
  }
  EXPECT_EQ(levels, (std::set<v1::Level>{v1::RUN_TO_RUN, v1::CROSS_DEVICE}));
}

TEST_F(JobsE2E, CheckExitCodesAndJUnit) {
  cluster_->StartWorker("good-a1", {"--labels=pool=a"});
  cluster_->StartWorker("good-a2", {"--labels=pool=a"});
  cluster_->StartWorker("good-b", {"--labels=pool=b"});
  cluster_->StartWorker("faulty-b",
                        {"--labels=pool=b", "--allow_drills",
                         "--inject_fault=step=1,layer=fc2,role=ACTIVATION,"
                         "bit=22"});
  WaitConnected({"good-a1", "good-a2", "good-b", "faulty-b"});

  // 0: reproducible (and it becomes the golden job through its label).
  const std::string junit0 = dir_ + "/check0.xml";
  auto c0 = cluster_->Cli({"check", mlp_model_, mlp_config_, "--runs=2",
                           "--scope=same_class", "--worker_labels=pool=a",
                           "--labels=golden=main", "--junit=" + junit0});
  ASSERT_THAT(c0, IsOk());
  EXPECT_EQ(c0->exit_code, 0) << c0->out << c0->err;
  EXPECT_THAT(c0->out, HasSubstr("check: PASS"));
  EXPECT_TRUE(XmlIsValid(junit0)) << ReadFileOrEmpty(junit0);

  // 0 again against the golden label: unchanged.
  auto c0b = cluster_->Cli({"check", mlp_model_, mlp_config_, "--runs=2",
                            "--scope=same_class", "--worker_labels=pool=a",
                            "--golden=golden=main", "--json"});
  ASSERT_THAT(c0b, IsOk());
  EXPECT_EQ(c0b->exit_code, 0) << c0b->out << c0b->err;
  EXPECT_THAT(c0b->out, HasSubstr("\"outcome\": \"reproducible\""));

  // 1: one of the two workers flips a bit of fc2's output at step 1.
  const std::string junit1 = dir_ + "/check1.xml";
  auto c1 = cluster_->Cli({"check", mlp_model_, mlp_config_, "--runs=2",
                           "--scope=same_class", "--worker_labels=pool=b",
                           "--junit=" + junit1});
  ASSERT_THAT(c1, IsOk());
  EXPECT_EQ(c1->exit_code, 1) << c1->out << c1->err;
  EXPECT_THAT(c1->out, HasSubstr("first divergence: step 1, layer \"fc2\", "
                                 "PHASE_FORWARD ACTIVATION"));
  EXPECT_TRUE(XmlIsValid(junit1));
  EXPECT_THAT(ReadFileOrEmpty(junit1),
              HasSubstr("<failure message=\"nondeterministic at layer "
                        "&quot;fc2&quot;"));

  // 2: reproducible, but not the golden digest.
  const std::string junit2 = dir_ + "/check2.xml";
  auto c2 = cluster_->Cli({"check", mlp_model_, mlp_config_, "--runs=2",
                           "--scope=same_class", "--worker_labels=pool=a",
                           "--golden=0123456789abcdef0123456789abcdef",
                           "--junit=" + junit2});
  ASSERT_THAT(c2, IsOk());
  EXPECT_EQ(c2->exit_code, 2) << c2->out << c2->err;
  EXPECT_THAT(c2->out, HasSubstr("numerics changed"));
  EXPECT_TRUE(XmlIsValid(junit2));

  // 3: the job cannot run (a model the coordinator refuses).
  const std::string bad = dir_ + "/bad_model.json";
  std::ofstream(bad) << "{\"name\": \"bad\", \"input_shape\": [8], "
                        "\"num_classes\": 3, \"layers\": [{\"name\": \"fc\", "
                        "\"op\": \"DENSE\", \"dense\": {\"units\": 0}}]}";
  const std::string junit3 = dir_ + "/check3.xml";
  auto c3 = cluster_->Cli({"check", bad, mlp_config_, "--junit=" + junit3});
  ASSERT_THAT(c3, IsOk());
  EXPECT_EQ(c3->exit_code, 3) << c3->out << c3->err;
  EXPECT_THAT(c3->err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_TRUE(XmlIsValid(junit3));
  EXPECT_THAT(ReadFileOrEmpty(junit3), HasSubstr("<error"));
}

TEST_F(JobsE2E, WorkerKilledMidRunIsRetriedElsewhere) {
  // Runs pause 2 s at step 5 (a drill), so "mid-run" does not depend on
  // how fast the kernels are.
  cluster_->StartWorker("w1",
                        {"--allow_drills", "--inject_stall=step=5,seconds=2"});
  cluster_->StartWorker("w2",
                        {"--allow_drills", "--inject_stall=step=5,seconds=2"});
  WaitConnected({"w1", "w2"});
  const std::string job =
      Submit({lenet_model_, lenet_long_, "--runs=2", "--scope=same_class"});
  std::string victim_run, victim_worker;
  ASSERT_TRUE(PollUntil(absl::Seconds(60), [&] {
    auto j = cluster_->GetJob(job);
    if (!j.ok()) return false;
    for (const auto& r : j->runs()) {
      if (r.state() == v1::RUN_RUNNING && r.steps_done() >= 3) {
        victim_run = r.run_id();
        victim_worker = r.worker_id();
        return true;
      }
    }
    return false;
  }));
  std::string victim_name;
  const v1::ListWorkersResponse workers = cluster_->Workers(false);
  for (const auto& w : workers.workers()) {
    if (w.worker_id() == victim_worker) victim_name = w.name();
  }
  ASSERT_FALSE(victim_name.empty());
  cluster_->worker(victim_name)->Signal(SIGKILL);
  cluster_->worker(victim_name)->Wait(absl::Seconds(10));

  auto watch = cluster_->Cli({"watch", job, "--wait_timeout_ms=120000"});
  ASSERT_THAT(watch, IsOk());
  ASSERT_EQ(watch->exit_code, 0) << watch->out << watch->err;
  EXPECT_THAT(watch->out, HasSubstr("REPRODUCIBLE"));
  EXPECT_THAT(watch->out, HasSubstr("re-queued as attempt 2"));
  auto final_job = cluster_->GetJob(job);
  ASSERT_THAT(final_job, IsOk());
  for (const auto& r : final_job->runs()) {
    EXPECT_EQ(r.state(), v1::RUN_SUCCEEDED);
    if (r.run_id() == victim_run) {
      EXPECT_EQ(r.attempt(), 2);
      EXPECT_NE(r.worker_id(), victim_worker);
      EXPECT_THAT(r.failure_reason(), HasSubstr("lease expired"));
    }
  }
}

TEST_F(JobsE2E, CoordinatorKilledMidJobLosesNothing) {
  const int port =
      std::stoi(cluster_->address().substr(cluster_->address().rfind(':') + 1));
  // Runs pause 1 s at step 8 (a drill): the coordinator dies before the
  // pause and comes back after it, so the worker trains on while it is
  // down and must resend what was not acknowledged.
  cluster_->StartWorker(
      "w1", {"--slots=2", "--allow_drills", "--inject_stall=step=8,seconds=1"});
  WaitConnected({"w1"});
  const std::string job =
      Submit({lenet_model_, lenet_long_, "--runs=2", "--scope=same_worker"});
  ASSERT_TRUE(PollUntil(absl::Seconds(60), [&] {
    auto j = cluster_->GetJob(job);
    if (!j.ok()) return false;
    for (const auto& r : j->runs()) {
      if (r.steps_done() < 5) return false;
    }
    return true;
  }));
  cluster_->coordinator()->Signal(SIGKILL);
  cluster_->coordinator()->Wait(absl::Seconds(10));
  absl::SleepFor(absl::Milliseconds(2500));  // the worker keeps training
  const int64_t restarted_ms = absl::ToUnixMillis(absl::Now());
  ASSERT_EQ(cluster_->StartCoordinator(port, flags_), port);

  auto watch = cluster_->Cli({"watch", job, "--wait_timeout_ms=120000"});
  ASSERT_THAT(watch, IsOk());
  ASSERT_EQ(watch->exit_code, 0) << watch->out << watch->err;
  EXPECT_THAT(watch->out, HasSubstr("REPRODUCIBLE"));
  auto final_job = cluster_->GetJob(job);
  ASSERT_THAT(final_job, IsOk());
  for (const auto& r : final_job->runs()) {
    EXPECT_EQ(r.state(), v1::RUN_SUCCEEDED);
    // Nothing was re-run: every acknowledged batch survived the restart and
    // the worker resent the rest.
    EXPECT_EQ(r.attempt(), 1) << r.failure_reason();
    // The runs ended while the coordinator was down: their results (and
    // the batches not acknowledged before the kill) reached it only
    // because the worker resent them after reconnecting.
    EXPECT_GE(r.finished_unix_ms(), restarted_ms);
  }
}

TEST_F(JobsE2E, AuditNamesTheFaultyWorkerAndQuarantinesIt) {
  // Four machines (simulated): a majority needs at least 3 distinct
  // devices.
  for (const char* name : {"node-1", "node-2", "node-4"}) {
    cluster_->StartWorker(name, OwnMachine(name));
  }
  std::vector<std::string> faulty = OwnMachine("node-3");
  faulty.push_back("--allow_drills");
  faulty.push_back("--inject_fault=step=1,layer=fc2,role=ACTIVATION,bit=22");
  cluster_->StartWorker("node-3", faulty);
  WaitConnected({"node-1", "node-2", "node-3", "node-4"});
  auto r = cluster_->Cli({"audit", "start", "mlp", "--quarantine", "--json"});
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->exit_code, 0) << r->out << r->err;
  auto audit = ParseJson<v1::Audit>(r->out);
  EXPECT_EQ(audit.state(), v1::AUDIT_DONE) << audit.summary();
  ASSERT_EQ(audit.workers_size(), 4);
  std::map<std::string, std::string> names;
  const v1::ListWorkersResponse workers = cluster_->Workers(true);
  for (const auto& w : workers.workers()) names[w.worker_id()] = w.name();
  for (const auto& w : audit.workers()) {
    EXPECT_EQ(w.worker_name(), names[w.worker_id()]);
    if (names[w.worker_id()] == "node-3") {
      EXPECT_EQ(w.health(), v1::OUTLIER);
      EXPECT_TRUE(w.quarantined());
      EXPECT_EQ(w.divergence().step(), 1);
      EXPECT_EQ(w.divergence().tensor().layer(), "fc2");
      EXPECT_EQ(w.divergence().tensor().role(), v1::ACTIVATION);
    } else {
      EXPECT_EQ(w.health(), v1::HEALTHY) << names[w.worker_id()];
      EXPECT_FALSE(w.quarantined());
    }
  }
  ASSERT_EQ(audit.classes_size(), 1);
  EXPECT_EQ(audit.classes(0).agreeing(), 3);
  for (const auto& w : workers.workers()) {
    EXPECT_EQ(w.admin_state() == v1::QUARANTINED, w.name() == "node-3")
        << w.name();
  }
  // The audit is listed, and the text rendering names the outlier.
  auto show = cluster_->Cli({"audit", "show", audit.audit_id()});
  ASSERT_THAT(show, IsOk());
  EXPECT_THAT(show->out, HasSubstr("OUTLIER"));
  EXPECT_THAT(show->out, HasSubstr("node-3 (w-"));
  EXPECT_THAT(show->out, HasSubstr("layer \"fc2\", PHASE_FORWARD ACTIVATION"));
  auto list = cluster_->Cli({"audit", "list"});
  ASSERT_THAT(list, IsOk());
  EXPECT_THAT(list->out, HasSubstr(audit.audit_id()));
}

// The run process, not the daemon, dies or hangs: the run is reported
// FAILED with the signal or the timeout, retried, and the daemon goes on.
TEST_F(JobsE2E, KilledOrHangingRunProcessIsReportedAndTheDaemonGoesOn) {
  // Every LeNet run stalls for 30 s before step 2 (a drill); the run
  // timeout is 2 s.
  Subprocess* w = cluster_->StartWorker(
      "w1", {"--run_timeout_s=2", "--allow_drills",
             "--inject_stall=step=2,seconds=30,model=lenet5"});
  WaitConnected({"w1"});
  // 1. Kill the run process of the first attempt.
  const std::string job =
      Submit({lenet_model_, lenet_long_, "--runs=1", "--scope=same_worker"});
  std::string child;
  ASSERT_TRUE(PollUntil(absl::Seconds(60), [&] {
    auto j = cluster_->GetJob(job);
    if (!j.ok() || j->runs(0).steps_done() < 2) return false;
    auto ps = RunCommand({"/usr/bin/pgrep", "-P", std::to_string(w->pid())},
                         absl::Seconds(10));
    if (!ps.ok() || ps->exit_code != 0) return false;
    child = std::string(absl::StripAsciiWhitespace(ps->out));
    return !child.empty() && child.find('\n') == std::string::npos;
  }));
  ASSERT_EQ(kill(std::stoi(child), SIGKILL), 0);
  // The kill is reported with the signal, and a fresh attempt follows.
  ASSERT_TRUE(PollUntil(absl::Seconds(30), [&] {
    auto j = cluster_->GetJob(job);
    return j.ok() && j->runs(0).attempt() >= 2 &&
           j->runs(0).failure_reason().find("killed by signal 9") !=
               std::string::npos;
  })) << cluster_->GetJob(job)->DebugString();
  // 2. Every later attempt stalls past the run timeout; after three
  //    attempts the job fails with the reason.
  auto watch = cluster_->Cli({"watch", job, "--wait_timeout_ms=120000"});
  ASSERT_THAT(watch, IsOk());
  EXPECT_EQ(watch->exit_code, 3) << watch->out;
  EXPECT_THAT(watch->out, HasSubstr("timeout: killed after 2 s"));
  EXPECT_THAT(watch->out, HasSubstr("stall drill"));  // the stderr tail
  auto failed = cluster_->GetJob(job);
  ASSERT_THAT(failed, IsOk());
  EXPECT_EQ(failed->state(), v1::JOB_FAILED);
  EXPECT_THAT(failed->failure_reason(), HasSubstr("failed after 3 attempts"));
  // 3. The same daemon takes the next run and completes it.
  EXPECT_TRUE(cluster_->IsConnected("w1"));
  const std::string next =
      Submit({mlp_model_, mlp_config_, "--runs=2", "--scope=same_worker"});
  auto done = cluster_->Cli({"watch", next, "--wait_timeout_ms=120000"});
  ASSERT_THAT(done, IsOk());
  EXPECT_EQ(done->exit_code, 0) << done->out << done->err;
  EXPECT_THAT(done->out, HasSubstr("REPRODUCIBLE"));
}

TEST_F(JobsE2E, HostileRequestsChangeNothing) {
  auto stub = cluster_->Stub();
  auto call = [&](auto method, const auto& req, auto* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    return ((*stub).*method)(&ctx, req, resp);
  };
  v1::SubmitJobRequest submit;
  submit.mutable_spec()->mutable_model()->set_name("x");
  submit.mutable_spec()->mutable_config()->set_determinism(
      static_cast<v1::DeterminismMode>(77));
  v1::Job job;
  grpc::Status s = call(&v1::Lockstep::Stub::SubmitJob, submit, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("spec.config.batch_size: 0 is outside 1..4096"));

  v1::ListJobsRequest list;
  list.set_page_size(100000);
  v1::ListJobsResponse jobs;
  s = call(&v1::Lockstep::Stub::ListJobs, list, &jobs);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("page_size: 100000"));

  v1::CompareRunsRequest cmp;
  cmp.set_run_a("job-nope-r00");
  cmp.set_run_b("job-nope-r01");
  v1::CompareRunsResponse cmp_resp;
  s = call(&v1::Lockstep::Stub::CompareRuns, cmp, &cmp_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);

  v1::GetReportRequest rep;
  rep.set_job_id("job-nope");
  v1::Report report;
  s = call(&v1::Lockstep::Stub::GetReport, rep, &report);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);

  list.set_page_size(0);
  s = call(&v1::Lockstep::Stub::ListJobs, list, &jobs);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
}

}  // namespace
}  // namespace lockstep
