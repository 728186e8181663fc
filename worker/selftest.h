// `lockstep-worker selftest`: validates this node's kernels in one command.
//
// Every op (AllOpNames(), or the --ops subset)
// runs on the seeded calls of kernels/op_cases.h through every kernel a
// Registry holds for it, and each result is compared with the reference:
// the CPU CANONICAL kernel (op, CANONICAL, "canonical", "cpu") run with the
// ISA forced to scalar and one thread. One row per
//
//   (op, mode, algorithm, backend[, isa, threads])
//
// where CPU CANONICAL keys run on every ISA this CPU supports with 1 and N
// threads (N: the process pool's default size, LOCKSTEP_CPU_THREADS or the
// number of cores), the CPU's DETERMINISTIC and DEFAULT keys on the ISA
// jobs use (LOCKSTEP_CPU_ISA, else the widest supported) with 1 and N
// threads, and the keys of other backends ("cuda") once each. Each row runs all
// of its op's calls `runs` times and reports: whether every run's bits equal
// the reference (else the first differing call, output and flat element index),
// whether the runs agree with each other, the median time of one pass over the
// calls, and the largest absolute difference from the reference.
//
// Verdicts: a CANONICAL row passes when bit-equal, a DETERMINISTIC row when
// repeatable; a DEFAULT row is informational (its variation is expected).
// A kernel that returns an error, or a CANONICAL "canonical" kernel missing
// for an available backend, fails its row in any mode; except that a
// DETERMINISTIC or DEFAULT kernel may answer UNIMPLEMENTED for some calls
// (what a vendor library cannot express): those calls are left out and
// counted, and a row with no supported call is informational.
//
// A backend listed as unavailable (no device, built without CUDA) is only
// reported in the header; its keys are not run.
//
// Thread-safety: RunSelftest sets the process's CPU ISA override and
// replaces the CPU thread pool while it runs (kernels/cpu/isa.h,
// thread_pool.h), and before returning clears the override and puts back a
// pool of the size it found: nothing else may run kernels in the process
// at the same time.
#ifndef LOCKSTEP_WORKER_SELFTEST_H_
#define LOCKSTEP_WORKER_SELFTEST_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/cpu/isa.h"
#include "kernels/registry.h"
#include "proto/lockstep/v1/worker.pb.h"

namespace lockstep::worker {

// A backend other than "cpu" and whether it can run here.
struct SelftestBackend {
  std::string name;  // the registry's backend key, e.g. "cuda"
  bool available = false;
  // available: what it runs on ("device 0: NVIDIA H100 ..."); otherwise
  // why not ("built without CUDA", the CUDA error).
  std::string detail;
};

struct SelftestOptions {
  uint32_t seed = 1;
  // Ops to test; empty: all of AllOpNames().
  std::vector<std::string> ops;
  // Runs per row (>= 2 for repeatability to mean anything).
  int runs = 3;
  // CPU ISAs for CANONICAL rows; empty: SupportedCpuIsas().
  std::vector<kernels::CpuIsa> isas;
  // CPU thread counts; empty: 1 and the process pool's default size.
  std::vector<int> thread_counts;
  // Backends besides "cpu". Keys of a backend listed unavailable are not
  // run; keys of a backend not listed are run.
  std::vector<SelftestBackend> backends;
};

enum class RowVerdict {
  kPass,  // CANONICAL bit-equal / DETERMINISTIC repeatable
  kFail,
  kInfo,  // DEFAULT: reported, never fails
};

struct SelftestRow {
  kernels::KernelKey key;
  std::string isa;  // CPU rows: "scalar", "avx2", "avx512"; else empty
  int threads = 0;  // CPU rows: thread count; else 0

  bool bits_equal = false;  // every run, every call == reference
  // When !bits_equal (and no error): where the first difference is.
  int diff_case = -1;  // index into the op's calls
  std::string diff_case_label;
  int diff_output = -1;
  int64_t diff_index = -1;  // flat element index in that output

  // Rows of another hardware class than the reference (not "cpu"): output
  // elements of the first run that are NaN in both but with other bits
  // (docs/canonical-arithmetic.md, section 7); they do not make bits_equal
  // false. Always 0 for CPU rows, which compare every bit.
  int64_t nan_bit_differences = 0;

  bool repeatable = false;  // every run == the first run
  double median_ms = 0;     // one pass over the op's calls
  double max_abs_diff = 0;  // over runs, calls, float32 elements; may be
                            // inf or NaN when the values are
  std::string error;        // kernel error or missing kernel; else empty

  int calls = 0;  // the op's seeded calls
  // Non-CANONICAL rows: calls the kernel answered UNIMPLEMENTED (what a
  // vendor library cannot express), left out of the comparisons; the first
  // such call's label and message.
  int unsupported_calls = 0;
  std::string unsupported_reason;

  RowVerdict verdict = RowVerdict::kFail;

  // "relu.forward CANONICAL canonical cpu isa=avx2 threads=2".
  std::string Name() const;
};

struct SelftestReport {
  uint32_t seed = 0;
  int runs = 0;
  std::vector<std::string> ops;
  // "cpu" first (always available), then SelftestOptions::backends.
  std::vector<SelftestBackend> backends;
  std::vector<SelftestRow> rows;

  // No row has RowVerdict::kFail.
  bool ok() const;
  std::vector<const SelftestRow*> FailingRows() const;
};

// Checks --ops names: INVALID_ARGUMENT "--ops: unknown op \"x\" (known:
// dense.forward, ...)" for a name that is not an op, "--ops: empty op name"
// for an empty entry.
absl::Status ValidateSelftestOps(const std::vector<std::string>& ops);

// Runs the selftest over the kernels in `registry`. INVALID_ARGUMENT for bad
// options (ops as ValidateSelftestOps, runs < 1, thread counts < 1);
// FAILED_PRECONDITION when the reference kernel of a selected op is missing
// or fails.
absl::StatusOr<SelftestReport> RunSelftest(const kernels::Registry& registry,
                                           const SelftestOptions& options);

// Fills `registry` with the kernels a run process of this binary registers
// (worker/exec/worker_kernels.h): the CPU's CANONICAL, DETERMINISTIC and
// DEFAULT kernels, and the CUDA backend's (CANONICAL plus the cuBLAS /
// cuDNN / atomic kernels) when a CUDA device is usable. Returns the non-CPU
// backends with their availability, for SelftestOptions::backends.
absl::StatusOr<std::vector<SelftestBackend>> RegisterSelftestKernels(
    kernels::Registry* registry);

// The human-readable report: header lines, one table row per SelftestRow,
// and a final summary line ("selftest: PASS ..." or "selftest: FAIL ...",
// naming the failing rows).
std::string FormatSelftestTable(const SelftestReport& report);
// The same as one JSON object.
std::string FormatSelftestJson(const SelftestReport& report);

// 0 when report.ok(), else 1.
int SelftestExitCode(const SelftestReport& report);

// "PASS: 282 rows: ..." or "FAIL: 2 of 282 rows failed: <row> (<why>); ..."
// (the last line of the table, without its "selftest: " prefix).
std::string SelftestSummaryLine(const SelftestReport& report);

// The report as the hardware profile carries it (summary cut to 1000
// bytes).
lockstep::v1::SelftestResult SummarizeSelftest(const SelftestReport& report,
                                               int64_t duration_ms);

// The daemon's start-up check: registers this binary's kernels
// (RegisterSelftestKernels) and runs the default selftest. Never fails: an
// error that stops the selftest comes back as passed = false with
// "error: ..." as its summary.
lockstep::v1::SelftestResult RunStartupSelftest();

// The `lockstep-worker selftest` command: parses --ops (comma list, may be
// empty) and --seed (decimal uint32), registers this binary's kernels, runs
// and prints the report (table, or JSON when `json`) on `out`. Returns 0
// or 1 as SelftestExitCode, 2 for a usage error (message on `err`, naming
// the flag).
int SelftestCommand(absl::string_view ops_flag, absl::string_view seed_flag,
                    bool json, std::FILE* out, std::FILE* err);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_SELFTEST_H_
