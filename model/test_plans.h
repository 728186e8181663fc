// Hand-built ModelPlans for tests (independent of PlanModel) and a base
// job config.
#ifndef LOCKSTEP_MODEL_TEST_PLANS_H_
#define LOCKSTEP_MODEL_TEST_PLANS_H_

#include <cstdint>

#include "lockstep/v1/job.pb.h"
#include "model/plan.h"

namespace lockstep::model::testing {

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

}  // namespace lockstep::model::testing

#endif  // LOCKSTEP_MODEL_TEST_PLANS_H_
