// Invariant checks for the fuzz harnesses: a failed check prints what went
// wrong and aborts, which libFuzzer reports as a crash (and saves the
// input) and the replay test reports as a failure.
#ifndef LOCKSTEP_FUZZ_FUZZ_CHECK_H_
#define LOCKSTEP_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#define FUZZ_CHECK(cond, what)                                              \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n  %s\n", __FILE__, \
                   __LINE__, #cond, std::string(what).c_str());             \
      std::abort();                                                         \
    }                                                                       \
  } while (0)

#endif  // LOCKSTEP_FUZZ_FUZZ_CHECK_H_
