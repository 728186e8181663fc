// --inject_fault specs (worker/exec/fault.h ParseFaultSpec).
//
// Invariants for an accepted spec: step, element and index >= 0, bit in
// [0, 31], role a real role, a layer unless the role is INPUT or LABEL;
// and ToString() parses back to the same spec. Every refusal is
// INVALID_ARGUMENT starting with "--inject_fault: ".
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_check.h"
#include "lockstep/v1/fingerprint.pb.h"
#include "worker/exec/fault.h"

using ::lockstep::worker::FaultSpec;
using ::lockstep::worker::ParseFaultSpec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<FaultSpec> f = ParseFaultSpec(text);
  if (!f.ok()) {
    FUZZ_CHECK(f.status().code() == absl::StatusCode::kInvalidArgument,
               f.status().ToString());
    FUZZ_CHECK(absl::StartsWith(f.status().message(), "--inject_fault: "),
               f.status().ToString());
    return 0;
  }
  FUZZ_CHECK(f->step >= 0 && f->element >= 0 && f->bit >= 0 && f->bit <= 31,
             "accepted a number out of range");
  FUZZ_CHECK(!f->index.has_value() || *f->index >= 0,
             "accepted a negative index");
  FUZZ_CHECK(lockstep::v1::TensorRole_IsValid(f->role) &&
                 f->role != lockstep::v1::TENSOR_ROLE_UNSPECIFIED,
             "accepted an unknown role");

  const std::string printed = f->ToString();
  absl::StatusOr<FaultSpec> again = ParseFaultSpec(printed);
  FUZZ_CHECK(again.ok(),
             absl::StrCat("ToString() \"", printed,
                          "\" does not parse: ", again.status().ToString()));
  FUZZ_CHECK(
      again->step == f->step && again->layer == f->layer &&
          again->role == f->role && again->slot == f->slot &&
          again->index == f->index && again->element == f->element &&
          again->bit == f->bit,
      absl::StrCat("ToString() \"", printed, "\" parses to a different spec"));
  return 0;
}
