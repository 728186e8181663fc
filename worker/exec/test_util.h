// Test helpers for worker/exec: hand-built ModelPlans (independent of
// model::PlanModel), a synthetic "teacher" batch source and a kernel registry.
#ifndef LOCKSTEP_WORKER_EXEC_TEST_UTIL_H_
#define LOCKSTEP_WORKER_EXEC_TEST_UTIL_H_

#include <cstdint>
#include <memory>

#include "kernels/registry.h"
#include "lockstep/v1/job.pb.h"
#include "model/plan.h"
#include "model/test_plans.h"
#include "worker/exec/executor.h"

namespace lockstep::worker::testing {

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

}  // namespace lockstep::worker::testing

#endif  // LOCKSTEP_WORKER_EXEC_TEST_UTIL_H_
