#include "worker/run_child.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <new>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "kernels/registry.h"
#include "model/plan.h"
#include "worker/blob_cache.h"
#include "worker/data/dataset.h"
#include "worker/exec/dataset_batches.h"
#include "worker/exec/executor.h"
#include "worker/exec/parameters.h"
#include "worker/exec/worker_kernels.h"
#include "worker/frames.h"

namespace lockstep::worker {

using ::lockstep::v1::WorkerMessage;

namespace {

absl::Status Train(const v1::RunAssignment& a, const ChildOptions& child,
                   int out_fd, v1::RunFinished* finished) {
  DatasetOptions dataset_options;
  dataset_options.data_root = child.data_root;
  const std::optional<FaultSpec>& fault = child.fault;
  LS_ASSIGN_OR_RETURN(model::ModelPlan plan,
                      model::PlanModel(a.model(), a.config(), model::Limits()));
  kernels::Registry registry;
  LS_RETURN_IF_ERROR(RegisterWorkerKernels(&registry).status());
  std::vector<int64_t> example(plan.input_shape.begin() + 1,
                               plan.input_shape.end());
  absl::StatusOr<std::unique_ptr<Dataset>> dataset =
      OpenDataset(a.config().dataset(), a.config().seed(), example,
                  plan.num_classes, dataset_options);
  if (!dataset.ok()) {
    // INVALID_ARGUMENT: the job's dataset is at fault (format, path rules,
    // size), and every attempt would fail alike.
    finished->set_input_error(dataset.status().code() ==
                              absl::StatusCode::kInvalidArgument);
    return dataset.status();
  }
  std::shared_ptr<Dataset> shared(*std::move(dataset));
  BatchSource batches = DatasetBatches(shared, a.config().batch_size());

  v1::FingerprintBatch current;
  ExecutorOptions options;
  options.initializer = a.model().initializer();
  v1::ParameterSet parameters;
  if (const std::string& digest = a.model().parameters_digest();
      !digest.empty()) {
    if (child.blob_cache_dir.empty()) {
      return absl::FailedPreconditionError(
          "model.parameters_digest is set but this worker has no blob cache "
          "(lockstep-worker daemon --blob_cache_dir)");
    }
    LS_ASSIGN_OR_RETURN(
        std::string bytes,
        ReadVerifiedBlob(BlobCachePath(child.blob_cache_dir, digest), digest));
    if (!parameters.ParseFromString(bytes)) {
      finished->set_input_error(true);
      return absl::InvalidArgumentError(
          absl::StrCat("model.parameters_digest: blob ", digest,
                       " is not a lockstep.v1.ParameterSet"));
    }
    // A tensor that does not fit the model fails every attempt alike.
    absl::Status fits = ValidateParameterSet(plan, parameters);
    if (!fits.ok()) {
      finished->set_input_error(true);
      return fits;
    }
    options.parameters = &parameters;
  }
  options.fault = fault;
  options.keep_fingerprints = false;
  options.fingerprint_sink = [&current](int step,
                                        const v1::ManifestEntry& entry,
                                        const v1::TensorFingerprint& fp) {
    *current.add_fingerprints() = fp;
    return absl::OkStatus();
  };
  LS_ASSIGN_OR_RETURN(std::unique_ptr<Executor> exec,
                      Executor::Create(plan, a.config(), &registry,
                                       std::move(batches), options));
  if (exec->manifest().manifest_digest() != a.manifest().manifest_digest()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this worker derives manifest ", exec->manifest().manifest_digest(),
        " for the job, the coordinator sent ", a.manifest().manifest_digest(),
        ": worker and coordinator versions differ"));
  }
  for (int step = 0; step < a.config().steps(); ++step) {
    if (child.stall.has_value() && child.stall->step == step &&
        (child.stall->model.empty() ||
         child.stall->model == a.model().name())) {
      std::fprintf(stderr, "stall drill: sleeping %d s before step %d\n",
                   child.stall->seconds, step);
      sleep(static_cast<unsigned>(child.stall->seconds));
    }
    current.Clear();
    LS_ASSIGN_OR_RETURN(StepSummary sum, exec->RunStep(step));
    if (sum.captured) {
      current.set_run_id(a.run_id());
      current.set_attempt(a.attempt());
      current.set_step(step);
      current.set_step_complete(true);
      current.set_step_digest(sum.digest.ToHex());
      WorkerMessage m;
      *m.mutable_batch() = current;
      LS_RETURN_IF_ERROR(WriteFrame(out_fd, m));
    }
    WorkerMessage p;
    p.mutable_progress()->set_run_id(a.run_id());
    p.mutable_progress()->set_attempt(a.attempt());
    p.mutable_progress()->set_steps_done(step + 1);
    p.mutable_progress()->set_last_loss(sum.loss);
    LS_RETURN_IF_ERROR(WriteFrame(out_fd, p));
  }
  LS_ASSIGN_OR_RETURN(RunResult result, exec->Finish());
  finished->set_success(true);
  finished->set_run_digest(result.run_digest.ToHex());
  finished->set_dataset_digest(result.dataset_digest);
  for (const KernelChoice& k : result.kernels) {
    (*finished->mutable_kernels())[k.op] = k.variant;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StallSpec> ParseStallSpec(absl::string_view text) {
  StallSpec spec;
  bool have_step = false, have_seconds = false;
  for (absl::string_view kv : absl::StrSplit(text, ',')) {
    std::pair<std::string, std::string> p =
        absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.first == "step" && absl::SimpleAtoi(p.second, &spec.step) &&
        spec.step >= 0) {
      have_step = true;
    } else if (p.first == "seconds" &&
               absl::SimpleAtoi(p.second, &spec.seconds) && spec.seconds > 0 &&
               spec.seconds <= 86400) {
      have_seconds = true;
    } else if (p.first == "model" && !p.second.empty()) {
      spec.model = p.second;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--inject_stall: \"", kv,
          "\" is not step=S (>= 0), seconds=N (1..86400) or model=NAME"));
    }
  }
  if (!have_step || !have_seconds) {
    return absl::InvalidArgumentError(
        "--inject_stall: step=S and seconds=N are required");
  }
  return spec;
}

absl::Status ExecuteAssignment(const v1::RunAssignment& assignment,
                               const ChildOptions& options, int out_fd) {
  v1::RunFinished finished;
  finished.set_run_id(assignment.run_id());
  finished.set_attempt(assignment.attempt());
  // The daemon caps the run's memory (worker/run_limits.h); a refused
  // allocation names the cap.
  struct rlimit limit;
  const bool capped =
      getrlimit(RLIMIT_DATA, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY;
  const std::string cap =
      capped ? absl::StrCat("the run's memory limit is ",
                            (limit.rlim_cur + (1 << 20) - 1) >> 20, " MiB")
             : "no memory limit is set";
  absl::Status s;
  try {
    s = Train(assignment, options, out_fd, &finished);
    // A tensor allocation refused without an exception (kernels/tensor.h).
    if (capped && absl::IsResourceExhausted(s) &&
        absl::StrContains(s.message(), "cannot allocate ")) {
      s = absl::ResourceExhaustedError(
          absl::StrCat("memory limit reached: ", s.message(), " (", cap,
                       "; the daemon's --run_memory_limit_mb sets it)"));
    }
  } catch (const std::bad_alloc&) {
    s = absl::ResourceExhaustedError(
        absl::StrCat("memory limit reached: an allocation was refused (", cap,
                     "; the daemon's --run_memory_limit_mb sets it)"));
  }
  if (!s.ok()) {
    finished.set_success(false);
    finished.set_failure_reason(s.ToString());
  }
  WorkerMessage m;
  *m.mutable_finished() = finished;
  absl::Status w = WriteFrame(out_fd, m);
  if (!w.ok() && s.ok()) return w;
  return s;
}

int RunChildMain(const ChildOptions& options) {
  // A run outlives no daemon: if the daemon dies (even by SIGKILL), so does
  // its run, and no orphan keeps computing.
  const pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) return 1;  // the daemon died before prctl
  v1::RunAssignment assignment;
  absl::Status s = ReadFrame(STDIN_FILENO, &assignment);
  if (!s.ok()) {
    std::fprintf(stderr,
                 "lockstep-worker execute: no assignment on stdin: %s\n",
                 s.ToString().c_str());
    return 1;
  }
  s = ExecuteAssignment(assignment, options, STDOUT_FILENO);
  if (!s.ok()) {
    std::fprintf(stderr, "lockstep-worker execute: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace lockstep::worker
