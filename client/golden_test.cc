// `check --golden=k=v`: the reference is the newest REPRODUCIBLE job of the
// same model and config carrying the label, wherever it is in the job list.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/client.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "lockstep/v1/lockstep_service.grpc.pb.h"

namespace lockstep::client {
namespace {

using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

// ListJobs (newest first, paged, filtered by state, model, config, labels,
// verdict and excluded job like the coordinator) over a fixed job list.
class FakeLockstep final : public v1::Lockstep::Service {
 public:
  void Add(const std::string& id, const std::string& model,
           const std::string& config, const std::string& label,
           v1::Verdict verdict) {
    v1::Job job;
    job.set_job_id(id);
    job.set_state(v1::JOB_SUCCEEDED);
    job.set_model_digest(model);
    job.set_config_digest(config);
    (*job.mutable_spec()->mutable_labels())["golden"] = label;
    v1::Run* run = job.add_runs();
    run->set_run_id(id + "-r0");
    run->set_state(v1::RUN_SUCCEEDED);
    run->set_run_digest(absl::StrFormat("%032d", jobs_.size()));
    jobs_.insert(jobs_.begin(), job);  // newest first
    verdicts_[id] = verdict;
  }

  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override {
    ++list_calls;
    last_request = *req;
    size_t start = 0;
    if (!req->page_token().empty() &&
        !absl::SimpleAtoi(req->page_token(), &start)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "page_token");
    }
    const size_t page = req->page_size() == 0 ? 50 : req->page_size();
    size_t i = start;
    for (; i < jobs_.size() && static_cast<size_t>(resp->jobs_size()) < page;
         ++i) {
      const v1::Job& j = jobs_[i];
      bool match = (req->state() == v1::JOB_STATE_UNSPECIFIED ||
                    j.state() == req->state()) &&
                   (req->model_digest().empty() ||
                    j.model_digest() == req->model_digest()) &&
                   (req->config_digest().empty() ||
                    j.config_digest() == req->config_digest()) &&
                   (req->verdict() == v1::VERDICT_UNSPECIFIED ||
                    verdicts_[j.job_id()] == req->verdict()) &&
                   j.job_id() != req->exclude_job_id();
      match = match || ignore_filters;
      for (const auto& [k, v] : req->labels()) {
        auto it = j.spec().labels().find(k);
        match = match && it != j.spec().labels().end() && it->second == v;
      }
      if (match) *resp->add_jobs() = j;
    }
    if (i < jobs_.size()) resp->set_next_page_token(absl::StrCat(i));
    return grpc::Status::OK;
  }

  int list_calls = 0;
  bool ignore_filters = false;  // as a coordinator without the filters
  v1::ListJobsRequest last_request;

 private:
  std::vector<v1::Job> jobs_;
  std::map<std::string, v1::Verdict> verdicts_;
};

class GoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ClientOptions o;
    o.coordinator = "in-process";
    client_ = std::make_unique<Client>(
        o, server_->InProcessChannel(grpc::ChannelArguments()));
  }
  void TearDown() override { server_->Shutdown(); }

  FakeLockstep fake_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(GoldenTest, NewestReproducibleJobOfTheSameModelAndConfig) {
  // The only valid reference is the oldest of 1,200 jobs of the label.
  fake_.Add("j-ref", "m1", "c1", "main", v1::REPRODUCIBLE);
  for (int i = 1; i < 1200; ++i) {
    const std::string id = absl::StrFormat("j-%04d", i);
    switch (i % 4) {
      case 0:  // same model and config, but not reproducible
        fake_.Add(id, "m1", "c1", "main", v1::NONDETERMINISTIC);
        break;
      case 1:  // another config (other seed or mode)
        fake_.Add(id, "m1", "c2", "main", v1::REPRODUCIBLE);
        break;
      case 2:  // another model
        fake_.Add(id, "m2", "c1", "main", v1::REPRODUCIBLE);
        break;
      default:  // another label value
        fake_.Add(id, "m1", "c1", "release", v1::REPRODUCIBLE);
    }
  }
  fake_.Add("j-self", "m1", "c1", "main", v1::REPRODUCIBLE);
  auto golden = client_->FindGoldenJob("golden", "main", "m1", "c1", "j-self");
  ASSERT_TRUE(golden.ok()) << golden.status();
  EXPECT_EQ(golden->job_id(), "j-ref");
  EXPECT_EQ(golden->runs(0).run_id(), "j-ref-r0");
  // One call, with every filter of a golden lookup.
  EXPECT_EQ(fake_.list_calls, 1);
  EXPECT_EQ(fake_.last_request.page_size(), 1);
  EXPECT_EQ(fake_.last_request.model_digest(), "m1");
  EXPECT_EQ(fake_.last_request.config_digest(), "c1");
  EXPECT_EQ(fake_.last_request.verdict(), v1::REPRODUCIBLE);
  EXPECT_EQ(fake_.last_request.exclude_job_id(), "j-self");
  ASSERT_EQ(fake_.last_request.labels_size(), 1);
  EXPECT_EQ(fake_.last_request.labels().at("golden"), "main");

  // With another reproducible job of the same model and config newer than
  // the first, that one is the reference.
  fake_.Add("j-newer", "m1", "c1", "main", v1::REPRODUCIBLE);
  golden = client_->FindGoldenJob("golden", "main", "m1", "c1", "j-self");
  ASSERT_TRUE(golden.ok()) << golden.status();
  EXPECT_EQ(golden->job_id(), "j-newer");
}

TEST_F(GoldenTest, NoQualifyingJobIsNotFound) {
  fake_.Add("j-1", "m1", "c1", "main", v1::NONDETERMINISTIC);
  fake_.Add("j-2", "m1", "c2", "main", v1::REPRODUCIBLE);
  fake_.Add("j-self", "m1", "c1", "main", v1::REPRODUCIBLE);
  EXPECT_THAT(
      client_->FindGoldenJob("golden", "main", "m1", "c1", "j-self"),
      StatusIs(absl::StatusCode::kNotFound,
               HasSubstr("no REPRODUCIBLE job carries the label golden=main "
                         "with model digest m1 and config digest c1")));
}

TEST_F(GoldenTest, AnAnswerOutsideTheFiltersIsRefused) {
  fake_.Add("j-ref", "m1", "c1", "main", v1::REPRODUCIBLE);
  fake_.Add("j-other", "m1", "c2", "main", v1::REPRODUCIBLE);
  fake_.Add("j-self", "m1", "c1", "main", v1::REPRODUCIBLE);
  fake_.ignore_filters = true;
  EXPECT_THAT(client_->FindGoldenJob("golden", "main", "m1", "c1", "j-self"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("does not support golden lookups")));
}

}  // namespace
}  // namespace lockstep::client
