// The drill flags of `lockstep-worker execute` and `daemon`
// (worker/cmd/drill_flags.h): the same bytes as --inject_fault and as
// --inject_stall.
//
// Invariants: an empty flag is no drill and not an error; a malformed one
// sets *bad, returns nothing and prints exactly one line starting
// "lockstep-worker: --inject_..."; an accepted stall has step >= 0 and
// seconds in 1..86400, and its "step=S,seconds=N[,model=M]" form parses
// back to the same stall.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_check.h"
#include "worker/cmd/drill_flags.h"
#include "worker/run_child.h"

namespace {

using ::lockstep::worker::ParseStallSpec;
using ::lockstep::worker::StallSpec;
using ::lockstep::worker::cmd::ParseFaultFlag;
using ::lockstep::worker::cmd::ParseStallFlag;

// What the flag parser printed into `f` (a tmpfile), then emptied.
std::string Drain(std::FILE* f) {
  std::string out;
  std::rewind(f);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

void CheckComplaint(const std::string& printed, const char* flag) {
  FUZZ_CHECK(absl::StartsWith(printed, absl::StrCat("lockstep-worker: ", flag)),
             printed);
  FUZZ_CHECK(absl::EndsWith(printed, "\n"), printed);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);

  std::FILE* err = std::tmpfile();
  FUZZ_CHECK(err != nullptr, "tmpfile failed");
  bool bad = false;
  const auto fault = ParseFaultFlag(text, &bad, err);
  std::string printed = Drain(err);
  if (text.empty()) {
    FUZZ_CHECK(!fault.has_value() && !bad && printed.empty(),
               "an empty --inject_fault is not 'no drill'");
  } else if (bad) {
    FUZZ_CHECK(!fault.has_value(), "a bad --inject_fault returned a spec");
    CheckComplaint(printed, "--inject_fault: ");
  } else {
    FUZZ_CHECK(fault.has_value() && printed.empty(),
               "an accepted --inject_fault printed or returned nothing");
  }

  err = std::tmpfile();
  FUZZ_CHECK(err != nullptr, "tmpfile failed");
  bad = false;
  const auto stall = ParseStallFlag(text, &bad, err);
  printed = Drain(err);
  if (text.empty()) {
    FUZZ_CHECK(!stall.has_value() && !bad && printed.empty(),
               "an empty --inject_stall is not 'no drill'");
    return 0;
  }
  if (bad) {
    FUZZ_CHECK(!stall.has_value(), "a bad --inject_stall returned a spec");
    CheckComplaint(printed, "--inject_stall: ");
    return 0;
  }
  FUZZ_CHECK(stall.has_value() && printed.empty(),
             "an accepted --inject_stall printed or returned nothing");
  FUZZ_CHECK(stall->step >= 0 && stall->seconds >= 1 && stall->seconds <= 86400,
             "accepted a stall out of range");
  std::string again_text =
      absl::StrCat("step=", stall->step, ",seconds=", stall->seconds);
  if (!stall->model.empty())
    absl::StrAppend(&again_text, ",model=", stall->model);
  absl::StatusOr<StallSpec> again = ParseStallSpec(again_text);
  FUZZ_CHECK(again.ok(), absl::StrCat("\"", again_text, "\" does not parse: ",
                                      again.status().ToString()));
  FUZZ_CHECK(again->step == stall->step && again->seconds == stall->seconds &&
                 again->model == stall->model,
             absl::StrCat("\"", again_text, "\" parses to a different stall"));
  return 0;
}
