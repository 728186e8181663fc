// The selftest on this machine's real kernels, on registries with injected
// wrong or nondeterministic kernels, its flags, and the real binary.
#include "worker/selftest.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/emulated_backend.h"
#include "kernels/graph_ops.h"
#include "kernels/registry.h"
#include "tests/testing/subprocess.h"

namespace lockstep::worker {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

using kernels::KernelKey;
using kernels::Mode;
using kernels::OpAttrs;
using kernels::Registry;
using kernels::Tensor;

std::vector<std::string> AllOps() {
  std::vector<std::string> ops = kernels::AllOpNames();
  for (std::string& op : kernels::GraphDataOpNames()) ops.push_back(op);
  return ops;
}

Registry* CpuRegistry() {
  static Registry* registry = [] {
    auto* r = new Registry;
    EXPECT_THAT(kernels::RegisterCpuCanonicalKernels(r), IsOk());
    EXPECT_THAT(kernels::RegisterCpuDeterministicAndDefaultKernels(r), IsOk());
    return r;
  }();
  return registry;
}

// A flatten that copies x into y, then flips bit 0 of element `*flip` when
// flip is set.
absl::Status CopyAndFlip(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                         int64_t flip) {
  if (in.size() != 1 || out.size() != 1 || in[0].bytes() != out[0].bytes()) {
    return absl::InvalidArgumentError("fake flatten: bad call");
  }
  std::memcpy(out[0].raw_data(), in[0].raw_data(), in[0].bytes());
  if (flip >= 0 && flip < out[0].numel()) {
    uint32_t bits;
    char* p = static_cast<char*>(out[0].raw_data()) + 4 * flip;
    std::memcpy(&bits, p, 4);
    bits ^= 1u;
    std::memcpy(p, &bits, 4);
  }
  return absl::OkStatus();
}

constexpr int64_t kFlippedElement = 37;

absl::Status BitFlipFlatten(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                            const OpAttrs&) {
  return CopyAndFlip(in, out, kFlippedElement);
}

// Flips a different element on every call.
absl::Status FlakyFlatten(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                          const OpAttrs&) {
  static std::atomic<int64_t> calls{0};
  return CopyAndFlip(in, out, calls++ % 100);
}

absl::Status FailingFlatten(absl::Span<const Tensor>, absl::Span<Tensor>,
                            const OpAttrs&) {
  return absl::InternalError("device fell off the bus");
}

// Leaves db as it is (zeros): repeatable; UNIMPLEMENTED for an empty batch.
absl::Status NoEmptyBatchBiasGrad(absl::Span<const Tensor> in,
                                  absl::Span<Tensor>, const OpAttrs&) {
  if (in[0].shape()[0] == 0) {
    return absl::UnimplementedError("vendor library: empty batch");
  }
  return absl::OkStatus();
}

absl::Status UnimplementedKernel(absl::Span<const Tensor>, absl::Span<Tensor>,
                                 const OpAttrs&) {
  return absl::UnimplementedError("vendor library: not this shape");
}

// The real CPU kernels plus `extra`.
struct ExtraKernel {
  KernelKey key;
  kernels::KernelFn fn;
};
Registry* RegistryWith(Registry* r, const std::vector<ExtraKernel>& extra) {
  EXPECT_THAT(kernels::RegisterCpuCanonicalKernels(r), IsOk());
  for (const ExtraKernel& e : extra) {
    EXPECT_THAT(r->Register(e.key, e.fn), IsOk());
  }
  return r;
}

std::vector<const SelftestRow*> RowsFor(const SelftestReport& report,
                                        absl::string_view algorithm) {
  std::vector<const SelftestRow*> out;
  for (const SelftestRow& row : report.rows) {
    if (row.key.algorithm == algorithm) out.push_back(&row);
  }
  return out;
}

// Output of a SelftestCommand call.
struct CommandOutput {
  int code = -1;
  std::string out;
  std::string err;
};

std::string ReadAll(std::FILE* f) {
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

CommandOutput Command(absl::string_view ops, absl::string_view seed,
                      bool json) {
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  CommandOutput r;
  r.code = SelftestCommand(ops, seed, json, out, err);
  r.out = ReadAll(out);
  r.err = ReadAll(err);
  return r;
}

TEST(SelftestTest, CanonicalRowsForEveryOpAndIsaAreBitEqual) {
  const int threads_before = kernels::CpuThreadPool()->num_threads();
  const kernels::CpuIsa job_isa = kernels::ActiveCpuIsa();
  absl::StatusOr<SelftestReport> report = RunSelftest(*CpuRegistry(), {});
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->ok()) << FormatSelftestTable(*report);
  EXPECT_EQ(report->ops, AllOps());
  EXPECT_EQ(report->runs, 3);

  kernels::SetCpuThreadsForTesting(0);
  const int n = kernels::CpuThreadPool()->num_threads();
  kernels::SetCpuThreadsForTesting(threads_before);
  std::set<int> thread_counts = {1, n};

  std::set<std::tuple<std::string, std::string, int>> canonical;
  for (const SelftestRow& row : report->rows) {
    SCOPED_TRACE(row.Name());
    EXPECT_TRUE(row.error.empty()) << row.error;
    EXPECT_GT(row.median_ms, 0.0);
    if (row.key.mode == Mode::kCanonical) {
      EXPECT_TRUE(row.bits_equal);
      EXPECT_TRUE(row.repeatable);
      EXPECT_EQ(row.max_abs_diff, 0.0);
      EXPECT_EQ(row.verdict, RowVerdict::kPass);
      if (row.key.algorithm == kernels::kCanonicalAlgorithm) {
        canonical.insert({row.key.op, row.isa, row.threads});
      }
    } else if (row.key.mode == Mode::kDeterministic) {
      EXPECT_TRUE(row.repeatable);
      EXPECT_EQ(row.verdict, RowVerdict::kPass);
    } else {
      EXPECT_EQ(row.verdict, RowVerdict::kInfo);
      // Within float rounding of the reference.
      EXPECT_LT(row.max_abs_diff, 1e-3);
    }
  }
  for (const std::string& op : AllOps()) {
    for (kernels::CpuIsa isa : kernels::SupportedCpuIsas()) {
      for (int t : thread_counts) {
        EXPECT_EQ(
            canonical.count({op, std::string(kernels::CpuIsaName(isa)), t}), 1u)
            << op << " " << kernels::CpuIsaName(isa) << " " << t;
      }
    }
  }
  // Every registered DETERMINISTIC / DEFAULT key has rows at 1 and N threads
  // on the ISA jobs use.
  for (const KernelKey& key : CpuRegistry()->Keys()) {
    if (key.mode == Mode::kCanonical) continue;
    for (int t : thread_counts) {
      int found = 0;
      for (const SelftestRow& row : report->rows) {
        found += row.key == key && row.threads == t &&
                 row.isa == kernels::CpuIsaName(job_isa);
      }
      EXPECT_EQ(found, 1) << key.DebugString() << " threads " << t;
    }
  }

  // The process settings are back.
  EXPECT_EQ(kernels::CpuThreadPool()->num_threads(), threads_before);
  EXPECT_EQ(kernels::ActiveCpuIsa(), job_isa);

  const std::string table = FormatSelftestTable(*report);
  EXPECT_THAT(table, HasSubstr("lockstep-worker selftest: seed 1, 3 runs"));
  EXPECT_THAT(table, HasSubstr("reference: cpu CANONICAL canonical, "
                               "isa=scalar, threads=1"));
  EXPECT_THAT(table, HasSubstr("info (DEFAULT: variation expected)"));
  EXPECT_THAT(table, HasSubstr("selftest: PASS: "));
  EXPECT_EQ(SelftestExitCode(*report), 0);
}

TEST(SelftestTest, WrongCanonicalKernelIsReportedWithItsFirstDifference) {
  Registry registry;
  RegistryWith(&registry,
               {{{kernels::op::kFlatten, Mode::kCanonical, "bitflip", "cpu"},
                 &BitFlipFlatten}});
  SelftestOptions options;
  options.ops = {kernels::op::kFlatten};
  absl::StatusOr<SelftestReport> report = RunSelftest(registry, options);
  ASSERT_THAT(report, IsOk());
  const std::vector<const SelftestRow*> rows = RowsFor(*report, "bitflip");
  // As many as the real kernel's: every ISA, 1 and N threads.
  ASSERT_EQ(rows.size(), RowsFor(*report, "canonical").size());
  for (const SelftestRow* row : rows) {
    SCOPED_TRACE(row->Name());
    EXPECT_FALSE(row->bits_equal);
    EXPECT_EQ(row->diff_case, 0);
    EXPECT_EQ(row->diff_output, 0);
    EXPECT_EQ(row->diff_index, kFlippedElement);
    EXPECT_TRUE(row->repeatable);
    EXPECT_GT(row->max_abs_diff, 0.0);
    EXPECT_EQ(row->verdict, RowVerdict::kFail);
  }
  for (const SelftestRow* row : RowsFor(*report, "canonical")) {
    EXPECT_EQ(row->verdict, RowVerdict::kPass) << row->Name();
  }
  EXPECT_FALSE(report->ok());
  EXPECT_EQ(report->FailingRows().size(), rows.size());
  EXPECT_EQ(SelftestExitCode(*report), 1);

  const std::string table = FormatSelftestTable(*report);
  EXPECT_THAT(table, HasSubstr("no @37 (call 0 out 0)"));
  EXPECT_THAT(table, HasSubstr("selftest: FAIL: "));
  EXPECT_THAT(table,
              HasSubstr("flatten CANONICAL bitflip cpu isa=scalar threads=1 "
                        "(bits differ from the reference at call 0"));
  const std::string json = FormatSelftestJson(*report);
  EXPECT_THAT(json, HasSubstr("\"first_difference\": {\"call\": 0"));
  EXPECT_THAT(json, HasSubstr("\"index\": 37}"));
  EXPECT_THAT(json, HasSubstr("\"ok\": false"));

  // What the daemon sends in its hardware profile.
  const lockstep::v1::SelftestResult summary = SummarizeSelftest(*report, 12);
  EXPECT_FALSE(summary.passed());
  EXPECT_EQ(summary.rows(), static_cast<int>(report->rows.size()));
  EXPECT_EQ(summary.failed_rows(), static_cast<int>(rows.size()));
  EXPECT_EQ(summary.duration_ms(), 12);
  EXPECT_THAT(summary.summary(), HasSubstr("FAIL: "));
  EXPECT_THAT(summary.summary(), HasSubstr("flatten CANONICAL bitflip"));
  EXPECT_LE(summary.summary().size(), 1000u);
}

TEST(SelftestTest, StartupSelftestPassesHere) {
  const lockstep::v1::SelftestResult r = RunStartupSelftest();
  EXPECT_TRUE(r.passed()) << r.summary();
  EXPECT_GT(r.rows(), 26);
  EXPECT_EQ(r.failed_rows(), 0);
  EXPECT_THAT(r.summary(), HasSubstr("PASS: "));
  ASSERT_GE(r.backends_size(), 1);
  EXPECT_EQ(r.backends(0), "cpu");
}

TEST(SelftestTest, DeterministicModeMustRepeatDefaultModeIsInformational) {
  Registry registry;
  RegistryWith(&registry,
               {{{kernels::op::kFlatten, Mode::kDeterministic, "flaky", "cpu"},
                 &FlakyFlatten},
                // Repeatable but not the reference's bits: allowed.
                {{kernels::op::kFlatten, Mode::kDeterministic, "stable", "cpu"},
                 &BitFlipFlatten},
                {{kernels::op::kFlatten, Mode::kDefault, "flaky", "cpu"},
                 &FlakyFlatten}});
  SelftestOptions options;
  options.ops = {kernels::op::kFlatten};
  absl::StatusOr<SelftestReport> report = RunSelftest(registry, options);
  ASSERT_THAT(report, IsOk());
  int flaky_deterministic = 0, stable = 0, flaky_default = 0;
  for (const SelftestRow& row : report->rows) {
    SCOPED_TRACE(row.Name());
    if (row.key.mode == Mode::kDeterministic && row.key.algorithm == "flaky") {
      ++flaky_deterministic;
      EXPECT_FALSE(row.repeatable);
      EXPECT_EQ(row.verdict, RowVerdict::kFail);
    } else if (row.key.algorithm == "stable") {
      ++stable;
      EXPECT_TRUE(row.repeatable);
      EXPECT_FALSE(row.bits_equal);
      EXPECT_GT(row.max_abs_diff, 0.0);  // the low bit of one value
      EXPECT_EQ(row.verdict, RowVerdict::kPass);
    } else if (row.key.mode == Mode::kDefault) {
      ++flaky_default;
      EXPECT_FALSE(row.repeatable);
      EXPECT_EQ(row.verdict, RowVerdict::kInfo);
    }
  }
  EXPECT_GT(flaky_deterministic, 0);
  EXPECT_GT(stable, 0);
  EXPECT_GT(flaky_default, 0);
  EXPECT_FALSE(report->ok());
  const std::vector<const SelftestRow*> failing = report->FailingRows();
  for (const SelftestRow* row : failing) {
    EXPECT_EQ(row->key.algorithm, "flaky");
    EXPECT_EQ(row->key.mode, Mode::kDeterministic);
  }
  EXPECT_THAT(FormatSelftestTable(*report),
              HasSubstr("flatten DETERMINISTIC flaky cpu isa="));
  EXPECT_THAT(FormatSelftestTable(*report), HasSubstr("(not repeatable)"));
}

TEST(SelftestTest, KernelErrorsFailTheirRowInAnyMode) {
  Registry registry;
  RegistryWith(&registry,
               {{{kernels::op::kFlatten, Mode::kDefault, "broken", "cpu"},
                 &FailingFlatten}});
  SelftestOptions options;
  options.ops = {kernels::op::kFlatten};
  absl::StatusOr<SelftestReport> report = RunSelftest(registry, options);
  ASSERT_THAT(report, IsOk());
  const std::vector<const SelftestRow*> rows = RowsFor(*report, "broken");
  ASSERT_FALSE(rows.empty());
  for (const SelftestRow* row : rows) {
    EXPECT_EQ(row->verdict, RowVerdict::kFail);
    EXPECT_THAT(row->error, HasSubstr("device fell off the bus"));
  }
  EXPECT_FALSE(report->ok());
}

TEST(SelftestTest, UnimplementedCallsAreLeftOutOfNonCanonicalRowsOnly) {
  const std::string op = kernels::op::kBiasAddGrad;
  Registry registry;
  RegistryWith(
      &registry,
      {{{op, Mode::kDeterministic, "no_empty", "cpu"}, &NoEmptyBatchBiasGrad},
       {{op, Mode::kDefault, "never", "cpu"}, &UnimplementedKernel},
       {{op, Mode::kCanonical, "never", "cpu"}, &UnimplementedKernel}});
  SelftestOptions options;
  options.ops = {op};
  absl::StatusOr<SelftestReport> report = RunSelftest(registry, options);
  ASSERT_THAT(report, IsOk());
  int partial = 0, none = 0, canonical = 0;
  for (const SelftestRow& row : report->rows) {
    SCOPED_TRACE(row.Name());
    EXPECT_EQ(row.calls, 3);
    if (row.key.algorithm == "no_empty") {
      ++partial;
      EXPECT_EQ(row.unsupported_calls, 1);
      EXPECT_THAT(row.unsupported_reason,
                  HasSubstr("vendor library: empty batch"));
      EXPECT_TRUE(row.repeatable);
      EXPECT_FALSE(row.bits_equal);  // zeros, not the sums
      EXPECT_EQ(row.verdict, RowVerdict::kPass);
    } else if (row.key.mode == Mode::kDefault) {
      ++none;
      EXPECT_EQ(row.unsupported_calls, 3);
      EXPECT_EQ(row.verdict, RowVerdict::kInfo);
    } else if (row.key.algorithm == "never") {
      ++canonical;
      EXPECT_EQ(row.unsupported_calls, 0);
      EXPECT_THAT(row.error, HasSubstr("UNIMPLEMENTED"));
      EXPECT_EQ(row.verdict, RowVerdict::kFail);
    }
  }
  EXPECT_GT(partial, 0);
  EXPECT_GT(none, 0);
  EXPECT_GT(canonical, 0);
  const std::string table = FormatSelftestTable(*report);
  EXPECT_THAT(table, HasSubstr("ok [1 of 3 calls unsupported: bias_add.grad: "
                               "vendor library: empty batch]"));
  EXPECT_THAT(table, HasSubstr("info (no call supported) [3 of 3 calls"));
  EXPECT_THAT(FormatSelftestJson(*report),
              HasSubstr("\"calls\": 3, \"unsupported_calls\": 1, "));
  // Only the CANONICAL rows fail.
  for (const SelftestRow* row : report->FailingRows()) {
    EXPECT_EQ(row->key.mode, Mode::kCanonical) << row->Name();
  }
}

TEST(SelftestTest, UnavailableBackendIsSkippedAndReportedInTheHeader) {
  Registry registry;
  RegistryWith(&registry, {{{kernels::op::kFlatten, Mode::kCanonical,
                             kernels::kCanonicalAlgorithm, "fakegpu"},
                            &BitFlipFlatten}});
  SelftestOptions options;
  options.ops = {kernels::op::kFlatten};
  options.backends = {{"fakegpu", false, "no device here"}};
  absl::StatusOr<SelftestReport> report = RunSelftest(registry, options);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->ok());
  for (const SelftestRow& row : report->rows) {
    EXPECT_EQ(row.key.backend, "cpu");
  }
  EXPECT_THAT(FormatSelftestTable(*report),
              HasSubstr("\nfakegpu: not available: no device here\n"));

  // Available: its rows run (and this one is wrong), without CPU settings.
  options.backends = {{"fakegpu", true, "device 0"}};
  report = RunSelftest(registry, options);
  ASSERT_THAT(report, IsOk());
  const std::vector<const SelftestRow*> rows =
      RowsFor(*report, kernels::kCanonicalAlgorithm);
  int fake = 0;
  for (const SelftestRow* row : rows) {
    if (row->key.backend != "fakegpu") continue;
    ++fake;
    EXPECT_EQ(row->isa, "");
    EXPECT_EQ(row->threads, 0);
    EXPECT_EQ(row->diff_index, kFlippedElement);
  }
  EXPECT_EQ(fake, 1);
  EXPECT_FALSE(report->ok());
  EXPECT_THAT(FormatSelftestTable(*report), HasSubstr("\nfakegpu: device 0\n"));
}

TEST(SelftestTest, AvailableBackendMissingACanonicalKernelFails) {
  SelftestOptions options;
  options.ops = {kernels::op::kReluForward};
  options.backends = {{"fakegpu", true, "device 0"}};
  absl::StatusOr<SelftestReport> report = RunSelftest(*CpuRegistry(), options);
  ASSERT_THAT(report, IsOk());
  ASSERT_EQ(report->FailingRows().size(), 1u);
  EXPECT_EQ(report->FailingRows()[0]->key.backend, "fakegpu");
  EXPECT_EQ(report->FailingRows()[0]->error, "no kernel registered");
}

// The graph primitives of op set v3 on a CUDA backend (the emulated one:
// the CUDA plans and per-thread bodies on the host): one CANONICAL row per
// op, run and bit-equal to the reference, none left out as unsupported.
TEST(SelftestTest, CudaRowsCoverTheGraphPrimitives) {
  Registry registry;
  ASSERT_THAT(kernels::RegisterCpuCanonicalKernels(&registry), IsOk());
  ASSERT_THAT(kernels::cuda::RegisterEmulatedCudaKernels(&registry), IsOk());
  SelftestOptions options;
  options.ops = kernels::GraphDataOpNames();
  for (const std::string& op : kernels::GraphElementwiseOpNames()) {
    options.ops.push_back(op);
  }
  options.backends = {{"cuda", true, "emulated"}};
  absl::StatusOr<SelftestReport> report = RunSelftest(registry, options);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->ok()) << FormatSelftestTable(*report);
  std::set<std::string> cuda_ops;
  for (const SelftestRow& row : report->rows) {
    if (row.key.backend != "cuda") continue;
    SCOPED_TRACE(row.Name());
    EXPECT_TRUE(row.error.empty()) << row.error;
    EXPECT_EQ(row.unsupported_calls, 0);
    EXPECT_TRUE(row.bits_equal);
    EXPECT_TRUE(row.repeatable);
    EXPECT_EQ(row.verdict, RowVerdict::kPass);
    EXPECT_TRUE(cuda_ops.insert(row.key.op).second) << "two rows";
  }
  EXPECT_EQ(cuda_ops,
            std::set<std::string>(options.ops.begin(), options.ops.end()));
  EXPECT_THAT(FormatSelftestTable(*report),
              Not(HasSubstr("no call supported")));
}

// binary.grad as the CPU computes it, then every NaN output rewritten to
// CUDA's 0x7FFFFFFF, as a GPU's arithmetic makes it.
absl::Status CudaNanBinaryGrad(absl::Span<const Tensor> in,
                               absl::Span<Tensor> out, const OpAttrs& attrs) {
  absl::StatusOr<kernels::KernelFn> cpu = CpuRegistry()->Lookup(
      {kernels::op::kBinaryGrad, Mode::kCanonical, "canonical", "cpu"});
  if (!cpu.ok()) return cpu.status();
  if (absl::Status s = (*cpu)(in, out, attrs); !s.ok()) return s;
  for (Tensor& t : out) {
    for (int64_t i = 0; i < t.numel(); ++i) {
      float& x = t.data<float>()[i];
      if (std::isnan(x)) {
        const uint32_t cuda_nan = 0x7FFFFFFFu;
        std::memcpy(&x, &cuda_nan, 4);
      }
    }
  }
  return absl::OkStatus();
}

// The same, and also a NaN where the reference has a number.
absl::Status ExtraNanBinaryGrad(absl::Span<const Tensor> in,
                                absl::Span<Tensor> out, const OpAttrs& attrs) {
  if (absl::Status s = CudaNanBinaryGrad(in, out, attrs); !s.ok()) return s;
  for (Tensor& t : out) {
    for (int64_t i = 0; i < t.numel(); ++i) {
      float& x = t.data<float>()[i];
      if (!std::isnan(x)) {
        x = std::nanf("");
        return absl::OkStatus();
      }
    }
  }
  return absl::OkStatus();
}

// canonical-arithmetic.md section 7: another hardware class's arithmetic
// NaNs carry other bits. A non-CPU CANONICAL row passes with them (and
// counts them); a NaN where the reference has a number fails; a CPU row
// still compares every bit.
TEST(SelftestTest, OtherClassNanBitsPassButNanPositionsMustMatch) {
  Registry registry;
  RegistryWith(
      &registry,
      {{{kernels::op::kBinaryGrad, Mode::kCanonical, "canonical", "fakegpu"},
        &CudaNanBinaryGrad},
       {{kernels::op::kBinaryGrad, Mode::kCanonical, "extranan", "fakegpu"},
        &ExtraNanBinaryGrad},
       {{kernels::op::kBinaryGrad, Mode::kCanonical, "cudanan", "cpu"},
        &CudaNanBinaryGrad}});
  SelftestOptions options;
  options.ops = {kernels::op::kBinaryGrad};
  options.backends = {{"fakegpu", true, "device 0"}};
  absl::StatusOr<SelftestReport> report = RunSelftest(registry, options);
  ASSERT_THAT(report, IsOk());
  int checked = 0;
  for (const SelftestRow& row : report->rows) {
    SCOPED_TRACE(row.Name());
    if (row.key.backend == "fakegpu" && row.key.algorithm == "canonical") {
      // The op's seeded calls divide by zero and raise negatives to
      // fractional powers: the reference holds NaNs.
      EXPECT_GT(row.nan_bit_differences, 0);
      EXPECT_TRUE(row.bits_equal);
      EXPECT_TRUE(row.repeatable);
      EXPECT_EQ(row.verdict, RowVerdict::kPass);
      ++checked;
    } else if (row.key.algorithm == "extranan") {
      EXPECT_FALSE(row.bits_equal);
      EXPECT_EQ(row.verdict, RowVerdict::kFail);
      ++checked;
    } else if (row.key.algorithm == "cudanan") {
      EXPECT_FALSE(row.bits_equal);
      EXPECT_EQ(row.nan_bit_differences, 0);
      EXPECT_EQ(row.verdict, RowVerdict::kFail);
      ++checked;
    } else {
      EXPECT_EQ(row.nan_bit_differences, 0);
    }
  }
  EXPECT_GE(checked, 3);
  const std::string table = FormatSelftestTable(*report);
  EXPECT_THAT(table, HasSubstr("NaNs: note)"));
  EXPECT_THAT(table, HasSubstr("note: in 1 row(s) marked \"NaNs: note\""));
  EXPECT_THAT(FormatSelftestJson(*report),
              HasSubstr("\"nan_bit_differences\": "));
}

TEST(SelftestTest, OpsFilter) {
  SelftestOptions options;
  options.ops = {kernels::op::kConv2dForward, kernels::op::kReluForward};
  options.runs = 2;
  options.seed = 7;
  absl::StatusOr<SelftestReport> report = RunSelftest(*CpuRegistry(), options);
  ASSERT_THAT(report, IsOk());
  // In the canonical op order, whatever the flag's order.
  EXPECT_THAT(report->ops, ElementsAre(kernels::op::kReluForward,
                                       kernels::op::kConv2dForward));
  std::set<std::string> ops;
  for (const SelftestRow& row : report->rows) ops.insert(row.key.op);
  EXPECT_EQ(ops, (std::set<std::string>{kernels::op::kReluForward,
                                        kernels::op::kConv2dForward}));
  EXPECT_TRUE(report->ok());
  EXPECT_THAT(FormatSelftestTable(*report),
              HasSubstr("seed 7, 2 runs per row, 2 ops"));
}

TEST(SelftestTest, UnknownOpIsAUsageError) {
  SelftestOptions options;
  options.ops = {kernels::op::kReluForward, "relu.fwd"};
  EXPECT_THAT(RunSelftest(*CpuRegistry(), options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--ops: unknown op \"relu.fwd\" (known: "
                                 "dense.forward, ")));
  EXPECT_THAT(ValidateSelftestOps({""}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--ops: empty op name")));

  CommandOutput r = Command("relu.forward,relu.fwd", "1", false);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("--ops: unknown op \"relu.fwd\""));

  r = Command("relu.forward", "-3", false);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--seed: \"-3\" is not an unsigned 32-bit "
                               "integer"));
}

TEST(SelftestTest, CommandPrintsTableOrJson) {
  CommandOutput r = Command("relu.forward,add.grad", "3", false);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("lockstep-worker selftest: seed 3"));
  EXPECT_THAT(r.out, HasSubstr("\ncuda: "));
  EXPECT_THAT(r.out, HasSubstr("selftest: PASS: "));
  EXPECT_THAT(r.out, Not(HasSubstr("dense.forward")));

  r = Command("relu.forward", "3", true);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, 2), "{\n");
  EXPECT_THAT(r.out, HasSubstr("\"seed\": 3,"));
  EXPECT_THAT(r.out, HasSubstr("\"ops\": [\"relu.forward\"]"));
  EXPECT_THAT(r.out, HasSubstr("{\"name\": \"cuda\", \"available\": "));
  EXPECT_THAT(r.out, HasSubstr("\"failing_rows\": []"));
  EXPECT_THAT(r.out, HasSubstr("\"ok\": true"));
}

TEST(SelftestTest, ProductionRegistryRunsCudaWhenADeviceIsUsable) {
  Registry registry;
  absl::StatusOr<std::vector<SelftestBackend>> backends =
      RegisterSelftestKernels(&registry);
  ASSERT_THAT(backends, IsOk());
  ASSERT_EQ(backends->size(), 1u);
  const SelftestBackend& cuda = backends->front();
  EXPECT_EQ(cuda.name, "cuda");
  EXPECT_FALSE(cuda.detail.empty());
  if (!cuda.available) {
    // Nothing of CUDA's is registered, nothing is run.
    for (const KernelKey& key : registry.Keys()) EXPECT_EQ(key.backend, "cpu");
    GTEST_SKIP() << "cuda: not available: " << cuda.detail;
  }
  SelftestOptions options;
  options.backends = *backends;
  absl::StatusOr<SelftestReport> report = RunSelftest(registry, options);
  ASSERT_THAT(report, IsOk());
  EXPECT_TRUE(report->ok()) << FormatSelftestTable(*report);
  std::set<std::string> cuda_ops;
  for (const SelftestRow& row : report->rows) {
    if (row.key.backend == "cuda" && row.key.mode == Mode::kCanonical) {
      cuda_ops.insert(row.key.op);
    }
  }
  const std::vector<std::string> all = AllOps();
  EXPECT_EQ(cuda_ops, std::set<std::string>(all.begin(), all.end()));
}

TEST(SelftestBinaryTest, RealBinaryPassesAndPrintsTheTable) {
  const std::string bin = testing::RunfilePath("worker/lockstep-worker");
  absl::StatusOr<testing::CommandResult> r =
      testing::RunCommand({bin, "selftest"}, absl::Seconds(240));
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 0) << r->out << r->err;
  // AllOpNames() (58 and the 9 broadcasting graph ops) and the graph data
  // ops (9).
  EXPECT_THAT(r->out, HasSubstr("lockstep-worker selftest: seed 1, 3 runs per "
                                "row, 76 ops\n"));
  EXPECT_THAT(r->out, HasSubstr("\ncpu: isas scalar"));
  EXPECT_THAT(r->out, HasSubstr("\ncuda: "));
  const std::vector<std::string> lines = absl::StrSplit(r->out, '\n');
  bool header = false;
  for (const std::string& line : lines) {
    header |= absl::StartsWith(line, "op ") &&
              line.find(" mode ") != std::string::npos &&
              line.find(" bits=ref ") != std::string::npos &&
              line.find(" repeatable ") != std::string::npos;
  }
  EXPECT_TRUE(header) << r->out;
  EXPECT_THAT(r->out, HasSubstr("\nselftest: PASS: "));

  r = testing::RunCommand({bin, "selftest", "--ops=relu.forward,bogus.op"},
                          absl::Seconds(60));
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("--ops: unknown op \"bogus.op\""));

  r = testing::RunCommand({bin, "selftest", "extra"}, absl::Seconds(60));
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("unexpected argument \"extra\""));
  EXPECT_THAT(r->err, HasSubstr("lockstep-worker selftest [--ops="));
}

}  // namespace
}  // namespace lockstep::worker
