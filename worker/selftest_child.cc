#include "worker/selftest_child.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "worker/spawn.h"

namespace lockstep::worker {
namespace {

namespace v1 = ::lockstep::v1;
using google::protobuf::Value;

constexpr size_t kMaxSummary = 1000;
// Output kept from the child: a full report is well under this.
constexpr size_t kMaxOutput = size_t{64} << 20;

v1::SelftestResult Failed(const std::string& why, int64_t duration_ms) {
  v1::SelftestResult r;
  r.set_passed(false);
  std::string summary = absl::StrCat("error: selftest process ", why);
  if (summary.size() > kMaxSummary) {
    summary = absl::StrCat(summary.substr(0, kMaxSummary - 3), "...");
  }
  r.set_summary(summary);
  r.set_duration_ms(duration_ms);
  return r;
}

// The last non-empty line of `text`, or "".
std::string LastLine(absl::string_view text) {
  std::string last;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty()) last = std::string(line);
  }
  return last;
}

std::string WithStderr(std::string why, absl::string_view err) {
  const std::string last = LastLine(err);
  if (!last.empty()) absl::StrAppend(&why, "; stderr: ", last);
  return why;
}

}  // namespace

absl::StatusOr<v1::SelftestResult> ParseSelftestJson(absl::string_view json) {
  Value root;
  if (!google::protobuf::util::JsonStringToMessage(
           google::protobuf::StringPiece(json.data(), json.size()), &root)
           .ok() ||
      !root.has_struct_value()) {
    return absl::InvalidArgumentError("selftest report: not a JSON object");
  }
  const auto& f = root.struct_value().fields();
  auto field = [&](const char* name, Value::KindCase kind) -> const Value* {
    auto it = f.find(name);
    return it == f.end() || it->second.kind_case() != kind ? nullptr
                                                           : &it->second;
  };
  const Value* ok = field("ok", Value::kBoolValue);
  const Value* rows = field("rows", Value::kListValue);
  const Value* failing = field("failing_rows", Value::kListValue);
  const Value* summary = field("summary", Value::kStringValue);
  const Value* backends = field("backends", Value::kListValue);
  for (const auto& [name, value] : {std::pair{"ok", ok},
                                    {"rows", rows},
                                    {"failing_rows", failing},
                                    {"summary", summary},
                                    {"backends", backends}}) {
    if (value == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("selftest report: field \"", name,
                       "\" missing or of the wrong type"));
    }
  }
  v1::SelftestResult r;
  r.set_passed(ok->bool_value());
  r.set_rows(rows->list_value().values_size());
  r.set_failed_rows(failing->list_value().values_size());
  std::string text = summary->string_value();
  if (text.size() > kMaxSummary) {
    text = absl::StrCat(text.substr(0, kMaxSummary - 3), "...");
  }
  r.set_summary(text);
  r.add_backends("cpu");
  for (const Value& b : backends->list_value().values()) {
    if (!b.has_struct_value()) continue;
    const auto& bf = b.struct_value().fields();
    auto name = bf.find("name");
    auto available = bf.find("available");
    if (name == bf.end() || available == bf.end() ||
        !available->second.bool_value() ||
        name->second.string_value() == "cpu") {
      continue;
    }
    r.add_backends(name->second.string_value());
  }
  return r;
}

v1::SelftestResult RunSelftestInChild(const std::vector<std::string>& argv,
                                      int64_t timeout_ms) {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed_ms = [&] {
    return static_cast<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - start)
            .count());
  };
  if (argv.empty()) return Failed("not started: empty command", 0);
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    return Failed(absl::StrCat("not started: pipe: ", std::strerror(errno)), 0);
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Failed(absl::StrCat("not started: pipe: ", std::strerror(errno)), 0);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null",
                                   O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  pid_t pid = -1;
  const int rc = SpawnChild(argv, &actions, &pid);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    return Failed(
        absl::StrCat("not started: ", argv[0], ": ", std::strerror(rc)),
        elapsed_ms());
  }

  std::string out, err;
  bool timed_out = false;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&out, &err};
  int open_fds = 2;
  while (open_fds > 0) {
    const int64_t left = timeout_ms - elapsed_ms();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    const int n = poll(fds, 2, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2 && n > 0; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[65536];
      const ssize_t got = read(fds[i].fd, buf, sizeof(buf));
      if (got > 0) {
        if (sinks[i]->size() < kMaxOutput) sinks[i]->append(buf, got);
      } else if (got == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (const pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  if (timed_out) kill(pid, SIGKILL);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  const int64_t duration = elapsed_ms();
  if (timed_out) {
    return Failed(WithStderr(absl::StrCat("timed out after ", timeout_ms,
                                          " ms and was killed"),
                             err),
                  duration);
  }
  if (WIFSIGNALED(wstatus)) {
    const int sig = WTERMSIG(wstatus);
    return Failed(WithStderr(absl::StrCat("killed by signal ", sig, " (",
                                          strsignal(sig), ")"),
                             err),
                  duration);
  }
  const int code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
  if (code != 0 && code != 1) {
    return Failed(WithStderr(absl::StrCat("exited with code ", code), err),
                  duration);
  }
  absl::StatusOr<v1::SelftestResult> r = ParseSelftestJson(out);
  if (!r.ok()) {
    return Failed(WithStderr(absl::StrCat("exited with code ", code,
                                          " but printed no valid report: ",
                                          r.status().message()),
                             err),
                  duration);
  }
  r->set_duration_ms(duration);
  return *std::move(r);
}

}  // namespace lockstep::worker
