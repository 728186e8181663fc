// Tensor-level checks of the spatial ops' arguments, shared by every backend
// (kernels/cpu, kernels/cuda): rank and dtype, expected shapes, and the
// geometry structs of kernels/spatial built from Tensors and OpAttrs.
// Errors are INVALID_ARGUMENT naming the op, the argument and the limit.
// Thread-safe (pure functions).
#ifndef LOCKSTEP_KERNELS_SPATIAL_TENSOR_SHAPES_H_
#define LOCKSTEP_KERNELS_SPATIAL_TENSOR_SHAPES_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"
#include "kernels/spatial/conv2d.h"
#include "kernels/spatial/pool2d.h"
#include "kernels/spatial/resize_bilinear.h"
#include "kernels/tensor.h"

namespace lockstep::spatial {

using ::lockstep::kernels::OpAttrs;
using ::lockstep::kernels::Tensor;

absl::Status CheckNchw(absl::string_view op, const Tensor& t,
                       absl::string_view name);

absl::Status ExpectShape(absl::string_view op, const Tensor& t,
                         const std::vector<int64_t>& shape,
                         absl::string_view name);

// Conv geometry from the NCHW input x, the OIHW weight w and the attributes.
// x_name / w_name: what the caller calls them (x or dx, w or dw).
absl::StatusOr<Conv2dShape> ConvShape(absl::string_view op, const Tensor& x,
                                      const Tensor& w, const OpAttrs& a,
                                      absl::string_view x_name,
                                      absl::string_view w_name);

std::vector<int64_t> ConvOutShape(const Conv2dShape& s);

// Pool geometry from the NCHW input (or input gradient) x.
absl::StatusOr<Pool2dShape> PoolShape(absl::string_view op, const Tensor& x,
                                      const OpAttrs& a, absl::string_view name);

std::vector<int64_t> PoolOutShape(const Pool2dShape& s);

// A whole conv2d.* call, as every backend checks it before computing:
// arity, ranks, dtypes, shapes and aliasing, in that order. op is
// conv2d.forward (in {x, w}, out {y}), conv2d.grad_input (in {dy, w},
// out {dx}) or conv2d.grad_weight (in {x, dy}, out {dw}), or a
// conv_transpose2d.* op with the same arguments: then the shape returned is
// that of the conv2d whose input gradient the transposed convolution is
// (its input is y, dy; its output x). Anything else is INVALID_ARGUMENT.
absl::StatusOr<Conv2dShape> ValidateConv2dCall(absl::string_view op,
                                               absl::Span<const Tensor> in,
                                               absl::Span<Tensor> out,
                                               const OpAttrs& a);

// The same for max_pool2d.forward / avg_pool2d.forward (in {x}, out {y}),
// max_pool2d.grad (in {x, dy}, out {dx}) and avg_pool2d.grad (in {dy},
// out {dx}).
absl::StatusOr<Pool2dShape> ValidatePool2dCall(absl::string_view op,
                                               absl::Span<const Tensor> in,
                                               absl::Span<Tensor> out,
                                               const OpAttrs& a);

// Global pooling: x [N, C, H, W]; y [N, C] or [N, C, 1, 1].
absl::StatusOr<GlobalPool2dShape> GlobalShape(absl::string_view op,
                                              const Tensor& x, const Tensor& y,
                                              absl::string_view x_name,
                                              absl::string_view y_name);

// Resize: small [N, C, H, W] and large [N, C, OH, OW] (either way round).
absl::StatusOr<ResizeBilinearShape> ResizeShape(absl::string_view op,
                                                const Tensor& x,
                                                const Tensor& y,
                                                absl::string_view x_name,
                                                absl::string_view y_name);

}  // namespace lockstep::spatial

#endif  // LOCKSTEP_KERNELS_SPATIAL_TENSOR_SHAPES_H_
