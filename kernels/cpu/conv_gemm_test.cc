// The implicit-GEMM convolutions (conv_gemm.h), called directly on every
// supported ISA (the scalar GEMM included) with 1, 2, 3 and 8 threads:
// CANONICAL (chunk = canonical::kChunk) equals the scalar spec drivers of
// kernels/spatial/conv2d.h bit for bit, and DETERMINISTIC (kSingleChain)
// equals one fma chain per output over the spec's term sequence, over the
// shapes of real networks (3x3 and 1x1, stride 1 and 2, padding, dilation,
// groups, depthwise) and odd sizes around the micro-kernel's panel widths.
// Depthwise convolutions run the direct loops of gemm.h (forward and
// grad_input up to 256 terms per output, the GEMM beyond; grad_weight
// always). Scratch is poisoned, so a packer
// leaving an element unwritten shows.
#include "kernels/cpu/conv_gemm.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/canonical/reduce.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/lane_kernels.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/spatial/conv2d.h"
#include "kernels/testing/float_test_util.h"

namespace lockstep::kernels {
namespace {

namespace sp = ::lockstep::spatial;
using ::lockstep::testing::BitsEqual;
using ::lockstep::testing::RandomFloats;
using ::lockstep::testing::SmallInts;

struct Case {
  const char* label;
  int64_t n, c_in, h, w, c_out, k;  // k x k kernel
  int64_t stride, pad_t, pad_b, pad_l, pad_r, dil, groups;
  int64_t stride_w = 0;  // > 0: the column stride, `stride` the row one
};

sp::Conv2dShape Shape(const Case& c) {
  sp::Conv2dShape s;
  s.n = c.n;
  s.c_in = c.c_in;
  s.h = c.h;
  s.w = c.w;
  s.c_out = c.c_out;
  s.k_h = s.k_w = c.k;
  s.stride_h = c.stride;
  s.stride_w = c.stride_w > 0 ? c.stride_w : c.stride;
  s.pad_top = c.pad_t;
  s.pad_bottom = c.pad_b;
  s.pad_left = c.pad_l;
  s.pad_right = c.pad_r;
  s.dilation_h = s.dilation_w = c.dil;
  s.groups = c.groups;
  return s;
}

// The single-chain (DETERMINISTIC) reference: each output is one fma chain
// from +0.0f over the spec's term sequence (docs/canonical-arithmetic.md
// 4.2-4.4), taps outside the input reading +0.0f.
float XTap(const sp::Conv2dShape& s, const float* x, int64_t n, int64_t ci,
           int64_t oh, int64_t ow, int64_t kh, int64_t kw) {
  const int64_t ih = oh * s.stride_h - s.pad_top + kh * s.dilation_h;
  const int64_t iw = ow * s.stride_w - s.pad_left + kw * s.dilation_w;
  if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) return 0.0f;
  return x[((n * s.c_in + ci) * s.h + ih) * s.w + iw];
}

std::vector<float> ChainForward(const sp::Conv2dShape& s, const float* x,
                                const float* w) {
  const int64_t oh_n = sp::Conv2dOutH(s), ow_n = sp::Conv2dOutW(s);
  const int64_t cg = s.c_in / s.groups, og = s.c_out / s.groups;
  std::vector<float> y(sp::Conv2dOutputSize(s));
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t co = 0; co < s.c_out; ++co) {
      for (int64_t oh = 0; oh < oh_n; ++oh) {
        for (int64_t ow = 0; ow < ow_n; ++ow) {
          float acc = 0.0f;
          for (int64_t c = 0; c < cg; ++c) {
            for (int64_t kh = 0; kh < s.k_h; ++kh) {
              for (int64_t kw = 0; kw < s.k_w; ++kw) {
                acc =
                    std::fma(XTap(s, x, n, co / og * cg + c, oh, ow, kh, kw),
                             w[((co * cg + c) * s.k_h + kh) * s.k_w + kw], acc);
              }
            }
          }
          y[((n * s.c_out + co) * oh_n + oh) * ow_n + ow] = acc;
        }
      }
    }
  }
  return y;
}

std::vector<float> ChainGradInput(const sp::Conv2dShape& s, const float* dy,
                                  const float* w) {
  const int64_t oh_n = sp::Conv2dOutH(s), ow_n = sp::Conv2dOutW(s);
  const int64_t cg = s.c_in / s.groups, og = s.c_out / s.groups;
  std::vector<float> dx(sp::Conv2dInputSize(s));
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t ci = 0; ci < s.c_in; ++ci) {
      const int64_t g = ci / cg, c = ci % cg;
      for (int64_t ih = 0; ih < s.h; ++ih) {
        for (int64_t iw = 0; iw < s.w; ++iw) {
          float acc = 0.0f;
          for (int64_t j = 0; j < og; ++j) {
            const int64_t co = g * og + j;
            for (int64_t kh = 0; kh < s.k_h; ++kh) {
              for (int64_t kw = 0; kw < s.k_w; ++kw) {
                const int64_t th = ih + s.pad_top - kh * s.dilation_h;
                const int64_t tw = iw + s.pad_left - kw * s.dilation_w;
                float v = 0.0f;
                if (th >= 0 && th % s.stride_h == 0 && th / s.stride_h < oh_n &&
                    tw >= 0 && tw % s.stride_w == 0 && tw / s.stride_w < ow_n) {
                  v = dy[((n * s.c_out + co) * oh_n + th / s.stride_h) * ow_n +
                         tw / s.stride_w];
                }
                acc = std::fma(v, w[((co * cg + c) * s.k_h + kh) * s.k_w + kw],
                               acc);
              }
            }
          }
          dx[((n * s.c_in + ci) * s.h + ih) * s.w + iw] = acc;
        }
      }
    }
  }
  return dx;
}

std::vector<float> ChainGradWeight(const sp::Conv2dShape& s, const float* x,
                                   const float* dy) {
  const int64_t oh_n = sp::Conv2dOutH(s), ow_n = sp::Conv2dOutW(s);
  const int64_t cg = s.c_in / s.groups, og = s.c_out / s.groups;
  std::vector<float> dw(sp::Conv2dWeightSize(s));
  for (int64_t co = 0; co < s.c_out; ++co) {
    for (int64_t c = 0; c < cg; ++c) {
      for (int64_t kh = 0; kh < s.k_h; ++kh) {
        for (int64_t kw = 0; kw < s.k_w; ++kw) {
          float acc = 0.0f;
          for (int64_t n = 0; n < s.n; ++n) {
            for (int64_t oh = 0; oh < oh_n; ++oh) {
              for (int64_t ow = 0; ow < ow_n; ++ow) {
                acc = std::fma(dy[((n * s.c_out + co) * oh_n + oh) * ow_n + ow],
                               XTap(s, x, n, co / og * cg + c, oh, ow, kh, kw),
                               acc);
              }
            }
          }
          dw[((co * cg + c) * s.k_h + kh) * s.k_w + kw] = acc;
        }
      }
    }
  }
  return dw;
}

// ResNet-like geometries, scaled down, plus the edge cases. Micro-kernel
// panels are 4 (scalar), 16 (AVX2) and 32 (AVX-512) columns wide with 4, 6
// and 8 or 12 rows (8 for the indirect products wider than 8 columns):
// output pixel counts and channel counts straddle them.
const Case kCases[] = {
    // label, n, c_in, h, w, c_out, k, stride, pads t b l r, dil, groups
    {"3x3 s1 p1", 2, 3, 8, 8, 16, 3, 1, 1, 1, 1, 1, 1, 1},
    {"3x3 s1 p1 odd", 3, 5, 7, 9, 13, 3, 1, 1, 1, 1, 1, 1, 1},
    {"3x3 s2 p1", 3, 8, 9, 9, 16, 3, 2, 1, 1, 1, 1, 1, 1},
    {"3x3 s2 p1 even", 2, 6, 8, 8, 7, 3, 2, 1, 1, 1, 1, 1, 1},
    {"1x1 s1", 2, 40, 6, 6, 24, 1, 1, 0, 0, 0, 0, 1, 1},
    {"1x1 s1 17px", 2, 9, 1, 17, 25, 1, 1, 0, 0, 0, 0, 1, 1},
    {"1x1 s2 projection", 2, 16, 7, 7, 33, 1, 2, 0, 0, 0, 0, 1, 1},
    {"3x3 dilated", 2, 4, 10, 11, 6, 3, 1, 2, 2, 2, 2, 2, 1},
    {"asymmetric pad", 2, 3, 6, 7, 5, 3, 2, 0, 2, 1, 0, 1, 1},
    {"pad beyond kernel", 1, 2, 3, 3, 3, 3, 1, 4, 1, 3, 2, 1, 1},
    {"groups 2", 2, 8, 6, 6, 12, 3, 1, 1, 1, 1, 1, 1, 2},
    {"depthwise s1", 2, 12, 9, 9, 12, 3, 1, 1, 1, 1, 1, 1, 12},
    {"depthwise s2", 2, 7, 8, 8, 7, 3, 2, 1, 1, 1, 1, 1, 7},
    {"depthwise x2", 2, 4, 5, 6, 8, 3, 1, 1, 1, 1, 1, 1, 4},
    // Depthwise rows straddling the 1/8/16-lane vectors of the direct loop.
    {"depthwise 37px", 2, 3, 5, 37, 3, 3, 1, 1, 1, 1, 1, 1, 3},
    {"depthwise s2 35px", 1, 2, 6, 35, 2, 3, 2, 1, 0, 2, 1, 1, 2},
    {"depthwise dilated x3", 1, 2, 7, 19, 6, 3, 1, 2, 2, 2, 2, 2, 2},
    {"depthwise 5x5 17px", 2, 4, 17, 17, 4, 5, 1, 2, 2, 2, 2, 1, 4},
    {"depthwise 17x17 kernel", 1, 2, 17, 17, 2, 17, 1, 0, 0, 0, 0, 1, 2},
    // Depthwise grad_weight: several channel blocks; five chunks of terms.
    {"depthwise 40ch", 2, 40, 6, 6, 40, 3, 1, 1, 1, 1, 1, 1, 40},
    {"depthwise 5 chunks", 5, 3, 16, 16, 6, 3, 1, 1, 1, 1, 1, 1, 3},
    // Depthwise at MobileNet-v2 sizes, large enough to run on the pool:
    // full and partial 8- and 16-channel blocks; 16x16, 8x8 and 4x4 planes.
    {"depthwise 16x16 48ch", 4, 48, 16, 16, 48, 3, 1, 1, 1, 1, 1, 1, 48},
    {"depthwise s2 16x16 72ch", 8, 72, 16, 16, 72, 3, 2, 1, 1, 1, 1, 1, 72},
    {"depthwise 4x4 148ch", 16, 148, 4, 4, 148, 3, 1, 1, 1, 1, 1, 1, 148},
    {"taps > 256", 2, 32, 5, 5, 35, 3, 1, 1, 1, 1, 1, 1, 1},
    {"rows > 256", 4, 3, 9, 9, 4, 3, 1, 1, 1, 1, 1, 1, 1},
    {"image batches", 20, 3, 5, 5, 4, 3, 1, 1, 1, 1, 1, 1, 1},
    // More than one GEMM slab (1,024 terms): grad_weight's 5 x 225 rows
    // cut mid-image and mid-row; 1,080 taps of the forward and grad_input.
    {"rows > 1024", 5, 3, 15, 15, 4, 3, 1, 1, 1, 1, 1, 1, 1},
    {"taps > 1024", 1, 120, 4, 5, 121, 3, 1, 1, 1, 1, 1, 1, 1},
    // 32 or more channels on the lanes' side: the indirect products (A read
    // in place from padded x, or from dy spread onto a zero grid).
    {"indirect 3x3 s2 p1", 2, 33, 9, 9, 34, 3, 2, 1, 1, 1, 1, 1, 1},
    {"indirect 3x3 s2 even", 2, 32, 8, 8, 32, 3, 2, 1, 1, 1, 1, 1, 1},
    {"indirect dilated", 1, 32, 10, 11, 32, 3, 1, 2, 2, 2, 2, 2, 1},
    {"indirect asymmetric pad", 2, 32, 6, 7, 33, 3, 2, 0, 2, 1, 0, 1, 1},
    {"indirect pad beyond kernel", 1, 32, 3, 3, 32, 3, 1, 4, 1, 3, 2, 1, 1},
    {"indirect groups 2", 2, 64, 5, 5, 66, 3, 1, 1, 1, 1, 1, 1, 2},
    {"indirect 1x1 s2", 3, 40, 7, 7, 48, 1, 2, 0, 0, 0, 0, 1, 1},
    {"indirect s3 dilated", 1, 32, 11, 10, 70, 3, 3, 2, 1, 1, 2, 2, 1},
    // More output pixels than one GEMM super-block of rows (512 on AVX-512,
    // 64 tiles of 8 rows),
    // and a grad_weight reduction over two slabs (1,620 steps).
    {"indirect many pixels", 5, 32, 16, 16, 33, 1, 1, 1, 1, 1, 1, 1, 1},
    // 32 x 32 planes (4 KiB apart) and reductions of two chunks: the GEMM
    // gathers its tiles' columns before writing them (gemm_impl.h,
    // Staging); tasks cross the image boundary, the last tile is partial
    // and the second column panel is 8 wide.
    {"indirect 32x32 planes", 2, 32, 32, 32, 40, 3, 1, 1, 1, 1, 1, 1, 1},
    // ... with x read in place (no padding needed).
    {"indirect 1x1 s1 in place", 2, 33, 5, 6, 40, 1, 1, 0, 0, 0, 0, 1, 1},
    {"indirect 3x3 valid in place", 1, 32, 7, 6, 33, 3, 1, 0, 0, 0, 0, 1, 1},
    {"one pixel", 3, 2, 1, 1, 3, 1, 1, 0, 0, 0, 0, 1, 1},
    // 1 x 1 kernels with fewer than 16 channels on the lanes' side: the
    // packed paths (spatial kernels run indirect but for the short forwards
    // below).
    {"1x1 narrow packed", 20, 5, 5, 6, 7, 1, 1, 0, 0, 0, 0, 1, 1},
    {"1x1 narrow s2 packed", 3, 6, 9, 9, 10, 1, 2, 0, 0, 0, 0, 1, 1},
    {"1x1 padded packed", 2, 4, 5, 6, 5, 1, 2, 1, 0, 2, 1, 1, 1},
    {"1x1 groups packed", 2, 8, 6, 6, 12, 1, 1, 0, 0, 0, 0, 1, 2},
    {"1x1 rows > 1024 packed", 5, 3, 15, 15, 4, 1, 1, 0, 0, 0, 0, 1, 1},
    // Forwards of fewer than 32 reduction steps into 32 or more output
    // channels at stride 1 run packed too (spatial kernels included: a
    // network's stem), their other two ops indirect.
    {"stem packed", 2, 3, 12, 12, 40, 3, 1, 1, 1, 1, 1, 1, 1},
    {"stem packed 32x32 planes", 2, 3, 32, 32, 64, 3, 1, 1, 1, 1, 1, 1, 1},
    {"stem packed dilated", 1, 3, 10, 11, 32, 3, 1, 2, 1, 0, 2, 2, 1},
    {"stem packed groups 2", 2, 4, 6, 6, 64, 3, 1, 1, 1, 1, 1, 1, 2},
    {"1x1 wide packed", 3, 8, 6, 7, 48, 1, 1, 0, 0, 0, 0, 1, 1},
    // 1 x 1, stride 1, no padding: forward (where it is not indirect) and
    // grad_input are plain GEMMs per image and group; reductions past the
    // 256-term chunk (the canonical tree) on either side.
    {"1x1 pointwise deep", 2, 300, 3, 5, 8, 1, 1, 0, 0, 0, 0, 1, 1},
    {"1x1 pointwise wide", 2, 8, 4, 5, 300, 1, 1, 0, 0, 0, 0, 1, 1},
    {"1x1 pointwise groups", 3, 12, 5, 5, 18, 1, 1, 0, 0, 0, 0, 1, 3},
    {"1x1 pointwise one row", 9, 20, 1, 3, 17, 1, 1, 0, 0, 0, 0, 1, 1},
    // 1 x 1, no padding, column stride 2, 16 or more output columns: the
    // forward runs packed, each run of a row gathered (EvenColumnsB: four
    // floats at a time, sixteen with AVX-512); odd and even widths (the
    // last run's loads end inside the row, or are masked), runs of more than
    // 32 columns, runs crossing panels and images, reductions past the
    // 256-term chunk, groups, row strides 3 and 1.
    {"1x1 s2 even columns", 3, 8, 9, 33, 16, 1, 2, 0, 0, 0, 0, 1, 1},
    {"1x1 s2 even columns 32px", 2, 5, 6, 32, 7, 1, 2, 0, 0, 0, 0, 1, 1},
    {"1x1 s2 even columns wide", 2, 8, 3, 70, 16, 1, 2, 0, 0, 0, 0, 1, 1},
    // grad_input of these (16 or more output columns, stride 2 x 2): the
    // products of a stride-1 pointwise grad_input, spread onto dx's even
    // pixels; a reduction over 300 output channels (past the chunk).
    {"1x1 s2 spread deep", 2, 5, 5, 34, 300, 1, 2, 0, 0, 0, 0, 1, 1},
    {"1x1 s2 even columns deep", 2, 300, 4, 34, 9, 1, 2, 0, 0, 0, 0, 1, 1},
    {"1x1 s2 even columns groups", 2, 12, 5, 31, 18, 1, 2, 0, 0, 0, 0, 1, 3},
    {"1x1 s3x2 even columns", 2, 6, 13, 36, 10, 1, 3, 0, 0, 0, 0, 1, 1, 2},
    {"1x1 s1x2 even columns", 2, 7, 3, 40, 33, 1, 1, 0, 0, 0, 0, 1, 1, 2},
    // 1 x 1, no padding, column stride 2, 32 or more input channels per
    // group: grad_weight runs packed, x's even columns transposed 4 x 4
    // (TransposeCopyEven); odd and even widths (the last block's loads end
    // inside the row, or the row's last float goes one at a time), lanes
    // past a panel's 32, reductions past the 256-term chunk crossing
    // images and slabs that start mid-row, groups, row strides 3 and 1.
    // The narrow ones run packed for any stride: a row stride of 2 with a
    // column stride of 1 takes the transposing copy of each output row.
    // With at most 128 taps dy is read in place as an indirect A (its
    // planes' rows, images c_out planes apart, groups cog planes apart);
    // with more it is packed (the "> 128 taps" case).
    {"1x1 s2 grad_weight packed", 4, 40, 9, 33, 20, 1, 2, 0, 0, 0, 0, 1, 1},
    {"1x1 s2 grad_weight packed 32px", 2, 64, 6, 32, 17, 1, 2, 0, 0, 0, 0, 1,
     1},
    {"1x1 s2 grad_weight packed groups", 2, 66, 5, 14, 6, 1, 2, 0, 0, 0, 0, 1,
     2},
    {"1x1 s3x2 grad_weight packed", 2, 33, 13, 19, 9, 1, 3, 0, 0, 0, 0, 1, 1,
     2},
    {"1x1 s1x2 grad_weight packed", 3, 35, 3, 40, 33, 1, 1, 0, 0, 0, 0, 1, 1,
     2},
    {"1x1 s2x1 narrow packed", 2, 6, 9, 10, 8, 1, 2, 0, 0, 0, 0, 1, 1, 1},
    {"1x1 s2 grad_weight packed, > 128 taps", 3, 131, 5, 18, 12, 1, 2, 0, 0, 0,
     0, 1, 1},
    // A reduction of 1,155 steps: its second slab starts mid-row.
    {"1x1 s2 grad_weight packed, slab mid-row", 5, 32, 21, 41, 5, 1, 2, 0, 0, 0,
     0, 1, 1},
    // More than 64 row tiles (768 rows on 12-row tiles): B, copied or
    // gathered by the packers above, packed whole once for every row
    // super-block, as a matrix B is.
    {"1x1 s2 even columns rows > 768", 2, 3, 2, 32, 800, 1, 2, 0, 0, 0, 0, 1,
     1},
    {"1x1 pointwise rows > 768", 2, 800, 2, 3, 5, 1, 1, 0, 0, 0, 0, 1, 1},
};

// Every case against the spec (CANONICAL) and the single chain
// (DETERMINISTIC), on every ISA with 1, 2, 3 and 8 threads; `note` names
// the setting in failures.
template <size_t N>
void ExpectSpecAndSingleChain(const Case (&cases)[N], uint32_t seed,
                              const char* note) {
  SetScratchPoisonForTesting(true);
  std::unique_ptr<ThreadPool> pools[] = {
      nullptr, std::make_unique<ThreadPool>(2), std::make_unique<ThreadPool>(3),
      std::make_unique<ThreadPool>(8)};
  for (const Case& cc : cases) {
    const sp::Conv2dShape s = Shape(cc);
    for (bool ints : {false, true}) {
      auto gen = [&](int64_t count) {
        ++seed;
        return ints ? SmallInts(count, seed) : RandomFloats(count, seed);
      };
      const std::vector<float> x = gen(sp::Conv2dInputSize(s));
      const std::vector<float> w = gen(sp::Conv2dWeightSize(s));
      const std::vector<float> dy = gen(sp::Conv2dOutputSize(s));
      std::vector<float> spec[3] = {
          std::vector<float>(sp::Conv2dOutputSize(s)),
          std::vector<float>(sp::Conv2dInputSize(s)),
          std::vector<float>(sp::Conv2dWeightSize(s))};
      sp::Conv2dForward(s, x.data(), w.data(), spec[0].data());
      sp::Conv2dGradInput(s, dy.data(), w.data(), spec[1].data());
      sp::Conv2dGradWeight(s, x.data(), dy.data(), spec[2].data());
      const std::vector<float> chain[3] = {
          ChainForward(s, x.data(), w.data()),
          ChainGradInput(s, dy.data(), w.data()),
          ChainGradWeight(s, x.data(), dy.data())};
      for (CpuIsa isa : SupportedCpuIsas()) {
        for (const auto& pool : pools) {
          const int threads = pool == nullptr ? 1 : pool->num_threads();
          for (int64_t chunk : {canonical::kChunk, kSingleChain}) {
            const std::vector<float>* want =
                chunk == canonical::kChunk ? spec : chain;
            std::vector<float> got[3] = {
                std::vector<float>(spec[0].size(), -1.0f),
                std::vector<float>(spec[1].size(), -1.0f),
                std::vector<float>(spec[2].size(), -1.0f)};
            Conv2dForwardGemm(s, x.data(), w.data(), got[0].data(), chunk, isa,
                              pool.get());
            Conv2dGradInputGemm(s, dy.data(), w.data(), got[1].data(), chunk,
                                isa, pool.get());
            Conv2dGradWeightGemm(s, x.data(), dy.data(), got[2].data(), chunk,
                                 isa, pool.get());
            const char* ops[3] = {"forward", "grad_input", "grad_weight"};
            for (int op = 0; op < 3; ++op) {
              ASSERT_TRUE(BitsEqual(got[op], want[op])) << absl::StrFormat(
                  "%s %s, ints=%d isa=%s threads=%d %s%s", cc.label, ops[op],
                  ints, CpuIsaName(isa), threads,
                  chunk == canonical::kChunk ? "canonical" : "single chain",
                  note);
            }
          }
        }
      }
    }
  }
  SetScratchPoisonForTesting(false);
}

TEST(ConvGemmTest, EqualsSpecAndSingleChainOnEveryIsaAndThreadCount) {
  ExpectSpecAndSingleChain(kCases, 1300, "");
}

// The indirect forward and grad_input (stride 1, and strided by class)
// split large batches into image groups (each its own padded copy and
// products; a strided group writes its classes' planes and merges them, or,
// with one class with terms, writes dx directly unless the planes are a
// multiple of 4 KiB). Forced down to two images per group, the batches of 3
// to 20 images run as several groups, the last one short, and every bit
// stays; again with every output that can be streamed (a strided
// grad_input's merges, the staged write-back of 32 x 32 planes) written by
// non-temporal stores (StreamOutput, lane_kernels.h); and again with each
// group packing the weights itself instead of reading them packed once for
// all groups (SetConvSharedWeightsForTesting).
TEST(ConvGemmTest, ImageGroupsKeepTheBits) {
  const Case cases[] = {
      {"3x3 s1 p1 odd", 3, 5, 7, 9, 13, 3, 1, 1, 1, 1, 1, 1, 1},
      {"3x3 s2 p1", 3, 8, 9, 9, 16, 3, 2, 1, 1, 1, 1, 1, 1},
      {"rows > 256", 4, 3, 9, 9, 4, 3, 1, 1, 1, 1, 1, 1, 1},
      {"image batches", 20, 3, 5, 5, 4, 3, 1, 1, 1, 1, 1, 1, 1},
      {"indirect 1x1 s2", 3, 40, 7, 7, 48, 1, 2, 0, 0, 0, 0, 1, 1},
      {"1x1 s2 32px planes", 3, 4, 32, 32, 5, 1, 2, 0, 0, 0, 0, 1, 1},
      {"indirect many pixels", 5, 32, 16, 16, 33, 1, 1, 1, 1, 1, 1, 1, 1},
      {"indirect groups 2", 3, 64, 5, 5, 66, 3, 1, 1, 1, 1, 1, 1, 2},
      {"indirect 3x3 valid in place", 3, 32, 7, 6, 33, 3, 1, 0, 0, 0, 0, 1, 1},
      // 32 x 32 planes (4 KiB apart), 288 steps: the staged write-back.
      {"32px planes staged", 3, 32, 32, 32, 32, 3, 1, 1, 1, 1, 1, 1, 1}};
  cpu_internal::SetConvImageGroupForTesting(2);
  ExpectSpecAndSingleChain(cases, 5200, " (2 images per group)");
  cpu_internal::SetStreamOutputFloatsForTesting(1);
  ExpectSpecAndSingleChain(cases, 5300,
                           " (2 images per group, outputs streamed)");
  cpu_internal::SetStreamOutputFloatsForTesting(0);
  cpu_internal::SetConvSharedWeightsForTesting(false);
  ExpectSpecAndSingleChain(cases, 5400,
                           " (2 images per group, weights packed by each)");
  cpu_internal::SetConvSharedWeightsForTesting(true);
  cpu_internal::SetConvImageGroupForTesting(0);
}

// On a pool of 2 or 8 threads, a grad_weight whose canonical tree splits
// between images into halves down to one subtree per thread runs as one
// grad_weight per subtree, summed by the tree: the same bits. Cases that
// split on 2 threads (32 and more chunks of 256 terms, halved at an image
// boundary), one that splits on 8 as well (32 images of 32 x 32 outputs:
// 8 parts of 16 chunks), and one that does not split (its tree's first
// split falls inside an image).
TEST(ConvGemmTest, GradWeightTreePartsKeepTheBits) {
  const Case cases[] = {
      {"tree parts indirect", 32, 4, 16, 16, 33, 3, 1, 1, 1, 1, 1, 1, 1},
      {"tree parts few outputs", 32, 3, 16, 16, 4, 3, 1, 1, 1, 1, 1, 1, 1},
      {"tree parts stride 2", 32, 5, 32, 32, 36, 3, 2, 1, 1, 1, 1, 1, 1},
      {"tree parts groups 2", 32, 8, 16, 16, 34, 3, 1, 1, 1, 1, 1, 1, 2},
      {"tree parts 8 threads", 32, 2, 32, 32, 9, 3, 1, 1, 1, 1, 1, 1, 1},
      {"no tree parts 15px", 32, 4, 15, 15, 33, 3, 1, 1, 1, 1, 1, 1, 1}};
  ExpectSpecAndSingleChain(cases, 6100, " (grad_weight by subtrees)");
}

// Strided grad_input, however few its input channels, leaves the stride
// holes out of the reduction (exact for finite weights: a canonical chain
// never holds -0.0f, and fma(0, w, acc) with a finite w leaves any other acc
// unchanged) and keeps them when a weight is infinite or NaN (0 * Inf is
// NaN). Both against the spec, with dy full of zeros of both signs,
// infinities, NaN and subnormals, and weights with -0.0f and subnormals,
// then an infinity and a NaN, then only the last weight infinite.
TEST(ConvGemmTest, StridedGradInputSpecialValues) {
  const Case cases[] = {
      {"3x3 s2", 2, 33, 9, 9, 40, 3, 2, 1, 1, 1, 1, 1, 1},
      {"1x1 s2", 2, 32, 6, 6, 36, 1, 2, 0, 0, 0, 0, 1, 1},
      {"1x1 s2 narrow", 3, 8, 9, 8, 12, 1, 2, 0, 0, 0, 0, 1, 1},
      {"3x3 s2 narrow", 2, 5, 8, 9, 7, 3, 2, 1, 1, 1, 1, 1, 1},
      // Planes narrower than the stride, and a single row.
      {"3x3 s3 2px wide", 2, 5, 7, 2, 6, 3, 3, 1, 1, 1, 1, 1, 1},
      {"1x1 s2 one row", 2, 4, 1, 9, 5, 1, 2, 0, 0, 0, 0, 1, 1},
      // Padded: the odd rows and columns are the class with terms.
      {"1x1 s2 pad 1", 2, 6, 7, 7, 5, 1, 2, 1, 1, 1, 1, 1, 1},
      {"3x3 s3 dilated", 1, 32, 10, 11, 30, 3, 3, 2, 1, 1, 2, 2, 1}};
  const float specials[] = {0.0f, -0.0f,  1.0f,    -2.5f, INFINITY, -INFINITY,
                            NAN,  1e-40f, -1e-41f, 3.0f,  0.0f,     -0.0f};
  uint32_t seed = 4100;
  auto pool = std::make_unique<ThreadPool>(3);
  for (const Case& cc : cases) {
    const sp::Conv2dShape s = Shape(cc);
    std::vector<float> dy = RandomFloats(sp::Conv2dOutputSize(s), ++seed);
    for (size_t i = 0; i < dy.size(); i += 3) {
      dy[i] = specials[(i / 3) % (sizeof(specials) / sizeof(float))];
    }
    std::vector<float> w = RandomFloats(sp::Conv2dWeightSize(s), ++seed);
    for (size_t i = 0; i < w.size(); i += 7) {
      w[i] = (i / 7) % 2 == 0 ? -0.0f : 1e-39f;
    }
    const std::vector<float> finite = w;
    for (int round = 0; round < 3; ++round) {
      if (round == 1) {  // a non-finite weight: the holes count again
        w[w.size() / 2] = INFINITY;
        w[w.size() / 3] = NAN;
      }
      if (round == 2) {  // only the last one (the check's scalar tail)
        w = finite;
        w.back() = -INFINITY;
      }
      std::vector<float> want(sp::Conv2dInputSize(s));
      sp::Conv2dGradInput(s, dy.data(), w.data(), want.data());
      for (CpuIsa isa : SupportedCpuIsas()) {
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), pool.get()}) {
          std::vector<float> got(want.size(), -1.0f);
          Conv2dGradInputGemm(s, dy.data(), w.data(), got.data(),
                              canonical::kChunk, isa, p);
          ASSERT_TRUE(BitsEqual(got, want))
              << cc.label << " round " << round << " isa " << CpuIsaName(isa)
              << (p == nullptr ? " 1 thread" : " 3 threads");
        }
      }
    }
  }
}

}  // namespace
}  // namespace lockstep::kernels
