#include "kernels/cpu/core_distance.h"

#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <optional>
#include <thread>

#include "gtest/gtest.h"

namespace lockstep::kernels {
namespace {

int CpusOfThisThread(cpu_set_t* mask) {
  CPU_ZERO(mask);
  if (pthread_getaffinity_np(pthread_self(), sizeof(*mask), mask) != 0) {
    return 0;
  }
  return CPU_COUNT(mask);
}

TEST(CoreDistanceTest, MeasuresARoundTripAndLeavesTheCallersMaskAlone) {
  cpu_set_t before;
  if (CpusOfThisThread(&before) < 2) {
    GTEST_SKIP() << "this process may run on one CPU only";
  }
  const std::optional<double> ns = CacheLineRoundTripNanos();
  ASSERT_TRUE(ns.has_value());
  // Between two CPUs a line travels in tens to hundreds of nanoseconds; a
  // loaded machine can stretch it, never to a millisecond per round trip.
  EXPECT_GT(*ns, 0.0);
  EXPECT_LT(*ns, 1e6);
  cpu_set_t after;
  CpusOfThisThread(&after);
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
}

TEST(CoreDistanceTest, OneCpuHasNoDistance) {
  cpu_set_t mask;
  if (CpusOfThisThread(&mask) < 1) GTEST_SKIP() << "no affinity mask";
  int cpu = 0;
  while (!CPU_ISSET(cpu, &mask)) ++cpu;
  std::optional<double> ns = 1.0;
  std::thread t([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(one), &one), 0);
    ns = CacheLineRoundTripNanos();
  });
  t.join();
  EXPECT_FALSE(ns.has_value());
}

TEST(CoreDistanceTest, RejectsEmptyMeasurementsAndGivesUpAtTheTimeout) {
  cpu_set_t mask;
  if (CpusOfThisThread(&mask) < 2) {
    GTEST_SKIP() << "this process may run on one CPU only";
  }
  CoreDistanceOptions o;
  o.round_trips = 0;
  EXPECT_FALSE(CacheLineRoundTripNanos(o).has_value());
  o.round_trips = 10;
  o.batches = 0;
  EXPECT_FALSE(CacheLineRoundTripNanos(o).has_value());
  o.batches = 3;
  o.timeout = std::chrono::milliseconds(0);
  EXPECT_FALSE(CacheLineRoundTripNanos(o).has_value());
}

}  // namespace
}  // namespace lockstep::kernels
