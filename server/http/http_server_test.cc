// The HTTP listener of an in-process coordinator: off unless configured,
// refused with a clear error for a bad or taken address, and answering
// every read-only resource while the store refuses all writes (the
// dashboard and the API never write).
#include "server/http/http_server.h"

#include <memory>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "server/coordinator.h"

namespace lockstep::server {
namespace {

using ::lockstep::testing::IsOk;
using ::testing::HasSubstr;

CoordinatorOptions Options(const std::string& http_listen) {
  CoordinatorOptions o;
  o.listen_address = "127.0.0.1:0";
  o.store.path = ":memory:";
  o.heartbeat_interval_ms = 100;
  o.heartbeat_timeout_ms = 500;
  o.http_listen = http_listen;
  return o;
}

TEST(HttpServer, OffUnlessConfigured) {
  auto c = Coordinator::Start(Options(""));
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ((*c)->http_port(), 0);
}

TEST(HttpServer, BadOrTakenAddressIsRefused) {
  for (const std::string& bad : {"nonsense", "127.0.0.1:99999", ":x"}) {
    auto c = Coordinator::Start(Options(bad));
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(c.status().message(), HasSubstr("http_listen: \"" + bad))
        << bad;
  }
  auto first = Coordinator::Start(Options("127.0.0.1:0"));
  ASSERT_THAT(first, IsOk());
  const std::string taken =
      "127.0.0.1:" + std::to_string((*first)->http_port());
  auto second = Coordinator::Start(Options(taken));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(),
              HasSubstr("http_listen: cannot listen on " + taken));
}

TEST(HttpServer, EveryReadAnswersWhileTheStoreRefusesWrites) {
  auto c = Coordinator::Start(Options("127.0.0.1:0"));
  ASSERT_THAT(c, IsOk());
  ASSERT_GT((*c)->http_port(), 0);
  ASSERT_THAT((*c)->store()->SetReadOnlyForTesting(true), IsOk());
  httplib::Client client("127.0.0.1", (*c)->http_port());
  client.set_read_timeout(10);
  for (const char* path :
       {"/healthz", "/readyz", "/metrics", "/", "/app.js", "/style.css",
        "/api/v1/jobs", "/api/v1/jobs?state=JOB_RUNNING&label=a%3Db",
        "/api/v1/certificates", "/api/v1/workers?include_gone=true",
        "/api/v1/audits", "/api/v1/workers/w-0/history"}) {
    auto r = client.Get(path);
    ASSERT_TRUE(r) << path << ": " << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200) << path << ": " << r->body;
  }
  // Unknown resources are 404 with the gRPC code, not a write attempt.
  for (const char* path :
       {"/api/v1/jobs/job-0", "/api/v1/jobs/job-0/report",
        "/api/v1/audits/audit-0", "/api/v1/certificates/cert-0"}) {
    auto r = client.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 404) << path << ": " << r->body;
    EXPECT_THAT(r->body, HasSubstr("\"code\":\"NOT_FOUND\"")) << path;
  }
  // The dashboard's assets are compiled in.
  auto page = client.Get("/");
  ASSERT_TRUE(page);
  EXPECT_THAT(page->body, HasSubstr("<meta charset=\"utf-8\">"));
  EXPECT_THAT(page->get_header_value("Content-Type"), HasSubstr("text/html"));
  auto script = client.Get("/app.js");
  ASSERT_TRUE(script);
  EXPECT_THAT(script->body, HasSubstr("divergence_map"));
  ASSERT_THAT((*c)->store()->SetReadOnlyForTesting(false), IsOk());
}

}  // namespace
}  // namespace lockstep::server
