// The HTTP listener of an in-process coordinator: off unless configured,
// refused with a clear error for a bad or taken address, and answering
// every read-only resource while the store refuses all writes (the
// dashboard and the API never write).
#include "server/http/http_server.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "server/auth.h"
#include "server/certs.h"
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
  for (const char* bad : {"nonsense", "127.0.0.1:99999", ":x"}) {
    auto c = Coordinator::Start(Options(bad));
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(c.status().message(),
                HasSubstr(std::string("http_listen: \"") + bad))
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

// A token of `role` named after it, straight into the store.
std::string AddToken(store::Store* s, const std::string& role) {
  absl::StatusOr<std::string> token = NewToken();
  EXPECT_THAT(token, IsOk());
  store::TokenRecord t;
  t.name = role;
  t.role = role;
  t.token_sha256 = TokenSha256Hex(*token);
  EXPECT_THAT(s->InsertToken(t, store::AdminLogEntry()), IsOk());
  return *token;
}

TEST(HttpServer, TokensOverHttps) {
  const std::string dir =
      std::string(std::getenv("TEST_TMPDIR")) + "/https-certs";
  CertsOptions certs;
  certs.out_dir = dir;
  ASSERT_THAT(WriteTestCertificates(certs), IsOk());
  CoordinatorOptions o = Options("127.0.0.1:0");
  o.tls_cert_file = dir + "/server.crt";
  o.tls_key_file = dir + "/server.key";
  o.auth.require_tokens = true;
  auto c = Coordinator::Start(o);
  ASSERT_THAT(c, IsOk());
  const std::string viewer = AddToken((*c)->store(), "viewer");
  const std::string admin = AddToken((*c)->store(), "admin");

  httplib::SSLClient client("127.0.0.1", (*c)->http_port());
  client.set_ca_cert_path((dir + "/ca.crt").c_str());
  client.enable_server_certificate_verification(true);
  client.set_read_timeout(10);
  auto get = [&](const std::string& path, const std::string& token) {
    httplib::Headers h;
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    auto r = client.Get(path.c_str(), h);
    EXPECT_TRUE(r) << path << ": " << httplib::to_string(r.error());
    return r ? r->status : -1;
  };
  // Probes, metrics and the static dashboard stay open.
  for (const char* path : {"/healthz", "/readyz", "/metrics", "/", "/app.js"}) {
    EXPECT_EQ(get(path, ""), 200) << path;
  }
  // The API needs a token; the admin log needs an admin.
  EXPECT_EQ(get("/api/v1/jobs", ""), 401);
  EXPECT_EQ(get("/api/v1/jobs", "lst_not-a-token"), 401);
  EXPECT_EQ(get("/api/v1/jobs", viewer), 200);
  EXPECT_EQ(get("/api/v1/workers", viewer), 200);
  EXPECT_EQ(get("/api/v1/admin_log", viewer), 403);
  EXPECT_EQ(get("/api/v1/admin_log", admin), 200);
  auto r = client.Get("/api/v1/jobs");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer");
  EXPECT_THAT(r->body, HasSubstr("UNAUTHENTICATED"));

  // Plain HTTP against the HTTPS port gets no answer.
  httplib::Client plain("127.0.0.1", (*c)->http_port());
  plain.set_read_timeout(2);
  auto p = plain.Get("/healthz");
  EXPECT_TRUE(!p || p->status != 200);
}

}  // namespace
}  // namespace lockstep::server
