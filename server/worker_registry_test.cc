#include "server/worker_registry.h"

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/digest.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/unknown_field_set.h"
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
                       HasSubstr("hello.profile: must be set")));
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

// A profile as a CPU worker reports it, with the class derived from it the
// way the worker writes it.
Hello MakeProfiledHello(const std::string& name,
                        const std::string& kernel_path = "avx2") {
  Hello h = MakeHello(name);
  v1::HardwareProfile* p = h.mutable_profile();
  p->mutable_cpu()->set_vendor("AuthenticAMD");
  p->mutable_cpu()->set_model("AMD EPYC 9R14 96-Core Processor");
  p->mutable_cpu()->set_arch("x86_64");
  p->mutable_cpu()->add_features("avx");
  p->mutable_cpu()->add_features("avx2");
  p->mutable_cpu()->add_features("avx512f");
  p->mutable_cpu()->set_kernel_path(kernel_path);
  const std::string cls = absl::StrCat(
      "lockstep-class/v1|cpu=AuthenticAMD/AMD EPYC 9R14 96-Core Processor/"
      "x86_64|isa=avx,avx2,avx512f|kernel_path=",
      kernel_path, "|compiler=gcc 12.2.0|kernels=0.1.0|canonical=1");
  p->set_hardware_class(cls);
  p->set_hardware_class_digest(Digest128Hex(cls));
  return h;
}

void SetClass(Hello* h, const std::string& cls) {
  h->mutable_profile()->set_hardware_class(cls);
  h->mutable_profile()->set_hardware_class_digest(Digest128Hex(cls));
}

void SetDevice(Hello* h, const std::string& machine_id,
               const std::string& device) {
  v1::DeviceIdentity* d = h->mutable_profile()->mutable_device();
  d->set_machine_id(machine_id);
  d->set_device(device);
  d->set_device_id(Digest128Hex(absl::StrCat(machine_id, "|", device)));
}

// The refusal and the replacement meet exactly at the heartbeat timeout,
// the same bound the sweep uses: no instant at which a session is both
// live for the sweep and replaceable by a hello, or neither.
TEST_F(RegistryTest, NameHeldUntilExactlyTheHeartbeatTimeout) {
  bool first_closed = false;
  auto s1 =
      registry_->Connect(MakeHello("alpha"), "p1",
                         [&](const std::string&) { first_closed = true; });
  ASSERT_THAT(s1, IsOk());
  now_ += 999;  // 1 ms before the timeout (1000 ms)
  EXPECT_THAT(registry_->Connect(MakeHello("alpha"), "p2", nullptr),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("names must be unique")));
  EXPECT_EQ(registry_->Sweep(), 0);
  // A heartbeat renews the hold for a whole timeout.
  ASSERT_THAT(registry_->Heartbeat(WorkerIdForName("alpha"), *s1), IsOk());
  now_ += 999;
  EXPECT_THAT(registry_->Connect(MakeHello("alpha"), "p2", nullptr),
              StatusIs(absl::StatusCode::kAlreadyExists));
  now_ += 1;  // exactly the timeout: the sweep would end it, so may a hello
  EXPECT_FALSE(first_closed);
  auto s2 = registry_->Connect(MakeHello("alpha"), "p2", nullptr);
  ASSERT_THAT(s2, IsOk());
  EXPECT_TRUE(first_closed);
  // The replaced session can no longer heartbeat; the new one holds the name.
  EXPECT_THAT(registry_->Heartbeat(WorkerIdForName("alpha"), *s1),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(registry_->Connect(MakeHello("alpha"), "p3", nullptr),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("already connected from p2")));
  EXPECT_EQ(registry_->Sweep(), 0);
}

TEST_F(RegistryTest, SweepAtExactlyTheTimeoutFreesTheName) {
  ASSERT_THAT(registry_->Connect(MakeHello("alpha"), "p1", nullptr), IsOk());
  now_ += 1000;
  EXPECT_EQ(registry_->Sweep(), 1);
  EXPECT_THAT(registry_->Connect(MakeHello("alpha"), "p2", nullptr), IsOk());
}

// After a restart no session is live: the first hello of a name wins, a
// second daemon using the name is refused, and the operator's quarantine
// of the name's worker still applies to whoever holds it.
TEST(RegistryRestartTest, NameStillUniqueAfterCoordinatorRestart) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  store::StoreOptions o;
  o.path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/restart.db");
  std::remove(o.path.c_str());
  int64_t now = 1'000'000;
  RegistryOptions ro;
  ro.heartbeat_timeout_ms = 1000;
  {
    auto store = store::Store::Open(o);
    ASSERT_THAT(store, IsOk());
    WorkerRegistry registry(store->get(), ro, [&] { return now; });
    ASSERT_THAT(registry.Connect(MakeHello("alpha"), "p1", nullptr), IsOk());
    v1::SetWorkerStateRequest req;
    req.set_worker_id(WorkerIdForName("alpha"));
    req.set_admin_state(v1::QUARANTINED);
    req.set_reason("audit a-1");
    ASSERT_THAT(registry.SetAdminState(req), IsOk());
  }  // the coordinator stops; alpha's stream breaks
  now += 10;
  auto store = store::Store::Open(o);
  ASSERT_THAT(store, IsOk());
  WorkerRegistry registry(store->get(), ro, [&] { return now; });
  ASSERT_THAT(registry.Connect(MakeHello("alpha"), "p2", nullptr), IsOk());
  EXPECT_THAT(registry.Connect(MakeHello("alpha"), "p3", nullptr),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("already connected from p2")));
  std::vector<LiveWorker> live = registry.LiveWorkers();
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].admin_state, v1::QUARANTINED);
}

TEST_F(RegistryTest, ClassMustBeTheProfilesClass) {
  auto connect = [&](const Hello& h) {
    return registry_->Connect(h, "p", nullptr);
  };
  ASSERT_THAT(connect(MakeProfiledHello("honest")), IsOk());

  // A worker forced to AVX2 kernels claiming a class with the AVX-512 path.
  Hello h = MakeProfiledHello("forced", "avx2");
  SetClass(&h, MakeProfiledHello("x", "avx512").profile().hardware_class());
  EXPECT_THAT(connect(h), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("hello.profile.hardware_class: "
                                             "does not match the profile's "
                                             "cpu.kernel_path \"avx2\"")));
  // The kernel path must be a component of its own, not an ISA feature.
  h = MakeProfiledHello("hidden", "avx2");
  SetClass(&h,
           "lockstep-class/v1|cpu=AuthenticAMD/AMD EPYC 9R14 96-Core "
           "Processor/x86_64|isa=avx,avx2,avx512f|kernel_path=avx512");
  EXPECT_THAT(connect(h), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("cpu.kernel_path")));
  // Another CPU's class.
  h = MakeProfiledHello("other-cpu");
  h.mutable_profile()->mutable_cpu()->set_model("Intel Xeon Platinum 8480+");
  EXPECT_THAT(connect(h), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("cpu.model")));
  h = MakeProfiledHello("other-arch");
  h.mutable_profile()->mutable_cpu()->set_arch("aarch64");
  EXPECT_THAT(connect(h), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("cpu.arch")));
  // GPU fields the profile claims must be in the class.
  h = MakeProfiledHello("gpu");
  v1::GpuInfo* g = h.mutable_profile()->add_gpus();
  g->set_name("NVIDIA H100 80GB HBM3");
  g->set_compute_capability_major(9);
  g->set_compute_capability_minor(0);
  EXPECT_THAT(connect(h), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("gpus[0].name")));
  SetClass(&h, absl::StrCat(h.profile().hardware_class(),
                            "|gpu=NVIDIA H100 80GB HBM3/sm_80"));
  EXPECT_THAT(connect(h), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("gpus[0].compute_capability "
                                             "\"sm_90\"")));
  SetClass(&h, absl::StrCat(MakeProfiledHello("x").profile().hardware_class(),
                            "|gpu=NVIDIA H100 80GB HBM3/sm_90|driver=13000"));
  EXPECT_THAT(connect(h), IsOk());
  // Nor may the class claim what the profile does not list.
  h = MakeProfiledHello("no-path");
  h.mutable_profile()->mutable_cpu()->clear_kernel_path();
  EXPECT_THAT(connect(h), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("cpu.kernel_path")));
  h = MakeProfiledHello("no-gpu");
  SetClass(&h, absl::StrCat(h.profile().hardware_class(),
                            "|gpu=NVIDIA H100 80GB HBM3/sm_90"));
  EXPECT_THAT(connect(h), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("names a GPU, but the profile's "
                                             "gpus list none")));
  // The digest: 32 lowercase hex digits of exactly this string.
  h = MakeProfiledHello("upper");
  std::string upper = h.profile().hardware_class_digest();
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  h.mutable_profile()->set_hardware_class_digest(upper);
  EXPECT_THAT(connect(h), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("hardware_class_digest: must be "
                                             "32 lowercase hex digits")));
  h = MakeProfiledHello("digest");
  h.mutable_profile()->set_hardware_class_digest(Digest128Hex("another"));
  EXPECT_THAT(connect(h),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is not the digest of hardware_class")));
  h = MakeProfiledHello("prefix");
  SetClass(&h, "v1;cpu;x86_64");
  EXPECT_THAT(connect(h), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("must start with "
                                             "\"lockstep-class/\"")));
  h = MakeProfiledHello("long");
  SetClass(&h, absl::StrCat(h.profile().hardware_class(),
                            "|x=", std::string(4096, 'x')));
  EXPECT_THAT(
      connect(h),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat("hello.profile.hardware_class: length ",
                                      h.profile().hardware_class().size(),
                                      " is outside 1..4096"))));
  ASSERT_EQ(registry_->List(true)->size(), 2u);  // honest and gpu
}

TEST_F(RegistryTest, DeviceIdentityIsRecomputed) {
  Hello a = MakeProfiledHello("a");
  SetDevice(&a, "0123456789abcdef0123456789abcdef", "cpu:packages=0");
  ASSERT_THAT(registry_->Connect(a, "p", nullptr), IsOk());
  // A second daemon on the same device: same device id, counted once.
  Hello b = MakeProfiledHello("b");
  SetDevice(&b, "0123456789abcdef0123456789abcdef", "cpu:packages=0");
  ASSERT_THAT(registry_->Connect(b, "p", nullptr), IsOk());
  // No identity at all: connects as an unknown device (empty id).
  ASSERT_THAT(registry_->Connect(MakeProfiledHello("c"), "p", nullptr), IsOk());
  std::vector<LiveWorker> live = registry_->LiveWorkers();
  ASSERT_EQ(live.size(), 3u);
  EXPECT_EQ(live[0].device_id,
            Digest128Hex("0123456789abcdef0123456789abcdef|cpu:packages=0"));
  EXPECT_EQ(live[0].device_id, live[1].device_id);
  EXPECT_EQ(live[2].device_id, "");
  EXPECT_EQ(registry_->List(false)->at(0).profile().device().device(),
            "cpu:packages=0");

  // A forged id: another device's id with this device's fields.
  Hello f = MakeProfiledHello("forged");
  SetDevice(&f, "0123456789abcdef0123456789abcdef", "cpu:packages=1");
  f.mutable_profile()->mutable_device()->set_device_id(live[0].device_id);
  EXPECT_THAT(registry_->Connect(f, "p", nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hello.profile.device.device_id: must be "
                                 "the 32-hex-digit digest of "
                                 "\"machine_id|device\"")));
  // Partial identities are refused: empty fields never name a device.
  f = MakeProfiledHello("partial");
  f.mutable_profile()->mutable_device()->set_device_id(live[0].device_id);
  EXPECT_THAT(registry_->Connect(f, "p", nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hello.profile.device.machine_id: length 0 "
                                 "is outside 1..128")));
  f = MakeProfiledHello("partial");
  SetDevice(&f, "0123456789abcdef0123456789abcdef", "");
  EXPECT_THAT(registry_->Connect(f, "p", nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hello.profile.device.device: length 0 is "
                                 "outside 1..256")));
  f = MakeProfiledHello("partial");
  SetDevice(&f, std::string(129, 'm'), "cpu:packages=0");
  EXPECT_THAT(registry_->Connect(f, "p", nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hello.profile.device.machine_id: length "
                                 "129 is outside 1..128")));
  EXPECT_EQ(registry_->LiveWorkers().size(), 3u);
}

TEST_F(RegistryTest, HelloLimitsNameFieldAndLimit) {
  auto refused = [&](const Hello& h) {
    return registry_->Connect(h, "p", nullptr).status();
  };
  Hello h = MakeHello("labels");
  for (int i = 0; i < 65; ++i)
    (*h.mutable_labels())[absl::StrCat("k", i)] = "v";
  EXPECT_THAT(refused(h),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hello.labels: 65 labels exceed the limit "
                                 "of 64")));
  h = MakeHello("key");
  (*h.mutable_labels())[std::string(129, 'k')] = "v";
  EXPECT_THAT(refused(h), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("hello.labels key: length 129 "
                                             "is outside 1..128")));
  h = MakeHello("key");
  (*h.mutable_labels())[""] = "v";
  EXPECT_THAT(refused(h), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("hello.labels key: length 0")));
  h = MakeHello("value");
  (*h.mutable_labels())["pool"] = std::string(257, 'v');
  EXPECT_THAT(refused(h), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("hello.labels[\"pool\"]: length "
                                             "257 is outside 0..256")));
  h = MakeHello("version");
  h.set_version(std::string(129, 'v'));
  EXPECT_THAT(refused(h), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("hello.version: length 129 is "
                                             "outside 0..128")));
  h = MakeHello("profile");
  h.mutable_profile()->set_gpu_error(std::string(70000, 'e'));
  EXPECT_THAT(refused(h), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("bytes exceed the limit of "
                                             "65536")));
  // A field this coordinator does not know, deep inside the hello.
  h = MakeHello("unknown");
  h.mutable_profile()
      ->mutable_cpu()
      ->GetReflection()
      ->MutableUnknownFields(h.mutable_profile()->mutable_cpu())
      ->AddVarint(99, 1);
  EXPECT_THAT(refused(h),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("hello.profile.cpu: unknown field 99")));
  // At the limits, accepted.
  h = MakeHello(std::string(128, 'n'));
  h.set_version(std::string(128, 'v'));
  for (int i = 0; i < 64; ++i) {
    (*h.mutable_labels())[absl::StrCat(std::string(120, 'k'), i)] =
        std::string(256, 'v');
  }
  EXPECT_THAT(registry_->Connect(h, "p", nullptr), IsOk());
  EXPECT_EQ(registry_->List(true)->size(), 1u);
}

}  // namespace
}  // namespace lockstep::server
