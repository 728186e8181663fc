// TLS, worker certificates and bearer tokens with real binaries on
// loopback: a coordinator with --tls_cert/--tls_key/--worker_ca, workers
// with and without valid certificates, and the CLI over TLS with tokens.
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"

namespace lockstep::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Every worker skips its start-up selftest (seconds of CPU) here.
const std::vector<std::string> kQuick = {"--selftest=false"};

class SecurityE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A folder of its own per test: certificates are never overwritten.
    dir_ = absl::StrCat(
        std::getenv("TEST_TMPDIR"), "/",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_EQ(mkdir(dir_.c_str(), 0755), 0) << dir_;
    cluster_ = std::make_unique<Cluster>(dir_);
    certs_ = dir_ + "/certs";
    // The CA, server, client and two worker certificates; a second CA
    // whose worker certificate the coordinator must refuse.
    Coordinator({"certs", "--out_dir=" + certs_, "--workers=w1,w2"});
    Coordinator({"certs", "--out_dir=" + dir_ + "/other", "--workers=w1"});
    admin_ = Coordinator({"tokens", "create", "--name=ops", "--role=admin"});
    viewer_ = Coordinator({"tokens", "create", "--name=dash", "--role=viewer"});
    ASSERT_TRUE(absl::StartsWith(admin_, "lst_")) << admin_;
    ASSERT_GT(
        cluster_->StartCoordinator(0, {"--tls_cert=" + certs_ + "/server.crt",
                                       "--tls_key=" + certs_ + "/server.key",
                                       "--worker_ca=" + certs_ + "/ca.crt"}),
        0)
        << cluster_->Logs();
  }

  // Runs a coordinator subcommand on the test's database; its stdout.
  std::string Coordinator(std::vector<std::string> args) {
    args.insert(args.begin(), cluster_->Runfile("server/lockstep-coordinator"));
    args.push_back("--db=" + cluster_->db());
    absl::StatusOr<CommandResult> r = RunCommand(args, absl::Seconds(60));
    EXPECT_TRUE(r.ok() && r->exit_code == 0)
        << (r.ok() ? r->err : r.status().ToString());
    return r.ok() ? std::string(absl::StripAsciiWhitespace(r->out)) : "";
  }

  std::vector<std::string> Tls(const std::string& worker) const {
    return {"--ca=" + certs_ + "/ca.crt",
            "--cert=" + certs_ + "/worker-" + worker + ".crt",
            "--key=" + certs_ + "/worker-" + worker + ".key",
            "--selftest=false"};
  }

  // `lockstep workers --json` over TLS with the admin token.
  std::string Workers() {
    absl::StatusOr<CommandResult> r =
        cluster_->Cli({"--ca=" + certs_ + "/ca.crt", "--token=" + admin_,
                       "workers", "--json"},
                      absl::Seconds(20));
    return r.ok() && r->exit_code == 0 ? r->out : "";
  }

  bool Connected(const std::string& name) {
    return absl::StrContains(Workers(), absl::StrCat("\"", name, "\""));
  }

  std::string dir_, certs_, admin_, viewer_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(SecurityE2eTest, OnlyWorkersWithAValidCertificateConnect) {
  // No client certificate (a valid worker token does not replace it): the
  // daemon is refused and exits, naming the flag it lacks.
  const std::string worker_token =
      Coordinator({"tokens", "create", "--name=fleet", "--role=worker"});
  Subprocess* bare = cluster_->StartWorker(
      "bare", {"--ca=" + certs_ + "/ca.crt", "--token=" + worker_token,
               "--selftest=false"});
  ASSERT_NE(bare, nullptr);
  std::optional<int> status = bare->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.has_value()) << cluster_->Logs();
  EXPECT_NE(*status, 0);
  EXPECT_THAT(ReadFileOrEmpty(dir_ + "/bare.log"),
              HasSubstr("client certificate signed by the coordinator's "
                        "--worker_ca"));

  // A certificate from another CA fails the TLS handshake: never connects.
  cluster_->StartWorker(
      "w1",
      {"--ca=" + certs_ + "/ca.crt", "--cert=" + dir_ + "/other/worker-w1.crt",
       "--key=" + dir_ + "/other/worker-w1.key", "--selftest=false"});
  // Plaintext against the TLS port does not connect either.
  cluster_->StartWorker("w2", kQuick);
  absl::SleepFor(absl::Seconds(2));
  EXPECT_FALSE(Connected("w1")) << cluster_->Logs();
  EXPECT_FALSE(Connected("w2")) << cluster_->Logs();

  // The right certificate connects.
  cluster_->StartWorker("w1", Tls("w1"));
  EXPECT_TRUE(PollUntil(absl::Seconds(30), [&] { return Connected("w1"); }))
      << cluster_->Logs();
}

TEST_F(SecurityE2eTest, ASecondWorkerCannotTakeAConnectedWorkersName) {
  cluster_->StartWorker("w1", Tls("w1"));
  ASSERT_TRUE(PollUntil(absl::Seconds(30), [&] { return Connected("w1"); }))
      << cluster_->Logs();

  // w2's certificate claiming the name w1: refused for good.
  std::vector<std::string> impostor = Tls("w2");
  impostor.push_back("--name=w1");
  Subprocess* p = cluster_->StartWorker("impostor", impostor);
  ASSERT_NE(p, nullptr);
  std::optional<int> status = p->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.has_value()) << cluster_->Logs();
  EXPECT_NE(*status, 0);
  EXPECT_THAT(ReadFileOrEmpty(dir_ + "/impostor.log"),
              HasSubstr("\"w1\" is not this worker's certificate identity "
                        "(w2)"));

  // The same certificate a second time, while the first is connected: the
  // registry refuses the name (ALREADY_EXISTS) and the first keeps it.
  std::vector<std::string> twin = Tls("w1");
  twin.push_back("--name=w1");
  cluster_->StartWorker("twin", twin);
  EXPECT_TRUE(PollUntil(absl::Seconds(20), [&] {
    return absl::StrContains(ReadFileOrEmpty(dir_ + "/twin.log"),
                             "is already connected from");
  })) << cluster_->Logs();
  EXPECT_THAT(ReadFileOrEmpty(dir_ + "/twin.log"),
              Not(HasSubstr("connected to ")));
  EXPECT_TRUE(Connected("w1"));
}

TEST_F(SecurityE2eTest, CliOverTlsWithTokens) {
  cluster_->StartWorker("w1", Tls("w1"));
  ASSERT_TRUE(PollUntil(absl::Seconds(30), [&] { return Connected("w1"); }))
      << cluster_->Logs();
  const std::string ca = "--ca=" + certs_ + "/ca.crt";

  // A viewer reads; its token also works from a file and the environment.
  absl::StatusOr<CommandResult> r =
      cluster_->Cli({ca, "--token=" + viewer_, "workers"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_THAT(r->out, HasSubstr("w1"));

  // ... but may not quarantine; the admin may, and it is logged.
  r = cluster_->Cli({ca, "--token=" + viewer_, "workers", "quarantine", "w1"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_THAT(r->err, HasSubstr("PERMISSION_DENIED"));
  r = cluster_->Cli(
      {ca, "--token=" + admin_, "workers", "quarantine", "w1", "--reason=e2e"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_THAT(Coordinator({"admin-log"}), HasSubstr("ops set_worker_state"));

  // No token: UNAUTHENTICATED. A client certificate alone grants nothing.
  r = cluster_->Cli({ca, "--cert=" + certs_ + "/client.crt",
                     "--key=" + certs_ + "/client.key", "workers"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_THAT(r->err, HasSubstr("UNAUTHENTICATED"));
  // With a client certificate and a token: works (mutual TLS).
  r = cluster_->Cli({ca, "--cert=" + certs_ + "/client.crt",
                     "--key=" + certs_ + "/client.key", "--token=" + viewer_,
                     "workers"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0) << r->err;

  // Plaintext against the TLS port fails.
  r = cluster_->Cli({"--token=" + viewer_, "--timeout_ms=2000", "workers"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 3);

  // A revoked token stops working at once, coordinator still running.
  Coordinator({"tokens", "revoke", "--name=dash"});
  r = cluster_->Cli({ca, "--token=" + viewer_, "workers"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_THAT(r->err, HasSubstr("bearer token \"dash\" was revoked"));
  EXPECT_THAT(Coordinator({"tokens", "list"}), HasSubstr("revoked at"));
}

// Loopback plaintext with --auth=tokens: the CLI sends its token as call
// metadata, from --token, --token_file or $LOCKSTEP_TOKEN.
TEST(PlaintextTokensTest, CliSendsItsTokenWithoutTls) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  Cluster cluster(dir);
  absl::StatusOr<CommandResult> created = RunCommand(
      {RunfilePath("server/lockstep-coordinator"), "tokens", "create",
       "--db=" + cluster.db(), "--name=ci", "--role=viewer"},
      absl::Seconds(30));
  ASSERT_TRUE(created.ok() && created->exit_code == 0);
  const std::string token(absl::StripAsciiWhitespace(created->out));
  ASSERT_GT(cluster.StartCoordinator(0, {"--auth=tokens"}), 0)
      << cluster.Logs();
  absl::StatusOr<CommandResult> r = cluster.Cli({"jobs"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_THAT(r->err, HasSubstr("UNAUTHENTICATED: no bearer token"));
  r = cluster.Cli({"--token=" + token, "jobs"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0) << r->err;
  const std::string file = dir + "/token";
  std::ofstream(file) << token << "\n";
  r = cluster.Cli({"--token_file=" + file, "jobs"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0) << r->err;
  setenv("LOCKSTEP_TOKEN", token.c_str(), 1);
  r = cluster.Cli({"jobs"});
  unsetenv("LOCKSTEP_TOKEN");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0) << r->err;
  r = cluster.Cli({"--token=" + token, "--token_file=" + file, "jobs"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 64);
  EXPECT_THAT(r->err, HasSubstr("--token, --token_file: set at most one"));
}

// Refused before anything listens: no network is touched.
TEST(SecurityFlagsTest, PlaintextOnlyWhenExplicitlyAllowed) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string bin = RunfilePath("server/lockstep-coordinator");
  // No TLS and no plaintext flag: refused, on loopback too.
  absl::StatusOr<CommandResult> r =
      RunCommand({bin, "--listen=127.0.0.1:0", "--db=" + dir + "/flags.db"},
                 absl::Seconds(30));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("no --tls_cert is set: give --tls_cert and "
                                "--tls_key (see `lockstep-coordinator "
                                "certs`), or --allow_plaintext"));
  // --allow_plaintext covers loopback only; elsewhere --force_plaintext.
  r = RunCommand({bin, "--listen=0.0.0.0:0", "--allow_plaintext",
                  "--db=" + dir + "/flags.db"},
                 absl::Seconds(30));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("--listen=0.0.0.0:0 is not a loopback "
                                "address and no --tls_cert is set"));
  EXPECT_THAT(r->err, HasSubstr("--force_plaintext to serve in the clear"));
  r = RunCommand({bin, "--listen=127.0.0.1:0", "--http_listen=0.0.0.0:0",
                  "--allow_plaintext", "--db=" + dir + "/flags.db"},
                 absl::Seconds(30));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("--http_listen=0.0.0.0:0"));
  r = RunCommand({bin, "--listen=127.0.0.1:0", "--allow_plaintext",
                  "--auth=maybe", "--db=" + dir + "/f.db"},
                 absl::Seconds(30));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("--auth: \"maybe\" is not tokens or none"));
  r = RunCommand({bin, "--listen=127.0.0.1:0", "--allow_plaintext",
                  "--worker_ca=ca.crt", "--db=" + dir + "/f.db"},
                 absl::Seconds(30));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("worker_ca: client certificates need TLS"));
}

}  // namespace
}  // namespace lockstep::testing
