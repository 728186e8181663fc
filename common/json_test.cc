#include "common/json.h"

#include <string>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(JsonQuoteTest, EscapesWhatJsonRequires) {
  EXPECT_EQ(JsonQuote(""), "\"\"");
  EXPECT_EQ(JsonQuote("plain"), "\"plain\"");
  EXPECT_EQ(JsonQuote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonQuote("l1\nl2\tx\r"), "\"l1\\nl2\\tx\\r\"");
  EXPECT_EQ(JsonQuote(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  EXPECT_EQ(JsonQuote(std::string("nul\0x", 5)), "\"nul\\u0000x\"");
  EXPECT_EQ(JsonQuote("\xc3\xa9t\xc3\xa9"), "\"\xc3\xa9t\xc3\xa9\"");
}

}  // namespace
}  // namespace lockstep
