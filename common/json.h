// Minimal JSON text helpers for hand-written reports (the selftest's and
// the CLI's); protobuf messages use protobuf's own JSON printer.
#ifndef LOCKSTEP_COMMON_JSON_H_
#define LOCKSTEP_COMMON_JSON_H_

#include <string>

#include "absl/strings/string_view.h"

namespace lockstep {

// s as a JSON string literal, quotes included: ", \ and control characters
// escaped (\n, \t, \r by name, others as \u00XX); other bytes, UTF-8
// included, pass through.
std::string JsonQuote(absl::string_view s);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_JSON_H_
