#include "server/quotas.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::server {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

TEST(QuotasTest, EachQuotaIsNamedAndReleasedWithItsJob) {
  QuotaOptions o;
  o.max_jobs = 2;
  o.max_runs = 5;
  o.max_fingerprint_bytes = 1000;
  Quotas q(o);
  EXPECT_THAT(q.Reserve("ci", "j1", 2, 400), IsOk());
  // Runs: 2 + 4 > 5.
  EXPECT_THAT(q.Reserve("ci", "j2", 4, 100),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("quota_runs: \"ci\" holds 2 in unfinished "
                                 "jobs and this job needs 4, over the quota "
                                 "of 5")));
  // Bytes: 400 + 700 > 1000.
  EXPECT_THAT(q.Reserve("ci", "j2", 1, 700),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("quota_fingerprint_bytes")));
  EXPECT_THAT(q.Reserve("ci", "j2", 3, 600), IsOk());
  // Jobs: a third one.
  EXPECT_THAT(
      q.Reserve("ci", "j3", 0, 0),
      StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("quota_jobs")));
  // Another principal has its own share.
  EXPECT_THAT(q.Reserve("dev", "j4", 5, 1000), IsOk());
  // A refusal charged nothing; a release gives the share back, once.
  q.Release("j1");
  q.Release("j1");
  EXPECT_THAT(q.Reserve("ci", "j3", 2, 400), IsOk());
  EXPECT_THAT(q.Reserve("ci", "j5", 0, 0),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST(QuotasTest, ZeroMeansNoQuota) {
  Quotas q{QuotaOptions()};
  for (int i = 0; i < 100; ++i) {
    EXPECT_THAT(q.Reserve("", "j" + std::to_string(i), 64, int64_t{1} << 40),
                IsOk());
  }
}

}  // namespace
}  // namespace lockstep::server
