#include "worker/exec/run_command.h"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "kernels/backend.h"
#include "kernels/cuda/plan.h"
#include "kernels/registry.h"
#include "model/manifest.h"
#include "model/plan.h"
#include "model/spec_io.h"
#include "worker/data/dataset.h"
#include "worker/exec/compare.h"
#include "worker/exec/dataset_batches.h"
#include "worker/exec/dump.h"
#include "worker/exec/executor.h"
#include "worker/exec/fault.h"
#include "worker/exec/worker_kernels.h"

namespace lockstep::worker {
namespace {

namespace v1 = ::lockstep::v1;

// Errors caused by what the user gave us (exit 2) versus anything else.
bool IsSpecError(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return true;
    default:
      return false;
  }
}

int Fail(std::FILE* err, const absl::Status& s) {
  std::fprintf(err, "lockstep-worker run: %s\n",
               std::string(s.message()).c_str());
  return IsSpecError(s) ? kRunExitSpecError : kRunExitFailure;
}

std::string Short(const hash::Fingerprint& f) {
  return f.ToHex().substr(0, 16) + "…";
}

struct Job {
  v1::Model model;
  v1::JobConfig config;
  model::ModelPlan plan;
  std::shared_ptr<Dataset> dataset;
  kernels::Registry registry;
  std::optional<FaultSpec> fault;
  DumpSpec dump;
  std::string dump_dir;
  bool device_resident = true;
  bool queue_device_fingerprints = true;
  bool op_times = false;
  bool op_times_by_layer = false;
};

ExecutorOptions OptionsFor(const Job& job, int run, int runs) {
  ExecutorOptions o;
  o.initializer = job.model.initializer();
  o.device_resident = job.device_resident;
  o.queue_device_fingerprints = job.queue_device_fingerprints;
  const int fault_run = runs >= 2 ? 1 : 0;
  if (run == fault_run) o.fault = job.fault;
  if (job.dump.kind == DumpSpec::Kind::kAll ||
      job.dump.kind == DumpSpec::Kind::kSelected) {
    o.observer = MakeDumpObserver(job.dump, job.dump_dir, run, nullptr);
  }
  return o;
}

// What --op_times measures on the run's backend: on CUDA a kernel call
// returns once its kernels are queued, unless CUDA_LAUNCH_BLOCKING=1
// makes every launch wait for its kernel.
std::string OpTimesNote(const Job& job) {
  const absl::StatusOr<std::string> backend =
      BackendFor(job.registry, job.config);
  if (!backend.ok() || *backend != kernels::kCudaBackendName) return "";
  const char* blocking = std::getenv("CUDA_LAUNCH_BLOCKING");
  if (blocking != nullptr && std::string(blocking) == "1") {
    return "; CUDA_LAUNCH_BLOCKING=1: each call waited for its kernels";
  }
  return "; CUDA: a call returns once its kernels are queued, so this is "
         "the host's time (CUDA_LAUNCH_BLOCKING=1 counts the device's)";
}

absl::StatusOr<RunResult> RunOnce(Job& job, int run, int runs, std::FILE* out) {
  ExecutorOptions options = OptionsFor(job, run, runs);
  OpTimes times;
  if (job.op_times) options.op_times = &times;
  options.op_times_by_layer = job.op_times_by_layer;
  LS_ASSIGN_OR_RETURN(
      std::unique_ptr<Executor> exec,
      Executor::Create(job.plan, job.config, &job.registry,
                       DatasetBatches(job.dataset, job.config.batch_size()),
                       std::move(options)));
  const int steps = job.config.steps();
  const auto start = std::chrono::steady_clock::now();
  std::fprintf(out,
               "run %d/%d: model %s, %d steps, %d tensors per step, "
               "manifest %s\n",
               run, runs, job.plan.model_name.c_str(), steps,
               exec->manifest().entries_size(),
               exec->manifest().manifest_digest().c_str());
  int captured = 0;
  for (int s = 0; s < steps; ++s) {
    LS_ASSIGN_OR_RETURN(StepSummary sum, exec->RunStep(s));
    captured += sum.captured ? 1 : 0;
    if (sum.captured) {
      std::fprintf(out, "step %d/%d  loss %.6f  step digest %s\n", s, steps,
                   sum.loss, Short(sum.digest).c_str());
    } else {
      std::fprintf(out, "step %d/%d  loss %.6f  (not captured)\n", s, steps,
                   sum.loss);
    }
  }
  if (job.op_times) {
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - start)
                          .count();
    std::fprintf(out,
                 "run %d: wall time by %s, per step (%.3f ms a step over %d "
                 "steps, the first included)%s:\n%s",
                 run, job.op_times_by_layer ? "layer and op" : "op", ms / steps,
                 steps, OpTimesNote(job).c_str(),
                 FormatOpTimes(times, steps, ms / steps, "  ").c_str());
  }
  if (exec->background_fingerprints()) {
    // kAuto: the run timed its own steps to choose (BackgroundChooser).
    std::fprintf(out,
                 "run %d: of %d captured steps, %d hashed their large tensors "
                 "on a thread beside the kernels and %d inline (the run "
                 "tries both and keeps the faster)\n",
                 run, captured, exec->background_steps(),
                 captured - exec->background_steps());
  }
  LS_ASSIGN_OR_RETURN(RunResult r, exec->Finish());
  if (r.fault_injected) {
    std::fprintf(out, "run %d: injected fault %s into %s\n", run,
                 r.fault->ToString().c_str(),
                 model::DescribeEntry(*r.fault_entry).c_str());
  }
  std::vector<std::string> fallbacks;
  for (const KernelChoice& k : r.kernels) {
    if (k.fallback) fallbacks.push_back(k.op);
  }
  if (!fallbacks.empty() && run == 0) {
    std::fprintf(
        out,
        "note: no %s kernel for %s on this backend yet; the "
        "CANONICAL kernel ran instead\n",
        std::string(kernels::ModeName(r.kernels[0].requested_mode)).c_str(),
        absl::StrJoin(fallbacks, ", ").c_str());
  }
  if (r.device_resident) {
    const kernels::ResidencyCounters& c = r.residency;
    std::fprintf(out,
                 "run %d: tensors stayed on the device: %d copied in "
                 "(%.1f MB), %d copied back (%.1f MB), %d fingerprinted "
                 "there (%d of them queued, their results collected in %d "
                 "copies; leaf kernel %s; hash stream %s)\n",
                 run, static_cast<int>(c.uploads), c.upload_bytes / 1e6,
                 static_cast<int>(c.downloads), c.download_bytes / 1e6,
                 static_cast<int>(c.mirror_fingerprints),
                 static_cast<int>(c.queued_fingerprints),
                 static_cast<int>(c.fingerprint_collections),
                 kernels::cuda::DeviceLeafKernelName(
                     kernels::cuda::CurrentDeviceLeafKernel()),
                 kernels::cuda::CurrentDeviceHashStream() ? "on" : "off");
  }
  std::fprintf(out, "run %d digest %s  dataset %s\n", run,
               r.run_digest.ToHex().c_str(), r.dataset_digest.c_str());
  std::fflush(out);
  return r;
}

// Re-runs `run` up to `step` and dumps manifest entry `index` of that step.
absl::Status DumpOne(Job& job, int run, int runs, int step, int index,
                     const v1::TensorFingerprint& expected, std::FILE* out) {
  ExecutorOptions o = OptionsFor(job, run, runs);
  bool written = false;
  o.observer = [&](int s, const v1::ManifestEntry& e, const kernels::Tensor& t,
                   const v1::TensorFingerprint& fp) -> absl::Status {
    if (s != step || e.index() != index) return absl::OkStatus();
    LS_ASSIGN_OR_RETURN(std::string path,
                        DumpTensor(job.dump_dir, run, s, e, t, fp));
    std::fprintf(out, "dumped run %d: %s%s\n", run, path.c_str(),
                 HashOf(fp) == HashOf(expected)
                     ? ""
                     : " (WARNING: the re-run did not reproduce the recorded "
                       "fingerprint: this run is not deterministic)");
    written = true;
    return absl::OkStatus();
  };
  o.keep_fingerprints = false;
  LS_ASSIGN_OR_RETURN(
      std::unique_ptr<Executor> exec,
      Executor::Create(job.plan, job.config, &job.registry,
                       DatasetBatches(job.dataset, job.config.batch_size()),
                       std::move(o)));
  for (int s = 0; s <= step; ++s) {
    LS_RETURN_IF_ERROR(exec->RunStep(s).status());
  }
  if (!written) {
    return absl::InternalError("the divergent tensor was not seen on re-run");
  }
  return absl::OkStatus();
}

}  // namespace

int RunCommand(const RunCommandOptions& options, std::FILE* out,
               std::FILE* err) {
  if (options.runs < 1 || options.runs > kMaxLocalRuns) {
    return Fail(err, absl::InvalidArgumentError(
                         absl::StrFormat("--runs: %d is outside [1, %d]",
                                         options.runs, kMaxLocalRuns)));
  }
  if (options.model_path.empty() || options.config_path.empty()) {
    return Fail(
        err, absl::InvalidArgumentError("--model and --config are required"));
  }
  Job job;
  {
    absl::StatusOr<v1::Model> model = model::ReadModelFile(options.model_path);
    if (!model.ok()) return Fail(err, model.status());
    job.model = *std::move(model);
    absl::StatusOr<v1::JobConfig> config =
        model::ReadJobConfigFile(options.config_path);
    if (!config.ok()) return Fail(err, config.status());
    job.config = *std::move(config);
  }
  absl::StatusOr<model::ModelPlan> plan =
      model::PlanModel(job.model, job.config, model::Limits{});
  if (!plan.ok()) return Fail(err, plan.status());
  job.plan = *std::move(plan);
  job.device_resident = options.device_resident;
  job.queue_device_fingerprints = options.queue_device_fingerprints;
  job.op_times = options.op_times || options.op_times_by_layer;
  job.op_times_by_layer = options.op_times_by_layer;
  if (!options.inject_fault.empty()) {
    absl::StatusOr<FaultSpec> f = ParseFaultSpec(options.inject_fault);
    if (!f.ok()) return Fail(err, f.status());
    job.fault = *f;
  }
  {
    absl::StatusOr<DumpSpec> d = ParseDumpSpec(options.dump);
    if (!d.ok()) return Fail(err, d.status());
    job.dump = *d;
    job.dump_dir = options.dump_dir;
  }
  if (absl::Status st = RegisterWorkerKernels(&job.registry).status();
      !st.ok()) {
    return Fail(err, absl::InternalError(st.message()));
  }
  {
    std::vector<int64_t> example(job.plan.input_shape.begin() + 1,
                                 job.plan.input_shape.end());
    DatasetOptions dataset_options;
    if (!options.data_root.empty()) {
      absl::StatusOr<std::string> root =
          CanonicalDataRoot(options.data_root, "--data_root");
      if (!root.ok()) return Fail(err, root.status());
      dataset_options.data_root = *root;
    }
    absl::StatusOr<std::unique_ptr<Dataset>> ds =
        OpenDataset(job.config.dataset(), job.config.seed(), example,
                    job.plan.num_classes, dataset_options);
    if (!ds.ok()) return Fail(err, ds.status());
    job.dataset = std::shared_ptr<Dataset>(std::move(*ds));
  }

  std::vector<RunResult> results;
  for (int r = 0; r < options.runs; ++r) {
    absl::StatusOr<RunResult> result = RunOnce(job, r, options.runs, out);
    if (!result.ok()) return Fail(err, result.status());
    results.push_back(*std::move(result));
  }
  if (options.runs == 1) {
    if (job.dump.kind == DumpSpec::Kind::kFirstDivergent) {
      std::fprintf(out,
                   "--dump=first_divergent: one run, nothing to compare\n");
    }
    return kRunExitAgree;
  }
  bool agree = true;
  bool dumped = false;
  for (int r = 1; r < options.runs; ++r) {
    const RunComparison c = CompareRuns(results[0], results[r]);
    if (c.verdict == RunComparison::Verdict::kIdentical) continue;
    agree = false;
    std::fprintf(out, "run %d vs run 0: %s\n", r,
                 DescribeComparison(c).c_str());
    if (c.verdict == RunComparison::Verdict::kDiverged && !dumped &&
        job.dump.kind == DumpSpec::Kind::kFirstDivergent) {
      dumped = true;
      const TensorDivergence& d = *c.first;
      for (int run : {0, r}) {
        absl::Status st = DumpOne(job, run, options.runs, d.step,
                                  d.entry.index(), run == 0 ? d.a : d.b, out);
        if (!st.ok()) return Fail(err, st);
      }
    }
  }
  if (agree) {
    std::fprintf(out, "runs agree: %d runs, run digest %s\n", options.runs,
                 results[0].run_digest.ToHex().c_str());
    return kRunExitAgree;
  }
  std::fprintf(out, "runs differ\n");
  return kRunExitDiffer;
}

}  // namespace lockstep::worker
