// End to end with real binaries on loopback: fleet audits vote per tensor
// across devices. Several simulated machines on this host are told apart by
// their machine-id files (lockstep-worker --machine_id_file); daemons that
// share one device count once.
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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
using ::lockstep::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kFault[] =
    "--inject_fault=step=1,layer=fc2,role=ACTIVATION,bit=22";

class FleetAuditE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir() + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_EQ(std::system(("mkdir -p " + dir_).c_str()), 0);
    cluster_ = std::make_unique<Cluster>(dir_);
    ASSERT_GT(cluster_->StartCoordinator(
                  0, {"--heartbeat_interval_ms=200",
                      "--heartbeat_timeout_ms=2000", "--lease_ms=3000",
                      "--zoo_dir=" + cluster_->Runfile("examples")}),
              0);
  }
  void TearDown() override {
    if (HasFailure()) std::printf("%s\n", cluster_->Logs().c_str());
  }

  // A worker on its own simulated machine: a machine-id file of its own.
  void StartMachine(const std::string& name,
                    std::vector<std::string> flags = {}) {
    const std::string id_file = dir_ + "/" + name + ".machine-id";
    std::ofstream(id_file) << absl::StrCat(
        "5e1f00d", std::hash<std::string>()(name) % 1000000007, "\n");
    flags.push_back("--machine_id_file=" + id_file);
    cluster_->StartWorker(name, flags);
  }

  void WaitConnected(const std::vector<std::string>& names) {
    ASSERT_TRUE(PollUntil(absl::Seconds(60), [&] {
      for (const auto& n : names) {
        if (!cluster_->IsConnected(n)) return false;
      }
      return true;
    }));
  }

  v1::Audit Audit(std::vector<std::string> extra) {
    std::vector<std::string> args = {"audit", "start", "mlp", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = cluster_->Cli(args);
    EXPECT_THAT(r, IsOk());
    v1::Audit audit;
    if (!r.ok()) return audit;
    EXPECT_EQ(r->exit_code, 0) << r->out << r->err;
    EXPECT_TRUE(
        google::protobuf::util::JsonStringToMessage(r->out, &audit).ok())
        << r->out;
    return audit;
  }

  std::map<std::string, std::string> Names() {
    std::map<std::string, std::string> names;
    const v1::ListWorkersResponse workers = cluster_->Workers(true);
    for (const auto& w : workers.workers()) {
      names[w.worker_id()] = w.name();
    }
    return names;
  }

  std::string dir_;
  std::unique_ptr<Cluster> cluster_;
};

// Five machines, one flips a bit of fc2's activation at step 1: the other
// four are a strict majority of devices, so that worker is named with the
// first tensor where it leaves them, and only it is quarantined.
TEST_F(FleetAuditE2E, FiveMachinesOneFaultyIsNamedWithItsFirstTensor) {
  for (const char* n : {"m1", "m2", "m3", "m4"}) StartMachine(n);
  StartMachine("m5", {"--allow_drills", kFault});
  WaitConnected({"m1", "m2", "m3", "m4", "m5"});
  const v1::Audit audit = Audit({"--quarantine"});
  EXPECT_EQ(audit.state(), v1::AUDIT_DONE) << audit.summary();
  EXPECT_FALSE(audit.no_majority()) << audit.summary();
  ASSERT_EQ(audit.workers_size(), 5);
  const auto names = Names();
  for (const auto& w : audit.workers()) {
    const std::string& name = names.at(w.worker_id());
    if (name == "m5") {
      EXPECT_EQ(w.health(), v1::OUTLIER);
      EXPECT_TRUE(w.quarantined());
      EXPECT_EQ(w.divergence().step(), 1);
      EXPECT_EQ(w.divergence().tensor().layer(), "fc2");
      EXPECT_EQ(w.divergence().tensor().role(), v1::ACTIVATION);
      EXPECT_EQ(w.divergence().tensor().phase(), v1::PHASE_FORWARD);
    } else {
      EXPECT_EQ(w.health(), v1::HEALTHY) << name;
      EXPECT_FALSE(w.quarantined()) << name;
    }
  }
  const v1::ListWorkersResponse workers = cluster_->Workers(true);
  for (const auto& w : workers.workers()) {
    EXPECT_EQ(w.admin_state() == v1::QUARANTINED, w.name() == "m5") << w.name();
  }
  auto show = cluster_->Cli({"audit", "show", audit.audit_id()});
  ASSERT_THAT(show, IsOk());
  EXPECT_THAT(show->out, HasSubstr("OUTLIER"));
  EXPECT_THAT(show->out, HasSubstr("m5 (w-"));
  EXPECT_THAT(show->out, HasSubstr("layer \"fc2\""));
}

// Two machines that disagree: neither is a majority, so the audit says so
// and quarantines nobody.
TEST_F(FleetAuditE2E, TwoMachinesThatDisagreeHaveNoMajority) {
  StartMachine("a1");
  StartMachine("a2", {"--allow_drills", kFault});
  WaitConnected({"a1", "a2"});
  const v1::Audit audit = Audit({"--quarantine"});
  EXPECT_EQ(audit.state(), v1::AUDIT_DONE) << audit.summary();
  EXPECT_TRUE(audit.no_majority());
  EXPECT_THAT(audit.summary(), HasSubstr("no majority"));
  ASSERT_EQ(audit.workers_size(), 2);
  for (const auto& w : audit.workers()) {
    EXPECT_NE(w.health(), v1::OUTLIER);
    EXPECT_FALSE(w.quarantined());
  }
  const v1::ListWorkersResponse workers = cluster_->Workers(true);
  for (const auto& w : workers.workers()) {
    EXPECT_NE(w.admin_state(), v1::QUARANTINED) << w.name();
  }
}

// Four daemons on this one machine are one device: one device cannot
// outvote another, so even a drill worker among them is not named.
TEST_F(FleetAuditE2E, DaemonsOnOneDeviceVoteOnce) {
  for (const char* n : {"d1", "d2", "d3"}) cluster_->StartWorker(n);
  cluster_->StartWorker("d4", {"--allow_drills", kFault});
  WaitConnected({"d1", "d2", "d3", "d4"});
  const v1::Audit audit = Audit({"--quarantine"});
  EXPECT_EQ(audit.state(), v1::AUDIT_DONE) << audit.summary();
  EXPECT_TRUE(audit.no_majority()) << audit.summary();
  std::set<std::string> devices;
  for (const auto& w : audit.workers()) {
    devices.insert(w.device_id());
    EXPECT_NE(w.health(), v1::OUTLIER);
    EXPECT_FALSE(w.quarantined());
  }
  EXPECT_EQ(devices.size(), 1u);
}

}  // namespace
}  // namespace lockstep
