// Host-side validation of the spatial ops' shapes.
//
// The LS_HD element functions in conv2d.h, pool2d.h and resize_bilinear.h do
// no checking (they run on GPUs, one call per output element). Callers check
// a shape once with the matching function here before calling any of them;
// an OK status guarantees that every index the element functions compute is
// in range, that no size computation overflows int64_t, and that every
// integer the arithmetic converts to float (divisors, coordinates) is exact.
//
// Errors are INVALID_ARGUMENT with a message naming the op, the field and the
// limit, e.g. "conv2d: stride_h must be >= 1, got 0". Thread-safe (pure).
#ifndef LOCKSTEP_KERNELS_SPATIAL_VALIDATE_H_
#define LOCKSTEP_KERNELS_SPATIAL_VALIDATE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/spatial/conv2d.h"
#include "kernels/spatial/pool2d.h"
#include "kernels/spatial/resize_bilinear.h"

namespace lockstep::spatial {

// Largest value of any single size, stride, padding or dilation field.
inline constexpr int64_t kMaxSpatialDim = int64_t{1} << 24;
// Largest number of elements of any tensor (input, weight, output).
inline constexpr int64_t kMaxSpatialElements = int64_t{1} << 40;
// Largest resize input/output extent: float(o) + 0.5f must be exact.
inline constexpr int64_t kMaxResizeDim = int64_t{1} << 23;
// Largest averaging divisor (KH * KW, H * W): float(divisor) must be exact.
inline constexpr int64_t kMaxPoolDivisor = int64_t{1} << 24;

// n, c_in, h, w, c_out, k_h, k_w, strides, dilations, groups >= 1; pads >= 0;
// all <= kMaxSpatialDim; groups divides c_in and c_out; the dilated kernel
// fits the padded input on both axes (so OH, OW >= 1); every tensor has at
// most kMaxSpatialElements elements. Padding may exceed the kernel extent
// (such outputs read only zeros).
absl::Status ValidateConv2dShape(const Conv2dShape& s);

// n, c, h, w, k_h, k_w, strides >= 1; pads >= 0 and each pad < its kernel
// extent (every window holds a real tap); the kernel fits the padded input;
// k_h * k_w <= kMaxPoolDivisor; tensors <= kMaxSpatialElements elements.
// Used for both max and average pooling.
absl::Status ValidatePool2dShape(const Pool2dShape& s);

// n, c, h, w >= 1; h * w <= kMaxPoolDivisor; <= kMaxSpatialElements elements.
absl::Status ValidateGlobalPool2dShape(const GlobalPool2dShape& s);

// n, c >= 1; 1 <= in_h, in_w, out_h, out_w <= kMaxResizeDim; tensors <=
// kMaxSpatialElements elements.
absl::Status ValidateResizeBilinearShape(const ResizeBilinearShape& s);

}  // namespace lockstep::spatial

#endif  // LOCKSTEP_KERNELS_SPATIAL_VALIDATE_H_
