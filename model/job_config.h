// Job-config and placement validation, and the resource limits both the
// workers and the coordinator enforce. Pure and thread-safe.
#ifndef LOCKSTEP_MODEL_JOB_CONFIG_H_
#define LOCKSTEP_MODEL_JOB_CONFIG_H_

#include <cstdint>

#include "absl/status/status.h"
#include "lockstep/v1/job.pb.h"

namespace lockstep::model {

// Resource limits a worker (and the coordinator's validator) enforces.
// Defaults suit a single-machine CPU worker; operators raise them by flag.
struct Limits {
  int64_t max_batch = 4096;               // config.batch_size
  int64_t max_steps = 100000;             // config.steps
  int64_t max_layers = 2048;              // model.layers
  int64_t max_classes = 100000;           // model.num_classes
  int64_t max_tensor_elements = 1 << 28;  // any activation, incl. batch dim
  int64_t max_parameters = 1 << 28;       // sum over all parameter tensors
  int64_t max_dim = 1 << 20;              // any single dimension
  int64_t max_runs = 64;                  // placement.runs (ValidatePlacement)
  int64_t max_threads = 1024;             // config.threads
  // Bytes of every tensor the executor keeps alive during a run
  // (EstimateLiveTensorBytes in plan.h: the batch, every layer's output and
  // gradient buffers, parameters, their gradients and optimizer state).
  // Default 16 GiB: what a single CPU worker can hold.
  int64_t max_total_tensor_bytes = int64_t{16} << 30;
};

// The config checks of PlanModel alone: batch size, steps, optimizer, dtype,
// enums, threads, op_algorithms, capture policy and dataset. Messages start
// with "config.<field>: ".
absl::Status ValidateJobConfig(const lockstep::v1::JobConfig& config,
                               const Limits& limits);

// A job's placement: runs in 0..limits.max_runs (0 means 2), a known scope,
// ACROSS_CLASSES only with CANONICAL determinism, well-formed worker ids,
// labels and hardware-class digests. Messages start with "placement.".
absl::Status ValidatePlacement(const lockstep::v1::Placement& placement,
                               const lockstep::v1::JobConfig& config,
                               const Limits& limits);

}  // namespace lockstep::model

#endif  // LOCKSTEP_MODEL_JOB_CONFIG_H_
