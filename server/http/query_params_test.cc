// The HTTP API's query parameters: limits, typed values and refusals.
#include "server/http/query_params.h"

#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "lockstep/v1/job.pb.h"

namespace lockstep::server {
namespace {

using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

httplib::Request WithQuery(const std::string& query) {
  httplib::Request req;
  httplib::detail::parse_query_text(query, req.params);
  return req;
}

TEST(QueryParamsTest, ReadsKnownParametersWithinLimits) {
  const httplib::Request req = WithQuery("page_size=50&state=JOB_RUNNING");
  QueryParams p(req, {"page_size", "state"});
  EXPECT_TRUE(p.CheckKnown().ok());
  EXPECT_EQ(*p.Int("page_size", 0, 500, 0), 50);
  EXPECT_EQ(*p.Enum<v1::JobState>("state", v1::JobState_descriptor()),
            v1::JOB_RUNNING);
  EXPECT_EQ(*p.Int("absent", 1, 5, 3), 3);
}

TEST(QueryParamsTest, RefusesUnknownRepeatedAndOverlongParameters) {
  const httplib::Request unknown = WithQuery("nope=1");
  EXPECT_THAT(QueryParams(unknown, {"limit"}).CheckKnown(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("nope: unknown parameter (known: limit)")));
  const httplib::Request twice = WithQuery("limit=1&limit=2");
  EXPECT_THAT(QueryParams(twice, {"limit"}).CheckKnown(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("limit: given more than once")));
  const httplib::Request long_value =
      WithQuery("page_token=" + std::string(kMaxParamBytes + 1, 'a'));
  EXPECT_THAT(QueryParams(long_value, {"page_token"}).CheckKnown(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("page_token: 257 bytes, at most 256")));
}

TEST(QueryParamsTest, LabelFilterIsKeyEqualsValue) {
  EXPECT_EQ(*ParseLabelFilter("team=ml=infra"),
            std::make_pair(std::string("team"), std::string("ml=infra")));
  EXPECT_EQ(*ParseLabelFilter("team="),
            std::make_pair(std::string("team"), std::string()));
  EXPECT_THAT(ParseLabelFilter("=ml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("label: \"=ml\" is not key=value")));
  EXPECT_FALSE(ParseLabelFilter("team").ok());
}

// A refused value is quoted cut to 32 bytes, never inside a UTF-8
// character: the message goes out as JSON, which must be valid UTF-8.
TEST(QueryParamsTest, QuotedValueIsCutAtACharacterBoundary) {
  // 12 x U+65E5 (3 bytes each): byte 32 falls inside the 11th character,
  // so the quote keeps the first 10 (30 bytes).
  std::string value;
  for (int i = 0; i < 12; ++i) value += "\xE6\x97\xA5";
  std::string encoded;
  for (int i = 0; i < 12; ++i) encoded += "%E6%97%A5";
  const httplib::Request req = WithQuery("state=" + encoded);
  QueryParams p(req, {"state"});
  const auto state = p.Enum<v1::JobState>("state", v1::JobState_descriptor());
  ASSERT_FALSE(state.ok());
  EXPECT_THAT(
      std::string(state.status().message()),
      HasSubstr("state: \"" + value.substr(0, 30) + "\" is not one of"));

  EXPECT_EQ(Utf8Prefix("abc", 32), "abc");
  EXPECT_EQ(Utf8Prefix(std::string(40, 'x'), 32), std::string(32, 'x'));
  EXPECT_EQ(Utf8Prefix("a\xC3\xA9", 2), "a");
  EXPECT_EQ(Utf8Prefix("a\xC3\xA9", 3), "a\xC3\xA9");
  EXPECT_EQ(Utf8Prefix("\xF0\x9F\x98\x80\xF0\x9F\x98\x80", 7),
            "\xF0\x9F\x98\x80");
  // Not UTF-8 to begin with: cut as bytes after at most 3 steps back.
  EXPECT_EQ(Utf8Prefix(std::string(8, '\x80'), 6), std::string(3, '\x80'));
}

}  // namespace
}  // namespace lockstep::server
