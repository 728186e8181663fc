#include "server/scheduler.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "model/manifest.h"
#include "server/analysis.h"
#include "server/submission.h"

namespace lockstep::server {

using ::lockstep::v1::Job;
using ::lockstep::v1::JobEvent;
using ::lockstep::v1::Run;

namespace {

bool IsTerminal(v1::RunState s) {
  return s == v1::RUN_SUCCEEDED || s == v1::RUN_FAILED ||
         s == v1::RUN_CANCELLED;
}

bool IsFinishedState(v1::JobState s) {
  return s == v1::JOB_SUCCEEDED || s == v1::JOB_FAILED ||
         s == v1::JOB_CANCELLED;
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

// ---------------------------------------------------------------------------
// OrderedWriter

void OrderedWriter::Enqueue(Write write, std::string what) {
  absl::MutexLock lock(&queue_mu_);
  queue_.emplace_back(std::move(write), std::move(what));
}

absl::Status OrderedWriter::Flush() {
  absl::MutexLock lock(&write_mu_);
  absl::Status s = FlushLocked();
  if (!s.ok()) LS_LOG(ERROR) << "state writes wait for the store: " << s;
  return s;
}

absl::Status OrderedWriter::FlushLocked() {
  while (true) {
    std::pair<Write, std::string> next;
    {
      absl::MutexLock lock(&queue_mu_);
      if (queue_.empty()) return absl::OkStatus();
      next = queue_.front();
    }
    absl::Status s = next.first(store_);
    const bool permanent = s.code() == absl::StatusCode::kNotFound ||
                           s.code() == absl::StatusCode::kInvalidArgument ||
                           s.code() == absl::StatusCode::kAlreadyExists;
    if (!s.ok() && !permanent) {
      // Kept at the front: later writes never overtake it.
      return absl::UnavailableError(
          absl::StrCat(next.second, " not stored: ", s.message()));
    }
    if (!s.ok()) LS_LOG(ERROR) << next.second << " not stored: " << s;
    absl::MutexLock lock(&queue_mu_);
    queue_.pop_front();
  }
}

absl::Status OrderedWriter::WriteNow(const Write& write) {
  absl::MutexLock lock(&write_mu_);
  LS_RETURN_IF_ERROR(FlushLocked());
  return write(store_);
}

// ---------------------------------------------------------------------------
// Scheduler

Scheduler::Scheduler(store::Store* store, WorkerRegistry* registry,
                     JobEvents* events, SchedulerOptions options, Clock clock,
                     VerdictSink verdicts)
    : store_(store),
      registry_(registry),
      events_(events),
      options_(std::move(options)),
      clock_(std::move(clock)),
      verdicts_(std::move(verdicts)),
      writer_(store) {}

void Scheduler::InitPins(JobState* js) {
  if (js->job.spec().labels().count(kAuditLabel) == 0) return;
  const auto& ids = js->job.spec().placement().worker_ids();
  js->run_workers.assign(ids.begin(), ids.end());
}

bool Scheduler::IsSameWorker(const JobState& js) {
  const v1::PlacementScope scope = js.job.spec().placement().scope();
  return js.run_workers.empty() &&
         (scope == v1::PLACEMENT_SCOPE_UNSPECIFIED || scope == v1::SAME_WORKER);
}

void Scheduler::Add(const Job& job, const v1::TensorManifest& manifest) {
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    EvictFinishedLocked();
    JobState& js = jobs_[job.job_id()];
    js.job = job;
    js.manifest = manifest;
    InitPins(&js);
    for (const Run& r : job.runs()) queue_.push_back(r.run_id());
    AssignLocked(&out);
  }
  (void)Deliver(std::move(out));
}

std::optional<Job> Scheduler::Find(const std::string& job_id,
                                   bool* final) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return std::nullopt;
  if (final != nullptr) *final = it->second.verdict_stored;
  return it->second.job;
}

bool Scheduler::WorkerRunsBlob(const std::string& worker_id,
                               const std::string& digest) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, js] : jobs_) {
    if (js.job.spec().model().parameters_digest() != digest) continue;
    for (const Run& r : js.job.runs()) {
      if (r.worker_id() == worker_id &&
          (r.state() == v1::RUN_ASSIGNED || r.state() == v1::RUN_RUNNING)) {
        return true;
      }
    }
  }
  return false;
}

size_t Scheduler::JobsInMemory() const {
  absl::MutexLock lock(&mu_);
  return jobs_.size();
}

absl::Status Scheduler::Deliver(Outbox out) {
  absl::Status written = writer_.Flush();
  // Events first: a job's final event (from the verdict worker) must come
  // after the events that led to it.
  events_->Publish(out.events);
  for (auto& [job, manifest] : out.verdicts) verdicts_(job, manifest);
  return written;
}

void Scheduler::EventLocked(const JobState& js, const std::string& run_id,
                            const std::string& message, Outbox* out) {
  // Every event carries the whole job: with nobody watching, only a final
  // one (which the verdict hook takes) is worth the copy.
  if (!js.verdict_stored && !events_->Watched(js.job.job_id())) return;
  JobEvent e;
  *e.mutable_job() = js.job;
  e.set_run_id(run_id);
  e.set_message(message);
  e.set_final(js.verdict_stored);
  e.set_event_unix_ms(clock_());
  out->events.emplace_back(js.job.job_id(), std::move(e));
}

void Scheduler::PersistRunLocked(const Run& run) {
  writer_.Enqueue([run](store::Store* s) { return s->UpdateRun(run); },
                  absl::StrCat("run ", run.run_id()));
}

void Scheduler::PersistRestartLocked(const Run& run) {
  writer_.Enqueue([run](store::Store* s) { return s->RestartRun(run); },
                  absl::StrCat("restart of run ", run.run_id()));
}

void Scheduler::PersistJobLocked(const Job& job) {
  Job record = job;
  record.clear_runs();
  writer_.Enqueue([record](store::Store* s) { return s->UpdateJob(record); },
                  absl::StrCat("job ", job.job_id()));
}

Scheduler::JobState* Scheduler::FindJobLocked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second;
}

Run* Scheduler::FindRunLocked(const std::string& run_id, JobState** job_out) {
  JobState* js = FindJobLocked(JobIdOfRun(run_id));
  if (js == nullptr) return nullptr;
  // Run i of a job is runs(i), its id ending in "-r<i>" (RunIdFor): found
  // without a scan, whatever the job's size.
  int index = -1;
  const size_t cut = run_id.rfind("-r");
  if (cut != std::string::npos &&
      absl::SimpleAtoi(absl::string_view(run_id).substr(cut + 2), &index) &&
      index >= 0 && index < js->job.runs_size() &&
      js->job.runs(index).run_id() == run_id) {
    if (job_out != nullptr) *job_out = js;
    return js->job.mutable_runs(index);
  }
  for (Run& r : *js->job.mutable_runs()) {
    if (r.run_id() == run_id) {
      if (job_out != nullptr) *job_out = js;
      return &r;
    }
  }
  return nullptr;
}

// ---------------------------------------------------------------------------
// Assignment

bool Scheduler::EligibleLocked(const JobState& js, const Run& run,
                               const LiveWorker& w) {
  const v1::Placement& p = js.job.spec().placement();
  if (!js.run_workers.empty()) {
    // An audit run goes to its worker and nowhere else.
    const size_t i = static_cast<size_t>(run.index());
    if (i >= js.run_workers.size() || js.run_workers[i] != w.worker_id) {
      return false;
    }
  } else if (w.admin_state != v1::ACTIVE) {
    return false;
  }
  if (!LabelsMatch(p.worker_labels(), w.labels)) return false;
  // backend CUDA needs a worker with a GPU; CPU and ANY run anywhere.
  if (js.job.spec().config().backend() == v1::CUDA && w.gpus == 0) {
    return false;
  }
  if (p.worker_ids_size() > 0 && !Contains(p.worker_ids(), w.worker_id)) {
    return false;
  }
  if (p.hardware_class_digests_size() > 0 &&
      !Contains(p.hardware_class_digests(), w.hardware_class_digest)) {
    return false;
  }
  return true;
}

void Scheduler::AssignLocked(Outbox* out) {
  if (queue_.empty()) return;
  const std::vector<LiveWorker> workers = registry_->LiveWorkers();
  if (workers.empty()) return;
  const int64_t now = clock_();
  // One pass costs O(queued runs x candidate workers + runs of their jobs):
  // a pinned run (an audit's) is checked against its own worker only, and
  // each job's use of workers and classes is counted once per pass.
  std::map<std::string, const LiveWorker*> by_id;
  for (const LiveWorker& w : workers) by_id[w.worker_id] = &w;
  struct Use {
    std::map<std::string, int> per_worker, per_class;
    // Assignments this pass: how many, and the message of the last one.
    int assigned = 0;
    std::string last_run_id, last_message;
  };
  std::map<std::string, Use> uses;
  std::deque<std::string> waiting;
  std::set<std::string> waiting_ids;
  while (!queue_.empty()) {
    const std::string run_id = queue_.front();
    queue_.pop_front();
    JobState* js = nullptr;
    Run* run = FindRunLocked(run_id, &js);
    if (run == nullptr || run->state() != v1::RUN_QUEUED) continue;
    if (waiting_ids.count(run_id) > 0) continue;
    const v1::PlacementScope scope = js->job.spec().placement().scope();
    // Runs of this job per worker and per class, to spread them.
    auto [use_it, fresh] = uses.try_emplace(js->job.job_id());
    Use& use = use_it->second;
    if (fresh) {
      for (const Run& r : js->job.runs()) {
        if (r.worker_id().empty()) continue;
        ++use.per_worker[r.worker_id()];
        ++use.per_class[r.hardware_class_digest()];
      }
    }
    const std::set<std::string>& failed_on = js->failed_on[run_id];
    // An audit run may only go to its own worker.
    std::vector<const LiveWorker*> candidates;
    const size_t index = static_cast<size_t>(run->index());
    if (!js->run_workers.empty()) {
      if (index < js->run_workers.size()) {
        auto pinned = by_id.find(js->run_workers[index]);
        if (pinned != by_id.end()) candidates.push_back(pinned->second);
      }
    } else {
      candidates.reserve(workers.size());
      for (const LiveWorker& w : workers) candidates.push_back(&w);
    }
    const LiveWorker* best = nullptr;
    std::tuple<int, int, int, int> best_key;
    for (const LiveWorker* candidate : candidates) {
      const LiveWorker& w = *candidate;
      if (load_[w.worker_id] >= w.slots) continue;
      if (!EligibleLocked(*js, *run, w)) continue;
      if (IsSameWorker(*js) && !js->pinned_worker.empty() &&
          js->pinned_worker != w.worker_id) {
        continue;
      }
      if (scope == v1::SAME_CLASS && !js->pinned_class.empty() &&
          js->pinned_class != w.hardware_class_digest) {
        continue;
      }
      // Prefer a worker this run has not failed on, then what this job has
      // used least (classes first when spreading across classes, then
      // workers), then the least loaded worker.
      const int class_use = scope == v1::ACROSS_CLASSES
                                ? use.per_class[w.hardware_class_digest]
                                : 0;
      std::tuple<int, int, int, int> key{
          static_cast<int>(failed_on.count(w.worker_id)), class_use,
          use.per_worker[w.worker_id], load_[w.worker_id]};
      if (best == nullptr || key < best_key) {
        best = &w;
        best_key = key;
      }
    }
    if (best == nullptr) {
      waiting.push_back(run_id);
      waiting_ids.insert(run_id);
      continue;
    }
    pin_missing_since_.erase(run_id);
    if (js->pinned_worker.empty()) js->pinned_worker = best->worker_id;
    if (js->pinned_class.empty()) {
      js->pinned_class = best->hardware_class_digest;
    }
    run->set_state(v1::RUN_ASSIGNED);
    run->set_worker_id(best->worker_id);
    run->set_hardware_class_digest(best->hardware_class_digest);
    run->set_device_id(best->device_id);
    run->set_steps_done(0);
    PersistRunLocked(*run);
    ++load_[best->worker_id];
    ++use.per_worker[best->worker_id];
    ++use.per_class[best->hardware_class_digest];
    active_[run_id] = NewRunRefLocked(js->job.job_id(), now);
    if (js->job.state() == v1::JOB_QUEUED) {
      js->job.set_state(v1::JOB_RUNNING);
      PersistJobLocked(js->job);
    }
    registry_->Send(best->worker_id, AssignmentLocked(*js, *run));
    LS_LOG(INFO) << "run " << run_id << " attempt " << run->attempt()
                 << " assigned to " << best->name;
    ++use.assigned;
    use.last_run_id = run_id;
    use.last_message =
        absl::StrCat("run ", run->index(), " assigned to ", best->name);
  }
  queue_ = std::move(waiting);
  // One event per job and pass: every event carries the whole job, so a
  // pass that assigns a large job's runs sends its state once, not once
  // per run.
  for (const auto& [job_id, use] : uses) {
    if (use.assigned == 0) continue;
    const JobState* js = FindJobLocked(job_id);
    if (js == nullptr) continue;
    if (use.assigned == 1) {
      EventLocked(*js, use.last_run_id, use.last_message, out);
    } else {
      EventLocked(*js, "",
                  absl::StrCat(use.assigned, " runs assigned (the last: ",
                               use.last_message, ")"),
                  out);
    }
  }
}

void Scheduler::AssignQueued() {
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    AssignLocked(&out);
  }
  (void)Deliver(std::move(out));
}

// ---------------------------------------------------------------------------
// Worker side

void Scheduler::OnHeartbeat(const std::string& worker_id,
                            const v1::Heartbeat& heartbeat) {
  Outbox out;
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
      active->second.listed = true;
      if (p.steps_done() > run->steps_done()) {
        run->set_steps_done(p.steps_done());
        EventLocked(
            *js, run->run_id(),
            absl::StrFormat("run %d: step %d/%d, loss %.6g", run->index(),
                            p.steps_done(), run->steps_total(), p.last_loss()),
            &out);
      }
    }
  }
  for (auto& msg : cancels) registry_->Send(worker_id, std::move(msg));
  events_->Publish(out.events);
}

bool Scheduler::SubmitBatch(const std::string& worker_id,
                            v1::FingerprintBatch batch, BatchDone done) {
  int entries = 0;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    JobState* js = nullptr;
    Run* run = FindRunLocked(batch.run_id(), &js);
    if (run == nullptr) {
      refused = absl::NotFoundError(absl::StrCat(
          "batch.run_id: \"", batch.run_id(), "\" is not an active run"));
    } else if (run->worker_id() != worker_id ||
               active_.count(batch.run_id()) == 0) {
      refused = absl::AbortedError(
          absl::StrCat("batch.run_id: run ", batch.run_id(),
                       " is not assigned to this worker (it was re-queued)"));
    } else {
      const std::vector<int> captured =
          model::ExpandCapturedSteps(js->manifest);
      if (!std::binary_search(captured.begin(), captured.end(), batch.step())) {
        refused = absl::InvalidArgumentError(absl::StrFormat(
            "batch.step: %d is not a captured step of this job (steps 0..%d)",
            batch.step(), js->manifest.steps() - 1));
      }
      entries = js->manifest.entries_size();
    }
  }
  if (!refused.ok()) {
    done(refused);  // answered here, outside the lock
    return true;
  }
  // Pending state writes first, so the run's record is current when the
  // committer checks the batch against it (usually nothing is pending).
  (void)writer_.Flush();
  const std::string run_id = batch.run_id();
  const int32_t attempt = batch.attempt();
  const int32_t step = batch.step();
  const int64_t sequence = batch.sequence();
  return store_->SubmitIngest(
      std::move(batch), entries,
      [this, run_id, attempt, step, sequence,
       done = std::move(done)](absl::StatusOr<store::IngestResult> result) {
        if (!result.ok()) return done(result.status());
        done(BatchStored(run_id, attempt, step, sequence, *result));
      });
}

absl::StatusOr<v1::BatchAck> Scheduler::OnBatch(
    const std::string& worker_id, const v1::FingerprintBatch& batch) {
  absl::Notification answered;
  absl::StatusOr<v1::BatchAck> ack;
  SubmitBatch(worker_id, batch, [&](absl::StatusOr<v1::BatchAck> a) {
    ack = std::move(a);
    answered.Notify();
  });
  answered.WaitForNotification();
  return ack;
}

v1::BatchAck Scheduler::BatchStored(const std::string& run_id, int32_t attempt,
                                    int32_t step, int64_t sequence,
                                    const store::IngestResult& result) {
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    JobState* js = nullptr;
    Run* run = FindRunLocked(run_id, &js);
    auto active = active_.find(run_id);
    if (run != nullptr && active != active_.end() &&
        run->attempt() == attempt) {
      active->second.lease_expires_ms = clock_() + options_.lease_ms;
      if (run->state() == v1::RUN_ASSIGNED) {
        // Written by the next flush (the run's next batch or result, or
        // any other state change): this runs on the store's committer
        // thread, which must not wait for a commit of its own. Until then
        // the stored run is ASSIGNED, which accepts batches and is
        // recovered after a restart exactly like RUNNING.
        run->set_state(v1::RUN_RUNNING);
        run->set_started_unix_ms(clock_());
        PersistRunLocked(*run);
        EventLocked(*js, run->run_id(),
                    absl::StrCat("run ", run->index(), " started"), &out);
      }
      if (result.step_completed && step + 1 > run->steps_done()) {
        run->set_steps_done(step + 1);
      }
    }
  }
  events_->Publish(out.events);
  v1::BatchAck ack;
  ack.set_run_id(run_id);
  ack.set_attempt(attempt);
  ack.set_sequence(sequence);
  return ack;
}

absl::Status Scheduler::OnRunFinished(const std::string& worker_id,
                                      const v1::RunFinished& finished) {
  Run run;
  v1::TensorManifest manifest;
  {
    absl::MutexLock lock(&mu_);
    JobState* js = nullptr;
    Run* r = FindRunLocked(finished.run_id(), &js);
    auto active = active_.find(finished.run_id());
    if (r != nullptr && active == active_.end() &&
        r->worker_id() == worker_id && r->attempt() == finished.attempt() &&
        IsTerminal(r->state())) {
      return absl::OkStatus();  // a resent result already recorded
    }
    if (r == nullptr || active == active_.end()) {
      return absl::NotFoundError(absl::StrCat(
          "finished.run_id: \"", finished.run_id(), "\" is not an active run"));
    }
    if (r->worker_id() != worker_id || r->attempt() != finished.attempt()) {
      return absl::AbortedError(
          absl::StrCat("finished.run_id: attempt ", finished.attempt(), " of ",
                       finished.run_id(), " is not assigned to this worker"));
    }
    if (active->second.recording) {
      return absl::UnavailableError(absl::StrCat(
          "finished.run_id: the result of ", finished.run_id(),
          " is being recorded; resend it if no acknowledgement follows"));
    }
    active->second.recording = true;
    run = *r;
    manifest = js->manifest;
  }
  // Verification streams the stored steps and the result is committed, both
  // without the lock.
  absl::Status verified = absl::OkStatus();
  std::string reason;
  Run next;
  (void)writer_.Flush();
  // A result that overtook batches the store refused (a full database, a
  // failed commit): the worker still holds them. It is told to resend them
  // and then the result, instead of the attempt being judged on what
  // happens to be stored (and re-queued for steps that are not lost).
  if (finished.success() && finished.batches() > 0) {
    const absl::StatusOr<int64_t> stored = store_->NextSequence(run.run_id());
    if (!stored.ok() || *stored < finished.batches()) {
      absl::MutexLock lock(&mu_);
      auto active = active_.find(finished.run_id());
      if (active != active_.end()) active->second.recording = false;
      if (!stored.ok()) {
        return absl::UnavailableError(
            absl::StrCat("finished.batches: the stored batches of ",
                         run.run_id(), " could not be read (",
                         stored.status().message(), "); resend the result"));
      }
      return absl::UnavailableError(absl::StrFormat(
          "finished.batches: attempt %d of %s sent %d batches, %d are "
          "stored; resend the batches from sequence %d, then the result",
          run.attempt(), run.run_id(), finished.batches(), *stored, *stored));
    }
  }
  if (finished.success()) {
    std::unique_ptr<StepReader> steps =
        store_->OpenRunSteps(run.run_id(), run.attempt());
    verified =
        VerifyRunSteps(manifest, run, finished.run_digest(), steps.get());
  }
  const bool succeeded = finished.success() && verified.ok();
  if (succeeded) {
    next = run;
    next.set_state(v1::RUN_SUCCEEDED);
    next.set_run_digest(finished.run_digest());
    next.set_dataset_digest(finished.dataset_digest());
    next.set_steps_done(run.steps_total());
    next.set_finished_unix_ms(clock_());
    if (!finished.kernels().empty())
      *next.mutable_kernels() = finished.kernels();
  } else {
    if (!verified.ok()) LS_LOG(WARNING) << verified;
    reason = !verified.ok() ? std::string(verified.message())
             : finished.failure_reason().empty()
                 ? std::string("the worker reported a failure")
                 : finished.failure_reason();
    // An input error fails every attempt alike: no retry.
    next = EndAttempt(run, reason,
                      /*retry=*/!verified.ok() || !finished.input_error());
  }
  const bool restart = next.attempt() != run.attempt();
  absl::Status written = writer_.WriteNow([&next, restart](store::Store* s) {
    return restart ? s->RestartRun(next) : s->UpdateRun(next);
  });
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    JobState* js = nullptr;
    Run* r = FindRunLocked(finished.run_id(), &js);
    auto active = active_.find(finished.run_id());
    if (r == nullptr || active == active_.end() ||
        r->attempt() != run.attempt()) {
      // Ended meanwhile (cancelled): what the store holds now stands.
      return absl::AbortedError(
          absl::StrCat("finished.run_id: attempt ", run.attempt(), " of ",
                       run.run_id(), " ended while its result was recorded"));
    }
    if (!written.ok()) {
      active->second.recording = false;
      LS_LOG(ERROR) << "result of run " << run.run_id()
                    << " not stored: " << written;
      return absl::UnavailableError(absl::StrCat(
          "the result of run ", run.run_id(), " could not be stored (",
          written.message(), "); resend it"));
    }
    active_.erase(active);
    --load_[worker_id];
    if (succeeded) {
      *r = next;
      EventLocked(*js, r->run_id(),
                  absl::StrCat("run ", r->index(), " succeeded, digest ",
                               finished.run_digest()),
                  &out);
      MaybeFinishJobLocked(js, &out);
    } else {
      ApplyEndedAttemptLocked(js, r, next, reason, /*persisted=*/true, &out);
    }
    AssignLocked(&out);
  }
  (void)Deliver(std::move(out));
  return verified;
}

Run Scheduler::EndAttempt(const Run& run, const std::string& reason,
                          bool retry) const {
  Run next = run;
  if (!retry) {
    next.set_state(v1::RUN_FAILED);
    next.set_failure_reason(
        absl::StrCat("failed on attempt ", run.attempt(), ": ", reason));
    next.set_finished_unix_ms(clock_());
    return next;
  }
  if (run.attempt() < options_.max_attempts) {
    next.set_attempt(run.attempt() + 1);
    next.set_state(v1::RUN_QUEUED);
    next.set_worker_id("");
    next.set_hardware_class_digest("");
    next.set_device_id("");
    next.set_steps_done(0);
    next.set_failure_reason(
        absl::StrCat("attempt ", run.attempt(), ": ", reason));
    return next;
  }
  next.set_state(v1::RUN_FAILED);
  next.set_failure_reason(
      absl::StrCat("failed after ", run.attempt(), " attempts: ", reason));
  next.set_finished_unix_ms(clock_());
  return next;
}

void Scheduler::ApplyEndedAttemptLocked(JobState* js, Run* run, const Run& next,
                                        const std::string& reason,
                                        bool persisted, Outbox* out) {
  if (!run->worker_id().empty()) {
    js->failed_on[run->run_id()].insert(run->worker_id());
  }
  const bool restart = next.attempt() != run->attempt();
  *run = next;
  if (restart) {
    if (!persisted) PersistRestartLocked(*run);
    queue_.push_back(run->run_id());
    LS_LOG(WARNING) << "run " << run->run_id() << " re-queued (attempt "
                    << run->attempt() << "): " << reason;
    EventLocked(*js, run->run_id(),
                absl::StrCat("run ", run->index(), " re-queued as attempt ",
                             run->attempt(), ": ", reason),
                out);
    return;
  }
  if (!persisted) PersistRunLocked(*run);
  if (!js->run_workers.empty()) {
    // Audit runs are independent: one device failing is a finding, not a
    // reason to stop the others.
    EventLocked(*js, run->run_id(),
                absl::StrCat("run ", run->index(), " ", run->failure_reason()),
                out);
    MaybeFinishJobLocked(js, out);
    return;
  }
  FailJobLocked(
      js, absl::StrCat("run ", run->index(), " ", run->failure_reason()), out);
}

void Scheduler::StopActiveLocked(const Run& run, const std::string& why) {
  auto active = active_.find(run.run_id());
  if (active == active_.end()) return;
  v1::CoordinatorMessage msg;
  msg.mutable_cancel()->set_run_id(run.run_id());
  msg.mutable_cancel()->set_attempt(run.attempt());
  msg.mutable_cancel()->set_reason(why);
  registry_->Send(run.worker_id(), std::move(msg));
  --load_[run.worker_id()];
  active_.erase(active);
}

void Scheduler::FailJobLocked(JobState* js, const std::string& reason,
                              Outbox* out) {
  for (Run& r : *js->job.mutable_runs()) {
    if (IsTerminal(r.state())) continue;
    StopActiveLocked(r, reason);
    pin_missing_since_.erase(r.run_id());
    r.set_state(v1::RUN_CANCELLED);
    r.set_finished_unix_ms(clock_());
    PersistRunLocked(r);
  }
  js->job.set_state(v1::JOB_FAILED);
  js->job.set_failure_reason(reason);
  js->job.set_finished_unix_ms(clock_());
  PersistJobLocked(js->job);
  LS_LOG(WARNING) << "job " << js->job.job_id() << " failed: " << reason;
  EventLocked(*js, "", absl::StrCat("job failed: ", reason), out);
  MaybeFinishJobLocked(js, out);
}

void Scheduler::MaybeFinishJobLocked(JobState* js, Outbox* out) {
  if (js->judging || js->verdict_stored) return;
  for (const Run& r : js->job.runs()) {
    if (!IsTerminal(r.state())) return;
  }
  Job final_job = js->job;
  if (!IsFinishedState(final_job.state())) {
    final_job.set_state(v1::JOB_SUCCEEDED);
    final_job.set_finished_unix_ms(clock_());
  }
  js->judging = true;
  out->verdicts.emplace_back(std::move(final_job), js->manifest);
}

void Scheduler::OnVerdict(const Job& job,
                          const absl::StatusOr<v1::Report>& report) {
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    JobState* js = FindJobLocked(job.job_id());
    if (js == nullptr) {
      // Judged after a restart without being in memory.
      if (report.ok()) {
        JobEvent e;
        *e.mutable_job() = job;
        e.set_message(report->summary());
        e.set_final(true);
        e.set_event_unix_ms(clock_());
        out.events.emplace_back(job.job_id(), std::move(e));
      }
    } else {
      js->judging = false;
      if (report.ok()) {
        js->verdict_stored = true;
        js->job.set_state(job.state());
        js->job.set_finished_unix_ms(job.finished_unix_ms());
        js->job.set_failure_reason(job.failure_reason());
        EventLocked(*js, "", report->summary(), &out);
      }
    }
  }
  events_->Publish(out.events);
}

absl::StatusOr<Job> Scheduler::Cancel(const std::string& job_id,
                                      const std::string& reason) {
  Outbox out;
  Job snapshot;
  {
    absl::MutexLock lock(&mu_);
    JobState* js = FindJobLocked(job_id);
    if (js == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("job_id: no job \"", job_id, "\" in memory"));
    }
    if (IsFinishedState(js->job.state()) || js->judging) {
      const v1::JobState s = js->judging && !IsFinishedState(js->job.state())
                                 ? v1::JOB_SUCCEEDED
                                 : js->job.state();
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " is already ", v1::JobState_Name(s)));
    }
    const std::string why =
        reason.empty() ? std::string("cancelled by the user") : reason;
    for (Run& r : *js->job.mutable_runs()) {
      if (IsTerminal(r.state())) continue;
      StopActiveLocked(r, why);
      pin_missing_since_.erase(r.run_id());
      r.set_state(v1::RUN_CANCELLED);
      r.set_finished_unix_ms(clock_());
      PersistRunLocked(r);
    }
    js->job.set_state(v1::JOB_CANCELLED);
    js->job.set_failure_reason(why);
    js->job.set_finished_unix_ms(clock_());
    PersistJobLocked(js->job);
    EventLocked(*js, "", absl::StrCat("job cancelled: ", why), &out);
    MaybeFinishJobLocked(js, &out);
    snapshot = js->job;
    AssignLocked(&out);
  }
  absl::Status written = Deliver(std::move(out));
  if (!written.ok()) {
    // Not acknowledged: the cancellation stays queued for the store.
    return absl::UnavailableError(
        absl::StrCat("job ", job_id,
                     " is cancelled, but the database has not stored it "
                     "yet (",
                     written.message(),
                     "); it is written once the database "
                     "accepts writes"));
  }
  return snapshot;
}

// ---------------------------------------------------------------------------
// Sweeping

void Scheduler::EndPinnedWaitsLocked(Outbox* out) {
  const int64_t now = clock_();
  const std::vector<LiveWorker> live = registry_->LiveWorkers();
  auto find_live = [&live](const std::string& id) -> const LiveWorker* {
    for (const LiveWorker& w : live) {
      if (w.worker_id == id) return &w;
    }
    return nullptr;
  };
  std::vector<std::string> ids;
  for (const auto& [id, js] : jobs_) ids.push_back(id);
  for (const std::string& id : ids) {
    JobState* js = FindJobLocked(id);
    if (js == nullptr || IsFinishedState(js->job.state())) continue;
    for (Run& r : *js->job.mutable_runs()) {
      if (r.state() != v1::RUN_QUEUED) continue;
      std::string pinned;
      bool present = false;
      if (!js->run_workers.empty()) {
        const size_t i = static_cast<size_t>(r.index());
        if (i >= js->run_workers.size()) continue;
        pinned = js->run_workers[i];
        present = find_live(pinned) != nullptr;
      } else if (IsSameWorker(*js) && !js->pinned_worker.empty()) {
        pinned = js->pinned_worker;
        const LiveWorker* w = find_live(pinned);
        present = w != nullptr && w->admin_state == v1::ACTIVE;
      } else {
        continue;
      }
      if (present) {
        pin_missing_since_.erase(r.run_id());
        continue;
      }
      const int64_t since =
          pin_missing_since_.emplace(r.run_id(), now).first->second;
      if (now - since < options_.pinned_wait_ms) continue;
      pin_missing_since_.erase(r.run_id());
      const std::string why = absl::StrFormat(
          "worker %s vanished: the run waited %d ms for it (pinned_wait_ms)",
          pinned, now - since);
      if (!js->run_workers.empty()) {
        r.set_state(v1::RUN_FAILED);
        r.set_failure_reason(why);
        r.set_finished_unix_ms(now);
        PersistRunLocked(r);
        LS_LOG(WARNING) << "audit run " << r.run_id() << ": " << why;
        EventLocked(*js, r.run_id(),
                    absl::StrCat("run ", r.index(), " failed: ", why), out);
        MaybeFinishJobLocked(js, out);
        continue;
      }
      RepinLocked(js, pinned, live, out);
      break;  // every run of the job was handled
    }
  }
}

void Scheduler::RepinLocked(JobState* js, const std::string& vanished,
                            const std::vector<LiveWorker>& live, Outbox* out) {
  const LiveWorker* best = nullptr;
  for (const LiveWorker& w : live) {
    if (w.worker_id == vanished || w.admin_state != v1::ACTIVE) continue;
    if (!js->pinned_class.empty() &&
        w.hardware_class_digest != js->pinned_class) {
      continue;
    }
    if (!EligibleLocked(*js, js->job.runs(0), w)) continue;
    if (best == nullptr || load_[w.worker_id] < load_[best->worker_id]) {
      best = &w;
    }
  }
  if (best == nullptr) {
    FailJobLocked(
        js,
        absl::StrCat("worker ", vanished,
                     " (SAME_WORKER) vanished and no other ACTIVE worker of "
                     "its hardware class is connected"),
        out);
    return;
  }
  const std::string why =
      absl::StrCat("worker ", vanished, " vanished; all runs restart on ",
                   best->name, " (SAME_WORKER)");
  for (Run& r : *js->job.mutable_runs()) {
    StopActiveLocked(r, why);
    pin_missing_since_.erase(r.run_id());
    Run fresh = r;
    fresh.set_attempt(r.attempt() + 1);
    fresh.set_state(v1::RUN_QUEUED);
    fresh.set_worker_id("");
    fresh.set_hardware_class_digest("");
    fresh.set_device_id("");
    fresh.clear_kernels();
    fresh.set_steps_done(0);
    fresh.set_run_digest("");
    fresh.set_finished_unix_ms(0);
    fresh.set_failure_reason(why);
    r = fresh;
    PersistRestartLocked(r);
    if (!Contains(queue_, r.run_id())) queue_.push_back(r.run_id());
  }
  js->failed_on.clear();
  js->pinned_worker = best->worker_id;
  LS_LOG(WARNING) << "job " << js->job.job_id() << ": " << why;
  EventLocked(*js, "", why, out);
}

v1::CoordinatorMessage Scheduler::AssignmentLocked(const JobState& js,
                                                   const Run& run) const {
  v1::CoordinatorMessage msg;
  v1::RunAssignment* a = msg.mutable_assignment();
  a->set_run_id(run.run_id());
  a->set_attempt(run.attempt());
  a->set_job_id(js.job.job_id());
  *a->mutable_model() = js.job.spec().model();
  *a->mutable_config() = js.job.spec().config();
  *a->mutable_manifest() = js.manifest;
  a->set_lease_ms(options_.lease_ms);
  a->set_next_sequence(0);
  return msg;
}

Scheduler::RunRef Scheduler::NewRunRefLocked(const std::string& job_id,
                                             int64_t now) const {
  RunRef ref;
  ref.job_id = job_id;
  ref.lease_expires_ms = now + options_.lease_ms;
  ref.resend_gap_ms = options_.resend_unlisted_ms > 0
                          ? options_.resend_unlisted_ms
                          : std::max<int64_t>(500, options_.lease_ms / 10);
  ref.resend_at_ms = now + ref.resend_gap_ms;
  return ref;
}

void Scheduler::ResendUnlistedLocked(int64_t now) {
  for (auto& [run_id, ref] : active_) {
    if (ref.listed || ref.recording || now < ref.resend_at_ms) continue;
    JobState* js = nullptr;
    Run* run = FindRunLocked(run_id, &js);
    if (run == nullptr || run->state() != v1::RUN_ASSIGNED) continue;
    ref.resend_gap_ms *= 2;
    ref.resend_at_ms = now + ref.resend_gap_ms;
    if (registry_->Send(run->worker_id(), AssignmentLocked(*js, *run))) {
      LS_LOG(INFO) << "run " << run_id << " attempt " << run->attempt()
                   << " assigned again to worker " << run->worker_id()
                   << ": not listed by its heartbeats yet";
    }
  }
}

int Scheduler::Sweep() {
  Outbox out;
  int expired = 0;
  {
    absl::MutexLock lock(&mu_);
    const int64_t now = clock_();
    std::vector<std::string> ids;
    for (const auto& [run_id, ref] : active_) {
      if (!ref.recording && now >= ref.lease_expires_ms) ids.push_back(run_id);
    }
    for (const std::string& run_id : ids) {
      JobState* js = nullptr;
      Run* run = FindRunLocked(run_id, &js);
      if (run == nullptr) {
        active_.erase(run_id);
        continue;
      }
      ++expired;
      StopActiveLocked(*run, "lease expired");
      const std::string reason = absl::StrFormat(
          "lease expired on worker %s (no heartbeat listed the run for %d ms)",
          run->worker_id(), options_.lease_ms);
      ApplyEndedAttemptLocked(js, run, EndAttempt(*run, reason), reason,
                              /*persisted=*/false, &out);
    }
    EndPinnedWaitsLocked(&out);
    ResendUnlistedLocked(now);
    // Verdicts that could not be stored are tried again.
    for (auto& [id, js] : jobs_) MaybeFinishJobLocked(&js, &out);
    AssignLocked(&out);
    EvictFinishedLocked();
  }
  (void)Deliver(std::move(out));
  return expired;
}

void Scheduler::EvictFinishedLocked() {
  std::vector<std::pair<int64_t, std::string>> finished;
  for (const auto& [id, js] : jobs_) {
    if (js.verdict_stored) finished.emplace_back(js.job.finished_unix_ms(), id);
  }
  const size_t keep =
      static_cast<size_t>(std::max(0, options_.finished_jobs_in_memory));
  if (finished.size() <= keep) return;
  std::sort(finished.begin(), finished.end());
  for (size_t i = 0; i + keep < finished.size(); ++i) {
    jobs_.erase(finished[i].second);
  }
}

absl::Status Scheduler::Recover() {
  LS_ASSIGN_OR_RETURN(std::vector<std::string> ids,
                      store_->ListUnfinishedJobIds());
  std::vector<std::pair<Job, v1::TensorManifest>> loaded;
  for (const std::string& id : ids) {
    LS_ASSIGN_OR_RETURN(std::optional<Job> job, store_->GetJob(id));
    if (!job.has_value()) continue;
    LS_ASSIGN_OR_RETURN(v1::TensorManifest manifest, store_->GetManifest(id));
    loaded.emplace_back(std::move(*job), std::move(manifest));
  }
  // Finished jobs whose verdict was not stored before the restart.
  LS_ASSIGN_OR_RETURN(std::vector<std::string> awaiting,
                      store_->ListJobsAwaitingVerdict());
  Outbox out;
  for (const std::string& id : awaiting) {
    LS_ASSIGN_OR_RETURN(std::optional<Job> job, store_->GetJob(id));
    if (!job.has_value()) continue;
    LS_ASSIGN_OR_RETURN(v1::TensorManifest manifest, store_->GetManifest(id));
    LS_LOG(INFO) << "job " << id << " (" << v1::JobState_Name(job->state())
                 << ") has no stored verdict: judging it";
    out.verdicts.emplace_back(std::move(*job), std::move(manifest));
  }
  {
    absl::MutexLock lock(&mu_);
    const int64_t now = clock_();
    for (auto& [job, manifest] : loaded) {
      const std::string id = job.job_id();
      JobState& js = jobs_[id];
      js.job = std::move(job);
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
          active_[r.run_id()] = NewRunRefLocked(id, now);
          ++load_[r.worker_id()];
        }
      }
      LS_LOG(INFO) << "recovered job " << id << " ("
                   << v1::JobState_Name(js.job.state()) << ")";
      MaybeFinishJobLocked(&js, &out);
    }
    AssignLocked(&out);
  }
  (void)Deliver(std::move(out));
  return absl::OkStatus();
}

}  // namespace lockstep::server
