#include "server/http/query_params.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace lockstep::server {

std::string Utf8Prefix(absl::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  // s[end] is the first byte left out; while it continues a sequence (at
  // most 3 bytes of one), the cut would split that sequence.
  size_t end = max_bytes;
  for (int i = 0;
       i < 3 && end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80;
       ++i) {
    --end;
  }
  return std::string(s.substr(0, end));
}

absl::Status QueryParams::CheckKnown() const {
  for (const auto& [name, value] : req_.params) {
    if (std::find(known_.begin(), known_.end(), name) == known_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": unknown parameter (known: ",
          known_.empty() ? "none" : absl::StrJoin(known_, ", "), ")"));
    }
    if (value.size() > kMaxParamBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": ", value.size(), " bytes, at most ", kMaxParamBytes));
    }
    if (req_.params.count(name) > 1 && name != "label") {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": given more than once"));
    }
  }
  return absl::OkStatus();
}

std::string QueryParams::Str(const std::string& name) const {
  return req_.has_param(name.c_str()) ? req_.get_param_value(name.c_str()) : "";
}

absl::StatusOr<int> QueryParams::Int(const std::string& name, int min, int max,
                                     int fallback) const {
  if (!req_.has_param(name.c_str())) return fallback;
  const std::string v = req_.get_param_value(name.c_str());
  int64_t n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < min || n > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": \"", Utf8Prefix(v, kMaxQuotedParamBytes),
                     "\" is not an integer in ", min, "..", max));
  }
  return static_cast<int>(n);
}

absl::StatusOr<bool> QueryParams::Bool(const std::string& name) const {
  const std::string v = Str(name);
  if (v.empty() || v == "false" || v == "0") return false;
  if (v == "true" || v == "1") return true;
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": \"", Utf8Prefix(v, kMaxQuotedParamBytes),
                   "\" is not true, false, 1 or 0"));
}

std::vector<std::string> QueryParams::All(const std::string& name) const {
  std::vector<std::string> out;
  auto range = req_.params.equal_range(name);
  for (auto it = range.first; it != range.second; ++it) {
    out.push_back(it->second);
  }
  return out;
}

absl::StatusOr<std::pair<std::string, std::string>> ParseLabelFilter(
    const std::string& label) {
  std::pair<std::string, std::string> kv =
      absl::StrSplit(label, absl::MaxSplits('=', 1));
  if (kv.first.empty() || label.find('=') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("label: \"", Utf8Prefix(label, kMaxQuotedParamBytes),
                     "\" is not key=value"));
  }
  return kv;
}

}  // namespace lockstep::server
