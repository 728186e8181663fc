// Job events: who watches which job, and the bounded queue a watcher's
// stream writes from.
//
// JobEvents is thread-safe; watchers are called with no lock of the
// scheduler held (Publish is called after the scheduler's lock is
// released). WatchQueue is not thread-safe; its owner locks it.
#ifndef LOCKSTEP_SERVER_JOB_EVENTS_H_
#define LOCKSTEP_SERVER_JOB_EVENTS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "lockstep/v1/lockstep_service.pb.h"

namespace lockstep::server {

// (job id, event) in the order they happened.
using JobEventList =
    std::vector<std::pair<std::string, lockstep::v1::JobEvent>>;

class JobEvents {
 public:
  using Watcher = std::function<void(const lockstep::v1::JobEvent&)>;

  JobEvents() = default;
  JobEvents(const JobEvents&) = delete;
  JobEvents& operator=(const JobEvents&) = delete;

  // Registers `watcher` for `job_id` and calls it with `snapshot` before
  // returning. Returns the token for Unwatch.
  int64_t Watch(const std::string& job_id,
                const lockstep::v1::JobEvent& snapshot, Watcher watcher);
  void Unwatch(int64_t token);
  // Calls `hook` once for every final event published from now on (before
  // the watchers see it).
  void SetFinalHook(std::function<void(const lockstep::v1::Job&)> hook);
  // Whether anyone watches `job_id` now (events of an unwatched job need
  // not be built, final ones aside).
  bool Watched(const std::string& job_id);
  // Delivers `events` to the watchers of their jobs, in order.
  void Publish(const JobEventList& events);

 private:
  absl::Mutex mu_;
  int64_t next_token_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<int64_t, std::pair<std::string, Watcher>> watchers_
      ABSL_GUARDED_BY(mu_);
  std::function<void(const lockstep::v1::Job&)> final_hook_
      ABSL_GUARDED_BY(mu_);
};

// The events a watcher's stream has yet to write, bounded: at most
// `max_pending` wait behind the one being written. Every event carries the
// whole job, so when the queue is full the newest event replaces the last
// waiting one (the client sees the latest state, skipping intermediate
// ones); the final event is never dropped, and nothing is queued after it.
class WatchQueue {
 public:
  explicit WatchQueue(size_t max_pending) : max_pending_(max_pending) {}

  // Queues `e`. True when the caller should start writing Front() (no
  // write was in flight).
  bool Push(const lockstep::v1::JobEvent& e);
  // The event being written. REQUIRES: a write is in flight.
  const lockstep::v1::JobEvent& Front() const { return queue_.front(); }
  // The in-flight write finished. Returns true when another event is ready
  // (Front() is it); false when idle. `was_final` tells whether the
  // finished write was the final event.
  bool Pop(bool* was_final);
  // Events waiting behind the one in flight.
  size_t pending() const { return queue_.empty() ? 0 : queue_.size() - 1; }
  // Events replaced by newer ones so far.
  int64_t coalesced() const { return coalesced_; }

 private:
  const size_t max_pending_;
  std::deque<lockstep::v1::JobEvent> queue_;  // front = in flight
  bool writing_ = false;
  bool saw_final_ = false;
  int64_t coalesced_ = 0;
};

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_JOB_EVENTS_H_
