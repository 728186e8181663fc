#include "worker/exec/executor.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "kernels/canonical/reduce.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/graph_ops.h"
#include "kernels/math/portable_math.h"
#include "kernels/ops/dropout.h"
#include "model/manifest.h"
#include "model/plan_graph_elementwise.h"
#include "worker/exec/fingerprint_pipeline.h"
#include "worker/exec/init.h"
#include "worker/exec/parameters.h"

namespace lockstep::worker {

namespace v1 = ::lockstep::v1;
using kernels::KernelFn;
using kernels::OpAttrs;
using kernels::Tensor;

namespace {

kernels::Mode ModeOf(v1::DeterminismMode mode) {
  switch (mode) {
    case v1::DETERMINISTIC:
      return kernels::Mode::kDeterministic;
    case v1::DEFAULT:
      return kernels::Mode::kDefault;
    default:
      return kernels::Mode::kCanonical;
  }
}

hash::DtypeCode HashDtype(kernels::DType dtype) {
  switch (dtype) {
    case kernels::DType::kInt32:
      return hash::DtypeCode::kInt32;
    case kernels::DType::kUInt8:
      return hash::DtypeCode::kUInt8;
    default:
      return hash::DtypeCode::kFloat32;
  }
}

kernels::DType KernelDtype(v1::DType dtype) {
  switch (dtype) {
    case v1::INT32:
      return kernels::DType::kInt32;
    case v1::UINT8:
      return kernels::DType::kUInt8;
    default:
      return kernels::DType::kFloat32;
  }
}

bool SameShape(const v1::ManifestEntry& e, const Tensor& t) {
  if (e.shape_size() != t.rank()) return false;
  for (int i = 0; i < t.rank(); ++i) {
    if (e.shape(i) != t.dim(i)) return false;
  }
  return KernelDtype(e.dtype()) == t.dtype();
}

absl::StatusOr<Tensor> Zeros(const std::vector<int64_t>& shape,
                             const std::string& what,
                             kernels::DType dtype = kernels::DType::kFloat32) {
  absl::StatusOr<Tensor> t = Tensor::Zeros(dtype, shape);
  if (!t.ok()) {
    return absl::Status(t.status().code(),
                        absl::StrCat(what, ": ", t.status().message()));
  }
  return t;
}

// Whether every op of a normalisation layer resolved to a CPU kernel: then
// its gradients take the statistics its forward saved (LayerState::saved;
// the CUDA kernels recompute them). Every layer's x is written only by its
// producer, before the forward reads it, so the gradients see the x the
// statistics came from.
bool AllOnCpu(const std::map<std::string, KernelChoice>& used,
              std::initializer_list<const char*> ops) {
  for (const char* op : ops) {
    const auto it = used.find(op);
    if (it == used.end() ||
        it->second.ran.backend != kernels::kCpuBackendName) {
      return false;
    }
  }
  return true;
}

// Validates the parts of the config the executor itself interprets.
absl::Status CheckConfig(const model::ModelPlan& plan,
                         const v1::JobConfig& config) {
  if (config.dtype() != v1::DTYPE_UNSPECIFIED &&
      config.dtype() != v1::FLOAT32) {
    return absl::InvalidArgumentError(
        absl::StrFormat("config.dtype: %s is not supported (only FLOAT32)",
                        v1::DType_Name(config.dtype())));
  }
  if (config.steps() < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("config.steps: %d must be >= 1", config.steps()));
  }
  if (plan.input_shape.empty() || plan.input_shape[0] != config.batch_size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "config.batch_size: %d differs from the plan's batch dimension %s",
        config.batch_size(), kernels::ShapeString(plan.input_shape)));
  }
  if (plan.num_classes < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model.num_classes: %d must be >= 1", plan.num_classes));
  }
  const v1::OptimizerConfig& o = config.optimizer();
  if (!std::isfinite(o.learning_rate()) || !(o.learning_rate() > 0.0f)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "config.optimizer.learning_rate: %g must be finite and > 0",
        o.learning_rate()));
  }
  if (o.kind() == v1::MOMENTUM &&
      !(o.momentum() >= 0.0f && o.momentum() < 1.0f)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "config.optimizer.momentum: %g is outside [0, 1)", o.momentum()));
  }
  if (o.kind() == v1::ADAM) {
    if (!(o.beta1() >= 0.0f && o.beta1() < 1.0f)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "config.optimizer.beta1: %g is outside [0, 1)", o.beta1()));
    }
    if (!(o.beta2() >= 0.0f && o.beta2() < 1.0f)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "config.optimizer.beta2: %g is outside [0, 1)", o.beta2()));
    }
    if (!std::isfinite(o.epsilon()) || o.epsilon() < 0.0f) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "config.optimizer.epsilon: %g must be finite and >= 0 (0 means "
          "1e-7)",
          o.epsilon()));
    }
  }
  return absl::OkStatus();
}

// The optimizer attributes of config.optimizer with the documented defaults.
OpAttrs OptimizerAttrs(const v1::OptimizerConfig& o) {
  OpAttrs a;
  a.learning_rate = o.learning_rate();
  a.momentum = o.momentum();
  a.beta1 = o.beta1() == 0.0f ? 0.9f : o.beta1();
  a.beta2 = o.beta2() == 0.0f ? 0.999f : o.beta2();
  a.epsilon = o.epsilon() == 0.0f ? 1e-7f : o.epsilon();
  a.weight_decay = o.weight_decay() == 0.0f ? 0.01f : o.weight_decay();
  return a;
}

}  // namespace

hash::Parallelism CpuPoolParallelism() {
  hash::Parallelism p;
  p.threads = kernels::CpuThreadPool()->num_threads();
  p.run = [](int64_t num_tasks, absl::FunctionRef<void(int64_t)> task) {
    kernels::CpuThreadPool()->ParallelFor(num_tasks,
                                          [task](int64_t i) { task(i); });
  };
  return p;
}

std::string FormatOpTimes(const OpTimes& times, int steps, double ms_per_step,
                          absl::string_view indent) {
  std::vector<std::pair<std::string, OpTime>> ops(times.begin(), times.end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) {
    return a.second.seconds > b.second.seconds;
  });
  double timed_ms = 0;
  for (const auto& [op, time] : ops) timed_ms += 1e3 * time.seconds / steps;
  ops.push_back(
      {"(between kernels)", OpTime{(ms_per_step - timed_ms) * steps / 1e3, 0}});
  std::string out;
  for (const auto& [op, time] : ops) {
    const double ms = 1e3 * time.seconds / steps;
    absl::StrAppendFormat(&out, "%s%-34s %8.1f calls %10.3f ms %6.1f%%\n",
                          indent, op, static_cast<double>(time.calls) / steps,
                          ms, 100.0 * ms / ms_per_step);
  }
  return out;
}

namespace {

// Sets `out` to a float32 tensor's fingerprint and statistics.
void SetFloatFingerprint(const hash::FingerprintAndStatsResult& r,
                         int32_t index, v1::TensorFingerprint* out) {
  out->set_index(index);
  out->set_hash_hi(r.fingerprint.hi);
  out->set_hash_lo(r.fingerprint.lo);
  v1::TensorStats* s = out->mutable_stats();
  s->set_sum(r.stats.sum);
  s->set_l2(r.stats.l2);
  s->set_max_abs(r.stats.max_abs);
  s->set_nan_count(r.stats.nan_count);
  s->set_inf_count(r.stats.inf_count);
}

}  // namespace

absl::Status FingerprintTensor(const Tensor& t, int32_t index,
                               const hash::Parallelism* parallel,
                               v1::TensorFingerprint* out) {
  const hash::DtypeCode code = HashDtype(t.dtype());
  const size_t size = static_cast<size_t>(t.bytes());
  // Every field is assigned below, so a message reused from an earlier
  // tensor ends up equal to a new one, and its stats sub-message is reused
  // instead of allocated again.
  // A device-resident tensor is fingerprinted where it is (same bits).
  kernels::ResidentMirror* mirror = kernels::NewerResidentMirror(t);
  if (t.dtype() == kernels::DType::kFloat32) {
    const absl::StatusOr<hash::FingerprintAndStatsResult> r =
        mirror != nullptr
            ? mirror->FingerprintAndStats(code, t.shape(), size)
            : hash::FingerprintAndStats(code, t.shape(), t.raw_data(), size,
                                        hash::HashIsa::kAuto, parallel);
    if (!r.ok()) return r.status();
    SetFloatFingerprint(*r, index, out);
  } else {
    out->set_index(index);
    v1::TensorStats* s = out->mutable_stats();
    const absl::StatusOr<hash::Fingerprint> f =
        mirror != nullptr
            ? mirror->HashBytes(code, t.shape(), size)
            : hash::HashTensorBytes(code, t.shape(), t.raw_data(), size,
                                    hash::HashIsa::kAuto, parallel);
    if (!f.ok()) return f.status();
    out->set_hash_hi(f->hi);
    out->set_hash_lo(f->lo);
    s->Clear();  // all zero: statistics are defined for float32 only
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::TensorFingerprint> FingerprintTensor(
    const Tensor& t, int32_t index, const hash::Parallelism* parallel) {
  v1::TensorFingerprint fp;
  LS_RETURN_IF_ERROR(FingerprintTensor(t, index, parallel, &fp));
  return fp;
}

absl::StatusOr<std::string> BackendFor(const kernels::Registry& registry,
                                       const v1::JobConfig& config) {
  bool has_cuda = false;
  for (const kernels::KernelKey& k : registry.Keys()) {
    if (k.backend == kernels::kCudaBackendName) {
      has_cuda = true;
      break;
    }
  }
  switch (config.backend()) {
    case v1::CPU:
      return std::string(kernels::kCpuBackendName);
    case v1::CUDA:
      if (!has_cuda) {
        return absl::FailedPreconditionError(
            "config.backend: CUDA needs a usable CUDA device, and this worker "
            "has none (`lockstep-worker probe` says why)");
      }
      return std::string(kernels::kCudaBackendName);
    default:  // ANY, unspecified: the best backend this worker has
      return std::string(has_cuda ? kernels::kCudaBackendName
                                  : kernels::kCpuBackendName);
  }
}

namespace {

bool IsGenericAlgorithm(absl::string_view algorithm) {
  return algorithm == kernels::kDefaultAlgorithm ||
         algorithm == kernels::kDeterministicAlgorithm;
}

// The specific name of the kernel registered under `key` (see
// KernelVariant).
std::string ResolvedAlgorithm(const kernels::Registry& registry,
                              const kernels::KernelKey& key) {
  if (!IsGenericAlgorithm(key.algorithm)) return key.algorithm;
  const absl::StatusOr<KernelFn> fn = registry.Lookup(key);
  if (!fn.ok()) return key.algorithm;
  auto same_fn = [&](const kernels::KernelKey& k) {
    if (k.op != key.op || k.backend != key.backend || k == key) return false;
    const absl::StatusOr<KernelFn> other = registry.Lookup(k);
    return other.ok() && *other == *fn;
  };
  const std::vector<kernels::KernelKey> keys = registry.Keys();
  // 1. Another, specific name of the same mode; 2. a specific
  // DETERMINISTIC name.
  for (const kernels::Mode mode : {key.mode, kernels::Mode::kDeterministic}) {
    for (const kernels::KernelKey& k : keys) {
      if (k.mode == mode && !IsGenericAlgorithm(k.algorithm) &&
          k.algorithm != kernels::kCanonicalAlgorithm && same_fn(k)) {
        return k.algorithm;
      }
    }
  }
  // 3. The CANONICAL kernel; 4. the generic DETERMINISTIC one.
  if (same_fn({key.op, kernels::Mode::kCanonical, kernels::kCanonicalAlgorithm,
               key.backend})) {
    return kernels::kCanonicalAlgorithm;
  }
  if (key.mode != kernels::Mode::kDeterministic &&
      same_fn({key.op, kernels::Mode::kDeterministic,
               kernels::kDeterministicAlgorithm, key.backend})) {
    return kernels::kDeterministicAlgorithm;
  }
  return key.algorithm;
}

// ChooseKernel without the variant name.
absl::StatusOr<KernelChoice> ChooseKernelKey(const kernels::Registry& registry,
                                             const v1::JobConfig& config,
                                             const std::string& op);

}  // namespace

std::string KernelVariant(const kernels::Registry& registry,
                          const kernels::KernelKey& ran,
                          absl::string_view cpu_isa) {
  const std::string mode = absl::AsciiStrToLower(kernels::ModeName(ran.mode));
  std::string out = ran.backend;
  if (ran.backend == kernels::kCpuBackendName) {
    absl::StrAppend(&out, "/", cpu_isa);
  }
  absl::StrAppend(&out, "/", mode);
  const std::string algorithm = ResolvedAlgorithm(registry, ran);
  if (algorithm != mode) absl::StrAppend(&out, "/", algorithm);
  return out;
}

absl::StatusOr<KernelChoice> ChooseKernel(const kernels::Registry& registry,
                                          const v1::JobConfig& config,
                                          const std::string& op) {
  LS_ASSIGN_OR_RETURN(KernelChoice c, ChooseKernelKey(registry, config, op));
  c.variant = KernelVariant(registry, c.ran,
                            kernels::CpuIsaName(kernels::ActiveCpuIsa()));
  return c;
}

namespace {

absl::StatusOr<KernelChoice> ChooseKernelKey(const kernels::Registry& registry,
                                             const v1::JobConfig& config,
                                             const std::string& op) {
  LS_ASSIGN_OR_RETURN(const std::string backend, BackendFor(registry, config));
  KernelChoice c;
  c.op = op;
  c.requested_mode = ModeOf(config.determinism());
  const kernels::KernelKey canonical{op, kernels::Mode::kCanonical,
                                     kernels::kCanonicalAlgorithm, backend};
  auto it = config.op_algorithms().find(op);
  if (it != config.op_algorithms().end()) {
    c.requested_algorithm = it->second;
    const kernels::KernelKey key{op, c.requested_mode, it->second, backend};
    if (registry.Contains(key)) {
      c.ran = key;
      return c;
    }
    if (it->second == kernels::kCanonicalAlgorithm &&
        registry.Contains(canonical)) {
      c.ran = canonical;
      c.fallback = c.requested_mode != kernels::Mode::kCanonical;
      return c;
    }
    std::vector<std::string> available;
    for (const kernels::KernelKey& k : registry.Keys()) {
      if (k.op == op && k.backend == backend) {
        available.push_back(
            absl::StrCat(kernels::ModeName(k.mode), "/", k.algorithm));
      }
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "config.op_algorithms[\"%s\"]: algorithm \"%s\" is not registered for "
        "mode %s on backend %s; available: %s",
        op, it->second, kernels::ModeName(c.requested_mode), backend,
        available.empty() ? "none" : absl::StrJoin(available, ", ")));
  }
  if (c.requested_mode != kernels::Mode::kCanonical) {
    // The mode's default: the algorithm named like the mode
    // ("deterministic", "default"), else the first registered one.
    const std::string preferred =
        absl::AsciiStrToLower(kernels::ModeName(c.requested_mode));
    std::optional<kernels::KernelKey> first;
    for (const kernels::KernelKey& k : registry.Keys()) {
      if (k.op != op || k.mode != c.requested_mode || k.backend != backend) {
        continue;
      }
      if (k.algorithm == preferred) {
        c.ran = k;
        return c;
      }
      if (!first.has_value()) first = k;
    }
    if (first.has_value()) {
      c.ran = *first;
      return c;
    }
    c.fallback = true;
  }
  LS_RETURN_IF_ERROR(registry.Lookup(canonical).status());
  c.ran = canonical;
  return c;
}

}  // namespace

// ---------------------------------------------------------------------------

namespace {

struct LayerState {
  const model::LayerPlan* plan = nullptr;
  model::LayerOps ops;
  KernelFn forward = nullptr;
  KernelFn grad_input = nullptr;
  KernelFn grad_weight = nullptr;
  KernelFn bias_forward = nullptr;
  KernelFn bias_grad = nullptr;
  int weight = -1;  // index into params, or -1
  int bias = -1;
  std::vector<Tensor> in;  // forward inputs (DENSE: flattened views)
  Tensor out;              // output (activation or loss)
  std::vector<Tensor> params;
  std::vector<Tensor> grads;               // per param
  std::vector<std::vector<Tensor>> state;  // per param, optimizer state
  // Gradient w.r.t. each input in the input's shape; empty handle when the
  // input is the model input and no gradient is formed.
  std::vector<Tensor> grad_in;
  // The same storage in the shape the kernel writes (DENSE: [N, features]).
  std::vector<Tensor> grad_in_kernel;
  // ADD, MATMUL: per input, where a skipped (model input) gradient goes.
  std::vector<Tensor> grad_scratch;
  OpAttrs grad_attrs;  // TRANSPOSE: the inverse permutation
  Tensor running;      // BATCH_NORM: running mean and variance [2, C]
  Tensor mask;         // DROPOUT: this step's mask
  Tensor dy;           // gradient w.r.t. the output
  // out and dy in the shape the kernels take: DENSE with last_axis sees
  // [prod(leading), units]; the same storage as out / dy otherwise.
  Tensor out_k;
  Tensor dy_k;
  // How dy is formed: the list of contributions (consumers' grad_in).
  std::vector<Tensor> dy_parts;
  // Per input: whether the backward forms its gradient
  // (model::InputTakesGradient).
  std::vector<bool> takes_grad;
  // CONSTANT: its values; GATHER of a CONSTANT, SLICE: the int32 indices.
  Tensor aux;
  // BATCH_NORM in training on the CPU kernels: the batch statistics [2, C]
  // the forward saves and both gradients read instead of computing them
  // again from the same x (kernels/ops/norm.h); empty otherwise.
  // LAYER_NORM on the CPU kernels: likewise every row's mean and rstd
  // [2, rows].
  Tensor saved;
  bool saves_stats() const { return saved.numel() > 0; }
  // SOFTMAX on the CPU kernels: softmax.grad reads the forward's y (out)
  // instead of recomputing it from x (kernels/ops/norm.h).
  bool grad_reads_out = false;
  // RESHAPE, FLATTEN: out is a view of in[0] (no forward kernel runs);
  // RESHAPE, FLATTEN, ADD: each grad_in is a view of dy (no gradient
  // kernel runs). See Executor::State::ViewsAllowed.
  bool forward_view = false;
  bool grad_view = false;
};

bool IsGraphDataOp(v1::LayerOp op) {
  return op == v1::GATHER || op == v1::SLICE || op == v1::CONCAT;
}

// `shape` as [A, shape[axis], B] (A, B: the products before and after).
std::vector<int64_t> AxisView(const std::vector<int64_t>& shape, int axis) {
  int64_t a = 1, b = 1;
  for (int d = 0; d < axis; ++d) a *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) b *= shape[d];
  return {a, shape[axis], b};
}

}  // namespace

struct Executor::State {
  model::ModelPlan plan;
  v1::JobConfig config;
  const kernels::Registry* registry = nullptr;
  BatchSource batches;
  ExecutorOptions options;

  v1::TensorManifest manifest;
  std::vector<v1::ManifestEntry> step_tensors;
  std::vector<int> manifest_index;  // per step tensor: manifest index or -1
  std::vector<int> captured_steps;
  std::vector<char> step_captured;  // per step
  int fault_tensor = -1;            // step-tensor index the fault hits

  std::vector<KernelChoice> kernels;
  KernelFn add_forward = nullptr;
  KernelFn optimizer = nullptr;
  // Global-norm gradient clipping (config.optimizer.clip_grad_norm > 0).
  KernelFn sum_squares = nullptr;
  KernelFn scale = nullptr;
  Tensor clip_partial;  // [1]: one parameter's sum of squares
  Tensor clip_norm;     // [1]: the global norm, fingerprinted (GRAD_NORM)
  model::OptimizerOps optimizer_ops;
  OpAttrs optimizer_attrs;

  Tensor x;
  Tensor labels;
  Tensor labels_flat;  // labels as [N] or [N * T], as SOFTMAX_XENT takes them
  std::vector<LayerState> layers;

  // Progress.
  int steps_done = 0;
  bool failed = false;
  // A device-resident run (ExecutorOptions::device_resident on the CUDA
  // backend): every Setup / Step runs inside a ScopedResidentRun.
  bool resident = false;
  kernels::ResidencyCounters residency;
  size_t cursor = 0;  // next step tensor of the current step
  int step = 0;
  bool capturing = false;
  // The captured step's fingerprints by manifest index, filled as its
  // tensors are hashed. Reused from step to step unless kept.
  std::vector<v1::TensorFingerprint> step_fps;
  size_t emitted = 0;  // captured tensors of the current step so far
  std::vector<hash::Fingerprint> step_hashes;
  // Kernel calls made so far (Call), and the captured tensor hashed last in
  // the current step: its manifest index (-1: none yet), the tensor, and
  // the kernel calls made before it. A captured tensor emitted right after
  // it, with no kernel call in between, that is a view of the same bytes in
  // the same shape and dtype (ADD's two input gradients are dy, which the
  // layer after the ADD emitted just before) takes its fingerprint
  // instead of hashing those bytes again: same bytes, same header, same
  // fingerprint.
  int64_t kernel_calls = 0;
  int last_hashed = -1;
  int reusable_at = -1;  // the manifest index right after it, or its views
  Tensor last_hashed_tensor;
  int64_t last_hashed_calls = 0;
  // (manifest index, the index whose fingerprint it takes) of the current
  // step's reused fingerprints not copied yet.
  std::vector<std::pair<int, int>> reused;
  // The manifest indices of the current step's fingerprints queued on the
  // device (ExecutorOptions::queue_device_fingerprints), in queue order.
  std::vector<int> queued_on_device;
  // The CPU pool's threads, lent to the fingerprints of large tensors.
  hash::Parallelism fingerprint_threads;
  RunResult result;
  // Under kAuto with a background thread: which steps use it.
  std::optional<BackgroundChooser> chooser;
  // Whether the current step hashes its large tensors on `pipeline`.
  bool background_step = false;
  int background_steps = 0;  // steps that did, so far
  // Background fingerprints (null: inline). Declared last: destroyed first,
  // while the messages it writes into still exist.
  std::unique_ptr<FingerprintPipeline> pipeline;

  absl::StatusOr<KernelFn> Resolve(const std::string& op,
                                   std::map<std::string, KernelChoice>* used) {
    auto it = used->find(op);
    if (it == used->end()) {
      LS_ASSIGN_OR_RETURN(KernelChoice c, ChooseKernel(*registry, config, op));
      it = used->emplace(op, std::move(c)).first;
    }
    return registry->Lookup(it->second.ran);
  }

  absl::Status Setup();
  // Whether layer `lp`'s data-movement ops may be views instead of copies
  // (LayerState::forward_view, grad_view). Their values are the bytes they
  // would copy, so every fingerprint is the same either way; only a fault
  // injected into one of the layer's own tensors needs a copy, because a
  // bit flipped in a view would also flip the tensor it shares storage
  // with, which the copy leaves alone. ExecutorOptions::tensor_views off:
  // never.
  bool ViewsAllowed(const model::LayerPlan& lp) const {
    return options.tensor_views && !FaultHitsLayer(lp);
  }
  // Whether the run's injected fault lands in one of layer `lp`'s own
  // tensors.
  bool FaultHitsLayer(const model::LayerPlan& lp) const {
    return fault_tensor >= 0 && step_tensors[fault_tensor].layer() == lp.name;
  }
  absl::Status Step(int s);
  // Forward, loss, backward, clipping and the optimizer of one step.
  absl::Status RunPasses();
  absl::Status Forward();
  absl::Status Backward();
  absl::Status ClipGradients();
  absl::Status Optimize();
  absl::Status Emit(const std::string& layer, v1::TensorRole role,
                    absl::string_view op, absl::string_view slot, Tensor& t);
  // The end of a captured step: waits for the background hashes, then the
  // step digest's parts and the sink, in manifest order.
  absl::Status FinishCapture();
  // Whether to hash in the background (ExecutorOptions::fingerprint_thread).
  absl::StatusOr<bool> UseBackgroundFingerprints() const;
  // Whether captured tensor `t` (manifest index mi; `flipped`: a fault was
  // just injected into it) may take the fingerprint of the tensor hashed
  // last (last_hashed): emitted right after it with no kernel call in
  // between, not flipped, on the CPU, and the same storage, dtype and shape.
  bool SameBytesAsLastHashed(const Tensor& t, int mi, bool flipped) const {
    return last_hashed >= 0 && mi == reusable_at &&
           kernel_calls == last_hashed_calls && !flipped && !resident &&
           t.dtype() == last_hashed_tensor.dtype() &&
           t.raw_data() == last_hashed_tensor.raw_data() &&
           t.bytes() == last_hashed_tensor.bytes() &&
           t.shape() == last_hashed_tensor.shape();
  }
  // Copies the fingerprints listed in `reused` and clears it.
  void CopyReused() {
    for (const auto& [mi, source] : reused) {
      step_fps[mi] = step_fps[source];
      step_fps[mi].set_index(mi);
    }
    reused.clear();
  }
  // Adds the wall time since `start` to (*options.op_times)[op].
  void AddOpTime(absl::string_view op,
                 std::chrono::steady_clock::time_point start) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    auto it = options.op_times->find(op);
    if (it == options.op_times->end()) {
      it = options.op_times->emplace(std::string(op), OpTime{}).first;
    }
    it->second.seconds += s;
    ++it->second.calls;
  }
  absl::Status Call(KernelFn fn, const LayerState& l, absl::string_view op,
                    absl::Span<const Tensor> in, absl::Span<Tensor> out,
                    const OpAttrs& attrs);
};

absl::Status Executor::State::Call(KernelFn fn, const LayerState& l,
                                   absl::string_view op,
                                   absl::Span<const Tensor> in,
                                   absl::Span<Tensor> out,
                                   const OpAttrs& attrs) {
  if (background_step && pipeline->Busy()) {
    // A tensor submitted for hashing must not change before it is hashed.
    const auto start = options.op_times != nullptr
                           ? std::chrono::steady_clock::now()
                           : std::chrono::steady_clock::time_point();
    for (const Tensor& o : out) pipeline->WaitFor(o.raw_data(), o.bytes());
    if (options.op_times != nullptr) AddOpTime(kFingerprintWaitOpTime, start);
  }
  ++kernel_calls;
  absl::Status st;
  if (options.op_times == nullptr) {
    st = fn(in, out, attrs);
  } else {
    const auto start = std::chrono::steady_clock::now();
    st = fn(in, out, attrs);
    if (options.op_times_by_layer) {
      AddOpTime(absl::StrCat(l.plan->name, " ", op), start);
    } else {
      AddOpTime(op, start);
    }
  }
  if (!st.ok()) {
    return absl::Status(st.code(),
                        absl::StrFormat("step %d, layer \"%s\", %s: %s", step,
                                        l.plan->name, op, st.message()));
  }
  return absl::OkStatus();
}

absl::Status Executor::State::Emit(const std::string& layer,
                                   v1::TensorRole role, absl::string_view op,
                                   absl::string_view slot, Tensor& t) {
  auto produced = [&] {
    return absl::StrFormat(
        "layer \"%s\" %s %s%s %s", layer, v1::TensorRole_Name(role), op,
        slot.empty() ? "" : absl::StrCat(" slot ", slot), t.DebugString());
  };
  if (cursor >= step_tensors.size()) {
    return absl::InternalError(absl::StrFormat(
        "execution order left the manifest: step %d produced %s after the "
        "manifest's last entry",
        step, produced()));
  }
  const v1::ManifestEntry& e = step_tensors[cursor];
  if (e.layer() != layer || e.role() != role || e.op() != op ||
      e.slot() != slot || !SameShape(e, t)) {
    return absl::InternalError(absl::StrFormat(
        "execution order diverged from the manifest at step %d: expected "
        "entry %s, the executor produced %s",
        step, model::DescribeEntry(e), produced()));
  }
  const int index = static_cast<int>(cursor);
  ++cursor;
  bool flipped = false;
  if (index == fault_tensor && step == options.fault->step) {
    LS_RETURN_IF_ERROR(FlipBit(t, options.fault->element, options.fault->bit));
    result.fault_injected = true;
    flipped = true;
  }
  if (!capturing) return absl::OkStatus();
  const int mi = manifest_index[index];
  if (mi < 0) return absl::OkStatus();
  if (static_cast<size_t>(mi) != emitted) {
    return absl::InternalError(absl::StrFormat(
        "step %d: captured tensor %d produced as manifest entry %d", step,
        emitted, mi));
  }
  ++emitted;
  v1::TensorFingerprint& fp = step_fps[mi];
  // The clock is read only when op times are collected.
  const auto start = options.op_times != nullptr
                         ? std::chrono::steady_clock::now()
                         : std::chrono::steady_clock::time_point();
  if (SameBytesAsLastHashed(t, mi, flipped)) {
    // Copied at the step's end, when every hash has been collected; with
    // an observer (which hashes inline) the source is ready now.
    reused.emplace_back(mi, last_hashed);
    reusable_at = mi + 1;
    if (options.op_times != nullptr) AddOpTime(kFingerprintReusedOpTime, start);
    if (options.observer) {
      CopyReused();
      LS_RETURN_IF_ERROR(options.observer(step, manifest.entries(mi), t, fp));
    }
    return absl::OkStatus();
  }
  last_hashed = mi;
  reusable_at = mi + 1;
  last_hashed_tensor = t;
  last_hashed_calls = kernel_calls;
  kernels::ResidentMirror* mirror =
      resident && options.queue_device_fingerprints && !options.observer &&
              t.dtype() == kernels::DType::kFloat32
          ? kernels::NewerResidentMirror(t)
          : nullptr;
  if (background_step &&
      t.bytes() >= options.background_fingerprint_min_bytes) {
    pipeline->Submit(t, mi, &fp);
  } else if (mirror != nullptr) {
    LS_ASSIGN_OR_RETURN(
        const size_t position,
        mirror->QueueFingerprintAndStats(HashDtype(t.dtype()), t.shape(),
                                         static_cast<size_t>(t.bytes())));
    if (position != queued_on_device.size()) {
      return absl::InternalError(absl::StrFormat(
          "step %d: device fingerprint queued at %d, expected %d", step,
          position, queued_on_device.size()));
    }
    queued_on_device.push_back(mi);
  } else {
    LS_RETURN_IF_ERROR(FingerprintTensor(t, mi, &fingerprint_threads, &fp));
  }
  if (options.op_times != nullptr) AddOpTime(kFingerprintOpTime, start);
  if (options.observer) {
    LS_RETURN_IF_ERROR(options.observer(step, manifest.entries(mi), t, fp));
  }
  return absl::OkStatus();
}

absl::Status Executor::State::FinishCapture() {
  if (!queued_on_device.empty()) {
    const auto start = options.op_times != nullptr
                           ? std::chrono::steady_clock::now()
                           : std::chrono::steady_clock::time_point();
    LS_ASSIGN_OR_RETURN(
        const std::vector<hash::FingerprintAndStatsResult> results,
        kernels::CollectQueuedFingerprints());
    if (results.size() != queued_on_device.size()) {
      return absl::InternalError(absl::StrFormat(
          "step %d: %d device fingerprints collected, %d queued", step,
          results.size(), queued_on_device.size()));
    }
    for (size_t i = 0; i < results.size(); ++i) {
      const int mi = queued_on_device[i];
      SetFloatFingerprint(results[i], mi, &step_fps[mi]);
    }
    queued_on_device.clear();
    if (options.op_times != nullptr) AddOpTime(kFingerprintWaitOpTime, start);
  }
  if (background_step) {
    const auto start = options.op_times != nullptr
                           ? std::chrono::steady_clock::now()
                           : std::chrono::steady_clock::time_point();
    absl::Status st = pipeline->Drain();
    if (options.op_times != nullptr) AddOpTime(kFingerprintWaitOpTime, start);
    LS_RETURN_IF_ERROR(st);
  }
  CopyReused();
  step_hashes.resize(emitted);
  for (size_t i = 0; i < emitted; ++i) step_hashes[i] = HashOf(step_fps[i]);
  if (options.fingerprint_sink) {
    for (size_t i = 0; i < emitted; ++i) {
      LS_RETURN_IF_ERROR(options.fingerprint_sink(
          step, manifest.entries(static_cast<int>(i)), step_fps[i]));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Executor::State::UseBackgroundFingerprints() const {
  if (!options.fingerprint ||
      options.fingerprint_thread == FingerprintThread::kInline) {
    return false;
  }
  const bool forced =
      options.fingerprint_thread == FingerprintThread::kBackground;
  if (options.observer || resident) {
    if (!forced) return false;
    return absl::InvalidArgumentError(absl::StrCat(
        "fingerprint_thread: background fingerprints cannot be used ",
        options.observer ? "with an observer, which sees each tensor as it "
                           "is hashed (use fingerprint_sink)"
                         : "on a device-resident run, whose tensors are "
                           "fingerprinted on the device"));
  }
  if (forced) return true;
  bool large = false;
  for (const v1::ManifestEntry& e : manifest.entries()) {
    int64_t bytes = e.dtype() == v1::UINT8 ? 1 : 4;
    for (int64_t d : e.shape()) bytes *= d;
    large = large || bytes >= options.background_fingerprint_min_bytes;
  }
  if (!large) return false;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const int available =
      sched_getaffinity(0, sizeof(cpus), &cpus) == 0
          ? CPU_COUNT(&cpus)
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return kernels::CpuThreadPool()->num_threads() < available;
}

absl::Status Executor::State::Setup() {
  LS_RETURN_IF_ERROR(CheckConfig(plan, config));
  // config.threads: the CPU kernels' pool for this run (0: the worker's
  // default). CANONICAL bits do not depend on it; DEFAULT's atomic kernels
  // do, and a user pins them to one thread this way.
  if (config.threads() > 0 &&
      kernels::CpuThreadPool()->num_threads() != config.threads()) {
    kernels::SetCpuThreads(config.threads());
  }
  fingerprint_threads = CpuPoolParallelism();
  if (options.device_resident) {
    LS_ASSIGN_OR_RETURN(const std::string backend,
                        BackendFor(*registry, config));
    resident = backend == kernels::kCudaBackendName;
  }

  LS_ASSIGN_OR_RETURN(manifest, model::BuildManifest(plan, config));
  LS_ASSIGN_OR_RETURN(const bool background, UseBackgroundFingerprints());
  if (background) {
    pipeline = std::make_unique<FingerprintPipeline>(
        [](const Tensor& t, int32_t index, v1::TensorFingerprint* out) {
          return FingerprintTensor(t, index, nullptr, out);
        },
        options.hold_background_fingerprints);
    if (options.fingerprint_thread == FingerprintThread::kAuto) {
      chooser.emplace();
    }
  }
  LS_ASSIGN_OR_RETURN(step_tensors, model::StepTensors(plan, config));
  captured_steps = model::ExpandCapturedSteps(manifest);
  step_captured.assign(config.steps(), 0);
  for (int s : captured_steps) step_captured[s] = 1;
  manifest_index.assign(step_tensors.size(), -1);
  {
    int mi = 0;
    for (size_t i = 0; i < step_tensors.size(); ++i) {
      if (model::PolicyCapturesEntry(config.capture(), step_tensors[i])) {
        manifest_index[i] = mi++;
      }
    }
    if (mi != manifest.entries_size()) {
      return absl::InternalError("manifest and step tensors disagree");
    }
  }
  if (options.fault.has_value()) {
    LS_ASSIGN_OR_RETURN(fault_tensor, ResolveFault(*options.fault, step_tensors,
                                                   config.steps()));
    result.fault = options.fault;
    result.fault_entry = manifest_index[fault_tensor] >= 0
                             ? manifest.entries(manifest_index[fault_tensor])
                             : step_tensors[fault_tensor];
  }
  if (!batches.fill) {
    return absl::InvalidArgumentError("executor: no batch source given");
  }
  // Op names in config.op_algorithms must be real ops.
  {
    const std::vector<std::string> ops = registry->Ops();
    for (const auto& [op, alg] : config.op_algorithms()) {
      if (!std::binary_search(ops.begin(), ops.end(), op)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "config.op_algorithms: unknown op \"%s\" (known: %s)", op,
            absl::StrJoin(ops, ", ")));
      }
    }
  }

  std::map<std::string, KernelChoice> used;
  LS_ASSIGN_OR_RETURN(optimizer_ops,
                      model::OpsOfOptimizer(config.optimizer().kind()));
  LS_ASSIGN_OR_RETURN(optimizer, Resolve(optimizer_ops.op, &used));
  optimizer_attrs = OptimizerAttrs(config.optimizer());
  if (config.optimizer().clip_grad_norm() > 0.0f) {
    LS_ASSIGN_OR_RETURN(sum_squares,
                        Resolve(kernels::op::kGradNormSumSquares, &used));
    LS_ASSIGN_OR_RETURN(scale, Resolve(kernels::op::kGradNormScale, &used));
    LS_ASSIGN_OR_RETURN(clip_partial, Zeros({1}, "gradient clipping"));
    LS_ASSIGN_OR_RETURN(clip_norm, Zeros({1}, "gradient norm"));
  }

  const std::vector<std::vector<model::Consumer>> consumers =
      model::GradientConsumers(plan);
  const std::vector<bool> carries = model::CarriesGradient(plan);
  // Plans built by hand may leave the label shape out: one label per
  // example.
  if (plan.label_shape.empty()) plan.label_shape = {plan.input_shape[0]};
  LS_ASSIGN_OR_RETURN(x,
                      Zeros(plan.input_shape, "batch input", plan.input_dtype));
  LS_ASSIGN_OR_RETURN(
      labels, Zeros(plan.label_shape, "batch labels", kernels::DType::kInt32));
  LS_ASSIGN_OR_RETURN(labels_flat, labels.Reshape({labels.numel()}));
  const int n_layers = static_cast<int>(plan.layers.size());
  layers.resize(n_layers);
  for (int i = 0; i < n_layers; ++i) {
    LayerState& l = layers[i];
    l.plan = &plan.layers[i];
    const model::LayerPlan& lp = *l.plan;
    const std::string what = absl::StrFormat("layer \"%s\"", lp.name);
    LS_ASSIGN_OR_RETURN(l.ops, model::OpsOfLayer(lp.op));
    const bool reshapes = lp.op == v1::RESHAPE || lp.op == v1::FLATTEN;
    // The batch source owns the model input's storage: copied from it.
    l.forward_view =
        reshapes && lp.inputs[0] != model::kModelInput && ViewsAllowed(lp);
    l.grad_view = (reshapes || lp.op == v1::ADD) && ViewsAllowed(lp);
    // An op done by a view keeps its kernel choice: the run records the
    // variant of every op it fingerprints (server/analysis.cc reads it),
    // and a view holds exactly the bytes that kernel would copy.
    LS_ASSIGN_OR_RETURN(l.forward, Resolve(l.ops.forward, &used));
    if (lp.op != v1::BIAS_ADD && *l.ops.grad_input != '\0') {
      LS_ASSIGN_OR_RETURN(l.grad_input, Resolve(l.ops.grad_input, &used));
    }
    if (*l.ops.grad_weight != '\0') {
      LS_ASSIGN_OR_RETURN(l.grad_weight, Resolve(l.ops.grad_weight, &used));
    }
    LS_ASSIGN_OR_RETURN(l.out, Zeros(lp.output_shape, what + " output"));
    l.out_k = l.out;
    if (lp.last_axis) {
      const int64_t units = lp.output_shape.back();
      LS_ASSIGN_OR_RETURN(l.out_k,
                          l.out.Reshape({l.out.numel() / units, units}));
    }
    if (IsGraphDataOp(lp.op)) {
      // The kernels see [A, V, B] views around the axis (graph_ops.h).
      std::vector<int64_t> view;
      if (lp.op == v1::GATHER) {
        // [A, P, B]: P, the number of indices, replaces data's V.
        view = AxisView(lp.input_shapes[0], lp.axis);
        view[1] = l.out.numel() / std::max<int64_t>(1, view[0] * view[2]);
      } else {
        view = AxisView(lp.output_shape, lp.axis);
      }
      LS_ASSIGN_OR_RETURN(l.out_k, l.out.Reshape(view));
    }
    if (lp.op == v1::CONSTANT) {
      LS_ASSIGN_OR_RETURN(l.aux, Zeros(lp.output_shape, what + " values"));
      std::copy(lp.constant_values.begin(), lp.constant_values.end(),
                l.aux.data<float>());
      l.in.push_back(l.aux);
    }
    if (!lp.indices.empty()) {
      LS_ASSIGN_OR_RETURN(l.aux,
                          Zeros({static_cast<int64_t>(lp.indices.size())},
                                what + " indices", kernels::DType::kInt32));
      std::copy(lp.indices.begin(), lp.indices.end(), l.aux.data<int32_t>());
    }
    for (size_t k = 0; k < lp.inputs.size(); ++k) {
      const int src = lp.inputs[k];
      Tensor t = src == model::kModelInput ? x : layers[src].out;
      if (lp.op == v1::GATHER && k == 1) {
        // The indices: the batch's token ids, or the CONSTANT's, wrapped.
        if (src == model::kModelInput) {
          LS_ASSIGN_OR_RETURN(t, t.Reshape({t.numel()}));
        } else {
          t = l.aux;
        }
      } else if (IsGraphDataOp(lp.op)) {
        LS_ASSIGN_OR_RETURN(t,
                            t.Reshape(AxisView(lp.input_shapes[k], lp.axis)));
      } else if (lp.op == v1::MATMUL && lp.last_axis && k == 0) {
        // A batched a times an unbatched 2-D b: a as [prod(leading), K].
        LS_ASSIGN_OR_RETURN(
            t, t.Reshape({t.numel() / t.shape().back(), t.shape().back()}));
      }
      if (lp.op == v1::DENSE || lp.op == v1::SOFTMAX_XENT) {
        // DENSE: [N, features], or [prod(leading), K] with last_axis;
        // SOFTMAX_XENT: [N, C], or [N * T, C] for a token model.
        const bool rows = lp.last_axis || lp.op == v1::SOFTMAX_XENT;
        const int64_t cols = rows ? t.shape().back()
                                  : (t.dim(0) == 0 ? 0 : t.numel() / t.dim(0));
        LS_ASSIGN_OR_RETURN(
            t, t.Reshape({cols == 0 ? 0 : t.numel() / cols, cols}));
      }
      l.in.push_back(t);
    }
    if (lp.op == v1::SLICE) l.in.push_back(l.aux);
    if (l.forward_view) {
      // The producer writes its output buffer in place every step, so a
      // view of it holds this layer's output as soon as it is produced.
      LS_ASSIGN_OR_RETURN(l.out, l.in[0].Reshape(lp.output_shape));
      l.out_k = l.out;
    }
    for (size_t p = 0; p < lp.params.size(); ++p) {
      const model::ParamPlan& pp = lp.params[p];
      if (pp.role == v1::WEIGHT) l.weight = static_cast<int>(p);
      if (pp.role == v1::BIAS) l.bias = static_cast<int>(p);
      LS_ASSIGN_OR_RETURN(Tensor w, Zeros(pp.shape, what + " " + pp.name));
      if (const v1::ParameterTensor* given =
              FindParameterTensor(options.parameters, lp.name, pp.name)) {
        LS_RETURN_IF_ERROR(CopyParameterTensor(*given, w));
      } else if (options.param_init) {
        LS_RETURN_IF_ERROR(options.param_init(i, static_cast<int>(p), w));
      } else {
        LS_RETURN_IF_ERROR(InitializeParam(
            config.seed(), i, static_cast<int>(p), pp, options.initializer, w));
      }
      l.params.push_back(w);
      LS_ASSIGN_OR_RETURN(Tensor g, Zeros(pp.shape, what + " grad"));
      l.grads.push_back(g);
      std::vector<Tensor> st;
      for (size_t k = 0; k < optimizer_ops.state_slots.size(); ++k) {
        LS_ASSIGN_OR_RETURN(Tensor v, Zeros(pp.shape, what + " state"));
        st.push_back(v);
      }
      l.state.push_back(std::move(st));
    }
    if (lp.op == v1::BATCH_NORM) {
      const int64_t channels = lp.output_shape[1];
      LS_ASSIGN_OR_RETURN(l.running,
                          Zeros({2, channels}, what + " running statistics"));
      float* r = l.running.data<float>();
      for (int64_t c = 0; c < channels; ++c) r[channels + c] = 1.0f;
      if (const v1::ParameterTensor* given = FindParameterTensor(
              options.parameters, lp.name, kRunningStatsParam)) {
        LS_RETURN_IF_ERROR(CopyParameterTensor(*given, l.running));
      }
      if (AllOnCpu(used, {kernels::op::kBatchNormForward,
                          kernels::op::kBatchNormGradInput,
                          kernels::op::kBatchNormGradParams}) &&
          !lp.attrs.batch_norm_eval) {
        LS_ASSIGN_OR_RETURN(
            l.saved, Zeros({2, channels}, what + " saved batch statistics"));
      }
    }
    // out is written only by the forward; a fault injected into it (at its
    // emission) would reach a gradient that read it but not one that
    // recomputes it, so a layer a fault hits recomputes, as the spec does.
    l.grad_reads_out = lp.op == v1::SOFTMAX && l.bias < 0 &&
                       AllOnCpu(used, {kernels::op::kSoftmaxGrad}) &&
                       !FaultHitsLayer(lp);
    if (lp.op == v1::LAYER_NORM && !lp.output_shape.empty() &&
        lp.output_shape.back() > 0 &&
        AllOnCpu(used, {kernels::op::kLayerNormForward,
                        kernels::op::kLayerNormGradInput,
                        kernels::op::kLayerNormGradParams})) {
      const int64_t rows = l.out.numel() / lp.output_shape.back();
      LS_ASSIGN_OR_RETURN(l.saved,
                          Zeros({2, rows}, what + " saved row statistics"));
    }
    if (lp.op == v1::DROPOUT) {
      LS_ASSIGN_OR_RETURN(l.mask, Zeros(lp.output_shape, what + " mask"));
    }
    const bool own_bias = lp.op == v1::LAYER_NORM || lp.op == v1::BATCH_NORM;
    if (l.bias >= 0 && !own_bias) {
      LS_ASSIGN_OR_RETURN(l.bias_forward,
                          Resolve(kernels::op::kBiasAddForward, &used));
      LS_ASSIGN_OR_RETURN(l.bias_grad,
                          Resolve(kernels::op::kBiasAddGrad, &used));
    }
    if (lp.op == v1::BIAS_ADD) l.bias_forward = l.forward;
  }
  // Gradients, consumers before producers.
  for (int i = n_layers - 1; i >= 0; --i) {
    LayerState& l = layers[i];
    const model::LayerPlan& lp = *l.plan;
    const std::string what = absl::StrFormat("layer \"%s\"", lp.name);
    if (lp.op != v1::SOFTMAX_XENT) {
      for (const model::Consumer& c : consumers[i]) {
        l.dy_parts.push_back(layers[c.layer].grad_in[c.input]);
      }
      if (l.dy_parts.size() == 1) {
        l.dy = l.dy_parts[0];
      } else {
        // A sum buffer, or zeros for an output nobody reads.
        LS_ASSIGN_OR_RETURN(l.dy, Zeros(lp.output_shape, what + " grad"));
        if (l.dy_parts.size() > 1 && add_forward == nullptr) {
          LS_ASSIGN_OR_RETURN(add_forward,
                              Resolve(kernels::op::kAddForward, &used));
        }
      }
      l.dy_k = l.dy;
      if (lp.last_axis || IsGraphDataOp(lp.op)) {
        LS_ASSIGN_OR_RETURN(l.dy_k, l.dy.Reshape(l.out_k.shape()));
      }
    }
    l.grad_in.resize(lp.inputs.size());
    l.grad_in_kernel.resize(lp.inputs.size());
    l.takes_grad.resize(lp.inputs.size());
    for (size_t k = 0; k < lp.inputs.size(); ++k) {
      l.takes_grad[k] =
          model::InputTakesGradient(plan, carries, lp, static_cast<int>(k));
      if (!l.takes_grad[k]) continue;
      if (lp.op == v1::BIAS_ADD) {
        l.grad_in[k] = l.dy;  // d(x + b)/dx = identity: no kernel
      } else if (l.grad_view) {
        // Identities too: d(a + b)/da = d(a + b)/db = dy, and a reshape's
        // gradient is dy in the input's shape. Nothing writes into a
        // gradient after its producer, so the views stay equal to the
        // copies they replace.
        LS_ASSIGN_OR_RETURN(l.grad_in[k], l.dy.Reshape(lp.input_shapes[k]));
      } else {
        LS_ASSIGN_OR_RETURN(l.grad_in[k],
                            Zeros(lp.input_shapes[k], what + " input grad"));
      }
      l.grad_in_kernel[k] = l.grad_in[k];
      if (lp.op == v1::DENSE || lp.op == v1::SOFTMAX_XENT ||
          IsGraphDataOp(lp.op) || (lp.op == v1::MATMUL && lp.last_axis)) {
        LS_ASSIGN_OR_RETURN(l.grad_in_kernel[k],
                            l.grad_in[k].Reshape(l.in[k].shape()));
      }
    }
    if (lp.op == v1::ADD || lp.op == v1::MATMUL || lp.op == v1::CONCAT ||
        lp.op == v1::BINARY || lp.op == v1::WHERE) {
      l.grad_scratch.resize(lp.inputs.size());
      for (size_t k = 0; k < lp.inputs.size(); ++k) {
        if (l.takes_grad[k]) continue;
        LS_ASSIGN_OR_RETURN(l.grad_scratch[k],
                            Zeros(l.in[k].shape(), what + " scratch"));
      }
    }
    l.grad_attrs = lp.attrs;
    if (lp.op == v1::TRANSPOSE) {
      for (int d = 0; d < lp.attrs.perm_rank; ++d) {
        l.grad_attrs.perm[lp.attrs.perm[d]] = d;
      }
    }
  }
  for (auto& [op, c] : used) kernels.push_back(c);
  result.kernels = kernels;
  result.manifest = manifest;
  result.captured_steps = captured_steps;
  result.dataset_digest = batches.digest;
  result.losses.reserve(config.steps());
  return absl::OkStatus();
}

absl::Status Executor::State::Forward() {
  LS_RETURN_IF_ERROR(batches.fill(step, x, labels));
  if (x.dtype() != plan.input_dtype || x.shape() != plan.input_shape ||
      labels.dtype() != kernels::DType::kInt32 ||
      labels.shape() != plan.label_shape) {
    return absl::InternalError(
        "batch source replaced the preallocated batch tensors");
  }
  LS_RETURN_IF_ERROR(Emit("", v1::INPUT, model::kInputOp, "", x));
  LS_RETURN_IF_ERROR(Emit("", v1::LABEL, model::kLabelsOp, "", labels));
  for (LayerState& l : layers) {
    const model::LayerPlan& lp = *l.plan;
    v1::TensorRole role = v1::ACTIVATION;
    switch (lp.op) {
      case v1::DENSE:
      case v1::CONV2D:
      case v1::CONV_TRANSPOSE2D:
      case v1::EMBEDDING: {
        const Tensor in[] = {l.in[0], l.params[l.weight]};
        Tensor out[] = {l.out_k};
        LS_RETURN_IF_ERROR(
            Call(l.forward, l, l.ops.forward, in, out, lp.attrs));
        break;
      }
      case v1::SOFTMAX_XENT: {
        const Tensor in[] = {l.in[0], labels_flat};
        Tensor out[] = {l.out};
        LS_RETURN_IF_ERROR(
            Call(l.forward, l, l.ops.forward, in, out, lp.attrs));
        role = v1::LOSS;
        break;
      }
      case v1::BIAS_ADD: {
        const Tensor in[] = {l.in[0], l.params[l.bias]};
        Tensor out[] = {l.out};
        LS_RETURN_IF_ERROR(
            Call(l.forward, l, l.ops.forward, in, out, lp.attrs));
        break;
      }
      case v1::LAYER_NORM: {
        const Tensor in[] = {l.in[0], l.params[l.weight], l.params[l.bias]};
        Tensor out[] = {l.out, l.saved};
        LS_RETURN_IF_ERROR(Call(l.forward, l, l.ops.forward, in,
                                absl::MakeSpan(out, l.saves_stats() ? 2 : 1),
                                lp.attrs));
        break;
      }
      case v1::BATCH_NORM: {
        const Tensor in[] = {l.in[0], l.params[l.weight], l.params[l.bias]};
        Tensor out[] = {l.out, l.running, l.saved};
        LS_RETURN_IF_ERROR(Call(l.forward, l, l.ops.forward, in,
                                absl::MakeSpan(out, l.saves_stats() ? 3 : 2),
                                lp.attrs));
        break;
      }
      case v1::PARAMETER: {
        const Tensor in[] = {l.params[l.weight]};
        Tensor out[] = {l.out};
        LS_RETURN_IF_ERROR(
            Call(l.forward, l, l.ops.forward, in, out, lp.attrs));
        break;
      }
      case v1::MATMUL:
      case v1::GATHER:
      case v1::SLICE:
      case v1::CONCAT: {  // the kernels' views (out_k is out for MATMUL
                          // unless b is unbatched)
        Tensor out[] = {l.out_k};
        LS_RETURN_IF_ERROR(
            Call(l.forward, l, l.ops.forward, l.in, out, lp.attrs));
        break;
      }
      case v1::DROPOUT: {
        // A fresh mask per layer and step (kernels/ops/dropout.h).
        OpAttrs a = lp.attrs;
        a.dropout_seed = config.seed();
        a.dropout_stream = canonical::kDropoutStreamBase +
                           (static_cast<uint64_t>(lp.index) << 24) +
                           static_cast<uint64_t>(step);
        const Tensor in[] = {l.in[0]};
        Tensor out[] = {l.out, l.mask};
        LS_RETURN_IF_ERROR(Call(l.forward, l, l.ops.forward, in, out, a));
        break;
      }
      default: {  // RELU, activations, SOFTMAX, pools, FLATTEN, ADD, RESIZE,
                  // TRANSPOSE, RESHAPE, CONSTANT
        if (l.forward_view) break;  // out is a view of the input
        Tensor out[] = {l.out};
        LS_RETURN_IF_ERROR(
            Call(l.forward, l, l.ops.forward, l.in, out, lp.attrs));
        break;
      }
    }
    if (l.bias >= 0 && lp.op != v1::BIAS_ADD && lp.op != v1::LAYER_NORM &&
        lp.op != v1::BATCH_NORM) {
      // The layer's own bias, in place on its output.
      const Tensor in[] = {l.out_k, l.params[l.bias]};
      Tensor out[] = {l.out_k};
      LS_RETURN_IF_ERROR(Call(l.bias_forward, l, kernels::op::kBiasAddForward,
                              in, out, lp.attrs));
    }
    LS_RETURN_IF_ERROR(Emit(lp.name, role, l.ops.forward, "", l.out));
    if (lp.op == v1::BATCH_NORM) {
      LS_RETURN_IF_ERROR(Emit(lp.name, v1::RUNNING_STAT, l.ops.forward,
                              model::kSlotRunning, l.running));
    }
    if (lp.op == v1::DROPOUT) {
      LS_RETURN_IF_ERROR(Emit(lp.name, v1::DROPOUT_MASK, l.ops.forward,
                              model::kSlotMask, l.mask));
    }
  }
  return absl::OkStatus();
}

namespace {
// The tensor a two-input gradient kernel writes input k's gradient into:
// the input's gradient, or scratch for the model input (no gradient kept).
Tensor GradOutput(const LayerState& l, int k) {
  return l.takes_grad[k] ? l.grad_in_kernel[k] : l.grad_scratch[k];
}
}  // namespace

absl::Status Executor::State::Backward() {
  for (int i = static_cast<int>(layers.size()) - 1; i >= 0; --i) {
    LayerState& l = layers[i];
    const model::LayerPlan& lp = *l.plan;
    if (l.dy_parts.size() > 1) {
      // Sum of the contributions, in increasing (consumer layer, input)
      // order, left to right: ((c0 + c1) + c2) + ...
      const OpAttrs none;
      {
        const Tensor in[] = {l.dy_parts[0], l.dy_parts[1]};
        Tensor out[] = {l.dy};
        LS_RETURN_IF_ERROR(
            Call(add_forward, l, model::kGradAccumulateOp, in, out, none));
      }
      for (size_t k = 2; k < l.dy_parts.size(); ++k) {
        const Tensor in[] = {l.dy, l.dy_parts[k]};
        Tensor out[] = {l.dy};
        LS_RETURN_IF_ERROR(
            Call(add_forward, l, model::kGradAccumulateOp, in, out, none));
      }
      LS_RETURN_IF_ERROR(Emit(lp.name, v1::GRAD_ACTIVATION,
                              model::kGradAccumulateOp, model::kSlotSum, l.dy));
    }
    // BATCH_NORM on the CPU kernels with an input gradient: grad_params
    // writes grad_input's dx too, from one read of x and dy for both sums
    // (kernels/ops/norm.h); dx is emitted where grad_input's would be.
    const bool bn_both =
        lp.op == v1::BATCH_NORM && l.saves_stats() && l.takes_grad[0];
    if (lp.op == v1::LAYER_NORM || lp.op == v1::BATCH_NORM) {
      // Both parameter gradients in one call; the shift first, as listed
      // in the manifest.
      std::vector<Tensor> in = {l.in[0], l.dy};
      if (lp.op == v1::BATCH_NORM) in.push_back(l.running);
      if (l.saves_stats()) in.push_back(l.saved);
      std::vector<Tensor> out = {l.grads[l.weight], l.grads[l.bias]};
      if (bn_both) {
        in.push_back(l.params[l.weight]);
        out.push_back(l.grad_in_kernel[0]);
      }
      LS_RETURN_IF_ERROR(Call(l.grad_weight, l, l.ops.grad_weight, in,
                              absl::MakeSpan(out), lp.attrs));
      LS_RETURN_IF_ERROR(
          Emit(lp.name, v1::GRAD_BIAS, l.ops.grad_weight, "", l.grads[l.bias]));
      LS_RETURN_IF_ERROR(Emit(lp.name, v1::GRAD_WEIGHT, l.ops.grad_weight, "",
                              l.grads[l.weight]));
    } else if (l.bias >= 0) {
      const Tensor in[] = {l.dy_k};
      Tensor out[] = {l.grads[l.bias]};
      LS_RETURN_IF_ERROR(
          Call(l.bias_grad, l, kernels::op::kBiasAddGrad, in, out, lp.attrs));
      LS_RETURN_IF_ERROR(Emit(lp.name, v1::GRAD_BIAS, kernels::op::kBiasAddGrad,
                              "", l.grads[l.bias]));
    }
    if (lp.op == v1::PARAMETER) {
      // The value's gradient is its output gradient (the fan-out sum).
      const Tensor in[] = {l.dy};
      Tensor out[] = {l.grads[l.weight]};
      LS_RETURN_IF_ERROR(
          Call(l.grad_weight, l, l.ops.grad_weight, in, out, lp.attrs));
      LS_RETURN_IF_ERROR(Emit(lp.name, v1::GRAD_WEIGHT, l.ops.grad_weight, "",
                              l.grads[l.weight]));
    } else if (l.weight >= 0 && lp.op != v1::LAYER_NORM &&
               lp.op != v1::BATCH_NORM) {
      const Tensor in[] = {l.in[0], l.dy_k};
      Tensor out[] = {l.grads[l.weight]};
      LS_RETURN_IF_ERROR(
          Call(l.grad_weight, l, l.ops.grad_weight, in, out, lp.attrs));
      LS_RETURN_IF_ERROR(Emit(lp.name, v1::GRAD_WEIGHT, l.ops.grad_weight, "",
                              l.grads[l.weight]));
    }
    // Gradients w.r.t. the inputs (none w.r.t. the model input).
    bool any = false;
    for (const bool t : l.takes_grad) any = any || t;
    if (!any) continue;
    switch (lp.op) {
      case v1::DENSE:
      case v1::CONV2D:
      case v1::CONV_TRANSPOSE2D: {
        const Tensor in[] = {l.dy_k, l.params[l.weight]};
        Tensor out[] = {l.grad_in_kernel[0]};
        LS_RETURN_IF_ERROR(
            Call(l.grad_input, l, l.ops.grad_input, in, out, lp.attrs));
        break;
      }
      case v1::RELU:
      case v1::SIGMOID:
      case v1::TANH:
      case v1::SILU:
      case v1::GELU:
      case v1::GELU_TANH:
      case v1::SOFTMAX:
      case v1::MAX_POOL2D:
      case v1::UNARY: {
        const Tensor in[] = {l.in[0], l.dy, l.out};
        Tensor out[] = {l.grad_in_kernel[0]};
        LS_RETURN_IF_ERROR(Call(
            l.grad_input, l, l.ops.grad_input,
            absl::MakeConstSpan(in, l.grad_reads_out ? 3 : 2), out, lp.attrs));
        break;
      }
      case v1::SOFTMAX_XENT: {
        const Tensor in[] = {l.in[0], labels_flat};
        Tensor out[] = {l.grad_in_kernel[0]};
        LS_RETURN_IF_ERROR(
            Call(l.grad_input, l, l.ops.grad_input, in, out, lp.attrs));
        break;
      }
      case v1::ADD: {
        if (l.grad_view) break;  // both gradients are views of dy
        const Tensor in[] = {l.dy};
        Tensor out[] = {GradOutput(l, 0), GradOutput(l, 1)};
        LS_RETURN_IF_ERROR(
            Call(l.grad_input, l, l.ops.grad_input, in, out, lp.attrs));
        break;
      }
      case v1::LAYER_NORM: {
        const Tensor in[] = {l.in[0], l.params[l.weight], l.dy, l.saved};
        Tensor out[] = {l.grad_in_kernel[0]};
        LS_RETURN_IF_ERROR(Call(
            l.grad_input, l, l.ops.grad_input,
            absl::MakeConstSpan(in, l.saves_stats() ? 4 : 3), out, lp.attrs));
        break;
      }
      case v1::BATCH_NORM: {
        if (bn_both) break;  // dx came with the parameter gradients
        const Tensor in[] = {l.in[0], l.params[l.weight], l.dy, l.running,
                             l.saved};
        Tensor out[] = {l.grad_in_kernel[0]};
        LS_RETURN_IF_ERROR(Call(
            l.grad_input, l, l.ops.grad_input,
            absl::MakeConstSpan(in, l.saves_stats() ? 5 : 4), out, lp.attrs));
        break;
      }
      case v1::DROPOUT: {
        const Tensor in[] = {l.mask, l.dy};
        Tensor out[] = {l.grad_in_kernel[0]};
        LS_RETURN_IF_ERROR(
            Call(l.grad_input, l, l.ops.grad_input, in, out, lp.attrs));
        break;
      }
      case v1::GATHER:
      case v1::SLICE: {  // only the data (input 0) takes a gradient
        const Tensor in[] = {l.in[1], l.dy_k};
        Tensor out[] = {l.grad_in_kernel[0]};
        LS_RETURN_IF_ERROR(
            Call(l.grad_input, l, l.ops.grad_input, in, out, lp.attrs));
        break;
      }
      case v1::CONCAT: {
        const Tensor in[] = {l.dy_k};
        std::vector<Tensor> out;
        for (size_t k = 0; k < lp.inputs.size(); ++k) {
          out.push_back(GradOutput(l, static_cast<int>(k)));
        }
        LS_RETURN_IF_ERROR(Call(l.grad_input, l, l.ops.grad_input, in,
                                absl::MakeSpan(out), lp.attrs));
        break;
      }
      case v1::MATMUL:
      case v1::BINARY: {
        const Tensor in[] = {l.in[0], l.in[1], l.dy_k};
        Tensor out[] = {GradOutput(l, 0), GradOutput(l, 1)};
        LS_RETURN_IF_ERROR(
            Call(l.grad_input, l, l.ops.grad_input, in, out, lp.attrs));
        break;
      }
      case v1::TRANSPOSE: {
        const Tensor in[] = {l.dy};
        Tensor out[] = {l.grad_in_kernel[0]};
        LS_RETURN_IF_ERROR(
            Call(l.grad_input, l, l.ops.grad_input, in, out, l.grad_attrs));
        break;
      }
      case v1::WHERE: {
        const Tensor in[] = {l.in[0], l.dy};
        Tensor out[] = {GradOutput(l, 1), GradOutput(l, 2)};
        LS_RETURN_IF_ERROR(
            Call(l.grad_input, l, l.ops.grad_input, in, out, lp.attrs));
        break;
      }
      case v1::BIAS_ADD:
        break;    // grad_in[0] is dy itself
      default: {  // AVG_POOL2D, GLOBAL_AVG_POOL, RESIZE_BILINEAR, FLATTEN,
                  // RESHAPE, REDUCE
        if (l.grad_view) break;  // the gradient is a view of dy
        const Tensor in[] = {l.dy};
        Tensor out[] = {l.grad_in_kernel[0]};
        LS_RETURN_IF_ERROR(
            Call(l.grad_input, l, l.ops.grad_input, in, out, lp.attrs));
        break;
      }
    }
    for (size_t k = 0; k < lp.inputs.size(); ++k) {
      if (!l.takes_grad[k]) continue;
      LS_RETURN_IF_ERROR(Emit(lp.name, v1::GRAD_ACTIVATION, l.ops.grad_input,
                              model::InputSlot(static_cast<int>(k)),
                              l.grad_in[k]));
    }
  }
  return absl::OkStatus();
}

// Global-norm clipping (kernels/ops/optimizers.h): the parameters' sums of
// squares in manifest order, their canonical sum, its square root; every
// gradient scaled by max_norm / (norm + 1e-6) when that is below 1. The
// norm is read back from its (fingerprinted, possibly fault-injected)
// tensor, so a corrupted norm propagates like any other tensor.
absl::Status Executor::State::ClipGradients() {
  std::vector<float> partials;
  for (LayerState& l : layers) {
    for (Tensor& g : l.grads) {
      const Tensor in[] = {g};
      Tensor out[] = {clip_partial};
      LS_RETURN_IF_ERROR(Call(sum_squares, l, kernels::op::kGradNormSumSquares,
                              in, out, OpAttrs{}));
      partials.push_back(clip_partial.data<float>()[0]);
    }
  }
  const float total = canonical::CanonicalSum(
      partials.data(), static_cast<int64_t>(partials.size()), 1);
  clip_norm.data<float>()[0] = canonical::CanonicalSqrt(total);
  LS_RETURN_IF_ERROR(
      Emit("", v1::GRAD_NORM, model::kClipGradNormOp, "", clip_norm));
  const float norm = clip_norm.data<float>()[0];
  const float coef = config.optimizer().clip_grad_norm() / (norm + 1e-6f);
  if (!(coef < 1.0f)) return absl::OkStatus();
  OpAttrs attrs;
  attrs.scale = coef;
  for (LayerState& l : layers) {
    for (Tensor& g : l.grads) {
      const Tensor in[] = {g};
      Tensor out[] = {g};
      LS_RETURN_IF_ERROR(
          Call(scale, l, kernels::op::kGradNormScale, in, out, attrs));
    }
  }
  return absl::OkStatus();
}

absl::Status Executor::State::Optimize() {
  OpAttrs attrs = optimizer_attrs;
  attrs.step = static_cast<int64_t>(step) + 1;  // Adam's t is 1-based
  for (LayerState& l : layers) {
    for (size_t p = 0; p < l.params.size(); ++p) {
      const Tensor in[] = {l.grads[p]};
      Tensor out[3];
      out[0] = l.params[p];
      for (size_t k = 0; k < l.state[p].size(); ++k) out[k + 1] = l.state[p][k];
      LS_RETURN_IF_ERROR(Call(optimizer, l, optimizer_ops.op, in,
                              absl::MakeSpan(out, 1 + l.state[p].size()),
                              attrs));
      const model::ParamPlan& pp = l.plan->params[p];
      LS_RETURN_IF_ERROR(
          Emit(l.plan->name, pp.role, optimizer_ops.op, "", l.params[p]));
      for (size_t k = 0; k < l.state[p].size(); ++k) {
        LS_RETURN_IF_ERROR(Emit(l.plan->name, v1::OPTIMIZER_STATE,
                                optimizer_ops.op, optimizer_ops.state_slots[k],
                                l.state[p][k]));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Executor::State::Step(int s) {
  step = s;
  cursor = 0;
  capturing = options.fingerprint && step_captured[s] != 0;
  emitted = 0;
  last_hashed = -1;
  reusable_at = -1;
  last_hashed_tensor = Tensor();
  reused.clear();
  step_hashes.clear();
  queued_on_device.clear();
  if (capturing) {
    // Kept lists move into the result; otherwise the messages are reused.
    if (options.keep_fingerprints) step_fps.clear();
    step_fps.resize(manifest.entries_size());
    background_step =
        pipeline != nullptr && (!chooser || chooser->Background());
    if (background_step) pipeline->Reset(step_fps.size());
  } else {
    background_step = false;
  }
  if (absl::Status st = RunPasses(); !st.ok()) {
    // Every hash queued so far finishes before a failed step returns too
    // (nothing then writes into its messages); the sink sees none of it.
    if (background_step) pipeline->Drain().IgnoreError();
    return st;
  }
  if (capturing) LS_RETURN_IF_ERROR(FinishCapture());
  if (cursor != step_tensors.size()) {
    return absl::InternalError(absl::StrFormat(
        "execution order left the manifest: step %d produced %d tensors, the "
        "manifest expects %d (next: %s)",
        s, cursor, step_tensors.size(),
        model::DescribeEntry(step_tensors[cursor])));
  }
  return absl::OkStatus();
}

absl::Status Executor::State::RunPasses() {
  LS_RETURN_IF_ERROR(Forward());
  result.losses.push_back(layers.back().out.data<float>()[0]);
  LS_RETURN_IF_ERROR(Backward());
  if (sum_squares != nullptr) LS_RETURN_IF_ERROR(ClipGradients());
  return Optimize();
}

Executor::Executor(std::unique_ptr<State> state) : s_(std::move(state)) {}
Executor::~Executor() = default;

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(
    const model::ModelPlan& plan, const v1::JobConfig& config,
    const kernels::Registry* registry, BatchSource batches,
    ExecutorOptions options) {
  if (registry == nullptr) {
    return absl::InvalidArgumentError("executor: registry is null");
  }
  auto state = std::make_unique<State>();
  state->plan = plan;
  state->config = config;
  state->registry = registry;
  state->batches = std::move(batches);
  state->options = std::move(options);
  if (state->options.parameters != nullptr) {
    LS_RETURN_IF_ERROR(
        ValidateParameterSet(state->plan, *state->options.parameters));
  }
  LS_RETURN_IF_ERROR(state->Setup());
  return std::unique_ptr<Executor>(new Executor(std::move(state)));
}

absl::StatusOr<StepSummary> Executor::RunStep(int step) {
  State& s = *s_;
  if (s.failed) {
    return absl::FailedPreconditionError(
        "executor: an earlier step failed; the run cannot continue");
  }
  if (step != s.steps_done || step >= s.config.steps()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "executor: RunStep(%d) out of order: next step is %d of %d", step,
        s.steps_done, s.config.steps()));
  }
  absl::Status st;
  const auto start = std::chrono::steady_clock::now();
  if (s.resident) {
    kernels::ScopedResidentRun resident(&s.residency);
    st = s.Step(step);
  } else {
    st = s.Step(step);
  }
  if (!st.ok()) {
    s.failed = true;
    return st;
  }
  if (s.capturing && s.chooser) {
    s.chooser->Record(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  }
  s.background_steps += s.background_step ? 1 : 0;
  StepSummary sum;
  sum.step = step;
  sum.loss = s.result.losses.back();
  sum.captured = s.capturing;
  if (s.capturing) {
    sum.digest = hash::CombineDigests(s.step_hashes);
    s.result.step_digests.push_back(sum.digest);
    if (s.options.keep_fingerprints) {
      s.result.fingerprints.push_back(std::move(s.step_fps));
      s.step_fps = {};
    }
  }
  ++s.steps_done;
  return sum;
}

absl::StatusOr<RunResult> Executor::Finish() {
  State& s = *s_;
  if (s.failed || s.steps_done != s.config.steps()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("executor: Finish after %d of %d steps%s", s.steps_done,
                        s.config.steps(), s.failed ? " (a step failed)" : ""));
  }
  RunResult r = s.result;
  r.device_resident = s.resident;
  r.residency = s.residency;
  if (s.options.fingerprint) {
    LS_ASSIGN_OR_RETURN(hash::Fingerprint m, hash::Fingerprint::FromHex(
                                                 s.manifest.manifest_digest()));
    std::vector<hash::Fingerprint> parts;
    parts.reserve(r.step_digests.size() + 1);
    parts.push_back(m);
    parts.insert(parts.end(), r.step_digests.begin(), r.step_digests.end());
    r.run_digest = hash::CombineDigests(parts);
  }
  return r;
}

const v1::TensorManifest& Executor::manifest() const { return s_->manifest; }
const std::vector<v1::ManifestEntry>& Executor::step_tensors() const {
  return s_->step_tensors;
}
int Executor::steps_done() const { return s_->steps_done; }
bool Executor::background_fingerprints() const {
  return s_->pipeline != nullptr;
}
int Executor::background_steps() const { return s_->background_steps; }

absl::StatusOr<RunResult> RunJob(const model::ModelPlan& plan,
                                 const v1::JobConfig& config,
                                 const kernels::Registry* registry,
                                 BatchSource batches, ExecutorOptions options) {
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Executor> exec,
                      Executor::Create(plan, config, registry,
                                       std::move(batches), std::move(options)));
  for (int s = 0; s < config.steps(); ++s) {
    LS_RETURN_IF_ERROR(exec->RunStep(s).status());
  }
  return exec->Finish();
}

}  // namespace lockstep::worker
