// Fleet audits: the same standard CANONICAL workload once on every selected
// worker, voted tensor by tensor across the fleet (EvaluateAudit in
// analysis.h); every outlier is named with the first tensor where it leaves
// the majority (silent data corruption, a faulty device). A worker that
// vanishes before its run ends gets NO_RESULT once the scheduler's pinned
// wait ends its run.
// Outliers can be quarantined automatically; every result goes into the
// worker's health history.
//
// A workload is a folder of the model zoo (<zoo_dir>/<name>/model.json and
// config.json), or the team's own model and config sent in the request
// (AuditSpec.model; its parameters uploaded first, validated with the job),
// run with determinism CANONICAL, every tensor of every step captured and no
// algorithm overrides, whatever its config says.
//
// Thread-safe.
#ifndef LOCKSTEP_SERVER_AUDIT_MANAGER_H_
#define LOCKSTEP_SERVER_AUDIT_MANAGER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "lockstep/v1/lockstep_service.pb.h"
#include "model/job_config.h"
#include "server/job_manager.h"
#include "server/store/store.h"
#include "server/worker_registry.h"

namespace lockstep::server {

class AuditManager {
 public:
  // Everything must outlive the manager. Registers itself as `jobs`'s
  // job-finished hook (called once the audit job's verdict is stored).
  // `max_workers`: the most workers one audit selects (one run each); the
  // coordinator passes its runs-per-job limit, which the audit's job must
  // meet as well.
  AuditManager(store::Store* store, WorkerRegistry* registry, JobManager* jobs,
               std::string zoo_dir, Clock clock,
               int64_t max_workers = model::Limits().max_runs);

  // Finishes audits whose job ended while the coordinator was down.
  absl::Status Recover();

  absl::StatusOr<lockstep::v1::Audit> Start(
      const lockstep::v1::StartAuditRequest& request);
  absl::StatusOr<lockstep::v1::Audit> Get(const std::string& audit_id);
  absl::StatusOr<lockstep::v1::ListAuditsResponse> List(
      const lockstep::v1::ListAuditsRequest& request);

 private:
  void OnJobFinished(const lockstep::v1::Job& job);
  absl::Status Finish(lockstep::v1::Audit* audit, const lockstep::v1::Job& job);

  store::Store* const store_;
  WorkerRegistry* const registry_;
  JobManager* const jobs_;
  const std::string zoo_dir_;
  const Clock clock_;
  const int64_t max_workers_;
};

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_AUDIT_MANAGER_H_
