#include "server/job_manager.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/digest.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "kernels/canonical/version.h"
#include "kernels/hash/fingerprint.h"
#include "model/manifest.h"

namespace lockstep::server {

using ::lockstep::v1::Job;
using ::lockstep::v1::JobEvent;
using ::lockstep::v1::Run;

namespace {

std::string DeterministicBytes(const google::protobuf::Message& m) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    m.SerializeToCodedStream(&coded);
  }
  return out;
}

bool IsTerminal(v1::RunState s) {
  return s == v1::RUN_SUCCEEDED || s == v1::RUN_FAILED ||
         s == v1::RUN_CANCELLED;
}

std::string NewJobId() {
  absl::BitGen gen;
  return absl::StrFormat("job-%016x", absl::Uniform<uint64_t>(gen));
}

std::string RunIdFor(const std::string& job_id, int index) {
  return absl::StrFormat("%s-r%02d", job_id, index);
}

bool LabelsMatch(const google::protobuf::Map<std::string, std::string>& want,
                 const std::map<std::string, std::string>& have) {
  for (const auto& [k, v] : want) {
    auto it = have.find(k);
    if (it == have.end() || it->second != v) return false;
  }
  return true;
}

template <typename Container>
bool Contains(const Container& c, const std::string& x) {
  return std::find(c.begin(), c.end(), x) != c.end();
}

}  // namespace

std::string ModelDigest(const v1::Model& model) {
  v1::Model copy = model;
  copy.clear_name();
  return Digest128Hex(DeterministicBytes(copy));
}

std::string ConfigDigest(const v1::JobConfig& config) {
  v1::JobConfig copy = config;
  copy.clear_threads();
  return Digest128Hex(DeterministicBytes(copy));
}

JobManager::JobManager(store::Store* store, WorkerRegistry* registry,
                       JobManagerOptions options, Clock clock)
    : store_(store),
      registry_(registry),
      options_(std::move(options)),
      clock_(std::move(clock)) {}

bool JobManager::IsFinished(v1::JobState state) const {
  return state == v1::JOB_SUCCEEDED || state == v1::JOB_FAILED ||
         state == v1::JOB_CANCELLED;
}

// ---------------------------------------------------------------------------
// Submission

absl::StatusOr<Job> JobManager::Submit(const v1::SubmitJobRequest& request) {
  const v1::JobSpec& spec = request.spec();
  if (!request.has_spec()) {
    return absl::InvalidArgumentError("spec: must be set");
  }
  const std::string& key = request.idempotency_key();
  if (key.size() > 64) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "idempotency_key: %d characters exceed the limit of 64", key.size()));
  }
  for (char ch : key) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(ch)) || ch == '_' ||
          ch == '-')) {
      return absl::InvalidArgumentError(
          "idempotency_key: only A-Z a-z 0-9 _ - are allowed");
    }
  }
  if (!key.empty()) {
    LS_ASSIGN_OR_RETURN(std::optional<std::string> existing,
                        store_->FindJobByIdempotencyKey(key));
    if (existing.has_value()) return GetJob(*existing);
  }
  // The same validators as the workers': every message names the field
  // and the limit ("spec.config.steps: ...", "spec.layers[3] ...").
  absl::StatusOr<model::ModelPlan> plan =
      model::PlanModel(spec.model(), spec.config(), options_.limits);
  if (!plan.ok()) {
    const absl::string_view m = plan.status().message();
    return absl::Status(
        plan.status().code(),
        absl::StrCat(absl::StartsWith(m, "layers[") ? "spec.model." : "spec.",
                     m));
  }
  absl::Status placed = model::ValidatePlacement(
      spec.placement(), spec.config(), options_.limits);
  if (!placed.ok()) {
    return absl::Status(placed.code(), absl::StrCat("spec.", placed.message()));
  }
  if (spec.labels_size() > 64) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "spec.labels: %d labels exceed the limit of 64", spec.labels_size()));
  }
  const v1::Placement& placement = spec.placement();
  const int runs = placement.runs() == 0 ? 2 : placement.runs();
  const v1::DeterminismMode mode =
      spec.config().determinism() == v1::DETERMINISM_MODE_UNSPECIFIED
          ? v1::CANONICAL
          : spec.config().determinism();
  absl::StatusOr<v1::TensorManifest> manifest =
      model::BuildManifest(*plan, spec.config());
  if (!manifest.ok()) {
    return absl::Status(manifest.status().code(),
                        absl::StrCat("spec: ", manifest.status().message()));
  }

  Job job;
  job.set_job_id(NewJobId());
  *job.mutable_spec() = spec;
  job.set_state(v1::JOB_QUEUED);
  job.set_model_digest(ModelDigest(spec.model()));
  job.set_config_digest(ConfigDigest(spec.config()));
  job.set_created_unix_ms(clock_());
  for (int i = 0; i < runs; ++i) {
    Run* r = job.add_runs();
    r->set_run_id(RunIdFor(job.job_id(), i));
    r->set_job_id(job.job_id());
    r->set_index(i);
    r->set_attempt(1);
    r->set_state(v1::RUN_QUEUED);
    r->set_steps_total(spec.config().steps());
    r->set_created_unix_ms(job.created_unix_ms());
  }
  absl::Status inserted = store_->InsertJob(job, *manifest, key);
  if (inserted.code() == absl::StatusCode::kAlreadyExists && !key.empty()) {
    LS_ASSIGN_OR_RETURN(std::optional<std::string> existing,
                        store_->FindJobByIdempotencyKey(key));
    if (existing.has_value()) return GetJob(*existing);
  }
  LS_RETURN_IF_ERROR(inserted);
  LS_LOG(INFO) << "job " << job.job_id() << " submitted: model "
               << spec.model().name() << ", " << runs << " runs, "
               << v1::DeterminismMode_Name(mode);
  Events events;
  Job snapshot;
  {
    absl::MutexLock lock(&mu_);
    EvictFinishedLocked();
    JobState& js = jobs_[job.job_id()];
    js.job = job;
    js.manifest = *manifest;
    InitPins(&js);
    for (const Run& r : job.runs()) queue_.push_back(r.run_id());
    AssignLocked(&events);
    snapshot = jobs_[job.job_id()].job;
  }
  Dispatch(std::move(events));
  return snapshot;
}

// ---------------------------------------------------------------------------
// Queries

absl::StatusOr<Job> JobManager::GetJob(const std::string& job_id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) return it->second.job;
  }
  LS_ASSIGN_OR_RETURN(std::optional<Job> job, store_->GetJob(job_id));
  if (!job.has_value()) {
    return absl::NotFoundError(absl::StrCat("job_id: no job \"", job_id, "\""));
  }
  return *job;
}

absl::StatusOr<v1::ListJobsResponse> JobManager::ListJobs(
    const v1::ListJobsRequest& request) {
  if (request.page_size() < 0 || request.page_size() > 500) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "page_size: %d is outside 0..500", request.page_size()));
  }
  if (!v1::JobState_IsValid(request.state())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "state: %d is not a JobState", static_cast<int>(request.state())));
  }
  store::JobQuery q;
  q.page_size = request.page_size() == 0 ? 50 : request.page_size();
  q.state = request.state();
  q.model_digest = request.model_digest();
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
  // Label filters are applied after the page is read, so read generously.
  const bool filter_labels = request.labels_size() > 0;
  if (filter_labels) q.page_size = std::min(500, q.page_size * 4);
  LS_ASSIGN_OR_RETURN(std::vector<Job> jobs, store_->ListJobs(q));
  v1::ListJobsResponse response;
  for (Job& job : jobs) {
    bool match = true;
    for (const auto& [k, v] : request.labels()) {
      auto it = job.spec().labels().find(k);
      if (it == job.spec().labels().end() || it->second != v) match = false;
    }
    if (!match) continue;
    *response.add_jobs() = std::move(job);
  }
  if (static_cast<int>(jobs.size()) == q.page_size && !jobs.empty()) {
    const Job& last = jobs.back();
    response.set_next_page_token(
        absl::StrCat(last.created_unix_ms(), ":", last.job_id()));
  }
  return response;
}

absl::StatusOr<std::vector<RunData>> JobManager::LoadRunsLocked(
    const JobState& js) {
  std::vector<RunData> out;
  for (const Run& r : js.job.runs()) {
    RunData d;
    d.run = r;
    if (r.state() == v1::RUN_SUCCEEDED) {
      LS_ASSIGN_OR_RETURN(d.steps,
                          store_->LoadRunSteps(r.run_id(), r.attempt()));
    }
    out.push_back(std::move(d));
  }
  return out;
}

absl::StatusOr<v1::Report> JobManager::GetReport(const std::string& job_id) {
  LS_ASSIGN_OR_RETURN(Job job, GetJob(job_id));
  if (!IsFinished(job.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is ", v1::JobState_Name(job.state()),
                     "; its report is ready when it finishes"));
  }
  LS_ASSIGN_OR_RETURN(v1::TensorManifest manifest, store_->GetManifest(job_id));
  JobState js;
  js.job = job;
  js.manifest = manifest;
  std::vector<RunData> runs;
  {
    absl::MutexLock lock(&mu_);
    LS_ASSIGN_OR_RETURN(runs, LoadRunsLocked(js));
  }
  LS_ASSIGN_OR_RETURN(v1::Report report, BuildReport(job, manifest, runs));
  if (job.state() == v1::JOB_CANCELLED) {
    report.set_verdict(v1::INCONCLUSIVE);
    report.set_summary(absl::StrCat("job cancelled: ", job.failure_reason()));
  }
  for (const v1::Certificate& c :
       CertificatesFor(job, report, {}, canonical::kCanonicalArithmeticVersion,
                       0, RunsAreNanFree(runs))) {
    report.add_certificate_ids(c.certificate_id());
  }
  return report;
}

absl::StatusOr<v1::CompareRunsResponse> JobManager::CompareRuns(
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
    const size_t cut = run_id.rfind("-r");
    if (cut == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": \"", run_id, "\" is not a run id (<job id>-rNN)"));
    }
    absl::StatusOr<Job> job = GetJob(run_id.substr(0, cut));
    if (!job.ok()) {
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
      LS_ASSIGN_OR_RETURN(v1::TensorManifest m,
                          store_->GetManifest(job->job_id()));
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
  if (a.manifest.manifest_digest() != b.manifest.manifest_digest()) {
    response.set_incomparable_reason(absl::StrCat(
        "the runs recorded different tensor manifests (",
        a.manifest.manifest_digest(), " vs ", b.manifest.manifest_digest(),
        "): the model or capture policy differs"));
    return response;
  }
  if (a.run.run_digest() == b.run.run_digest()) {
    response.set_identical(true);
    return response;
  }
  RunData da, db;
  da.run = a.run;
  db.run = b.run;
  LS_ASSIGN_OR_RETURN(da.steps,
                      store_->LoadRunSteps(a.run.run_id(), a.run.attempt()));
  LS_ASSIGN_OR_RETURN(db.steps,
                      store_->LoadRunSteps(b.run.run_id(), b.run.attempt()));
  LS_ASSIGN_OR_RETURN(
      std::optional<v1::Divergence> d,
      CompareRunData(a.manifest, a.job.spec().config(), da, db));
  if (!d.has_value()) {
    response.set_identical(true);
  } else {
    *response.mutable_divergence() = std::move(*d);
  }
  return response;
}

absl::StatusOr<v1::Certificate> JobManager::GetCertificate(
    const std::string& id) {
  LS_ASSIGN_OR_RETURN(std::optional<v1::Certificate> c,
                      store_->GetCertificate(id));
  if (!c.has_value()) {
    return absl::NotFoundError(
        absl::StrCat("certificate_id: no certificate \"", id, "\""));
  }
  return *c;
}

absl::StatusOr<v1::ListCertificatesResponse> JobManager::ListCertificates(
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

// ---------------------------------------------------------------------------
// Watching

absl::StatusOr<int64_t> JobManager::Watch(const std::string& job_id,
                                          Watcher watcher) {
  LS_ASSIGN_OR_RETURN(Job job, GetJob(job_id));
  JobEvent first;
  *first.mutable_job() = job;
  first.set_message("snapshot");
  first.set_final(IsFinished(job.state()));
  first.set_event_unix_ms(clock_());
  int64_t token;
  {
    absl::MutexLock lock(&watch_mu_);
    token = next_token_++;
    watchers_[token] = {job_id, watcher};
  }
  watcher(first);
  return token;
}

void JobManager::Unwatch(int64_t token) {
  absl::MutexLock lock(&watch_mu_);
  watchers_.erase(token);
}

void JobManager::SetJobFinishedHook(std::function<void(const Job&)> hook) {
  finished_hook_ = std::move(hook);
}

void JobManager::InitPins(JobState* js) {
  if (js->job.spec().labels().count(kAuditLabel) == 0) return;
  const auto& ids = js->job.spec().placement().worker_ids();
  js->run_workers.assign(ids.begin(), ids.end());
}

absl::StatusOr<std::vector<RunData>> JobManager::LoadRuns(const Job& job) {
  JobState js;
  js.job = job;
  absl::MutexLock lock(&mu_);
  return LoadRunsLocked(js);
}

void JobManager::Dispatch(Events events) {
  if (events.empty()) return;
  if (finished_hook_) {
    for (const auto& [job_id, event] : events) {
      if (event.final()) finished_hook_(event.job());
    }
  }
  std::vector<std::pair<std::string, Watcher>> targets;
  {
    absl::MutexLock lock(&watch_mu_);
    for (const auto& [token, w] : watchers_) targets.push_back(w);
  }
  for (const auto& [job_id, event] : events) {
    for (const auto& [watched, watcher] : targets) {
      if (watched == job_id) watcher(event);
    }
  }
}

void JobManager::EventLocked(JobState* js, const std::string& run_id,
                             const std::string& message, Events* events) {
  JobEvent e;
  *e.mutable_job() = js->job;
  e.set_run_id(run_id);
  e.set_message(message);
  e.set_final(IsFinished(js->job.state()));
  e.set_event_unix_ms(clock_());
  events->emplace_back(js->job.job_id(), std::move(e));
}

// ---------------------------------------------------------------------------
// Scheduling

Run* JobManager::FindRunLocked(const std::string& run_id, JobState** job_out) {
  const size_t cut = run_id.rfind("-r");
  if (cut == std::string::npos) return nullptr;
  auto it = jobs_.find(run_id.substr(0, cut));
  if (it == jobs_.end()) return nullptr;
  for (Run& r : *it->second.job.mutable_runs()) {
    if (r.run_id() == run_id) {
      if (job_out != nullptr) *job_out = &it->second;
      return &r;
    }
  }
  return nullptr;
}

void JobManager::PersistRunLocked(const Run& run) {
  absl::Status s = store_->UpdateRun(run);
  if (!s.ok()) LS_LOG(ERROR) << "run " << run.run_id() << " not stored: " << s;
}

void JobManager::PersistJobLocked(const Job& job) {
  absl::Status s = store_->UpdateJob(job);
  if (!s.ok()) LS_LOG(ERROR) << "job " << job.job_id() << " not stored: " << s;
}

void JobManager::AssignLocked(Events* events) {
  if (queue_.empty()) return;
  const std::vector<LiveWorker> workers = registry_->LiveWorkers();
  if (workers.empty()) return;
  const int64_t now = clock_();
  std::deque<std::string> waiting;
  while (!queue_.empty()) {
    const std::string run_id = queue_.front();
    queue_.pop_front();
    JobState* js = nullptr;
    Run* run = FindRunLocked(run_id, &js);
    if (run == nullptr || run->state() != v1::RUN_QUEUED) continue;
    const v1::Placement& p = js->job.spec().placement();
    // Runs of this job per worker and per class, to spread them.
    std::map<std::string, int> per_worker, per_class;
    for (const Run& r : js->job.runs()) {
      if (r.worker_id().empty()) continue;
      ++per_worker[r.worker_id()];
      ++per_class[r.hardware_class_digest()];
    }
    const std::set<std::string>& failed_on = js->failed_on[run_id];
    const LiveWorker* best = nullptr;
    std::tuple<int, int, int, int> best_key;
    for (const LiveWorker& w : workers) {
      if (!js->run_workers.empty()) {
        // An audit run goes to its worker and nowhere else.
        const size_t i = static_cast<size_t>(run->index());
        if (i >= js->run_workers.size() || js->run_workers[i] != w.worker_id) {
          continue;
        }
        if (load_[w.worker_id] >= w.slots) continue;
      } else if (w.admin_state != v1::ACTIVE) {
        continue;
      }
      if (load_[w.worker_id] >= w.slots) continue;
      if (!LabelsMatch(p.worker_labels(), w.labels)) continue;
      // backend CUDA needs a worker with a GPU; CPU and ANY run anywhere.
      if (js->job.spec().config().backend() == v1::CUDA && w.gpus == 0) {
        continue;
      }
      if (p.worker_ids_size() > 0 && !Contains(p.worker_ids(), w.worker_id)) {
        continue;
      }
      if (p.hardware_class_digests_size() > 0 &&
          !Contains(p.hardware_class_digests(), w.hardware_class_digest)) {
        continue;
      }
      const v1::PlacementScope scope = p.scope();
      if ((scope == v1::PLACEMENT_SCOPE_UNSPECIFIED ||
           scope == v1::SAME_WORKER) &&
          !js->pinned_worker.empty() && js->pinned_worker != w.worker_id) {
        continue;
      }
      if (scope == v1::SAME_CLASS && !js->pinned_class.empty() &&
          js->pinned_class != w.hardware_class_digest) {
        continue;
      }
      // Prefer a worker this run has not failed on, then what this job has
      // used least (classes first when spreading across classes, then
      // workers), then the least loaded worker.
      const int class_use =
          scope == v1::ACROSS_CLASSES ? per_class[w.hardware_class_digest] : 0;
      std::tuple<int, int, int, int> key{
          static_cast<int>(failed_on.count(w.worker_id)), class_use,
          per_worker[w.worker_id], load_[w.worker_id]};
      if (best == nullptr || key < best_key) {
        best = &w;
        best_key = key;
      }
    }
    if (best == nullptr) {
      waiting.push_back(run_id);
      continue;
    }
    if (js->pinned_worker.empty()) js->pinned_worker = best->worker_id;
    if (js->pinned_class.empty())
      js->pinned_class = best->hardware_class_digest;
    run->set_state(v1::RUN_ASSIGNED);
    run->set_worker_id(best->worker_id);
    run->set_hardware_class_digest(best->hardware_class_digest);
    run->set_steps_done(0);
    PersistRunLocked(*run);
    ++load_[best->worker_id];
    active_[run_id] =
        RunRef{js->job.job_id(), run->index(), now + options_.lease_ms};
    if (js->job.state() == v1::JOB_QUEUED) {
      js->job.set_state(v1::JOB_RUNNING);
      PersistJobLocked(js->job);
    }
    v1::CoordinatorMessage msg;
    v1::RunAssignment* a = msg.mutable_assignment();
    a->set_run_id(run_id);
    a->set_attempt(run->attempt());
    a->set_job_id(js->job.job_id());
    *a->mutable_model() = js->job.spec().model();
    *a->mutable_config() = js->job.spec().config();
    *a->mutable_manifest() = js->manifest;
    a->set_lease_ms(options_.lease_ms);
    a->set_next_sequence(0);
    registry_->Send(best->worker_id, std::move(msg));
    LS_LOG(INFO) << "run " << run_id << " attempt " << run->attempt()
                 << " assigned to " << best->name;
    EventLocked(js, run_id,
                absl::StrCat("run ", run->index(), " assigned to ", best->name),
                events);
  }
  queue_ = std::move(waiting);
}

void JobManager::OnWorkerConnected(const std::string& worker_id) {
  Events events;
  {
    absl::MutexLock lock(&mu_);
    AssignLocked(&events);
  }
  Dispatch(std::move(events));
}

void JobManager::OnWorkerDisconnected(const std::string& worker_id) {
  // Runs stay with the worker until their leases expire: a worker (or a
  // network) that comes back in time carries on. Free slots elsewhere may
  // have appeared meanwhile, though.
  Events events;
  {
    absl::MutexLock lock(&mu_);
    AssignLocked(&events);
  }
  Dispatch(std::move(events));
}

void JobManager::OnHeartbeat(const std::string& worker_id,
                             const v1::Heartbeat& heartbeat) {
  Events events;
  std::vector<v1::CoordinatorMessage> cancels;
  {
    absl::MutexLock lock(&mu_);
    const int64_t now = clock_();
    for (const v1::RunProgress& p : heartbeat.runs()) {
      JobState* js = nullptr;
      Run* run = FindRunLocked(p.run_id(), &js);
      auto active = active_.find(p.run_id());
      if (run == nullptr || active == active_.end() ||
          run->worker_id() != worker_id || run->attempt() != p.attempt()) {
        // The worker runs something that is no longer its: stop it.
        v1::CoordinatorMessage msg;
        msg.mutable_cancel()->set_run_id(p.run_id());
        msg.mutable_cancel()->set_attempt(p.attempt());
        msg.mutable_cancel()->set_reason(
            "this attempt is no longer assigned to this worker");
        cancels.push_back(std::move(msg));
        continue;
      }
      active->second.lease_expires_ms = now + options_.lease_ms;
      if (p.steps_done() > run->steps_done()) {
        run->set_steps_done(p.steps_done());
        EventLocked(
            js, run->run_id(),
            absl::StrFormat("run %d: step %d/%d, loss %.6g", run->index(),
                            p.steps_done(), run->steps_total(), p.last_loss()),
            &events);
      }
    }
  }
  for (auto& msg : cancels) registry_->Send(worker_id, std::move(msg));
  Dispatch(std::move(events));
}

absl::StatusOr<v1::BatchAck> JobManager::OnBatch(
    const std::string& worker_id, const v1::FingerprintBatch& batch) {
  int entries = 0;
  {
    absl::MutexLock lock(&mu_);
    JobState* js = nullptr;
    Run* run = FindRunLocked(batch.run_id(), &js);
    if (run == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "batch.run_id: \"", batch.run_id(), "\" is not an active run"));
    }
    if (run->worker_id() != worker_id || active_.count(batch.run_id()) == 0) {
      return absl::AbortedError(
          absl::StrCat("batch.run_id: run ", batch.run_id(),
                       " is not assigned to this worker (it was re-queued)"));
    }
    const std::vector<int> captured = model::ExpandCapturedSteps(js->manifest);
    if (!std::binary_search(captured.begin(), captured.end(), batch.step())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "batch.step: %d is not a captured step of this job (steps 0..%d)",
          batch.step(), js->manifest.steps() - 1));
    }
    entries = js->manifest.entries_size();
  }
  // The store serialises batches itself; no need to hold mu_ over the
  // commit.
  LS_ASSIGN_OR_RETURN(store::IngestResult result,
                      store_->IngestBatch(batch, entries));
  Events events;
  {
    absl::MutexLock lock(&mu_);
    JobState* js = nullptr;
    Run* run = FindRunLocked(batch.run_id(), &js);
    auto active = active_.find(batch.run_id());
    if (run != nullptr && active != active_.end() &&
        run->attempt() == batch.attempt()) {
      active->second.lease_expires_ms = clock_() + options_.lease_ms;
      if (run->state() == v1::RUN_ASSIGNED) {
        run->set_state(v1::RUN_RUNNING);
        run->set_started_unix_ms(clock_());
        PersistRunLocked(*run);
        EventLocked(js, run->run_id(),
                    absl::StrCat("run ", run->index(), " started"), &events);
      }
      if (result.step_completed && batch.step() + 1 > run->steps_done()) {
        run->set_steps_done(batch.step() + 1);
      }
    }
  }
  Dispatch(std::move(events));
  v1::BatchAck ack;
  ack.set_run_id(batch.run_id());
  ack.set_attempt(batch.attempt());
  ack.set_sequence(batch.sequence());
  return ack;
}

absl::Status JobManager::VerifyRunLocked(const JobState& js, const Run& run,
                                         const std::string& reported_digest) {
  LS_ASSIGN_OR_RETURN(std::vector<store::StepRecord> steps,
                      store_->LoadRunSteps(run.run_id(), run.attempt()));
  const std::vector<int> captured = model::ExpandCapturedSteps(js.manifest);
  if (steps.size() != captured.size()) {
    return absl::DataLossError(
        absl::StrFormat("run %s finished with %d of %d captured steps stored",
                        run.run_id(), steps.size(), captured.size()));
  }
  std::vector<hash::Fingerprint> parts;
  LS_ASSIGN_OR_RETURN(
      hash::Fingerprint manifest_fp,
      hash::Fingerprint::FromHex(js.manifest.manifest_digest()));
  parts.push_back(manifest_fp);
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].step != captured[i]) {
      return absl::DataLossError(
          absl::StrFormat("run %s: stored step %d where step %d was expected",
                          run.run_id(), steps[i].step, captured[i]));
    }
    std::vector<hash::Fingerprint> fps;
    for (const v1::TensorFingerprint& f : steps[i].fingerprints) {
      fps.push_back(hash::Fingerprint{f.hash_hi(), f.hash_lo()});
    }
    const hash::Fingerprint step_digest = hash::CombineDigests(fps);
    if (step_digest.ToHex() != steps[i].step_digest) {
      return absl::DataLossError(absl::StrFormat(
          "run %s step %d: the worker's step digest %s does not match its "
          "fingerprints (%s)",
          run.run_id(), steps[i].step, steps[i].step_digest,
          step_digest.ToHex()));
    }
    parts.push_back(step_digest);
  }
  const std::string run_digest = hash::CombineDigests(parts).ToHex();
  if (run_digest != reported_digest) {
    return absl::DataLossError(absl::StrFormat(
        "run %s: the reported run digest %s does not match the stored steps "
        "(%s)",
        run.run_id(), reported_digest, run_digest));
  }
  return absl::OkStatus();
}

absl::Status JobManager::OnRunFinished(const std::string& worker_id,
                                       const v1::RunFinished& finished) {
  Events events;
  absl::Status result = absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    JobState* js = nullptr;
    Run* run = FindRunLocked(finished.run_id(), &js);
    auto active = active_.find(finished.run_id());
    if (run != nullptr && active == active_.end() &&
        run->worker_id() == worker_id && run->attempt() == finished.attempt() &&
        IsTerminal(run->state())) {
      return absl::OkStatus();  // a resent result already recorded
    }
    if (run == nullptr || active == active_.end()) {
      return absl::NotFoundError(absl::StrCat(
          "finished.run_id: \"", finished.run_id(), "\" is not an active run"));
    }
    if (run->worker_id() != worker_id || run->attempt() != finished.attempt()) {
      return absl::AbortedError(
          absl::StrCat("finished.run_id: attempt ", finished.attempt(), " of ",
                       finished.run_id(), " is not assigned to this worker"));
    }
    active_.erase(active);
    --load_[worker_id];
    if (finished.success()) {
      absl::Status verified = VerifyRunLocked(*js, *run, finished.run_digest());
      if (verified.ok()) {
        run->set_state(v1::RUN_SUCCEEDED);
        run->set_run_digest(finished.run_digest());
        run->set_dataset_digest(finished.dataset_digest());
        run->set_steps_done(run->steps_total());
        run->set_finished_unix_ms(clock_());
        PersistRunLocked(*run);
        EventLocked(js, run->run_id(),
                    absl::StrCat("run ", run->index(), " succeeded, digest ",
                                 finished.run_digest()),
                    &events);
        MaybeFinishJobLocked(js, &events);
      } else {
        LS_LOG(WARNING) << verified;
        RetryOrFailLocked(js, run, std::string(verified.message()), &events);
        result = verified;
      }
    } else {
      RetryOrFailLocked(js, run,
                        finished.failure_reason().empty()
                            ? "the worker reported a failure"
                            : finished.failure_reason(),
                        &events);
    }
    AssignLocked(&events);
  }
  Dispatch(std::move(events));
  return result;
}

void JobManager::RetryOrFailLocked(JobState* js, Run* run,
                                   const std::string& reason, Events* events) {
  if (!run->worker_id().empty()) {
    js->failed_on[run->run_id()].insert(run->worker_id());
  }
  if (run->attempt() < options_.max_attempts) {
    Run fresh = *run;
    fresh.set_attempt(run->attempt() + 1);
    fresh.set_state(v1::RUN_QUEUED);
    fresh.set_worker_id("");
    fresh.set_hardware_class_digest("");
    fresh.set_steps_done(0);
    fresh.set_failure_reason(
        absl::StrCat("attempt ", run->attempt(), ": ", reason));
    absl::Status s = store_->RestartRun(fresh);
    if (!s.ok()) LS_LOG(ERROR) << "run " << run->run_id() << " restart: " << s;
    *run = fresh;
    queue_.push_back(run->run_id());
    LS_LOG(WARNING) << "run " << run->run_id() << " re-queued (attempt "
                    << run->attempt() << "): " << reason;
    EventLocked(js, run->run_id(),
                absl::StrCat("run ", run->index(), " re-queued as attempt ",
                             run->attempt(), ": ", reason),
                events);
    return;
  }
  run->set_state(v1::RUN_FAILED);
  run->set_failure_reason(
      absl::StrCat("failed after ", run->attempt(), " attempts: ", reason));
  run->set_finished_unix_ms(clock_());
  PersistRunLocked(*run);
  if (!js->run_workers.empty()) {
    // Audit runs are independent: one device failing is a finding, not a
    // reason to stop the others.
    EventLocked(js, run->run_id(),
                absl::StrCat("run ", run->index(), " ", run->failure_reason()),
                events);
    MaybeFinishJobLocked(js, events);
    return;
  }
  FailJobLocked(js,
                absl::StrCat("run ", run->index(), " ", run->failure_reason()),
                events);
}

void JobManager::FailJobLocked(JobState* js, const std::string& reason,
                               Events* events) {
  for (Run& r : *js->job.mutable_runs()) {
    if (IsTerminal(r.state())) continue;
    auto active = active_.find(r.run_id());
    if (active != active_.end()) {
      v1::CoordinatorMessage msg;
      msg.mutable_cancel()->set_run_id(r.run_id());
      msg.mutable_cancel()->set_attempt(r.attempt());
      msg.mutable_cancel()->set_reason(reason);
      registry_->Send(r.worker_id(), std::move(msg));
      --load_[r.worker_id()];
      active_.erase(active);
    }
    r.set_state(v1::RUN_CANCELLED);
    r.set_finished_unix_ms(clock_());
    PersistRunLocked(r);
  }
  js->job.set_state(v1::JOB_FAILED);
  js->job.set_failure_reason(reason);
  js->job.set_finished_unix_ms(clock_());
  PersistJobLocked(js->job);
  LS_LOG(WARNING) << "job " << js->job.job_id() << " failed: " << reason;
  EventLocked(js, "", absl::StrCat("job failed: ", reason), events);
}

void JobManager::MaybeFinishJobLocked(JobState* js, Events* events) {
  for (const Run& r : js->job.runs()) {
    if (!IsTerminal(r.state())) return;
  }
  if (IsFinished(js->job.state())) return;
  js->job.set_state(v1::JOB_SUCCEEDED);
  js->job.set_finished_unix_ms(clock_());
  absl::StatusOr<std::vector<RunData>> runs = LoadRunsLocked(*js);
  std::string summary;
  if (runs.ok()) {
    absl::StatusOr<v1::Report> report =
        BuildReport(js->job, js->manifest, *runs);
    if (report.ok()) {
      std::map<std::string, std::string> classes;
      absl::StatusOr<std::vector<v1::Worker>> workers = store_->ListWorkers();
      if (workers.ok()) {
        for (const v1::Worker& w : *workers) {
          classes[w.profile().hardware_class_digest()] =
              w.profile().hardware_class();
        }
      }
      for (const v1::Certificate& c :
           CertificatesFor(js->job, *report, classes,
                           canonical::kCanonicalArithmeticVersion, clock_(),
                           RunsAreNanFree(*runs))) {
        absl::Status s = store_->InsertCertificate(c);
        if (!s.ok()) LS_LOG(ERROR) << "certificate not stored: " << s;
      }
      summary = report->summary();
    } else {
      summary = absl::StrCat("analysis failed: ", report.status().message());
    }
  } else {
    summary = absl::StrCat("analysis failed: ", runs.status().message());
  }
  PersistJobLocked(js->job);
  LS_LOG(INFO) << "job " << js->job.job_id() << " finished: " << summary;
  EventLocked(js, "", summary, events);
}

absl::StatusOr<Job> JobManager::Cancel(const std::string& job_id,
                                       const std::string& reason) {
  if (reason.size() > 1024) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "reason: %d bytes exceed the limit of 1024", reason.size()));
  }
  Events events;
  Job snapshot;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      // Not in memory: unknown, or finished before a restart.
      LS_ASSIGN_OR_RETURN(std::optional<Job> stored, store_->GetJob(job_id));
      if (!stored.has_value()) {
        return absl::NotFoundError(
            absl::StrCat("job_id: no job \"", job_id, "\""));
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job_id, " is already ", v1::JobState_Name(stored->state())));
    }
    JobState* js = &it->second;
    if (IsFinished(js->job.state())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job_id, " is already ", v1::JobState_Name(js->job.state())));
    }
    const std::string why =
        reason.empty() ? std::string("cancelled by the user") : reason;
    FailJobLocked(js, why, &events);
    js->job.set_state(v1::JOB_CANCELLED);
    PersistJobLocked(js->job);
    events.back().second.mutable_job()->set_state(v1::JOB_CANCELLED);
    events.back().second.set_message(absl::StrCat("job cancelled: ", why));
    snapshot = js->job;
    AssignLocked(&events);
  }
  Dispatch(std::move(events));
  return snapshot;
}

int JobManager::Sweep() {
  Events events;
  int expired = 0;
  {
    absl::MutexLock lock(&mu_);
    const int64_t now = clock_();
    std::vector<std::string> ids;
    for (const auto& [run_id, ref] : active_) {
      if (now >= ref.lease_expires_ms) ids.push_back(run_id);
    }
    for (const std::string& run_id : ids) {
      JobState* js = nullptr;
      Run* run = FindRunLocked(run_id, &js);
      active_.erase(run_id);
      if (run == nullptr) continue;
      ++expired;
      --load_[run->worker_id()];
      v1::CoordinatorMessage msg;
      msg.mutable_cancel()->set_run_id(run_id);
      msg.mutable_cancel()->set_attempt(run->attempt());
      msg.mutable_cancel()->set_reason("lease expired");
      registry_->Send(run->worker_id(), std::move(msg));
      RetryOrFailLocked(
          js, run,
          absl::StrFormat("lease expired on worker %s (no heartbeat listed "
                          "the run for %d ms)",
                          run->worker_id(), options_.lease_ms),
          &events);
    }
    AssignLocked(&events);
    EvictFinishedLocked();
  }
  Dispatch(std::move(events));
  return expired;
}

size_t JobManager::JobsInMemory() const {
  absl::MutexLock lock(&mu_);
  return jobs_.size();
}

void JobManager::EvictFinishedLocked() {
  std::vector<std::pair<int64_t, std::string>> finished;
  for (const auto& [id, js] : jobs_) {
    if (IsFinished(js.job.state())) {
      finished.emplace_back(js.job.finished_unix_ms(), id);
    }
  }
  const size_t keep =
      static_cast<size_t>(std::max(0, options_.finished_jobs_in_memory));
  if (finished.size() <= keep) return;
  std::sort(finished.begin(), finished.end());
  for (size_t i = 0; i + keep < finished.size(); ++i) {
    jobs_.erase(finished[i].second);
  }
}

absl::Status JobManager::Recover() {
  LS_ASSIGN_OR_RETURN(std::vector<std::string> ids,
                      store_->ListUnfinishedJobIds());
  Events events;
  {
    absl::MutexLock lock(&mu_);
    const int64_t now = clock_();
    for (const std::string& id : ids) {
      LS_ASSIGN_OR_RETURN(std::optional<Job> job, store_->GetJob(id));
      if (!job.has_value()) continue;
      LS_ASSIGN_OR_RETURN(v1::TensorManifest manifest, store_->GetManifest(id));
      JobState& js = jobs_[id];
      js.job = std::move(*job);
      js.manifest = std::move(manifest);
      InitPins(&js);
      for (const Run& r : js.job.runs()) {
        if (!r.worker_id().empty() && js.pinned_worker.empty()) {
          js.pinned_worker = r.worker_id();
          js.pinned_class = r.hardware_class_digest();
        }
        if (r.state() == v1::RUN_QUEUED) {
          queue_.push_back(r.run_id());
        } else if (r.state() == v1::RUN_ASSIGNED ||
                   r.state() == v1::RUN_RUNNING) {
          active_[r.run_id()] = RunRef{id, r.index(), now + options_.lease_ms};
          ++load_[r.worker_id()];
        }
      }
      LS_LOG(INFO) << "recovered job " << id << " ("
                   << v1::JobState_Name(js.job.state()) << ")";
      MaybeFinishJobLocked(&js, &events);
    }
    AssignLocked(&events);
  }
  Dispatch(std::move(events));
  return absl::OkStatus();
}

}  // namespace lockstep::server
