#include "worker/cmd/drill_flags.h"

#include <cstdio>
#include <optional>
#include <string>

namespace lockstep::worker::cmd {

std::optional<FaultSpec> ParseFaultFlag(const std::string& text, bool* bad,
                                        std::FILE* err) {
  *bad = false;
  if (text.empty()) return std::nullopt;
  auto fault = ParseFaultSpec(text);
  if (!fault.ok()) {
    // The parser's messages already name the flag.
    std::fprintf(err, "lockstep-worker: %s\n",
                 std::string(fault.status().message()).c_str());
    *bad = true;
    return std::nullopt;
  }
  return *fault;
}

std::optional<StallSpec> ParseStallFlag(const std::string& text, bool* bad,
                                        std::FILE* err) {
  *bad = false;
  if (text.empty()) return std::nullopt;
  auto stall = ParseStallSpec(text);
  if (!stall.ok()) {
    std::fprintf(err, "lockstep-worker: %s\n",
                 std::string(stall.status().message()).c_str());
    *bad = true;
    return std::nullopt;
  }
  return *stall;
}

}  // namespace lockstep::worker::cmd
