// A TCP forwarder on loopback for network-fault tests: clients connect to
// port(), every connection is forwarded to the target, and the test injects
// faults while traffic flows:
//
// - SetDelay: every chunk read from either side waits this long before it
//   is written on;
// - SetJitter: and up to this much more, drawn per chunk from the seeded
//   RNG. A direction's bytes stay in order (they are one TCP stream), so
//   what this reorders is delivery across the two directions and across
//   connections: a batch and the acknowledgement of an older one, a
//   heartbeat and a batch of another session;
// - CutAll: closes every open connection, both sides, at once (a broken
//   network path: both ends see a reset or EOF);
// - SetRefuse: while set, new connections are accepted and closed at once
//   (a partition that lasts).
//
// One thread accepts; each connection has one thread per direction. All
// sockets are on 127.0.0.1 and are closed by the destructor.
#ifndef LOCKSTEP_TESTS_FAULT_FAULT_PROXY_H_
#define LOCKSTEP_TESTS_FAULT_FAULT_PROXY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace lockstep::fault {

class FaultProxy {
 public:
  // Listens on 127.0.0.1 (any free port) and forwards to 127.0.0.1:
  // `target_port`. `seed` drives the jitter.
  static absl::StatusOr<std::unique_ptr<FaultProxy>> Start(int target_port,
                                                           uint64_t seed);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  int port() const { return port_; }

  void SetDelay(absl::Duration delay);
  void SetJitter(absl::Duration jitter);
  void SetRefuse(bool refuse) { refuse_.store(refuse); }
  // Closes every open connection; returns how many there were.
  int CutAll();

  int64_t connections_accepted() const { return accepted_.load(); }
  int64_t bytes_forwarded() const { return bytes_.load(); }

 private:
  struct Connection {
    int client = -1;
    int server = -1;
    std::thread up, down;
    std::atomic<int> open_pumps{2};
  };
  FaultProxy(int listen_fd, int port, int target_port, uint64_t seed);
  void AcceptLoop();
  // Copies `from` to `to` until either side ends, then shuts both down.
  void Pump(Connection* c, int from, int to);
  absl::Duration NextDelay();
  // Joins and frees connections whose pumps have both ended.
  void Reap(bool all);

  const int listen_fd_;
  const int port_;
  const int target_port_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> refuse_{false};
  std::atomic<int64_t> accepted_{0};
  std::atomic<int64_t> bytes_{0};
  std::thread acceptor_;

  absl::Mutex mu_;
  absl::Duration delay_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  absl::Duration jitter_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep::fault

#endif  // LOCKSTEP_TESTS_FAULT_FAULT_PROXY_H_
