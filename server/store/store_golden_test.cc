// Golden lookups: the newest REPRODUCIBLE job of a label, model and config,
// found through the job_verdict_labels index whatever the number of jobs.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/store/sqlite.h"
#include "server/store/store.h"

namespace lockstep::store {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::IsOkAndHolds;
using ::testing::HasSubstr;
using ::testing::Optional;

v1::Job MakeJob(const std::string& id, int64_t created,
                const std::string& model, const std::string& config,
                const std::string& label_value) {
  v1::Job job;
  job.set_job_id(id);
  job.set_state(v1::JOB_SUCCEEDED);
  job.set_model_digest(model);
  job.set_config_digest(config);
  job.set_created_unix_ms(created);
  job.mutable_spec()->mutable_model()->set_name("mlp");
  if (!label_value.empty()) {
    (*job.mutable_spec()->mutable_labels())["golden"] = label_value;
    (*job.mutable_spec()->mutable_labels())["team"] = "numerics";
  }
  return job;
}

class StoreGoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    path_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/golden.db");
    std::remove(path_.c_str());
    StoreOptions o;
    o.path = path_;
    o.synchronous = "NORMAL";
    store_ = std::move(Store::Open(o).value());
  }

  // Stores `job` as finished with `verdict` and indexes it.
  void Finish(const v1::Job& job, v1::Verdict verdict) {
    ASSERT_THAT(store_->InsertJob(job, v1::TensorManifest(), ""), IsOk());
    ASSERT_THAT(store_->IndexJobVerdict(job, verdict), IsOk());
  }

  absl::StatusOr<std::optional<std::string>> Find(
      const std::string& model, const std::string& config,
      const std::string& exclude = "") {
    return store_->FindGoldenJob("golden", "main", model, config, exclude);
  }

  std::string path_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreGoldenTest, MatchesModelConfigLabelAndReproducibleOnly) {
  Finish(MakeJob("j-old", 100, "m1", "c1", "main"), v1::REPRODUCIBLE);
  Finish(MakeJob("j-new", 200, "m1", "c1", "main"), v1::REPRODUCIBLE);
  // Newer, but not usable as a reference for m1/c1.
  Finish(MakeJob("j-nondet", 300, "m1", "c1", "main"), v1::NONDETERMINISTIC);
  Finish(MakeJob("j-incon", 310, "m1", "c1", "main"), v1::INCONCLUSIVE);
  Finish(MakeJob("j-failed", 320, "m1", "c1", "main"), v1::FAILED);
  Finish(MakeJob("j-model", 400, "m2", "c1", "main"), v1::REPRODUCIBLE);
  Finish(MakeJob("j-config", 500, "m1", "c2", "main"), v1::REPRODUCIBLE);
  Finish(MakeJob("j-label", 600, "m1", "c1", "other"), v1::REPRODUCIBLE);
  Finish(MakeJob("j-nolabel", 700, "m1", "c1", ""), v1::REPRODUCIBLE);

  EXPECT_THAT(Find("m1", "c1"), IsOkAndHolds(Optional(std::string("j-new"))));
  EXPECT_THAT(Find("m2", "c1"), IsOkAndHolds(Optional(std::string("j-model"))));
  EXPECT_THAT(Find("m1", "c2"),
              IsOkAndHolds(Optional(std::string("j-config"))));
  EXPECT_THAT(Find("m2", "c2"), IsOkAndHolds(std::nullopt));
  // The job being checked is never its own golden.
  EXPECT_THAT(Find("m1", "c1", "j-new"),
              IsOkAndHolds(Optional(std::string("j-old"))));
  // Any of a job's labels finds it (j-label also carries team=numerics).
  EXPECT_THAT(store_->FindGoldenJob("team", "numerics", "m1", "c1", ""),
              IsOkAndHolds(Optional(std::string("j-label"))));

  // Re-indexing replaces the job's rows: the stored verdict decides.
  ASSERT_THAT(store_->IndexJobVerdict(MakeJob("j-new", 200, "m1", "c1", "main"),
                                      v1::NONDETERMINISTIC),
              IsOk());
  EXPECT_THAT(Find("m1", "c1"), IsOkAndHolds(Optional(std::string("j-old"))));
  ASSERT_THAT(
      store_->IndexJobVerdict(MakeJob("j-nondet", 300, "m1", "c1", "main"),
                              v1::REPRODUCIBLE),
      IsOk());
  EXPECT_THAT(Find("m1", "c1"),
              IsOkAndHolds(Optional(std::string("j-nondet"))));
}

// Verdicts stored by FinishJob are indexed with them; the first verdict
// stands.
TEST_F(StoreGoldenTest, FinishJobIndexesTheStoredVerdict) {
  v1::Job job = MakeJob("j-1", 10, "m1", "c1", "main");
  job.set_state(v1::JOB_RUNNING);
  ASSERT_THAT(store_->InsertJob(job, v1::TensorManifest(), ""), IsOk());
  EXPECT_THAT(Find("m1", "c1"), IsOkAndHolds(std::nullopt));
  job.set_state(v1::JOB_SUCCEEDED);
  v1::Report report;
  report.set_job_id("j-1");
  report.set_verdict(v1::REPRODUCIBLE);
  ASSERT_THAT(store_->FinishJob(job, report, {}), IsOk());
  EXPECT_THAT(Find("m1", "c1"), IsOkAndHolds(Optional(std::string("j-1"))));
  report.set_verdict(v1::NONDETERMINISTIC);
  ASSERT_THAT(store_->FinishJob(job, report, {}), IsOk());
  EXPECT_THAT(Find("m1", "c1"), IsOkAndHolds(Optional(std::string("j-1"))));

  v1::Job other = MakeJob("j-2", 20, "m1", "c1", "main");
  other.set_state(v1::JOB_RUNNING);
  ASSERT_THAT(store_->InsertJob(other, v1::TensorManifest(), ""), IsOk());
  other.set_state(v1::JOB_SUCCEEDED);
  ASSERT_THAT(store_->FinishJob(other, report, {}), IsOk());  // NONDET
  EXPECT_THAT(Find("m1", "c1"), IsOkAndHolds(Optional(std::string("j-1"))));
}

// The only usable reference is older than 999 other jobs carrying the same
// label (the first 200-job page of ListJobs never reaches it).
TEST_F(StoreGoldenTest, FindsTheReferenceBeyondAThousandJobs) {
  Finish(MakeJob("j-0000", 1, "m1", "c1", "main"), v1::REPRODUCIBLE);
  for (int i = 1; i < 1000; ++i) {
    const std::string id = absl::StrFormat("j-%04d", i);
    // Newer jobs of the label: other configs, or not reproducible.
    if (i % 2 == 0) {
      Finish(MakeJob(id, 1 + i, "m1", absl::StrCat("c", i), "main"),
             v1::REPRODUCIBLE);
    } else {
      Finish(MakeJob(id, 1 + i, "m1", "c1", "main"), v1::NONDETERMINISTIC);
    }
  }
  EXPECT_THAT(Find("m1", "c1"), IsOkAndHolds(Optional(std::string("j-0000"))));
  JobQuery page;
  page.page_size = 200;
  auto first_page = store_->ListJobs(page);
  ASSERT_THAT(first_page, IsOk());
  for (const v1::Job& j : *first_page) EXPECT_NE(j.job_id(), "j-0000");
}

TEST_F(StoreGoldenTest, LookupIsAnIndexSeek) {
  Finish(MakeJob("j-1", 1, "m1", "c1", "main"), v1::REPRODUCIBLE);
  auto db = Database::Open(path_, false);
  ASSERT_THAT(db, IsOk());
  auto plan = (*db)->Prepare(
      "EXPLAIN QUERY PLAN SELECT job_id FROM job_verdict_labels WHERE "
      "label_key = ? AND label_value = ? AND model_digest = ? AND "
      "config_digest = ? AND verdict = ? AND job_id <> ? ORDER BY created_ms "
      "DESC, job_id DESC LIMIT 1");
  ASSERT_THAT(plan, IsOk());
  std::string details;
  while (true) {
    auto row = (*plan)->Step();
    ASSERT_THAT(row, IsOk());
    if (!*row) break;
    absl::StrAppend(&details, (*plan)->ColumnText(3), "\n");
  }
  // A seek on the primary key's five leading columns, read in key order
  // (no table scan, no sort).
  EXPECT_THAT(details,
              HasSubstr("SEARCH job_verdict_labels USING PRIMARY KEY "
                        "(label_key=? AND label_value=? AND model_digest=? "
                        "AND config_digest=? AND verdict=?)"))
      << details;
  EXPECT_THAT(details, ::testing::Not(HasSubstr("SCAN"))) << details;
  EXPECT_THAT(details, ::testing::Not(HasSubstr("TEMP B-TREE"))) << details;
}

}  // namespace
}  // namespace lockstep::store
