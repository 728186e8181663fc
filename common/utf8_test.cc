#include "common/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(Utf8Test, AcceptsWellFormedSequences) {
  EXPECT_TRUE(IsUtf8(""));
  EXPECT_TRUE(IsUtf8("plain ascii"));
  EXPECT_TRUE(IsUtf8("\xC3\xA9"));          // é, 2 bytes
  EXPECT_TRUE(IsUtf8("\xE2\x82\xAC"));      // €, 3 bytes
  EXPECT_TRUE(IsUtf8("\xF0\x9F\x98\x80"));  // U+1F600, 4 bytes
  EXPECT_TRUE(IsUtf8("\xF4\x8F\xBF\xBF"));  // U+10FFFF
  EXPECT_EQ(Utf8SequenceLength("a\xE2\x82\xAC", 1), 3);
  EXPECT_EQ(Utf8SequenceLength("a", 0), 1);
}

TEST(Utf8Test, RefusesMalformedSequences) {
  EXPECT_FALSE(IsUtf8("\x80"));              // lone continuation byte
  EXPECT_FALSE(IsUtf8("\xC3"));              // truncated
  EXPECT_FALSE(IsUtf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(IsUtf8("\xE0\x80\xAF"));      // overlong, 3 bytes
  EXPECT_FALSE(IsUtf8("\xED\xA0\x80"));      // surrogate U+D800
  EXPECT_FALSE(IsUtf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsUtf8("\xFF"));
  EXPECT_FALSE(IsUtf8(std::string("ok\xC3(", 5)));
  EXPECT_EQ(Utf8SequenceLength("ab", 2), 0);  // past the end
}

}  // namespace
}  // namespace lockstep
