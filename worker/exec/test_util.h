// Test helpers for worker/exec: hand-built ModelPlans (independent of
// model::PlanModel), a synthetic "teacher" batch source and a kernel registry.
#ifndef LOCKSTEP_WORKER_EXEC_TEST_UTIL_H_
#define LOCKSTEP_WORKER_EXEC_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/registry.h"
#include "lockstep/v1/job.pb.h"
#include "model/plan.h"
#include "model/test_plans.h"
#include "worker/data/dataset.h"
#include "worker/exec/executor.h"

namespace lockstep::worker::testing {

// Expects `got` to have `want`'s run digest and, step by step, every kept
// fingerprint of `want`, bit for bit (the messages compared serialised:
// hashes and statistics as bits); a failure names the step and the
// manifest entry.
void ExpectSameFingerprints(const RunResult& got, const RunResult& want);

// The CANONICAL CPU registry (built once, shared, read-only).
const kernels::Registry& CpuRegistry();

// The model plans and base config of model/test_plans.h.
using ::lockstep::model::testing::BaseConfig;
using ::lockstep::model::testing::ConvResPlan;
using ::lockstep::model::testing::MlpPlan;

// Synthetic teacher task: x uniform in [-1, 1) (Philox, seed `seed`, stream
// = step), label = argmax_c of a fixed random linear map of x (the
// "teacher", stream 1 << 40) over plan.num_classes classes.
BatchSource TeacherBatches(const model::ModelPlan& plan, uint64_t seed);

// examples/<rel> in the test's runfiles (tests with data = //examples:zoo).
std::string ZooPath(const std::string& rel);

// A zoo model loaded, planned and given its dataset; on a failure the test
// has a non-fatal failure and `dataset` is null.
struct ZooModel {
  lockstep::v1::Model model;
  lockstep::v1::JobConfig config;
  model::ModelPlan plan;
  std::shared_ptr<Dataset> dataset;
};
// examples/<name>/<model_file> with <config_file>; batch and steps
// override the config's when positive.
ZooModel LoadZooModel(const std::string& name, int batch, int steps,
                      const std::string& config_file = "config.json",
                      const std::string& model_file = "model.json");

}  // namespace lockstep::worker::testing

#endif  // LOCKSTEP_WORKER_EXEC_TEST_UTIL_H_
