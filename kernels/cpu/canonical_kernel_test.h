// Test helpers for the CPU backend's CANONICAL kernels: a fixture with the
// kernels registered, Kernel(op) to look one up, and the ISA, thread count
// and streamed-output threshold a test forces put back afterwards; float32
// tensors from values; and
// a bit-pattern comparison that names the first element that differs.
//
//   class MyLanesTest : public CpuCanonicalKernelTest {};
//   TEST_F(MyLanesTest, SpecBits) {
//     SetCpuThreadsForTesting(3);
//     Tensor out[] = {FloatTensor({4}, std::vector<float>(4))};
//     ASSERT_TRUE(Kernel(op::kReluForward)(in, out, {}).ok());
//     ExpectSameBits(out[0], want, "relu, 3 threads");
//   }
#ifndef LOCKSTEP_KERNELS_CPU_CANONICAL_KERNEL_TEST_H_
#define LOCKSTEP_KERNELS_CPU_CANONICAL_KERNEL_TEST_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/lane_kernels.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"

namespace lockstep::kernels {

class CpuCanonicalKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterCpuCanonicalKernels(&registry_).ok());
  }
  void TearDown() override {
    SetCpuIsaForTesting(std::nullopt);
    SetCpuThreadsForTesting(0);
    cpu_internal::SetStreamOutputFloatsForTesting(0);
  }

  // The CPU backend's CANONICAL kernel of `op` (a test failure if none).
  KernelFn Kernel(const char* op) {
    absl::StatusOr<KernelFn> k = registry_.Lookup(
        KernelKey{op, Mode::kCanonical, kCanonicalAlgorithm, kCpuBackendName});
    EXPECT_TRUE(k.ok()) << op;
    return *k;
  }

  Registry registry_;
};

// A float32 tensor of `shape` holding `v`. REQUIRES: sizes agree.
inline Tensor FloatTensor(std::vector<int64_t> shape,
                          const std::vector<float>& v) {
  return *Tensor::FromValues<float>(std::move(shape), v);
}

// Expects `got` to hold exactly the bit patterns of `want`; a failure names
// `what`, the first element that differs and both bit patterns.
inline void ExpectSameBits(const Tensor& got, const std::vector<float>& want,
                           const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  const float* g = got.data<float>();
  for (size_t i = 0; i < want.size(); ++i) {
    uint32_t gb, wb;
    std::memcpy(&gb, &g[i], sizeof(gb));
    std::memcpy(&wb, &want[i], sizeof(wb));
    if (gb != wb) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << " (0x"
                    << std::hex << gb << "), the spec gives " << want[i]
                    << " (0x" << wb << ")";
      return;
    }
  }
}

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_CPU_CANONICAL_KERNEL_TEST_H_
