#include "worker/cmd/run.h"

#include <cstdio>

namespace lockstep::worker::cmd {

int RunMain(const RunCommandOptions& options) {
  return RunCommand(options, stdout, stderr);
}

}  // namespace lockstep::worker::cmd
