// UTF-8 validation shared by the parsers of outside input (spec files, the
// HTTP API's checks): well-formed sequences only, no overlong forms, no
// surrogates, nothing above U+10FFFF (RFC 3629).
#ifndef LOCKSTEP_COMMON_UTF8_H_
#define LOCKSTEP_COMMON_UTF8_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace lockstep {

// The length in bytes (1 to 4) of the well-formed UTF-8 sequence starting
// at s[pos], or 0 when none starts there (pos at or past the end included).
int Utf8SequenceLength(absl::string_view s, size_t pos);

// True when all of `s` is well-formed UTF-8.
bool IsUtf8(absl::string_view s);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_UTF8_H_
