// `lockstep-worker selftest`: every op in every mode on every backend of this
// node against the CPU CANONICAL scalar reference (worker/selftest.h).
#ifndef LOCKSTEP_WORKER_CMD_SELFTEST_H_
#define LOCKSTEP_WORKER_CMD_SELFTEST_H_

#include <string>

namespace lockstep::worker::cmd {

struct SelftestCommandOptions {
  // Comma-separated ops to test. Empty: all.
  std::string ops;
  // Seed of the test inputs, decimal unsigned 32-bit. Default "1".
  std::string seed = "1";
  // Print the report as JSON instead of a table.
  bool json = false;
};

// Report on stdout. Exit 0 pass; 1 a CANONICAL row differs or a
// DETERMINISTIC row does not repeat; 2 a bad --ops or --seed (message on
// stderr naming the flag).
int SelftestMain(const SelftestCommandOptions& options);

}  // namespace lockstep::worker::cmd

#endif  // LOCKSTEP_WORKER_CMD_SELFTEST_H_
