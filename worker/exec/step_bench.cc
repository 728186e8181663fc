// Training-step time of every zoo model with fingerprinting on and off, and
// the fingerprinting overhead; beside it PyTorch's step time for the same
// model on one thread when Debian's python3-torch is installed.
//
//   bazel run //worker/exec:step_bench -- [--steps=20] [--zoo_dir=DIR]
//
// Run it with LOCKSTEP_CPU_THREADS=1 to compare against PyTorch, which is
// pinned to one thread (torch.set_num_threads(1)).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/registry.h"
#include "model/plan.h"
#include "model/spec_io.h"
#include "worker/data/dataset.h"
#include "worker/exec/dataset_batches.h"
#include "worker/exec/executor.h"

ABSL_FLAG(int, steps, 20, "timed steps per measurement");
ABSL_FLAG(int, repeats, 3, "measurements per setting (the fastest counts)");
ABSL_FLAG(std::string, zoo_dir, "",
          "examples/ directory (default: the runfiles copy, else ./examples)");
ABSL_FLAG(std::string, models, "mlp,lenet5,resnet_small,gauntlet",
          "comma-separated zoo models");

namespace lockstep::worker {
namespace {

namespace v1 = ::lockstep::v1;
using Clock = std::chrono::steady_clock;

std::string ZooDir() {
  std::string dir = absl::GetFlag(FLAGS_zoo_dir);
  if (!dir.empty()) return dir;
  if (const char* rf = std::getenv("RUNFILES_DIR")) {
    return absl::StrCat(rf, "/lockstep/examples");
  }
  return "examples";
}

struct Timing {
  double ms_per_step = 0;
  double hash_ms_per_step = 0;  // FingerprintTensor alone, timed apart
  int64_t tensors = 0;
  int64_t bytes = 0;
};

absl::StatusOr<Timing> TimeSteps(const model::ModelPlan& plan,
                                 const v1::JobConfig& config,
                                 const v1::Model& model,
                                 const kernels::Registry& registry,
                                 std::shared_ptr<Dataset> dataset,
                                 bool fingerprint, int steps) {
  v1::JobConfig c = config;
  c.set_steps(steps + 2);
  c.mutable_capture()->set_kind(v1::CapturePolicy::EVERY_STEP);
  ExecutorOptions o;
  o.initializer = model.initializer();
  o.fingerprint = fingerprint;
  o.keep_fingerprints = false;
  Timing t;
  if (fingerprint) {
    o.observer = [&t](int step, const v1::ManifestEntry& e,
                      const kernels::Tensor& x,
                      const v1::TensorFingerprint&) -> absl::Status {
      if (step == 0) {
        ++t.tensors;
        t.bytes += x.bytes();
      }
      if (step >= 2) {  // the timed steps: hash once more, timed alone
        const auto start = Clock::now();
        auto fp = FingerprintTensor(x, e.index());
        t.hash_ms_per_step +=
            std::chrono::duration<double, std::milli>(Clock::now() - start)
                .count();
        if (!fp.ok()) return fp.status();
      }
      return absl::OkStatus();
    };
  }
  auto exec = Executor::Create(plan, c, &registry,
                               DatasetBatches(dataset, c.batch_size()), o);
  if (!exec.ok()) return exec.status();
  for (int s = 0; s < 2; ++s) {  // warm-up
    if (auto r = (*exec)->RunStep(s); !r.ok()) return r.status();
  }
  const auto start = Clock::now();
  for (int s = 2; s < steps + 2; ++s) {
    if (auto r = (*exec)->RunStep(s); !r.ok()) return r.status();
  }
  double ms =
      std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  ms -= t.hash_ms_per_step;  // the observer's extra hashing is not the run's
  t.ms_per_step = ms / steps;
  t.hash_ms_per_step /= steps;
  return t;
}

bool HaveTorch() {
  return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

// Runs torch_step_bench.py next to this binary's runfiles; returns ms/step
// or a negative number.
double TorchStepMs(const std::string& model_json,
                   const std::string& config_json, int steps) {
  std::string script = "worker/exec/torch_step_bench.py";
  if (const char* rf = std::getenv("RUNFILES_DIR")) {
    script = absl::StrCat(rf, "/lockstep/", script);
  }
  const std::string cmd =
      absl::StrFormat("/usr/bin/python3 '%s' '%s' '%s' %d 2>/dev/null", script,
                      model_json, config_json, steps);
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  double ms = -1;
  if (std::fscanf(p, "%lf", &ms) != 1) ms = -1;
  pclose(p);
  return ms;
}

int Main() {
  kernels::Registry registry;
  if (!kernels::RegisterCpuCanonicalKernels(&registry).ok()) return 1;
  if (!kernels::RegisterCpuDeterministicAndDefaultKernels(&registry).ok()) {
    return 1;
  }
  const std::string zoo = ZooDir();
  const int steps = absl::GetFlag(FLAGS_steps);
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  const bool torch = HaveTorch();
  std::printf(
      "Lockstep step time, CANONICAL CPU kernels (LOCKSTEP_CPU_THREADS "
      "threads, default all cores), "
      "%d timed steps, best of %d\n\n",
      steps, repeats);
  std::printf("%-13s %6s %9s %8s %10s %11s %9s %10s %8s %10s\n", "model",
              "batch", "params", "tensors", "MiB/step", "ms/step fp", "ms/step",
              "overhead", "hash ms", "hash %");
  std::vector<std::string> torch_lines;
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_models), ',')) {
    const std::string dir = absl::StrCat(zoo, "/", name);
    auto model = model::ReadModelFile(dir + "/model.json");
    auto config = model::ReadJobConfigFile(dir + "/config.json");
    if (!model.ok() || !config.ok()) {
      std::printf(
          "%-13s %s\n", std::string(name).c_str(),
          std::string((model.ok() ? config.status() : model.status()).message())
              .c_str());
      continue;
    }
    auto plan = model::PlanModel(*model, *config, model::Limits{});
    if (!plan.ok()) {
      std::printf("%-13s %s\n", std::string(name).c_str(),
                  std::string(plan.status().message()).c_str());
      continue;
    }
    std::vector<int64_t> example(plan->input_shape.begin() + 1,
                                 plan->input_shape.end());
    auto ds = OpenDataset(config->dataset(), config->seed(), example,
                          plan->num_classes);
    if (!ds.ok()) {
      std::printf("%-13s %s\n", std::string(name).c_str(),
                  std::string(ds.status().message()).c_str());
      continue;
    }
    std::shared_ptr<Dataset> dataset(std::move(*ds));
    Timing on, off;
    on.ms_per_step = off.ms_per_step = 1e300;
    for (int r = 0; r < repeats; ++r) {
      auto a =
          TimeSteps(*plan, *config, *model, registry, dataset, false, steps);
      auto b =
          TimeSteps(*plan, *config, *model, registry, dataset, true, steps);
      if (!a.ok() || !b.ok()) {
        std::printf(
            "%-13s %s\n", std::string(name).c_str(),
            std::string((a.ok() ? b.status() : a.status()).message()).c_str());
        break;
      }
      if (a->ms_per_step < off.ms_per_step) off = *a;
      if (b->ms_per_step < on.ms_per_step) on = *b;
    }
    std::printf(
        "%-13s %6d %9lld %8lld %10.3f %11.3f %9.3f %9.1f%% %8.3f %9.2f%%\n",
        std::string(name).c_str(), config->batch_size(),
        static_cast<long long>(plan->parameter_count),
        static_cast<long long>(on.tensors),
        static_cast<double>(on.bytes) / (1 << 20), on.ms_per_step,
        off.ms_per_step,
        100.0 * (on.ms_per_step - off.ms_per_step) / off.ms_per_step,
        on.hash_ms_per_step, 100.0 * on.hash_ms_per_step / off.ms_per_step);
    if (torch) {
      const double ms =
          TorchStepMs(dir + "/model.json", dir + "/config.json", steps);
      torch_lines.push_back(
          ms < 0 ? absl::StrFormat("%-13s torch run failed", name)
                 : absl::StrFormat("%-13s %11.3f %11.3f %8.1fx", name,
                                   off.ms_per_step, ms, off.ms_per_step / ms));
    }
  }
  std::printf(
      "\nms/step fp: fingerprinting every tensor of every step (EVERY_STEP);"
      " ms/step: fingerprinting off; overhead: their difference (noisy on a "
      "shared machine);\nhash ms: FingerprintTensor over one step's tensors "
      "timed on its own; hash %%: that against ms/step.\n");
  if (!torch) {
    std::printf("PyTorch: not installed (apt-get install python3-torch)\n");
  } else {
    std::printf("\nPyTorch, 1 thread, same model, batch and optimizer:\n");
    std::printf("%-13s %11s %11s %9s\n", "model", "lockstep ms", "torch ms",
                "ratio");
    for (const std::string& l : torch_lines) std::printf("%s\n", l.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace lockstep::worker

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return lockstep::worker::Main();
}
