#include "client/client.h"

#include "client/commands.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::client {
namespace {

using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

TEST(FormatWorkersTable, AlignsColumnsAndListsClasses) {
  lockstep::v1::ListWorkersResponse r;
  r.set_server_unix_ms(10'000);
  auto* a = r.add_workers();
  a->set_name("alpha");
  a->set_worker_id("w-0000000000000001");
  a->set_state(lockstep::v1::WORKER_CONNECTED);
  a->set_last_heartbeat_unix_ms(9'600);
  a->mutable_profile()->set_hardware_class("lockstep-class/v1|cpu=x");
  a->mutable_profile()->set_hardware_class_digest(
      "0123456789abcdef0123456789abcdef");
  auto* b = r.add_workers();
  *b = *a;
  b->set_name("b");
  b->set_state(lockstep::v1::WORKER_GONE);
  b->set_admin_state(lockstep::v1::QUARANTINED);
  const std::string t = FormatWorkersTable(r);
  EXPECT_THAT(t, HasSubstr("NAME   ID"));
  EXPECT_THAT(t, HasSubstr("alpha  w-0000000000000001  connected  active"));
  EXPECT_THAT(t,
              HasSubstr("b      w-0000000000000001  gone       quarantined"));
  EXPECT_THAT(t, HasSubstr("0.4s ago"));
  EXPECT_THAT(t, HasSubstr("0123456789ab  lockstep-class/v1|cpu=x"));
  EXPECT_EQ(FormatWorkersTable({}), "no workers connected\n");
}

TEST(Client, UnreachableCoordinatorIsAClearError) {
  ClientOptions o;
  o.coordinator = "127.0.0.1:1";  // nothing listens on port 1
  o.timeout_ms = 2000;
  auto channel = NewChannel(o);
  ASSERT_TRUE(channel.ok());
  Client c(o, *channel);
  auto r = c.ListWorkers(false);
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kUnavailable,
                          HasSubstr("cannot reach the coordinator at "
                                    "127.0.0.1:1")));
}

TEST(FormatJson, UsesProtoFieldNames) {
  lockstep::v1::Worker w;
  w.set_worker_id("w-1");
  EXPECT_THAT(FormatJson(w), HasSubstr("\"worker_id\": \"w-1\""));
}

}  // namespace
}  // namespace lockstep::client

namespace lockstep::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(Commands, Escaping) {
  EXPECT_EQ(XmlEscape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
}

TEST(Commands, ProgressBar) {
  EXPECT_EQ(ProgressBar(0, 10, 10), "----------");
  EXPECT_EQ(ProgressBar(5, 10, 10), "#####-----");
  EXPECT_EQ(ProgressBar(10, 10, 10), "##########");
  EXPECT_EQ(ProgressBar(3, 0, 4), "----");
}

TEST(Commands, JUnitForEachOutcome) {
  const std::string pass = CheckJUnit("job-1", kExitOk, "", "", 1.5);
  EXPECT_THAT(pass, HasSubstr("tests=\"2\" failures=\"0\" errors=\"0\""));
  EXPECT_THAT(pass, Not(HasSubstr("<failure")));
  const std::string nd = CheckJUnit("job-1", kExitNondeterministic,
                                    "nondeterministic at <x>", "", 1.5);
  EXPECT_THAT(nd, HasSubstr("failures=\"1\""));
  EXPECT_THAT(nd,
              HasSubstr("<failure message=\"nondeterministic at &lt;x&gt;\""));
  const std::string changed =
      CheckJUnit("job-1", kExitNumericsChanged, "", "numerics changed", 1.5);
  EXPECT_THAT(changed, HasSubstr("name=\"golden\""));
  EXPECT_THAT(changed, HasSubstr("<failure message=\"numerics changed\""));
  const std::string error =
      CheckJUnit("unsubmitted", kExitCouldNotRun, "UNAVAILABLE: down", "", 0);
  EXPECT_THAT(error, HasSubstr("errors=\"1\""));
  EXPECT_THAT(error, HasSubstr("<error message=\"could not run\">UNAVAILABLE"));
  EXPECT_THAT(error, HasSubstr("<skipped/>"));
}

TEST(Commands, FormatReportNamesTheDivergence) {
  lockstep::v1::Report r;
  r.set_job_id("job-1");
  r.set_verdict(lockstep::v1::NONDETERMINISTIC);
  r.set_summary("NONDETERMINISTIC: ...");
  auto* d = r.mutable_divergence();
  d->set_step(3);
  d->mutable_tensor()->set_layer("conv2");
  d->mutable_tensor()->set_op("conv2d.grad_weight");
  d->mutable_tensor()->set_role(lockstep::v1::GRAD_WEIGHT);
  d->mutable_tensor()->set_phase(lockstep::v1::PHASE_BACKWARD);
  d->mutable_cause()->set_id("ND-CUDNN-CONV-GRAD-WEIGHT");
  d->set_downstream_differing(12);
  const std::string text = FormatReport(r);
  EXPECT_THAT(text, HasSubstr("job job-1: NONDETERMINISTIC"));
  EXPECT_THAT(text, HasSubstr("step 3, layer \"conv2\", PHASE_BACKWARD "
                              "GRAD_WEIGHT (op conv2d.grad_weight"));
  EXPECT_THAT(text, HasSubstr("ND-CUDNN-CONV-GRAD-WEIGHT"));
  EXPECT_THAT(text, HasSubstr("downstream: 12"));
}

TEST(Client, BadTlsFlagsNameTheFlag) {
  ClientOptions o;
  o.security.cert_file = "client.crt";
  EXPECT_THAT(NewChannel(o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--cert, --key: set both or neither")));
  o.security.key_file = "client.key";
  EXPECT_THAT(NewChannel(o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--cert: a client certificate needs TLS")));
  o.security.ca_file = "/nonexistent/ca.crt";
  EXPECT_THAT(NewChannel(o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--ca: cannot read /nonexistent/ca.crt")));
}

}  // namespace
}  // namespace lockstep::client
