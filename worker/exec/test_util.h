// Test helpers for worker/exec: hand-built ModelPlans (independent of
// PlanModel), a synthetic "teacher" batch source and a kernel registry.
#ifndef LOCKSTEP_WORKER_EXEC_TEST_UTIL_H_
#define LOCKSTEP_WORKER_EXEC_TEST_UTIL_H_

#include <cstdint>
#include <memory>

#include "kernels/registry.h"
#include "lockstep/v1/job.pb.h"
#include "worker/exec/executor.h"
#include "worker/model/plan.h"

namespace lockstep::worker::testing {

// The CANONICAL CPU registry (built once, shared, read-only).
const kernels::Registry& CpuRegistry();

// input [N, 6] -> fc1 DENSE 8 (+bias) -> relu1 -> fc2 DENSE 3 (+bias)
// -> loss SOFTMAX_XENT. 3 classes.
ModelPlan MlpPlan(int64_t batch);

// input [N, 2, 6, 6]
//   conv1 CONV2D 3 filters 3x3 pad 1 (+bias)   [N, 3, 6, 6]
//   relu1 RELU                                  [N, 3, 6, 6]
//   conv2 CONV2D 3 filters 3x3 pad 1 (no bias)  [N, 3, 6, 6]   (relu1)
//   add   ADD(conv2, relu1)                     [N, 3, 6, 6]
//   pool  MAX_POOL2D 2x2 stride 2               [N, 3, 3, 3]
//   up    RESIZE_BILINEAR 5x5                   [N, 3, 5, 5]
//   gap   GLOBAL_AVG_POOL                       [N, 3]
//   fc    DENSE 4 (+bias)                       [N, 4]
//   loss  SOFTMAX_XENT                          [1]
// 4 classes. relu1 feeds two layers (its gradient is a "sum").
ModelPlan ConvResPlan(int64_t batch);

// A config: seed 7, SGD lr 0.1, CANONICAL, every step captured.
lockstep::v1::JobConfig BaseConfig(int64_t batch, int steps);

// Synthetic teacher task: x uniform in [-1, 1) (Philox, seed `seed`, stream
// = step), label = argmax_c of a fixed random linear map of x (the
// "teacher", stream 1 << 40) over plan.num_classes classes.
BatchSource TeacherBatches(const ModelPlan& plan, uint64_t seed);

}  // namespace lockstep::worker::testing

#endif  // LOCKSTEP_WORKER_EXEC_TEST_UTIL_H_
