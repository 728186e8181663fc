// The HTTP listener of a real coordinator with real workers on loopback:
// the JSON API answers exactly what the gRPC API answers for the same
// resources, bad parameters get 400 naming the parameter and its limit,
// and /metrics moves as a job runs and parses with Prometheus's promtool.
#include <cctype>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/testing/cluster.h"

namespace lockstep {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::lockstep::testing::Cluster;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::PollUntil;
using ::lockstep::testing::ReadFileOrEmpty;
using ::lockstep::testing::RunCommand;
using ::lockstep::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kPromtool[] = "/usr/bin/promtool";

class HttpApiE2E : public ::testing::Test {
 protected:
  // One cluster for the whole suite: two workers and one finished job.
  static void SetUpTestSuite() {
    dir_ = new std::string(TempDir() + "/http_api");
    ASSERT_EQ(std::system(("mkdir -p " + *dir_).c_str()), 0);
    cluster_ = new Cluster(*dir_);
    const std::string http_port_file = *dir_ + "/http_port";
    ASSERT_GT(
        cluster_->StartCoordinator(
            0, {"--heartbeat_interval_ms=200", "--heartbeat_timeout_ms=2000",
                "--lease_ms=3000", "--zoo_dir=" + cluster_->Runfile("examples"),
                "--http_listen=127.0.0.1:0",
                "--http_port_file=" + http_port_file}),
        0);
    ASSERT_TRUE(absl::SimpleAtoi(
        absl::StripAsciiWhitespace(ReadFileOrEmpty(http_port_file)),
        &http_port_));
    ASSERT_GT(http_port_, 0);
    for (const char* name : {"api-1", "api-2"}) {
      const std::string id = *dir_ + "/" + name + ".machine-id";
      std::ofstream(id) << "simulated-machine-" << name << "\n";
      cluster_->StartWorker(name, {"--machine_id_file=" + id});
    }
    ASSERT_TRUE(PollUntil(absl::Seconds(60), [] {
      return cluster_->IsConnected("api-1") && cluster_->IsConnected("api-2");
    }));
  }

  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    delete dir_;
  }

  void TearDown() override {
    if (HasFailure()) std::printf("%s\n", cluster_->Logs().c_str());
  }

  struct Answer {
    int status = 0;
    std::string body;
  };
  static Answer Get(const std::string& path) {
    httplib::Client client("127.0.0.1", http_port_);
    client.set_connection_timeout(5);
    client.set_read_timeout(30);
    auto r = client.Get(path.c_str());
    if (!r) return {-1, httplib::to_string(r.error())};
    return {r->status, r->body};
  }

  template <typename M>
  static M GetProto(const std::string& path) {
    const Answer a = Get(path);
    EXPECT_EQ(a.status, 200) << path << ": " << a.body;
    M m;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(a.body, &m).ok())
        << a.body;
    return m;
  }

  static grpc::ClientContext* Context(grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(10));
    return ctx;
  }

  // Submits an mlp job over both workers and waits for its verdict.
  static std::string RunJob() {
    auto r = cluster_->Cli(
        {"submit", cluster_->Runfile("examples/mlp/model.json"),
         cluster_->Runfile("examples/mlp/config.json"), "--runs=2",
         "--scope=same_class", "--labels=suite=http", "--json"});
    EXPECT_THAT(r, IsOk());
    v1::Job job;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r->out, &job).ok())
        << r->out << r->err;
    auto w = cluster_->Cli({"watch", job.job_id()});
    EXPECT_THAT(w, IsOk());
    return job.job_id();
  }

  // The value of one sample of a metrics page ("name{labels}"), or -1.
  static double Sample(const std::string& page, const std::string& series) {
    for (absl::string_view line : absl::StrSplit(page, '\n')) {
      if (absl::ConsumePrefix(&line, series) &&
          absl::ConsumePrefix(&line, " ")) {
        double v = 0;
        if (absl::SimpleAtod(line, &v)) return v;
      }
    }
    return -1;
  }

  static std::string* dir_;
  static Cluster* cluster_;
  static int http_port_;
};

std::string* HttpApiE2E::dir_ = nullptr;
Cluster* HttpApiE2E::cluster_ = nullptr;
int HttpApiE2E::http_port_ = 0;

TEST_F(HttpApiE2E, HealthAndReadiness) {
  EXPECT_EQ(Get("/healthz").status, 200);
  const Answer ready = Get("/readyz");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(ready.body, "ready\n");
  const Answer page = Get("/");
  EXPECT_EQ(page.status, 200);
  EXPECT_THAT(page.body, HasSubstr("<meta charset=\"utf-8\">"));
  EXPECT_EQ(Get("/app.js").status, 200);
  EXPECT_EQ(Get("/api/v1/nothing").status, 404);
}

TEST_F(HttpApiE2E, MetricsMoveAsAJobRunsAndParseWithPromtool) {
  const std::string before = Get("/metrics").body;
  const double fingerprints =
      Sample(before, "lockstep_fingerprints_ingested_total");
  ASSERT_GE(fingerprints, 0) << before;
  const double reproducible = std::max(
      0.0, Sample(before, "lockstep_verdicts_total{verdict=\"REPRODUCIBLE\"}"));
  const std::string job_id = RunJob();
  ASSERT_FALSE(job_id.empty());

  // The verdict is stored before GetJob says finished; the counters with it.
  const Answer after = Get("/metrics");
  ASSERT_EQ(after.status, 200);
  // mlp: 50 steps, every step captured, two runs.
  EXPECT_GT(Sample(after.body, "lockstep_fingerprints_ingested_total"),
            fingerprints + 100);
  EXPECT_GT(Sample(after.body, "lockstep_fingerprint_bytes_ingested_total"), 0);
  EXPECT_EQ(
      Sample(after.body, "lockstep_verdicts_total{verdict=\"REPRODUCIBLE\"}"),
      reproducible + 1);
  EXPECT_GT(Sample(after.body, "lockstep_ingest_latency_seconds_count"), 0);
  EXPECT_GE(Sample(after.body, "lockstep_commit_latency_seconds_count"), 2);
  EXPECT_GE(Sample(after.body,
                   "lockstep_rpcs_total{method=\"/lockstep.v1."
                   "Lockstep/SubmitJob\",code=\"OK\"}"),
            1);
  EXPECT_GE(Sample(after.body,
                   "lockstep_rpc_latency_seconds_count{method=\"/"
                   "lockstep.v1.Lockstep/SubmitJob\"}"),
            1);
  EXPECT_GE(Sample(after.body,
                   "lockstep_jobs_finished_total{state=\"JOB_"
                   "SUCCEEDED\"}"),
            1);
  EXPECT_GE(Sample(after.body, "lockstep_store_bytes{file=\"db\"}"), 4096);
  EXPECT_THAT(after.body,
              HasSubstr("lockstep_workers{state=\"WORKER_CONNECTED\","
                        "admin_state=\"ACTIVE\",hardware_class_digest=\""));
  // An error code is counted too.
  {
    auto stub = cluster_->Stub();
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id("no-such-job");
    v1::Job job;
    EXPECT_FALSE(stub->GetJob(Context(&ctx), req, &job).ok());
  }
  EXPECT_GE(Sample(Get("/metrics").body,
                   "lockstep_rpcs_total{method=\"/lockstep.v1.Lockstep/"
                   "GetJob\",code=\"NOT_FOUND\"}"),
            1);

  // Every metric the Grafana dashboard queries is on the page.
  const std::string dashboard =
      ReadFileOrEmpty(cluster_->Runfile("deploy/grafana/lockstep.json"));
  ASSERT_FALSE(dashboard.empty());
  int queried = 0;
  for (size_t at = dashboard.find("lockstep_"); at != std::string::npos;
       at = dashboard.find("lockstep_", at + 1)) {
    size_t end = at;
    while (end < dashboard.size() &&
           (std::isalnum(static_cast<unsigned char>(dashboard[end])) ||
            dashboard[end] == '_')) {
      ++end;
    }
    std::string name = dashboard.substr(at, end - at);
    if (absl::EndsWith(name, "_bucket")) {
      name = name.substr(0, name.size() - 7);
    }
    EXPECT_THAT(after.body, HasSubstr("# TYPE " + name + " "))
        << "deploy/grafana/lockstep.json queries " << name;
    ++queried;
    at = end;
  }
  EXPECT_GT(queried, 10);

  if (access(kPromtool, X_OK) != 0) {
    GTEST_SKIP() << kPromtool
                 << " is missing (Debian package prometheus, installed by "
                    "deploy/install-deps.sh): the exposition format was not "
                    "checked by Prometheus's parser";
  }
  const std::string file = *dir_ + "/metrics.txt";
  std::ofstream(file) << after.body;
  auto check = RunCommand(
      {"/bin/sh", "-c", std::string(kPromtool) + " check metrics < " + file},
      absl::Seconds(60));
  ASSERT_THAT(check, IsOk());
  EXPECT_EQ(check->exit_code, 0) << check->out << check->err;
}

TEST_F(HttpApiE2E, JsonAnswersEqualTheGrpcAnswers) {
  const std::string job_id = RunJob();
  RunJob();  // two jobs, for paging
  auto stub = cluster_->Stub();

  // ListJobs, page by page, with a filter.
  v1::ListJobsRequest list_req;
  list_req.set_page_size(1);
  (*list_req.mutable_labels())["suite"] = "http";
  std::string token;
  int pages = 0;
  do {
    list_req.set_page_token(token);
    grpc::ClientContext ctx;
    v1::ListJobsResponse grpc_page;
    ASSERT_TRUE(stub->ListJobs(Context(&ctx), list_req, &grpc_page).ok());
    const auto http_page = GetProto<v1::ListJobsResponse>(
        "/api/v1/jobs?page_size=1&label=suite%3Dhttp&page_token=" +
        httplib::detail::encode_query_param(token));
    EXPECT_TRUE(MessageDifferencer::Equals(grpc_page, http_page))
        << grpc_page.DebugString() << "\nvs\n"
        << http_page.DebugString();
    ASSERT_EQ(http_page.jobs_size(), 1);
    token = grpc_page.next_page_token();
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_GE(pages, 2);
  {
    grpc::ClientContext ctx;
    v1::ListJobsRequest r;
    r.set_state(v1::JOB_SUCCEEDED);
    r.set_verdict(v1::REPRODUCIBLE);
    v1::ListJobsResponse grpc_page;
    ASSERT_TRUE(stub->ListJobs(Context(&ctx), r, &grpc_page).ok());
    EXPECT_TRUE(MessageDifferencer::Equals(
        grpc_page,
        GetProto<v1::ListJobsResponse>(
            "/api/v1/jobs?state=JOB_SUCCEEDED&verdict=REPRODUCIBLE")));
    EXPECT_GE(grpc_page.jobs_size(), 2);
  }

  // GetJob and GetReport.
  v1::Job job;
  {
    grpc::ClientContext ctx;
    v1::GetJobRequest r;
    r.set_job_id(job_id);
    ASSERT_TRUE(stub->GetJob(Context(&ctx), r, &job).ok());
    EXPECT_TRUE(MessageDifferencer::Equals(
        job, GetProto<v1::Job>("/api/v1/jobs/" + job_id)));
  }
  v1::Report report;
  {
    grpc::ClientContext ctx;
    v1::GetReportRequest r;
    r.set_job_id(job_id);
    ASSERT_TRUE(stub->GetReport(Context(&ctx), r, &report).ok());
    EXPECT_TRUE(MessageDifferencer::Equals(
        report, GetProto<v1::Report>("/api/v1/jobs/" + job_id + "/report")));
    EXPECT_EQ(report.verdict(), v1::REPRODUCIBLE);
  }
  {
    grpc::ClientContext ctx;
    v1::CompareRunsRequest r;
    r.set_run_a(job.runs(0).run_id());
    r.set_run_b(job.runs(1).run_id());
    v1::CompareRunsResponse grpc_cmp;
    ASSERT_TRUE(stub->CompareRuns(Context(&ctx), r, &grpc_cmp).ok());
    EXPECT_TRUE(MessageDifferencer::Equals(
        grpc_cmp,
        GetProto<v1::CompareRunsResponse>("/api/v1/compare?run_a=" + r.run_a() +
                                          "&run_b=" + r.run_b())));
  }

  // Certificates: the list and each one.
  {
    grpc::ClientContext ctx;
    v1::ListCertificatesRequest r;
    r.set_model_digest(job.model_digest());
    v1::ListCertificatesResponse grpc_certs;
    ASSERT_TRUE(stub->ListCertificates(Context(&ctx), r, &grpc_certs).ok());
    ASSERT_GE(grpc_certs.certificates_size(), 1);
    EXPECT_TRUE(MessageDifferencer::Equals(
        grpc_certs,
        GetProto<v1::ListCertificatesResponse>(
            "/api/v1/certificates?model_digest=" + job.model_digest())));
    const std::string id = grpc_certs.certificates(0).certificate_id();
    EXPECT_TRUE(MessageDifferencer::Equals(
        grpc_certs.certificates(0),
        GetProto<v1::Certificate>("/api/v1/certificates/" + id)));
  }

  // Workers (the clock and heartbeat times move between the two calls).
  {
    grpc::ClientContext ctx;
    v1::ListWorkersRequest r;
    r.set_include_gone(true);
    v1::ListWorkersResponse grpc_workers;
    ASSERT_TRUE(stub->ListWorkers(Context(&ctx), r, &grpc_workers).ok());
    auto http_workers =
        GetProto<v1::ListWorkersResponse>("/api/v1/workers?include_gone=true");
    for (auto* list : {&grpc_workers, &http_workers}) {
      list->clear_server_unix_ms();
      for (auto& w : *list->mutable_workers()) w.clear_last_heartbeat_unix_ms();
    }
    EXPECT_TRUE(MessageDifferencer::Equals(grpc_workers, http_workers))
        << grpc_workers.DebugString() << "\nvs\n"
        << http_workers.DebugString();
    EXPECT_EQ(http_workers.workers_size(), 2);
  }

  // Audits: one (two devices: no majority), listed and fetched.
  {
    auto r = cluster_->Cli({"audit", "start", "mlp", "--json"});
    ASSERT_THAT(r, IsOk());
    grpc::ClientContext ctx;
    v1::ListAuditsResponse grpc_audits;
    ASSERT_TRUE(
        stub->ListAudits(Context(&ctx), v1::ListAuditsRequest(), &grpc_audits)
            .ok());
    ASSERT_GE(grpc_audits.audits_size(), 1);
    EXPECT_TRUE(MessageDifferencer::Equals(
        grpc_audits, GetProto<v1::ListAuditsResponse>("/api/v1/audits")));
    const v1::Audit& audit = grpc_audits.audits(0);
    EXPECT_TRUE(MessageDifferencer::Equals(
        audit, GetProto<v1::Audit>("/api/v1/audits/" + audit.audit_id())));
  }

  // Errors carry the gRPC code's meaning.
  const Answer missing = Get("/api/v1/jobs/no-such-job");
  EXPECT_EQ(missing.status, 404);
  EXPECT_THAT(missing.body, HasSubstr("\"code\":\"NOT_FOUND\""));
}

TEST_F(HttpApiE2E, DivergenceMapAndLossOfAReproducibleJob) {
  const std::string job_id = RunJob();
  const Answer map = Get("/api/v1/jobs/" + job_id + "/divergence_map");
  ASSERT_EQ(map.status, 200) << map.body;
  EXPECT_THAT(map.body, HasSubstr("\"differingTotal\":0,\"first\":null"));
  EXPECT_THAT(map.body, HasSubstr("{\"layer\":\"fc1\",\"phase\":\"forward\""));
  EXPECT_THAT(map.body, HasSubstr("\"phase\":\"optimizer\""));
  EXPECT_THAT(map.body, HasSubstr("\"truncated\":false"));
  const Answer cut =
      Get("/api/v1/jobs/" + job_id + "/divergence_map?max_steps=5");
  EXPECT_THAT(cut.body, HasSubstr("\"steps\":[0,1,2,3,4],"));
  EXPECT_THAT(cut.body, HasSubstr("\"truncated\":true"));
  const Answer loss = Get("/api/v1/jobs/" + job_id + "/loss");
  ASSERT_EQ(loss.status, 200) << loss.body;
  // Two runs, every step, the same losses (the runs are bit-identical).
  const size_t first = loss.body.find("\"loss\":[");
  const size_t second = loss.body.find("\"loss\":[", first + 1);
  ASSERT_NE(second, std::string::npos) << loss.body;
  const std::string a =
      loss.body.substr(first, loss.body.find(']', first) - first);
  const std::string b =
      loss.body.substr(second, loss.body.find(']', second) - second);
  EXPECT_EQ(a, b);
  EXPECT_EQ(std::count(a.begin(), a.end(), ','), 49) << a;
}

TEST_F(HttpApiE2E, BadParametersGet400NamingTheParameterAndTheLimit) {
  struct Case {
    std::string path, want;
  };
  for (const Case& c : std::vector<Case>{
           {"/api/v1/jobs?page_size=501",
            "page_size: \\\"501\\\" is not an "
            "integer in 0..500"},
           {"/api/v1/jobs?page_size=-1",
            "page_size: \\\"-1\\\" is not an "
            "integer in 0..500"},
           {"/api/v1/jobs?page_size=ten", "page_size"},
           {"/api/v1/jobs?state=DONE",
            "state: \\\"DONE\\\" is not one of "
            "JOB_QUEUED, JOB_RUNNING"},
           {"/api/v1/jobs?label=nokey",
            "label: \\\"nokey\\\" is not key=value"},
           {"/api/v1/jobs?colour=red",
            "colour: unknown parameter (known: "
            "page_size, page_token, state"},
           {"/api/v1/jobs?page_size=1&page_size=2",
            "page_size: given more "
            "than once"},
           {"/api/v1/jobs?model_digest=" + std::string(300, 'a'),
            "model_digest: 300 bytes, at most 256"},
           {"/api/v1/certificates?level=HIGH",
            "level: \\\"HIGH\\\" is not one"},
           {"/api/v1/audits?page_size=100000", "in 0..500"},
           {"/api/v1/workers?include_gone=maybe", "include_gone"},
           {"/api/v1/jobs/x/divergence_map?max_steps=5000",
            "max_steps: \\\"5000\\\" is not an integer in 1..1000"},
       }) {
    const Answer a = Get(c.path);
    EXPECT_EQ(a.status, 400) << c.path << ": " << a.body;
    EXPECT_THAT(a.body, HasSubstr(c.want)) << c.path;
    EXPECT_THAT(a.body, HasSubstr("\"code\":\"INVALID_ARGUMENT\"")) << c.path;
  }
}

}  // namespace
}  // namespace lockstep
