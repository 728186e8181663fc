#include "server/metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::server {
namespace {

using ::testing::HasSubstr;

TEST(Metrics, CounterRendersEachLabelSetEscaped) {
  CounterFamily c("test_total", "A test counter.", {"method", "code"});
  c.Add({"/a.B/C", "OK"});
  c.Add({"/a.B/C", "OK"}, 2);
  c.Add({"say \"hi\"\\\n", "NOT_FOUND"});
  EXPECT_EQ(c.Value({"/a.B/C", "OK"}), 3);
  std::string out;
  c.Render(&out);
  EXPECT_THAT(out, HasSubstr("# HELP test_total A test counter.\n"
                             "# TYPE test_total counter\n"));
  EXPECT_THAT(out, HasSubstr("test_total{method=\"/a.B/C\",code=\"OK\"} 3\n"));
  EXPECT_THAT(out, HasSubstr("test_total{method=\"say \\\"hi\\\"\\\\\\n\","
                             "code=\"NOT_FOUND\"} 1\n"));
}

TEST(Metrics, UnlabelledCounterStartsAtZero) {
  CounterFamily c("zero_total", "Zero.", {});
  std::string out;
  c.Render(&out);
  EXPECT_THAT(out, HasSubstr("\nzero_total 0\n"));
}

TEST(Metrics, HistogramBucketsAreCumulative) {
  HistogramFamily h("lat_seconds", "Latency.", {"m"}, {0.1, 1});
  h.Observe({"x"}, 0.05);
  h.Observe({"x"}, 0.5);
  h.Observe({"x"}, 5);
  EXPECT_EQ(h.Count({"x"}), 3u);
  std::string out;
  h.Render(&out);
  EXPECT_THAT(
      out,
      HasSubstr("lat_seconds_bucket{m=\"x\",le=\"0.10000000000000001\"} 1\n"));
  EXPECT_THAT(out, HasSubstr("lat_seconds_bucket{m=\"x\",le=\"1\"} 2\n"));
  EXPECT_THAT(out, HasSubstr("lat_seconds_bucket{m=\"x\",le=\"+Inf\"} 3\n"));
  EXPECT_THAT(out, HasSubstr("lat_seconds_sum{m=\"x\"} 5.5499999999999998\n"));
  EXPECT_THAT(out, HasSubstr("lat_seconds_count{m=\"x\"} 3\n"));
}

TEST(Metrics, GaugeRendersEveryValue) {
  std::string out;
  RenderGauge("g", "A gauge.", {"state"}, {{{"A"}, 2}, {{"B"}, 0}}, &out);
  EXPECT_EQ(out,
            "# HELP g A gauge.\n# TYPE g gauge\ng{state=\"A\"} 2\n"
            "g{state=\"B\"} 0\n");
}

}  // namespace
}  // namespace lockstep::server
