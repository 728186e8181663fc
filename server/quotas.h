// Per-principal quotas on what unfinished jobs hold: jobs, runs and the
// fingerprint bytes they may store. A submission over a quota is refused
// with RESOURCE_EXHAUSTED naming the quota, its limit and the principal's
// usage; a job's share is released once its verdict is stored (it
// finished, failed or was cancelled).
//
// Thread-safe.
#ifndef LOCKSTEP_SERVER_QUOTAS_H_
#define LOCKSTEP_SERVER_QUOTAS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace lockstep::server {

struct QuotaOptions {
  // Unfinished jobs per principal. 0 (default): no quota.
  int64_t max_jobs = 0;
  // Runs of those jobs. 0 (default): no quota.
  int64_t max_runs = 0;
  // Fingerprint bytes those jobs may store (each job's manifest entries x
  // captured steps x runs x stored bytes per fingerprint). 0 (default): no
  // quota.
  int64_t max_fingerprint_bytes = 0;
};

class Quotas {
 public:
  explicit Quotas(QuotaOptions options) : options_(options) {}
  Quotas(const Quotas&) = delete;
  Quotas& operator=(const Quotas&) = delete;

  // Charges `job_id` (runs, bytes) to `principal` ("" is the anonymous
  // caller) if every quota allows it; RESOURCE_EXHAUSTED naming the first
  // one it would pass otherwise, charging nothing.
  absl::Status Reserve(const std::string& principal, const std::string& job_id,
                       int64_t runs, int64_t bytes);
  // Charges without checking (jobs recovered at start-up).
  void Charge(const std::string& principal, const std::string& job_id,
              int64_t runs, int64_t bytes);
  // Gives `job_id`'s share back; idempotent, unknown ids are ignored.
  void Release(const std::string& job_id);

 private:
  struct Usage {
    int64_t jobs = 0;
    int64_t runs = 0;
    int64_t bytes = 0;
  };
  struct Charged {
    std::string principal;
    int64_t runs = 0;
    int64_t bytes = 0;
  };
  void ChargeLocked(const std::string& principal, const std::string& job_id,
                    int64_t runs, int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const QuotaOptions options_;
  absl::Mutex mu_;
  std::map<std::string, Usage> usage_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Charged> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_QUOTAS_H_
