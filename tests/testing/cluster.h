// A Lockstep cluster of real processes on loopback for end-to-end tests:
// one lockstep-coordinator, any number of lockstep-worker daemons, and the
// lockstep CLI, all started from the test's runfiles. Every process is ended
// by PID when the cluster is destroyed.
#ifndef LOCKSTEP_TESTS_TESTING_CLUSTER_H_
#define LOCKSTEP_TESTS_TESTING_CLUSTER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "lockstep/v1/lockstep_service.grpc.pb.h"
#include "tests/testing/subprocess.h"

namespace lockstep::testing {

// Polls `done` every 20 ms until it holds or `limit` passes.
bool PollUntil(absl::Duration limit, const std::function<bool()>& done);

class Cluster {
 public:
  // `dir`: scratch folder for logs and the database.
  explicit Cluster(std::string dir);
  ~Cluster();

  // Starts the coordinator on `port` (0: any) with extra flags; returns the
  // bound port (0 on failure).
  int StartCoordinator(int port, const std::vector<std::string>& flags = {});
  Subprocess* coordinator() { return coordinator_.get(); }
  const std::string& address() const { return address_; }
  const std::string& db() const { return db_; }

  // Starts `lockstep-worker daemon --name=NAME` with extra flags.
  Subprocess* StartWorker(const std::string& name,
                          const std::vector<std::string>& flags = {});
  Subprocess* worker(const std::string& name) { return workers_[name].get(); }

  // Runs the CLI against the coordinator (bounded).
  absl::StatusOr<CommandResult> Cli(
      const std::vector<std::string>& args,
      absl::Duration timeout = absl::Seconds(120));

  std::unique_ptr<v1::Lockstep::Stub> Stub();
  // ListWorkers through the public API (empty on error).
  v1::ListWorkersResponse Workers(bool include_gone);
  bool IsConnected(const std::string& name);
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);

  // Every log of this cluster, for failure messages.
  std::string Logs();

  std::string Runfile(const std::string& path) const;

 private:
  std::string dir_, db_, address_;
  std::unique_ptr<Subprocess> coordinator_;
  std::map<std::string, std::unique_ptr<Subprocess>> workers_;
};

}  // namespace lockstep::testing

#endif  // LOCKSTEP_TESTS_TESTING_CLUSTER_H_
