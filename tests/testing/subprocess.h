// Child processes for end-to-end tests: real binaries started with
// posix_spawn, output captured to files, ended by PID only.
//
// A Subprocess still running when destroyed is killed (SIGKILL) and reaped,
// so a failing test never leaves processes behind.
#ifndef LOCKSTEP_TESTS_TESTING_SUBPROCESS_H_
#define LOCKSTEP_TESTS_TESTING_SUBPROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace lockstep::testing {

// Path of a binary built by this workspace, from the test's runfiles
// (e.g. "server/lockstep-coordinator").
std::string RunfilePath(const std::string& workspace_relative);

// A writable scratch directory for this test (TEST_TMPDIR or /tmp).
std::string TempDir();

class Subprocess {
 public:
  // Starts `argv[0]` with `argv`; stdout and stderr go to `log_path`
  // (appended).
  static absl::StatusOr<Subprocess> Start(const std::vector<std::string>& argv,
                                          const std::string& log_path);
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !exited_; }
  void Signal(int sig);
  // Waits up to `timeout` for exit. Returns the wait status, or nullopt on
  // timeout.
  std::optional<int> Wait(absl::Duration timeout);
  const std::string& log_path() const { return log_path_; }

 private:
  Subprocess(pid_t pid, std::string log_path)
      : pid_(pid), log_path_(std::move(log_path)) {}
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string log_path_;
};

// Runs a command to completion (bounded by `timeout`, killed after) and
// returns its exit code; stdout and stderr are captured.
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout);

std::string ReadFileOrEmpty(const std::string& path);

}  // namespace lockstep::testing

#endif  // LOCKSTEP_TESTS_TESTING_SUBPROCESS_H_
