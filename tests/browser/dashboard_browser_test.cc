// The web dashboard in Debian's headless Chromium, against a real
// coordinator with real workers on loopback: a DEFAULT-mode job whose runs
// part by step 3 at the latest (one worker flips a bit of fc1's weights
// there) shows the report's first divergence, its layer and step, on the
// job page's divergence map and names its op and cause in the
// first-divergence panel; after a fleet audit the fleet page shows the
// faulty worker as OUTLIER. A screenshot of every page is
// written to the test's undeclared outputs (TEST_UNDECLARED_OUTPUTS_DIR).
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"

namespace lockstep {
namespace {

using ::lockstep::testing::Cluster;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::PollUntil;
using ::lockstep::testing::ReadFileOrEmpty;
using ::lockstep::testing::RunCommand;
using ::lockstep::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kChromium[] = "/usr/bin/chromium";
constexpr char kFault[] = "--inject_fault=step=3,layer=fc1,role=WEIGHT,bit=22";

class DashboardBrowser : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kChromium, X_OK) != 0) {
      GTEST_SKIP() << kChromium
                   << " is missing (Debian package chromium, installed by "
                      "deploy/install-deps.sh): the dashboard was not "
                      "checked in a browser";
    }
    dir_ = TempDir() + "/browser";
    ASSERT_EQ(std::system(("mkdir -p " + dir_).c_str()), 0);
    const char* out = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
    artifacts_ = out != nullptr ? out : dir_;
    cluster_ = std::make_unique<Cluster>(dir_);
    const std::string port_file = dir_ + "/http_port";
    ASSERT_GT(
        cluster_->StartCoordinator(
            0, {"--heartbeat_interval_ms=200", "--heartbeat_timeout_ms=2000",
                "--lease_ms=3000", "--zoo_dir=" + cluster_->Runfile("examples"),
                "--http_listen=127.0.0.1:0", "--http_port_file=" + port_file}),
        0);
    int port = 0;
    ASSERT_TRUE(absl::SimpleAtoi(
        absl::StripAsciiWhitespace(ReadFileOrEmpty(port_file)), &port));
    base_ = absl::StrCat("http://127.0.0.1:", port, "/");
  }

  void TearDown() override {
    if (HasFailure() && cluster_ != nullptr) {
      std::printf("%s\n", cluster_->Logs().c_str());
    }
  }

  // Flags that make a worker a simulated machine of its own.
  std::vector<std::string> OwnMachine(const std::string& name) {
    const std::string path = dir_ + "/" + name + ".machine-id";
    std::ofstream(path) << "simulated-machine-" << name << "\n";
    return {"--machine_id_file=" + path};
  }

  // Chromium, headless, on `route` of the dashboard; `mode` is
  // "--dump-dom" or "--screenshot=FILE". Each run gets its own profile.
  std::string Chromium(const std::string& route, const std::string& mode,
                       bool dark = false, int height = 1000) {
    const std::string profile = absl::StrCat(dir_, "/chromium-", runs_++);
    std::vector<std::string> argv = {
        "/usr/bin/env", "-i", "HOME=" + dir_, "PATH=/usr/bin:/bin",
        "DBUS_SESSION_BUS_ADDRESS=disabled:", kChromium, "--headless",
        "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--no-first-run", "--user-data-dir=" + profile,
        absl::StrCat("--window-size=1366,", height),
        // Enough virtual time for the page's API calls to answer.
        "--virtual-time-budget=4000"};
    if (dark) argv.push_back("--force-dark-mode");
    argv.push_back(mode);
    argv.push_back(base_ + route);
    auto r = RunCommand(argv, absl::Seconds(90));
    EXPECT_THAT(r, IsOk());
    if (!r.ok()) return "";
    EXPECT_EQ(r->exit_code, 0) << r->err;
    return r->out;
  }

  // The page's DOM once the view has rendered (retried: the page renders
  // after its API calls answer).
  std::string Dom(const std::string& route, const std::string& marker) {
    std::string dom;
    for (int i = 0; i < 3; ++i) {
      dom = Chromium(route, "--dump-dom");
      if (dom.find(marker) != std::string::npos) break;
    }
    return dom;
  }

  void Screenshot(const std::string& route, const std::string& name,
                  bool dark = false, int height = 1000) {
    const std::string file = artifacts_ + "/" + name + ".png";
    Chromium(route, "--screenshot=" + file, dark, height);
    std::ifstream f(file, std::ios::binary | std::ios::ate);
    EXPECT_GT(static_cast<int64_t>(f.tellg()), 10000) << file;
  }

  std::string dir_, artifacts_, base_;
  std::unique_ptr<Cluster> cluster_;
  int runs_ = 0;
};

TEST_F(DashboardBrowser, DivergenceMapFirstDivergenceAndOutlierOnTheFleet) {
  // Three healthy machines and one faulty one: a majority of three for the
  // audit. The faulty one and node-1 share a label for the job.
  cluster_->StartWorker("node-1", [&] {
    auto f = OwnMachine("node-1");
    f.push_back("--labels=pair=drill");
    return f;
  }());
  cluster_->StartWorker("node-2", [&] {
    auto f = OwnMachine("node-2");
    f.push_back("--labels=role=cert");
    return f;
  }());
  cluster_->StartWorker("node-3", OwnMachine("node-3"));
  auto faulty = OwnMachine("drill");
  faulty.push_back("--labels=pair=drill");
  faulty.push_back("--allow_drills");
  faulty.push_back(kFault);
  cluster_->StartWorker("drill", faulty);
  ASSERT_TRUE(PollUntil(absl::Seconds(60), [&] {
    for (const char* n : {"node-1", "node-2", "node-3", "drill"}) {
      if (!cluster_->IsConnected(n)) return false;
    }
    return true;
  }));

  // A DEFAULT-mode job on a healthy and the faulty worker. The faulty one
  // flips a bit of fc1's weights after step 3's update, so the runs part
  // at step 3 at the latest; DEFAULT's atomic kernels (thread-arrival
  // order) may part them earlier. Either way the stored report names the
  // first divergence, and the page must show exactly that one.
  const std::string config = dir_ + "/default.json";
  std::ofstream(config)
      << "{\"seed\": 3, \"batch_size\": 16, \"steps\": 8, "
         "\"optimizer\": {\"kind\": \"SGD\", \"learning_rate\": 0.1}, "
         "\"determinism\": \"DEFAULT\", \"capture\": {\"kind\": "
         "\"EVERY_STEP\"}}";
  auto submit =
      cluster_->Cli({"submit", cluster_->Runfile("examples/mlp/model.json"),
                     config, "--runs=2", "--scope=same_class",
                     "--worker_labels=pair=drill", "--json"});
  ASSERT_THAT(submit, IsOk());
  v1::Job job;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(submit->out, &job).ok())
      << submit->out << submit->err;
  ASSERT_THAT(cluster_->Cli({"watch", job.job_id()}), IsOk());
  v1::Report report;
  {
    auto stub = cluster_->Stub();
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    v1::GetReportRequest req;
    req.set_job_id(job.job_id());
    ASSERT_TRUE(stub->GetReport(&ctx, req, &report).ok());
  }
  ASSERT_EQ(report.verdict(), v1::NONDETERMINISTIC) << report.summary();
  const v1::Divergence& d = report.divergence();
  ASSERT_LE(d.step(), 3) << d.DebugString();
  if (d.tensor().role() == v1::WEIGHT) {
    // A weight cannot part first by itself (its update is elementwise on
    // tensors that agreed): a WEIGHT divergence is the injected fault.
    // Anything else (step 3's forward and backward come before its update)
    // is one of DEFAULT's own.
    EXPECT_EQ(d.step(), 3) << d.DebugString();
    EXPECT_EQ(d.tensor().layer(), "fc1") << d.DebugString();
  }
  ASSERT_FALSE(d.tensor().op().empty());
  std::string phase = v1::Phase_Name(d.tensor().phase()).substr(6);
  for (char& c : phase) c = std::tolower(static_cast<unsigned char>(c));
  const std::string layer =
      d.tensor().layer().empty() ? "(batch)" : d.tensor().layer();

  // The job page: the map marks that layer's row of that phase at that
  // step as the first divergence, and the panel names the op and the cause.
  const std::string job_route = "#/jobs/" + job.job_id();
  const std::string dom = Dom(job_route, "id=\"first-divergence\"");
  EXPECT_THAT(dom, HasSubstr("data-verdict=\"NONDETERMINISTIC\""));
  const size_t row = dom.find(
      absl::StrCat("data-layer=\"", layer, "\" data-phase=\"", phase, "\""));
  ASSERT_NE(row, std::string::npos) << layer << " " << phase << "\n" << dom;
  const size_t cell = dom.find("id=\"first-divergence-cell\"");
  ASSERT_NE(cell, std::string::npos) << dom;
  EXPECT_GT(cell, row);
  EXPECT_LT(cell, dom.find("</tr>", row))
      << "not in the row of " << layer << " " << phase;
  const size_t cell_start = dom.rfind("<td", cell);
  EXPECT_THAT(dom.substr(cell_start, dom.find('>', cell) - cell_start),
              HasSubstr(absl::StrCat("data-step=\"", d.step(), "\"")));
  // No difference before that step anywhere on the map.
  int marked = 0;
  for (size_t at = dom.find("class=\"c d"); at != std::string::npos;
       at = dom.find("class=\"c d", at + 1)) {
    const size_t step_at = dom.find("data-step=\"", at) + 11;
    int step = -1;
    ASSERT_TRUE(absl::SimpleAtoi(
        dom.substr(step_at, dom.find('"', step_at) - step_at), &step));
    EXPECT_GE(step, d.step());
    ++marked;
  }
  EXPECT_GT(marked, 1);
  EXPECT_THAT(dom,
              HasSubstr(absl::StrCat("<dd class=\"mono\" id=\"divergence-op\">",
                                     d.tensor().op(), "</dd>")));
  if (d.cause().id().empty()) {
    EXPECT_THAT(dom, HasSubstr("id=\"divergence-cause\">not inferred"));
  } else {
    EXPECT_THAT(dom, HasSubstr(absl::StrCat("id=\"divergence-cause\"><b>",
                                            d.cause().id(), "</b>")));
  }
  EXPECT_THAT(dom, HasSubstr("id=\"loss-chart\""));
  EXPECT_THAT(dom, HasSubstr("class=\"disagree\""));

  // The jobs list, filtered by verdict, finds exactly that job.
  const std::string list =
      Dom("#/jobs?state=JOB_SUCCEEDED&verdict=NONDETERMINISTIC", "id=\"jobs\"");
  EXPECT_THAT(list, HasSubstr("data-job=\"" + job.job_id() + "\""));
  EXPECT_EQ(list.find("data-job=\""), list.rfind("data-job=\""));

  // A fleet audit: the faulty machine is the outlier.
  auto audit = cluster_->Cli({"audit", "start", "mlp", "--json"});
  ASSERT_THAT(audit, IsOk());
  ASSERT_EQ(audit->exit_code, 0) << audit->out << audit->err;
  const std::string fleet = Dom("#/fleet", "data-health=\"OUTLIER\"");
  const size_t drill = fleet.find("data-worker=\"drill\"");
  ASSERT_NE(drill, std::string::npos) << fleet;
  const size_t drill_end = fleet.find("</tr>", drill);
  const std::string drill_row = fleet.substr(drill, drill_end - drill);
  EXPECT_THAT(drill_row, HasSubstr("data-health=\"OUTLIER\""));
  EXPECT_THAT(drill_row, HasSubstr(">OUTLIER</span>"));
  for (const char* healthy : {"node-1", "node-2", "node-3"}) {
    const size_t at = fleet.find(absl::StrCat("data-worker=\"", healthy, "\""));
    ASSERT_NE(at, std::string::npos) << healthy;
    EXPECT_THAT(fleet.substr(at, fleet.find("</tr>", at) - at),
                HasSubstr("data-health=\"HEALTHY\""))
        << healthy;
  }
  const std::string audits = Dom("#/audits", "data-audit=");
  EXPECT_THAT(audits,
              HasSubstr("data-worker=\"drill\" data-health=\"OUTLIER\""));
  EXPECT_THAT(audits, HasSubstr("step 3, fc1 optimizer WEIGHT"));

  // A CANONICAL job on one worker earns a RUN_TO_RUN certificate, which
  // the certificates matrix shows.
  auto certified = cluster_->Cli(
      {"submit", cluster_->Runfile("examples/mlp/model.json"),
       cluster_->Runfile("examples/mlp/config.json"), "--runs=2",
       "--scope=same_worker", "--worker_labels=role=cert", "--watch"});
  ASSERT_THAT(certified, IsOk());
  const std::string certs = Dom("#/certificates", "id=\"certificate-matrix\"");
  EXPECT_THAT(certs, HasSubstr("id=\"certificate-matrix\""));
  EXPECT_THAT(certs, HasSubstr(">RUN_TO_RUN</a>"));
  EXPECT_THAT(certs, Not(HasSubstr(">null<")));

  // Screenshots of every view (light, and the job page in dark mode too).
  Screenshot("#/jobs", "jobs");
  Screenshot(job_route, "job", /*dark=*/false, /*height=*/1500);
  Screenshot(job_route, "job-dark", /*dark=*/true, /*height=*/1500);
  Screenshot("#/certificates", "certificates");
  Screenshot("#/fleet", "fleet");
  Screenshot("#/audits", "audits");
}

}  // namespace
}  // namespace lockstep
