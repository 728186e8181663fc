// common/json.h JsonQuote, which quotes text from outside (error messages
// carrying parameter values, worker names, file paths) into the HTTP API's
// and the CLI's JSON.
//
// Invariants: the output is one JSON string literal (RFC 8259 grammar: no
// raw control characters, only valid escapes) and decoding it gives back
// exactly the input bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/json.h"
#include "fuzz/fuzz_check.h"

namespace {

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes the JSON string literal `q`; false on a grammar violation. Only
// \u escapes below U+0080 are expected (JsonQuote escapes control
// characters only), others are a violation here.
bool Unquote(absl::string_view q, std::string* out) {
  if (q.size() < 2 || q.front() != '"' || q.back() != '"') return false;
  q = q.substr(1, q.size() - 2);
  for (size_t i = 0; i < q.size(); ++i) {
    const char c = q[i];
    if (static_cast<unsigned char>(c) < 0x20 || c == '"') return false;
    if (c != '\\') {
      out->push_back(c);
      continue;
    }
    if (++i >= q.size()) return false;
    switch (q[i]) {
      case '"':
      case '\\':
      case '/':
        out->push_back(q[i]);
        break;
      case 'b':
        out->push_back('\b');
        break;
      case 'f':
        out->push_back('\f');
        break;
      case 'n':
        out->push_back('\n');
        break;
      case 'r':
        out->push_back('\r');
        break;
      case 't':
        out->push_back('\t');
        break;
      case 'u': {
        if (i + 4 >= q.size()) return false;
        int v = 0;
        for (int k = 1; k <= 4; ++k) {
          const int h = Hex(q[i + k]);
          if (h < 0) return false;
          v = v * 16 + h;
        }
        if (v >= 0x80) return false;
        out->push_back(static_cast<char>(v));
        i += 4;
        break;
      }
      default:
        return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view in(reinterpret_cast<const char*>(data), size);
  const std::string quoted = lockstep::JsonQuote(in);
  std::string decoded;
  FUZZ_CHECK(Unquote(quoted, &decoded),
             absl::StrCat("not a JSON string literal: ", quoted));
  FUZZ_CHECK(decoded == in, "decoding the literal does not give the input");
  return 0;
}
