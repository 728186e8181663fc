// The drill specs shared by `lockstep-worker execute` and `daemon`
// (--inject_fault, --inject_stall), parsed with a message that names the
// flag.
#ifndef LOCKSTEP_WORKER_CMD_DRILL_FLAGS_H_
#define LOCKSTEP_WORKER_CMD_DRILL_FLAGS_H_

#include <cstdio>
#include <optional>
#include <string>

#include "worker/exec/fault.h"
#include "worker/run_child.h"

namespace lockstep::worker::cmd {

// Exit code of a malformed command line (BSD EX_USAGE).
inline constexpr int kUsageExitCode = 64;

// `text` parsed as a FaultSpec; nullopt when empty. A malformed spec sets
// *bad and prints "lockstep-worker: <message>" on `err`.
std::optional<FaultSpec> ParseFaultFlag(const std::string& text, bool* bad,
                                        std::FILE* err);

// `text` parsed as a StallSpec; nullopt when empty. A malformed spec sets
// *bad and prints "lockstep-worker: <message>" on `err`.
std::optional<StallSpec> ParseStallFlag(const std::string& text, bool* bad,
                                        std::FILE* err);

}  // namespace lockstep::worker::cmd

#endif  // LOCKSTEP_WORKER_CMD_DRILL_FLAGS_H_
