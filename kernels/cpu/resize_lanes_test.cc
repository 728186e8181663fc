// The CANONICAL resize_bilinear forward and grad run on the lane kernels
// with lanes = image planes (blocks of 8 or 16 planes interleaved, the
// planes left over one by one). On every ISA path this CPU has and on 1, 2,
// 3 and 8 threads their bits equal the spec's host loops
// (kernels/spatial/resize_bilinear.h): plane counts that fill blocks and
// leave remainders, upsampling whose gradient gathers more than 256 terms
// per element (several chunks and the tree), downsampling, a 1 x 1 source,
// and NaN, infinities, -0 and subnormals in x and dy.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/canonical_kernel_test.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/spatial/resize_bilinear.h"
#include "kernels/tensor.h"
#include "kernels/testing/float_test_util.h"

namespace lockstep::kernels {
namespace {

namespace sp = ::lockstep::spatial;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

class ResizeLanesTest : public CpuCanonicalKernelTest {};

TEST_F(ResizeLanesTest, ForwardAndGradGiveTheSpecBitsOnEveryIsaAndThreadCount) {
  struct Case {
    sp::ResizeBilinearShape s;
  };
  const Case cases[] = {
      {{2, 19, 3, 3, 40, 40}},  // ~27 x 27 terms per dx element
      {{1, 33, 9, 7, 4, 5}},    // downsampling
      {{3, 16, 8, 8, 16, 16}},  // whole blocks of 16 (and of 8)
      {{1, 17, 1, 1, 5, 3}},    // every output reads the one pixel
      {{2, 5, 6, 10, 13, 7}},   // fewer planes than a vector
  };
  const float specials[] = {kNan, kInf, -kInf, -0.0f, 1e-40f, -1e-40f};
  uint32_t seed = 300;
  for (const Case& c : cases) {
    const sp::ResizeBilinearShape& s = c.s;
    const int64_t in_n = sp::ResizeBilinearInputSize(s);
    const int64_t out_n = sp::ResizeBilinearOutputSize(s);
    std::vector<float> x = lockstep::testing::RandomFloats(
        static_cast<size_t>(in_n), seed++, -3.0f, 3.0f);
    std::vector<float> dy = lockstep::testing::RandomFloats(
        static_cast<size_t>(out_n), seed++, -3.0f, 3.0f);
    // Specials in a few planes only, so most planes stay finite.
    for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); ++i) {
      const int64_t at = static_cast<int64_t>(7 * i + 1);
      if (at < in_n) x[at] = specials[i];
      if (at < out_n) dy[out_n - 1 - at] = specials[i];
    }
    std::vector<float> want_y(static_cast<size_t>(out_n));
    std::vector<float> want_dx(static_cast<size_t>(in_n));
    sp::ResizeBilinearForward(s, x.data(), want_y.data());
    sp::ResizeBilinearGrad(s, dy.data(), want_dx.data());
    const std::vector<int64_t> in_shape = {s.n, s.c, s.in_h, s.in_w};
    const std::vector<int64_t> out_shape = {s.n, s.c, s.out_h, s.out_w};
    for (CpuIsa isa : SupportedCpuIsas()) {
      SetCpuIsaForTesting(isa);
      for (int threads : {1, 2, 3, 8}) {
        SetCpuThreadsForTesting(threads);
        const std::string where = absl::StrCat(
            s.n, "x", s.c, " planes ", s.in_h, "x", s.in_w, "->", s.out_h, "x",
            s.out_w, ", isa ", CpuIsaName(isa), ", ", threads, " threads");
        {
          const Tensor in[] = {FloatTensor(in_shape, x)};
          Tensor out[] = {
              FloatTensor(out_shape, std::vector<float>(want_y.size(), 7.0f))};
          ASSERT_TRUE(Kernel(op::kResizeBilinearForward)(
                          absl::MakeConstSpan(in), absl::MakeSpan(out), {})
                          .ok())
              << where;
          ExpectSameBits(out[0], want_y, "forward, " + where);
        }
        {
          const Tensor in[] = {FloatTensor(out_shape, dy)};
          Tensor out[] = {
              FloatTensor(in_shape, std::vector<float>(want_dx.size(), 7.0f))};
          ASSERT_TRUE(Kernel(op::kResizeBilinearGrad)(absl::MakeConstSpan(in),
                                                      absl::MakeSpan(out), {})
                          .ok())
              << where;
          ExpectSameBits(out[0], want_dx, "grad, " + where);
        }
      }
    }
  }
}

}  // namespace
}  // namespace lockstep::kernels
