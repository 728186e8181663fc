#include "kernels/spatial/tensor_shapes.h"

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "kernels/ops/validate.h"
#include "kernels/spatial/validate.h"

namespace lockstep::spatial {

using ::lockstep::kernels::DType;
using ::lockstep::kernels::ShapeString;

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

// Conv geometry from the NCHW input x, the OIHW weight w and the attributes.
// x_name / w_name: what the caller calls them (x or dx, w or dw).
absl::StatusOr<Conv2dShape> ConvShape(absl::string_view op, const Tensor& x,
                                      const Tensor& w, const OpAttrs& a,
                                      absl::string_view x_name,
                                      absl::string_view w_name) {
  LS_RETURN_IF_ERROR(CheckNchw(op, x, x_name));
  LS_RETURN_IF_ERROR(CheckNchw(op, w, w_name));
  Conv2dShape s;
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
  LS_RETURN_IF_ERROR(ValidateConv2dShape(s));
  return s;
}

std::vector<int64_t> ConvOutShape(const Conv2dShape& s) {
  return {s.n, s.c_out, Conv2dOutH(s), Conv2dOutW(s)};
}

// Pool geometry from the NCHW input (or input gradient) x.
absl::StatusOr<Pool2dShape> PoolShape(absl::string_view op, const Tensor& x,
                                      const OpAttrs& a,
                                      absl::string_view name) {
  LS_RETURN_IF_ERROR(CheckNchw(op, x, name));
  Pool2dShape s;
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
  LS_RETURN_IF_ERROR(ValidatePool2dShape(s));
  return s;
}

std::vector<int64_t> PoolOutShape(const Pool2dShape& s) {
  return {s.n, s.c, Pool2dOutH(s), Pool2dOutW(s)};
}

// Global pooling: x [N, C, H, W]; y [N, C] or [N, C, 1, 1].
absl::StatusOr<GlobalPool2dShape> GlobalShape(absl::string_view op,
                                              const Tensor& x, const Tensor& y,
                                              absl::string_view x_name,
                                              absl::string_view y_name) {
  LS_RETURN_IF_ERROR(CheckNchw(op, x, x_name));
  GlobalPool2dShape s;
  s.n = x.dim(0);
  s.c = x.dim(1);
  s.h = x.dim(2);
  s.w = x.dim(3);
  LS_RETURN_IF_ERROR(ValidateGlobalPool2dShape(s));
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

// Resize: small [N, C, H, W] and large [N, C, OH, OW] (either way round).
absl::StatusOr<ResizeBilinearShape> ResizeShape(absl::string_view op,
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
  ResizeBilinearShape s;
  s.n = x.dim(0);
  s.c = x.dim(1);
  s.in_h = x.dim(2);
  s.in_w = x.dim(3);
  s.out_h = y.dim(2);
  s.out_w = y.dim(3);
  LS_RETURN_IF_ERROR(ValidateResizeBilinearShape(s));
  return s;
}

absl::StatusOr<Conv2dShape> ValidateConv2dCall(absl::string_view op,
                                               absl::Span<const Tensor> in,
                                               absl::Span<Tensor> out,
                                               const OpAttrs& a) {
  namespace kop = ::lockstep::kernels::op;
  LS_RETURN_IF_ERROR(kernels::CheckArity(op, in, 2, out, 1));
  Conv2dShape s;
  if (op == kop::kConv2dForward) {
    LS_ASSIGN_OR_RETURN(s, ConvShape(op, in[0], in[1], a, "x", "w"));
    LS_RETURN_IF_ERROR(CheckNchw(op, out[0], "y"));
    LS_RETURN_IF_ERROR(ExpectShape(op, out[0], ConvOutShape(s), "y"));
  } else if (op == kop::kConv2dGradInput) {
    LS_ASSIGN_OR_RETURN(s, ConvShape(op, out[0], in[1], a, "dx", "w"));
    LS_RETURN_IF_ERROR(CheckNchw(op, in[0], "dy"));
    LS_RETURN_IF_ERROR(ExpectShape(op, in[0], ConvOutShape(s), "dy"));
  } else if (op == kop::kConv2dGradWeight) {
    LS_ASSIGN_OR_RETURN(s, ConvShape(op, in[0], out[0], a, "x", "dw"));
    LS_RETURN_IF_ERROR(CheckNchw(op, in[1], "dy"));
    LS_RETURN_IF_ERROR(ExpectShape(op, in[1], ConvOutShape(s), "dy"));
  } else if (op == kop::kConvTranspose2dForward) {
    // s is the conv2d over y whose input gradient this is.
    LS_ASSIGN_OR_RETURN(s, ConvShape(op, out[0], in[1], a, "y", "w"));
    LS_RETURN_IF_ERROR(CheckNchw(op, in[0], "x"));
    LS_RETURN_IF_ERROR(ExpectShape(op, in[0], ConvOutShape(s), "x"));
  } else if (op == kop::kConvTranspose2dGradInput) {
    LS_ASSIGN_OR_RETURN(s, ConvShape(op, in[0], in[1], a, "dy", "w"));
    LS_RETURN_IF_ERROR(CheckNchw(op, out[0], "dx"));
    LS_RETURN_IF_ERROR(ExpectShape(op, out[0], ConvOutShape(s), "dx"));
  } else if (op == kop::kConvTranspose2dGradWeight) {
    LS_ASSIGN_OR_RETURN(s, ConvShape(op, in[1], out[0], a, "dy", "dw"));
    LS_RETURN_IF_ERROR(CheckNchw(op, in[0], "x"));
    LS_RETURN_IF_ERROR(ExpectShape(op, in[0], ConvOutShape(s), "x"));
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: not a conv2d op", op));
  }
  LS_RETURN_IF_ERROR(kernels::CheckNoAlias(op, in, out));
  return s;
}

absl::StatusOr<Pool2dShape> ValidatePool2dCall(absl::string_view op,
                                               absl::Span<const Tensor> in,
                                               absl::Span<Tensor> out,
                                               const OpAttrs& a) {
  namespace kop = ::lockstep::kernels::op;
  Pool2dShape s;
  if (op == kop::kMaxPool2dForward || op == kop::kAvgPool2dForward) {
    LS_RETURN_IF_ERROR(kernels::CheckArity(op, in, 1, out, 1));
    LS_ASSIGN_OR_RETURN(s, PoolShape(op, in[0], a, "x"));
    LS_RETURN_IF_ERROR(CheckNchw(op, out[0], "y"));
    LS_RETURN_IF_ERROR(ExpectShape(op, out[0], PoolOutShape(s), "y"));
  } else if (op == kop::kMaxPool2dGrad) {
    LS_RETURN_IF_ERROR(kernels::CheckArity(op, in, 2, out, 1));
    LS_ASSIGN_OR_RETURN(s, PoolShape(op, in[0], a, "x"));
    LS_RETURN_IF_ERROR(CheckNchw(op, in[1], "dy"));
    LS_RETURN_IF_ERROR(ExpectShape(op, in[1], PoolOutShape(s), "dy"));
    LS_RETURN_IF_ERROR(ExpectShape(op, out[0], in[0].shape(), "dx"));
  } else if (op == kop::kAvgPool2dGrad) {
    LS_RETURN_IF_ERROR(kernels::CheckArity(op, in, 1, out, 1));
    LS_ASSIGN_OR_RETURN(s, PoolShape(op, out[0], a, "dx"));
    LS_RETURN_IF_ERROR(CheckNchw(op, in[0], "dy"));
    LS_RETURN_IF_ERROR(ExpectShape(op, in[0], PoolOutShape(s), "dy"));
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: not a max_pool2d / avg_pool2d op", op));
  }
  LS_RETURN_IF_ERROR(kernels::CheckNoAlias(op, in, out));
  return s;
}

}  // namespace lockstep::spatial
