// CANONICAL CPU kernels of the spatial ops: Tensor/OpAttrs adapters around
// the bodies and validation of kernels/spatial/ (see its SPEC.md). The
// convolutions run on the GEMM (conv_gemm.h) as "canonical" and on the
// scalar bodies as "scalar"; the DEFAULT atomic conv2d.grad_weight is here
// too.
#include <cstdint>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "kernels/cpu/atomic_float.h"
#include "kernels/cpu/conv_gemm.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ops/validate.h"
#include "kernels/spatial/conv2d.h"
#include "kernels/spatial/pool2d.h"
#include "kernels/spatial/resize_bilinear.h"
#include "kernels/spatial/validate.h"

namespace lockstep::kernels {
namespace {

namespace sp = ::lockstep::spatial;

absl::Status CheckNchw(absl::string_view op, const Tensor& t,
                       absl::string_view name) {
  if (t.dtype() != DType::kFloat32 || t.rank() != 4) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s must be float32 of rank 4 (NCHW / OIHW), got %s", op, name,
        t.DebugString()));
  }
  return absl::OkStatus();
}

absl::Status ExpectShape(absl::string_view op, const Tensor& t,
                         const std::vector<int64_t>& shape,
                         absl::string_view name) {
  if (t.shape() == shape) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %s has shape %s, expected %s", op, name,
                      ShapeString(t.shape()), ShapeString(shape)));
}

absl::Status CheckDisjoint(absl::string_view op, absl::Span<const Tensor> in,
                           absl::Span<Tensor> out) {
  for (size_t o = 0; o < out.size(); ++o) {
    for (size_t i = 0; i < in.size(); ++i) {
      if (out[o].SharesStorageWith(in[i])) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: output %d shares storage with input %d", op, o, i));
      }
    }
  }
  return absl::OkStatus();
}

// Conv geometry from the NCHW input x, the OIHW weight w and the attributes.
// x_name / w_name: what the caller calls them (x or dx, w or dw).
absl::StatusOr<sp::Conv2dShape> ConvShape(absl::string_view op, const Tensor& x,
                                          const Tensor& w, const OpAttrs& a,
                                          absl::string_view x_name,
                                          absl::string_view w_name) {
  LS_RETURN_IF_ERROR(CheckNchw(op, x, x_name));
  LS_RETURN_IF_ERROR(CheckNchw(op, w, w_name));
  sp::Conv2dShape s;
  s.n = x.dim(0);
  s.c_in = x.dim(1);
  s.h = x.dim(2);
  s.w = x.dim(3);
  s.c_out = w.dim(0);
  s.k_h = w.dim(2);
  s.k_w = w.dim(3);
  s.stride_h = a.stride_h;
  s.stride_w = a.stride_w;
  s.pad_top = a.pad_top;
  s.pad_bottom = a.pad_bottom;
  s.pad_left = a.pad_left;
  s.pad_right = a.pad_right;
  s.dilation_h = a.dilation_h;
  s.dilation_w = a.dilation_w;
  s.groups = a.groups;
  if (s.groups < 1 || s.c_in % s.groups != 0 || w.dim(1) * s.groups != s.c_in) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s %s must have C_in / groups = %d input channels (%s %s, "
        "groups %d)",
        op, w_name, w.DebugString(), s.groups >= 1 ? s.c_in / s.groups : 0,
        x_name, x.DebugString(), s.groups));
  }
  LS_RETURN_IF_ERROR(sp::ValidateConv2dShape(s));
  return s;
}

std::vector<int64_t> ConvOutShape(const sp::Conv2dShape& s) {
  return {s.n, s.c_out, sp::Conv2dOutH(s), sp::Conv2dOutW(s)};
}

template <bool kGemm>
absl::Status Conv2dForwardKernel(absl::Span<const Tensor> in,
                                 absl::Span<Tensor> out, const OpAttrs& a) {
  const absl::string_view name = op::kConv2dForward;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(sp::Conv2dShape s,
                      ConvShape(name, in[0], in[1], a, "x", "w"));
  LS_RETURN_IF_ERROR(CheckNchw(name, out[0], "y"));
  LS_RETURN_IF_ERROR(ExpectShape(name, out[0], ConvOutShape(s), "y"));
  LS_RETURN_IF_ERROR(CheckDisjoint(name, in, out));
  if (kGemm && ActiveCpuIsa() != CpuIsa::kScalar) {
    Conv2dForwardGemm(s, in[0].data<float>(), in[1].data<float>(),
                      out[0].data<float>(), ActiveCpuIsa(), CpuThreadPool());
  } else {
    sp::Conv2dForward(s, in[0].data<float>(), in[1].data<float>(),
                      out[0].data<float>());
  }
  return absl::OkStatus();
}

// in {dy, w}, out {dx}: the geometry comes from dx (the forward input).
template <bool kGemm>
absl::Status Conv2dGradInputKernel(absl::Span<const Tensor> in,
                                   absl::Span<Tensor> out, const OpAttrs& a) {
  const absl::string_view name = op::kConv2dGradInput;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(sp::Conv2dShape s,
                      ConvShape(name, out[0], in[1], a, "dx", "w"));
  LS_RETURN_IF_ERROR(CheckNchw(name, in[0], "dy"));
  LS_RETURN_IF_ERROR(ExpectShape(name, in[0], ConvOutShape(s), "dy"));
  LS_RETURN_IF_ERROR(CheckDisjoint(name, in, out));
  if (kGemm && ActiveCpuIsa() != CpuIsa::kScalar) {
    Conv2dGradInputGemm(s, in[0].data<float>(), in[1].data<float>(),
                        out[0].data<float>(), ActiveCpuIsa(), CpuThreadPool());
  } else {
    sp::Conv2dGradInput(s, in[0].data<float>(), in[1].data<float>(),
                        out[0].data<float>());
  }
  return absl::OkStatus();
}

// in {x, dy}, out {dw}.
template <bool kGemm>
absl::Status Conv2dGradWeightKernel(absl::Span<const Tensor> in,
                                    absl::Span<Tensor> out, const OpAttrs& a) {
  const absl::string_view name = op::kConv2dGradWeight;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(sp::Conv2dShape s,
                      ConvShape(name, in[0], out[0], a, "x", "dw"));
  LS_RETURN_IF_ERROR(CheckNchw(name, in[1], "dy"));
  LS_RETURN_IF_ERROR(ExpectShape(name, in[1], ConvOutShape(s), "dy"));
  LS_RETURN_IF_ERROR(CheckDisjoint(name, in, out));
  if (kGemm && ActiveCpuIsa() != CpuIsa::kScalar) {
    Conv2dGradWeightGemm(s, in[0].data<float>(), in[1].data<float>(),
                         out[0].data<float>(), ActiveCpuIsa(), CpuThreadPool());
  } else {
    sp::Conv2dGradWeight(s, in[0].data<float>(), in[1].data<float>(),
                         out[0].data<float>());
  }
  return absl::OkStatus();
}

// DEFAULT conv2d.grad_weight, "atomic": one task per batch element computes
// that element's dw contribution and adds it into dw with atomic CAS in
// arrival order (nondeterministic with more than one thread).
absl::Status Conv2dGradWeightAtomicKernel(absl::Span<const Tensor> in,
                                          absl::Span<Tensor> out,
                                          const OpAttrs& a) {
  const absl::string_view name = op::kConv2dGradWeight;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(sp::Conv2dShape s,
                      ConvShape(name, in[0], out[0], a, "x", "dw"));
  LS_RETURN_IF_ERROR(CheckNchw(name, in[1], "dy"));
  LS_RETURN_IF_ERROR(ExpectShape(name, in[1], ConvOutShape(s), "dy"));
  LS_RETURN_IF_ERROR(CheckDisjoint(name, in, out));
  const int64_t dw_size = sp::Conv2dWeightSize(s);
  float* dw = out[0].data<float>();
  for (int64_t i = 0; i < dw_size; ++i) dw[i] = 0.0f;
  const float* x = in[0].data<float>();
  const float* dy = in[1].data<float>();
  sp::Conv2dShape one = s;
  one.n = 1;
  const int64_t x_stride = sp::Conv2dInputSize(one);
  const int64_t dy_stride = sp::Conv2dOutputSize(one);
  CpuThreadPool()->ParallelFor(s.n, [&](int64_t n) {
    std::vector<float> part(dw_size);
    sp::Conv2dGradWeight(one, x + n * x_stride, dy + n * dy_stride,
                         part.data());
    for (int64_t i = 0; i < dw_size; ++i) AtomicAddFloat(dw + i, part[i]);
  });
  return absl::OkStatus();
}

// Pool geometry from the NCHW input (or input gradient) x.
absl::StatusOr<sp::Pool2dShape> PoolShape(absl::string_view op, const Tensor& x,
                                          const OpAttrs& a,
                                          absl::string_view name) {
  LS_RETURN_IF_ERROR(CheckNchw(op, x, name));
  sp::Pool2dShape s;
  s.n = x.dim(0);
  s.c = x.dim(1);
  s.h = x.dim(2);
  s.w = x.dim(3);
  s.k_h = a.kernel_h;
  s.k_w = a.kernel_w;
  s.stride_h = a.stride_h;
  s.stride_w = a.stride_w;
  s.pad_top = a.pad_top;
  s.pad_bottom = a.pad_bottom;
  s.pad_left = a.pad_left;
  s.pad_right = a.pad_right;
  s.count_include_pad = a.count_include_pad;
  LS_RETURN_IF_ERROR(sp::ValidatePool2dShape(s));
  return s;
}

std::vector<int64_t> PoolOutShape(const sp::Pool2dShape& s) {
  return {s.n, s.c, sp::Pool2dOutH(s), sp::Pool2dOutW(s)};
}

absl::Status MaxPoolForwardKernel(absl::Span<const Tensor> in,
                                  absl::Span<Tensor> out, const OpAttrs& a) {
  const absl::string_view name = op::kMaxPool2dForward;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(sp::Pool2dShape s, PoolShape(name, in[0], a, "x"));
  LS_RETURN_IF_ERROR(CheckNchw(name, out[0], "y"));
  LS_RETURN_IF_ERROR(ExpectShape(name, out[0], PoolOutShape(s), "y"));
  LS_RETURN_IF_ERROR(CheckDisjoint(name, in, out));
  sp::MaxPool2dForward(s, in[0].data<float>(), out[0].data<float>());
  return absl::OkStatus();
}

// in {x, dy}, out {dx}.
absl::Status MaxPoolGradKernel(absl::Span<const Tensor> in,
                               absl::Span<Tensor> out, const OpAttrs& a) {
  const absl::string_view name = op::kMaxPool2dGrad;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(sp::Pool2dShape s, PoolShape(name, in[0], a, "x"));
  LS_RETURN_IF_ERROR(CheckNchw(name, in[1], "dy"));
  LS_RETURN_IF_ERROR(ExpectShape(name, in[1], PoolOutShape(s), "dy"));
  LS_RETURN_IF_ERROR(ExpectShape(name, out[0], in[0].shape(), "dx"));
  LS_RETURN_IF_ERROR(CheckDisjoint(name, in, out));
  sp::MaxPool2dGrad(s, in[0].data<float>(), in[1].data<float>(),
                    out[0].data<float>());
  return absl::OkStatus();
}

absl::Status AvgPoolForwardKernel(absl::Span<const Tensor> in,
                                  absl::Span<Tensor> out, const OpAttrs& a) {
  const absl::string_view name = op::kAvgPool2dForward;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(sp::Pool2dShape s, PoolShape(name, in[0], a, "x"));
  LS_RETURN_IF_ERROR(CheckNchw(name, out[0], "y"));
  LS_RETURN_IF_ERROR(ExpectShape(name, out[0], PoolOutShape(s), "y"));
  LS_RETURN_IF_ERROR(CheckDisjoint(name, in, out));
  sp::AvgPool2dForward(s, in[0].data<float>(), out[0].data<float>());
  return absl::OkStatus();
}

// in {dy}, out {dx}: the geometry comes from dx.
absl::Status AvgPoolGradKernel(absl::Span<const Tensor> in,
                               absl::Span<Tensor> out, const OpAttrs& a) {
  const absl::string_view name = op::kAvgPool2dGrad;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(sp::Pool2dShape s, PoolShape(name, out[0], a, "dx"));
  LS_RETURN_IF_ERROR(CheckNchw(name, in[0], "dy"));
  LS_RETURN_IF_ERROR(ExpectShape(name, in[0], PoolOutShape(s), "dy"));
  LS_RETURN_IF_ERROR(CheckDisjoint(name, in, out));
  sp::AvgPool2dGrad(s, in[0].data<float>(), out[0].data<float>());
  return absl::OkStatus();
}

// Global pooling: x [N, C, H, W]; y [N, C] or [N, C, 1, 1].
absl::StatusOr<sp::GlobalPool2dShape> GlobalShape(absl::string_view op,
                                                  const Tensor& x,
                                                  const Tensor& y,
                                                  absl::string_view x_name,
                                                  absl::string_view y_name) {
  LS_RETURN_IF_ERROR(CheckNchw(op, x, x_name));
  sp::GlobalPool2dShape s;
  s.n = x.dim(0);
  s.c = x.dim(1);
  s.h = x.dim(2);
  s.w = x.dim(3);
  LS_RETURN_IF_ERROR(sp::ValidateGlobalPool2dShape(s));
  const bool ok = y.dtype() == DType::kFloat32 &&
                  (y.shape() == std::vector<int64_t>{s.n, s.c} ||
                   y.shape() == std::vector<int64_t>{s.n, s.c, 1, 1});
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s is %s, expected float32 [%d, %d] or [%d, %d, 1, 1]", op, y_name,
        y.DebugString(), s.n, s.c, s.n, s.c));
  }
  return s;
}

absl::Status GlobalAvgPoolForwardKernel(absl::Span<const Tensor> in,
                                        absl::Span<Tensor> out,
                                        const OpAttrs&) {
  const absl::string_view name = op::kGlobalAvgPoolForward;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(sp::GlobalPool2dShape s,
                      GlobalShape(name, in[0], out[0], "x", "y"));
  LS_RETURN_IF_ERROR(CheckDisjoint(name, in, out));
  sp::GlobalAvgPool2dForward(s, in[0].data<float>(), out[0].data<float>());
  return absl::OkStatus();
}

absl::Status GlobalAvgPoolGradKernel(absl::Span<const Tensor> in,
                                     absl::Span<Tensor> out, const OpAttrs&) {
  const absl::string_view name = op::kGlobalAvgPoolGrad;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(sp::GlobalPool2dShape s,
                      GlobalShape(name, out[0], in[0], "dx", "dy"));
  LS_RETURN_IF_ERROR(CheckDisjoint(name, in, out));
  sp::GlobalAvgPool2dGrad(s, in[0].data<float>(), out[0].data<float>());
  return absl::OkStatus();
}

// Resize: small [N, C, H, W] and large [N, C, OH, OW] (either way round).
absl::StatusOr<sp::ResizeBilinearShape> ResizeShape(absl::string_view op,
                                                    const Tensor& x,
                                                    const Tensor& y,
                                                    absl::string_view x_name,
                                                    absl::string_view y_name) {
  LS_RETURN_IF_ERROR(CheckNchw(op, x, x_name));
  LS_RETURN_IF_ERROR(CheckNchw(op, y, y_name));
  if (x.dim(0) != y.dim(0) || x.dim(1) != y.dim(1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s %s and %s %s must agree on N and C", op, x_name,
                        x.DebugString(), y_name, y.DebugString()));
  }
  sp::ResizeBilinearShape s;
  s.n = x.dim(0);
  s.c = x.dim(1);
  s.in_h = x.dim(2);
  s.in_w = x.dim(3);
  s.out_h = y.dim(2);
  s.out_w = y.dim(3);
  LS_RETURN_IF_ERROR(sp::ValidateResizeBilinearShape(s));
  return s;
}

absl::Status ResizeForwardKernel(absl::Span<const Tensor> in,
                                 absl::Span<Tensor> out, const OpAttrs&) {
  const absl::string_view name = op::kResizeBilinearForward;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(sp::ResizeBilinearShape s,
                      ResizeShape(name, in[0], out[0], "x", "y"));
  LS_RETURN_IF_ERROR(CheckDisjoint(name, in, out));
  sp::ResizeBilinearForward(s, in[0].data<float>(), out[0].data<float>());
  return absl::OkStatus();
}

absl::Status ResizeGradKernel(absl::Span<const Tensor> in,
                              absl::Span<Tensor> out, const OpAttrs&) {
  const absl::string_view name = op::kResizeBilinearGrad;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(sp::ResizeBilinearShape s,
                      ResizeShape(name, out[0], in[0], "dx", "dy"));
  LS_RETURN_IF_ERROR(CheckDisjoint(name, in, out));
  sp::ResizeBilinearGrad(s, in[0].data<float>(), out[0].data<float>());
  return absl::OkStatus();
}

}  // namespace

namespace cpu_internal {

absl::Status RegisterSpatialKernels(Registry* registry) {
  struct Entry {
    const char* op;
    KernelFn fn;
  };
  // The scalar convolutions, for comparison with the GEMM ones.
  const Entry scalar[] = {
      {op::kConv2dForward, &Conv2dForwardKernel<false>},
      {op::kConv2dGradInput, &Conv2dGradInputKernel<false>},
      {op::kConv2dGradWeight, &Conv2dGradWeightKernel<false>},
  };
  for (const Entry& e : scalar) {
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{e.op, Mode::kCanonical, kScalarAlgorithm, kCpuBackendName},
        e.fn));
  }
  const Entry entries[] = {
      {op::kConv2dForward, &Conv2dForwardKernel<true>},
      {op::kConv2dGradInput, &Conv2dGradInputKernel<true>},
      {op::kConv2dGradWeight, &Conv2dGradWeightKernel<true>},
      {op::kMaxPool2dForward, &MaxPoolForwardKernel},
      {op::kMaxPool2dGrad, &MaxPoolGradKernel},
      {op::kAvgPool2dForward, &AvgPoolForwardKernel},
      {op::kAvgPool2dGrad, &AvgPoolGradKernel},
      {op::kGlobalAvgPoolForward, &GlobalAvgPoolForwardKernel},
      {op::kGlobalAvgPoolGrad, &GlobalAvgPoolGradKernel},
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

absl::Status RegisterSpatialDefaultKernels(Registry* registry) {
  for (const char* algorithm : {kDefaultAlgorithm, kAtomicAlgorithm}) {
    LS_RETURN_IF_ERROR(
        registry->Register(KernelKey{op::kConv2dGradWeight, Mode::kDefault,
                                     algorithm, kCpuBackendName},
                           &Conv2dGradWeightAtomicKernel));
  }
  return absl::OkStatus();
}

}  // namespace cpu_internal
}  // namespace lockstep::kernels
