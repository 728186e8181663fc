// ListJobs over a real (in-memory) store: the golden lookup answered from
// the verdict index, the config, verdict and exclusion filters, and their
// validation.
#include "server/job_queries.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "common/digest.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/store/store.h"

namespace lockstep::server {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kModel1 = Digest128Hex("model 1");
const std::string kModel2 = Digest128Hex("model 2");
const std::string kConfig1 = Digest128Hex("config 1");
const std::string kConfig2 = Digest128Hex("config 2");

std::vector<std::string> Ids(const v1::ListJobsResponse& r) {
  std::vector<std::string> ids;
  for (const v1::Job& j : r.jobs()) ids.push_back(j.job_id());
  return ids;
}

class JobQueriesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::StoreOptions o;
    o.path = ":memory:";
    store_ = std::move(store::Store::Open(o).value());
    queries_ = std::make_unique<JobQueries>(store_.get(), [] { return 0; });
  }

  // Stores a finished job labelled golden=`label` with its verdict, as the
  // scheduler does when a job finishes.
  void Finish(const std::string& id, const std::string& model,
              const std::string& config, const std::string& label,
              v1::Verdict verdict) {
    v1::Job job;
    job.set_job_id(id);
    job.set_state(verdict == v1::FAILED ? v1::JOB_FAILED : v1::JOB_SUCCEEDED);
    job.set_model_digest(model);
    job.set_config_digest(config);
    job.set_created_unix_ms(++created_ms_);
    job.set_finished_unix_ms(created_ms_);
    job.mutable_spec()->mutable_model()->set_name("mlp");
    (*job.mutable_spec()->mutable_labels())["golden"] = label;
    ASSERT_THAT(store_->InsertJob(job, v1::TensorManifest(), ""), IsOk());
    v1::Report report;
    report.set_job_id(id);
    report.set_verdict(verdict);
    ASSERT_THAT(store_->FinishJob(job, report, {}), IsOk());
  }

  v1::ListJobsRequest Golden(const std::string& exclude = "") {
    v1::ListJobsRequest req;
    req.set_page_size(1);
    (*req.mutable_labels())["golden"] = "main";
    req.set_model_digest(kModel1);
    req.set_config_digest(kConfig1);
    req.set_verdict(v1::REPRODUCIBLE);
    req.set_exclude_job_id(exclude);
    return req;
  }

  int64_t created_ms_ = 1000;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<JobQueries> queries_;
};

TEST_F(JobQueriesTest, GoldenLookupFindsTheReferenceBeyondTheFirstPage) {
  Finish("j-ref", kModel1, kConfig1, "main", v1::REPRODUCIBLE);
  // 1,200 newer jobs of the label, none a valid reference for model 1 and
  // config 1: a scan of the newest pages would not reach j-ref.
  for (int i = 0; i < 1200; ++i) {
    const std::string id = absl::StrFormat("j-%04d", i);
    switch (i % 5) {
      case 0:
        Finish(id, kModel1, kConfig1, "main", v1::NONDETERMINISTIC);
        break;
      case 1:
        Finish(id, kModel1, kConfig1, "main", v1::FAILED);
        break;
      case 2:
        Finish(id, kModel1, kConfig2, "main", v1::REPRODUCIBLE);
        break;
      case 3:
        Finish(id, kModel2, kConfig1, "main", v1::REPRODUCIBLE);
        break;
      default:
        Finish(id, kModel1, kConfig1, "release", v1::REPRODUCIBLE);
    }
  }
  Finish("j-self", kModel1, kConfig1, "main", v1::REPRODUCIBLE);

  // One call of one job: the index, not a page of the newest jobs.
  auto found = queries_->ListJobs(Golden("j-self"));
  ASSERT_THAT(found, IsOk());
  EXPECT_THAT(Ids(*found), ElementsAre("j-ref"));
  // The next page (general path) has no older reference.
  v1::ListJobsRequest next = Golden("j-self");
  next.set_page_token(found->next_page_token());
  auto rest = queries_->ListJobs(next);
  ASSERT_THAT(rest, IsOk());
  EXPECT_TRUE(rest->jobs().empty());

  // Without the exclusion the check's own job is the newest reference.
  found = queries_->ListJobs(Golden());
  ASSERT_THAT(found, IsOk());
  EXPECT_THAT(Ids(*found), ElementsAre("j-self"));

  // A newer reproducible job of the same model and config wins.
  Finish("j-newer", kModel1, kConfig1, "main", v1::REPRODUCIBLE);
  found = queries_->ListJobs(Golden("j-self"));
  ASSERT_THAT(found, IsOk());
  EXPECT_THAT(Ids(*found), ElementsAre("j-newer"));
}

TEST_F(JobQueriesTest, GoldenLookupWithoutAReferenceIsEmpty) {
  Finish("j-1", kModel1, kConfig1, "main", v1::NONDETERMINISTIC);
  Finish("j-2", kModel1, kConfig2, "main", v1::REPRODUCIBLE);
  Finish("j-3", kModel2, kConfig1, "main", v1::REPRODUCIBLE);
  auto found = queries_->ListJobs(Golden());
  ASSERT_THAT(found, IsOk());
  EXPECT_TRUE(found->jobs().empty());
  EXPECT_TRUE(found->next_page_token().empty());
}

TEST_F(JobQueriesTest, ConfigVerdictAndExclusionFiltersOnEveryPage) {
  Finish("j-a", kModel1, kConfig1, "main", v1::REPRODUCIBLE);
  Finish("j-b", kModel1, kConfig1, "main", v1::NONDETERMINISTIC);
  Finish("j-c", kModel1, kConfig2, "main", v1::NONDETERMINISTIC);
  Finish("j-d", kModel1, kConfig1, "main", v1::NONDETERMINISTIC);
  Finish("j-e", kModel1, kConfig1, "main", v1::REPRODUCIBLE);
  Finish("j-f", kModel1, kConfig1, "main", v1::NONDETERMINISTIC);

  v1::ListJobsRequest req;
  req.set_page_size(1);
  req.set_config_digest(kConfig1);
  req.set_verdict(v1::NONDETERMINISTIC);
  req.set_exclude_job_id("j-d");
  std::vector<std::string> all;
  for (int page = 0; page < 20; ++page) {
    auto r = queries_->ListJobs(req);
    ASSERT_THAT(r, IsOk());
    for (const v1::Job& j : r->jobs()) all.push_back(j.job_id());
    if (r->next_page_token().empty()) break;
    req.set_page_token(r->next_page_token());
  }
  EXPECT_THAT(all, ElementsAre("j-f", "j-b"));

  req = v1::ListJobsRequest();
  req.set_config_digest(kConfig2);
  auto r = queries_->ListJobs(req);
  ASSERT_THAT(r, IsOk());
  EXPECT_THAT(Ids(*r), ElementsAre("j-c"));
}

TEST_F(JobQueriesTest, RefusesABadConfigDigestOrVerdict) {
  v1::ListJobsRequest req;
  req.set_config_digest("ABCDEF");
  EXPECT_THAT(queries_->ListJobs(req),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("config_digest: must be empty or 32")));
  req = v1::ListJobsRequest();
  req.set_config_digest(absl::AsciiStrToUpper(kConfig1));
  EXPECT_THAT(
      queries_->ListJobs(req),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("config_digest")));
  req = v1::ListJobsRequest();
  req.set_verdict(static_cast<v1::Verdict>(42));
  EXPECT_THAT(queries_->ListJobs(req),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("verdict: 42 is not a Verdict")));
}

}  // namespace
}  // namespace lockstep::server
