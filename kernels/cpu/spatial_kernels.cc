// CPU kernels of the spatial ops: Tensor/OpAttrs adapters around the bodies
// and validation of kernels/spatial/ (see its SPEC.md). The convolutions run
// on the GEMM (conv_gemm.h) as "canonical" (canonical chunks) and
// "deterministic" (one chain per output), and on the scalar bodies as
// "scalar"; max, average and global average pooling run on the lane kernels
// (lane_kernels.h) as "canonical" and on the scalar bodies as "scalar". The
// DEFAULT atomic conv2d.grad_weight is here too. The transposed convolution
// (conv_transpose2d.*) runs the same kernels on the conv2d whose input
// gradient it is.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "kernels/cpu/atomic_float.h"
#include "kernels/cpu/conv_gemm.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/lane_kernels.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ops/validate.h"
#include "kernels/spatial/conv2d.h"
#include "kernels/spatial/pool2d.h"
#include "kernels/spatial/resize_bilinear.h"
#include "kernels/spatial/tensor_shapes.h"
#include "kernels/spatial/validate.h"

namespace lockstep::kernels {
namespace {

namespace sp = ::lockstep::spatial;
using ::lockstep::spatial::GlobalShape;
using ::lockstep::spatial::ResizeShape;
using ::lockstep::spatial::ValidateConv2dCall;
using ::lockstep::spatial::ValidatePool2dCall;

// How a convolution kernel computes: the scalar spec body, the GEMM with
// canonical chunks (the spec body on the scalar ISA: same bits, no slower),
// or the GEMM with one fma chain per output.
enum class ConvPath { kScalar, kCanonical, kDeterministic };

// The GEMM's chunk length for path, or 0 when the scalar body runs.
template <ConvPath kPath>
int64_t GemmChunk() {
  switch (kPath) {
    case ConvPath::kScalar:
      return 0;
    case ConvPath::kCanonical:
      return ActiveCpuIsa() == CpuIsa::kScalar ? 0 : canonical::kChunk;
    case ConvPath::kDeterministic:
      return kSingleChain;
  }
  return 0;
}

// The three conv2d directions on the geometry s, by path.
template <ConvPath kPath>
void RunConvForward(const sp::Conv2dShape& s, const float* x, const float* w,
                    float* y) {
  if (const int64_t chunk = GemmChunk<kPath>(); chunk > 0) {
    Conv2dForwardGemm(s, x, w, y, chunk, ActiveCpuIsa(), CpuThreadPool());
  } else {
    sp::Conv2dForward(s, x, w, y);
  }
}

template <ConvPath kPath>
void RunConvGradInput(const sp::Conv2dShape& s, const float* dy, const float* w,
                      float* dx) {
  if (const int64_t chunk = GemmChunk<kPath>(); chunk > 0) {
    Conv2dGradInputGemm(s, dy, w, dx, chunk, ActiveCpuIsa(), CpuThreadPool());
  } else {
    sp::Conv2dGradInput(s, dy, w, dx);
  }
}

template <ConvPath kPath>
void RunConvGradWeight(const sp::Conv2dShape& s, const float* x,
                       const float* dy, float* dw) {
  if (const int64_t chunk = GemmChunk<kPath>(); chunk > 0) {
    Conv2dGradWeightGemm(s, x, dy, dw, chunk, ActiveCpuIsa(), CpuThreadPool());
  } else {
    sp::Conv2dGradWeight(s, x, dy, dw);
  }
}

template <ConvPath kPath>
absl::Status Conv2dForwardKernel(absl::Span<const Tensor> in,
                                 absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(sp::Conv2dShape s,
                      ValidateConv2dCall(op::kConv2dForward, in, out, a));
  RunConvForward<kPath>(s, in[0].data<float>(), in[1].data<float>(),
                        out[0].data<float>());
  return absl::OkStatus();
}

// in {dy, w}, out {dx}: the geometry comes from dx (the forward input).
template <ConvPath kPath>
absl::Status Conv2dGradInputKernel(absl::Span<const Tensor> in,
                                   absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(sp::Conv2dShape s,
                      ValidateConv2dCall(op::kConv2dGradInput, in, out, a));
  RunConvGradInput<kPath>(s, in[0].data<float>(), in[1].data<float>(),
                          out[0].data<float>());
  return absl::OkStatus();
}

// in {x, dy}, out {dw}.
template <ConvPath kPath>
absl::Status Conv2dGradWeightKernel(absl::Span<const Tensor> in,
                                    absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(sp::Conv2dShape s,
                      ValidateConv2dCall(op::kConv2dGradWeight, in, out, a));
  RunConvGradWeight<kPath>(s, in[0].data<float>(), in[1].data<float>(),
                           out[0].data<float>());
  return absl::OkStatus();
}

// The transposed convolution, in {x, w}, out {y}: the input gradient of the
// conv2d s over y (docs/canonical-arithmetic.md, "Transposed convolution").
template <ConvPath kPath>
absl::Status ConvTranspose2dForwardKernel(absl::Span<const Tensor> in,
                                          absl::Span<Tensor> out,
                                          const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(
      sp::Conv2dShape s,
      ValidateConv2dCall(op::kConvTranspose2dForward, in, out, a));
  RunConvGradInput<kPath>(s, in[0].data<float>(), in[1].data<float>(),
                          out[0].data<float>());
  return absl::OkStatus();
}

// in {dy, w}, out {dx}: s's forward over dy.
template <ConvPath kPath>
absl::Status ConvTranspose2dGradInputKernel(absl::Span<const Tensor> in,
                                            absl::Span<Tensor> out,
                                            const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(
      sp::Conv2dShape s,
      ValidateConv2dCall(op::kConvTranspose2dGradInput, in, out, a));
  RunConvForward<kPath>(s, in[0].data<float>(), in[1].data<float>(),
                        out[0].data<float>());
  return absl::OkStatus();
}

// in {x, dy}, out {dw}: s's weight gradient with dy as its input and x as
// its output gradient.
template <ConvPath kPath>
absl::Status ConvTranspose2dGradWeightKernel(absl::Span<const Tensor> in,
                                             absl::Span<Tensor> out,
                                             const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(
      sp::Conv2dShape s,
      ValidateConv2dCall(op::kConvTranspose2dGradWeight, in, out, a));
  RunConvGradWeight<kPath>(s, in[1].data<float>(), in[0].data<float>(),
                           out[0].data<float>());
  return absl::OkStatus();
}

// DEFAULT conv2d.grad_weight, "atomic": the batch is split into one range
// per pool thread (as cuDNN's atomic filter-gradient algorithms split the
// N.OH.OW reduction into tiles); each task computes its range's dw
// contribution (the GEMM lowering, one fma chain per output) and adds it
// into dw in arrival order, a block of output channels at a time under
// that block's lock (AtomicRowBlocks; nondeterministic with more than two
// tasks). A compare-and-swap per weight costs about 20 cycles a float:
// 0.1 s a step for resnet18_cifar's 11 M weights on one thread, enough to
// make DEFAULT slower than CANONICAL (docs/benchmarks.md, "DEFAULT's
// atomic weight gradients by blocks").
// conv_transpose2d.grad_weight "atomic" is the same over its conv2d s, with
// the operands swapped (kTransposed).
template <bool kTransposed>
absl::Status Conv2dGradWeightAtomicKernel(absl::Span<const Tensor> in,
                                          absl::Span<Tensor> out,
                                          const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(
      sp::Conv2dShape s,
      ValidateConv2dCall(
          kTransposed ? op::kConvTranspose2dGradWeight : op::kConv2dGradWeight,
          in, out, a));
  const int64_t dw_size = sp::Conv2dWeightSize(s);
  float* dw = out[0].data<float>();
  for (int64_t i = 0; i < dw_size; ++i) dw[i] = 0.0f;
  const float* x = in[kTransposed ? 1 : 0].data<float>();
  const float* dy = in[kTransposed ? 0 : 1].data<float>();
  sp::Conv2dShape one = s;
  one.n = 1;
  const int64_t x_stride = sp::Conv2dInputSize(one);
  const int64_t dy_stride = sp::Conv2dOutputSize(one);
  const int64_t tasks = std::max<int64_t>(
      1, std::min<int64_t>(s.n, CpuThreadPool()->num_threads()));
  // dw as c_out rows of the rest.
  const int64_t dw_cols = s.c_out > 0 ? dw_size / s.c_out : 0;
  AtomicRowBlocks blocks(s.c_out);
  AtomicParallelFor(CpuThreadPool(), tasks, [&](int64_t t) {
    const int64_t begin = s.n * t / tasks;
    const int64_t end = s.n * (t + 1) / tasks;
    sp::Conv2dShape range = s;
    range.n = end - begin;
    ScratchFloats part(dw_size);
    Conv2dGradWeightGemm(range, x + begin * x_stride, dy + begin * dy_stride,
                         part.data(), kSingleChain, ActiveCpuIsa(),
                         /*pool=*/nullptr);
    blocks.Add(dw, dw_cols, 1, part.data(), s.c_out, dw_cols,
               t * blocks.blocks() / tasks);
  });
  return absl::OkStatus();
}

// DEFAULT conv2d.grad_weight, "atomic_depthwise": the atomic kernel above for
// depthwise calls (groups == c_in), the deterministic kernel for the others.
// A model's depthwise layers are then its only nondeterministic weight
// gradients, so a divergence names the depthwise site.
absl::Status Conv2dGradWeightAtomicDepthwiseKernel(absl::Span<const Tensor> in,
                                                   absl::Span<Tensor> out,
                                                   const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(sp::Conv2dShape s,
                      ValidateConv2dCall(op::kConv2dGradWeight, in, out, a));
  if (s.groups > 1 && s.groups == s.c_in) {
    return Conv2dGradWeightAtomicKernel<false>(in, out, a);
  }
  return Conv2dGradWeightKernel<ConvPath::kDeterministic>(in, out, a);
}

// kLanes: the lane kernels (lane_kernels.h); else the scalar spec body.
// Same bits either way.
template <bool kLanes>
absl::Status MaxPoolForwardKernel(absl::Span<const Tensor> in,
                                  absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(sp::Pool2dShape s,
                      ValidatePool2dCall(op::kMaxPool2dForward, in, out, a));
  if (kLanes) {
    MaxPool2dForwardLanes(s, in[0].data<float>(), out[0].data<float>(),
                          ActiveCpuIsa(), CpuThreadPool());
  } else {
    sp::MaxPool2dForward(s, in[0].data<float>(), out[0].data<float>());
  }
  return absl::OkStatus();
}

// in {x, dy}, out {dx}.
template <bool kLanes>
absl::Status MaxPoolGradKernel(absl::Span<const Tensor> in,
                               absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(sp::Pool2dShape s,
                      ValidatePool2dCall(op::kMaxPool2dGrad, in, out, a));
  if (kLanes) {
    MaxPool2dGradLanes(s, in[0].data<float>(), in[1].data<float>(),
                       out[0].data<float>(), ActiveCpuIsa(), CpuThreadPool());
  } else {
    sp::MaxPool2dGrad(s, in[0].data<float>(), in[1].data<float>(),
                      out[0].data<float>());
  }
  return absl::OkStatus();
}

// kLanes: the lane kernels (lane_kernels.h); else the scalar spec body.
// Same bits either way.
template <bool kLanes>
absl::Status AvgPoolForwardKernel(absl::Span<const Tensor> in,
                                  absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(sp::Pool2dShape s,
                      ValidatePool2dCall(op::kAvgPool2dForward, in, out, a));
  if (kLanes) {
    AvgPool2dForwardLanes(s, in[0].data<float>(), out[0].data<float>(),
                          ActiveCpuIsa(), CpuThreadPool());
  } else {
    sp::AvgPool2dForward(s, in[0].data<float>(), out[0].data<float>());
  }
  return absl::OkStatus();
}

// in {dy}, out {dx}: the geometry comes from dx.
template <bool kLanes>
absl::Status AvgPoolGradKernel(absl::Span<const Tensor> in,
                               absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(sp::Pool2dShape s,
                      ValidatePool2dCall(op::kAvgPool2dGrad, in, out, a));
  if (kLanes) {
    AvgPool2dGradLanes(s, in[0].data<float>(), out[0].data<float>(),
                       ActiveCpuIsa(), CpuThreadPool());
  } else {
    sp::AvgPool2dGrad(s, in[0].data<float>(), out[0].data<float>());
  }
  return absl::OkStatus();
}

template <bool kLanes>
absl::Status GlobalAvgPoolForwardKernel(absl::Span<const Tensor> in,
                                        absl::Span<Tensor> out,
                                        const OpAttrs&) {
  const absl::string_view name = op::kGlobalAvgPoolForward;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(sp::GlobalPool2dShape s,
                      GlobalShape(name, in[0], out[0], "x", "y"));
  LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
  if (kLanes) {
    GlobalAvgPool2dForwardLanes(s, in[0].data<float>(), out[0].data<float>(),
                                ActiveCpuIsa(), CpuThreadPool());
  } else {
    sp::GlobalAvgPool2dForward(s, in[0].data<float>(), out[0].data<float>());
  }
  return absl::OkStatus();
}

template <bool kLanes>
absl::Status GlobalAvgPoolGradKernel(absl::Span<const Tensor> in,
                                     absl::Span<Tensor> out, const OpAttrs&) {
  const absl::string_view name = op::kGlobalAvgPoolGrad;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(sp::GlobalPool2dShape s,
                      GlobalShape(name, out[0], in[0], "dx", "dy"));
  LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
  if (kLanes) {
    GlobalAvgPool2dGradLanes(s, in[0].data<float>(), out[0].data<float>(),
                             ActiveCpuIsa(), CpuThreadPool());
  } else {
    sp::GlobalAvgPool2dGrad(s, in[0].data<float>(), out[0].data<float>());
  }
  return absl::OkStatus();
}

// Bilinear resize with each axis's taps computed once per call instead of
// once per element: the spec's ResizeBilinearForwardAt / GradAt (which its
// element functions call) fed the same BilinearAxis values from tables, so
// the same bits. Planes run on the pool.
struct BilinearAxisTable {
  std::vector<sp::BilinearAxisTaps> taps;  // per output coordinate
  // Per input coordinate i: the first output whose tap i0 >= i - 1 (the
  // first that can read i).
  std::vector<int64_t> first_reader;
  BilinearAxisTable(int64_t in, int64_t out) : taps(out), first_reader(in) {
    for (int64_t o = 0; o < out; ++o) taps[o] = sp::BilinearAxis(in, out, o);
    int64_t o = 0;
    for (int64_t i = 0; i < in; ++i) {
      while (o < out && taps[o].i0 < i - 1) ++o;
      first_reader[i] = o;
    }
  }
};

// plane(p) for every plane p of x / dx, on the pool when big enough.
template <typename Plane>
void ForEachResizePlane(const sp::ResizeBilinearShape& s, ThreadPool* pool,
                        const Plane& plane) {
  constexpr int64_t kMinParallelElements = int64_t{1} << 14;
  if (sp::ResizeBilinearOutputSize(s) < kMinParallelElements) pool = nullptr;
  ParallelFor(pool, s.n * s.c, plane);
}

void ResizeBilinearForwardTables(const sp::ResizeBilinearShape& s,
                                 const float* x, float* y, ThreadPool* pool) {
  const BilinearAxisTable rows(s.in_h, s.out_h);
  const BilinearAxisTable cols(s.in_w, s.out_w);
  if (const CpuIsa isa = ActiveCpuIsa(); isa != CpuIsa::kScalar) {
    ResizeBilinearLanes(s, rows.taps.data(), cols.taps.data(),
                        rows.first_reader.data(), cols.first_reader.data(), x,
                        y, /*grad=*/false, isa, pool);
    return;
  }
  ForEachResizePlane(s, pool, [&](int64_t p) {
    const float* xp = x + p * s.in_h * s.in_w;
    float* yp = y + p * s.out_h * s.out_w;
    for (int64_t oh = 0; oh < s.out_h; ++oh) {
      for (int64_t ow = 0; ow < s.out_w; ++ow) {
        yp[oh * s.out_w + ow] =
            sp::ResizeBilinearForwardAt(s, xp, rows.taps[oh], cols.taps[ow]);
      }
    }
  });
}

void ResizeBilinearGradTables(const sp::ResizeBilinearShape& s, const float* dy,
                              float* dx, ThreadPool* pool) {
  const BilinearAxisTable rows(s.in_h, s.out_h);
  const BilinearAxisTable cols(s.in_w, s.out_w);
  if (const CpuIsa isa = ActiveCpuIsa(); isa != CpuIsa::kScalar) {
    ResizeBilinearLanes(s, rows.taps.data(), cols.taps.data(),
                        rows.first_reader.data(), cols.first_reader.data(), dy,
                        dx, /*grad=*/true, isa, pool);
    return;
  }
  auto row_taps = [&](int64_t oh) { return rows.taps[oh]; };
  auto col_taps = [&](int64_t ow) { return cols.taps[ow]; };
  ForEachResizePlane(s, pool, [&](int64_t p) {
    const float* dyp = dy + p * s.out_h * s.out_w;
    float* dxp = dx + p * s.in_h * s.in_w;
    for (int64_t ih = 0; ih < s.in_h; ++ih) {
      for (int64_t iw = 0; iw < s.in_w; ++iw) {
        dxp[ih * s.in_w + iw] =
            sp::ResizeBilinearGradAt(s, dyp, ih, iw, rows.first_reader[ih],
                                     cols.first_reader[iw], row_taps, col_taps);
      }
    }
  });
}

absl::Status ResizeForwardKernel(absl::Span<const Tensor> in,
                                 absl::Span<Tensor> out, const OpAttrs&) {
  const absl::string_view name = op::kResizeBilinearForward;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(sp::ResizeBilinearShape s,
                      ResizeShape(name, in[0], out[0], "x", "y"));
  LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
  ResizeBilinearForwardTables(s, in[0].data<float>(), out[0].data<float>(),
                              CpuThreadPool());
  return absl::OkStatus();
}

absl::Status ResizeGradKernel(absl::Span<const Tensor> in,
                              absl::Span<Tensor> out, const OpAttrs&) {
  const absl::string_view name = op::kResizeBilinearGrad;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(sp::ResizeBilinearShape s,
                      ResizeShape(name, out[0], in[0], "dx", "dy"));
  LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
  ResizeBilinearGradTables(s, in[0].data<float>(), out[0].data<float>(),
                           CpuThreadPool());
  return absl::OkStatus();
}

}  // namespace

namespace cpu_internal {

absl::Status RegisterSpatialKernels(Registry* registry) {
  struct Entry {
    const char* op;
    KernelFn fn;
  };
  // The scalar spec bodies, for comparison with the fast ones.
  const Entry scalar[] = {
      {op::kConv2dForward, &Conv2dForwardKernel<ConvPath::kScalar>},
      {op::kConv2dGradInput, &Conv2dGradInputKernel<ConvPath::kScalar>},
      {op::kConv2dGradWeight, &Conv2dGradWeightKernel<ConvPath::kScalar>},
      {op::kConvTranspose2dForward,
       &ConvTranspose2dForwardKernel<ConvPath::kScalar>},
      {op::kConvTranspose2dGradInput,
       &ConvTranspose2dGradInputKernel<ConvPath::kScalar>},
      {op::kConvTranspose2dGradWeight,
       &ConvTranspose2dGradWeightKernel<ConvPath::kScalar>},
      {op::kMaxPool2dForward, &MaxPoolForwardKernel<false>},
      {op::kMaxPool2dGrad, &MaxPoolGradKernel<false>},
      {op::kAvgPool2dForward, &AvgPoolForwardKernel<false>},
      {op::kAvgPool2dGrad, &AvgPoolGradKernel<false>},
      {op::kGlobalAvgPoolForward, &GlobalAvgPoolForwardKernel<false>},
      {op::kGlobalAvgPoolGrad, &GlobalAvgPoolGradKernel<false>},
  };
  for (const Entry& e : scalar) {
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{e.op, Mode::kCanonical, kScalarAlgorithm, kCpuBackendName},
        e.fn));
  }
  const Entry entries[] = {
      {op::kConv2dForward, &Conv2dForwardKernel<ConvPath::kCanonical>},
      {op::kConv2dGradInput, &Conv2dGradInputKernel<ConvPath::kCanonical>},
      {op::kConv2dGradWeight, &Conv2dGradWeightKernel<ConvPath::kCanonical>},
      {op::kConvTranspose2dForward,
       &ConvTranspose2dForwardKernel<ConvPath::kCanonical>},
      {op::kConvTranspose2dGradInput,
       &ConvTranspose2dGradInputKernel<ConvPath::kCanonical>},
      {op::kConvTranspose2dGradWeight,
       &ConvTranspose2dGradWeightKernel<ConvPath::kCanonical>},
      {op::kMaxPool2dForward, &MaxPoolForwardKernel<true>},
      {op::kMaxPool2dGrad, &MaxPoolGradKernel<true>},
      {op::kAvgPool2dForward, &AvgPoolForwardKernel<true>},
      {op::kAvgPool2dGrad, &AvgPoolGradKernel<true>},
      {op::kGlobalAvgPoolForward, &GlobalAvgPoolForwardKernel<true>},
      {op::kGlobalAvgPoolGrad, &GlobalAvgPoolGradKernel<true>},
      {op::kResizeBilinearForward, &ResizeForwardKernel},
      {op::kResizeBilinearGrad, &ResizeGradKernel},
  };
  for (const Entry& e : entries) {
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{e.op, Mode::kCanonical, kCanonicalAlgorithm, kCpuBackendName},
        e.fn));
  }
  return absl::OkStatus();
}

absl::Status RegisterSpatialDeterministicAndDefaultKernels(Registry* registry) {
  struct Entry {
    const char* op;
    Mode mode;
    const char* algorithm;
    KernelFn fn;
  };
  const KernelFn fwd = &Conv2dForwardKernel<ConvPath::kDeterministic>;
  const KernelFn gin = &Conv2dGradInputKernel<ConvPath::kDeterministic>;
  const KernelFn gw = &Conv2dGradWeightKernel<ConvPath::kDeterministic>;
  const KernelFn t_fwd =
      &ConvTranspose2dForwardKernel<ConvPath::kDeterministic>;
  const KernelFn t_gin =
      &ConvTranspose2dGradInputKernel<ConvPath::kDeterministic>;
  const KernelFn t_gw =
      &ConvTranspose2dGradWeightKernel<ConvPath::kDeterministic>;
  const Entry entries[] = {
      {op::kConv2dForward, Mode::kDeterministic, kDeterministicAlgorithm, fwd},
      {op::kConv2dGradInput, Mode::kDeterministic, kDeterministicAlgorithm,
       gin},
      {op::kConv2dGradWeight, Mode::kDeterministic, kDeterministicAlgorithm,
       gw},
      {op::kConv2dForward, Mode::kDefault, kDefaultAlgorithm, fwd},
      {op::kConv2dGradInput, Mode::kDefault, kDefaultAlgorithm, gin},
      {op::kConvTranspose2dForward, Mode::kDeterministic,
       kDeterministicAlgorithm, t_fwd},
      {op::kConvTranspose2dGradInput, Mode::kDeterministic,
       kDeterministicAlgorithm, t_gin},
      {op::kConvTranspose2dGradWeight, Mode::kDeterministic,
       kDeterministicAlgorithm, t_gw},
      {op::kConvTranspose2dForward, Mode::kDefault, kDefaultAlgorithm, t_fwd},
      {op::kConvTranspose2dGradInput, Mode::kDefault, kDefaultAlgorithm, t_gin},
  };
  for (const Entry& e : entries) {
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{e.op, e.mode, e.algorithm, kCpuBackendName}, e.fn));
  }
  for (const char* algorithm : {kDefaultAlgorithm, kAtomicAlgorithm}) {
    LS_RETURN_IF_ERROR(
        registry->Register(KernelKey{op::kConv2dGradWeight, Mode::kDefault,
                                     algorithm, kCpuBackendName},
                           &Conv2dGradWeightAtomicKernel<false>));
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{op::kConvTranspose2dGradWeight, Mode::kDefault, algorithm,
                  kCpuBackendName},
        &Conv2dGradWeightAtomicKernel<true>));
  }
  LS_RETURN_IF_ERROR(
      registry->Register(KernelKey{op::kConv2dGradWeight, Mode::kDefault,
                                   kAtomicDepthwiseAlgorithm, kCpuBackendName},
                         &Conv2dGradWeightAtomicDepthwiseKernel));
  return absl::OkStatus();
}

}  // namespace cpu_internal
}  // namespace lockstep::kernels
