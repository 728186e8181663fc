// The CPU CANONICAL backend: registration, the Tensor-level calling
// convention (each kernel through the registry gives the canonical body's
// bits), validation before compute (outputs untouched on error).
#include "kernels/cpu/cpu_backend.h"

#include <cstdint>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/graph_ops.h"
#include "kernels/ops/dense.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/movement.h"
#include "kernels/ops/optimizers.h"
#include "kernels/ops/reference.h"
#include "kernels/ops/softmax_xent.h"
#include "kernels/registry.h"
#include "kernels/spatial/conv2d.h"
#include "kernels/spatial/pool2d.h"
#include "kernels/spatial/resize_bilinear.h"
#include "kernels/tensor.h"
#include "kernels/testing/float_test_util.h"

namespace lockstep::kernels {
namespace {

using ::lockstep::testing::BitsEqual;
using ::lockstep::testing::BitsEqualRounded;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::RandomFloats;
using ::lockstep::testing::SmallInts;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

namespace c = ::lockstep::canonical;
namespace sp = ::lockstep::spatial;

Tensor T(std::vector<int64_t> shape, const std::vector<float>& v) {
  return *Tensor::FromValues<float>(std::move(shape), v);
}
Tensor Z(std::vector<int64_t> shape) {
  return *Tensor::Zeros(DType::kFloat32, std::move(shape));
}
std::vector<float> V(const Tensor& t) {
  absl::Span<const float> s = t.span<float>();
  return std::vector<float>(s.begin(), s.end());
}

class CpuBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_THAT(CpuBackend().RegisterKernels(&registry_), IsOk());
  }
  absl::Status Run(const std::string& op, std::vector<Tensor> in,
                   std::vector<Tensor> out, const OpAttrs& attrs = {}) {
    absl::StatusOr<KernelFn> fn = registry_.Lookup(
        KernelKey{op, Mode::kCanonical, kCanonicalAlgorithm, "cpu"});
    if (!fn.ok()) return fn.status();
    return (*fn)(in, absl::MakeSpan(out), attrs);
  }
  Registry registry_;
};

TEST_F(CpuBackendTest, RegistersEveryOp) {
  std::vector<std::string> all = AllOpNames();
  for (const std::string& op : all) {
    EXPECT_TRUE(registry_.Contains(
        KernelKey{op, Mode::kCanonical, kCanonicalAlgorithm, "cpu"}))
        << op;
  }
  // Plus the scalar spec-code kernels of the ops with fast ones.
  const char* const scalar[] = {op::kDenseForward,
                                op::kDenseGradInput,
                                op::kDenseGradWeight,
                                op::kConv2dForward,
                                op::kConv2dGradInput,
                                op::kConv2dGradWeight,
                                op::kBiasAddGrad,
                                op::kMaxPool2dForward,
                                op::kMaxPool2dGrad,
                                op::kAvgPool2dForward,
                                op::kAvgPool2dGrad,
                                op::kGlobalAvgPoolForward,
                                op::kGlobalAvgPoolGrad,
                                op::kConvTranspose2dForward,
                                op::kConvTranspose2dGradInput,
                                op::kConvTranspose2dGradWeight};
  for (const char* op : scalar) {
    EXPECT_TRUE(registry_.Contains(
        KernelKey{op, Mode::kCanonical, kScalarAlgorithm, "cpu"}))
        << op;
  }
  for (const std::string& op : GraphDataOpNames()) {
    EXPECT_TRUE(registry_.Contains(
        KernelKey{op, Mode::kCanonical, kCanonicalAlgorithm, "cpu"}))
        << op;
  }
  EXPECT_EQ(registry_.size(),
            all.size() + GraphDataOpNames().size() + std::size(scalar));
  EXPECT_EQ(CpuBackend().name(), "cpu");
  // Registering twice is refused.
  EXPECT_THAT(RegisterCpuCanonicalKernels(&registry_),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("cpu")));
  // Other modes are not registered by this backend.
  EXPECT_THAT(registry_.Lookup(KernelKey{"dense.forward", Mode::kDefault,
                                         "canonical", "cpu"}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("mode DEFAULT")));
}

TEST_F(CpuBackendTest, DenseMatchesBodiesAndExactReference) {
  for (bool tx : {false, true}) {
    for (bool tw : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "tx=" << tx << " tw=" << tw);
      const int64_t m = 3, k = 300, n = 4;
      const std::vector<float> x = SmallInts(m * k, 1), w = SmallInts(k * n, 2),
                               dy = SmallInts(m * n, 3);
      OpAttrs a;
      a.transpose_x = tx;
      a.transpose_w = tw;
      const std::vector<int64_t> xs =
          tx ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k};
      const std::vector<int64_t> ws =
          tw ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
      Tensor y = Z({m, n}), dx = Z(xs), dw = Z(ws);
      ASSERT_THAT(Run("dense.forward", {T(xs, x), T(ws, w)}, {y}, a), IsOk());
      ASSERT_THAT(Run("dense.grad_input", {T({m, n}, dy), T(ws, w)}, {dx}, a),
                  IsOk());
      ASSERT_THAT(Run("dense.grad_weight", {T(xs, x), T({m, n}, dy)}, {dw}, a),
                  IsOk());
      EXPECT_TRUE(
          BitsEqualRounded(V(y), reference::Dense(x, w, m, k, n, tx, tw)));
      EXPECT_TRUE(BitsEqualRounded(
          V(dx), reference::DenseGradInput(dy, w, m, k, n, tx, tw)));
      EXPECT_TRUE(BitsEqualRounded(
          V(dw), reference::DenseGradWeight(x, dy, m, k, n, tx, tw)));

      // Random floats: the kernel is the canonical body, bit for bit.
      const std::vector<float> rx = RandomFloats(m * k, 4),
                               rw = RandomFloats(k * n, 5);
      ASSERT_THAT(Run("dense.forward", {T(xs, rx), T(ws, rw)}, {y}, a), IsOk());
      std::vector<float> want(m * n);
      c::DenseForward(c::DenseShape{m, k, n, tx, tw}, rx.data(), rw.data(),
                      want.data());
      EXPECT_TRUE(BitsEqual(V(y), want));
    }
  }
}

TEST_F(CpuBackendTest, DenseEmptyReductionGivesZeros) {
  Tensor y = T({2, 2}, {5, 5, 5, 5});
  ASSERT_THAT(Run("dense.forward", {Z({2, 0}), Z({0, 2})}, {y}), IsOk());
  EXPECT_TRUE(BitsEqual(V(y), {0, 0, 0, 0}));
}

TEST_F(CpuBackendTest, ElementwiseOpsThroughRegistry) {
  const std::vector<float> x = RandomFloats(2 * 3 * 4 * 5, 6);
  const std::vector<float> b = RandomFloats(3, 7);
  Tensor y = Z({2, 3, 4, 5});
  ASSERT_THAT(Run("bias_add.forward", {T({2, 3, 4, 5}, x), T({3}, b)}, {y}),
              IsOk());
  std::vector<float> want(x.size());
  c::BiasAddForward(c::BiasShape{2, 3, 20}, x.data(), b.data(), want.data());
  EXPECT_TRUE(BitsEqual(V(y), want));

  Tensor db = Z({3});
  ASSERT_THAT(Run("bias_add.grad", {T({2, 3, 4, 5}, x)}, {db}), IsOk());
  std::vector<float> want_db(3);
  c::BiasAddGrad(c::BiasShape{2, 3, 20}, x.data(), want_db.data());
  EXPECT_TRUE(BitsEqual(V(db), want_db));

  Tensor r = Z({2, 3, 4, 5}), dr = Z({2, 3, 4, 5});
  ASSERT_THAT(Run("relu.forward", {T({2, 3, 4, 5}, x)}, {r}), IsOk());
  EXPECT_TRUE(BitsEqualRounded(V(r), reference::Relu(x)));
  ASSERT_THAT(Run("relu.grad", {T({2, 3, 4, 5}, x), T({2, 3, 4, 5}, x)}, {dr}),
              IsOk());
  EXPECT_TRUE(BitsEqualRounded(V(dr), reference::ReluGrad(x, x)));

  // The vectorised relu loops on every ISA path, on the special values at
  // every offset of a vector and in the tail: the spec's bits (NaN payloads
  // and signs kept, -0 to +0, subnormals kept).
  for (CpuIsa isa : SupportedCpuIsas()) {
    SCOPED_TRACE(CpuIsaName(isa));
    SetCpuIsaForTesting(isa);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> xs = {-0.0f, 0.0f,      nan,        -nan, inf,
                             -inf,  0x1p-149f, -0x1p-149f, 2.5f, -2.5f};
    std::vector<float> sx;
    for (int rep = 0; rep < 4; ++rep) sx.insert(sx.end(), xs.begin(), xs.end());
    sx.push_back(nan);  // 41 elements: a tail on every vector width
    const std::vector<float> sdy = SmallInts(sx.size(), 3);
    const int64_t n = static_cast<int64_t>(sx.size());
    std::vector<float> want_y(n), want_dx(n);
    c::ReluForward(sx.data(), want_y.data(), n);
    c::ReluGrad(sx.data(), sdy.data(), want_dx.data(), n);
    Tensor sy = Z({n}), sdx = Z({n});
    ASSERT_THAT(Run("relu.forward", {T({n}, sx)}, {sy}), IsOk());
    EXPECT_TRUE(BitsEqual(V(sy), want_y));
    ASSERT_THAT(Run("relu.grad", {T({n}, sx), T({n}, sdy)}, {sdx}), IsOk());
    EXPECT_TRUE(BitsEqual(V(sdx), want_dx));
  }
  SetCpuIsaForTesting(std::nullopt);

  Tensor flat = Z({2, 60});
  ASSERT_THAT(Run("flatten", {T({2, 3, 4, 5}, x)}, {flat}), IsOk());
  EXPECT_TRUE(BitsEqual(V(flat), x));
  Tensor back = Z({2, 3, 4, 5});
  ASSERT_THAT(Run("flatten", {flat}, {back}), IsOk());
  EXPECT_TRUE(BitsEqual(V(back), x));

  const std::vector<float> x2 = SmallInts(x.size(), 8);
  Tensor sum = Z({2, 60}), da = Z({2, 60}), dbb = Z({2, 60});
  const std::vector<float> xi = SmallInts(x.size(), 9);
  ASSERT_THAT(Run("add.forward", {T({2, 60}, xi), T({2, 60}, x2)}, {sum}),
              IsOk());
  EXPECT_TRUE(BitsEqualRounded(V(sum), reference::Add(xi, x2)));
  ASSERT_THAT(Run("add.grad", {T({2, 60}, x)}, {da, dbb}), IsOk());
  EXPECT_TRUE(BitsEqual(V(da), x));
  EXPECT_TRUE(BitsEqual(V(dbb), x));
}

TEST_F(CpuBackendTest, SoftmaxXentAndBadLabels) {
  const int64_t n = 4, cl = 10;
  const std::vector<float> x = RandomFloats(n * cl, 10, -4, 4);
  const std::vector<int32_t> labels = {3, 0, 9, 3};
  Tensor lab = *Tensor::FromValues<int32_t>({n}, labels);
  Tensor loss = Z({}), g = Z({n, cl});
  ASSERT_THAT(Run("softmax_xent.forward", {T({n, cl}, x), lab}, {loss}),
              IsOk());
  ASSERT_THAT(Run("softmax_xent.grad", {T({n, cl}, x), lab}, {g}), IsOk());
  std::vector<float> scratch(n), want_g(n * cl);
  const c::SoftmaxShape s{n, cl};
  const float want =
      c::SoftmaxXentForward(s, x.data(), labels.data(), scratch.data());
  c::SoftmaxXentGrad(s, x.data(), labels.data(), want_g.data());
  EXPECT_TRUE(BitsEqual(V(loss), {want}));
  EXPECT_TRUE(BitsEqual(V(g), want_g));

  // A label out of range fails before anything is written.
  Tensor bad =
      *Tensor::FromValues<int32_t>({n}, std::vector<int32_t>{3, 10, 0, 0});
  Tensor loss2 = T({1}, {-7.0f});
  EXPECT_THAT(Run("softmax_xent.forward", {T({n, cl}, x), bad}, {loss2}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("labels[1] = 10 is outside [0, 10)")));
  EXPECT_EQ(V(loss2)[0], -7.0f);
  Tensor g2 = T({n, cl}, std::vector<float>(n * cl, -7.0f));
  EXPECT_THAT(Run("softmax_xent.grad", {T({n, cl}, x), bad}, {g2}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  for (float v : V(g2)) EXPECT_EQ(v, -7.0f);
  // Float labels are refused.
  EXPECT_THAT(Run("softmax_xent.forward", {T({n, cl}, x), Z({n})}, {loss}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("labels must be int32")));
}

TEST_F(CpuBackendTest, OptimizersUpdateInPlace) {
  const std::vector<float> w0 = RandomFloats(50, 11), g0 = RandomFloats(50, 12);
  OpAttrs a;
  a.learning_rate = 0.01f;
  a.momentum = 0.9f;
  a.step = 3;

  Tensor w = T({5, 10}, w0);
  ASSERT_THAT(Run("sgd.update", {T({5, 10}, g0)}, {w}, a), IsOk());
  std::vector<float> want = w0;
  c::SgdUpdate(want.data(), g0.data(), 50, a.learning_rate);
  EXPECT_TRUE(BitsEqual(V(w), want));

  w = T({5, 10}, w0);
  Tensor v = T({5, 10}, g0);
  ASSERT_THAT(Run("momentum.update", {T({5, 10}, g0)}, {w, v}, a), IsOk());
  std::vector<float> ww = w0, wv = g0;
  c::MomentumUpdate(ww.data(), wv.data(), g0.data(), 50, a.learning_rate,
                    a.momentum);
  EXPECT_TRUE(BitsEqual(V(w), ww));
  EXPECT_TRUE(BitsEqual(V(v), wv));

  w = T({5, 10}, w0);
  Tensor m = Z({5, 10}), vv = Z({5, 10});
  ASSERT_THAT(Run("adam.update", {T({5, 10}, g0)}, {w, m, vv}, a), IsOk());
  std::vector<float> aw = w0, am(50, 0.0f), av(50, 0.0f);
  c::AdamUpdate(
      c::AdamScalarsOf(a.learning_rate, a.beta1, a.beta2, a.epsilon, a.step),
      aw.data(), am.data(), av.data(), g0.data(), 50);
  EXPECT_TRUE(BitsEqual(V(w), aw));
  EXPECT_TRUE(BitsEqual(V(m), am));
  EXPECT_TRUE(BitsEqual(V(vv), av));

  // Bad hyper-parameters: refused, state untouched.
  a.epsilon = 0.0f;
  Tensor w2 = T({5, 10}, w0);
  EXPECT_THAT(
      Run("adam.update", {T({5, 10}, g0)}, {w2, Z({5, 10}), Z({5, 10})}, a),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("adam.update: epsilon is 0")));
  EXPECT_TRUE(BitsEqual(V(w2), w0));
}

TEST_F(CpuBackendTest, BadCallsAreRefused) {
  EXPECT_THAT(Run("relu.forward", {Z({2})}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("relu.forward: expected 1 inputs and 1 "
                                 "outputs")));
  Tensor i32 = *Tensor::Zeros(DType::kInt32, {2});
  EXPECT_THAT(Run("relu.forward", {i32}, {Z({2})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("x must be float32")));
  EXPECT_THAT(Run("add.forward", {Z({2}), Z({3})}, {Z({2})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("b has shape [3], expected [2]")));
  Tensor x = Z({2, 2});
  EXPECT_THAT(Run("dense.forward", {x, Z({2, 2})}, {x}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shares storage")));
  EXPECT_THAT(Run("flatten", {Z({2, 3, 4})}, {Z({3, 8})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("leading dimension")));
}

TEST_F(CpuBackendTest, SpatialOpsMatchTheirBodies) {
  // conv2d with stride 2, asymmetric padding, dilation, 2 groups.
  OpAttrs a;
  a.stride_h = 2;
  a.stride_w = 1;
  a.pad_top = 1;
  a.pad_bottom = 0;
  a.pad_left = 2;
  a.pad_right = 1;
  a.dilation_h = 1;
  a.dilation_w = 2;
  a.groups = 2;
  sp::Conv2dShape s;
  s.n = 2, s.c_in = 4, s.h = 7, s.w = 6, s.c_out = 6, s.k_h = 3, s.k_w = 2;
  s.stride_h = 2, s.stride_w = 1, s.pad_top = 1, s.pad_bottom = 0;
  s.pad_left = 2, s.pad_right = 1, s.dilation_h = 1, s.dilation_w = 2;
  s.groups = 2;
  const int64_t oh = sp::Conv2dOutH(s), ow = sp::Conv2dOutW(s);
  const std::vector<float> x = RandomFloats(2 * 4 * 7 * 6, 20);
  const std::vector<float> w = RandomFloats(6 * 2 * 3 * 2, 21);
  const std::vector<float> dy = RandomFloats(2 * 6 * oh * ow, 22);
  Tensor tx = T({2, 4, 7, 6}, x), tw = T({6, 2, 3, 2}, w),
         tdy = T({2, 6, oh, ow}, dy);
  Tensor y = Z({2, 6, oh, ow}), dx = Z({2, 4, 7, 6}), dw = Z({6, 2, 3, 2});
  ASSERT_THAT(Run("conv2d.forward", {tx, tw}, {y}, a), IsOk());
  ASSERT_THAT(Run("conv2d.grad_input", {tdy, tw}, {dx}, a), IsOk());
  ASSERT_THAT(Run("conv2d.grad_weight", {tx, tdy}, {dw}, a), IsOk());
  std::vector<float> wy(y.numel()), wdx(dx.numel()), wdw(dw.numel());
  sp::Conv2dForward(s, x.data(), w.data(), wy.data());
  sp::Conv2dGradInput(s, dy.data(), w.data(), wdx.data());
  sp::Conv2dGradWeight(s, x.data(), dy.data(), wdw.data());
  EXPECT_TRUE(BitsEqual(V(y), wy));
  EXPECT_TRUE(BitsEqual(V(dx), wdx));
  EXPECT_TRUE(BitsEqual(V(dw), wdw));
  EXPECT_THAT(Run("conv2d.forward", {tx, tw}, {Z({2, 6, oh, ow + 1})}, a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("conv2d.forward: y has shape")));
  a.groups = 3;
  EXPECT_THAT(
      Run("conv2d.forward", {tx, tw}, {y}, a),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("groups 3")));

  // Pooling (3x3 window, stride 2, padding 1).
  OpAttrs p;
  p.kernel_h = p.kernel_w = 3;
  p.stride_h = p.stride_w = 2;
  p.pad_top = p.pad_bottom = p.pad_left = p.pad_right = 1;
  p.count_include_pad = false;
  sp::Pool2dShape ps;
  ps.n = 2, ps.c = 4, ps.h = 7, ps.w = 6, ps.k_h = 3, ps.k_w = 3;
  ps.stride_h = 2, ps.stride_w = 2, ps.pad_top = 1, ps.pad_bottom = 1;
  ps.pad_left = 1, ps.pad_right = 1, ps.count_include_pad = false;
  const int64_t ph = sp::Pool2dOutH(ps), pw = sp::Pool2dOutW(ps);
  const std::vector<float> pdy = RandomFloats(2 * 4 * ph * pw, 23);
  Tensor py = Z({2, 4, ph, pw}), pdx = Z({2, 4, 7, 6});
  std::vector<float> want_y(py.numel()), want_dx(pdx.numel());

  ASSERT_THAT(Run("max_pool2d.forward", {tx}, {py}, p), IsOk());
  sp::MaxPool2dForward(ps, x.data(), want_y.data());
  EXPECT_TRUE(BitsEqual(V(py), want_y));
  ASSERT_THAT(Run("max_pool2d.grad", {tx, T({2, 4, ph, pw}, pdy)}, {pdx}, p),
              IsOk());
  sp::MaxPool2dGrad(ps, x.data(), pdy.data(), want_dx.data());
  EXPECT_TRUE(BitsEqual(V(pdx), want_dx));

  ASSERT_THAT(Run("avg_pool2d.forward", {tx}, {py}, p), IsOk());
  sp::AvgPool2dForward(ps, x.data(), want_y.data());
  EXPECT_TRUE(BitsEqual(V(py), want_y));
  ASSERT_THAT(Run("avg_pool2d.grad", {T({2, 4, ph, pw}, pdy)}, {pdx}, p),
              IsOk());
  sp::AvgPool2dGrad(ps, pdy.data(), want_dx.data());
  EXPECT_TRUE(BitsEqual(V(pdx), want_dx));

  // Global average pool, output [N, C] and [N, C, 1, 1].
  sp::GlobalPool2dShape gs;
  gs.n = 2, gs.c = 4, gs.h = 7, gs.w = 6;
  std::vector<float> want_g(8), want_gdx(x.size());
  sp::GlobalAvgPool2dForward(gs, x.data(), want_g.data());
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{2, 4}, std::vector<int64_t>{2, 4, 1, 1}}) {
    Tensor gy = Z(shape);
    ASSERT_THAT(Run("global_avg_pool.forward", {tx}, {gy}), IsOk());
    EXPECT_TRUE(BitsEqual(V(gy), want_g));
  }
  const std::vector<float> gdy = RandomFloats(8, 24);
  Tensor gdx = Z({2, 4, 7, 6});
  ASSERT_THAT(Run("global_avg_pool.grad", {T({2, 4}, gdy)}, {gdx}), IsOk());
  sp::GlobalAvgPool2dGrad(gs, gdy.data(), want_gdx.data());
  EXPECT_TRUE(BitsEqual(V(gdx), want_gdx));

  // Resize 7x6 -> 14x3 and back.
  sp::ResizeBilinearShape rs;
  rs.n = 2, rs.c = 4, rs.in_h = 7, rs.in_w = 6, rs.out_h = 14, rs.out_w = 3;
  Tensor ry = Z({2, 4, 14, 3}), rdx = Z({2, 4, 7, 6});
  std::vector<float> want_ry(ry.numel()), want_rdx(rdx.numel());
  ASSERT_THAT(Run("resize_bilinear.forward", {tx}, {ry}), IsOk());
  sp::ResizeBilinearForward(rs, x.data(), want_ry.data());
  EXPECT_TRUE(BitsEqual(V(ry), want_ry));
  const std::vector<float> rdy = RandomFloats(ry.numel(), 25);
  ASSERT_THAT(Run("resize_bilinear.grad", {T({2, 4, 14, 3}, rdy)}, {rdx}),
              IsOk());
  sp::ResizeBilinearGrad(rs, rdy.data(), want_rdx.data());
  EXPECT_TRUE(BitsEqual(V(rdx), want_rdx));
}

// resize_bilinear.forward / .grad (per-axis tap tables, planes on the
// pool) against the spec's element functions, bit for bit: up- and
// down-sampling by integer and non-integer ratios, one-pixel axes, and a
// tensor large enough to run on the pool, on 1 and 3 threads.
TEST_F(CpuBackendTest, ResizeBilinearMatchesTheElementFunctions) {
  struct Case {
    int64_t n, c, in_h, in_w, out_h, out_w;
  };
  const Case cases[] = {{2, 3, 7, 6, 14, 3},  {1, 2, 5, 7, 7, 5},
                        {2, 2, 9, 4, 3, 11},  {1, 1, 1, 4, 4, 1},
                        {1, 3, 4, 1, 1, 9},   {2, 8, 16, 16, 32, 32},
                        {1, 2, 33, 17, 8, 40}};
  uint32_t seed = 700;
  for (int threads : {1, 3}) {
    SetCpuThreadsForTesting(threads);
    for (const Case& k : cases) {
      sp::ResizeBilinearShape rs;
      rs.n = k.n, rs.c = k.c, rs.in_h = k.in_h, rs.in_w = k.in_w;
      rs.out_h = k.out_h, rs.out_w = k.out_w;
      const std::vector<float> x =
          RandomFloats(sp::ResizeBilinearInputSize(rs), ++seed);
      const std::vector<float> dy =
          RandomFloats(sp::ResizeBilinearOutputSize(rs), ++seed);
      std::vector<float> want_y(dy.size()), want_dx(x.size());
      sp::ResizeBilinearForward(rs, x.data(), want_y.data());
      sp::ResizeBilinearGrad(rs, dy.data(), want_dx.data());
      Tensor y = Z({k.n, k.c, k.out_h, k.out_w});
      Tensor dx = Z({k.n, k.c, k.in_h, k.in_w});
      ASSERT_THAT(Run("resize_bilinear.forward",
                      {T({k.n, k.c, k.in_h, k.in_w}, x)}, {y}),
                  IsOk());
      ASSERT_THAT(Run("resize_bilinear.grad",
                      {T({k.n, k.c, k.out_h, k.out_w}, dy)}, {dx}),
                  IsOk());
      EXPECT_TRUE(BitsEqual(V(y), want_y))
          << k.in_h << "x" << k.in_w << " -> " << k.out_h << "x" << k.out_w
          << " threads " << threads;
      EXPECT_TRUE(BitsEqual(V(dx), want_dx))
          << k.in_h << "x" << k.in_w << " -> " << k.out_h << "x" << k.out_w
          << " threads " << threads;
    }
  }
  SetCpuThreadsForTesting(0);
}

// transpose and bias_add.forward on tensors of several 64 Ki-element
// blocks (block edges fall inside runs of the last axis), on 1 and 3
// threads: the spec's bits.
TEST_F(CpuBackendTest, LargeTransposesAndBiasAddMatchTheirBodies) {
  struct Case {
    std::vector<int64_t> shape;
    std::vector<int> perm;
  };
  const Case cases[] = {{{8, 37, 41, 13}, {0, 2, 1, 3}},
                        {{8, 37, 41, 13}, {0, 3, 1, 2}},
                        {{301, 700}, {1, 0}},
                        {{5, 7, 11, 13, 17}, {4, 0, 3, 1, 2}}};
  for (int threads : {1, 3}) {
    SetCpuThreadsForTesting(threads);
    for (const Case& c : cases) {
      int64_t numel = 1;
      for (int64_t d : c.shape) numel *= d;
      const std::vector<float> x = RandomFloats(numel, 41);
      OpAttrs a;
      a.perm_rank = static_cast<int>(c.perm.size());
      c::TransposeShape ts;
      ts.rank = a.perm_rank;
      ts.numel = numel;
      std::vector<int64_t> ys, strides(c.shape.size(), 1);
      for (int d = static_cast<int>(c.shape.size()) - 2; d >= 0; --d) {
        strides[d] = strides[d + 1] * c.shape[d + 1];
      }
      for (size_t i = 0; i < c.perm.size(); ++i) {
        a.perm[i] = c.perm[i];
        ys.push_back(c.shape[c.perm[i]]);
        ts.out_dims[i] = c.shape[c.perm[i]];
        ts.src_strides[i] = strides[c.perm[i]];
      }
      Tensor y = Z(ys);
      ASSERT_THAT(Run("transpose", {T(c.shape, x)}, {y}, a), IsOk());
      std::vector<float> want(numel);
      c::Transpose(ts, reinterpret_cast<const uint32_t*>(x.data()),
                   reinterpret_cast<uint32_t*>(want.data()));
      EXPECT_TRUE(BitsEqual(V(y), want)) << threads << " threads";
    }
    const std::vector<float> x = RandomFloats(32 * 48 * 33, 42);
    const std::vector<float> b = RandomFloats(48, 43);
    Tensor y = Z({32, 48, 33});
    ASSERT_THAT(Run("bias_add.forward", {T({32, 48, 33}, x), T({48}, b)}, {y}),
                IsOk());
    std::vector<float> want(x.size());
    c::BiasAddForward(c::BiasShape{32, 48, 33}, x.data(), b.data(),
                      want.data());
    EXPECT_TRUE(BitsEqual(V(y), want)) << threads << " threads";
    // [n, c] rows (spatial 1).
    const std::vector<float> rows = RandomFloats(700 * 301, 44);
    const std::vector<float> rb = RandomFloats(301, 45);
    Tensor ry = Z({700, 301});
    ASSERT_THAT(
        Run("bias_add.forward", {T({700, 301}, rows), T({301}, rb)}, {ry}),
        IsOk());
    std::vector<float> want_rows(rows.size());
    c::BiasAddForward(c::BiasShape{700, 301, 1}, rows.data(), rb.data(),
                      want_rows.data());
    EXPECT_TRUE(BitsEqual(V(ry), want_rows)) << threads << " threads";
  }
  SetCpuThreadsForTesting(0);
}

TEST_F(CpuBackendTest, RunTwiceSameBits) {
  const std::vector<float> x = RandomFloats(64 * 300, 30);
  const std::vector<float> w = RandomFloats(300 * 10, 31);
  Tensor y1 = Z({64, 10}), y2 = Z({64, 10});
  ASSERT_THAT(Run("dense.forward", {T({64, 300}, x), T({300, 10}, w)}, {y1}),
              IsOk());
  ASSERT_THAT(Run("dense.forward", {T({64, 300}, x), T({300, 10}, w)}, {y2}),
              IsOk());
  EXPECT_TRUE(BitsEqual(V(y1), V(y2)));
}

}  // namespace
}  // namespace lockstep::kernels
