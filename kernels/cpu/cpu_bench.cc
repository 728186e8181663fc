// Benchmarks of the CPU backend, one Google Benchmark binary:
//
//   bazel run -c opt //kernels/cpu:cpu_bench [-- --quick] [-- --reps=N]
//       [-- --net_batch=N] [-- --benchmark_filter=REGEX ...]
//
// Registers, on the ISA isa.h picks (LOCKSTEP_CPU_ISA overrides it):
//   gemm/<size>/t<threads>/{canonical,openblas}
//       C = A B, square, row-major: the canonical GEMM (gemm.h) and
//       OpenBLAS cblas_sgemm with the same thread count, when Debian's
//       OpenBLAS can be loaded (dlopen: nothing links against it).
//   conv/<layer>/<op>/t<threads>/{canonical,deterministic,default}
//       conv2d.forward / grad_input / grad_weight of a LeNet-like and a
//       ResNet-like layer, each run through the kernel the registry holds
//       for that mode (what a job of that mode runs).
//   step/<layer>/t<threads>/<mode>
//       the three ops in sequence: one conv2d training step.
//   hash/<layer>/<output>
//       FingerprintAndStats (kernels/hash/fingerprint.h, what the worker
//       computes per captured tensor) of each op's output.
//   lanes/<op>/<shape>/t<threads>/{scalar,canonical}
//       bias_add.grad, max_pool2d.*, avg_pool2d.* and global_avg_pool.*: the
//       scalar spec kernels against the canonical lane kernels
//       (lane_kernels.h).
//   shapes/<i>/<op>/{conv,gemm}
//       CANONICAL conv2d.forward / grad_input / grad_weight of ResNet-18
//       (CIFAR) shapes, a depthwise one and two MobileNet-v2 pointwise
//       ones, batch 8 (--net_batch), one thread, next to the
//       canonical GEMM of one group's product at the same M/N/K.
//   transformer/<product>/t<threads>/{canonical,openblas}
//       gpt_block's products (worker/exec/bench_models): each dense
//       layer's forward, grad_input and grad_weight over 2048 tokens and
//       the attention entries' matmul.forward / matmul.grad (32 entries of
//       256 x 256 x 64), through the registered CANONICAL kernels, and
//       OpenBLAS on the same products (a matmul one sgemm per entry).
// After Google Benchmark's own report it prints summary tables (a) - (e)
// and (h), each figure the best of --reps repetitions (default 5; the
// repetitions of all benchmarks run interleaved in random order, 0.2 s
// each, unless --benchmark_enable_random_interleaving /
// --benchmark_min_time say otherwise), and the ratios between figures
// measured side by side in this run; table (e)'s `paired` column and
// tables (f) and (g), timed by themselves: each network shape's
// convolution against the GEMM of its shape and the convolutions' image
// groups (conv_gemm.cc) against the whole batch in one product, the two
// alternating call by call, and the pool's hand-off after serial work. --quick
// runs small shapes, briefly, once (a smoke test: seconds, not meaningful
// figures). Figures are only printed, never asserted.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "kernels/backend.h"
#include "kernels/cpu/conv_gemm.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/hash/fingerprint.h"
#include "kernels/ops/dense.h"
#include "kernels/registry.h"
#include "kernels/spatial/conv2d.h"
#include "kernels/tensor.h"

namespace lockstep::kernels {
namespace {

namespace c = ::lockstep::canonical;

// ---------------------------------------------------------------------------
// Options, results.

struct Options {
  bool quick = false;
  int reps = 5;
  int net_batch = 8;  // table (e)'s batch (--net_batch)
};

Options& Opts() {
  static Options options;
  return options;
}

// Benchmark name -> best seconds per iteration.
std::map<std::string, double>& Best() {
  static auto* best = new std::map<std::string, double>();
  return *best;
}

// The best time of `name`, or NaN when it did not run (filtered out).
double Seconds(const std::string& name) {
  auto it = Best().find(name);
  return it == Best().end() ? std::numeric_limits<double>::quiet_NaN()
                            : it->second;
}

double MinOf(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
}

// The console report, plus each benchmark's best time into Best(): the
// "min" aggregate over repetitions, or the single run.
class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  CollectingReporter()
      : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "min") {
        continue;
      }
      const double s = r.GetAdjustedRealTime() /
                       benchmark::GetTimeUnitMultiplier(r.time_unit);
      const std::string& name = r.run_name.function_name;
      auto it = Best().find(name);
      if (it == Best().end() || s < it->second) Best()[name] = s;
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

// Registers `body` (timed) with `setup` (untimed, before each batch).
void Add(const std::string& name, std::function<void()> setup,
         std::function<void()> body) {
  benchmark::internal::Benchmark* b = benchmark::RegisterBenchmark(
      name.c_str(), [setup, body](benchmark::State& state) {
        setup();
        for (auto _ : state) body();
      });
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
  if (Opts().quick) b->MinTime(0.01);
  if (Opts().reps > 1) {
    b->Repetitions(Opts().reps)
        ->DisplayAggregatesOnly(true)
        ->ComputeStatistics("min", &MinOf);
  }
}

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

Tensor RandomTensor(std::vector<int64_t> shape, uint32_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return *Tensor::FromValues<float>(std::move(shape), Random(n, seed));
}

Tensor ZeroTensor(std::vector<int64_t> shape) {
  return *Tensor::Zeros(DType::kFloat32, std::move(shape));
}

// Makes the process pool (what registered kernels use) `threads` wide.
void UseThreads(int threads) {
  if (CpuThreadPool()->num_threads() != threads) {
    SetCpuThreadsForTesting(threads);
  }
}

const Registry& Kernels() {
  static const Registry* registry = [] {
    auto* r = new Registry();
    if (!RegisterCpuCanonicalKernels(r).ok() ||
        !RegisterCpuDeterministicAndDefaultKernels(r).ok()) {
      std::fprintf(stderr, "kernel registration failed\n");
      std::exit(1);
    }
    return r;
  }();
  return *registry;
}

KernelFn Kernel(const std::string& op, Mode mode, const std::string& alg) {
  absl::StatusOr<KernelFn> fn =
      Kernels().Lookup(KernelKey{op, mode, alg, kCpuBackendName});
  if (!fn.ok()) {
    std::fprintf(stderr, "%s\n", fn.status().ToString().c_str());
    std::exit(1);
  }
  return *fn;
}

// Calls a kernel, exiting on error (a benchmark of a failing call would
// measure nothing).
void Call(KernelFn fn, const std::vector<Tensor>& in, std::vector<Tensor>& out,
          const OpAttrs& attrs) {
  const absl::Status st = fn(in, absl::MakeSpan(out), attrs);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    std::exit(1);
  }
}

std::vector<int> ThreadCounts() { return {1, 2}; }

// v by a printf format of one double ("%.1f"), or "-" for NaN (a figure
// that did not run). (absl::StrFormat takes only formats known at compile
// time under clang.)
std::string Fmt(double v, const char* format) {
  if (v != v) return "-";
  char text[64];
  std::snprintf(text, sizeof(text), format, v);
  return text;
}

// ---------------------------------------------------------------------------
// (a) GEMM against OpenBLAS.

using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int,
                         const float*, int, float, float*, int);
using SetThreadsFn = void (*)(int);

struct OpenBlas {
  SgemmFn sgemm = nullptr;
  SetThreadsFn set_threads = nullptr;
};

const OpenBlas& Blas() {
  static const OpenBlas blas = [] {
    OpenBlas b;
    for (const char* lib : {"libopenblas.so.0", "libopenblas.so"}) {
      if (void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL)) {
        b.sgemm = reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"));
        b.set_threads = reinterpret_cast<SetThreadsFn>(
            dlsym(h, "openblas_set_num_threads"));
        if (b.sgemm != nullptr) break;
      }
    }
    return b;
  }();
  return blas;
}

// cblas_sgemm(CblasRowMajor, ta, tb, ...), ta / tb true: transposed.
void Sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
           int64_t ldc) {
  Blas().sgemm(101, ta ? 112 : 111, tb ? 112 : 111, static_cast<int>(m),
               static_cast<int>(n), static_cast<int>(k), alpha, a,
               static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f, c,
               static_cast<int>(ldc));
}

std::vector<int64_t> GemmSizes() {
  if (Opts().quick) return {256};
  return {256, 512, 1024, 2048};
}

std::string GemmName(int64_t n, int threads, const char* impl) {
  return absl::StrFormat("gemm/%d/t%d/%s", n, threads, impl);
}

ThreadPool* PoolOf(int threads) {
  static auto* pools = new std::map<int, std::unique_ptr<ThreadPool>>();
  std::unique_ptr<ThreadPool>& p = (*pools)[threads];
  if (p == nullptr) p = std::make_unique<ThreadPool>(threads);
  return p.get();
}

void RegisterGemm() {
  for (int64_t n : GemmSizes()) {
    struct Data {
      std::vector<float> a, b, c;
    };
    auto d = std::make_shared<Data>();
    d->a = Random(n * n, 1);
    d->b = Random(n * n, 2);
    d->c.assign(n * n, 0.0f);
    c::DenseShape shape{n, n, n, false, false};
    const c::MatMulShape s = c::DenseForwardShape(shape);
    for (int threads : ThreadCounts()) {
      ThreadPool* pool = PoolOf(threads);
      Add(
          GemmName(n, threads, "canonical"), [] {},
          [d, s, pool] {
            CanonicalGemm(s, d->a.data(), d->b.data(), d->c.data(),
                          ActiveCpuIsa(), pool);
            benchmark::DoNotOptimize(d->c.data());
          });
      if (Blas().sgemm == nullptr) continue;
      Add(
          GemmName(n, threads, "openblas"),
          [threads] {
            if (Blas().set_threads != nullptr) Blas().set_threads(threads);
          },
          [d, n] {
            Sgemm(false, false, n, n, n, 1.0f, d->a.data(), n, d->b.data(), n,
                  d->c.data(), n);
            benchmark::DoNotOptimize(d->c.data());
          });
    }
  }
}

void PrintGemm() {
  std::printf(
      "\n== (a) canonical GEMM vs OpenBLAS sgemm: C = A B, square, row-major, "
      "GFLOP/s (2 n^3 flops), ISA %s ==\n",
      std::string(CpuIsaName(ActiveCpuIsa())).c_str());
  if (Blas().sgemm == nullptr) {
    std::printf("OpenBLAS: not installed (apt-get install libopenblas-dev)\n");
  }
  std::printf("%-7s %7s %12s %12s %16s\n", "size", "threads", "canonical",
              "openblas", "canonical/blas");
  for (int64_t n : GemmSizes()) {
    for (int threads : ThreadCounts()) {
      const double flops = 2.0 * n * n * n;
      const double gc =
          flops / Seconds(GemmName(n, threads, "canonical")) * 1e-9;
      const double gb =
          flops / Seconds(GemmName(n, threads, "openblas")) * 1e-9;
      std::printf("%-7s %7d %12s %12s %16s\n",
                  absl::StrFormat("%d^3", n).c_str(), threads,
                  Fmt(gc, "%.1f").c_str(), Fmt(gb, "%.1f").c_str(),
                  Fmt(gc / gb, "%.2f").c_str());
    }
  }
}

// ---------------------------------------------------------------------------
// (b) conv2d per mode, (c) fingerprints of the outputs.

struct ConvLayer {
  std::string name;
  std::vector<int64_t> x, w;  // NCHW, OIHW
  int64_t pad = 0;
  // Filled by Setup:
  std::vector<int64_t> y;
  OpAttrs attrs;
  double flops = 0;  // per op call
};

std::vector<ConvLayer>& Layers() {
  static auto* layers = [] {
    auto* v = new std::vector<ConvLayer>();
    const bool q = Opts().quick;
    // LeNet-5's second convolution; a ResNet basic-block convolution.
    v->push_back({"lenet", {q ? 8 : 64, 6, 14, 14}, {16, 6, 5, 5}, 0});
    v->push_back({"resnet", {q ? 1 : 8, 64, 32, 32}, {64, 64, 3, 3}, 1});
    for (ConvLayer& l : *v) {
      l.attrs.pad_top = l.attrs.pad_bottom = l.pad;
      l.attrs.pad_left = l.attrs.pad_right = l.pad;
      const int64_t oh = l.x[2] + 2 * l.pad - l.w[2] + 1;
      const int64_t ow = l.x[3] + 2 * l.pad - l.w[3] + 1;
      l.y = {l.x[0], l.w[0], oh, ow};
      l.flops = 2.0 * l.x[0] * l.w[0] * oh * ow * l.w[1] * l.w[2] * l.w[3];
    }
    return v;
  }();
  return *layers;
}

struct ModeKey {
  const char* label;
  Mode mode;
  const char* algorithm;
};
const ModeKey kModes[] = {
    {"canonical", Mode::kCanonical, kCanonicalAlgorithm},
    {"deterministic", Mode::kDeterministic, kDeterministicAlgorithm},
    {"default", Mode::kDefault, kDefaultAlgorithm},
};

struct ConvOp {
  const char* label;  // also the output's name
  const char* op;
  const char* output;
};
const ConvOp kConvOps[] = {
    {"forward", op::kConv2dForward, "y"},
    {"grad_input", op::kConv2dGradInput, "dx"},
    {"grad_weight", op::kConv2dGradWeight, "dw"},
};

// Inputs and outputs of the three ops of one layer.
struct ConvData {
  Tensor x, w, dy;
  std::vector<Tensor> y, dx, dw;
  std::vector<Tensor> Inputs(int op) const {
    if (op == 0) return {x, w};
    if (op == 1) return {dy, w};
    return {x, dy};
  }
  std::vector<Tensor>& Output(int op) {
    return op == 0 ? y : op == 1 ? dx : dw;
  }
};

std::string ConvName(const ConvLayer& l, int op, int threads,
                     const char* mode) {
  return absl::StrFormat("conv/%s/%s/t%d/%s", l.name, kConvOps[op].label,
                         threads, mode);
}
std::string StepName(const ConvLayer& l, int threads, const char* mode) {
  return absl::StrFormat("step/%s/t%d/%s", l.name, threads, mode);
}
std::string HashName(const ConvLayer& l, int op) {
  return absl::StrFormat("hash/%s/%s", l.name, kConvOps[op].output);
}

void RegisterConv() {
  uint32_t seed = 10;
  for (ConvLayer& layer : Layers()) {
    auto d = std::make_shared<ConvData>();
    d->x = RandomTensor(layer.x, ++seed);
    d->w = RandomTensor(layer.w, ++seed);
    d->dy = RandomTensor(layer.y, ++seed);
    d->y = {ZeroTensor(layer.y)};
    d->dx = {ZeroTensor(layer.x)};
    d->dw = {ZeroTensor(layer.w)};
    const OpAttrs attrs = layer.attrs;
    for (int threads : ThreadCounts()) {
      for (const ModeKey& m : kModes) {
        KernelFn fns[3];
        for (int op = 0; op < 3; ++op) {
          fns[op] = Kernel(kConvOps[op].op, m.mode, m.algorithm);
          const KernelFn fn = fns[op];
          Add(
              ConvName(layer, op, threads, m.label),
              [threads] { UseThreads(threads); },
              [d, op, fn, attrs] {
                Call(fn, d->Inputs(op), d->Output(op), attrs);
              });
        }
        Add(
            StepName(layer, threads, m.label),
            [threads] { UseThreads(threads); },
            [d, fns, attrs] {
              for (int op = 0; op < 3; ++op) {
                Call(fns[op], d->Inputs(op), d->Output(op), attrs);
              }
            });
      }
    }
    for (int op = 0; op < 3; ++op) {
      Add(
          HashName(layer, op),
          [d, op, attrs] {
            // The canonical output, as a job would fingerprint it.
            Call(Kernel(kConvOps[op].op, Mode::kCanonical, kCanonicalAlgorithm),
                 d->Inputs(op), d->Output(op), attrs);
          },
          [d, op] {
            const Tensor& t = d->Output(op)[0];
            absl::StatusOr<hash::FingerprintAndStatsResult> r =
                hash::FingerprintAndStats(hash::DtypeCode::kFloat32, t.shape(),
                                          t.raw_data(),
                                          static_cast<size_t>(t.bytes()));
            benchmark::DoNotOptimize(r);
          });
    }
  }
}

void PrintConv() {
  std::printf(
      "\n== (b) cost of determinism: conv2d GFLOP/s per mode (the kernel "
      "each mode's jobs run), ISA %s ==\n",
      std::string(CpuIsaName(ActiveCpuIsa())).c_str());
  std::printf("%-40s %-12s %7s %10s %14s %9s %14s\n", "layer", "op", "threads",
              "canonical", "deterministic", "default", "canonical/det");
  for (const ConvLayer& l : Layers()) {
    const std::string desc =
        absl::StrFormat("%s x[%d,%d,%d,%d] w[%d,%d,%d,%d]", l.name, l.x[0],
                        l.x[1], l.x[2], l.x[3], l.w[0], l.w[1], l.w[2], l.w[3]);
    for (int op = 0; op < 3; ++op) {
      for (int threads : ThreadCounts()) {
        double g[3];
        for (int m = 0; m < 3; ++m) {
          g[m] = l.flops / Seconds(ConvName(l, op, threads, kModes[m].label)) *
                 1e-9;
        }
        std::printf("%-40s %-12s %7d %10s %14s %9s %14s\n", desc.c_str(),
                    kConvOps[op].label, threads, Fmt(g[0], "%.1f").c_str(),
                    Fmt(g[1], "%.1f").c_str(), Fmt(g[2], "%.1f").c_str(),
                    Fmt(g[1] / g[0], "%.2f").c_str());
      }
    }
  }
  std::printf(
      "\nconv2d training step (forward + grad_input + grad_weight), ms per "
      "step; canonical/deterministic target <= 1.15\n");
  std::printf("%-8s %7s %10s %14s %9s %14s\n", "layer", "threads", "canonical",
              "deterministic", "default", "canonical/det");
  for (const ConvLayer& l : Layers()) {
    for (int threads : ThreadCounts()) {
      double ms[3];
      for (int m = 0; m < 3; ++m) {
        ms[m] = Seconds(StepName(l, threads, kModes[m].label)) * 1e3;
      }
      std::printf("%-8s %7d %10s %14s %9s %14s\n", l.name.c_str(), threads,
                  Fmt(ms[0], "%.3f").c_str(), Fmt(ms[1], "%.3f").c_str(),
                  Fmt(ms[2], "%.3f").c_str(),
                  Fmt(ms[0] / ms[1], "%.2f").c_str());
    }
  }
}

void PrintHash() {
  std::printf(
      "\n== (c) fingerprinting each op's output (FingerprintAndStats, one "
      "thread) against the canonical op ==\n");
  std::printf("%-8s %-12s %-6s %9s %14s %10s %12s %10s %12s\n", "layer", "op",
              "output", "KiB", "fingerprint us", "op us, t1", "overhead t1",
              "op us, t2", "overhead t2");
  for (const ConvLayer& l : Layers()) {
    for (int op = 0; op < 3; ++op) {
      const std::vector<int64_t>& shape = op == 0 ? l.y : op == 1 ? l.x : l.w;
      int64_t n = 1;
      for (int64_t v : shape) n *= v;
      const double h = Seconds(HashName(l, op)) * 1e6;
      const double t1 = Seconds(ConvName(l, op, 1, "canonical")) * 1e6;
      const double t2 = Seconds(ConvName(l, op, 2, "canonical")) * 1e6;
      std::printf("%-8s %-12s %-6s %9.1f %14s %10s %11s%% %10s %11s%%\n",
                  l.name.c_str(), kConvOps[op].label, kConvOps[op].output,
                  n * 4.0 / 1024, Fmt(h, "%.1f").c_str(),
                  Fmt(t1, "%.1f").c_str(), Fmt(100 * h / t1, "%.2f").c_str(),
                  Fmt(t2, "%.1f").c_str(), Fmt(100 * h / t2, "%.2f").c_str());
    }
  }
}

// ---------------------------------------------------------------------------
// (d) lane kernels against the scalar spec kernels.

struct LaneCase {
  std::string label;
  const char* op;
  std::vector<int64_t> in;  // bias_add.grad: dy; pooling: x
  int64_t k = 0, stride = 0, pad = 0;
  bool include_pad = true;  // avg_pool2d's count_include_pad
};

std::vector<LaneCase>& LaneCases() {
  static auto* cases = [] {
    const bool q = Opts().quick;
    auto* v = new std::vector<LaneCase>();
    v->push_back({"dense", op::kBiasAddGrad, {q ? 16 : 256, 1024}});
    v->push_back({"lenet", op::kBiasAddGrad, {q ? 8 : 64, 16, 10, 10}});
    v->push_back({"resnet", op::kBiasAddGrad, {q ? 1 : 8, 64, 32, 32}});
    v->push_back(
        {"lenet 2x2/2", op::kMaxPool2dForward, {q ? 8 : 64, 6, 28, 28}, 2, 2});
    v->push_back(
        {"lenet 2x2/2", op::kMaxPool2dGrad, {q ? 8 : 64, 6, 28, 28}, 2, 2});
    v->push_back({"resnet 3x3/2 pad 1",
                  op::kMaxPool2dForward,
                  {q ? 1 : 8, 64, 32, 32},
                  3,
                  2,
                  1});
    v->push_back({"resnet 3x3/2 pad 1",
                  op::kMaxPool2dGrad,
                  {q ? 1 : 8, 64, 32, 32},
                  3,
                  2,
                  1});
    for (const char* op : {op::kAvgPool2dForward, op::kAvgPool2dGrad}) {
      v->push_back({"lenet 2x2/2", op, {q ? 8 : 64, 6, 28, 28}, 2, 2});
    }
    for (const char* op : {op::kAvgPool2dForward, op::kAvgPool2dGrad}) {
      v->push_back(
          {"3x3/1 pad 1 excl", op, {q ? 1 : 8, 64, 32, 32}, 3, 1, 1, false});
    }
    for (const char* op : {op::kGlobalAvgPoolForward, op::kGlobalAvgPoolGrad}) {
      v->push_back({"resnet head", op, {q ? 4 : 64, 512, 7, 7}});
      v->push_back({"32x32", op, {q ? 1 : 16, 64, 32, 32}});
    }
    return v;
  }();
  return *cases;
}

std::string LaneName(size_t i, int threads, const char* impl) {
  const LaneCase& lc = LaneCases()[i];
  return absl::StrFormat("lanes/%s/%s/t%d/%s", lc.op, lc.label, threads, impl);
}

void RegisterLanes() {
  for (size_t i = 0; i < LaneCases().size(); ++i) {
    const LaneCase& lc = LaneCases()[i];
    OpAttrs a;
    std::vector<Tensor> in = {RandomTensor(lc.in, 100 + i)};
    std::vector<int64_t> out_shape;
    const std::string name = lc.op;
    if (name == op::kBiasAddGrad) {
      out_shape = {lc.in[1]};
    } else if (name == op::kGlobalAvgPoolForward) {
      out_shape = {lc.in[0], lc.in[1]};
    } else if (name == op::kGlobalAvgPoolGrad) {
      in = {RandomTensor({lc.in[0], lc.in[1]}, 100 + i)};
      out_shape = lc.in;
    } else {
      a.kernel_h = a.kernel_w = lc.k;
      a.stride_h = a.stride_w = lc.stride;
      a.pad_top = a.pad_bottom = a.pad_left = a.pad_right = lc.pad;
      a.count_include_pad = lc.include_pad;
      const int64_t oh = (lc.in[2] + 2 * lc.pad - lc.k) / lc.stride + 1;
      const int64_t ow = (lc.in[3] + 2 * lc.pad - lc.k) / lc.stride + 1;
      const std::vector<int64_t> y = {lc.in[0], lc.in[1], oh, ow};
      out_shape = y;
      if (name == op::kMaxPool2dGrad) {
        in.push_back(RandomTensor(y, 200 + i));
        out_shape = lc.in;
      } else if (name == op::kAvgPool2dGrad) {
        in = {RandomTensor(y, 200 + i)};
        out_shape = lc.in;
      }
    }
    auto out = std::make_shared<std::vector<Tensor>>(
        std::vector<Tensor>{ZeroTensor(out_shape)});
    for (int threads : ThreadCounts()) {
      for (const char* impl : {kScalarAlgorithm, kCanonicalAlgorithm}) {
        const KernelFn fn = Kernel(lc.op, Mode::kCanonical, impl);
        Add(
            LaneName(i, threads, impl), [threads] { UseThreads(threads); },
            [fn, in, out, a] { Call(fn, in, *out, a); });
      }
    }
  }
}

void PrintLanes() {
  std::printf(
      "\n== (d) bias_add.grad and pooling: scalar spec kernels vs the "
      "canonical lane kernels (same bits), us per call, ISA %s ==\n",
      std::string(CpuIsaName(ActiveCpuIsa())).c_str());
  std::printf("%-24s %-20s %-18s %7s %10s %10s %8s\n", "op", "case", "input",
              "threads", "scalar", "canonical", "speedup");
  for (size_t i = 0; i < LaneCases().size(); ++i) {
    const LaneCase& lc = LaneCases()[i];
    std::string shape;
    for (int64_t d : lc.in) {
      shape += (shape.empty() ? "[" : ",") + std::to_string(d);
    }
    shape += "]";
    for (int threads : ThreadCounts()) {
      const double s = Seconds(LaneName(i, threads, kScalarAlgorithm)) * 1e6;
      const double f = Seconds(LaneName(i, threads, kCanonicalAlgorithm)) * 1e6;
      std::printf("%-24s %-20s %-18s %7d %10s %10s %8s\n", lc.op,
                  lc.label.c_str(), shape.c_str(), threads,
                  Fmt(s, "%.1f").c_str(), Fmt(f, "%.1f").c_str(),
                  Fmt(s / f, "%.1f").c_str());
    }
  }
}

// ---------------------------------------------------------------------------
// (e) conv2d per network shape against the GEMM at the same M/N/K.

struct NetShape {
  std::string name;
  int64_t c_in, px, c_out, k, stride, pad, groups;
};

// ResNet-18 (CIFAR) convolutions, the narrow ones of the zoo's eighth-width
// ResNet-18 (8 and 16 channels: products one vector wide), a depthwise one
// and a pointwise expansion and projection of the zoo's MobileNet-v2; batch
// 8 (--net_batch; 1 with --quick).
int64_t NetBatch() { return Opts().quick ? 1 : Opts().net_batch; }
const std::vector<NetShape>& NetShapes() {
  static const auto* shapes = new std::vector<NetShape>{
      {"stem 3x3 3->64 32px", 3, 32, 64, 3, 1, 1, 1},
      {"3x3 64 32px", 64, 32, 64, 3, 1, 1, 1},
      {"3x3 128 16px", 128, 16, 128, 3, 1, 1, 1},
      {"3x3 256 8px", 256, 8, 256, 3, 1, 1, 1},
      {"3x3 512 4px", 512, 4, 512, 3, 1, 1, 1},
      {"3x3 s2 64->128 32px", 64, 32, 128, 3, 2, 1, 1},
      {"3x3 s2 256->512 8px", 256, 8, 512, 3, 2, 1, 1},
      {"1x1 s2 64->128 32px", 64, 32, 128, 1, 2, 0, 1},
      {"1x1 s2 256->512 8px", 256, 8, 512, 1, 2, 0, 1},
      {"3x3 8 32px", 8, 32, 8, 3, 1, 1, 1},
      {"3x3 16 16px", 16, 16, 16, 3, 1, 1, 1},
      {"3x3 s2 8->16 32px", 8, 32, 16, 3, 2, 1, 1},
      {"1x1 s2 8->16 32px", 8, 32, 16, 1, 2, 0, 1},
      {"dw 3x3 128 16px", 128, 16, 128, 3, 1, 1, 128},
      {"1x1 8->48 16px", 8, 16, 48, 1, 1, 0, 1},
      {"1x1 48->12 16px", 48, 16, 12, 1, 1, 0, 1},
  };
  return *shapes;
}

// One group's product of each op: rows x cols, depth.
struct Mnk {
  int64_t m, n, k;
};
Mnk NetMnk(const NetShape& s, int op) {
  const int64_t b = NetBatch();
  const int64_t out = (s.px + 2 * s.pad - s.k) / s.stride + 1;
  const int64_t cig = s.c_in / s.groups, cog = s.c_out / s.groups;
  const int64_t kk = s.k * s.k;
  if (op == 0) return {cog, b * out * out, cig * kk};
  if (op == 1) return {cig, b * s.px * s.px, cog * kk};
  return {cog, cig * kk, b * out * out};
}
double NetFlops(const NetShape& s) {
  const Mnk f = NetMnk(s, 0);
  return 2.0 * f.m * f.n * f.k * s.groups;  // the same for all three ops
}

std::string NetName(size_t i, int op, const char* impl) {
  return absl::StrFormat("shapes/%d/%s/%s", i, kConvOps[op].label, impl);
}

// Random x, w and dy of a shape at NetBatch() (three seeds from *seed),
// zeroed outputs, and its attributes.
ConvData NetData(const NetShape& s, uint32_t* seed) {
  const int64_t b = NetBatch();
  const int64_t out = (s.px + 2 * s.pad - s.k) / s.stride + 1;
  ConvData d;
  d.x = RandomTensor({b, s.c_in, s.px, s.px}, ++*seed);
  d.w = RandomTensor({s.c_out, s.c_in / s.groups, s.k, s.k}, ++*seed);
  d.dy = RandomTensor({b, s.c_out, out, out}, ++*seed);
  d.y = {ZeroTensor({b, s.c_out, out, out})};
  d.dx = {ZeroTensor({b, s.c_in, s.px, s.px})};
  d.dw = {ZeroTensor({s.c_out, s.c_in / s.groups, s.k, s.k})};
  return d;
}
OpAttrs NetAttrs(const NetShape& s) {
  OpAttrs attrs;
  attrs.stride_h = attrs.stride_w = s.stride;
  attrs.pad_top = attrs.pad_bottom = attrs.pad_left = attrs.pad_right = s.pad;
  attrs.groups = s.groups;
  return attrs;
}

// The canonical GEMM of one group's product of a shape's op, on random
// row-major operands (two seeds from *seed), on the calling thread.
struct NetGemm {
  std::vector<float> a, b, c;
  c::MatMulShape m;

  NetGemm(const Mnk& f, uint32_t* seed)
      : a(Random(f.m * f.k, ++*seed)),
        b(Random(f.k * f.n, ++*seed)),
        c(f.m * f.n, 0.0f),
        m(c::DenseForwardShape(c::DenseShape{f.m, f.k, f.n, false, false})) {}
  void Run() {
    CanonicalGemm(m, a.data(), b.data(), c.data(), ActiveCpuIsa(),
                  /*pool=*/nullptr);
    benchmark::DoNotOptimize(c.data());
  }
};

// The fastest of `reps` calls of each of call(0) and call(1), the two
// alternating call by call after one warm-up round: two settings compared
// within moments of each other, where a shared host's speed drifts more
// between Google Benchmark's runs than they differ.
std::pair<double, double> FastestAlternating(
    int reps, const std::function<void(int)>& call) {
  double best[2] = {std::numeric_limits<double>::infinity(),
                    std::numeric_limits<double>::infinity()};
  for (int r = 0; r < reps + 1; ++r) {
    for (int which = 0; which < 2; ++which) {
      const auto t0 = std::chrono::steady_clock::now();
      call(which);
      const double t =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
      if (r > 0) best[which] = std::min(best[which], t);
    }
  }
  return {best[0], best[1]};
}

void RegisterNetShapes() {
  uint32_t seed = 40;
  for (size_t i = 0; i < NetShapes().size(); ++i) {
    const NetShape& s = NetShapes()[i];
    auto d = std::make_shared<ConvData>(NetData(s, &seed));
    const OpAttrs attrs = NetAttrs(s);
    for (int op = 0; op < 3; ++op) {
      const KernelFn fn =
          Kernel(kConvOps[op].op, Mode::kCanonical, kCanonicalAlgorithm);
      Add(
          NetName(i, op, "conv"), [] { UseThreads(1); },
          [d, op, fn, attrs] {
            Call(fn, d->Inputs(op), d->Output(op), attrs);
          });
      auto g = std::make_shared<NetGemm>(NetMnk(s, op), &seed);
      Add(
          NetName(i, op, "gemm"), [] {}, [g] { g->Run(); });
    }
  }
}

// The GEMM time over the conv time of one op of a shape (groups x GEMM
// time / conv time), the two alternating call by call, the fastest of
// `reps` calls each, on fresh operands (seeds from *seed).
double PairedNetRatio(const NetShape& s, int op, int reps, uint32_t* seed) {
  ConvData d = NetData(s, seed);
  NetGemm g(NetMnk(s, op), seed);
  const KernelFn fn =
      Kernel(kConvOps[op].op, Mode::kCanonical, kCanonicalAlgorithm);
  const OpAttrs attrs = NetAttrs(s);
  const auto [conv, gemm] = FastestAlternating(reps, [&](int which) {
    if (which == 0) {
      Call(fn, d.Inputs(op), d.Output(op), attrs);
    } else {
      g.Run();
    }
  });
  return s.groups * gemm / conv;
}

void PrintNetShapes() {
  const int reps = Opts().quick ? 2 : 15;
  std::printf(
      "\n== (e) CANONICAL conv2d per network shape vs the canonical GEMM at "
      "the same M/N/K (one group's product), batch %d, 1 thread; GFLOP/s "
      "(the convolution's own flops), and groups x GEMM time / conv time, "
      "ISA %s; paired: the same ratio with the two alternating call by "
      "call, fastest of %d calls each (steadier on a host whose speed "
      "drifts) ==\n",
      static_cast<int>(NetBatch()),
      std::string(CpuIsaName(ActiveCpuIsa())).c_str(), reps);
  std::printf("%-22s %-12s %18s %8s %8s %10s %8s\n", "shape", "op", "M x N x K",
              "conv", "gemm", "gemm/conv", "paired");
  UseThreads(1);
  uint32_t seed = 140;
  for (size_t i = 0; i < NetShapes().size(); ++i) {
    const NetShape& s = NetShapes()[i];
    for (int op = 0; op < 3; ++op) {
      const Mnk f = NetMnk(s, op);
      const double gc = NetFlops(s) / Seconds(NetName(i, op, "conv")) * 1e-9;
      const double gg =
          2.0 * f.m * f.n * f.k / Seconds(NetName(i, op, "gemm")) * 1e-9;
      // The lowered product's time over the convolution's: 1 is GEMM
      // efficiency on the canonical term sequence (which for a strided
      // grad_input includes the stride holes' zero terms).
      const double ratio = s.groups * Seconds(NetName(i, op, "gemm")) /
                           Seconds(NetName(i, op, "conv"));
      std::printf("%-22s %-12s %18s %8s %8s %10s %8.2f\n", s.name.c_str(),
                  kConvOps[op].label,
                  absl::StrFormat("%dx%dx%d", f.m, f.n, f.k).c_str(),
                  Fmt(gc, "%.1f").c_str(), Fmt(gg, "%.1f").c_str(),
                  Fmt(ratio, "%.2f").c_str(),
                  PairedNetRatio(s, op, reps, &seed));
    }
  }
}

// (f) The image groups of the indirect forward and grad_input (conv_gemm.cc)
// against the whole batch in one product. Two settings of one call differ
// by a few percent, less than a shared host's drift between Google
// Benchmark's runs, so here the two alternate call by call and each keeps
// its fastest call. Shapes without groups run the same code both ways: their
// ratio shows the method's noise.
void PrintImageGroups() {
  const int reps = Opts().quick ? 2 : 15;
  std::printf(
      "\n== (f) image groups vs the whole batch in one product, CANONICAL "
      "conv2d at batch %d; GFLOP/s, fastest of %d calls each, the two "
      "alternating; whole / groups: time ratio (> 1: the groups are faster; "
      "1.00 +- noise where the shape forms no groups). On 1 thread the groups "
      "run one after another, on 2 side by side, each on one thread; "
      "grad_weight's groups are the subtrees of its reduction, on 2 threads; "
      "own/shared: time ratio of the groups with the weights packed by each "
      "group against packed once for all (> 1: sharing is faster; 1.00 +- "
      "noise where the shape forms no groups) ==\n",
      static_cast<int>(NetBatch()), reps);
  std::printf("%-22s %-12s %7s %8s %8s %14s %12s\n", "shape", "op", "threads",
              "groups", "whole", "whole/groups", "own/shared");
  for (const int threads : {1, 2}) {
    UseThreads(threads);
    uint32_t seed = 90;
    for (const NetShape& s : NetShapes()) {
      if (s.groups != 1 || s.c_in < 16) continue;  // the realistic layers
      ConvData d = NetData(s, &seed);
      const OpAttrs attrs = NetAttrs(s);
      for (int op = 0; op < 3; ++op) {
        const KernelFn fn =
            Kernel(kConvOps[op].op, Mode::kCanonical, kCanonicalAlgorithm);
        const auto [groups, whole] = FastestAlternating(reps, [&](int w) {
          cpu_internal::SetConvImageGroupForTesting(w == 1 ? int64_t{1} << 30
                                                           : 0);
          Call(fn, d.Inputs(op), d.Output(op), attrs);
        });
        cpu_internal::SetConvImageGroupForTesting(0);
        // The image groups with the weights packed once for them all (the
        // default) against packed by each group (forward and grad_input).
        std::string own_shared = "-";
        if (op < 2) {
          const auto [shared, own] = FastestAlternating(reps, [&](int o) {
            cpu_internal::SetConvSharedWeightsForTesting(o == 0);
            Call(fn, d.Inputs(op), d.Output(op), attrs);
          });
          cpu_internal::SetConvSharedWeightsForTesting(true);
          own_shared = absl::StrFormat("%.2f", own / shared);
        }
        std::printf("%-22s %-12s %7d %8.1f %8.1f %14.2f %12s\n", s.name.c_str(),
                    kConvOps[op].label, threads, NetFlops(s) / groups * 1e-9,
                    NetFlops(s) / whole * 1e-9, whole / groups,
                    own_shared.c_str());
      }
    }
  }
}

// Busy for `micros` on the calling thread (a stand-in for a kernel's task
// or for serial work between kernels).
void BusyFor(double micros) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now() - t0)
             .count() < micros) {
  }
}

// (g) What a job of two tasks costs after a gap of serial work, for a pool
// whose workers spin kPoolShortSpinMicros before sleeping and one that
// spins kPoolSpinMicros (the default; past its first kPoolShortSpinMicros
// it yields the core between polls). The pools take turns by blocks of jobs,
// each block after a pause that lets the other pool's workers fall asleep (a
// spinning pool would take a core from the one being timed).
void PrintPoolHandOff() {
  const int calls = Opts().quick ? 10 : 200;
  constexpr double kTask = 300;  // us per task
  std::printf(
      "\n== (g) pool hand-off: a job of 2 tasks of %.0f us on 2 threads after "
      "a gap of serial work; mean us per job over %d jobs (%.0f: both tasks "
      "side by side), the two pools in turns of %d jobs; a worker that has "
      "gone to sleep must be woken ==\n",
      kTask, calls, kTask, calls / 4);
  std::printf("%-10s %16s %16s\n", "gap us",
              absl::StrFormat("spin %d us", kPoolShortSpinMicros).c_str(),
              absl::StrFormat("spin %d us", kPoolSpinMicros).c_str());
  ThreadPool pools[2] = {ThreadPool(2, kPoolShortSpinMicros),
                         ThreadPool(2, kPoolSpinMicros)};
  for (const double gap : {0.0, 100.0, 300.0, 1000.0}) {
    double total[2] = {0, 0};
    for (int turn = 0; turn < 4; ++turn) {
      for (int p = 0; p < 2; ++p) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        for (int r = 0; r < calls / 4; ++r) {
          BusyFor(gap);
          const auto t0 = std::chrono::steady_clock::now();
          pools[p].ParallelFor(2, [&](int64_t) { BusyFor(kTask); });
          total[p] += std::chrono::duration<double, std::micro>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
        }
      }
    }
    const int done = calls / 4 * 4;
    std::printf("%-10.0f %16.0f %16.0f\n", gap, total[0] / done,
                total[1] / done);
  }
}

// ---------------------------------------------------------------------------
// (h) transformer products: gpt_block's (worker/exec/bench_models) dense
// layers and attention entries through the registered CANONICAL kernels,
// against OpenBLAS on the same products (a matmul: one sgemm per entry).

struct TransformerProduct {
  std::string name;  // also the benchmark name's row
  std::string op;    // dense.forward, ..., matmul.forward, matmul.grad
  OpAttrs attrs;
  std::vector<Tensor> in, out;
  double flops = 0;
  // The same product(s) by cblas_sgemm (row-major), from in into out.
  std::function<void(const std::vector<Tensor>& in, std::vector<Tensor>& out)>
      blas;
};

// Table (h)'s dense layers' rows: gpt_block's batch 8 x sequence 256.
int64_t TransformerTokens() { return Opts().quick ? 64 : 2048; }

std::vector<TransformerProduct>& TransformerProducts() {
  static auto* products = [] {
    auto* v = new std::vector<TransformerProduct>();
    const bool q = Opts().quick;
    const int64_t tokens = TransformerTokens();
    const int64_t s = q ? 32 : 256;  // sequence
    const int64_t e = q ? 2 : 32;    // entries: batch 8 x 4 heads
    const int64_t h = 64;            // head width
    uint32_t seed = 900;
    using In = const std::vector<Tensor>&;
    using Out = std::vector<Tensor>&;
    auto f = [](In t, size_t i) { return t[i].data<float>(); };
    // Each dense layer's three passes: y = x w, dx = dy w^T, dw = x^T dy.
    for (const auto& [k_in, n_out] : std::vector<std::pair<int64_t, int64_t>>{
             {256, 256}, {256, 1024}, {1024, 256}}) {
      const int64_t k = k_in, n = n_out;  // (lambdas capture variables)
      const std::string layer = absl::StrFormat("dense %d->%d", k, n);
      const double flops = 2.0 * tokens * k * n;
      const Tensor x = RandomTensor({tokens, k}, ++seed);
      const Tensor w = RandomTensor({k, n}, ++seed);
      const Tensor dy = RandomTensor({tokens, n}, ++seed);
      const int64_t m = tokens;
      v->push_back({layer + " forward",
                    op::kDenseForward,
                    {},
                    {x, w},
                    {ZeroTensor({m, n})},
                    flops,
                    [=](In in, Out out) {
                      Sgemm(false, false, m, n, k, 1.0f, f(in, 0), k, f(in, 1),
                            n, out[0].data<float>(), n);
                    }});
      v->push_back({layer + " grad_input",
                    op::kDenseGradInput,
                    {},
                    {dy, w},
                    {ZeroTensor({m, k})},
                    flops,
                    [=](In in, Out out) {
                      Sgemm(false, true, m, k, n, 1.0f, f(in, 0), n, f(in, 1),
                            n, out[0].data<float>(), k);
                    }});
      v->push_back({layer + " grad_weight",
                    op::kDenseGradWeight,
                    {},
                    {x, dy},
                    {ZeroTensor({k, n})},
                    flops,
                    [=](In in, Out out) {
                      Sgemm(true, false, k, n, m, 1.0f, f(in, 0), k, f(in, 1),
                            n, out[0].data<float>(), n);
                    }});
    }
    // Attention, per entry: scores = q k^T / 8 and ctx = p v, each forward
    // and its grad (both operands' gradients).
    const double flops = 2.0 * e * s * s * h;
    const Tensor qt = RandomTensor({e, s, h}, ++seed);
    const Tensor kt = RandomTensor({e, s, h}, ++seed);
    const Tensor pt = RandomTensor({e, s, s}, ++seed);
    const Tensor vt = RandomTensor({e, s, h}, ++seed);
    const Tensor ds = RandomTensor({e, s, s}, ++seed);
    const Tensor dc = RandomTensor({e, s, h}, ++seed);
    OpAttrs scores;
    scores.transpose_w = true;
    scores.scale = 0.125f;
    const float a = scores.scale;
    const int64_t sh = s * h, ss = s * s;
    v->push_back({"attn q k^T forward",
                  op::kMatMulForward,
                  scores,
                  {qt, kt},
                  {ZeroTensor({e, s, s})},
                  flops,
                  [=](In in, Out out) {
                    for (int64_t i = 0; i < e; ++i) {
                      Sgemm(false, true, s, s, h, a, f(in, 0) + i * sh, h,
                            f(in, 1) + i * sh, h, out[0].data<float>() + i * ss,
                            s);
                    }
                  }});
    v->push_back(
        {"attn q k^T grad",
         op::kMatMulGrad,
         scores,
         {qt, kt, ds},
         {ZeroTensor({e, s, h}), ZeroTensor({e, s, h})},
         2 * flops,
         [=](In in, Out out) {
           for (int64_t i = 0; i < e; ++i) {
             // dq = ds k / 8, dk = ds^T q / 8
             Sgemm(false, false, s, h, s, a, f(in, 2) + i * ss, s,
                   f(in, 1) + i * sh, h, out[0].data<float>() + i * sh, h);
             Sgemm(true, false, s, h, s, a, f(in, 2) + i * ss, s,
                   f(in, 0) + i * sh, h, out[1].data<float>() + i * sh, h);
           }
         }});
    v->push_back({"attn p v forward",
                  op::kMatMulForward,
                  {},
                  {pt, vt},
                  {ZeroTensor({e, s, h})},
                  flops,
                  [=](In in, Out out) {
                    for (int64_t i = 0; i < e; ++i) {
                      Sgemm(false, false, s, h, s, 1.0f, f(in, 0) + i * ss, s,
                            f(in, 1) + i * sh, h, out[0].data<float>() + i * sh,
                            h);
                    }
                  }});
    v->push_back(
        {"attn p v grad",
         op::kMatMulGrad,
         {},
         {pt, vt, dc},
         {ZeroTensor({e, s, s}), ZeroTensor({e, s, h})},
         2 * flops,
         [=](In in, Out out) {
           for (int64_t i = 0; i < e; ++i) {
             // dp = dc v^T, dv = p^T dc
             Sgemm(false, true, s, s, h, 1.0f, f(in, 2) + i * sh, h,
                   f(in, 1) + i * sh, h, out[0].data<float>() + i * ss, s);
             Sgemm(true, false, s, h, s, 1.0f, f(in, 0) + i * ss, s,
                   f(in, 2) + i * sh, h, out[1].data<float>() + i * sh, h);
           }
         }});
    return v;
  }();
  return *products;
}

std::string TransformerName(const TransformerProduct& p, int threads,
                            const char* impl) {
  return absl::StrFormat("transformer/%s/t%d/%s", p.name, threads, impl);
}

void RegisterTransformer() {
  for (TransformerProduct& p : TransformerProducts()) {
    TransformerProduct* product = &p;
    const KernelFn fn = Kernel(p.op, Mode::kCanonical, kCanonicalAlgorithm);
    for (int threads : ThreadCounts()) {
      Add(
          TransformerName(p, threads, "canonical"),
          [threads] { UseThreads(threads); },
          [product, fn] {
            Call(fn, product->in, product->out, product->attrs);
          });
      if (Blas().sgemm == nullptr) continue;
      Add(
          TransformerName(p, threads, "openblas"),
          [threads] {
            if (Blas().set_threads != nullptr) Blas().set_threads(threads);
          },
          [product] { product->blas(product->in, product->out); });
    }
  }
}

void PrintTransformer() {
  std::printf(
      "\n== (h) transformer products: gpt_block's dense layers (%d tokens) "
      "and attention entries, CANONICAL kernel vs OpenBLAS sgemm, GFLOP/s, "
      "ISA %s ==\n",
      static_cast<int>(TransformerTokens()),
      std::string(CpuIsaName(ActiveCpuIsa())).c_str());
  if (Blas().sgemm == nullptr) {
    std::printf("OpenBLAS: not installed (apt-get install libopenblas-dev)\n");
  }
  std::printf("%-30s %7s %10s %10s %16s\n", "product", "threads", "canonical",
              "openblas", "canonical/blas");
  for (const TransformerProduct& p : TransformerProducts()) {
    for (int threads : ThreadCounts()) {
      const double gc =
          p.flops / Seconds(TransformerName(p, threads, "canonical")) * 1e-9;
      const double gb =
          p.flops / Seconds(TransformerName(p, threads, "openblas")) * 1e-9;
      std::printf("%-30s %7d %10s %10s %16s\n", p.name.c_str(), threads,
                  Fmt(gc, "%.1f").c_str(), Fmt(gb, "%.1f").c_str(),
                  Fmt(gc / gb, "%.2f").c_str());
    }
  }
}

// ---------------------------------------------------------------------------

int Main(int argc, char** argv) {
  // Our flags first; the rest goes to Google Benchmark, with defaults of
  // ours unless given: repetitions of all benchmarks interleaved in random
  // order (load from other processes spreads over every figure), 0.2 s each.
  std::vector<std::string> defaults = {
      "--benchmark_enable_random_interleaving=true",
      "--benchmark_min_time=0.2"};
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      Opts().quick = true;
    } else if (std::strncmp(argv[i], "--reps=", 7) == 0) {
      Opts().reps = std::max(1, std::atoi(argv[i] + 7));
    } else if (std::strncmp(argv[i], "--net_batch=", 12) == 0) {
      Opts().net_batch = std::atoi(argv[i] + 12);
      if (Opts().net_batch < 1 || Opts().net_batch > 256) {
        std::fprintf(stderr,
                     "cpu_bench: --net_batch must be 1 to 256, got \"%s\"\n",
                     argv[i] + 12);
        return 2;
      }
    } else {
      for (std::string& d : defaults) {
        if (!d.empty() && std::strncmp(argv[i], d.c_str(), d.find('=')) == 0) {
          d.clear();  // given
        }
      }
      rest.push_back(argv[i]);
    }
  }
  for (std::string& d : defaults) {
    if (!d.empty()) rest.push_back(d.data());
  }
  if (Opts().quick) Opts().reps = 1;
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 2;

  RegisterGemm();
  RegisterConv();
  RegisterLanes();
  RegisterNetShapes();
  RegisterTransformer();
  CollectingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  std::printf(
      "\nSummary (best of %d repetition%s per figure; ratios from figures of "
      "this run)\n",
      Opts().reps, Opts().reps == 1 ? "" : "s");
  PrintGemm();
  PrintConv();
  PrintHash();
  PrintLanes();
  PrintNetShapes();
  PrintImageGroups();
  PrintPoolHandOff();
  PrintTransformer();
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace lockstep::kernels

int main(int argc, char** argv) { return lockstep::kernels::Main(argc, argv); }
