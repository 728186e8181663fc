// lockstep-plan: validates a model file and a job-config file (JSON or
// protobuf text format) and prints the plan, or the error.
//
//   lockstep-plan examples/lenet5/model.json examples/lenet5/config.json
//
// Exit status: 0 when the spec is valid, 1 when it is not, 2 on usage errors.
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "model/plan.h"
#include "model/spec_io.h"

int main(int argc, char** argv) {
  using namespace lockstep::model;  // NOLINT(build/namespaces)
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL_FILE CONFIG_FILE\n", argv[0]);
    return 2;
  }
  absl::StatusOr<lockstep::v1::Model> model = ReadModelFile(argv[1]);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<lockstep::v1::JobConfig> config = ReadJobConfigFile(argv[2]);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n",
                 std::string(config.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<ModelPlan> plan = PlanModel(*model, *config, Limits());
  if (!plan.ok()) {
    std::fprintf(stderr, "%s: %s\n", argv[1],
                 std::string(plan.status().message()).c_str());
    return 1;
  }
  std::fputs(DescribePlan(*plan).c_str(), stdout);
  return 0;
}
