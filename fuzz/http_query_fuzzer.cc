// The HTTP API's query parameters (server/http/query_params.h): the query
// string of a request, decoded by cpp-httplib as the server does, then read
// by every route's parameter code (the names, ranges and enums of
// http_server.cc's routes).
//
// Invariants: a query a route accepts names only parameters it knows, each
// at most kMaxParamBytes long and only "label" repeated; every integer read
// is within its route's range; every label filter has a non-empty key; a
// refusal is INVALID_ARGUMENT whose message starts with the name of a
// parameter of the query, and is valid UTF-8 whenever the query's decoded
// names and values are (the message reaches the dashboard as JSON).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/utf8.h"
#include "fuzz/fuzz_check.h"
#include "httplib.h"
#include "lockstep/v1/common.pb.h"
#include "lockstep/v1/job.pb.h"
#include "lockstep/v1/report.pb.h"
#include "server/http/query_params.h"

namespace {

using ::lockstep::server::kMaxParamBytes;
using ::lockstep::server::ParseLabelFilter;
using ::lockstep::server::QueryParams;

// The routes' limits (server/http/http_server.cc).
constexpr int kMaxPageSize = 500;
constexpr int kDefaultMaxSteps = 200;
constexpr int kMaxSteps = 1000;
constexpr int kDefaultHistory = 50;
constexpr int kMaxHistory = 200;

class Checker {
 public:
  explicit Checker(const httplib::Request& req) : req_(req) {
    utf8_ = true;
    for (const auto& [name, value] : req.params) {
      utf8_ = utf8_ && lockstep::IsUtf8(name) && lockstep::IsUtf8(value);
    }
  }

  // A refusal: INVALID_ARGUMENT, starting with one of the query's names
  // (or "label" for a label filter), valid UTF-8 for a UTF-8 query.
  void Refused(const absl::Status& s) const {
    FUZZ_CHECK(s.code() == absl::StatusCode::kInvalidArgument, s.ToString());
    bool named = false;
    for (const auto& [name, value] : req_.params) {
      named = named || absl::StartsWith(s.message(), absl::StrCat(name, ": "));
    }
    FUZZ_CHECK(named,
               absl::StrCat("refusal names no parameter: ", s.ToString()));
    FUZZ_CHECK(
        !utf8_ || lockstep::IsUtf8(s.message()),
        absl::StrCat("refusal of a UTF-8 query is not UTF-8: ", s.ToString()));
  }

  // CheckKnown; true when the route may go on.
  bool Known(const QueryParams& p, const std::vector<std::string>& known) {
    const absl::Status s = p.CheckKnown();
    if (!s.ok()) {
      Refused(s);
      return false;
    }
    for (const auto& [name, value] : req_.params) {
      FUZZ_CHECK(std::find(known.begin(), known.end(), name) != known.end(),
                 absl::StrCat("accepted unknown parameter ", name));
      FUZZ_CHECK(value.size() <= kMaxParamBytes,
                 absl::StrCat("accepted ", value.size(), " bytes of ", name));
      FUZZ_CHECK(name == "label" || req_.params.count(name) == 1,
                 absl::StrCat("accepted repeated ", name));
    }
    return true;
  }

  bool Int(const QueryParams& p, const std::string& name, int min, int max,
           int fallback) {
    const absl::StatusOr<int> v = p.Int(name, min, max, fallback);
    if (!v.ok()) {
      Refused(v.status());
      return false;
    }
    FUZZ_CHECK(
        *v == fallback || (*v >= min && *v <= max),
        absl::StrCat(name, " = ", *v, " accepted outside ", min, "..", max));
    return true;
  }

  template <typename E>
  bool Enum(const QueryParams& p, const std::string& name,
            const google::protobuf::EnumDescriptor* d) {
    const absl::StatusOr<E> v = p.Enum<E>(name, d);
    if (!v.ok()) {
      Refused(v.status());
      return false;
    }
    FUZZ_CHECK(d->FindValueByNumber(static_cast<int>(*v)) != nullptr,
               absl::StrCat(name, ": accepted an unknown enum number"));
    return true;
  }

 private:
  const httplib::Request& req_;
  bool utf8_ = true;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  httplib::Request req;
  httplib::detail::parse_query_text(
      std::string(reinterpret_cast<const char*>(data), size), req.params);
  Checker c(req);

  {  // GET /api/v1/jobs
    QueryParams p(req, {"page_size", "page_token", "state", "model_digest",
                        "config_digest", "verdict", "label", "exclude_job_id"});
    if (c.Known(p, {"page_size", "page_token", "state", "model_digest",
                    "config_digest", "verdict", "label", "exclude_job_id"}) &&
        c.Int(p, "page_size", 0, kMaxPageSize, 0) &&
        c.Enum<lockstep::v1::JobState>(p, "state",
                                       lockstep::v1::JobState_descriptor()) &&
        c.Enum<lockstep::v1::Verdict>(p, "verdict",
                                      lockstep::v1::Verdict_descriptor())) {
      p.Str("page_token");
      p.Str("model_digest");
      for (const std::string& label : p.All("label")) {
        const auto kv = ParseLabelFilter(label);
        if (!kv.ok()) {
          c.Refused(kv.status());
          break;
        }
        FUZZ_CHECK(!kv->first.empty() &&
                       absl::StrCat(kv->first, "=", kv->second) == label,
                   absl::StrCat("label filter split wrongly: ", label));
      }
    }
  }
  {  // GET /api/v1/jobs/{id}, .../report, /certificates/{id}, /audits/{id}
    QueryParams p(req, {});
    c.Known(p, {});
  }
  {  // GET /api/v1/jobs/{id}/divergence_map
    QueryParams p(req, {"run_a", "run_b", "max_steps"});
    if (c.Known(p, {"run_a", "run_b", "max_steps"})) {
      c.Int(p, "max_steps", 1, kMaxSteps, kDefaultMaxSteps);
    }
  }
  {  // GET /api/v1/jobs/{id}/loss
    QueryParams p(req, {"max_steps"});
    if (c.Known(p, {"max_steps"})) {
      c.Int(p, "max_steps", 1, kMaxSteps, kDefaultMaxSteps);
    }
  }
  {  // GET /api/v1/certificates
    const std::vector<std::string> known = {"model_digest",
                                            "hardware_class_digest", "level",
                                            "page_size", "page_token"};
    QueryParams p(req, known);
    if (c.Known(p, known) && c.Int(p, "page_size", 0, kMaxPageSize, 0)) {
      c.Enum<lockstep::v1::Level>(p, "level", lockstep::v1::Level_descriptor());
    }
  }
  {  // GET /api/v1/workers
    QueryParams p(req, {"include_gone"});
    if (c.Known(p, {"include_gone"})) {
      const absl::StatusOr<bool> v = p.Bool("include_gone");
      if (!v.ok()) c.Refused(v.status());
    }
  }
  {  // GET /api/v1/workers/{id}/history
    QueryParams p(req, {"limit"});
    if (c.Known(p, {"limit"})) {
      c.Int(p, "limit", 1, kMaxHistory, kDefaultHistory);
    }
  }
  {  // GET /api/v1/audits
    QueryParams p(req, {"page_size", "page_token"});
    if (c.Known(p, {"page_size", "page_token"})) {
      c.Int(p, "page_size", 0, kMaxPageSize, 0);
    }
  }
  return 0;
}
