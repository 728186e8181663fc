// Reading model and job-config files: JSON or protobuf text format.
//
// The format is detected from the first character that is not white space
// (a UTF-8 byte-order mark is skipped): '{' means JSON (proto3 JSON mapping,
// field names in snake_case or lowerCamelCase, enums by name), anything else
// protobuf text format. Both are strict: unknown fields, unknown enum names,
// duplicate keys, values of the wrong type, trailing text and two members of
// one oneof are errors. JSON must be RFC 8259 (no comments, no trailing
// commas, no single quotes).
//
// Errors are INVALID_ARGUMENT of the form
//   <file>:<line>:<column>: <field path>: <what is wrong>
// (line and column 1-based, in bytes; left out where unknown), e.g.
//   model.json:7:9: layers[1].dense.unit: unknown field
//   model.txtpb:3:7: Message type "lockstep.v1.Layer" has no field named "nme".
// Parsing does not validate the content: PlanModel (plan.h) does that.
// All functions are thread-safe.
#ifndef LOCKSTEP_MODEL_SPEC_IO_H_
#define LOCKSTEP_MODEL_SPEC_IO_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "lockstep/v1/job.pb.h"
#include "lockstep/v1/model.pb.h"

namespace lockstep::model {

// Largest spec file the Read* functions accept.
inline constexpr int64_t kMaxSpecFileBytes = int64_t{16} << 20;  // 16 MiB
// Deepest JSON nesting accepted (a model needs 4 levels).
inline constexpr int kMaxSpecNesting = 32;

enum class SpecFormat { kJson, kTextFormat };

// JSON when the first non-space character (after an optional BOM) is '{'.
SpecFormat DetectSpecFormat(absl::string_view text);

// Parses `text` into `message` (cleared first). `filename_for_errors`
// starts every error message.
absl::Status ParseSpec(absl::string_view text,
                       absl::string_view filename_for_errors,
                       google::protobuf::Message* message);

absl::StatusOr<lockstep::v1::Model> ParseModel(
    absl::string_view text, absl::string_view filename_for_errors);
absl::StatusOr<lockstep::v1::JobConfig> ParseJobConfig(
    absl::string_view text, absl::string_view filename_for_errors);

// The bytes of a file of at most kMaxSpecFileBytes. NOT_FOUND when `path`
// does not exist, PERMISSION_DENIED when it cannot be read,
// INVALID_ARGUMENT for a directory or a file over the limit; every message
// names `what` and the path.
absl::StatusOr<std::string> ReadSpecFile(const std::string& path,
                                         absl::string_view what);

// ReadSpecFile + ParseModel / ParseJobConfig.
absl::StatusOr<lockstep::v1::Model> ReadModelFile(const std::string& path);
absl::StatusOr<lockstep::v1::JobConfig> ReadJobConfigFile(
    const std::string& path);

}  // namespace lockstep::model

#endif  // LOCKSTEP_MODEL_SPEC_IO_H_
