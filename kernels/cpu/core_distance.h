// How far apart two of the process's CPUs are, as the time a cache line
// takes to travel between them and back.
//
// On a virtual machine the CPUs the guest sees can land on one core complex
// of the host or on two (and move between the two with time): a cache line
// written on one CPU then reaches the other in about 40 ns, or in about
// 200. Work split across the CPUs, such as hashing a step's tensors on a
// second thread (worker/exec/fingerprint_pipeline.h), pays that distance for
// every line the other CPU reads and the first one writes again.
// step_bench prints it beside each row so that a table says which placement
// it ran on (docs/benchmarks.md, "AMD EPYC (Zen 2, AVX2), 2026-12-06: the
// two vCPUs' distance").
#ifndef LOCKSTEP_KERNELS_CPU_CORE_DISTANCE_H_
#define LOCKSTEP_KERNELS_CPU_CORE_DISTANCE_H_

#include <chrono>
#include <optional>

namespace lockstep::kernels {

struct CoreDistanceOptions {
  // Round trips per timed batch, and batches (the median counts).
  int round_trips = 2000;
  int batches = 5;
  // The whole measurement gives up after this long (a CPU taken by other
  // work, a thread that cannot be placed).
  std::chrono::milliseconds timeout{2000};
};

// The median time, in nanoseconds, for one cache line to go from the first
// CPU of the calling thread's affinity mask to the second and back: one
// thread pinned to each, writing the line in turns. The calling thread's own
// affinity is left alone. nullopt where the mask holds fewer than two CPUs,
// a thread cannot be pinned, options are out of range (round_trips and
// batches >= 1) or the timeout passes first.
std::optional<double> CacheLineRoundTripNanos(
    const CoreDistanceOptions& options = {});

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_CPU_CORE_DISTANCE_H_
