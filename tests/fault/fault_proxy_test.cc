// FaultProxy on its own: bytes arrive in order, delays delay, CutAll ends
// every connection, SetRefuse refuses new ones.
#include "tests/fault/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace lockstep::fault {
namespace {

// An echo server on loopback: one thread per connection, bounded by the
// test's lifetime (the destructor closes the listener and joins).
class EchoServer {
 public:
  EchoServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::listen(fd_, 8);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) continue;
        conns_.emplace_back([this, c] {
          char buf[4096];
          while (!stop_) {
            pollfd q{c, POLLIN, 0};
            if (::poll(&q, 1, 50) <= 0) continue;
            const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
            if (n <= 0) break;
            ::send(c, buf, n, MSG_NOSIGNAL);
          }
          ::close(c);
        });
      }
    });
  }
  ~EchoServer() {
    stop_ = true;
    thread_.join();
    for (auto& t : conns_) t.join();
    ::close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::thread> conns_;
};

int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads until `n` bytes or EOF/error/timeout.
std::string ReadN(int fd, size_t n, absl::Duration limit) {
  std::string out;
  const absl::Time deadline = absl::Now() + limit;
  char buf[4096];
  while (out.size() < n && absl::Now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
    if (r <= 0) break;
    out.append(buf, r);
  }
  return out;
}

TEST(FaultProxyTest, ForwardsInOrderWithDelayAndJitter) {
  EchoServer echo;
  auto proxy = FaultProxy::Start(echo.port(), 7);
  ASSERT_TRUE(proxy.ok());
  (*proxy)->SetDelay(absl::Milliseconds(30));
  (*proxy)->SetJitter(absl::Milliseconds(20));
  const int fd = Connect((*proxy)->port());
  ASSERT_GE(fd, 0);
  std::string sent;
  for (int i = 0; i < 2000; ++i) sent += static_cast<char>('a' + i % 26);
  const absl::Time start = absl::Now();
  ASSERT_EQ(::send(fd, sent.data(), sent.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(sent.size()));
  EXPECT_EQ(ReadN(fd, sent.size(), absl::Seconds(10)), sent);
  // At least one delay each way.
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(60));
  ::close(fd);
  EXPECT_EQ((*proxy)->connections_accepted(), 1);
}

TEST(FaultProxyTest, CutAllEndsConnectionsAndRefuseRefusesNewOnes) {
  EchoServer echo;
  auto proxy = FaultProxy::Start(echo.port(), 7);
  ASSERT_TRUE(proxy.ok());
  const int fd = Connect((*proxy)->port());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::send(fd, "ping", 4, MSG_NOSIGNAL), 4);
  EXPECT_EQ(ReadN(fd, 4, absl::Seconds(5)), "ping");
  EXPECT_EQ((*proxy)->CutAll(), 1);
  // EOF (or a reset) arrives, nothing more.
  EXPECT_EQ(ReadN(fd, 1, absl::Seconds(5)), "");
  ::close(fd);

  (*proxy)->SetRefuse(true);
  const int refused = Connect((*proxy)->port());
  ASSERT_GE(refused, 0);  // accepted by the kernel, closed by the proxy
  ::send(refused, "x", 1, MSG_NOSIGNAL);
  EXPECT_EQ(ReadN(refused, 1, absl::Seconds(5)), "");
  ::close(refused);

  (*proxy)->SetRefuse(false);
  const int again = Connect((*proxy)->port());
  ASSERT_GE(again, 0);
  ASSERT_EQ(::send(again, "pong", 4, MSG_NOSIGNAL), 4);
  EXPECT_EQ(ReadN(again, 4, absl::Seconds(5)), "pong");
  ::close(again);
}

}  // namespace
}  // namespace lockstep::fault
