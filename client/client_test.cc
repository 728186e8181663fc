#include "client/client.h"

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
  Client c(o);
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
