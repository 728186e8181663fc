// The comparisons the GPU suite and `lockstep-worker selftest` use.
#include "kernels/op_cases.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/tensor.h"

namespace lockstep::kernels {
namespace {

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

Tensor Floats(const std::vector<uint32_t>& bits) {
  std::vector<float> values;
  for (uint32_t b : bits) values.push_back(FromBits(b));
  return Tensor::FromValues<float>({static_cast<int64_t>(bits.size())}, values)
      .value();
}

constexpr uint32_t kX86Nan = 0xFFC00000u;   // x86's default NaN
constexpr uint32_t kCudaNan = 0x7FFFFFFFu;  // CUDA's
constexpr uint32_t kPayloadNan = 0x7FC01234u;

TEST(OpCasesCompareTest, NanBitsDifferOnlyAcrossClasses) {
  const Tensor cpu = Floats({0x3F800000u, kX86Nan, 0x80000000u, kPayloadNan});
  const Tensor gpu = Floats({0x3F800000u, kCudaNan, 0x80000000u, kCudaNan});
  EXPECT_EQ(FirstDifferingElement(gpu, cpu), 1);
  EXPECT_EQ(FirstCrossClassDifference(gpu, cpu), -1);
  EXPECT_EQ(CountNanBitDifferences(gpu, cpu), 2);
  EXPECT_EQ(CountNanBitDifferences(cpu, cpu), 0);
}

TEST(OpCasesCompareTest, EverythingElseStillCountsAcrossClasses) {
  const Tensor want = Floats({0x3F800000u, kX86Nan, 0x00000000u});
  // A number where the reference is NaN.
  EXPECT_EQ(FirstCrossClassDifference(
                Floats({0x3F800000u, 0x3F800000u, 0x00000000u}), want),
            1);
  // A NaN where the reference is a number.
  EXPECT_EQ(FirstCrossClassDifference(Floats({kCudaNan, kCudaNan, 0x00000000u}),
                                      want),
            0);
  // -0 against +0, one ulp.
  EXPECT_EQ(FirstCrossClassDifference(
                Floats({0x3F800000u, kCudaNan, 0x80000000u}), want),
            2);
  EXPECT_EQ(FirstCrossClassDifference(
                Floats({0x3F800001u, kCudaNan, 0x00000000u}), want),
            0);
  // Other shapes or dtypes differ at 0; int32 compares every bit.
  EXPECT_EQ(FirstCrossClassDifference(Floats({0x3F800000u}), want), 0);
  const Tensor ints =
      Tensor::FromValues<int32_t>({2}, {static_cast<int32_t>(kX86Nan), 1})
          .value();
  const Tensor other =
      Tensor::FromValues<int32_t>({2}, {static_cast<int32_t>(kCudaNan), 1})
          .value();
  EXPECT_EQ(FirstCrossClassDifference(ints, other), 0);
  EXPECT_EQ(CountNanBitDifferences(ints, other), 0);
}

}  // namespace
}  // namespace lockstep::kernels
