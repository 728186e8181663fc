#include "server/submission.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::server {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

v1::SubmitJobRequest MlpRequest() {
  v1::SubmitJobRequest req;
  v1::Model* m = req.mutable_spec()->mutable_model();
  m->set_name("mlp");
  m->add_input_shape(8);
  m->set_num_classes(3);
  v1::Layer* l = m->add_layers();
  l->set_name("fc1");
  l->set_op(v1::DENSE);
  l->mutable_dense()->set_units(3);
  l = m->add_layers();
  l->set_name("loss");
  l->set_op(v1::SOFTMAX_XENT);
  v1::JobConfig* c = req.mutable_spec()->mutable_config();
  c->set_seed(1);
  c->set_batch_size(2);
  c->set_steps(4);
  c->mutable_optimizer()->set_kind(v1::SGD);
  c->mutable_optimizer()->set_learning_rate(0.1f);
  req.mutable_spec()->mutable_placement()->set_runs(3);
  return req;
}

TEST(SubmissionTest, ExpandsRunsAndDigestsWithoutSideEffects) {
  auto s = ExpandSubmission(MlpRequest(), SubmissionLimits(),
                            SubmissionSource::kPublic, "job-1", 42);
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->job.runs_size(), 3);
  EXPECT_EQ(s->job.runs(2).run_id(), "job-1-r02");
  EXPECT_EQ(s->job.created_unix_ms(), 42);
  EXPECT_EQ(s->job.model_digest(), ModelDigest(s->job.spec().model()));
  EXPECT_GT(s->manifest.entries_size(), 0);
  EXPECT_EQ(JobIdOfRun("job-1-r02"), "job-1");
}

TEST(SubmissionTest, ReservedLabelPrefixIsOnlyForTheCoordinator) {
  v1::SubmitJobRequest req = MlpRequest();
  (*req.mutable_spec()->mutable_labels())["lockstep.audit"] = "audit-x";
  EXPECT_THAT(ExpandSubmission(req, SubmissionLimits(),
                               SubmissionSource::kPublic, "job-1", 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("spec.labels: \"lockstep.audit\" uses the "
                                 "prefix \"lockstep.\"")));
  EXPECT_THAT(ExpandSubmission(req, SubmissionLimits(),
                               SubmissionSource::kInternal, "job-1", 0),
              IsOk());
}

TEST(SubmissionTest, LabelKeysAndValuesHaveLengthLimits) {
  v1::SubmitJobRequest req = MlpRequest();
  (*req.mutable_spec()->mutable_labels())[std::string(129, 'k')] = "v";
  EXPECT_THAT(ExpandSubmission(req, SubmissionLimits(),
                               SubmissionSource::kPublic, "job-1", 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("has 129 bytes; keys need 1 to 128")));
  req = MlpRequest();
  (*req.mutable_spec()->mutable_labels())[""] = "v";
  EXPECT_THAT(ExpandSubmission(req, SubmissionLimits(),
                               SubmissionSource::kPublic, "job-1", 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("spec.labels: key \"\" has 0 bytes")));
  req = MlpRequest();
  (*req.mutable_spec()->mutable_labels())["branch"] = std::string(257, 'v');
  EXPECT_THAT(ExpandSubmission(req, SubmissionLimits(),
                               SubmissionSource::kPublic, "job-1", 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("spec.labels[branch]: the value has 257 "
                                 "bytes, over the limit of 256")));
  req = MlpRequest();
  (*req.mutable_spec()->mutable_labels())[std::string(128, 'k')] =
      std::string(256, 'v');
  EXPECT_THAT(ExpandSubmission(req, SubmissionLimits(),
                               SubmissionSource::kPublic, "job-1", 0),
              IsOk());
}

TEST(SubmissionTest, FingerprintLimitsCountEntriesStepsAndRuns) {
  auto s = ExpandSubmission(MlpRequest(), SubmissionLimits(),
                            SubmissionSource::kPublic, "job-1", 0);
  ASSERT_THAT(s, IsOk());
  const int64_t count = int64_t{s->manifest.entries_size()} * 4 * 3;
  SubmissionLimits limits;
  limits.max_fingerprints_per_job = count;
  EXPECT_THAT(ExpandSubmission(MlpRequest(), limits, SubmissionSource::kPublic,
                               "job-1", 0),
              IsOk());
  limits.max_fingerprints_per_job = count - 1;
  EXPECT_THAT(ExpandSubmission(MlpRequest(), limits, SubmissionSource::kPublic,
                               "job-1", 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("would store " + std::to_string(count) +
                                 " fingerprints")));
  limits = SubmissionLimits();
  limits.max_fingerprint_bytes_per_job = count * StoredFingerprintBytes() - 1;
  EXPECT_THAT(ExpandSubmission(MlpRequest(), limits, SubmissionSource::kPublic,
                               "job-1", 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("bytes of fingerprints per job")));
  EXPECT_GE(StoredFingerprintBytes(), 40);
}

}  // namespace
}  // namespace lockstep::server
