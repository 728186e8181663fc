// Job-config files (model/spec_io.h) and their validation
// (model/job_config.h), as `lockstep submit` and the coordinator read and
// check them.
//
// Invariants beyond "no crash":
//   - every parse error is INVALID_ARGUMENT and starts with the file name;
//   - an accepted config printed as text format and as JSON parses back to
//     the same message;
//   - ValidateJobConfig and ValidatePlacement answer OK or INVALID_ARGUMENT
//     with a message naming the field ("config." / "placement.");
//   - a config ValidateJobConfig accepts is within the limits it checks.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/spec_roundtrip.h"
#include "lockstep/v1/job.pb.h"
#include "model/job_config.h"
#include "model/spec_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<lockstep::v1::JobConfig> config =
      lockstep::model::ParseJobConfig(text, "config.json");
  if (!config.ok()) {
    FUZZ_CHECK(config.status().code() == absl::StatusCode::kInvalidArgument,
               config.status().ToString());
    FUZZ_CHECK(absl::StartsWith(config.status().message(), "config.json"),
               config.status().ToString());
    return 0;
  }
  lockstep::fuzz::CheckSpecRoundTrip(*config);

  const lockstep::model::Limits limits;
  const absl::Status valid =
      lockstep::model::ValidateJobConfig(*config, limits);
  if (!valid.ok()) {
    FUZZ_CHECK(valid.code() == absl::StatusCode::kInvalidArgument,
               valid.ToString());
    FUZZ_CHECK(absl::StartsWith(valid.message(), "config."), valid.ToString());
    return 0;
  }
  FUZZ_CHECK(
      config->batch_size() >= 1 && config->batch_size() <= limits.max_batch,
      "accepted batch_size outside 1..max_batch");
  FUZZ_CHECK(config->steps() >= 1 && config->steps() <= limits.max_steps,
             "accepted steps outside 1..max_steps");
  FUZZ_CHECK(config->threads() >= 0 && config->threads() <= limits.max_threads,
             "accepted threads outside 0..max_threads");

  // Every placement scope against the accepted config.
  for (int scope = 0; scope <= 3; ++scope) {
    lockstep::v1::Placement placement;
    placement.set_scope(static_cast<lockstep::v1::PlacementScope>(scope));
    placement.set_runs(scope + 1);
    const absl::Status p =
        lockstep::model::ValidatePlacement(placement, *config, limits);
    if (!p.ok()) {
      FUZZ_CHECK(p.code() == absl::StatusCode::kInvalidArgument, p.ToString());
      FUZZ_CHECK(absl::StartsWith(p.message(), "placement."), p.ToString());
    }
  }
  return 0;
}
