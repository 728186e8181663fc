#include "worker/selftest.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/graph_op_cases.h"
#include "kernels/graph_ops.h"
#include "kernels/op_cases.h"
#include "worker/exec/worker_kernels.h"
#include "worker/gpu_probe.h"

namespace lockstep::worker {

namespace v1 = ::lockstep::v1;
namespace {

using kernels::CpuIsa;
using kernels::KernelFn;
using kernels::KernelKey;
using kernels::Mode;
using kernels::OpCase;
using kernels::Tensor;

constexpr char kCpu[] = "cpu";

// AllOpNames() and the graph data ops (kernels/graph_ops.h).
std::vector<std::string> AllOps() {
  std::vector<std::string> ops = kernels::AllOpNames();
  for (std::string& op : kernels::GraphDataOpNames()) {
    ops.push_back(std::move(op));
  }
  return ops;
}

// Sets the CPU ISA override and the pool size for as long as it lives, and
// restores the default ISA and the pool size found at construction.
class CpuSettings {
 public:
  CpuSettings() : original_threads_(kernels::CpuThreadPool()->num_threads()) {
    kernels::SetCpuThreadsForTesting(0);
    default_threads_ = kernels::CpuThreadPool()->num_threads();
    threads_ = default_threads_;
  }
  ~CpuSettings() {
    kernels::SetCpuIsaForTesting(std::nullopt);
    if (threads_ != original_threads_) {
      kernels::SetCpuThreadsForTesting(original_threads_);
    }
  }
  CpuSettings(const CpuSettings&) = delete;
  CpuSettings& operator=(const CpuSettings&) = delete;

  int default_threads() const { return default_threads_; }

  void Set(CpuIsa isa, int threads) {
    kernels::SetCpuIsaForTesting(isa);
    if (threads != threads_) {
      kernels::SetCpuThreadsForTesting(threads);
      threads_ = threads;
    }
  }

 private:
  const int original_threads_;
  int default_threads_ = 1;
  int threads_ = 1;
};

struct CpuConfig {
  CpuIsa isa;
  int threads;
};

using Outputs = std::vector<std::vector<Tensor>>;  // per call, per output

// Largest |a - b| over the float32 elements whose bits differ; NaN when one
// side is NaN and the other is not the same bits.
void AccumulateMaxAbsDiff(const Tensor& got, const Tensor& want,
                          double* max_diff) {
  if (got.dtype() != kernels::DType::kFloat32 ||
      want.dtype() != kernels::DType::kFloat32 || got.numel() != want.numel()) {
    return;
  }
  const float* a = got.data<float>();
  const float* b = want.data<float>();
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) == 0) continue;
    const double d =
        std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (std::isnan(d) || std::isnan(*max_diff)) {
      *max_diff = std::nan("");
    } else if (d > *max_diff) {
      *max_diff = d;
    }
  }
}

// Runs one row: every call of the op, `runs` times. A non-CANONICAL
// kernel that answers UNIMPLEMENTED for a call in the first run (a vendor
// library that cannot express it) has that call left out of the row.
SelftestRow RunRow(KernelFn fn, const KernelKey& key,
                   const std::vector<const OpCase*>& cases,
                   const Outputs& reference, int runs) {
  SelftestRow row;
  row.key = key;
  row.calls = static_cast<int>(cases.size());
  row.bits_equal = true;
  row.repeatable = true;
  const bool cross_class = key.backend != kernels::kCpuBackendName;
  std::vector<bool> skip(cases.size(), false);
  Outputs first;
  std::vector<double> times_ms;
  for (int r = 0; r < runs; ++r) {
    Outputs outs;
    outs.reserve(cases.size());
    for (const OpCase* c : cases) outs.push_back(kernels::CloneAll(c->outputs));
    const auto start = std::chrono::steady_clock::now();
    for (size_t k = 0; k < cases.size(); ++k) {
      if (skip[k]) continue;
      absl::Status s =
          fn(cases[k]->inputs, absl::MakeSpan(outs[k]), cases[k]->attrs);
      if (s.code() == absl::StatusCode::kUnimplemented && r == 0 &&
          key.mode != Mode::kCanonical) {
        skip[k] = true;
        if (row.unsupported_calls++ == 0) {
          row.unsupported_reason =
              absl::StrCat(cases[k]->label, ": ", s.message());
        }
        continue;
      }
      if (!s.ok()) {
        row.error = absl::StrCat(cases[k]->label, ": ", s.ToString());
        row.bits_equal = false;
        row.repeatable = false;
        row.verdict = RowVerdict::kFail;
        return row;
      }
    }
    const auto end = std::chrono::steady_clock::now();
    times_ms.push_back(
        std::chrono::duration<double, std::milli>(end - start).count());
    for (size_t k = 0; k < cases.size(); ++k) {
      if (skip[k]) continue;
      for (size_t o = 0; o < outs[k].size(); ++o) {
        // The reference runs on this machine's CPU: other backends are
        // another hardware class, whose arithmetic NaNs may carry other
        // bits (docs/canonical-arithmetic.md, section 7).
        const int64_t diff = cross_class ? kernels::FirstCrossClassDifference(
                                               outs[k][o], reference[k][o])
                                         : kernels::FirstDifferingElement(
                                               outs[k][o], reference[k][o]);
        if (cross_class && r == 0) {
          row.nan_bit_differences +=
              kernels::CountNanBitDifferences(outs[k][o], reference[k][o]);
        }
        if (diff >= 0) {
          AccumulateMaxAbsDiff(outs[k][o], reference[k][o], &row.max_abs_diff);
          if (row.bits_equal) {
            row.bits_equal = false;
            row.diff_case = static_cast<int>(k);
            row.diff_case_label = cases[k]->label;
            row.diff_output = static_cast<int>(o);
            row.diff_index = diff;
          }
        }
        if (r > 0 &&
            kernels::FirstDifferingElement(outs[k][o], first[k][o]) >= 0) {
          row.repeatable = false;
        }
      }
    }
    if (r == 0) first = std::move(outs);
  }
  std::sort(times_ms.begin(), times_ms.end());
  row.median_ms = times_ms.empty() ? 0 : times_ms[times_ms.size() / 2];
  if (row.unsupported_calls == row.calls) {
    // Nothing was compared.
    row.bits_equal = false;
    row.repeatable = false;
    row.verdict = RowVerdict::kInfo;
    return row;
  }
  switch (key.mode) {
    case Mode::kCanonical:
      row.verdict = row.bits_equal ? RowVerdict::kPass : RowVerdict::kFail;
      break;
    case Mode::kDeterministic:
      row.verdict = row.repeatable ? RowVerdict::kPass : RowVerdict::kFail;
      break;
    case Mode::kDefault:
      row.verdict = RowVerdict::kInfo;
      break;
  }
  return row;
}

std::string Join(const std::vector<CpuIsa>& isas) {
  return absl::StrJoin(isas, " ", [](std::string* out, CpuIsa isa) {
    absl::StrAppend(out, kernels::CpuIsaName(isa));
  });
}

std::string FormatDouble(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return "inf";
  return absl::StrFormat("%.3g", v);
}

// "1.49 ms", "143 us", "0.4 us".
std::string FormatMillis(double ms) {
  if (ms >= 1.0) return absl::StrFormat("%.2f ms", ms);
  const double us = ms * 1000.0;
  return us >= 10.0 ? absl::StrFormat("%.0f us", us)
                    : absl::StrFormat("%.1f us", us);
}

std::string JsonNumber(double v) {
  if (std::isnan(v)) return "\"nan\"";
  if (std::isinf(v)) return "\"inf\"";
  return absl::StrFormat("%.9g", v);
}

const char* VerdictName(RowVerdict v) {
  switch (v) {
    case RowVerdict::kPass:
      return "pass";
    case RowVerdict::kFail:
      return "fail";
    case RowVerdict::kInfo:
      return "info";
  }
  return "fail";
}

std::string EqualCell(const SelftestRow& row) {
  if (!row.error.empty()) return "error";
  if (row.bits_equal) {
    return row.nan_bit_differences > 0
               ? absl::StrFormat("yes (%d NaNs: note)", row.nan_bit_differences)
               : "yes";
  }
  return absl::StrFormat("no @%d (call %d out %d)", row.diff_index,
                         row.diff_case, row.diff_output);
}

std::string FailureReason(const SelftestRow& row) {
  if (!row.error.empty()) return row.error;
  if (row.key.mode == Mode::kCanonical) {
    return absl::StrFormat(
        "bits differ from the reference at call %d (%s) output %d index %d",
        row.diff_case, row.diff_case_label, row.diff_output, row.diff_index);
  }
  return "not repeatable";
}

}  // namespace

std::string SelftestRow::Name() const {
  std::string name = absl::StrCat(key.op, " ", kernels::ModeName(key.mode), " ",
                                  key.algorithm, " ", key.backend);
  if (!isa.empty()) absl::StrAppend(&name, " isa=", isa);
  if (threads > 0) absl::StrAppend(&name, " threads=", threads);
  return name;
}

bool SelftestReport::ok() const { return FailingRows().empty(); }

std::vector<const SelftestRow*> SelftestReport::FailingRows() const {
  std::vector<const SelftestRow*> out;
  for (const SelftestRow& row : rows) {
    if (row.verdict == RowVerdict::kFail) out.push_back(&row);
  }
  return out;
}

absl::Status ValidateSelftestOps(const std::vector<std::string>& ops) {
  const std::vector<std::string> all = AllOps();
  for (const std::string& op : ops) {
    if (op.empty()) return absl::InvalidArgumentError("--ops: empty op name");
    if (std::find(all.begin(), all.end(), op) == all.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--ops: unknown op \"%s\" (known: %s)", op,
                          absl::StrJoin(all, ", ")));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SelftestReport> RunSelftest(const kernels::Registry& registry,
                                           const SelftestOptions& options) {
  LS_RETURN_IF_ERROR(ValidateSelftestOps(options.ops));
  if (options.runs < 1) {
    return absl::InvalidArgumentError("selftest: runs must be >= 1");
  }
  for (int t : options.thread_counts) {
    if (t < 1) {
      return absl::InvalidArgumentError("selftest: thread counts must be >= 1");
    }
  }
  std::vector<std::string> ops;
  for (const std::string& op : AllOps()) {
    if (options.ops.empty() || std::find(options.ops.begin(), options.ops.end(),
                                         op) != options.ops.end()) {
      ops.push_back(op);
    }
  }

  // The ISA jobs use here (LOCKSTEP_CPU_ISA, else the widest), read before
  // anything is forced.
  const CpuIsa job_isa = kernels::ActiveCpuIsa();
  CpuSettings cpu;
  std::vector<CpuIsa> isas;
  for (CpuIsa isa :
       options.isas.empty() ? kernels::SupportedCpuIsas() : options.isas) {
    if (kernels::CpuIsaSupported(isa) &&
        std::find(isas.begin(), isas.end(), isa) == isas.end()) {
      isas.push_back(isa);
    }
  }
  if (isas.empty()) isas.push_back(CpuIsa::kScalar);
  std::vector<int> threads;
  for (int t : options.thread_counts.empty()
                   ? std::vector<int>{1, cpu.default_threads()}
                   : options.thread_counts) {
    if (std::find(threads.begin(), threads.end(), t) == threads.end()) {
      threads.push_back(t);
    }
  }
  SelftestReport report;
  report.seed = options.seed;
  report.runs = options.runs;
  report.ops = ops;
  report.backends.push_back(
      {kCpu, true,
       absl::StrFormat("isas %s (jobs use %s), threads %s", Join(isas),
                       kernels::CpuIsaName(job_isa),
                       absl::StrJoin(threads, " and "))});
  std::map<std::string, bool> available = {{kCpu, true}};
  for (const SelftestBackend& b : options.backends) {
    if (b.name == kCpu) continue;
    report.backends.push_back(b);
    available[b.name] = b.available;
  }

  std::vector<OpCase> all_cases =
      kernels::OpCases(kernels::InputFamily::kRandom, options.seed);
  for (OpCase& c :
       kernels::GraphDataOpCases(kernels::InputFamily::kRandom, options.seed)) {
    all_cases.push_back(std::move(c));
  }
  const std::vector<KernelKey> keys = registry.Keys();

  for (const std::string& op : ops) {
    std::vector<const OpCase*> cases;
    for (const OpCase& c : all_cases) {
      if (c.op == op) cases.push_back(&c);
    }
    // The reference: scalar ISA, one thread.
    const KernelKey ref_key{op, Mode::kCanonical, kernels::kCanonicalAlgorithm,
                            kCpu};
    absl::StatusOr<KernelFn> ref_fn = registry.Lookup(ref_key);
    if (!ref_fn.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "selftest: no reference kernel: ", ref_fn.status().message()));
    }
    cpu.Set(CpuIsa::kScalar, 1);
    Outputs reference;
    for (const OpCase* c : cases) {
      std::vector<Tensor> out = kernels::CloneAll(c->outputs);
      absl::Status s = (*ref_fn)(c->inputs, absl::MakeSpan(out), c->attrs);
      if (!s.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("selftest: reference kernel ", ref_key.DebugString(),
                         " failed on ", c->label, ": ", s.ToString()));
      }
      reference.push_back(std::move(out));
    }

    // An available backend without this op's CANONICAL kernel: every
    // backend has one for every op.
    for (const SelftestBackend& b : report.backends) {
      if (!b.available) continue;
      const KernelKey want{op, Mode::kCanonical, kernels::kCanonicalAlgorithm,
                           b.name};
      if (!registry.Contains(want)) {
        SelftestRow row;
        row.key = want;
        row.error = "no kernel registered";
        row.verdict = RowVerdict::kFail;
        report.rows.push_back(std::move(row));
      }
    }

    for (const KernelKey& key : keys) {
      if (key.op != op) continue;
      const auto it = available.find(key.backend);
      if (it != available.end() && !it->second) continue;
      const KernelFn fn = registry.Lookup(key).value();
      if (key.backend != kCpu) {
        report.rows.push_back(RunRow(fn, key, cases, reference, options.runs));
        continue;
      }
      std::vector<CpuConfig> configs;
      for (CpuIsa isa :
           key.mode == Mode::kCanonical ? isas : std::vector<CpuIsa>{job_isa}) {
        for (int t : threads) configs.push_back({isa, t});
      }
      for (const CpuConfig& config : configs) {
        cpu.Set(config.isa, config.threads);
        SelftestRow row = RunRow(fn, key, cases, reference, options.runs);
        row.isa = std::string(kernels::CpuIsaName(config.isa));
        row.threads = config.threads;
        report.rows.push_back(std::move(row));
      }
    }
  }
  return report;
}

absl::StatusOr<std::vector<SelftestBackend>> RegisterSelftestKernels(
    kernels::Registry* registry) {
  // Exactly the kernels a run process registers.
  LS_ASSIGN_OR_RETURN(const WorkerKernels registered,
                      RegisterWorkerKernels(registry));
  SelftestBackend cuda;
  cuda.name = kernels::kCudaBackendName;
  if (registered.cuda) {
    cuda.available = true;
    const GpuProbeResult gpus = ProbeGpus();
    if (!gpus.devices.empty()) {
      const GpuDevice& d = gpus.devices.front();
      cuda.detail = absl::StrFormat("device %d: %s, sm_%d%d, %d SMs", d.ordinal,
                                    d.name, d.cc_major, d.cc_minor, d.sm_count);
    } else {
      cuda.detail = "device 0";
    }
    if (!registered.vendor) {
      absl::StrAppend(&cuda.detail,
                      "; no cuBLAS / cuDNN kernels: ", registered.vendor_note);
    }
  } else {
    cuda.available = false;
    cuda.detail = std::string(
        absl::StripPrefix(registered.cuda_note, absl::StrCat(cuda.name, ": ")));
  }
  return std::vector<SelftestBackend>{cuda};
}

std::string SelftestSummaryLine(const SelftestReport& report) {
  int canonical = 0, deterministic = 0, defaults = 0, default_varied = 0;
  for (const SelftestRow& row : report.rows) {
    switch (row.key.mode) {
      case Mode::kCanonical:
        ++canonical;
        break;
      case Mode::kDeterministic:
        ++deterministic;
        break;
      case Mode::kDefault:
        ++defaults;
        if (!row.bits_equal || !row.repeatable) ++default_varied;
        break;
    }
  }
  const std::vector<const SelftestRow*> failing = report.FailingRows();
  if (failing.empty()) {
    return absl::StrFormat(
        "PASS: %d rows: %d CANONICAL bit-equal to the reference, "
        "%d DETERMINISTIC repeatable, %d DEFAULT informational (%d differ "
        "from the reference or between runs)",
        report.rows.size(), canonical, deterministic, defaults, default_varied);
  }
  return absl::StrFormat(
      "FAIL: %d of %d rows failed: %s", failing.size(), report.rows.size(),
      absl::StrJoin(failing, "; ", [](std::string* s, const SelftestRow* row) {
        absl::StrAppend(s, row->Name(), " (", FailureReason(*row), ")");
      }));
}

v1::SelftestResult SummarizeSelftest(const SelftestReport& report,
                                     int64_t duration_ms) {
  v1::SelftestResult r;
  r.set_passed(report.ok());
  r.set_rows(static_cast<int32_t>(report.rows.size()));
  r.set_failed_rows(static_cast<int32_t>(report.FailingRows().size()));
  std::string summary = SelftestSummaryLine(report);
  constexpr size_t kMaxSummary = 1000;
  if (summary.size() > kMaxSummary) {
    summary = absl::StrCat(summary.substr(0, kMaxSummary - 3), "...");
  }
  r.set_summary(summary);
  r.set_duration_ms(duration_ms);
  r.add_backends(kernels::kCpuBackendName);
  for (const SelftestBackend& b : report.backends) {
    if (b.available && b.name != kernels::kCpuBackendName) {
      r.add_backends(b.name);
    }
  }
  return r;
}

v1::SelftestResult RunStartupSelftest() {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed_ms = [&] {
    return static_cast<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - start)
            .count());
  };
  kernels::Registry registry;
  absl::StatusOr<SelftestReport> report =
      [&]() -> absl::StatusOr<SelftestReport> {
    LS_ASSIGN_OR_RETURN(std::vector<SelftestBackend> backends,
                        RegisterSelftestKernels(&registry));
    SelftestOptions options;
    options.backends = std::move(backends);
    return RunSelftest(registry, options);
  }();
  if (!report.ok()) {
    v1::SelftestResult r;
    r.set_passed(false);
    r.set_summary(absl::StrCat("error: ", report.status().ToString()));
    r.set_duration_ms(elapsed_ms());
    return r;
  }
  return SummarizeSelftest(*report, elapsed_ms());
}

std::string FormatSelftestTable(const SelftestReport& report) {
  std::string out = absl::StrFormat(
      "lockstep-worker selftest: seed %d, %d runs per row, %d op%s\n"
      "reference: cpu CANONICAL canonical, isa=scalar, threads=1\n",
      report.seed, report.runs, report.ops.size(),
      report.ops.size() == 1 ? "" : "s");
  for (const SelftestBackend& b : report.backends) {
    absl::StrAppend(&out, b.name, ": ",
                    b.available ? "" : "not available: ", b.detail, "\n");
  }
  std::vector<std::vector<std::string>> table;
  table.push_back({"op", "mode", "algorithm", "backend", "isa", "threads",
                   "bits=ref", "repeatable", "median", "max|diff|", "check"});
  for (const SelftestRow& row : report.rows) {
    const bool none_run = row.calls > 0 && row.unsupported_calls == row.calls;
    std::string check;
    switch (row.verdict) {
      case RowVerdict::kPass:
        check = "ok";
        break;
      case RowVerdict::kFail:
        check = absl::StrCat("FAIL: ", FailureReason(row));
        break;
      case RowVerdict::kInfo:
        check = none_run ? "info (no call supported)"
                         : "info (DEFAULT: variation expected)";
        break;
    }
    if (row.unsupported_calls > 0) {
      absl::StrAppendFormat(&check, " [%d of %d calls unsupported: %s]",
                            row.unsupported_calls, row.calls,
                            row.unsupported_reason);
    }
    const bool ran = row.error.empty() && !none_run;
    const bool show_diff =
        ran && (row.key.mode != Mode::kCanonical || !row.bits_equal);
    table.push_back({row.key.op, std::string(kernels::ModeName(row.key.mode)),
                     row.key.algorithm, row.key.backend,
                     row.isa.empty() ? "-" : row.isa,
                     row.threads > 0 ? absl::StrCat(row.threads) : "-",
                     ran ? EqualCell(row) : (none_run ? "-" : "error"),
                     ran ? (row.repeatable ? "yes" : "no") : "-",
                     ran ? FormatMillis(row.median_ms) : "-",
                     show_diff ? FormatDouble(row.max_abs_diff) : "-", check});
  }
  std::vector<size_t> width(table.front().size(), 0);
  for (const auto& cells : table) {
    for (size_t i = 0; i < cells.size(); ++i) {
      width[i] = std::max(width[i], cells[i].size());
    }
  }
  out += "\n";
  for (const auto& cells : table) {
    std::string line;
    for (size_t i = 0; i < cells.size(); ++i) {
      if (i + 1 == cells.size()) {
        line += cells[i];
      } else {
        // Right-align the threads, median and max|diff| columns.
        const bool right = i == 5 || i == 8 || i == 9;
        line += right ? absl::StrFormat("%*s  ", width[i], cells[i])
                      : absl::StrFormat("%-*s  ", width[i], cells[i]);
      }
    }
    absl::StrAppend(&out, absl::StripTrailingAsciiWhitespace(line), "\n");
  }
  out += "\n";
  const auto nan_rows = std::count_if(
      report.rows.begin(), report.rows.end(), [](const SelftestRow& r) {
        return r.bits_equal && r.nan_bit_differences > 0;
      });
  if (nan_rows > 0) {
    absl::StrAppendFormat(
        &out,
        "note: in %d row(s) marked \"NaNs: note\", outputs are NaN where the "
        "reference is NaN but with other bits: a NaN made by arithmetic is "
        "only specified to be NaN, and x86 and CUDA make different ones "
        "(docs/canonical-arithmetic.md, section 7); CROSS_CLASS certifies "
        "NaN-free runs only.\n\n",
        static_cast<int>(nan_rows));
  }

  absl::StrAppend(&out, "selftest: ", SelftestSummaryLine(report), "\n");
  return out;
}

std::string FormatSelftestJson(const SelftestReport& report) {
  std::string out = "{\n";
  absl::StrAppendFormat(&out, "  \"seed\": %d,\n  \"runs\": %d,\n", report.seed,
                        report.runs);
  absl::StrAppend(&out, "  \"ops\": [",
                  absl::StrJoin(report.ops, ", ",
                                [](std::string* s, const std::string& op) {
                                  absl::StrAppend(s, JsonQuote(op));
                                }),
                  "],\n");
  absl::StrAppend(&out,
                  "  \"reference\": {\"backend\": \"cpu\", \"mode\": "
                  "\"CANONICAL\", \"algorithm\": \"canonical\", \"isa\": "
                  "\"scalar\", \"threads\": 1},\n");
  out += "  \"backends\": [\n";
  for (size_t i = 0; i < report.backends.size(); ++i) {
    const SelftestBackend& b = report.backends[i];
    absl::StrAppendFormat(
        &out, "    {\"name\": %s, \"available\": %s, \"detail\": %s}%s\n",
        JsonQuote(b.name), b.available ? "true" : "false", JsonQuote(b.detail),
        i + 1 < report.backends.size() ? "," : "");
  }
  out += "  ],\n  \"rows\": [\n";
  for (size_t i = 0; i < report.rows.size(); ++i) {
    const SelftestRow& r = report.rows[i];
    std::string diff = "null";
    if (r.diff_index >= 0) {
      diff = absl::StrFormat(
          "{\"call\": %d, \"call_label\": %s, \"output\": %d, \"index\": %d}",
          r.diff_case, JsonQuote(r.diff_case_label), r.diff_output,
          r.diff_index);
    }
    absl::StrAppendFormat(
        &out,
        "    {\"op\": %s, \"mode\": %s, \"algorithm\": %s, \"backend\": %s, "
        "\"isa\": %s, \"threads\": %d, \"bits_equal\": %s, "
        "\"first_difference\": %s, \"repeatable\": %s, \"median_ms\": %s, "
        "\"max_abs_diff\": %s, \"nan_bit_differences\": %d, \"calls\": %d, "
        "\"unsupported_calls\": %d, "
        "\"unsupported_reason\": %s, \"error\": %s, \"verdict\": %s}%s\n",
        JsonQuote(r.key.op), JsonQuote(kernels::ModeName(r.key.mode)),
        JsonQuote(r.key.algorithm), JsonQuote(r.key.backend),
        r.isa.empty() ? "null" : JsonQuote(r.isa), r.threads,
        r.bits_equal ? "true" : "false", diff, r.repeatable ? "true" : "false",
        JsonNumber(r.median_ms), JsonNumber(r.max_abs_diff),
        r.nan_bit_differences, r.calls, r.unsupported_calls,
        JsonQuote(r.unsupported_reason), JsonQuote(r.error),
        JsonQuote(VerdictName(r.verdict)),
        i + 1 < report.rows.size() ? "," : "");
  }
  out += "  ],\n";
  absl::StrAppend(&out, "  \"failing_rows\": [",
                  absl::StrJoin(report.FailingRows(), ", ",
                                [](std::string* s, const SelftestRow* row) {
                                  absl::StrAppend(s, JsonQuote(row->Name()));
                                }),
                  "],\n");
  absl::StrAppend(
      &out, "  \"summary\": ", JsonQuote(SelftestSummaryLine(report)), ",\n");
  absl::StrAppend(&out, "  \"ok\": ", report.ok() ? "true" : "false", "\n}\n");
  return out;
}

int SelftestExitCode(const SelftestReport& report) {
  return report.ok() ? 0 : 1;
}

int SelftestCommand(absl::string_view ops_flag, absl::string_view seed_flag,
                    bool json, std::FILE* out, std::FILE* err) {
  SelftestOptions options;
  if (!ops_flag.empty()) {
    options.ops = absl::StrSplit(ops_flag, ',');
  }
  if (absl::Status s = ValidateSelftestOps(options.ops); !s.ok()) {
    std::fprintf(err, "lockstep-worker selftest: %s\n",
                 std::string(s.message()).c_str());
    return 2;
  }
  if (!absl::SimpleAtoi(seed_flag, &options.seed)) {
    std::fprintf(err,
                 "lockstep-worker selftest: --seed: \"%s\" is not an "
                 "unsigned 32-bit integer\n",
                 std::string(seed_flag).c_str());
    return 2;
  }
  kernels::Registry registry;
  absl::StatusOr<std::vector<SelftestBackend>> backends =
      RegisterSelftestKernels(&registry);
  if (!backends.ok()) {
    std::fprintf(err, "lockstep-worker selftest: %s\n",
                 backends.status().ToString().c_str());
    return 1;
  }
  options.backends = *std::move(backends);
  absl::StatusOr<SelftestReport> report = RunSelftest(registry, options);
  if (!report.ok()) {
    std::fprintf(err, "lockstep-worker selftest: %s\n",
                 report.status().ToString().c_str());
    return 1;
  }
  const std::string text =
      json ? FormatSelftestJson(*report) : FormatSelftestTable(*report);
  std::fputs(text.c_str(), out);
  std::fflush(out);
  return SelftestExitCode(*report);
}

}  // namespace lockstep::worker
