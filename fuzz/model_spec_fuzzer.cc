// Model files (model/spec_io.h): JSON or protobuf text format, as
// `lockstep submit`, `lockstep-plan` and the coordinator read them, then
// planned (model/plan.h) the way the coordinator validates a submission.
//
// Invariants beyond "no crash":
//   - every error is INVALID_ARGUMENT and starts with the file name;
//   - an accepted model printed as text format and as JSON parses back to
//     the same message (same deterministic bytes);
//   - PlanModel on an accepted model either refuses it with
//     INVALID_ARGUMENT or returns a plan within the limits: at most
//     max_layers layers, max_parameters parameters and
//     max_total_tensor_bytes of live tensors.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/spec_roundtrip.h"
#include "google/protobuf/text_format.h"
#include "lockstep/v1/job.pb.h"
#include "lockstep/v1/model.pb.h"
#include "model/job_config.h"
#include "model/plan.h"
#include "model/spec_io.h"

namespace {

// A small valid job config, so PlanModel gets as far as the model.
const lockstep::v1::JobConfig& PlanningConfig() {
  static const lockstep::v1::JobConfig* config = [] {
    auto* c = new lockstep::v1::JobConfig;
    google::protobuf::TextFormat::ParseFromString(
        R"pb(seed: 1
             batch_size: 2
             steps: 1
             optimizer { kind: SGD learning_rate: 0.1 }
             dtype: FLOAT32
             determinism: CANONICAL
             backend: ANY
             capture { kind: EVERY_STEP })pb",
        c);
    return c;
  }();
  return *config;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<lockstep::v1::Model> model =
      lockstep::model::ParseModel(text, "model.json");
  if (!model.ok()) {
    FUZZ_CHECK(model.status().code() == absl::StatusCode::kInvalidArgument,
               model.status().ToString());
    FUZZ_CHECK(absl::StartsWith(model.status().message(), "model.json"),
               model.status().ToString());
    return 0;
  }
  lockstep::fuzz::CheckSpecRoundTrip(*model);

  const lockstep::model::Limits limits;
  absl::StatusOr<lockstep::model::ModelPlan> plan =
      lockstep::model::PlanModel(*model, PlanningConfig(), limits);
  if (!plan.ok()) {
    FUZZ_CHECK(plan.status().code() == absl::StatusCode::kInvalidArgument,
               plan.status().ToString());
    return 0;
  }
  FUZZ_CHECK(static_cast<int64_t>(plan->layers.size()) <= limits.max_layers,
             "plan has more layers than limits.max_layers");
  FUZZ_CHECK(plan->parameter_count >= 0 &&
                 plan->parameter_count <= limits.max_parameters,
             "plan's parameter_count is outside [0, limits.max_parameters]");
  FUZZ_CHECK(lockstep::model::EstimateLiveTensorBytes(
                 *plan, PlanningConfig()) <= limits.max_total_tensor_bytes,
             "plan's live tensor bytes exceed limits.max_total_tensor_bytes");
  return 0;
}
