// A model's initial parameters (lockstep.v1.ParameterSet) applied over the
// seeded initialisation: each listed tensor replaces one parameter of one
// layer, bit for bit; parameters not listed keep their seeded values.
#ifndef LOCKSTEP_WORKER_EXEC_PARAMETERS_H_
#define LOCKSTEP_WORKER_EXEC_PARAMETERS_H_

#include <string>

#include "absl/status/status.h"
#include "kernels/tensor.h"
#include "lockstep/v1/parameters.pb.h"
#include "model/plan.h"

namespace lockstep::worker {

// BATCH_NORM's running mean and variance, [2, C], as a ParameterTensor
// param name.
inline constexpr char kRunningStatsParam[] = "running_stats";

// INVALID_ARGUMENT naming parameters.tensors[i], its layer, param and shape
// unless every tensor names a layer of `plan` and one of its parameters
// (or "running_stats" of a BATCH_NORM layer), at most once, with exactly
// the planned shape, 4 bytes per element and only finite values.
absl::Status ValidateParameterSet(const model::ModelPlan& plan,
                                  const lockstep::v1::ParameterSet& set);

// The tensor of `set` for (layer, param), or nullptr (also for a null
// `set`).
const lockstep::v1::ParameterTensor* FindParameterTensor(
    const lockstep::v1::ParameterSet* set, const std::string& layer,
    const std::string& param);

// Copies `t`'s values into `out` (float32 with t's element count; checked
// by ValidateParameterSet).
absl::Status CopyParameterTensor(const lockstep::v1::ParameterTensor& t,
                                 kernels::Tensor& out);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_EXEC_PARAMETERS_H_
