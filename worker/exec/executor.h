// The training executor: runs a model::ModelPlan for JobConfig.steps seeded
// steps (forward, loss, backward, optimizer) with kernels from the registry,
// and fingerprints every captured tensor in manifest order.
//
//   kernels::Registry registry;
//   LS_RETURN_IF_ERROR(kernels::RegisterCpuCanonicalKernels(&registry));
//   LS_ASSIGN_OR_RETURN(auto exec, Executor::Create(plan, config, &registry,
//                                                   batches, options));
//   for (int s = 0; s < config.steps(); ++s) {
//     LS_ASSIGN_OR_RETURN(StepSummary sum, exec->RunStep(s));
//   }
//   LS_ASSIGN_OR_RETURN(RunResult result, exec->Finish());
//
// What runs, in which order, and how digests are formed is specified in
// worker/exec/README.md. Ownership: the executor copies the plan and config;
// `registry` must outlive it. Thread-safety: an Executor is used by one
// thread at a time; different Executors may run concurrently (they share
// only the read-only registry).
#ifndef LOCKSTEP_WORKER_EXEC_EXECUTOR_H_
#define LOCKSTEP_WORKER_EXEC_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/hash/fingerprint.h"
#include "kernels/registry.h"
#include "kernels/residency.h"
#include "kernels/tensor.h"
#include "lockstep/v1/fingerprint.pb.h"
#include "lockstep/v1/job.pb.h"
#include "lockstep/v1/parameters.pb.h"
#include "model/plan.h"
#include "worker/exec/fault.h"

namespace lockstep::worker {

// Fills the batch of step `step` into the preallocated `x` (float32,
// plan.input_shape) and `labels` (int32 [N], each in [0, num_classes)).
using BatchFn = std::function<absl::Status(int step, kernels::Tensor& x,
                                           kernels::Tensor& labels)>;

// Where a run's batches come from.
struct BatchSource {
  BatchFn fill;
  // Digest of the data set (recorded in RunResult.dataset_digest).
  std::string digest;
};

// Called for every captured tensor, in manifest order, right after it was
// fingerprinted. `tensor` is only valid during the call; the executor holds
// no lock while calling. A non-OK status aborts the step with that status.
using TensorObserver = std::function<absl::Status(
    int step, const lockstep::v1::ManifestEntry& entry,
    const kernels::Tensor& tensor,
    const lockstep::v1::TensorFingerprint& fingerprint)>;

// Called for every captured tensor's fingerprint, in manifest order, at the
// end of its step (before RunStep returns; not for a step that failed). It sees
// no tensor, so unlike an observer it lets the executor fingerprint in the
// background. A non-OK status fails the step with that status.
using FingerprintSink = std::function<absl::Status(
    int step, const lockstep::v1::ManifestEntry& entry,
    const lockstep::v1::TensorFingerprint& fingerprint)>;

// Where captured tensors are hashed (ExecutorOptions::fingerprint_thread).
enum class FingerprintThread {
  // A background thread when no observer is set, the run is not
  // device-resident, some captured tensor has at least
  // background_fingerprint_min_bytes and the CPU kernels' pool leaves at
  // least one of the CPUs this process may run on free; each capturing
  // step then hashes in the background or inline as the run's own step
  // times say is faster (BackgroundChooser, fingerprint_pipeline.h).
  // Otherwise kInline.
  kAuto,
  // On the step's thread, each tensor right after it is produced (large
  // tensors lend the CPU kernels' pool).
  kInline,
  // On a thread of the executor's own while the step goes on; the step
  // waits only before a kernel overwrites a tensor not hashed yet, and at
  // its end (worker/exec/fingerprint_pipeline.h). Incompatible with an
  // observer and with a device-resident run.
  kBackground,
};

// Accumulated wall time of one op over the calls timed.
struct OpTime {
  double seconds = 0;
  int64_t calls = 0;
};
using OpTimes = std::map<std::string, OpTime, std::less<>>;
// The key under which ExecutorOptions::op_times collects fingerprinting.
inline constexpr char kFingerprintOpTime[] = "(fingerprint)";
// The key under which it collects the step's waits for background hashes
// (before a kernel overwrites a queued tensor, and at the step's end).
inline constexpr char kFingerprintWaitOpTime[] = "(fingerprint wait)";
// The key under which it counts captured tensors that took the fingerprint
// of the tensor hashed just before them instead of being hashed: views of
// the same bytes in the same shape (ADD's two input gradients, which are
// dy).
inline constexpr char kFingerprintReusedOpTime[] = "(fingerprint reused)";

// `times` collected over `steps` steps that took `ms_per_step` each, as a
// table with the largest first: one line per op, indented by `indent`:
// name, calls per step, ms per step, share of the step; then the line
// "(between kernels)": the rest of the step (the executor's own work).
std::string FormatOpTimes(const OpTimes& times, int steps, double ms_per_step,
                          absl::string_view indent = "    ");

struct ExecutorOptions {
  // The model's weight initialiser (lockstep.v1.Model.initializer; the plan
  // does not carry it). UNSPECIFIED means GLOROT_UNIFORM.
  lockstep::v1::Initializer initializer = lockstep::v1::INITIALIZER_UNSPECIFIED;
  // Replaces the documented initialisation (init.h) of parameter
  // `param_index` of layer `layer_index` when set: fills `param` (already
  // shaped). For tests (gradient checks) and, later, resuming from saved
  // weights. Null: InitializeParam.
  std::function<absl::Status(int layer_index, int param_index,
                             kernels::Tensor& param)>
      param_init;
  // The model's initial parameters (Model.parameters_digest's blob), applied
  // over the seeded initialisation (worker/exec/parameters.h); checked
  // against the plan when the executor is created. Null: none. Must
  // outlive Create().
  const lockstep::v1::ParameterSet* parameters = nullptr;
  // A bit flip to inject; unset: none.
  std::optional<FaultSpec> fault;
  // Sees every captured tensor as it is hashed (--dump, tests); may be null.
  // Setting one keeps hashing inline (fingerprint_thread).
  TensorObserver observer;
  // Sees every captured fingerprint at the end of its step; may be null.
  FingerprintSink fingerprint_sink;
  // Keep every captured fingerprint in the RunResult (off when the caller
  // streams them through `fingerprint_sink` or `observer` and only needs
  // digests).
  bool keep_fingerprints = true;
  // Where captured tensors are hashed. Same bits either way.
  FingerprintThread fingerprint_thread = FingerprintThread::kAuto;
  // With background fingerprints, tensors smaller than this are still
  // hashed inline: a small tensor is hashed in cache right after its kernel
  // for less than queueing it and having the other core read it costs
  // (docs/benchmarks.md, "Fingerprints in the background"). kAuto uses the
  // background thread only when some captured tensor is this large.
  int64_t background_fingerprint_min_bytes = 64 << 10;
  // Tests only: the background thread hashes a tensor only once the step
  // waits for it (FingerprintPipeline's `hold`), so a write the executor
  // does not guard changes a fingerprint every time instead of by chance.
  bool hold_background_fingerprints = false;
  // Compute fingerprints at all. Off only for benchmarks (digests are then
  // empty and the observer is not called).
  bool fingerprint = true;
  // Ops that only move bytes are views of the tensors they would copy, and
  // run no kernel: RESHAPE's and FLATTEN's output (unless their input is
  // the model input) and gradient, ADD's two gradients (both dy). Same
  // bytes, so the same fingerprints; a layer that a fault targets copies.
  // Off (tests, and to rule the views out): every op runs its kernel.
  bool tensor_views = true;
  // When set, every kernel call's wall time is added to (*op_times)[op]
  // (the op's registry name, e.g. "conv2d.forward"; the gradient
  // accumulation's adds under model::kGradAccumulateOp) and each captured
  // tensor's fingerprint to (*op_times)[kFingerprintOpTime]. For profiling
  // (step_bench --op_times); costs two clock reads per call. With background
  // fingerprints, kFingerprintOpTime is the step's own share of the work
  // (queueing a tensor, or hashing one below the size for the thread) and
  // kFingerprintWaitOpTime its waits for the thread; with fingerprints
  // queued on the device (queue_device_fingerprints), the queueing and the
  // step's collection. Not owned.
  OpTimes* op_times = nullptr;
  // With op_times: kernel calls are keyed "<layer> <op>" (the plan's layer
  // name, e.g. "l1b0_conv1 conv2d.forward") instead of the op alone, so
  // each layer's share shows (step_bench --op_times_by_layer). The
  // fingerprinting keys stay as they are.
  bool op_times_by_layer = false;
  // On the CUDA backend, keep the run's tensors on the device between
  // kernel calls (kernels/residency.h): inputs are copied in once, outputs
  // stay there, fingerprints are computed there. false: every kernel call
  // copies its tensors in and out (the bits are the same either way).
  bool device_resident = true;
  // In a device-resident run, the float32 tensors whose device copy is
  // newer are fingerprinted on the device in queue (kernels/residency.h,
  // ResidentMirror::QueueFingerprintAndStats) and the step's results are
  // collected at its end: one wait for the device per step instead of one
  // per tensor. false, and always with an observer (which sees each tensor
  // with its fingerprint): each waits for its own result. Same bits either
  // way.
  bool queue_device_fingerprints = true;
};

// Which kernel ran for one op.
struct KernelChoice {
  std::string op;
  kernels::Mode requested_mode = kernels::Mode::kCanonical;
  std::string requested_algorithm;  // the override, or "" for the default
  kernels::KernelKey ran;           // the registry key that actually ran
  // True when no kernel of the requested mode exists for this op on this
  // backend yet and the CANONICAL kernel ran instead.
  bool fallback = false;
  // What actually ran, as KernelVariant() names it ("cpu/avx512/canonical",
  // "cpu/avx2/default/atomic", "cuda/deterministic/cublas"); reported to
  // the coordinator per op (RunFinished.kernels).
  std::string variant;
};

// One step's outcome.
struct StepSummary {
  int step = 0;
  float loss = 0.0f;
  bool captured = false;     // the step's tensors were fingerprinted
  hash::Fingerprint digest;  // step digest; zero when not captured
};

struct RunResult {
  lockstep::v1::TensorManifest manifest;
  // The captured steps, in order (model::ExpandCapturedSteps(manifest)).
  std::vector<int> captured_steps;
  // Per captured step, the fingerprints aligned to manifest.entries
  // (fingerprints[i][j].index() == j). Empty unless keep_fingerprints.
  std::vector<std::vector<lockstep::v1::TensorFingerprint>> fingerprints;
  // Per captured step, the step digest.
  std::vector<hash::Fingerprint> step_digests;
  // CombineDigests(manifest digest, step digests in order).
  hash::Fingerprint run_digest;
  std::vector<float> losses;  // one per step, every step
  std::string dataset_digest;
  std::vector<KernelChoice> kernels;  // sorted by op
  bool fault_injected = false;
  std::optional<FaultSpec> fault;  // the fault that was injected
  // The manifest entry the fault hit (step-tensor index when the entry is
  // not captured by the policy).
  std::optional<lockstep::v1::ManifestEntry> fault_entry;
  // What a device-resident run copied (all zero for other runs).
  bool device_resident = false;
  kernels::ResidencyCounters residency;
};

// The fingerprint message of a tensor: tree hash over (dtype, shape, bytes)
// and, for float32, the statistics (all-zero statistics for other dtypes).
// `parallel` (may be null; not owned) lends threads to a large tensor's
// leaves; the message is the same either way.
absl::StatusOr<lockstep::v1::TensorFingerprint> FingerprintTensor(
    const kernels::Tensor& t, int32_t index,
    const hash::Parallelism* parallel = nullptr);
// The same into *out, which may hold an earlier fingerprint: every field is
// overwritten (the result equals the message above), and the stats
// sub-message already there is reused rather than allocated. On error *out
// is unspecified.
absl::Status FingerprintTensor(const kernels::Tensor& t, int32_t index,
                               const hash::Parallelism* parallel,
                               lockstep::v1::TensorFingerprint* out);

// The CPU kernels' pool (kernels::CpuThreadPool()) as FingerprintTensor's
// `parallel`: the pool's current thread count, tasks run by its
// ParallelFor. The executor uses it for every fingerprint of a run (set up
// after config.threads has sized the pool); a one-thread pool never spreads.
hash::Parallelism CpuPoolParallelism();

// The 128-bit hash held in a TensorFingerprint.
inline hash::Fingerprint HashOf(const lockstep::v1::TensorFingerprint& f) {
  return hash::Fingerprint{f.hash_hi(), f.hash_lo()};
}

// The registry backend a job runs on: "cpu" for backend CPU; "cuda" for
// backend CUDA (FAILED_PRECONDITION when the registry holds no CUDA
// kernels, i.e. this worker has no usable device); for ANY / unspecified
// "cuda" when CUDA kernels are registered, else "cpu".
absl::StatusOr<std::string> BackendFor(const kernels::Registry& registry,
                                       const lockstep::v1::JobConfig& config);

// Resolves the kernel of `op` for `config` (mode, op_algorithms, backend)
// in `registry`; see README "Kernel selection". FAILED_PRECONDITION as
// BackendFor; INVALID_ARGUMENT naming op, algorithm and the registered
// alternatives for an unknown override; NOT_FOUND when not even a
// CANONICAL kernel exists.
absl::StatusOr<KernelChoice> ChooseKernel(const kernels::Registry& registry,
                                          const lockstep::v1::JobConfig& config,
                                          const std::string& op);

// The name of the kernel variant `ran` resolves to, for reports and cause
// hints:
//   <backend>[/<cpu ISA path>]/<mode>[/<kernel>]
// backend is the registry's ("cpu", "cuda"); the CPU ISA path ("scalar",
// "avx2", "avx512") is `cpu_isa`, the path the CPU kernels dispatch to; mode
// is the mode of the kernel that ran, lower case ("canonical",
// "deterministic", "default"; a fallback to CANONICAL says "canonical").
// kernel names the concrete kernel and is left out when it is named like
// the mode. A generic algorithm name ("default", "deterministic") is
// resolved to the kernel registered under it: the other algorithm of the
// same op, backend and mode registered with the same function ("atomic",
// "split_k_atomic", "cudnn_find", "cublas"), else a DETERMINISTIC kernel
// with a specific name ("cublas", "gather"), else the CANONICAL kernel
// ("canonical"), else the DETERMINISTIC one ("deterministic"). Examples:
//   cpu/avx512/canonical          CANONICAL
//   cpu/avx2/deterministic        the single-chain GEMM
//   cpu/avx512/deterministic/canonical   DETERMINISTIC relu: the CANONICAL
//                                        kernel
//   cpu/avx512/default/atomic     DEFAULT bias_add.grad, atomic accumulation
//   cpu/avx512/default/split_k_atomic    DEFAULT dense.forward
//   cpu/avx512/default/deterministic     DEFAULT dense.grad_input
//   cuda/canonical, cuda/deterministic/cudnn, cuda/default/cudnn_find
// The word "atomic" in a variant marks a kernel whose result depends on
// the order of atomic updates (nondeterministic with more than one thread).
std::string KernelVariant(const kernels::Registry& registry,
                          const kernels::KernelKey& ran,
                          absl::string_view cpu_isa);

class Executor {
 public:
  // Validates the plan against the config, resolves every kernel, allocates
  // all tensors, initialises the parameters and resolves the fault.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(
      const model::ModelPlan& plan, const lockstep::v1::JobConfig& config,
      const kernels::Registry* registry, BatchSource batches,
      ExecutorOptions options);

  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs training step `step`. Steps run in order: REQUIRES step ==
  // steps_done() (FAILED_PRECONDITION otherwise, and after an error).
  absl::StatusOr<StepSummary> RunStep(int step);

  // The run's result. FAILED_PRECONDITION unless every step ran.
  absl::StatusOr<RunResult> Finish();

  const lockstep::v1::TensorManifest& manifest() const;
  // Every tensor of a step in execution order (model::StepTensors).
  const std::vector<lockstep::v1::ManifestEntry>& step_tensors() const;
  int steps_done() const;
  // True when the executor has a background thread for captured tensors
  // (ExecutorOptions::fingerprint_thread): every step uses it under
  // kBackground, the steps its BackgroundChooser picks under kAuto.
  bool background_fingerprints() const;
  // The steps run so far whose large captured tensors were hashed in the
  // background.
  int background_steps() const;

 private:
  struct State;
  explicit Executor(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

// Create + every step + Finish.
absl::StatusOr<RunResult> RunJob(const model::ModelPlan& plan,
                                 const lockstep::v1::JobConfig& config,
                                 const kernels::Registry* registry,
                                 BatchSource batches, ExecutorOptions options);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_EXEC_EXECUTOR_H_
