#include "server/job_events.h"

namespace lockstep::server {

int64_t JobEvents::Watch(const std::string& job_id,
                         const lockstep::v1::JobEvent& snapshot,
                         Watcher watcher) {
  int64_t token;
  {
    absl::MutexLock lock(&mu_);
    token = next_token_++;
    watchers_[token] = {job_id, watcher};
  }
  watcher(snapshot);
  return token;
}

void JobEvents::Unwatch(int64_t token) {
  absl::MutexLock lock(&mu_);
  watchers_.erase(token);
}

void JobEvents::SetFinalHook(
    std::function<void(const lockstep::v1::Job&)> hook) {
  absl::MutexLock lock(&mu_);
  final_hook_ = std::move(hook);
}

bool JobEvents::Watched(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  for (const auto& [token, w] : watchers_) {
    if (w.first == job_id) return true;
  }
  return false;
}

void JobEvents::Publish(const JobEventList& events) {
  if (events.empty()) return;
  std::function<void(const lockstep::v1::Job&)> hook;
  std::vector<std::pair<std::string, Watcher>> targets;
  {
    absl::MutexLock lock(&mu_);
    hook = final_hook_;
    for (const auto& [token, w] : watchers_) targets.push_back(w);
  }
  if (hook) {
    for (const auto& [job_id, event] : events) {
      if (event.final()) hook(event.job());
    }
  }
  for (const auto& [job_id, event] : events) {
    for (const auto& [watched, watcher] : targets) {
      if (watched == job_id) watcher(event);
    }
  }
}

bool WatchQueue::Push(const lockstep::v1::JobEvent& e) {
  if (saw_final_) return false;
  saw_final_ = e.final();
  if (pending() >= max_pending_ && pending() > 0) {
    queue_.back() = e;  // the newest snapshot supersedes the waiting one
    ++coalesced_;
    return false;
  }
  queue_.push_back(e);
  if (writing_) return false;
  writing_ = true;
  return true;
}

bool WatchQueue::Pop(bool* was_final) {
  *was_final = queue_.front().final();
  queue_.pop_front();
  if (*was_final || queue_.empty()) {
    writing_ = false;
    return false;
  }
  return true;
}

}  // namespace lockstep::server
