#include "worker/cmd/selftest.h"

#include <cstdio>

#include "worker/selftest.h"

namespace lockstep::worker::cmd {

int SelftestMain(const SelftestCommandOptions& options) {
  return SelftestCommand(options.ops, options.seed, options.json, stdout,
                         stderr);
}

}  // namespace lockstep::worker::cmd
