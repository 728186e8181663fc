#include "tests/fault/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace lockstep::fault {
namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in a;
  std::memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

void NoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FaultProxy>> FaultProxy::Start(int target_port,
                                                              uint64_t seed) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a = Loopback(0);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::listen(fd, 64) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat("bind/listen: ", strerror(errno)));
  }
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return std::unique_ptr<FaultProxy>(
      new FaultProxy(fd, ntohs(a.sin_port), target_port, seed));
}

FaultProxy::FaultProxy(int listen_fd, int port, int target_port, uint64_t seed)
    : listen_fd_(listen_fd),
      port_(port),
      target_port_(target_port),
      rng_(seed) {
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

FaultProxy::~FaultProxy() {
  stop_.store(true);
  acceptor_.join();
  ::close(listen_fd_);
  CutAll();
  Reap(/*all=*/true);
}

void FaultProxy::SetDelay(absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  delay_ = delay;
}

void FaultProxy::SetJitter(absl::Duration jitter) {
  absl::MutexLock lock(&mu_);
  jitter_ = jitter;
}

int FaultProxy::CutAll() {
  absl::MutexLock lock(&mu_);
  int cut = 0;
  for (auto& c : connections_) {
    if (c->open_pumps.load() == 0) continue;
    ::shutdown(c->client, SHUT_RDWR);
    ::shutdown(c->server, SHUT_RDWR);
    ++cut;
  }
  return cut;
}

absl::Duration FaultProxy::NextDelay() {
  absl::MutexLock lock(&mu_);
  absl::Duration d = delay_;
  if (jitter_ > absl::ZeroDuration()) {
    const int64_t us = absl::ToInt64Microseconds(jitter_);
    d +=
        absl::Microseconds(std::uniform_int_distribution<int64_t>(0, us)(rng_));
  }
  return d;
}

void FaultProxy::AcceptLoop() {
  while (!stop_.load()) {
    Reap(/*all=*/false);
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    if (refuse_.load()) {
      ::close(client);
      continue;
    }
    const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = Loopback(target_port_);
    if (server < 0 ||
        ::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      if (server >= 0) ::close(server);
      ::close(client);
      continue;
    }
    NoDelay(client);
    NoDelay(server);
    ++accepted_;
    auto c = std::make_unique<Connection>();
    c->client = client;
    c->server = server;
    Connection* raw = c.get();
    absl::MutexLock lock(&mu_);
    c->up = std::thread([this, raw] { Pump(raw, raw->client, raw->server); });
    c->down = std::thread([this, raw] { Pump(raw, raw->server, raw->client); });
    connections_.push_back(std::move(c));
  }
}

void FaultProxy::Pump(Connection* c, int from, int to) {
  char buf[16384];
  while (!stop_.load()) {
    pollfd p{from, POLLIN, 0};
    const int r = ::poll(&p, 1, 50);
    if (r == 0) continue;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    const ssize_t n = ::recv(from, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    const absl::Duration d = NextDelay();
    if (d > absl::ZeroDuration()) absl::SleepFor(d);
    if (!WriteAll(to, buf, static_cast<size_t>(n))) break;
    bytes_ += n;
  }
  // Either side ended: end the other too, as a broken path would.
  ::shutdown(from, SHUT_RDWR);
  ::shutdown(to, SHUT_RDWR);
  --c->open_pumps;
}

void FaultProxy::Reap(bool all) {
  std::vector<std::unique_ptr<Connection>> done;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (all || (*it)->open_pumps.load() == 0) {
        done.push_back(std::move(*it));
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : done) {
    c->up.join();
    c->down.join();
    ::close(c->client);
    ::close(c->server);
  }
}

}  // namespace lockstep::fault
