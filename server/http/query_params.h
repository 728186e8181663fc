// The query parameters of one HTTP API request (http_server.h), checked
// against the names a route knows and against their limits. Every refusal
// is INVALID_ARGUMENT naming the parameter and its limit; the server
// answers it with 400. Thread-compatible (a view of one request).
#ifndef LOCKSTEP_SERVER_HTTP_QUERY_PARAMS_H_
#define LOCKSTEP_SERVER_HTTP_QUERY_PARAMS_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "httplib.h"

namespace lockstep::server {

// Longest accepted string parameter (ids, digests, labels).
inline constexpr size_t kMaxParamBytes = 256;
// Bytes of a refused value quoted in its error message.
inline constexpr size_t kMaxQuotedParamBytes = 32;

// The first `max_bytes` bytes of `s` at most, cut so that no UTF-8
// sequence is split: the prefix of valid UTF-8 is valid UTF-8, so an error
// message quoting it stays valid JSON text (RFC 8259 section 8.1).
std::string Utf8Prefix(absl::string_view s, size_t max_bytes);

class QueryParams {
 public:
  // `req` must outlive this. `known`: the parameter names the route takes.
  QueryParams(const httplib::Request& req, std::vector<std::string> known)
      : req_(req), known_(std::move(known)) {}

  // INVALID_ARGUMENT naming the first parameter the route does not know,
  // one longer than kMaxParamBytes, or one given more than once ("label"
  // may repeat).
  absl::Status CheckKnown() const;

  // The value of `name`; "" when absent.
  std::string Str(const std::string& name) const;

  // `name` as an integer in min..max; `fallback` when absent.
  absl::StatusOr<int> Int(const std::string& name, int min, int max,
                          int fallback) const;

  // true / 1, false / 0 or absent (false).
  absl::StatusOr<bool> Bool(const std::string& name) const;

  // An enum value by its name ("JOB_RUNNING"); the default when absent.
  template <typename E>
  absl::StatusOr<E> Enum(const std::string& name,
                         const google::protobuf::EnumDescriptor* d) const {
    const std::string v = Str(name);
    if (v.empty()) return static_cast<E>(0);
    const google::protobuf::EnumValueDescriptor* value = d->FindValueByName(v);
    if (value == nullptr) {
      std::vector<std::string> names;
      for (int i = 1; i < d->value_count(); ++i) {
        names.push_back(d->value(i)->name());
      }
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": \"", Utf8Prefix(v, kMaxQuotedParamBytes),
                       "\" is not one of ", absl::StrJoin(names, ", ")));
    }
    return static_cast<E>(value->number());
  }

  // Every value of a repeated parameter.
  std::vector<std::string> All(const std::string& name) const;

 private:
  const httplib::Request& req_;
  const std::vector<std::string> known_;
};

// One "label" filter value, "key=value" (the value may be empty or hold
// more '='), as a (key, value) pair; INVALID_ARGUMENT "label: ... is not
// key=value" otherwise.
absl::StatusOr<std::pair<std::string, std::string>> ParseLabelFilter(
    const std::string& label);

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_HTTP_QUERY_PARAMS_H_
