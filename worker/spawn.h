// Starting a worker child process (a run process, the start-up selftest).
//
// The daemon blocks its stop signals to sigwait for them; a child must not
// inherit that mask or any ignored disposition, or SIGTERM and SIGKILL
// drills behave differently in it.
#ifndef LOCKSTEP_WORKER_SPAWN_H_
#define LOCKSTEP_WORKER_SPAWN_H_

#include <spawn.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace lockstep::worker {

// posix_spawn(argv[0], argv) with `actions` (the caller's fd plumbing), an
// empty signal mask and every signal at its default disposition, in this
// process's environment. Returns 0 and sets *pid, or posix_spawn's error
// number. REQUIRES: !argv.empty().
int SpawnChild(const std::vector<std::string>& argv,
               const posix_spawn_file_actions_t* actions, pid_t* pid);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_SPAWN_H_
