#include "server/verdicts.h"

#include <utility>

#include "common/logging.h"
#include "common/status_macros.h"
#include "kernels/canonical/version.h"
#include "server/metrics.h"

namespace lockstep::server {

std::vector<RunSteps> OpenRuns(store::Store* store, const v1::Job& job) {
  std::vector<RunSteps> out;
  out.reserve(job.runs_size());
  for (const v1::Run& r : job.runs()) {
    RunSteps s;
    s.run = r;
    if (r.state() == v1::RUN_SUCCEEDED) {
      s.steps = store->OpenRunSteps(r.run_id(), r.attempt());
    }
    out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> ClassNames(
    store::Store* store) {
  LS_ASSIGN_OR_RETURN(std::vector<v1::Worker> workers, store->ListWorkers());
  std::map<std::string, std::string> classes;
  for (const v1::Worker& w : workers) {
    classes[w.profile().hardware_class_digest()] = w.profile().hardware_class();
  }
  return classes;
}

absl::StatusOr<v1::Report> JudgeAndStore(store::Store* store,
                                         const v1::Job& job,
                                         const v1::TensorManifest& manifest,
                                         int64_t now_unix_ms) {
  LS_ASSIGN_OR_RETURN(std::optional<v1::Report> stored,
                      store->GetJobReport(job.job_id()));
  if (stored.has_value()) return *stored;
  LS_ASSIGN_OR_RETURN(auto classes, ClassNames(store));
  LS_ASSIGN_OR_RETURN(
      JobVerdict verdict,
      JudgeJob(job, manifest, OpenRuns(store, job), classes,
               canonical::kCanonicalArithmeticVersion, now_unix_ms));
  LS_RETURN_IF_ERROR(
      store->FinishJob(job, verdict.report, verdict.certificates));
  LS_ASSIGN_OR_RETURN(stored, store->GetJobReport(job.job_id()));
  if (!stored.has_value()) {
    return absl::InternalError(absl::StrCat("the report of ", job.job_id(),
                                            " is missing after it was stored"));
  }
  return *stored;
}

VerdictWorker::VerdictWorker(store::Store* store, Clock clock, Done done)
    : store_(store), clock_(std::move(clock)), done_(std::move(done)) {
  thread_ = std::thread([this] { Loop(); });
}

VerdictWorker::~VerdictWorker() { Stop(); }

void VerdictWorker::Enqueue(v1::Job job, v1::TensorManifest manifest) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(Item{std::move(job), std::move(manifest)});
}

void VerdictWorker::WaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](VerdictWorker* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
        return w->queue_.empty() && !w->busy_;
      },
      this));
}

void VerdictWorker::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void VerdictWorker::Loop() {
  while (true) {
    Item item;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](VerdictWorker* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
            return !w->queue_.empty() || w->stop_;
          },
          this));
      if (queue_.empty()) return;  // stopping, nothing left
      item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    absl::StatusOr<v1::Report> report =
        JudgeAndStore(store_, item.job, item.manifest, clock_());
    if (report.ok()) {
      LS_LOG(INFO) << "job " << item.job.job_id()
                   << " finished: " << report->summary();
      Metrics& m = GlobalMetrics();
      m.jobs_finished.Add({v1::JobState_Name(item.job.state())});
      m.verdicts.Add({v1::Verdict_Name(report->verdict())});
      if (report->has_divergence()) {
        const std::string& cause = report->divergence().cause().id();
        m.divergences.Add({cause.empty() ? "unknown" : cause});
      }
    } else {
      LS_LOG(ERROR) << "job " << item.job.job_id()
                    << ": verdict not stored: " << report.status();
    }
    done_(item.job, report);
    absl::MutexLock lock(&mu_);
    busy_ = false;
  }
}

}  // namespace lockstep::server
