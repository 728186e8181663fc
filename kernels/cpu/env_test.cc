// LOCKSTEP_CPU_ISA and LOCKSTEP_CPU_THREADS are honoured (BUILD sets them to
// "avx2" and "3" for this test).
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"

namespace lockstep::kernels {
namespace {

TEST(CpuEnvTest, IsaAndThreadsComeFromTheEnvironment) {
  ASSERT_EQ(std::string(std::getenv("LOCKSTEP_CPU_ISA")), "avx2");
  if (CpuIsaSupported(CpuIsa::kAvx2)) {
    EXPECT_EQ(ActiveCpuIsa(), CpuIsa::kAvx2);
  } else {
    EXPECT_EQ(ActiveCpuIsa(), CpuIsa::kScalar);  // lowered, never faults
  }
  EXPECT_EQ(CpuThreadPool()->num_threads(), 3);
  // The test override wins over the environment, and can be undone.
  SetCpuIsaForTesting(CpuIsa::kScalar);
  EXPECT_EQ(ActiveCpuIsa(), CpuIsa::kScalar);
  SetCpuIsaForTesting(std::nullopt);
  EXPECT_EQ(ActiveCpuIsa(),
            BestCpuIsa() == CpuIsa::kScalar ? CpuIsa::kScalar : CpuIsa::kAvx2);
}

}  // namespace
}  // namespace lockstep::kernels
