#include "server/worker_registry.h"

#include <atomic>
#include <string>
#include <vector>

#include "common/digest.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::server {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::lockstep::v1::Hello;
using ::testing::HasSubstr;

Hello MakeHello(const std::string& name) {
  Hello h;
  h.set_name(name);
  h.set_slots(1);
  h.mutable_profile()->set_hardware_class("lockstep-class/v1|cpu=test");
  h.mutable_profile()->set_hardware_class_digest(
      Digest128Hex("lockstep-class/v1|cpu=test"));
  return h;
}

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::StoreOptions o;
    o.path = ":memory:";
    store_ = std::move(store::Store::Open(o).value());
    RegistryOptions ro;
    ro.heartbeat_timeout_ms = 1000;
    registry_ = std::make_unique<WorkerRegistry>(
        store_.get(), ro, [this] { return now_.load(); });
  }

  std::atomic<int64_t> now_{1'000'000};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<WorkerRegistry> registry_;
};

TEST_F(RegistryTest, ConnectListHeartbeatSweep) {
  std::vector<std::string> closed;
  auto s1 =
      registry_->Connect(MakeHello("alpha"), "ipv4:127.0.0.1:1",
                         [&](const std::string& r) { closed.push_back(r); });
  ASSERT_THAT(s1, IsOk());
  auto s2 = registry_->Connect(MakeHello("beta"), "ipv4:127.0.0.1:2", nullptr);
  ASSERT_THAT(s2, IsOk());
  auto list = registry_->List(false);
  ASSERT_THAT(list, IsOk());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name(), "alpha");
  EXPECT_EQ((*list)[0].worker_id(), WorkerIdForName("alpha"));
  EXPECT_EQ((*list)[0].state(), v1::WORKER_CONNECTED);
  EXPECT_EQ((*list)[0].profile().hardware_class(),
            "lockstep-class/v1|cpu=test");

  now_ += 800;
  ASSERT_THAT(registry_->Heartbeat(WorkerIdForName("beta"), *s2), IsOk());
  now_ += 300;  // alpha: 1100 ms silent; beta: 300 ms
  EXPECT_EQ(registry_->Sweep(), 1);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_THAT(closed[0], HasSubstr("heartbeat timeout"));

  list = registry_->List(false);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name(), "beta");
  list = registry_->List(true);
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].state(), v1::WORKER_GONE);
  EXPECT_THAT((*list)[0].disconnect_reason(), HasSubstr("heartbeat timeout"));
  EXPECT_THAT(registry_->Heartbeat(WorkerIdForName("alpha"), *s1),
              StatusIs(absl::StatusCode::kNotFound));

  auto events = store_->ListWorkerEvents(WorkerIdForName("alpha"), 10);
  ASSERT_THAT(events, IsOk());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].kind, "disconnected");
  EXPECT_EQ((*events)[1].kind, "connected");
}

TEST_F(RegistryTest, DuplicateLiveNameRefusedStaleReplaced) {
  bool first_closed = false;
  auto s1 =
      registry_->Connect(MakeHello("alpha"), "p1",
                         [&](const std::string&) { first_closed = true; });
  ASSERT_THAT(s1, IsOk());
  EXPECT_THAT(registry_->Connect(MakeHello("alpha"), "p2", nullptr),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("already connected from p1")));
  now_ += 1500;  // the first session is stale but not swept yet
  auto s2 = registry_->Connect(MakeHello("alpha"), "p2", nullptr);
  ASSERT_THAT(s2, IsOk());
  EXPECT_TRUE(first_closed);
  EXPECT_NE(*s1, *s2);
  // The old session's late disconnect must not end the new one.
  registry_->Disconnect(WorkerIdForName("alpha"), *s1, "late");
  auto list = registry_->List(false);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].peer(), "p2");
  EXPECT_EQ((*list)[0].sessions(), 2);
}

TEST_F(RegistryTest, DisconnectMarksGone) {
  auto s = registry_->Connect(MakeHello("alpha"), "p1", nullptr);
  ASSERT_THAT(s, IsOk());
  registry_->Disconnect(WorkerIdForName("alpha"), *s, "stream closed");
  EXPECT_TRUE(registry_->List(false)->empty());
  auto all = registry_->List(true);
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].disconnect_reason(), "stream closed");
}

TEST_F(RegistryTest, RejectsBadHellos) {
  Hello h = MakeHello("");
  EXPECT_THAT(registry_->Connect(h, "p", nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hello.name: length 0 is outside 1..128")));
  h = MakeHello(std::string(129, 'a'));
  EXPECT_THAT(
      registry_->Connect(h, "p", nullptr),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hello.name")));
  h = MakeHello("bad name");
  EXPECT_THAT(
      registry_->Connect(h, "p", nullptr),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("character ' '")));
  h = MakeHello("ok");
  h.mutable_profile()->set_hardware_class_digest("ffff");
  EXPECT_THAT(registry_->Connect(h, "p", nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hardware_class_digest")));
  h = MakeHello("ok");
  h.clear_profile();
  EXPECT_THAT(registry_->Connect(h, "p", nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hello.profile.hardware_class")));
  h = MakeHello("ok");
  h.set_slots(1000);
  EXPECT_THAT(registry_->Connect(h, "p", nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hello.slots: 1000 is outside 0..64")));
  // Nothing was stored by the refused hellos.
  EXPECT_TRUE(store_->ListWorkers()->empty());
}

TEST_F(RegistryTest, SetAdminState) {
  ASSERT_THAT(registry_->Connect(MakeHello("alpha"), "p1", nullptr), IsOk());
  v1::SetWorkerStateRequest req;
  req.set_worker_id(WorkerIdForName("alpha"));
  req.set_admin_state(v1::QUARANTINED);
  req.set_reason("audit a-1");
  auto w = registry_->SetAdminState(req);
  ASSERT_THAT(w, IsOk());
  EXPECT_EQ(w->admin_state(), v1::QUARANTINED);
  EXPECT_EQ(w->state(), v1::WORKER_CONNECTED);

  req.set_admin_state(static_cast<v1::WorkerAdminState>(42));
  EXPECT_THAT(registry_->SetAdminState(req),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("admin_state: 42")));
  req.set_admin_state(v1::ACTIVE);
  req.set_worker_id("w-nope");
  EXPECT_THAT(registry_->SetAdminState(req),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("w-nope")));
}

TEST_F(RegistryTest, FailedSelftestQuarantinesAndPassedOneDoesNot) {
  Hello good = MakeHello("good");
  good.mutable_profile()->mutable_selftest()->set_passed(true);
  good.mutable_profile()->mutable_selftest()->set_summary("PASS: 282 rows");
  ASSERT_THAT(registry_->Connect(good, "p1", nullptr), IsOk());

  Hello bad = MakeHello("bad");
  v1::SelftestResult* st = bad.mutable_profile()->mutable_selftest();
  st->set_passed(false);
  st->set_failed_rows(1);
  st->set_summary("FAIL: 1 of 282 rows failed: dense.forward/CANONICAL/...");
  ASSERT_THAT(registry_->Connect(bad, "p2", nullptr), IsOk());

  auto workers = registry_->List(/*include_gone=*/false);
  ASSERT_THAT(workers, IsOk());
  ASSERT_EQ(workers->size(), 2u);
  for (const v1::Worker& w : *workers) {
    if (w.name() == "bad") {
      EXPECT_EQ(w.admin_state(), v1::QUARANTINED);
      EXPECT_THAT(w.admin_reason(),
                  HasSubstr("selftest failed: FAIL: 1 of 282 rows failed"));
      EXPECT_FALSE(w.profile().selftest().passed());
    } else {
      EXPECT_EQ(w.admin_state(), v1::ACTIVE) << w.name();
      EXPECT_TRUE(w.profile().selftest().passed());
    }
  }
  for (const LiveWorker& w : registry_->LiveWorkers()) {
    EXPECT_EQ(w.admin_state == v1::QUARANTINED, w.name == "bad") << w.name;
  }
  auto events = store_->ListWorkerEvents(WorkerIdForName("bad"), 10);
  ASSERT_THAT(events, IsOk());
  bool logged = false;
  for (const auto& e : *events) logged |= e.kind == "selftest";
  EXPECT_TRUE(logged);

  // An oversized summary is refused before anything is stored.
  Hello huge = MakeHello("huge");
  huge.mutable_profile()->mutable_selftest()->set_summary(
      std::string(5000, 'x'));
  EXPECT_THAT(registry_->Connect(huge, "p3", nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hello.profile.selftest.summary: 5000 bytes "
                                 "exceed the limit of 4096")));
  EXPECT_EQ(registry_->List(true)->size(), 2u);
}

}  // namespace
}  // namespace lockstep::server
