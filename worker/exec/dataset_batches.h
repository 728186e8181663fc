// Adapts a worker/data Dataset to the executor's BatchSource.
#ifndef LOCKSTEP_WORKER_EXEC_DATASET_BATCHES_H_
#define LOCKSTEP_WORKER_EXEC_DATASET_BATCHES_H_

#include <cstdint>
#include <memory>

#include "worker/data/dataset.h"
#include "worker/exec/executor.h"

namespace lockstep::worker {

// Step s's batch is dataset->Batch(s, batch_size), copied into the
// executor's batch tensors (INTERNAL if the dataset's shapes disagree with
// them). The source shares ownership of `dataset`; digest() is recorded.
BatchSource DatasetBatches(std::shared_ptr<Dataset> dataset,
                           int64_t batch_size);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_EXEC_DATASET_BATCHES_H_
