// Shared machinery of the fault suites (tests/fault/): a cluster of real
// processes on loopback, a seeded RNG, a reference run without faults, and
// the checks every trial ends with:
//
// - every job ends with the verdict its runs call for: REPRODUCIBLE when
//   all its succeeded runs ran on healthy workers or all on drill workers
//   (which flip one bit of `fc2`'s activation at step 1), NONDETERMINISTIC
//   with the first divergence at step 1, layer "fc2", forward ACTIVATION,
//   when both kinds took part;
// - nothing acknowledged is lost and nothing is stored twice: each run's
//   stored steps (read from the database file itself) are exactly those of
//   the reference run of its kind, fingerprint blob for fingerprint blob,
//   all of the run's final attempt, and no partial batch is left;
// - the run's digest is the reference digest of its kind.
#ifndef LOCKSTEP_TESTS_FAULT_FAULT_CLUSTER_H_
#define LOCKSTEP_TESTS_FAULT_FAULT_CLUSTER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lockstep/v1/lockstep_service.grpc.pb.h"
#include "tests/testing/cluster.h"

namespace lockstep::fault {

// The seed of a suite: LOCKSTEP_FAULT_SEED when set, else `fallback`;
// printed so that a failing run can be repeated exactly.
uint64_t SuiteSeed(uint64_t fallback);

// One stored step of a run, as the database holds it.
struct StoredStep {
  int64_t attempt = 0;
  int64_t step = 0;
  std::string fingerprints;  // the stored blob
  std::string step_digest;
  bool operator==(const StoredStep& o) const {
    return step == o.step && fingerprints == o.fingerprints &&
           step_digest == o.step_digest;
  }
};

// Reads the database file directly (read-only, no checkpoint on close):
// every stored step of `run_id`, any attempt, ordered by attempt and step,
// and the number of its partial batches.
absl::StatusOr<std::vector<StoredStep>> ReadStoredSteps(
    const std::string& db, const std::string& run_id, int64_t* partials);

// The stored record of every run of `job_id`, by run id, read from the
// database file (for the state a killed coordinator left behind).
absl::StatusOr<std::map<std::string, v1::Run>> ReadRunRecords(
    const std::string& db, const std::string& job_id);

// The kinds of job the trials submit.
enum class JobKind {
  // mlp (40 steps), CANONICAL, 2 runs over the workers labelled pool=a.
  kCanonical,
  // mlp (40 steps), CANONICAL, 2 runs over pool=b: one healthy worker and
  // one bit-flip drill worker, so NONDETERMINISTIC when both run it.
  kSplit,
};

class FaultCluster {
 public:
  // `dir`: scratch folder. `coordinator_flags` are added to every start.
  FaultCluster(std::string dir, std::vector<std::string> coordinator_flags);

  testing::Cluster& cluster() { return *cluster_; }
  const std::string& dir() const { return dir_; }

  // Starts the coordinator (on the port of its first start after that),
  // with `extra` flags for this start only.
  bool StartCoordinator(const std::vector<std::string>& extra = {});
  // SIGKILL, reaped.
  void KillCoordinator();
  int port() const { return port_; }

  // Workers: pool=a healthy ones and the pool=b pair (one healthy, one
  // drill). `coordinator` overrides the address they dial (a proxy).
  void StartWorker(const std::string& name, const std::string& pool, bool drill,
                   int slots, const std::string& coordinator = "");
  // Restarts a worker that was killed, with the flags of its first start.
  void RestartWorker(const std::string& name);
  bool WaitConnected(absl::Duration limit);
  const std::vector<std::string>& worker_names() const { return names_; }

  // Submits a job through the CLI; empty on failure (logged to the test).
  std::string Submit(JobKind kind);
  // Polls until the job is SUCCEEDED, FAILED or CANCELLED (the coordinator
  // may be down for part of it).
  absl::StatusOr<v1::Job> WaitFinished(const std::string& job_id,
                                       absl::Duration limit);
  absl::StatusOr<v1::Report> GetReport(const std::string& job_id);

  // Runs one job of each kind without faults and keeps its stored steps as
  // the reference. Returns "" or what went wrong.
  std::string RecordReference();
  // The two jobs RecordReference ran.
  const std::vector<std::string>& reference_jobs() const {
    return reference_jobs_;
  }

  // Checks a finished job (see the file comment). Returns "" or every
  // problem found, one per line.
  std::string CheckJob(const v1::Job& job);

  // Polls the jobs until one of their runs has `steps` steps done or, when
  // `results` > 0, until that many of their runs have succeeded, or `limit`
  // passes. Returns the most steps any run has done.
  int WaitProgress(const std::vector<std::string>& job_ids, int steps,
                   int results, absl::Duration limit);

  // Every "run R attempt A: starting" line in the worker logs: how many
  // times each (run, attempt) was executed.
  std::map<std::pair<std::string, int>, int> Executions();

  std::string Logs() { return cluster_->Logs(); }

 private:
  struct WorkerSpec {
    std::vector<std::string> flags;
    bool drill = false;
  };
  bool IsDrillWorkerId(const std::string& worker_id);

  std::string dir_;
  std::vector<std::string> flags_;
  std::unique_ptr<testing::Cluster> cluster_;
  int port_ = 0;
  std::map<std::string, WorkerSpec> specs_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> id_to_name_;
  std::string mlp_model_, mlp_config_;
  // Reference steps and run digest, by "drill" (true) or healthy (false).
  std::map<bool, std::vector<StoredStep>> reference_;
  std::map<bool, std::string> reference_digest_;
  std::vector<std::string> reference_jobs_;
};

}  // namespace lockstep::fault

#endif  // LOCKSTEP_TESTS_FAULT_FAULT_CLUSTER_H_
