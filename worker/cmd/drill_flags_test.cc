// The --inject_fault / --inject_stall specs of `execute` and `daemon`.
#include "worker/cmd/drill_flags.h"

#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::worker::cmd {
namespace {

using ::testing::HasSubstr;

std::string ReadAll(std::FILE* f) {
  std::rewind(f);
  std::string text;
  char buf[1024];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  return text;
}

TEST(DrillFlagsTest, EmptyMeansNoDrill) {
  bool bad = true;
  EXPECT_FALSE(ParseFaultFlag("", &bad, stderr).has_value());
  EXPECT_FALSE(bad);
  bad = true;
  EXPECT_FALSE(ParseStallFlag("", &bad, stderr).has_value());
  EXPECT_FALSE(bad);
}

TEST(DrillFlagsTest, ParsesWellFormedSpecs) {
  bool bad = true;
  const auto fault =
      ParseFaultFlag("step=1,layer=fc2,role=ACTIVATION,bit=22", &bad, stderr);
  ASSERT_TRUE(fault.has_value());
  EXPECT_FALSE(bad);
  EXPECT_EQ(fault->step, 1);
  EXPECT_EQ(fault->layer, "fc2");
  EXPECT_EQ(fault->bit, 22);
  bad = true;
  const auto stall = ParseStallFlag("step=2,seconds=3", &bad, stderr);
  ASSERT_TRUE(stall.has_value());
  EXPECT_FALSE(bad);
}

TEST(DrillFlagsTest, MalformedSpecsAreUsageErrorsNamingTheFlag) {
  std::FILE* err = std::tmpfile();
  bool bad = false;
  EXPECT_FALSE(ParseFaultFlag("zzz", &bad, err).has_value());
  EXPECT_TRUE(bad);
  bad = false;
  EXPECT_FALSE(ParseStallFlag("step=x", &bad, err).has_value());
  EXPECT_TRUE(bad);
  const std::string text = ReadAll(err);
  std::fclose(err);
  EXPECT_THAT(text, HasSubstr("lockstep-worker: --inject_fault"));
  EXPECT_THAT(text, HasSubstr("lockstep-worker: --inject_stall"));
  EXPECT_EQ(kUsageExitCode, 64);
}

}  // namespace
}  // namespace lockstep::worker::cmd
