// --dump: write captured tensors as .npy files with a JSON sidecar.
//
//   --dump=all                     every captured tensor of every run
//   --dump=<layer>:<role>[:step]   that layer's tensors of that role (every
//                                  captured step, or one step); the batch
//                                  is layer "" (":INPUT", ":LABEL")
//   --dump=first_divergent         the first differing tensor, from the
//                                  reference run and the first run that
//                                  differs from it (written after comparing)
//
// Files: <dir>/run<R>_step<S>_<index>_<layer>_<ROLE>[_<slot>].npy (index
// zero-padded to 4 digits, layer "input" for the batch) and the same name
// with .json: {"run", "step", "entry" (the ManifestEntry), "fingerprint"
// (32 hex digits), "stats"}.
#ifndef LOCKSTEP_WORKER_EXEC_DUMP_H_
#define LOCKSTEP_WORKER_EXEC_DUMP_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/tensor.h"
#include "lockstep/v1/fingerprint.pb.h"
#include "worker/exec/executor.h"

namespace lockstep::worker {

struct DumpSpec {
  enum class Kind { kNone, kAll, kSelected, kFirstDivergent };
  Kind kind = Kind::kNone;
  // kSelected:
  std::string layer;
  lockstep::v1::TensorRole role = lockstep::v1::TENSOR_ROLE_UNSPECIFIED;
  std::optional<int> step;
};

// Parses the --dump value ("" is kNone). INVALID_ARGUMENT naming --dump.
absl::StatusOr<DumpSpec> ParseDumpSpec(absl::string_view text);

// Whether a kAll / kSelected spec selects this tensor.
bool DumpSelects(const DumpSpec& spec, int step,
                 const lockstep::v1::ManifestEntry& entry);

// The file name stem (without extension) of a dumped tensor.
std::string DumpStem(int run, int step,
                     const lockstep::v1::ManifestEntry& entry);

// Writes <dir>/<stem>.npy and <stem>.json, creating `dir` if needed.
// Returns the .npy path.
absl::StatusOr<std::string> DumpTensor(
    const std::string& dir, int run, int step,
    const lockstep::v1::ManifestEntry& entry, const kernels::Tensor& tensor,
    const lockstep::v1::TensorFingerprint& fingerprint);

// An observer that dumps what `spec` (kAll or kSelected) selects for run
// `run`, then calls `next` (may be null).
TensorObserver MakeDumpObserver(DumpSpec spec, std::string dir, int run,
                                TensorObserver next);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_EXEC_DUMP_H_
