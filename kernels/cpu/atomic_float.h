// Atomic float accumulation for the DEFAULT ("atomic") CPU kernels.
//
// AtomicAddFloat adds with a compare-and-swap loop, so concurrent adders
// land in whatever order they arrive: float addition is not associative,
// and the result can change from run to run. That is the point of these
// kernels (they reproduce classic GPU atomicAdd nondeterminism); CANONICAL
// and DETERMINISTIC kernels never use this.
#ifndef LOCKSTEP_KERNELS_CPU_ATOMIC_FLOAT_H_
#define LOCKSTEP_KERNELS_CPU_ATOMIC_FLOAT_H_

namespace lockstep::kernels {

inline void AtomicAddFloat(float* target, float value) {
  float expected;
  __atomic_load(target, &expected, __ATOMIC_RELAXED);
  float desired = expected + value;
  while (!__atomic_compare_exchange(target, &expected, &desired,
                                    /*weak=*/true, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED)) {
    desired = expected + value;
  }
}

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_CPU_ATOMIC_FLOAT_H_
