#include "worker/cmd/execute.h"

#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "worker/cmd/drill_flags.h"
#include "worker/data/dataset.h"  // CanonicalDataRoot
#include "worker/run_child.h"

namespace lockstep::worker::cmd {

int ExecuteMain(const ExecuteCommandOptions& options) {
  bool bad_fault = false, bad_stall = false;
  ChildOptions child;
  child.fault = ParseFaultFlag(options.inject_fault, &bad_fault, stderr);
  child.stall = ParseStallFlag(options.inject_stall, &bad_stall, stderr);
  if (bad_fault || bad_stall) return kUsageExitCode;
  if (!options.data_root.empty()) {
    absl::StatusOr<std::string> root =
        CanonicalDataRoot(options.data_root, "--data_root");
    if (!root.ok()) {
      std::fprintf(stderr, "lockstep-worker: %s\n",
                   std::string(root.status().message()).c_str());
      return kUsageExitCode;
    }
    child.data_root = *root;
  }
  child.blob_cache_dir = options.blob_cache_dir;
  return RunChildMain(child);
}

}  // namespace lockstep::worker::cmd
