// The round trip every accepted spec must survive: printed as protobuf
// text format and as JSON, each parses back through model::ParseSpec to
// the same message (compared as deterministic wire bytes, so NaN payloads
// and -0.0 count too). The one exception: a message with no field set
// prints as empty text, which ParseSpec refuses as an empty file.
#ifndef LOCKSTEP_FUZZ_SPEC_ROUNDTRIP_H_
#define LOCKSTEP_FUZZ_SPEC_ROUNDTRIP_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/proto_bytes.h"
#include "google/protobuf/message.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "model/spec_io.h"

namespace lockstep::fuzz {

inline void CheckSpecRoundTrip(const google::protobuf::Message& parsed) {
  const std::string want = DeterministicBytes(parsed);
  std::unique_ptr<google::protobuf::Message> again(parsed.New());

  std::string text;
  FUZZ_CHECK(google::protobuf::TextFormat::PrintToString(parsed, &text),
             "TextFormat::PrintToString failed");
  absl::Status s = model::ParseSpec(text, "printed.txtpb", again.get());
  if (text.empty()) {
    // A message with no field set prints as nothing, which ParseSpec
    // refuses as an empty file by design ("{}" is its spelling).
    FUZZ_CHECK(want.empty() && !s.ok(), s.ToString());
  } else {
    FUZZ_CHECK(s.ok(), absl::StrCat("printed text format does not parse: ",
                                    s.ToString(), "\n", text));
    FUZZ_CHECK(
        DeterministicBytes(*again) == want,
        absl::StrCat("text format round trip changed the message:\n", text));
  }

  std::string json;
  const auto printed =
      google::protobuf::util::MessageToJsonString(parsed, &json);
  FUZZ_CHECK(printed.ok(), printed.ToString());
  s = model::ParseSpec(json, "printed.json", again.get());
  FUZZ_CHECK(s.ok(), absl::StrCat("printed JSON does not parse: ", s.ToString(),
                                  "\n", json));
  FUZZ_CHECK(DeterministicBytes(*again) == want,
             absl::StrCat("JSON round trip changed the message:\n", json));
}

}  // namespace lockstep::fuzz

#endif  // LOCKSTEP_FUZZ_SPEC_ROUNDTRIP_H_
