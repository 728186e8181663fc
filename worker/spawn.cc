#include "worker/spawn.h"

#include <signal.h>

extern char** environ;

namespace lockstep::worker {

int SpawnChild(const std::vector<std::string>& argv,
               const posix_spawn_file_actions_t* actions, pid_t* pid) {
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int rc =
      posix_spawn(pid, args[0], actions, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  return rc;
}

}  // namespace lockstep::worker
