#include "server/quotas.h"

#include "absl/strings/str_format.h"

namespace lockstep::server {
namespace {

// RESOURCE_EXHAUSTED when `used` + `add` passes `limit` (0: no limit).
absl::Status Check(const char* quota, const std::string& principal,
                   int64_t limit, int64_t used, int64_t add) {
  if (limit <= 0 || used + add <= limit) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s: %s holds %d in unfinished jobs and this job needs %d, over the "
      "quota of %d per principal; wait for jobs to finish or cancel some",
      quota,
      principal.empty() ? "the anonymous caller" : "\"" + principal + "\"",
      used, add, limit));
}

}  // namespace

absl::Status Quotas::Reserve(const std::string& principal,
                             const std::string& job_id, int64_t runs,
                             int64_t bytes) {
  absl::MutexLock lock(&mu_);
  const Usage& u = usage_[principal];
  absl::Status s = Check("quota_jobs", principal, options_.max_jobs, u.jobs, 1);
  if (s.ok())
    s = Check("quota_runs", principal, options_.max_runs, u.runs, runs);
  if (s.ok()) {
    s = Check("quota_fingerprint_bytes", principal,
              options_.max_fingerprint_bytes, u.bytes, bytes);
  }
  if (!s.ok()) return s;
  ChargeLocked(principal, job_id, runs, bytes);
  return absl::OkStatus();
}

void Quotas::Charge(const std::string& principal, const std::string& job_id,
                    int64_t runs, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  ChargeLocked(principal, job_id, runs, bytes);
}

void Quotas::ChargeLocked(const std::string& principal,
                          const std::string& job_id, int64_t runs,
                          int64_t bytes) {
  if (jobs_.count(job_id) > 0) return;
  jobs_[job_id] = Charged{principal, runs, bytes};
  Usage& u = usage_[principal];
  u.jobs += 1;
  u.runs += runs;
  u.bytes += bytes;
}

void Quotas::Release(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  Usage& u = usage_[it->second.principal];
  u.jobs -= 1;
  u.runs -= it->second.runs;
  u.bytes -= it->second.bytes;
  if (u.jobs == 0) usage_.erase(it->second.principal);
  jobs_.erase(it);
}

}  // namespace lockstep::server
