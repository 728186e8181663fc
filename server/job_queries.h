// Read-only queries over stored jobs: lists, reports, run comparisons and
// certificates. Everything is read from the store (never under the
// scheduler's lock); a report is the verdict stored when its job finished.
//
// Thread-safe (the store is).
#ifndef LOCKSTEP_SERVER_JOB_QUERIES_H_
#define LOCKSTEP_SERVER_JOB_QUERIES_H_

#include <string>

#include "absl/status/statusor.h"
#include "lockstep/v1/lockstep_service.pb.h"
#include "server/store/store.h"
#include "server/worker_registry.h"

namespace lockstep::server {

class JobQueries {
 public:
  // `store` must outlive the queries.
  JobQueries(store::Store* store, Clock clock)
      : store_(store), clock_(std::move(clock)) {}

  absl::StatusOr<lockstep::v1::ListJobsResponse> ListJobs(
      const lockstep::v1::ListJobsRequest& request);
  // The stored verdict of a finished job. FAILED_PRECONDITION while the job
  // runs. A job that finished without a stored verdict (one finished by an
  // older build) is judged once, streaming, and its verdict stored.
  absl::StatusOr<lockstep::v1::Report> GetReport(const std::string& job_id);
  // Compares two succeeded runs of the same model, config and manifest,
  // streaming their stored steps. Runs of different models or configs get
  // `incomparable_reason` saying what differs, and nothing else.
  absl::StatusOr<lockstep::v1::CompareRunsResponse> CompareRuns(
      const std::string& run_a, const std::string& run_b);
  absl::StatusOr<lockstep::v1::Certificate> GetCertificate(
      const std::string& id);
  absl::StatusOr<lockstep::v1::ListCertificatesResponse> ListCertificates(
      const lockstep::v1::ListCertificatesRequest& request);

 private:
  store::Store* const store_;
  const Clock clock_;
};

// What differs between two configs, as "seed: 7 vs 8; determinism: ..."
// (thread counts ignored); empty when they are the same.
std::string ConfigDifference(const lockstep::v1::JobConfig& a,
                             const lockstep::v1::JobConfig& b);

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_JOB_QUERIES_H_
