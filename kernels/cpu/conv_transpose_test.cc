// The transposed convolution (conv_transpose2d.*) through the CPU registry,
// against references written in its own terms rather than through conv2d:
//   - an independent spec oracle (docs/canonical-arithmetic.md 4.12): each
//     output's terms gathered from x / dy / w by the transposed geometry
//     (stride holes, padding and output-padding rows read +0.0f) and
//     reduced with canonical::CanonicalDot for CANONICAL ("canonical" and
//     "scalar"), or as one fma chain from +0.0f for DETERMINISTIC and
//     DEFAULT "default", bit for bit on every ISA with 1, 2, 3 and 8 threads;
//   - a float64 scatter reference (every x element spread over its k x k
//     window of y): exact-integer inputs give its bits rounded to float32,
//     random inputs lie within the reduction bound of the spec;
//   - finite differences of sum(r * forward) in float64 against the float32
//     grad_input and grad_weight;
//   - calls with a bad output shape fail naming the op and the argument.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/canonical/reduce.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"
#include "kernels/testing/float_test_util.h"

namespace lockstep::kernels {
namespace {

using ::lockstep::testing::BitsEqual;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::RandomFloats;
using ::lockstep::testing::SmallInts;
using ::lockstep::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A transposed convolution x [n, c_in, h, w] -> y [n, c_out, oh, ow] with
// weight [c_in, c_out / groups, kh, kw], in PyTorch's terms.
struct Case {
  const char* label;
  int64_t n, c_in, h, w, c_out, kh, kw;
  int64_t sh, sw, ph, pw, dh, dw, oph, opw, groups;

  int64_t oh() const { return (h - 1) * sh - 2 * ph + dh * (kh - 1) + 1 + oph; }
  int64_t ow() const { return (w - 1) * sw - 2 * pw + dw * (kw - 1) + 1 + opw; }
  int64_t cg() const { return c_in / groups; }   // input channels per group
  int64_t fg() const { return c_out / groups; }  // output channels per group
  std::vector<int64_t> x_shape() const { return {n, c_in, h, w}; }
  std::vector<int64_t> y_shape() const { return {n, c_out, oh(), ow()}; }
  std::vector<int64_t> w_shape() const { return {c_in, fg(), kh, kw}; }
  // The attrs of the conv2d whose input gradient this is.
  OpAttrs attrs() const {
    OpAttrs a;
    a.kernel_h = kh;
    a.kernel_w = kw;
    a.stride_h = sh;
    a.stride_w = sw;
    a.pad_top = a.pad_bottom = ph;
    a.pad_left = a.pad_right = pw;
    a.dilation_h = dh;
    a.dilation_w = dw;
    a.groups = groups;
    return a;
  }
};

const Case kCases[] = {
    // label, n, c_in, h, w, c_out, kh, kw, sh, sw, ph, pw, dh, dw, oph, opw, g
    {"k3 s2 p1 op1", 2, 4, 5, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},
    {"k4 s2 p1 (DCGAN)", 2, 8, 4, 4, 3, 4, 4, 2, 2, 1, 1, 1, 1, 0, 0, 1},
    {"k2 s2 (U-Net up)", 3, 6, 3, 5, 4, 2, 2, 2, 2, 0, 0, 1, 1, 0, 0, 1},
    {"groups dilation asym", 1, 4, 5, 4, 6, 3, 2, 2, 3, 1, 0, 1, 2, 1, 2, 2},
    {"depthwise s2", 2, 5, 6, 6, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 5},
    {"270 terms", 1, 30, 4, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 1},
    {"300-term dw", 3, 2, 10, 10, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},
    {"pad beyond kernel", 1, 3, 4, 4, 2, 2, 2, 3, 3, 2, 2, 1, 1, 2, 0, 1},
    {"1x1", 2, 9, 3, 7, 17, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 1},
};

int64_t Xi(const Case& c, int64_t n, int64_t ci, int64_t i, int64_t j) {
  return ((n * c.c_in + ci) * c.h + i) * c.w + j;
}
int64_t Yi(const Case& c, int64_t n, int64_t o, int64_t i, int64_t j) {
  return ((n * c.c_out + o) * c.oh() + i) * c.ow() + j;
}
int64_t Wi(const Case& c, int64_t ci, int64_t f, int64_t i, int64_t j) {
  return ((ci * c.fg() + f) * c.kh + i) * c.kw + j;
}

// The x element that tap (kh, kw) of output row oy / column ox reads, or -1
// (padding, a stride hole or an output-padding row).
int64_t XTap(const Case& c, int64_t oy, int64_t ox, int64_t i, int64_t j,
             int64_t* iy, int64_t* ix) {
  const int64_t ty = oy + c.ph - i * c.dh, tx = ox + c.pw - j * c.dw;
  if (ty < 0 || ty % c.sh != 0 || ty / c.sh >= c.h) return -1;
  if (tx < 0 || tx % c.sw != 0 || tx / c.sw >= c.w) return -1;
  *iy = ty / c.sh;
  *ix = tx / c.sw;
  return 0;
}

// The y element that tap (kh, kw) of x position (iy, ix) writes, or -1.
int64_t YTap(const Case& c, int64_t iy, int64_t ix, int64_t i, int64_t j,
             int64_t* oy, int64_t* ox) {
  *oy = iy * c.sh - c.ph + i * c.dh;
  *ox = ix * c.sw - c.pw + j * c.dw;
  if (*oy < 0 || *oy >= c.oh() || *ox < 0 || *ox >= c.ow()) return -1;
  return 0;
}

// One output: CanonicalDot (canonical) or one fma chain (single chain) of
// the gathered operand pairs.
float Reduce(const std::vector<float>& a, const std::vector<float>& b,
             bool chain) {
  if (!chain) {
    return canonical::CanonicalDot(a.data(), 1, b.data(), 1,
                                   static_cast<int64_t>(a.size()));
  }
  float acc = 0.0f;
  for (size_t t = 0; t < a.size(); ++t) acc = std::fma(a[t], b[t], acc);
  return acc;
}

// Forward: y[n, o, oy, ox], terms (j, kh, kw) over the group's inputs.
std::vector<float> OracleForward(const Case& c, const std::vector<float>& x,
                                 const std::vector<float>& w, bool chain) {
  std::vector<float> y(c.n * c.c_out * c.oh() * c.ow());
  for (int64_t n = 0; n < c.n; ++n) {
    for (int64_t o = 0; o < c.c_out; ++o) {
      const int64_t g = o / c.fg(), f = o % c.fg();
      for (int64_t oy = 0; oy < c.oh(); ++oy) {
        for (int64_t ox = 0; ox < c.ow(); ++ox) {
          std::vector<float> a, b;
          for (int64_t j = 0; j < c.cg(); ++j) {
            const int64_t ci = g * c.cg() + j;
            for (int64_t i = 0; i < c.kh; ++i) {
              for (int64_t k = 0; k < c.kw; ++k) {
                int64_t iy, ix;
                a.push_back(XTap(c, oy, ox, i, k, &iy, &ix) < 0
                                ? 0.0f
                                : x[Xi(c, n, ci, iy, ix)]);
                b.push_back(w[Wi(c, ci, f, i, k)]);
              }
            }
          }
          y[Yi(c, n, o, oy, ox)] = Reduce(a, b, chain);
        }
      }
    }
  }
  return y;
}

// grad_input: dx[n, ci, iy, ix], terms (f, kh, kw) over the group's outputs.
std::vector<float> OracleGradInput(const Case& c, const std::vector<float>& dy,
                                   const std::vector<float>& w, bool chain) {
  std::vector<float> dx(c.n * c.c_in * c.h * c.w);
  for (int64_t n = 0; n < c.n; ++n) {
    for (int64_t ci = 0; ci < c.c_in; ++ci) {
      const int64_t g = ci / c.cg();
      for (int64_t iy = 0; iy < c.h; ++iy) {
        for (int64_t ix = 0; ix < c.w; ++ix) {
          std::vector<float> a, b;
          for (int64_t f = 0; f < c.fg(); ++f) {
            for (int64_t i = 0; i < c.kh; ++i) {
              for (int64_t k = 0; k < c.kw; ++k) {
                int64_t oy, ox;
                a.push_back(YTap(c, iy, ix, i, k, &oy, &ox) < 0
                                ? 0.0f
                                : dy[Yi(c, n, g * c.fg() + f, oy, ox)]);
                b.push_back(w[Wi(c, ci, f, i, k)]);
              }
            }
          }
          dx[Xi(c, n, ci, iy, ix)] = Reduce(a, b, chain);
        }
      }
    }
  }
  return dx;
}

// grad_weight: dw[ci, f, kh, kw], terms (n, iy, ix) over x's positions.
std::vector<float> OracleGradWeight(const Case& c, const std::vector<float>& x,
                                    const std::vector<float>& dy, bool chain) {
  std::vector<float> dw(c.c_in * c.fg() * c.kh * c.kw);
  for (int64_t ci = 0; ci < c.c_in; ++ci) {
    const int64_t g = ci / c.cg();
    for (int64_t f = 0; f < c.fg(); ++f) {
      for (int64_t i = 0; i < c.kh; ++i) {
        for (int64_t k = 0; k < c.kw; ++k) {
          std::vector<float> a, b;
          for (int64_t n = 0; n < c.n; ++n) {
            for (int64_t iy = 0; iy < c.h; ++iy) {
              for (int64_t ix = 0; ix < c.w; ++ix) {
                int64_t oy, ox;
                a.push_back(YTap(c, iy, ix, i, k, &oy, &ox) < 0
                                ? 0.0f
                                : dy[Yi(c, n, g * c.fg() + f, oy, ox)]);
                b.push_back(x[Xi(c, n, ci, iy, ix)]);
              }
            }
          }
          dw[Wi(c, ci, f, i, k)] = Reduce(a, b, chain);
        }
      }
    }
  }
  return dw;
}

// The float64 scatter reference of the forward, and sum |term| per output.
void Reference64(const Case& c, const std::vector<double>& x,
                 const std::vector<double>& w, std::vector<double>* y,
                 std::vector<double>* abs_sum) {
  y->assign(c.n * c.c_out * c.oh() * c.ow(), 0.0);
  abs_sum->assign(y->size(), 0.0);
  for (int64_t n = 0; n < c.n; ++n) {
    for (int64_t ci = 0; ci < c.c_in; ++ci) {
      const int64_t g = ci / c.cg();
      for (int64_t iy = 0; iy < c.h; ++iy) {
        for (int64_t ix = 0; ix < c.w; ++ix) {
          for (int64_t f = 0; f < c.fg(); ++f) {
            for (int64_t i = 0; i < c.kh; ++i) {
              for (int64_t k = 0; k < c.kw; ++k) {
                int64_t oy, ox;
                if (YTap(c, iy, ix, i, k, &oy, &ox) < 0) continue;
                const double t =
                    x[Xi(c, n, ci, iy, ix)] * w[Wi(c, ci, f, i, k)];
                const int64_t yi = Yi(c, n, g * c.fg() + f, oy, ox);
                (*y)[yi] += t;
                (*abs_sum)[yi] += std::fabs(t);
              }
            }
          }
        }
      }
    }
  }
}

std::vector<double> ToDouble(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

Tensor T(const std::vector<int64_t>& shape, const std::vector<float>& v) {
  return *Tensor::FromValues<float>(shape, v);
}
std::vector<float> V(const Tensor& t) {
  absl::Span<const float> s = t.span<float>();
  return std::vector<float>(s.begin(), s.end());
}

class ConvTransposeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_THAT(RegisterCpuCanonicalKernels(&registry_), IsOk());
    ASSERT_THAT(RegisterCpuDeterministicAndDefaultKernels(&registry_), IsOk());
    SetScratchPoisonForTesting(true);
  }
  void TearDown() override {
    SetScratchPoisonForTesting(false);
    SetCpuIsaForTesting(std::nullopt);
    SetCpuThreadsForTesting(0);
  }
  absl::Status Call(const char* op, Mode mode, const char* algorithm,
                    const std::vector<Tensor>& in, std::vector<Tensor>& out,
                    const OpAttrs& a) {
    absl::StatusOr<KernelFn> fn =
        registry_.Lookup(KernelKey{op, mode, algorithm, kCpuBackendName});
    if (!fn.ok()) return fn.status();
    return (*fn)(in, absl::MakeSpan(out), a);
  }
  // Output 0 of `op`, preset to -1 so that an unwritten element shows.
  std::vector<float> Run(const char* op, Mode mode, const char* algorithm,
                         const std::vector<Tensor>& in,
                         const std::vector<int64_t>& out_shape,
                         const OpAttrs& a) {
    int64_t size = 1;
    for (int64_t d : out_shape) size *= d;
    std::vector<Tensor> out = {T(out_shape, std::vector<float>(size, -1.0f))};
    EXPECT_THAT(Call(op, mode, algorithm, in, out, a), IsOk()) << op;
    return V(out[0]);
  }
  Registry registry_;
};

TEST_F(ConvTransposeTest, EqualsTheSpecOnEveryIsaAndThreadCount) {
  uint32_t seed = 4100;
  for (const Case& c : kCases) {
    for (const bool ints : {false, true}) {
      auto gen = [&](const std::vector<int64_t>& shape) {
        int64_t size = 1;
        for (int64_t d : shape) size *= d;
        ++seed;
        return ints ? SmallInts(size, seed) : RandomFloats(size, seed);
      };
      const std::vector<float> x = gen(c.x_shape()), w = gen(c.w_shape()),
                               dy = gen(c.y_shape());
      struct Op {
        const char* name;
        std::vector<Tensor> in;
        std::vector<int64_t> out;
        std::vector<float> want[2];  // canonical, single chain
      } ops[] = {
          {op::kConvTranspose2dForward,
           {T(c.x_shape(), x), T(c.w_shape(), w)},
           c.y_shape(),
           {OracleForward(c, x, w, false), OracleForward(c, x, w, true)}},
          {op::kConvTranspose2dGradInput,
           {T(c.y_shape(), dy), T(c.w_shape(), w)},
           c.x_shape(),
           {OracleGradInput(c, dy, w, false), OracleGradInput(c, dy, w, true)}},
          {op::kConvTranspose2dGradWeight,
           {T(c.x_shape(), x), T(c.y_shape(), dy)},
           c.w_shape(),
           {OracleGradWeight(c, x, dy, false),
            OracleGradWeight(c, x, dy, true)}},
      };
      for (Op& o : ops) {
        ASSERT_TRUE(BitsEqual(Run(o.name, Mode::kCanonical, kScalarAlgorithm,
                                  o.in, o.out, c.attrs()),
                              o.want[0]))
            << c.label << " " << o.name << " scalar ints=" << ints;
      }
      for (CpuIsa isa : SupportedCpuIsas()) {
        SetCpuIsaForTesting(isa);
        for (int threads : {1, 2, 3, 8}) {
          SetCpuThreadsForTesting(threads);
          const std::string where =
              absl::StrFormat("%s ints=%d isa=%s threads=%d", c.label, ints,
                              CpuIsaName(isa), threads);
          for (Op& o : ops) {
            ASSERT_TRUE(
                BitsEqual(Run(o.name, Mode::kCanonical, kCanonicalAlgorithm,
                              o.in, o.out, c.attrs()),
                          o.want[0]))
                << where << " " << o.name << " CANONICAL";
            ASSERT_TRUE(
                BitsEqual(Run(o.name, Mode::kDeterministic,
                              kDeterministicAlgorithm, o.in, o.out, c.attrs()),
                          o.want[1]))
                << where << " " << o.name << " DETERMINISTIC";
            if (absl::string_view(o.name) != op::kConvTranspose2dGradWeight) {
              ASSERT_TRUE(
                  BitsEqual(Run(o.name, Mode::kDefault, kDefaultAlgorithm, o.in,
                                o.out, c.attrs()),
                            o.want[1]))
                  << where << " " << o.name << " DEFAULT";
            }
          }
        }
      }
      SetCpuIsaForTesting(std::nullopt);
      SetCpuThreadsForTesting(0);
    }
  }
}

TEST_F(ConvTransposeTest, ForwardMatchesTheFloat64ScatterReference) {
  uint32_t seed = 5200;
  for (const Case& c : kCases) {
    for (const bool ints : {true, false}) {
      int64_t xs = c.n * c.c_in * c.h * c.w;
      int64_t ws = c.c_in * c.fg() * c.kh * c.kw;
      const std::vector<float> x =
          ints ? SmallInts(xs, ++seed) : RandomFloats(xs, ++seed);
      const std::vector<float> w =
          ints ? SmallInts(ws, ++seed) : RandomFloats(ws, ++seed);
      std::vector<double> ref, abs_sum;
      Reference64(c, ToDouble(x), ToDouble(w), &ref, &abs_sum);
      const std::vector<float> got = Run(
          op::kConvTranspose2dForward, Mode::kCanonical, kCanonicalAlgorithm,
          {T(c.x_shape(), x), T(c.w_shape(), w)}, c.y_shape(), c.attrs());
      ASSERT_EQ(got.size(), ref.size());
      if (ints) {
        std::vector<float> rounded(ref.begin(), ref.end());
        ASSERT_TRUE(BitsEqual(got, rounded)) << c.label << " exact integers";
        continue;
      }
      // min(n, 256) roundings in a chain, the tree depth and one more.
      const int64_t terms = c.cg() * c.kh * c.kw;
      const int64_t chunks =
          (terms + canonical::kChunk - 1) / canonical::kChunk;
      const double bound =
          (std::min<int64_t>(terms, canonical::kChunk) +
           std::ceil(std::log2(static_cast<double>(chunks))) + 1) *
          std::ldexp(1.0, -24);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_LE(std::fabs(got[i] - ref[i]), bound * abs_sum[i])
            << c.label << " index " << i;
      }
    }
  }
}

// L(x, w) = sum(r * forward(x, w)) in float64; its central differences
// against grad_input(dy = r) and grad_weight(x, dy = r).
TEST_F(ConvTransposeTest, GradientsMatchFiniteDifferencesOfTheForward) {
  uint32_t seed = 6300;
  for (const Case& c : kCases) {
    const std::vector<float> x = RandomFloats(c.n * c.c_in * c.h * c.w, ++seed);
    const std::vector<float> w =
        RandomFloats(c.c_in * c.fg() * c.kh * c.kw, ++seed);
    const std::vector<float> r =
        RandomFloats(c.n * c.c_out * c.oh() * c.ow(), ++seed);
    auto loss = [&](const std::vector<double>& xd,
                    const std::vector<double>& wd) {
      std::vector<double> y, unused;
      Reference64(c, xd, wd, &y, &unused);
      double l = 0.0;
      for (size_t i = 0; i < y.size(); ++i) l += r[i] * y[i];
      return l;
    };
    const std::vector<float> dx = Run(
        op::kConvTranspose2dGradInput, Mode::kCanonical, kCanonicalAlgorithm,
        {T(c.y_shape(), r), T(c.w_shape(), w)}, c.x_shape(), c.attrs());
    const std::vector<float> dw = Run(
        op::kConvTranspose2dGradWeight, Mode::kCanonical, kCanonicalAlgorithm,
        {T(c.x_shape(), x), T(c.y_shape(), r)}, c.w_shape(), c.attrs());
    constexpr double kEps = 1e-3;
    for (const bool wrt_w : {false, true}) {
      const std::vector<float>& grad = wrt_w ? dw : dx;
      // At most 40 probes per tensor, spread over it.
      const size_t step = std::max<size_t>(1, grad.size() / 40);
      for (size_t i = 0; i < grad.size(); i += step) {
        std::vector<double> xp = ToDouble(x), wp = ToDouble(w);
        std::vector<double> xm = xp, wm = wp;
        (wrt_w ? wp : xp)[i] += kEps;
        (wrt_w ? wm : xm)[i] -= kEps;
        const double fd = (loss(xp, wp) - loss(xm, wm)) / (2 * kEps);
        EXPECT_NEAR(grad[i], fd, 1e-4 * std::max(1.0, std::fabs(fd)))
            << c.label << (wrt_w ? " dw[" : " dx[") << i << "]";
      }
    }
  }
}

TEST_F(ConvTransposeTest, BadShapesFailNamingTheOpAndArgument) {
  const Case& c = kCases[0];  // x [2, 4, 5, 6] -> y [2, 6, 10, 12]
  const Tensor x = *Tensor::Zeros(DType::kFloat32, c.x_shape());
  const Tensor w = *Tensor::Zeros(DType::kFloat32, c.w_shape());
  // An output two rows taller: an output padding of 3 >= the stride 2.
  std::vector<Tensor> tall = {*Tensor::Zeros(DType::kFloat32, {2, 6, 12, 12})};
  EXPECT_THAT(
      Call(op::kConvTranspose2dForward, Mode::kCanonical, kCanonicalAlgorithm,
           {x, w}, tall, c.attrs()),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("conv_transpose2d.forward"), HasSubstr("x"))));
  // dx must be x's shape.
  std::vector<Tensor> dx = {*Tensor::Zeros(DType::kFloat32, {2, 4, 5, 5})};
  const Tensor dy = *Tensor::Zeros(DType::kFloat32, c.y_shape());
  EXPECT_THAT(Call(op::kConvTranspose2dGradInput, Mode::kDeterministic,
                   kDeterministicAlgorithm, {dy, w}, dx, c.attrs()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("conv_transpose2d.grad_input"),
                             HasSubstr("dx"))));
  // The weight's leading dimension is x's channel count.
  std::vector<Tensor> dw = {*Tensor::Zeros(DType::kFloat32, {5, 6, 3, 3})};
  EXPECT_THAT(Call(op::kConvTranspose2dGradWeight, Mode::kDefault,
                   kAtomicAlgorithm, {x, dy}, dw, c.attrs()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("conv_transpose2d.grad_weight")));
}

}  // namespace
}  // namespace lockstep::kernels
