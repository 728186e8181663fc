// Test-only GoogleTest matchers for absl::Status and absl::StatusOr, which
// Debian's abseil 20220623 does not ship:
//
//   EXPECT_THAT(store->Put(x), IsOk());
//   EXPECT_THAT(Parse(""), StatusIs(absl::StatusCode::kInvalidArgument,
//                                   HasSubstr("model.layers")));
//   EXPECT_THAT(Lookup(3), IsOkAndHolds(Eq(7)));
#ifndef LOCKSTEP_COMMON_STATUS_MATCHERS_H_
#define LOCKSTEP_COMMON_STATUS_MATCHERS_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace lockstep::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER(IsOk, "is OK") {
  const absl::Status& s = GetStatus(arg);
  if (!s.ok()) *result_listener << "status is " << s;
  return s.ok();
}

MATCHER_P2(StatusIs, code, message_matcher,
           std::string("has code ") + absl::StatusCodeToString(code)) {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  if (s.code() != code) return false;
  return ::testing::ExplainMatchResult(
      message_matcher, std::string(s.message()), result_listener);
}

MATCHER_P(StatusIs, code,
          std::string("has code ") + absl::StatusCodeToString(code)) {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code;
}

MATCHER_P(IsOkAndHolds, value_matcher, "is OK and holds a matching value") {
  if (!arg.ok()) {
    *result_listener << "status is " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(value_matcher, *arg, result_listener);
}

}  // namespace lockstep::testing

#endif  // LOCKSTEP_COMMON_STATUS_MATCHERS_H_
