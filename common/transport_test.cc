#include "common/transport.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::lockstep::testing::IsOkAndHolds;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

std::string TempFile(const std::string& name, const std::string& text) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(TransportTest, LoopbackAddresses) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:7070"));
  EXPECT_TRUE(IsLoopbackAddress("127.3.4.5:0"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:7070"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:7070"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:7070"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:7070"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1:7070"));
  EXPECT_FALSE(IsLoopbackAddress("coordinator:7070"));
  EXPECT_FALSE(IsLoopbackAddress("127.0.0.1.example.com:7070"));
}

TEST(TransportTest, TokenFromFlagFileOrEnvironment) {
  unsetenv(kTokenEnvVar);
  EXPECT_THAT(ResolveToken("", ""), IsOkAndHolds(""));
  setenv(kTokenEnvVar, "from-env", 1);
  EXPECT_THAT(ResolveToken("", ""), IsOkAndHolds("from-env"));
  EXPECT_THAT(ResolveToken("from-flag", ""), IsOkAndHolds("from-flag"));
  const std::string file = TempFile("token", "  from-file \nsecond line\n");
  EXPECT_THAT(ResolveToken("", file), IsOkAndHolds("from-file"));
  unsetenv(kTokenEnvVar);
  EXPECT_THAT(ResolveToken("a", file),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("set at most one")));
  EXPECT_THAT(ResolveToken("", TempFile("empty", "\n")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--token_file: ")));
  EXPECT_THAT(ResolveToken("", "/nonexistent/token"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cannot read /nonexistent/token")));
}

TEST(TransportTest, PemFilesAreChecked) {
  EXPECT_THAT(
      ReadPemFile(TempFile("not.pem", "hello"), "--ca"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--ca: ")));
  ChannelSecurity s;
  s.ca_file = TempFile("ca.pem", "garbage");
  EXPECT_THAT(ChannelCredentials(s).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is not a PEM file")));
}

}  // namespace
}  // namespace lockstep
