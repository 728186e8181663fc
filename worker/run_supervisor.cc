#include "worker/run_supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "worker/frames.h"
#include "worker/spawn.h"

namespace lockstep::worker {
namespace {

std::string TailOfFile(const std::string& path, size_t max_bytes) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  if (s.size() > max_bytes) s = s.substr(s.size() - max_bytes);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The resource limit a run process that died of `signal` ran into, or "".
// SIGXCPU at the soft CPU limit, SIGKILL at the hard one; an allocation
// refused under RLIMIT_DATA ends a kernel thread with an uncaught
// std::bad_alloc (SIGABRT).
std::string LimitReached(int signal, const struct rusage& usage,
                         const RunResourceLimits& limits,
                         const std::string& stderr_path) {
  const int64_t cpu_s = usage.ru_utime.tv_sec + usage.ru_stime.tv_sec;
  if (limits.cpu_seconds > 0 &&
      (signal == SIGXCPU ||
       (signal == SIGKILL && cpu_s >= limits.cpu_seconds))) {
    return absl::StrFormat(
        "CPU-time limit reached: the run used %d s of CPU time, its limit is "
        "%d s (%s)",
        cpu_s, limits.cpu_seconds, limits.cpu_source);
  }
  if (limits.memory_bytes > 0 && signal == SIGABRT &&
      TailOfFile(stderr_path, 4096).find("std::bad_alloc") !=
          std::string::npos) {
    return absl::StrFormat(
        "memory limit reached: an allocation was refused under the run's "
        "limit of %d MiB (%s)",
        (limits.memory_bytes + (1 << 20) - 1) >> 20, limits.memory_source);
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<RunSupervisor>> RunSupervisor::Start(
    const SupervisorOptions& options, const v1::RunAssignment& assignment,
    OnMessage on_message) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("argv: must name the run program");
  }
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    close(in_pipe[0]);
    close(in_pipe[1]);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  static std::atomic<int> counter{0};
  const char* tmp = std::getenv("TMPDIR");
  const std::string stderr_path =
      absl::StrCat(tmp ? tmp : "/tmp", "/lockstep-run-", getpid(), "-",
                   counter++, ".stderr");

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = -1;
  const int rc = SpawnChild(options.argv, &actions, &pid);
  posix_spawn_file_actions_destroy(&actions);
  close(in_pipe[0]);
  close(out_pipe[1]);
  if (rc != 0) {
    close(in_pipe[1]);
    close(out_pipe[0]);
    return absl::InternalError(absl::StrCat("cannot start ", options.argv[0],
                                            ": ", std::strerror(rc)));
  }
  // The limits are in place before the child sees its assignment: it does
  // nothing before reading it.
  if (absl::Status limited = ApplyRunLimits(pid, options.limits);
      !limited.ok()) {
    kill(pid, SIGKILL);
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    close(in_pipe[1]);
    close(out_pipe[0]);
    std::remove(stderr_path.c_str());
    return limited;
  }
  // The assignment goes down the pipe; closing it tells the child it has
  // everything. A child that died at once makes this fail: the reader then
  // reports its exit.
  absl::Status wrote = WriteFrame(in_pipe[1], assignment);
  close(in_pipe[1]);
  if (!wrote.ok()) {
    LS_LOG(WARNING) << "run " << assignment.run_id()
                    << ": assignment not delivered: " << wrote;
  }
  auto s = std::unique_ptr<RunSupervisor>(new RunSupervisor());
  s->pid_ = pid;
  s->out_fd_ = out_pipe[0];
  s->stderr_path_ = stderr_path;
  s->on_message_ = std::move(on_message);
  s->reader_ = std::thread([raw = s.get(), assignment, options] {
    raw->ReadLoop(assignment, options);
  });
  return s;
}

void RunSupervisor::ReadLoop(v1::RunAssignment assignment,
                             SupervisorOptions options) {
  const int64_t timeout_ms = options.timeout_ms;
  const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout_ms);
  bool finished = false;
  bool timed_out = false;
  std::string read_error;
  while (true) {
    struct pollfd pfd = {out_fd_, POLLIN, 0};
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) {
      timed_out = true;
      break;
    }
    const int r =
        poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    v1::WorkerMessage m;
    absl::Status s = ReadFrame(out_fd_, &m);
    if (!s.ok()) {
      if (s.code() != absl::StatusCode::kNotFound) read_error = s.ToString();
      break;
    }
    if (m.has_finished()) finished = true;
    {
      absl::MutexLock lock(&mu_);
      if (killed_) break;
    }
    on_message_(std::move(m));
  }
  if (timed_out) kill(pid_, SIGKILL);
  int status = 0;
  struct rusage usage = {};
  while (wait4(pid_, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  close(out_fd_);
  {
    absl::MutexLock lock(&mu_);
    exited_ = true;
    if (killed_) {
      std::remove(stderr_path_.c_str());
      return;
    }
  }
  if (!finished) {
    std::string reason;
    if (timed_out) {
      reason = absl::StrFormat("timeout: killed after %d s", timeout_ms / 1000);
    } else if (WIFSIGNALED(status)) {
      reason = absl::StrCat("killed by signal ", WTERMSIG(status), " (",
                            strsignal(WTERMSIG(status)), ")");
      const std::string limit =
          LimitReached(WTERMSIG(status), usage, options.limits, stderr_path_);
      if (!limit.empty()) reason = absl::StrCat(limit, "; ", reason);
    } else {
      reason = absl::StrCat("exited with code ",
                            WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                            " without a result");
    }
    if (!read_error.empty()) absl::StrAppend(&reason, "; ", read_error);
    const std::string tail = TailOfFile(stderr_path_, 400);
    if (!tail.empty()) absl::StrAppend(&reason, "; stderr: ", tail);
    v1::WorkerMessage m;
    m.mutable_finished()->set_run_id(assignment.run_id());
    m.mutable_finished()->set_attempt(assignment.attempt());
    m.mutable_finished()->set_success(false);
    m.mutable_finished()->set_failure_reason(reason);
    on_message_(std::move(m));
  }
  std::remove(stderr_path_.c_str());
}

void RunSupervisor::Kill() {
  absl::MutexLock lock(&mu_);
  killed_ = true;
  if (!exited_ && pid_ > 0) kill(pid_, SIGKILL);
}

RunSupervisor::~RunSupervisor() {
  Kill();
  if (reader_.joinable()) reader_.join();
}

}  // namespace lockstep::worker
