#include "server/message_checks.h"

#include <string>

#include "common/digest.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/unknown_field_set.h"
#include "gtest/gtest.h"
#include "lockstep/v1/lockstep_service.pb.h"

namespace lockstep::server {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

void AddUnknown(google::protobuf::Message* m, int number) {
  m->GetReflection()->MutableUnknownFields(m)->AddVarint(number, 7);
}

v1::FingerprintBatch CompleteBatch(int fingerprints) {
  v1::FingerprintBatch b;
  b.set_run_id("r-1");
  b.set_attempt(1);
  b.set_sequence(0);
  b.set_step(0);
  for (int i = 0; i < fingerprints; ++i) b.add_fingerprints()->set_index(i);
  b.set_step_complete(true);
  b.set_step_digest(Digest128Hex("step 0"));
  return b;
}

TEST(MessageChecksTest, UnknownFieldsAreRefusedWithTheirPath) {
  v1::WorkerMessage m;
  *m.mutable_batch() = CompleteBatch(5);
  EXPECT_THAT(RefuseUnknownFields(m, ""), IsOk());
  AddUnknown(m.mutable_batch()->mutable_fingerprints(3)->mutable_stats(), 42);
  EXPECT_THAT(RefuseUnknownFields(m, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch.fingerprints[3].stats: unknown field "
                                 "42")));
  v1::WorkerMessage top;
  AddUnknown(&top, 17);
  EXPECT_THAT(RefuseUnknownFields(top, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("WorkerMessage: unknown field 17")));
  // A client message: an unknown field inside the submitted config.
  v1::SubmitJobRequest submit;
  submit.mutable_spec()->mutable_config()->set_steps(3);
  EXPECT_THAT(RefuseUnknownFields(submit, "request"), IsOk());
  AddUnknown(submit.mutable_spec()->mutable_config(), 1000);
  EXPECT_THAT(RefuseUnknownFields(submit, "request"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("request.spec.config: unknown field 1000")));
  // Unknown bytes arriving on the wire are found the same way.
  std::string wire;
  ASSERT_TRUE(submit.SerializeToString(&wire));
  v1::SubmitJobRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  EXPECT_THAT(RefuseUnknownFields(parsed, "request"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown field 1000")));
}

// Fingerprint batches are checked through their generated accessors; every
// level of them still reports its path.
TEST(MessageChecksTest, UnknownFieldsAnywhereInABatchAreRefused) {
  v1::WorkerMessage m;
  *m.mutable_batch() = CompleteBatch(5);
  m.mutable_batch()->mutable_fingerprints(1)->mutable_stats()->set_sum(1.0);
  EXPECT_THAT(RefuseUnknownFields(m, ""), IsOk());
  EXPECT_THAT(RefuseUnknownFields(m.batch(), "batch"), IsOk());

  v1::WorkerMessage fp = m;
  AddUnknown(fp.mutable_batch()->mutable_fingerprints(2), 9);
  EXPECT_THAT(RefuseUnknownFields(fp, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch.fingerprints[2]: unknown field 9")));
  v1::WorkerMessage top = m;
  AddUnknown(top.mutable_batch(), 8);
  EXPECT_THAT(RefuseUnknownFields(top, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch: unknown field 8")));
  EXPECT_THAT(RefuseUnknownFields(top.batch(), "batch"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch: unknown field 8")));
  // The first one in field order wins: fingerprints[0].stats before [4].
  v1::WorkerMessage two = m;
  AddUnknown(two.mutable_batch()->mutable_fingerprints(4), 11);
  AddUnknown(two.mutable_batch()->mutable_fingerprints(0)->mutable_stats(), 12);
  EXPECT_THAT(RefuseUnknownFields(two, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch.fingerprints[0].stats: unknown field "
                                 "12")));
  // From the wire.
  std::string wire;
  ASSERT_TRUE(fp.SerializeToString(&wire));
  v1::WorkerMessage parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  EXPECT_THAT(RefuseUnknownFields(parsed, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch.fingerprints[2]: unknown field 9")));
}

TEST(MessageChecksTest, BatchLimits) {
  EXPECT_THAT(ValidateBatchShape(CompleteBatch(3)), IsOk());
  EXPECT_THAT(ValidateBatchShape(CompleteBatch(kMaxFingerprintsPerBatch)),
              IsOk());
  EXPECT_THAT(ValidateBatchShape(CompleteBatch(kMaxFingerprintsPerBatch + 1)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch.fingerprints: 65537 fingerprints "
                                 "exceed the limit of 65536 per batch")));
  v1::FingerprintBatch b = CompleteBatch(1);
  b.set_step_digest(std::string(1 << 20, 'a'));
  EXPECT_THAT(ValidateBatchShape(b),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch.step_digest: must be 32 lowercase hex "
                                 "digits on a completed step (got 1048576 "
                                 "bytes)")));
  b.set_step_digest(std::string(32, 'A'));
  EXPECT_THAT(ValidateBatchShape(b),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch.step_digest")));
  b.set_step_digest("");
  EXPECT_THAT(ValidateBatchShape(b),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch.step_digest")));
  b = CompleteBatch(1);
  b.set_step_complete(false);
  EXPECT_THAT(ValidateBatchShape(b),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch.step_digest: must be empty unless "
                                 "step_complete")));
  b.clear_step_digest();
  EXPECT_THAT(ValidateBatchShape(b), IsOk());
  b.set_run_id(std::string(129, 'r'));
  EXPECT_THAT(ValidateBatchShape(b),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch.run_id: length 129 is outside "
                                 "1..128")));
  b = CompleteBatch(1);
  b.set_step(-1);
  EXPECT_THAT(ValidateBatchShape(b),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch.step: -1 is negative")));
  b = CompleteBatch(1);
  b.set_sequence(-5);
  EXPECT_THAT(ValidateBatchShape(b),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch.sequence: -5 is negative")));
}

TEST(MessageChecksTest, RunFinishedAndHeartbeatLimits) {
  v1::RunFinished f;
  f.set_run_id("r-1");
  f.set_attempt(1);
  f.set_success(true);
  f.set_run_digest(Digest128Hex("run"));
  (*f.mutable_kernels())["dense.forward"] = "cpu.avx2.v1";
  EXPECT_THAT(ValidateRunFinishedShape(f), IsOk());
  f.set_run_digest("xyz");
  EXPECT_THAT(ValidateRunFinishedShape(f),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("finished.run_digest: must be 32 lowercase "
                                 "hex digits on success (got 3 bytes)")));
  f.set_success(false);
  f.clear_run_digest();
  f.set_failure_reason(std::string(4097, 'x'));
  EXPECT_THAT(ValidateRunFinishedShape(f),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("finished.failure_reason: 4097 bytes exceed "
                                 "the limit of 4096")));
  f.set_failure_reason("killed by signal 9");
  for (int i = 0; i < 257; ++i) (*f.mutable_kernels())[std::to_string(i)] = "";
  EXPECT_THAT(ValidateRunFinishedShape(f),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("finished.kernels: 258 entries exceed the "
                                 "limit of 256")));

  v1::Heartbeat hb;
  for (int i = 0; i < 64; ++i) hb.add_runs()->set_run_id("r");
  EXPECT_THAT(ValidateHeartbeatShape(hb), IsOk());
  hb.add_runs()->set_run_id("r");
  EXPECT_THAT(ValidateHeartbeatShape(hb),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("heartbeat.runs: 65 runs exceed the limit "
                                 "of 64")));
  hb.clear_runs();
  hb.add_runs()->set_run_id(std::string(200, 'r'));
  EXPECT_THAT(ValidateHeartbeatShape(hb),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("heartbeat.runs[0].run_id: length 200")));
}

}  // namespace
}  // namespace lockstep::server
