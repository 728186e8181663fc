#include "server/store/store.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::store {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::lockstep::v1::Worker;
using ::testing::HasSubstr;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("TEST_TMPDIR");
    path_ = std::string(dir ? dir : "/tmp") + "/store_test_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() +
            ".db";
    std::remove(path_.c_str());
    std::remove((path_ + "-wal").c_str());
    std::remove((path_ + "-shm").c_str());
  }

  StoreOptions Options() const {
    StoreOptions o;
    o.path = path_;
    return o;
  }

  static Worker MakeWorker(const std::string& id, const std::string& name) {
    Worker w;
    w.set_worker_id(id);
    w.set_name(name);
    (*w.mutable_labels())["rack"] = "a1";
    w.mutable_profile()->set_hardware_class("v1;cpu;test");
    w.mutable_profile()->set_hardware_class_digest(
        "0123456789abcdef0123456789abcdef");
    w.mutable_profile()->mutable_cpu()->set_model("Test CPU");
    return w;
  }

  std::string path_;
};

TEST_F(StoreTest, NewDatabaseHasCurrentSchemaAndIdentity) {
  auto store = Store::Open(Options());
  ASSERT_THAT(store, IsOk());
  EXPECT_EQ((*store)->schema_version(), kSchemaVersion);
  EXPECT_THAT((*store)->CheckIntegrity(), IsOk());
  store->reset();

  auto db = Database::Open(path_, false);
  ASSERT_THAT(db, IsOk());
  EXPECT_EQ(*(*db)->QueryInt64("PRAGMA application_id"), kApplicationId);
  EXPECT_EQ(*(*db)->QueryInt64("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(*(*db)->QueryText("PRAGMA journal_mode"), "wal");
}

TEST_F(StoreTest, ReopenKeepsData) {
  {
    auto store = Store::Open(Options());
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT((*store)->UpsertWorker(MakeWorker("w1", "alpha"), 1000),
                IsOk());
    ASSERT_THAT((*store)->UpsertWorker(MakeWorker("w2", "beta"), 1001), IsOk());
    ASSERT_THAT(
        (*store)->SetWorkerAdminState("w2", v1::QUARANTINED, "audit 7", 1002),
        IsOk());
  }
  auto store = Store::Open(Options());
  ASSERT_THAT(store, IsOk());
  auto workers = (*store)->ListWorkers();
  ASSERT_THAT(workers, IsOk());
  ASSERT_EQ(workers->size(), 2u);
  EXPECT_EQ((*workers)[0].name(), "alpha");
  EXPECT_EQ((*workers)[0].labels().at("rack"), "a1");
  EXPECT_EQ((*workers)[0].profile().cpu().model(), "Test CPU");
  EXPECT_EQ((*workers)[0].first_seen_unix_ms(), 1000);
  EXPECT_EQ((*workers)[1].admin_state(), v1::QUARANTINED);
  EXPECT_EQ((*workers)[1].admin_reason(), "audit 7");
  auto events = (*store)->ListWorkerEvents("w2", 10);
  ASSERT_THAT(events, IsOk());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].kind, "admin_state");
  EXPECT_THAT((*events)[0].detail, HasSubstr("QUARANTINED: audit 7"));
}

TEST_F(StoreTest, UpsertKeepsFirstSeenAndAdminState) {
  auto store = Store::Open(Options());
  ASSERT_THAT(store, IsOk());
  ASSERT_THAT((*store)->UpsertWorker(MakeWorker("w1", "alpha"), 1000), IsOk());
  ASSERT_THAT((*store)->SetWorkerAdminState("w1", v1::DRAINING, "", 1500),
              IsOk());
  Worker changed = MakeWorker("w1", "alpha");
  (*changed.mutable_labels())["rack"] = "b2";
  ASSERT_THAT((*store)->UpsertWorker(changed, 2000), IsOk());
  auto w = (*store)->GetWorker("w1");
  ASSERT_THAT(w, IsOk());
  ASSERT_TRUE(w->has_value());
  EXPECT_EQ((*w)->first_seen_unix_ms(), 1000);
  EXPECT_EQ((*w)->labels().at("rack"), "b2");
  EXPECT_EQ((*w)->admin_state(), v1::DRAINING);
  auto missing = (*store)->GetWorker("nope");
  ASSERT_THAT(missing, IsOk());
  EXPECT_FALSE(missing->has_value());
  EXPECT_THAT((*store)->SetWorkerAdminState("nope", v1::DRAINING, "", 1),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
}

TEST_F(StoreTest, MigratesFromOlderSchemaKeepingRows) {
  {
    StoreOptions o = Options();
    o.migrate_to_version = 1;
    auto old_store = Store::Open(o);
    ASSERT_THAT(old_store, IsOk());
    EXPECT_EQ((*old_store)->schema_version(), 1);
  }
  // Write a row the way a version-1 coordinator did.
  {
    auto db = Database::Open(path_, false);
    ASSERT_THAT(db, IsOk());
    Worker w = MakeWorker("w-old", "old-worker");
    std::string blob;
    ASSERT_TRUE(w.SerializeToString(&blob));
    auto stmt = (*db)->Prepare(
        "INSERT INTO workers VALUES ('w-old', 'old-worker', 'v1;cpu;test', "
        "'0123456789abcdef0123456789abcdef', ?, 10, 20)");
    ASSERT_THAT(stmt, IsOk());
    ASSERT_THAT((*stmt)->BindBlob(1, blob), IsOk());
    ASSERT_THAT((*stmt)->Run(), IsOk());
    // Version 1 had no worker_events table.
    EXPECT_THAT(
        (*db)->Exec("SELECT * FROM worker_events"),
        StatusIs(absl::StatusCode::kInternal, HasSubstr("no such table")));
  }
  auto store = Store::Open(Options());
  ASSERT_THAT(store, IsOk());
  EXPECT_EQ((*store)->schema_version(), kSchemaVersion);
  auto w = (*store)->GetWorker("w-old");
  ASSERT_THAT(w, IsOk());
  ASSERT_TRUE(w->has_value());
  EXPECT_EQ((*w)->name(), "old-worker");
  EXPECT_EQ((*w)->admin_state(), v1::ACTIVE);  // migration 2's default
  EXPECT_THAT((*store)->AppendWorkerEvent("w-old", 30, "connected", "test"),
              IsOk());
  EXPECT_THAT((*store)->CheckIntegrity(), IsOk());
}

TEST_F(StoreTest, RefusesNewerSchemaWithoutTouchingTheFile) {
  {
    auto store = Store::Open(Options());
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT((*store)->UpsertWorker(MakeWorker("w1", "alpha"), 1), IsOk());
  }
  {
    auto db = Database::Open(path_, false);
    ASSERT_THAT(db, IsOk());
    ASSERT_THAT((*db)->Exec("PRAGMA user_version = 99"), IsOk());
  }
  auto store = Store::Open(Options());
  EXPECT_THAT(store, StatusIs(absl::StatusCode::kFailedPrecondition,
                              HasSubstr("schema version 99, newer than the " +
                                        std::to_string(kSchemaVersion))));
  auto db = Database::Open(path_, false);
  ASSERT_THAT(db, IsOk());
  EXPECT_EQ(*(*db)->QueryInt64("PRAGMA user_version"), 99);
  EXPECT_EQ(*(*db)->QueryInt64("SELECT count(*) FROM workers"), 1);
}

TEST_F(StoreTest, RefusesForeignDatabase) {
  {
    auto db = Database::Open(path_, true);
    ASSERT_THAT(db, IsOk());
    ASSERT_THAT((*db)->Exec("CREATE TABLE other (x INTEGER)"), IsOk());
  }
  EXPECT_THAT(Store::Open(Options()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("not a Lockstep database")));
}

TEST_F(StoreTest, RefusesGarbageFile) {
  {
    std::ofstream f(path_);
    f << "this is not sqlite, but it is long enough to have a header......"
         "................................................................";
  }
  auto store = Store::Open(Options());
  EXPECT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr(path_));
}

TEST_F(StoreTest, RejectsBadOptions) {
  StoreOptions o = Options();
  o.migrate_to_version = kSchemaVersion + 1;
  EXPECT_THAT(Store::Open(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("migrate_to_version")));
  o = Options();
  o.synchronous = "OFF";
  EXPECT_THAT(Store::Open(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("synchronous")));
  o = Options();
  o.path = "";
  EXPECT_THAT(Store::Open(o), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(StoreTest, InMemoryWorks) {
  StoreOptions o;
  o.path = ":memory:";
  auto store = Store::Open(o);
  ASSERT_THAT(store, IsOk());
  EXPECT_THAT((*store)->UpsertWorker(MakeWorker("w1", "alpha"), 1), IsOk());
  EXPECT_THAT(
      (*store)->UpsertWorker(Worker(), 1),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("worker_id")));
}

}  // namespace
}  // namespace lockstep::store
