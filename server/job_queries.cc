#include "server/job_queries.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/digest.h"
#include "common/status_macros.h"
#include "server/analysis.h"
#include "server/submission.h"
#include "server/verdicts.h"

namespace lockstep::server {

using ::lockstep::v1::Job;
using ::lockstep::v1::Run;

namespace {

bool IsFinishedState(v1::JobState s) {
  return s == v1::JOB_SUCCEEDED || s == v1::JOB_FAILED ||
         s == v1::JOB_CANCELLED;
}

// One field of a message in text form, without its name: "7", "{kind: SGD}".
std::string FieldText(const v1::JobConfig& only_field,
                      const google::protobuf::FieldDescriptor* f) {
  std::string text = only_field.ShortDebugString();
  if (text.empty()) return "(unset)";
  const std::string prefix = absl::StrCat(f->name(), ": ");
  if (absl::StartsWith(text, prefix) && !f->is_repeated()) {
    return text.substr(prefix.size());
  }
  const std::string block = absl::StrCat(f->name(), " ");
  if (absl::StartsWith(text, block) && !f->is_repeated()) {
    return text.substr(block.size());
  }
  return absl::StrCat("[", text, "]");
}

}  // namespace

std::string ConfigDifference(const v1::JobConfig& a, const v1::JobConfig& b) {
  std::vector<std::string> diffs;
  const google::protobuf::Descriptor* d = v1::JobConfig::descriptor();
  const google::protobuf::Reflection* r = v1::JobConfig::GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->name() == "threads") continue;  // never changes results
    v1::JobConfig a_rest = a, b_rest = b, only_a, only_b;
    r->SwapFields(&a_rest, &only_a, {f});
    r->SwapFields(&b_rest, &only_b, {f});
    const std::string ta = FieldText(only_a, f);
    const std::string tb = FieldText(only_b, f);
    if (ta != tb)
      diffs.push_back(absl::StrCat(f->name(), ": ", ta, " vs ", tb));
  }
  return absl::StrJoin(diffs, "; ");
}

namespace {

// "created_ms:job_id" of the last job of a page; the next page starts
// after it.
std::string PageTokenAfter(const Job& job) {
  return absl::StrCat(job.created_unix_ms(), ":", job.job_id());
}

// A golden lookup: exactly one label, a model and a config, verdict
// REPRODUCIBLE, first page. The verdict index answers it in one seek.
bool IsGoldenLookup(const v1::ListJobsRequest& r) {
  return r.labels_size() == 1 && !r.model_digest().empty() &&
         !r.config_digest().empty() && r.verdict() == v1::REPRODUCIBLE &&
         r.page_token().empty();
}

}  // namespace

absl::StatusOr<v1::ListJobsResponse> JobQueries::ListJobs(
    const v1::ListJobsRequest& request) {
  if (request.page_size() < 0 || request.page_size() > 500) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "page_size: %d is outside 0..500", request.page_size()));
  }
  if (!v1::JobState_IsValid(request.state())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "state: %d is not a JobState", static_cast<int>(request.state())));
  }
  if (!request.config_digest().empty() &&
      !IsDigest128Hex(request.config_digest())) {
    return absl::InvalidArgumentError(
        "config_digest: must be empty or 32 lowercase hex characters");
  }
  if (!v1::Verdict_IsValid(request.verdict())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "verdict: %d is not a Verdict", static_cast<int>(request.verdict())));
  }
  if (IsGoldenLookup(request)) {
    const auto& [key, value] = *request.labels().begin();
    LS_ASSIGN_OR_RETURN(std::optional<std::string> id,
                        store_->FindGoldenJob(
                            key, value, request.model_digest(),
                            request.config_digest(), request.exclude_job_id()));
    // FinishJob indexes each verdict it stores, so no entry means no job
    // qualifies.
    if (!id.has_value()) return v1::ListJobsResponse();
    LS_ASSIGN_OR_RETURN(std::optional<Job> job, store_->GetJob(*id));
    // The newest qualifying job is the whole first page of one (with a
    // state filter, when in that state); other pages take the general path.
    if (job.has_value() && request.page_size() == 1 &&
        (request.state() == v1::JOB_STATE_UNSPECIFIED ||
         job->state() == request.state())) {
      v1::ListJobsResponse response;
      response.set_next_page_token(PageTokenAfter(*job));
      *response.add_jobs() = std::move(*job);
      return response;
    }
  }
  store::JobQuery q;
  q.page_size = request.page_size() == 0 ? 50 : request.page_size();
  q.state = request.state();
  q.model_digest = request.model_digest();
  q.config_digest = request.config_digest();
  if (!request.page_token().empty()) {
    std::pair<std::string, std::string> parts =
        absl::StrSplit(request.page_token(), absl::MaxSplits(':', 1));
    if (!absl::SimpleAtoi(parts.first, &q.before_created_ms) ||
        parts.second.empty()) {
      return absl::InvalidArgumentError(
          "page_token: not a token from a previous ListJobs response");
    }
    q.before_job_id = parts.second;
  }
  // Label, verdict and exclusion filters are applied after the page is
  // read, so read generously.
  const bool filter_after = request.labels_size() > 0 ||
                            request.verdict() != v1::VERDICT_UNSPECIFIED ||
                            !request.exclude_job_id().empty();
  if (filter_after) q.page_size = std::min(500, q.page_size * 4);
  LS_ASSIGN_OR_RETURN(std::vector<Job> jobs, store_->ListJobs(q));
  const int page_size = request.page_size() == 0 ? 50 : request.page_size();
  v1::ListJobsResponse response;
  for (Job& job : jobs) {
    bool match = job.job_id() != request.exclude_job_id();
    for (const auto& [k, v] : request.labels()) {
      auto it = job.spec().labels().find(k);
      if (it == job.spec().labels().end() || it->second != v) match = false;
    }
    if (match && request.verdict() != v1::VERDICT_UNSPECIFIED) {
      LS_ASSIGN_OR_RETURN(std::optional<v1::Report> report,
                          store_->GetJobReport(job.job_id()));
      match = report.has_value() && report->verdict() == request.verdict();
    }
    if (!match) continue;
    if (response.jobs_size() == page_size) {
      // A full page; the next one starts after its last job.
      response.set_next_page_token(
          PageTokenAfter(response.jobs(response.jobs_size() - 1)));
      return response;
    }
    *response.add_jobs() = std::move(job);
  }
  if (static_cast<int>(jobs.size()) == q.page_size && !jobs.empty()) {
    response.set_next_page_token(PageTokenAfter(jobs.back()));
  }
  return response;
}

absl::StatusOr<v1::Report> JobQueries::GetReport(const std::string& job_id) {
  LS_ASSIGN_OR_RETURN(std::optional<v1::Report> stored,
                      store_->GetJobReport(job_id));
  if (stored.has_value()) return *stored;
  LS_ASSIGN_OR_RETURN(std::optional<Job> job, store_->GetJob(job_id));
  if (!job.has_value()) {
    return absl::NotFoundError(absl::StrCat("job_id: no job \"", job_id, "\""));
  }
  if (!IsFinishedState(job->state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is ", v1::JobState_Name(job->state()),
                     "; its report is ready when it finishes"));
  }
  LS_ASSIGN_OR_RETURN(v1::TensorManifest manifest, store_->GetManifest(job_id));
  return JudgeAndStore(store_, *job, manifest, clock_());
}

absl::StatusOr<v1::CompareRunsResponse> JobQueries::CompareRuns(
    const std::string& run_a, const std::string& run_b) {
  if (run_a.empty() || run_b.empty()) {
    return absl::InvalidArgumentError("run_a, run_b: both must be set");
  }
  struct Side {
    Job job;
    Run run;
    v1::TensorManifest manifest;
  };
  auto load = [this](const std::string& field,
                     const std::string& run_id) -> absl::StatusOr<Side> {
    const std::string job_id = JobIdOfRun(run_id);
    if (job_id.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": \"", run_id, "\" is not a run id (<job id>-rNN)"));
    }
    LS_ASSIGN_OR_RETURN(std::optional<Job> job, store_->GetJob(job_id));
    if (!job.has_value()) {
      return absl::NotFoundError(
          absl::StrCat(field, ": no run \"", run_id, "\""));
    }
    for (const Run& r : job->runs()) {
      if (r.run_id() != run_id) continue;
      if (r.state() != v1::RUN_SUCCEEDED) {
        return absl::FailedPreconditionError(absl::StrCat(
            field, ": run ", run_id, " is ", v1::RunState_Name(r.state()),
            "; only succeeded runs can be compared"));
      }
      LS_ASSIGN_OR_RETURN(v1::TensorManifest m, store_->GetManifest(job_id));
      return Side{*job, r, std::move(m)};
    }
    return absl::NotFoundError(
        absl::StrCat(field, ": no run \"", run_id, "\""));
  };
  LS_ASSIGN_OR_RETURN(Side a, load("run_a", run_a));
  LS_ASSIGN_OR_RETURN(Side b, load("run_b", run_b));
  v1::CompareRunsResponse response;
  response.set_run_a_digest(a.run.run_digest());
  response.set_run_b_digest(b.run.run_digest());
  // Different inputs are expected to give different bits: say what
  // differs instead of calling it a divergence.
  std::vector<std::string> why;
  if (a.job.model_digest() != b.job.model_digest()) {
    why.push_back(absl::StrCat("model differs: digest ", a.job.model_digest(),
                               " vs ", b.job.model_digest()));
  }
  if (a.job.config_digest() != b.job.config_digest()) {
    const std::string diff =
        ConfigDifference(a.job.spec().config(), b.job.spec().config());
    why.push_back(absl::StrCat(
        "config differs: ", diff.empty()
                                ? absl::StrCat("digest ", a.job.config_digest(),
                                               " vs ", b.job.config_digest())
                                : diff));
  }
  if (why.empty() &&
      a.manifest.manifest_digest() != b.manifest.manifest_digest()) {
    why.push_back(
        absl::StrCat("tensor manifest differs: ", a.manifest.manifest_digest(),
                     " vs ", b.manifest.manifest_digest()));
  }
  if (!why.empty()) {
    response.set_incomparable_reason(absl::StrJoin(why, "; "));
    return response;
  }
  if (a.run.run_digest() == b.run.run_digest()) {
    response.set_identical(true);
    return response;
  }
  std::unique_ptr<StepReader> a_steps =
      store_->OpenRunSteps(a.run.run_id(), a.run.attempt());
  std::unique_ptr<StepReader> b_steps =
      store_->OpenRunSteps(b.run.run_id(), b.run.attempt());
  LS_ASSIGN_OR_RETURN(std::optional<v1::Divergence> d,
                      CompareRunSteps(a.manifest, a.job.spec().config(), a.run,
                                      a_steps.get(), b.run, b_steps.get()));
  if (!d.has_value()) {
    response.set_identical(true);
  } else {
    *response.mutable_divergence() = std::move(*d);
  }
  return response;
}

absl::StatusOr<v1::Certificate> JobQueries::GetCertificate(
    const std::string& id) {
  LS_ASSIGN_OR_RETURN(std::optional<v1::Certificate> c,
                      store_->GetCertificate(id));
  if (!c.has_value()) {
    return absl::NotFoundError(
        absl::StrCat("certificate_id: no certificate \"", id, "\""));
  }
  return *c;
}

absl::StatusOr<v1::ListCertificatesResponse> JobQueries::ListCertificates(
    const v1::ListCertificatesRequest& request) {
  if (request.page_size() < 0 || request.page_size() > 500) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "page_size: %d is outside 0..500", request.page_size()));
  }
  if (!v1::Level_IsValid(request.level())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "level: %d is not a Level", static_cast<int>(request.level())));
  }
  LS_ASSIGN_OR_RETURN(std::vector<v1::Certificate> certs,
                      store_->ListCertificates(
                          request.model_digest(),
                          request.hardware_class_digest(), request.level(),
                          request.page_size() == 0 ? 50 : request.page_size()));
  v1::ListCertificatesResponse response;
  for (auto& c : certs) *response.add_certificates() = std::move(c);
  return response;
}

}  // namespace lockstep::server
