// The daemon's start-up selftest, run in a child process
// (`lockstep-worker selftest --json`) so that the daemon itself never
// creates a CUDA context: in EXCLUSIVE_PROCESS compute mode a context held by
// the daemon would lock its own run processes out of the GPU, and it would
// pin GPU memory for the daemon's lifetime.
#ifndef LOCKSTEP_WORKER_SELFTEST_CHILD_H_
#define LOCKSTEP_WORKER_SELFTEST_CHILD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lockstep/v1/worker.pb.h"

namespace lockstep::worker {

// How long the daemon waits for its selftest child before killing it.
inline constexpr int64_t kSelftestChildTimeoutMs = 10 * 60 * 1000;

// The hardware profile's SelftestResult from the selftest's JSON report
// (FormatSelftestJson): passed = "ok", rows, failed_rows = the size of
// "failing_rows", summary = "summary" (cut to 1000 bytes), backends = "cpu"
// then every other available backend. duration_ms is left 0.
// INVALID_ARGUMENT naming the field when the text is not such a report.
absl::StatusOr<lockstep::v1::SelftestResult> ParseSelftestJson(
    absl::string_view json);

// Runs `argv` (argv[0] a path; the daemon passes its own binary, "selftest",
// "--json"), reads its stdout and returns its report as above, with the
// wall time as duration_ms. Never fails: a child that cannot start, runs
// longer than `timeout_ms` (it is killed), dies by a signal, exits with a
// code other than 0 (pass) or 1 (a row failed), or prints no valid report
// comes back as passed = false with "error: selftest process ..." naming
// why and the last line of its stderr.
lockstep::v1::SelftestResult RunSelftestInChild(
    const std::vector<std::string>& argv,
    int64_t timeout_ms = kSelftestChildTimeoutMs);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_SELFTEST_CHILD_H_
