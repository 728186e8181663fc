#include "kernels/cpu/lane_kernels.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/canonical/reduce.h"
#include "kernels/math/portable_math.h"
#include "kernels/ops/activations.h"
#include "kernels/ops/dropout.h"
#include "kernels/ops/optimizers.h"
#include "kernels/random/philox.h"

namespace lockstep::kernels {
namespace {

namespace sp = ::lockstep::spatial;

static_assert(canonical::kChunk == 256,
              "lane_kernels_impl.h's kLaneChunk must equal canonical::kChunk");

const cpu_internal::LaneKernelSet& KernelsFor(CpuIsa isa) {
  while (isa != CpuIsa::kScalar && !CpuIsaSupported(isa)) {
    isa = static_cast<CpuIsa>(static_cast<int>(isa) - 1);
  }
  switch (isa) {
    case CpuIsa::kAvx512:
      return cpu_internal::LaneKernelsAvx512();
    case CpuIsa::kAvx2:
      return cpu_internal::LaneKernelsAvx2();
    case CpuIsa::kScalar:
      break;
  }
  return cpu_internal::LaneKernelsScalar();
}

cpu_internal::LanePoolGeometry Geometry(const sp::Pool2dShape& s) {
  cpu_internal::LanePoolGeometry g;
  g.planes = s.n * s.c;
  g.h = s.h;
  g.w = s.w;
  g.k_h = s.k_h;
  g.k_w = s.k_w;
  g.stride_h = s.stride_h;
  g.stride_w = s.stride_w;
  g.pad_top = s.pad_top;
  g.pad_left = s.pad_left;
  g.out_h = sp::Pool2dOutH(s);
  g.out_w = sp::Pool2dOutW(s);
  g.count_include_pad = s.count_include_pad;
  return g;
}

float CanonicalNan() {
  return canonical::LsBitsToFloat(canonical::kCanonicalNanBits);
}

// Windows along one axis that can cover one input coordinate.
int64_t Covering(int64_t k, int64_t stride, int64_t out) {
  const int64_t c = (k + stride - 1) / stride;
  return c < out ? c : out;
}

}  // namespace

void BiasAddGradLanes(const canonical::BiasShape& s, const float* dy, float* db,
                      CpuIsa isa, ThreadPool* pool) {
  if (s.c <= 0) return;
  const cpu_internal::LaneBiasGeometry g{s.n, s.c, s.spatial};
  KernelsFor(isa).bias_grad(g, dy, db, pool);
}

void CanonicalExpLanes(const float* x, float* y, int64_t n, CpuIsa isa) {
  if (n <= 0) return;
  if (auto* exp = KernelsFor(isa).exp; exp != nullptr) {
    exp(x, y, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = canonical::CanonicalExp(x[i]);
}

namespace {
std::atomic<int64_t>& StreamOutputFloatsForTesting() {
  static std::atomic<int64_t> floats{0};
  return floats;
}
}  // namespace

namespace cpu_internal {
void SetStreamOutputFloatsForTesting(int64_t floats) {
  StreamOutputFloatsForTesting().store(floats, std::memory_order_relaxed);
}
}  // namespace cpu_internal

bool StreamOutput(int64_t n, const float* out, const float* in0,
                  const float* in1) {
  const int64_t set =
      StreamOutputFloatsForTesting().load(std::memory_order_relaxed);
  return n >= (set > 0 ? set : kStreamOutputFloats) && out != in0 && out != in1;
}

void ReluLanes(const float* x, float* y, int64_t n, CpuIsa isa, bool stream) {
  if (n > 0) KernelsFor(isa).relu(x, y, n, stream);
}

void ReluGradLanes(const float* x, const float* dy, float* dx, int64_t n,
                   CpuIsa isa, bool stream) {
  if (n > 0) KernelsFor(isa).relu_grad(x, dy, dx, n, stream);
}

void CanonicalErfLanes(const float* x, float* y, int64_t n, CpuIsa isa) {
  if (n <= 0) return;
  if (auto* erf = KernelsFor(isa).erf; erf != nullptr) {
    erf(x, y, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = canonical::CanonicalErf(x[i]);
}

namespace {

cpu_internal::LaneGeluConstants GeluConstants() {
  namespace ai = canonical::activation_internal;
  return {ai::kInvSqrt2, ai::kInvSqrt2Pi, CanonicalNan()};
}

cpu_internal::LaneActivationConstants ActivationConstants() {
  namespace ai = canonical::activation_internal;
  return {ai::kSqrt2OverPi, ai::kGeluCubic, ai::kGeluCubic3, CanonicalNan()};
}

canonical::Activation SpecActivation(LaneActivation kind) {
  switch (kind) {
    case LaneActivation::kSigmoid:
      return canonical::Activation::kSigmoid;
    case LaneActivation::kTanh:
      return canonical::Activation::kTanh;
    case LaneActivation::kSilu:
      return canonical::Activation::kSilu;
    case LaneActivation::kGeluTanh:
      break;
  }
  return canonical::Activation::kGeluTanh;
}

}  // namespace

void ResizeBilinearLanes(const spatial::ResizeBilinearShape& s,
                         const spatial::BilinearAxisTaps* rows,
                         const spatial::BilinearAxisTaps* cols,
                         const int64_t* row_first, const int64_t* col_first,
                         const float* in, float* out, bool grad, CpuIsa isa,
                         ThreadPool* pool) {
  const cpu_internal::LaneResizeGeometry g{s.n * s.c, s.in_h,    s.in_w,
                                           s.out_h,   s.out_w,   rows,
                                           cols,      row_first, col_first};
  if (g.planes <= 0) return;
  KernelsFor(isa).resize_bilinear(g, in, out, grad, pool);
}

void PhiloxBitsLanes(uint64_t seed, uint64_t stream, uint64_t begin,
                     int64_t count, uint32_t* out, CpuIsa isa) {
  if (count <= 0) return;
  const uint64_t end = begin + static_cast<uint64_t>(count);
  auto scalar = [&](uint64_t from, uint64_t to) {
    canonical::ForPhiloxBits(
        seed, stream, from, to,
        [&](uint64_t i, uint32_t bits) { out[i - begin] = bits; });
  };
  // The indices before the first whole block, the whole blocks, the rest.
  const uint64_t to_block = (4 - (begin & 3)) & 3;  // no overflow near 2^64
  const uint64_t body = begin + std::min<uint64_t>(to_block, end - begin);
  scalar(begin, body);
  const uint64_t first = body / 4;
  const int64_t blocks = static_cast<int64_t>((end - body) / 4);
  uint32_t* dst = out + (body - begin);
  auto* run = KernelsFor(isa).philox_blocks;
  const canonical::PhiloxKey key = canonical::PhiloxKeyFor(seed);
  int64_t done = 0;
  while (done < blocks) {
    if (run != nullptr) {
      done += run(seed, stream, first + static_cast<uint64_t>(done),
                  blocks - done, dst + 4 * done);
    }
    if (done < blocks) {
      // A group the vector code leaves (the low counter word wraps inside
      // it, or fewer blocks than a vector): one block the scalar way.
      const canonical::PhiloxBlock b = canonical::Philox4x32_10(
          canonical::PhiloxCounterFor(stream, (first + done) * 4), key);
      std::memcpy(dst + 4 * done, b.v, sizeof(b.v));
      ++done;
    }
  }
  scalar(body + 4 * static_cast<uint64_t>(blocks), end);
}

void DropoutApplyLanes(const canonical::DropoutParams& p, const uint32_t* bits,
                       const float* x, float* y, float* mask, int64_t n,
                       CpuIsa isa) {
  if (n <= 0) return;
  if (auto* fn = KernelsFor(isa).dropout; fn != nullptr) {
    fn(bits, p.threshold, p.scale, x, y, mask, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    mask[i] = canonical::DropoutMaskOfBits(p, bits[i]);
    y[i] = x[i] * mask[i];
  }
}

void UniformFmaLanes(const uint32_t* bits, float a, float b, float scale,
                     const float* add, float* out, int64_t n, CpuIsa isa) {
  if (n <= 0) return;
  if (auto* fn = KernelsFor(isa).uniform_fma; fn != nullptr) {
    fn(bits,
       cpu_internal::LaneUniformArgs{a, b, canonical::FloatBelow(b), scale},
       add, out, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    out[i] = canonical::LsFma(scale, canonical::BitsToUniform(bits[i], a, b),
                              add[i]);
  }
}

void ActivationLanes(LaneActivation kind, const float* x, float* y, int64_t n,
                     CpuIsa isa) {
  if (n <= 0) return;
  if (auto* fn = KernelsFor(isa).activation; fn != nullptr) {
    fn(kind, x, y, n, ActivationConstants());
    return;
  }
  canonical::ActivationForward(SpecActivation(kind), x, y, n);
}

void ActivationGradLanes(LaneActivation kind, const float* x, const float* dy,
                         float* dx, int64_t n, CpuIsa isa) {
  if (n <= 0) return;
  if (auto* fn = KernelsFor(isa).activation_grad; fn != nullptr) {
    fn(kind, x, dy, dx, n, ActivationConstants());
    return;
  }
  canonical::ActivationGrad(SpecActivation(kind), x, dy, dx, n);
}

void GeluLanes(const float* x, float* y, int64_t n, CpuIsa isa) {
  if (n <= 0) return;
  if (auto* gelu = KernelsFor(isa).gelu; gelu != nullptr) {
    gelu(x, y, n, GeluConstants());
    return;
  }
  canonical::ActivationForward(canonical::Activation::kGelu, x, y, n);
}

void GeluGradLanes(const float* x, const float* dy, float* dx, int64_t n,
                   CpuIsa isa) {
  if (n <= 0) return;
  if (auto* grad = KernelsFor(isa).gelu_grad; grad != nullptr) {
    grad(x, dy, dx, n, GeluConstants());
    return;
  }
  canonical::ActivationGrad(canonical::Activation::kGelu, x, dy, dx, n);
}

bool SoftmaxLanes(const float* x, const float* dy, float* out, int64_t rows,
                  int64_t d, bool causal, CpuIsa isa, ThreadPool* pool) {
  auto* softmax = KernelsFor(isa).softmax;
  if (softmax == nullptr) return false;
  if (rows > 0 && d > 0) {
    softmax({x, dy, out, rows, d, causal, CanonicalNan()}, pool);
  }
  return true;
}

bool SoftmaxGradFromYLanes(const float* y, const float* dy, float* dx,
                           int64_t rows, int64_t d, bool causal, CpuIsa isa,
                           ThreadPool* pool) {
  auto* softmax = KernelsFor(isa).softmax;
  if (softmax == nullptr) return false;
  if (rows > 0 && d > 0) {
    cpu_internal::LaneSoftmaxArgs a{y, dy, dx, rows, d, causal, CanonicalNan()};
    a.x_is_y = true;
    softmax(a, pool);
  }
  return true;
}

bool SoftmaxRowStatsLanes(const float* x, float* exps, float* max, float* sum,
                          int64_t rows, int64_t d, CpuIsa isa,
                          ThreadPool* pool) {
  auto* softmax = KernelsFor(isa).softmax;
  if (softmax == nullptr) return false;
  if (rows > 0 && d > 0) {
    softmax({x, nullptr, exps, rows, d, false, CanonicalNan(), max, sum}, pool);
  }
  return true;
}

void LayerNormRowsLanes(const LayerNormRowsArgs& args, CpuIsa isa,
                        ThreadPool* pool) {
  if (args.rows <= 0 || args.d <= 0) return;
  LayerNormRowsArgs a = args;
  a.nan = CanonicalNan();
  KernelsFor(isa).layer_norm_rows(a, pool);
}

float SumSquaresLanes(const float* g, int64_t n, CpuIsa isa, ThreadPool* pool) {
  if (n <= 0) return 0.0f;
  const int64_t full = n / canonical::kChunk;
  const int64_t tail = n - full * canonical::kChunk;
  std::vector<float> partials(static_cast<size_t>(full));
  if (full > 0) KernelsFor(isa).square_chunks(g, full, partials.data(), pool);
  canonical::TreeAccumulator tree;
  for (const float p : partials) tree.Push(p);
  if (tail > 0) {
    const float* rest = g + full * canonical::kChunk;
    tree.Push(canonical::CanonicalDot(rest, 1, rest, 1, tail));
  }
  return tree.Result();
}

void AdamLanes(const canonical::AdamScalars& s, float* w, float* m, float* v,
               const float* g, int64_t n, CpuIsa isa) {
  if (n <= 0) return;
  const cpu_internal::LaneAdamScalars k{s.lr,    s.beta1,    s.beta2, s.eps,
                                        s.c1,    s.c2,       s.bc1,   s.bc2,
                                        s.decay, s.decoupled};
  KernelsFor(isa).adam(k, w, m, v, g, n);
}

void BatchNormVarSumLanes(const canonical::BiasShape& s, const float* x,
                          const float* mean, float* var_sum, CpuIsa isa,
                          ThreadPool* pool) {
  if (s.c <= 0) return;
  const cpu_internal::LaneBiasGeometry g{s.n, s.c, s.spatial};
  KernelsFor(isa).batch_norm_var_sum(g, x, mean, var_sum, pool);
}

void BatchNormGradChainsLanes(const canonical::BiasShape& s, const float* x,
                              const float* dy, const float* mean,
                              const float* rstd, const float* scale, float* dot,
                              float* sum, CpuIsa isa, ThreadPool* pool) {
  if (s.c <= 0) return;
  const cpu_internal::LaneBiasGeometry g{s.n, s.c, s.spatial};
  KernelsFor(isa).batch_norm_grad_chains(g, x, dy, mean, rstd, scale, dot, sum,
                                         pool);
}

void BatchNormTrainingLanes(const canonical::BiasShape& s,
                            const BatchNormLaneArgs& args, CpuIsa isa,
                            ThreadPool* pool) {
  if (s.n <= 0 || s.c <= 0 || s.spatial <= 0) return;
  const cpu_internal::LaneBiasGeometry g{s.n, s.c, s.spatial};
  KernelsFor(isa).batch_norm_training(g, args, CanonicalNan(), pool);
}

void MaxPool2dForwardLanes(const sp::Pool2dShape& s, const float* x, float* y,
                           CpuIsa isa, ThreadPool* pool) {
  const cpu_internal::LanePoolGeometry g = Geometry(s);
  if (g.planes <= 0 || g.out_h <= 0 || g.out_w <= 0) return;
  if (g.h * g.w >= (int64_t{1} << 31)) {  // offsets are int32
    sp::MaxPool2dForward(s, x, y);
    return;
  }
  KernelsFor(isa).max_pool_forward(g, x, y, pool);
}

void MaxPool2dGradLanes(const sp::Pool2dShape& s, const float* x,
                        const float* dy, float* dx, CpuIsa isa,
                        ThreadPool* pool) {
  const cpu_internal::LanePoolGeometry g = Geometry(s);
  if (g.planes <= 0 || g.h * g.w <= 0) return;
  // The winner offsets are int32, and the scatter is one chain per element:
  // other geometries run the spec loop.
  if (g.h * g.w >= (int64_t{1} << 31) ||
      Covering(g.k_h, g.stride_h, g.out_h) *
              Covering(g.k_w, g.stride_w, g.out_w) >
          canonical::kChunk) {
    sp::MaxPool2dGrad(s, x, dy, dx);
    return;
  }
  KernelsFor(isa).max_pool_grad(g, x, dy, dx, pool);
}

void AvgPool2dForwardLanes(const sp::Pool2dShape& s, const float* x, float* y,
                           CpuIsa isa, ThreadPool* pool) {
  const cpu_internal::LanePoolGeometry g = Geometry(s);
  if (g.planes <= 0 || g.out_h <= 0 || g.out_w <= 0) return;
  KernelsFor(isa).avg_pool_forward(g, x, y, pool);
}

void AvgPool2dGradLanes(const sp::Pool2dShape& s, const float* dy, float* dx,
                        CpuIsa isa, ThreadPool* pool) {
  const cpu_internal::LanePoolGeometry g = Geometry(s);
  if (g.planes <= 0 || g.h * g.w <= 0) return;
  // The scatter is one chain per element: other geometries run the spec
  // loop.
  if (Covering(g.k_h, g.stride_h, g.out_h) *
          Covering(g.k_w, g.stride_w, g.out_w) >
      canonical::kChunk) {
    sp::AvgPool2dGrad(s, dy, dx);
    return;
  }
  KernelsFor(isa).avg_pool_grad(g, dy, dx, pool);
}

void GlobalAvgPool2dForwardLanes(const sp::GlobalPool2dShape& s, const float* x,
                                 float* y, CpuIsa isa, ThreadPool* pool) {
  const cpu_internal::LaneGlobalGeometry g{s.n * s.c, s.h * s.w};
  if (g.planes <= 0) return;
  if (g.area <= 0) {
    sp::GlobalAvgPool2dForward(s, x, y);
    return;
  }
  KernelsFor(isa).global_pool_forward(g, x, y, pool);
}

void GlobalAvgPool2dGradLanes(const sp::GlobalPool2dShape& s, const float* dy,
                              float* dx, CpuIsa isa, ThreadPool* pool) {
  const cpu_internal::LaneGlobalGeometry g{s.n * s.c, s.h * s.w};
  if (g.planes <= 0 || g.area <= 0) return;
  KernelsFor(isa).global_pool_grad(g, dy, dx, pool);
}

}  // namespace lockstep::kernels
