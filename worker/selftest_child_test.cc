#include "worker/selftest_child.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string g_worker;  // the lockstep-worker binary (argv[1])

constexpr char kPassing[] = R"({
  "seed": 1, "runs": 3, "ops": ["flatten"],
  "backends": [{"name": "cuda", "available": true, "detail": "GPU 0"},
               {"name": "rocm", "available": false, "detail": "none"}],
  "rows": [{"op": "flatten"}, {"op": "flatten"}],
  "failing_rows": [],
  "summary": "PASS: 2 rows",
  "ok": true
})";

std::vector<std::string> Shell(const std::string& script) {
  return {"/bin/sh", "-c", script};
}

TEST(ParseSelftestJsonTest, Passing) {
  auto r = ParseSelftestJson(kPassing);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->passed());
  EXPECT_EQ(r->rows(), 2);
  EXPECT_EQ(r->failed_rows(), 0);
  EXPECT_EQ(r->summary(), "PASS: 2 rows");
  EXPECT_THAT(r->backends(), ::testing::ElementsAre("cpu", "cuda"));
}

TEST(ParseSelftestJsonTest, LongSummaryIsCut) {
  const std::string json =
      R"({"backends": [], "rows": [{}], "failing_rows": ["a"], "summary": ")" +
      std::string(5000, 'x') + R"(", "ok": false})";
  auto r = ParseSelftestJson(json);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->passed());
  EXPECT_EQ(r->failed_rows(), 1);
  EXPECT_EQ(r->summary().size(), 1000u);
}

TEST(ParseSelftestJsonTest, BadReportsNameTheField) {
  EXPECT_THAT(std::string(ParseSelftestJson("garbage").status().message()),
              HasSubstr("not a JSON object"));
  EXPECT_THAT(
      std::string(ParseSelftestJson(R"({"ok": "yes"})").status().message()),
      HasSubstr("\"ok\""));
  EXPECT_THAT(std::string(ParseSelftestJson(
                              R"({"ok": true, "rows": [], "failing_rows": []})")
                              .status()
                              .message()),
              HasSubstr("\"summary\""));
}

TEST(RunSelftestInChildTest, ReportOfAPassingChild) {
  const std::string script = std::string("cat <<'EOF'\n") + kPassing + "\nEOF";
  const auto r = RunSelftestInChild(Shell(script), 10000);
  EXPECT_TRUE(r.passed()) << r.summary();
  EXPECT_EQ(r.summary(), "PASS: 2 rows");
  EXPECT_GE(r.duration_ms(), 0);
}

TEST(RunSelftestInChildTest, CrashIsAFailedSelftestNamingTheSignal) {
  const auto r = RunSelftestInChild(
      Shell("echo 'about to crash' >&2; kill -SEGV $$"), 10000);
  EXPECT_FALSE(r.passed());
  EXPECT_THAT(r.summary(), StartsWith("error: selftest process killed by "
                                      "signal 11"));
  EXPECT_THAT(r.summary(), HasSubstr("stderr: about to crash"));
}

TEST(RunSelftestInChildTest, HangIsKilledAndReportedAsATimeout) {
  const auto r = RunSelftestInChild(Shell("exec sleep 30"), 300);
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(r.summary(),
            "error: selftest process timed out after 300 ms and was killed");
  EXPECT_LT(r.duration_ms(), 10000);
}

TEST(RunSelftestInChildTest, UnexpectedExitCodeAndNoReport) {
  auto r = RunSelftestInChild(Shell("echo 'bad flag' >&2; exit 2"), 10000);
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(r.summary(),
            "error: selftest process exited with code 2; stderr: bad flag");
  r = RunSelftestInChild(Shell("echo not json; exit 0"), 10000);
  EXPECT_FALSE(r.passed());
  EXPECT_THAT(r.summary(), HasSubstr("printed no valid report"));
  r = RunSelftestInChild({"/nonexistent/lockstep-worker", "selftest"}, 10000);
  EXPECT_FALSE(r.passed());
  EXPECT_THAT(r.summary(), StartsWith("error: selftest process "));
}

// The daemon's own command line, on the real binary: the CPU rows pass here
// (no GPU).
TEST(RunSelftestInChildTest, RealBinary) {
  ASSERT_FALSE(g_worker.empty());
  const auto r = RunSelftestInChild({g_worker, "selftest", "--json"});
  EXPECT_TRUE(r.passed()) << r.summary();
  EXPECT_GT(r.rows(), 26);
  EXPECT_EQ(r.failed_rows(), 0);
  EXPECT_THAT(r.summary(), StartsWith("PASS: "));
  ASSERT_GE(r.backends_size(), 1);
  EXPECT_EQ(r.backends(0), "cpu");
}

}  // namespace
}  // namespace lockstep::worker

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc > 1) lockstep::worker::g_worker = argv[1];
  return RUN_ALL_TESTS();
}
