// Training-step time of every zoo model and of the benchmark models of
// realistic size (worker/exec/bench_models), in CANONICAL, DETERMINISTIC and
// DEFAULT mode with every tensor of every step fingerprinted, beside
// PyTorch's step time for the same model on the same number of threads
// (when Debian's python3-torch is installed), and the share of the step that
// fingerprinting costs.
//
//   bazel run -c opt //worker/exec:step_bench -- [--threads=1,2] [--steps=10]
//       [--models=mlp,resnet18_cifar] [--modes=CANONICAL,DETERMINISTIC,DEFAULT]
//       [--fingerprint_thread=auto|inline|background] [--op_times]
//       [--op_times_by_layer]
//
// Lockstep's kernel pool and PyTorch run on the same thread count, row by
// row: torch_step_bench.py pins PyTorch's OpenMP pool and the BLAS pool its
// dense products run in (OPENBLAS_NUM_THREADS; torch.set_num_threads alone
// leaves Debian's OpenBLAS on every core). The "cores" columns print each
// side's CPU time over its wall time, so a row shows what it compared. Where
// the executor fingerprints in the background
// (ExecutorOptions::fingerprint_thread; by default when the pool leaves a CPU
// free and the run's own step times say it is faster), that thread comes on
// top: the "fp" column says which. Repetitions
// are interleaved (each runs every mode, the first mode without
// fingerprints, then PyTorch), the fastest counts; the "paired" columns
// take the median of the ratios within each repetition instead, which a
// machine whose speed drifts between repetitions disturbs less. Each
// repetition also runs the first mode once more timed op by op, for the
// "on step" column (fingerprinting's share of the step thread's time) and
// --op_times.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "kernels/cpu/core_distance.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/registry.h"
#include "model/plan.h"
#include "model/spec_io.h"
#include "worker/data/dataset.h"
#include "worker/exec/dataset_batches.h"
#include "worker/exec/executor.h"
#include "worker/exec/fingerprint_pipeline.h"

ABSL_FLAG(int, steps, 10, "timed steps per measurement");
ABSL_FLAG(int, repeats, 3, "measurements per setting (the fastest counts)");
ABSL_FLAG(double, min_ms, 100,
          "time at least this many ms of steps per measurement: a row whose "
          "step is shorter times more than --steps steps (the count comes "
          "from one calibration run of the first mode; 0: exactly --steps)");
ABSL_FLAG(std::string, zoo_dir, "",
          "examples/ directory (default: the runfiles copy, else ./examples)");
ABSL_FLAG(std::string, bench_dir, "",
          "benchmark models (default: the runfiles copy of "
          "worker/exec/bench_models, else that folder)");
ABSL_FLAG(std::string, models, "",
          "comma-separated models, each a folder of the zoo or of the "
          "benchmark models with model.json and config.json (default: all)");
ABSL_FLAG(std::string, threads, "1,2",
          "comma-separated thread counts, for Lockstep and PyTorch alike");
ABSL_FLAG(std::string, modes, "CANONICAL,DETERMINISTIC,DEFAULT",
          "comma-separated determinism modes");
ABSL_FLAG(bool, op_times, false,
          "after each row, the first mode's wall time per op of its fastest "
          "run timed op by op (ms per step, share of the step), largest "
          "first");
ABSL_FLAG(bool, op_times_by_layer, false,
          "with --op_times (implied), one line per layer and op instead of "
          "per op (ExecutorOptions::op_times_by_layer)");
ABSL_FLAG(std::string, fingerprint_thread, "auto",
          "where tensors are hashed: auto, inline (on the step's thread) or "
          "background (ExecutorOptions::fingerprint_thread)");
ABSL_FLAG(int64_t, background_min_bytes, 64 << 10,
          "with background fingerprints, smaller tensors are hashed inline "
          "(ExecutorOptions::background_fingerprint_min_bytes)");
ABSL_FLAG(bool, pytorch, true,
          "time PyTorch beside Lockstep when python3-torch is installed");

namespace lockstep::worker {
namespace {

namespace v1 = ::lockstep::v1;
using Clock = std::chrono::steady_clock;

// `flag`, else `workspace_path` in the runfiles, else in the current
// directory.
std::string DataDir(const std::string& flag,
                    const std::string& workspace_path) {
  if (!flag.empty()) return flag;
  if (const char* rf = std::getenv("RUNFILES_DIR")) {
    return absl::StrCat(rf, "/lockstep/", workspace_path);
  }
  return workspace_path;
}

// Folders under `dir` holding model.json and config.json, sorted.
std::vector<std::string> ModelsIn(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (std::filesystem::exists(e.path() / "model.json") &&
        std::filesystem::exists(e.path() / "config.json")) {
      names.push_back(e.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// CPU time of the whole process (every thread), seconds.
double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) +
         1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Timing {
  double ms_per_step = 0;
  double cores = 0;  // process CPU time over wall time of the timed steps
  // Timed steps whose large tensors were hashed in the background, of all
  // timed steps.
  int background_steps = 0;
  int steps = 0;
  OpTimes ops;  // per op over the timed steps, when profiled
};

absl::StatusOr<Timing> TimeSteps(const model::ModelPlan& plan,
                                 const v1::JobConfig& config,
                                 const v1::Model& model,
                                 const kernels::Registry& registry,
                                 std::shared_ptr<Dataset> dataset,
                                 bool fingerprint, bool profile,
                                 FingerprintThread where, int steps) {
  // Warm-up steps: 2; where the executor picks inline or background
  // hashing by timing its own steps (kAuto with a background thread), its
  // first probe too, so the timed steps are a long run's (docs/benchmarks.md,
  // "Training step").
  constexpr int kWarmUp = 2;
  constexpr int kProbeWarmUp = 1 + BackgroundChooser::kProbeSteps;
  v1::JobConfig c = config;
  c.set_steps(steps + std::max(kWarmUp, kProbeWarmUp));
  c.mutable_capture()->set_kind(v1::CapturePolicy::EVERY_STEP);
  ExecutorOptions o;
  o.initializer = model.initializer();
  o.fingerprint = fingerprint;
  o.fingerprint_thread = where;
  o.background_fingerprint_min_bytes =
      absl::GetFlag(FLAGS_background_min_bytes);
  o.keep_fingerprints = false;
  Timing t;
  if (profile) {
    o.op_times = &t.ops;
    o.op_times_by_layer = absl::GetFlag(FLAGS_op_times_by_layer);
  }
  auto exec = Executor::Create(plan, c, &registry,
                               DatasetBatches(dataset, c.batch_size()), o);
  if (!exec.ok()) return exec.status();
  const int warm_up =
      where == FingerprintThread::kAuto && (*exec)->background_fingerprints()
          ? kProbeWarmUp
          : kWarmUp;
  for (int s = 0; s < warm_up; ++s) {
    if (auto r = (*exec)->RunStep(s); !r.ok()) return r.status();
  }
  t.ops.clear();  // the timed steps only
  const int background_before = (*exec)->background_steps();
  const auto start = Clock::now();
  const double cpu_start = ProcessCpuSeconds();
  for (int s = warm_up; s < steps + warm_up; ++s) {
    if (auto r = (*exec)->RunStep(s); !r.ok()) return r.status();
  }
  const double ms =
      std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  t.ms_per_step = ms / steps;
  t.steps = steps;
  t.background_steps = (*exec)->background_steps() - background_before;
  if (ms > 0) t.cores = (ProcessCpuSeconds() - cpu_start) * 1e3 / ms;
  return t;
}

// The ops of `t` by wall time, largest first: calls and ms per step, share
// of the step. Kernels only: the executor's own work between calls is the
// line "(between kernels)".
void PrintOpTimes(const Timing& t, int steps) {
  std::fputs(FormatOpTimes(t.ops, steps, t.ms_per_step).c_str(), stdout);
}

// The "fp" column: where the timed steps of `t` hashed their large tensors.
const char* Where(const Timing& t) {
  if (t.background_steps == 0) return "in";
  return t.background_steps == t.steps ? "bg" : "mx";
}

bool HaveTorch() {
  return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

struct TorchTiming {
  double ms_per_step = -1;  // negative: no figure
  double cores = -1;        // CPU time over wall time of the timed steps
};

// Runs torch_step_bench.py from this binary's runfiles on `threads` threads
// (the script pins PyTorch's pools to that count).
TorchTiming TorchStep(const std::string& model_json,
                      const std::string& config_json, int steps, int threads) {
  std::string script = "worker/exec/torch_step_bench.py";
  if (const char* rf = std::getenv("RUNFILES_DIR")) {
    script = absl::StrCat(rf, "/lockstep/", script);
  }
  const std::string cmd =
      absl::StrFormat("/usr/bin/python3 '%s' '%s' '%s' %d %d 2>/dev/null",
                      script, model_json, config_json, steps, threads);
  TorchTiming t;
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return t;
  double ms = -1, cores = -1;
  if (std::fscanf(p, "%lf %lf", &ms, &cores) == 2) {
    t.ms_per_step = ms;
    t.cores = cores;
  }
  pclose(p);
  return t;
}

// The median of `v` (the mean of the middle two of an even count).
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The most timed steps of one measurement (--steps, or --min_ms's count).
constexpr int kMaxSteps = 100000;

std::string Ms(double ms) {
  return ms < 0 || ms >= 1e300 ? "-" : absl::StrFormat("%.2f", ms);
}

std::string Ratio(double a, double b) {
  return a < 0 || b <= 0 || a >= 1e300 ? "-" : absl::StrFormat("%.2f", a / b);
}

// The "c2c ns" column: "75", "75-410" where the two measurements differ
// once rounded, "-" where none was possible (one CPU).
std::string Distance(std::optional<double> before,
                     std::optional<double> after) {
  if (!before && !after) return "-";
  const long long a = std::llround(before ? *before : *after);
  const long long b = std::llround(after ? *after : *before);
  if (a == b) return absl::StrFormat("%d", a);
  return absl::StrFormat("%d-%d", std::min(a, b), std::max(a, b));
}

int Main() {
  kernels::Registry registry;
  if (!kernels::RegisterCpuCanonicalKernels(&registry).ok()) return 1;
  if (!kernels::RegisterCpuDeterministicAndDefaultKernels(&registry).ok()) {
    return 1;
  }
  const std::string zoo = DataDir(absl::GetFlag(FLAGS_zoo_dir), "examples");
  const std::string bench =
      DataDir(absl::GetFlag(FLAGS_bench_dir), "worker/exec/bench_models");
  const int steps = absl::GetFlag(FLAGS_steps);
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  const double min_ms = absl::GetFlag(FLAGS_min_ms);
  if (steps < 1 || steps > kMaxSteps) {
    std::fprintf(stderr, "--steps: %d is not in 1..%d\n", steps, kMaxSteps);
    return 2;
  }
  if (!(min_ms >= 0 && min_ms <= 600000)) {
    std::fprintf(stderr, "--min_ms: %g is not in 0..600000\n", min_ms);
    return 2;
  }
  std::vector<int> thread_counts;
  for (absl::string_view t :
       absl::StrSplit(absl::GetFlag(FLAGS_threads), ',', absl::SkipEmpty())) {
    int n = 0;
    if (!absl::SimpleAtoi(t, &n) || n < 1 || n > 256) {
      std::fprintf(stderr, "--threads: \"%s\" is not a count in 1..256\n",
                   std::string(t).c_str());
      return 2;
    }
    thread_counts.push_back(n);
  }
  std::vector<v1::DeterminismMode> modes;
  for (absl::string_view m :
       absl::StrSplit(absl::GetFlag(FLAGS_modes), ',', absl::SkipEmpty())) {
    v1::DeterminismMode mode;
    if (!v1::DeterminismMode_Parse(std::string(m), &mode) ||
        mode == v1::DETERMINISM_MODE_UNSPECIFIED) {
      std::fprintf(stderr,
                   "--modes: \"%s\" is not CANONICAL, DETERMINISTIC or "
                   "DEFAULT\n",
                   std::string(m).c_str());
      return 2;
    }
    modes.push_back(mode);
  }
  FingerprintThread where;
  const std::string where_flag = absl::GetFlag(FLAGS_fingerprint_thread);
  if (where_flag == "auto") {
    where = FingerprintThread::kAuto;
  } else if (where_flag == "inline") {
    where = FingerprintThread::kInline;
  } else if (where_flag == "background") {
    where = FingerprintThread::kBackground;
  } else {
    std::fprintf(stderr,
                 "--fingerprint_thread: \"%s\" is not auto, inline or "
                 "background\n",
                 where_flag.c_str());
    return 2;
  }
  // name -> folder; zoo models first, then the benchmark models.
  std::vector<std::pair<std::string, std::string>> models;
  std::map<std::string, std::string> known;
  for (const std::string& n : ModelsIn(zoo)) known[n] = zoo + "/" + n;
  for (const std::string& n : ModelsIn(bench)) known[n] = bench + "/" + n;
  if (absl::GetFlag(FLAGS_models).empty()) {
    for (const std::string& n : ModelsIn(zoo)) models.push_back({n, known[n]});
    for (const std::string& n : ModelsIn(bench)) {
      models.push_back({n, known[n]});
    }
  } else {
    for (absl::string_view n :
         absl::StrSplit(absl::GetFlag(FLAGS_models), ',', absl::SkipEmpty())) {
      auto it = known.find(std::string(n));
      if (it == known.end()) {
        std::fprintf(stderr, "--models: no model \"%s\" in %s or %s\n",
                     std::string(n).c_str(), zoo.c_str(), bench.c_str());
        return 2;
      }
      models.push_back(*it);
    }
  }
  const bool torch = absl::GetFlag(FLAGS_pytorch) && HaveTorch();
  std::printf(
      "Lockstep training step, CPU kernels, every tensor of every step "
      "fingerprinted; at least %d timed steps (column steps) after 2 "
      "warm-up steps (%d where the run times its first steps to choose "
      "between inline and background hashing), best of %d "
      "interleaved repetitions (each: every mode, then PyTorch); Lockstep "
      "and PyTorch on the same thread count. PyTorch: %s.\n\n",
      steps, 1 + BackgroundChooser::kProbeSteps, repeats,
      torch ? "Debian's python3-torch"
      : absl::GetFlag(FLAGS_pytorch)
          ? "not installed (apt-get install --no-install-recommends "
            "python3-torch)"
          : "not timed (--pytorch=false)");
  const std::string first_mode =
      modes.empty() ? std::string("first")
                    : absl::AsciiStrToLower(v1::DeterminismMode_Name(modes[0]));
  std::string header = absl::StrFormat("%-15s %5s %10s %7s %6s", "model",
                                       "batch", "params", "threads", "steps");
  for (v1::DeterminismMode m : modes) {
    absl::StrAppendFormat(&header, " %13s",
                          absl::AsciiStrToLower(v1::DeterminismMode_Name(m)));
  }
  absl::StrAppendFormat(&header, " %9s %15s %7s %8s %8s %8s %3s %5s %5s %9s",
                        "pytorch", absl::StrCat(first_mode, "/torch"), "paired",
                        "hash %", "paired", "on step", "fp", "cores", "torch",
                        "c2c ns");
  std::printf("%s\n", header.c_str());
  for (const auto& [name, dir] : models) {
    auto model = model::ReadModelFile(dir + "/model.json");
    auto config = model::ReadJobConfigFile(dir + "/config.json");
    if (!model.ok() || !config.ok()) {
      std::printf(
          "%-15s %s\n", name.c_str(),
          std::string((model.ok() ? config.status() : model.status()).message())
              .c_str());
      continue;
    }
    config->clear_op_algorithms();
    auto plan = model::PlanModel(*model, *config, model::Limits{});
    if (!plan.ok()) {
      std::printf("%-15s %s\n", name.c_str(),
                  std::string(plan.status().message()).c_str());
      continue;
    }
    std::vector<int64_t> example(plan->input_shape.begin() + 1,
                                 plan->input_shape.end());
    auto ds = OpenDataset(config->dataset(), config->seed(), example,
                          plan->num_classes);
    if (!ds.ok()) {
      std::printf("%-15s %s\n", name.c_str(),
                  std::string(ds.status().message()).c_str());
      continue;
    }
    std::shared_ptr<Dataset> dataset(std::move(*ds));
    for (int threads : thread_counts) {
      // Enough steps that each measurement lasts --min_ms: a few steps of
      // a small model take less than a millisecond, where one interrupt
      // or a neighbour's burst of memory traffic decides the figure.
      int row_steps = steps;
      std::string error;
      // One measurement of `mode` on this row's thread count.
      auto time_mode = [&](v1::DeterminismMode mode, bool fingerprint,
                           bool profile, int n) {
        v1::JobConfig c = *config;
        c.set_threads(threads);
        c.set_determinism(mode);
        return TimeSteps(*plan, c, *model, registry, dataset, fingerprint,
                         profile, where, n);
      };
      if (min_ms > 0 && !modes.empty()) {
        auto t = time_mode(modes[0], true, false, steps);
        if (!t.ok()) {
          error = std::string(t.status().message());
        } else if (t->ms_per_step > 0) {
          row_steps = static_cast<int>(std::clamp(
              std::ceil(min_ms / t->ms_per_step), static_cast<double>(steps),
              static_cast<double>(kMaxSteps)));
        }
      }
      // The two CPUs' distance before the row's runs and after them.
      const std::optional<double> distance_before =
          kernels::CacheLineRoundTripNanos();
      // The modes with fingerprints, then the first mode without (the
      // last slot), interleaved.
      std::vector<Timing> best(modes.size() + 1);
      for (Timing& t : best) t.ms_per_step = 1e300;
      // Per repetition: the first mode with and without fingerprints and
      // PyTorch, timed one after the other, for the paired ratios.
      std::vector<double> first_ms, unhashed_ms, rep_torch_ms;
      TorchTiming torch_best;
      // Per repetition, one more run of the first mode, timed op by op (not
      // counted above: the clock reads cost the smallest models a little):
      // the step thread's own fingerprinting time over its step. The
      // fastest such run is the one --op_times prints.
      std::vector<double> on_step;
      Timing profiled;
      profiled.ms_per_step = 1e300;
      for (int r = 0; r < repeats && error.empty(); ++r) {
        for (size_t m = 0; m < best.size() && !modes.empty(); ++m) {
          const bool fingerprint = m < modes.size();
          auto t = time_mode(modes[fingerprint ? m : 0], fingerprint, false,
                             row_steps);
          if (!t.ok()) {
            error = std::string(t.status().message());
            break;
          }
          if (t->ms_per_step < best[m].ms_per_step) best[m] = *t;
          if (m == 0) first_ms.push_back(t->ms_per_step);
          if (m + 1 == best.size()) unhashed_ms.push_back(t->ms_per_step);
        }
        if (error.empty() && !modes.empty()) {
          auto t = time_mode(modes[0], true, true, row_steps);
          if (!t.ok()) {
            error = std::string(t.status().message());
          } else if (t->ms_per_step > 0) {
            double seconds = 0;
            for (const char* key :
                 {kFingerprintOpTime, kFingerprintWaitOpTime}) {
              auto it = t->ops.find(key);
              if (it != t->ops.end()) seconds += it->second.seconds;
            }
            on_step.push_back(100.0 * 1e3 * seconds / row_steps /
                              t->ms_per_step);
            if (t->ms_per_step < profiled.ms_per_step) profiled = *t;
          }
        }
        if (torch && error.empty()) {
          const TorchTiming t = TorchStep(
              dir + "/model.json", dir + "/config.json", row_steps, threads);
          rep_torch_ms.push_back(t.ms_per_step);
          if (t.ms_per_step >= 0 && (torch_best.ms_per_step < 0 ||
                                     t.ms_per_step < torch_best.ms_per_step)) {
            torch_best = t;
          }
        }
      }
      if (!error.empty()) {
        std::printf("%-15s %s\n", name.c_str(), error.c_str());
        continue;
      }
      const std::optional<double> distance_after =
          kernels::CacheLineRoundTripNanos();
      std::vector<double> ratios, shares;
      for (size_t r = 0; r < first_ms.size(); ++r) {
        if (r < rep_torch_ms.size() && rep_torch_ms[r] > 0) {
          ratios.push_back(first_ms[r] / rep_torch_ms[r]);
        }
        if (r < unhashed_ms.size() && first_ms[r] > 0) {
          shares.push_back(100.0 * (first_ms[r] - unhashed_ms[r]) /
                           first_ms[r]);
        }
      }
      std::string line = absl::StrFormat(
          "%-15s %5d %10d %7d %6d", name, config->batch_size(),
          static_cast<long long>(plan->parameter_count), threads, row_steps);
      for (size_t m = 0; m < modes.size(); ++m) {
        absl::StrAppendFormat(&line, " %13s", Ms(best[m].ms_per_step));
      }
      const double first = modes.empty() ? -1 : best[0].ms_per_step;
      const double unhashed = best.back().ms_per_step;
      const double torch_ms = torch_best.ms_per_step;
      absl::StrAppendFormat(
          &line, " %9s %15s %7s %7.2f%% %8s %8s %3s %5s %5s %9s",
          torch ? Ms(torch_ms) : "-", Ratio(first, torch_ms),
          ratios.empty() ? "-" : absl::StrFormat("%.2f", Median(ratios)),
          modes.empty() ? 0.0 : 100.0 * (first - unhashed) / first,
          shares.empty() ? "-" : absl::StrFormat("%.2f%%", Median(shares)),
          on_step.empty() ? "-" : absl::StrFormat("%.2f%%", Median(on_step)),
          modes.empty() ? "-" : Where(best[0]),
          modes.empty() ? "-" : absl::StrFormat("%.2f", best[0].cores),
          torch_best.cores < 0 ? "-"
                               : absl::StrFormat("%.2f", torch_best.cores),
          Distance(distance_before, distance_after));
      std::printf("%s\n", line.c_str());
      if ((absl::GetFlag(FLAGS_op_times) ||
           absl::GetFlag(FLAGS_op_times_by_layer)) &&
          !on_step.empty()) {
        PrintOpTimes(profiled, row_steps);
      }
      std::fflush(stdout);
    }
  }
  std::printf(
      "\nColumns: steps: timed steps per measurement (--steps, or more to "
      "last --min_ms); ms per training step in each mode (fingerprinting "
      "included); pytorch: ms per step of the same model, batch and "
      "optimizer in PyTorch; %s/torch: the first mode's time over "
      "PyTorch's (<= 1.0: as fast or faster), each the fastest of its "
      "repetitions; paired: the median over repetitions of the same ratio "
      "within one repetition, whose runs follow each other (on a machine "
      "whose speed drifts, the steadier figure); hash %%: what "
      "fingerprinting costs the first mode's step, (with - without) / "
      "with, the run without fingerprints timed in the same interleaved "
      "repetitions (it can come out below 0 within the noise), then paired "
      "likewise; on step: the step thread's own fingerprinting time (hashing "
      "inline; in the background: queueing tensors and waiting for the "
      "thread) over its step, the median over one more run per repetition "
      "timed op by op (steadier than hash %%, but it leaves out what the "
      "background thread's memory traffic costs the kernels); fp: where "
      "tensors were "
      "hashed in the fastest run's timed steps, bg on a background thread "
      "beside the kernels' pool, in inline on the step's thread, mx some "
      "steps each way (by default the run measures which is faster: "
      "BackgroundChooser); cores, torch: CPU time over wall time "
      "of the fastest run of the first mode and of PyTorch (the cores each "
      "kept busy: at most the row's threads, plus Lockstep's background "
      "hashing where fp is bg); c2c ns: the time a cache line takes from "
      "the first of this process's CPUs to the second and back, measured "
      "before the row's runs and after them (one figure where both round "
      "to it; - with one CPU): on a virtual machine whose CPUs sit on one "
      "core complex of the host at some times and on two at others, it "
      "says which placement the row ran on, and with it what a second "
      "thread that reads the step's tensors (fp bg, two-thread rows) costs "
      "the kernels.\n",
      first_mode.c_str());
  return 0;
}

}  // namespace
}  // namespace lockstep::worker

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return lockstep::worker::Main();
}
