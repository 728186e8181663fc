#include "kernels/spatial/validate.h"

#include <cstdint>
#include <initializer_list>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace lockstep::spatial {
namespace {

absl::Status Invalid(absl::string_view op, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s", op, message));
}

// `field` must lie in [lo, hi].
absl::Status CheckRange(absl::string_view op, absl::string_view field,
                        int64_t value, int64_t lo, int64_t hi) {
  if (value < lo) {
    return Invalid(
        op, absl::StrFormat("%s must be >= %d, got %d", field, lo, value));
  }
  if (value > hi) {
    return Invalid(
        op, absl::StrFormat("%s must be <= %d, got %d", field, hi, value));
  }
  return absl::OkStatus();
}

// The product of `dims` (each in [1, kMaxSpatialDim]) must not exceed
// `limit`; checked factor by factor, so nothing overflows.
absl::Status CheckProduct(absl::string_view op, absl::string_view what,
                          std::initializer_list<int64_t> dims, int64_t limit) {
  int64_t product = 1;
  for (const int64_t d : dims) {
    if (product > limit / d) {
      return Invalid(
          op, absl::StrFormat("%s exceeds the limit of %d", what, limit));
    }
    product *= d;
  }
  return absl::OkStatus();
}

// The window of `extent` taps must fit the padded input of `padded` rows or
// columns, so the output has at least one element on this axis.
absl::Status CheckFits(absl::string_view op, absl::string_view axis,
                       int64_t extent, int64_t padded) {
  if (extent > padded) {
    return Invalid(
        op, absl::StrFormat("kernel extent %d along %s is larger than the "
                            "padded input (%d); the output would be empty",
                            extent, axis, padded));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateConv2dShape(const Conv2dShape& s) {
  constexpr absl::string_view kOp = "conv2d";
  const int64_t kMax = kMaxSpatialDim;
  for (const auto& [field, value] : {std::pair<const char*, int64_t>{"n", s.n},
                                     {"c_in", s.c_in},
                                     {"h", s.h},
                                     {"w", s.w},
                                     {"c_out", s.c_out},
                                     {"k_h", s.k_h},
                                     {"k_w", s.k_w},
                                     {"stride_h", s.stride_h},
                                     {"stride_w", s.stride_w},
                                     {"dilation_h", s.dilation_h},
                                     {"dilation_w", s.dilation_w},
                                     {"groups", s.groups}}) {
    LS_RETURN_IF_ERROR(CheckRange(kOp, field, value, 1, kMax));
  }
  for (const auto& [field, value] :
       {std::pair<const char*, int64_t>{"pad_top", s.pad_top},
        {"pad_bottom", s.pad_bottom},
        {"pad_left", s.pad_left},
        {"pad_right", s.pad_right}}) {
    LS_RETURN_IF_ERROR(CheckRange(kOp, field, value, 0, kMax));
  }
  if (s.c_in % s.groups != 0) {
    return Invalid(kOp, absl::StrFormat("groups (%d) must divide c_in (%d)",
                                        s.groups, s.c_in));
  }
  if (s.c_out % s.groups != 0) {
    return Invalid(kOp, absl::StrFormat("groups (%d) must divide c_out (%d)",
                                        s.groups, s.c_out));
  }
  // All fields are <= 2^24, so these stay far below 2^63.
  LS_RETURN_IF_ERROR(CheckFits(kOp, "h", s.dilation_h * (s.k_h - 1) + 1,
                               s.h + s.pad_top + s.pad_bottom));
  LS_RETURN_IF_ERROR(CheckFits(kOp, "w", s.dilation_w * (s.k_w - 1) + 1,
                               s.w + s.pad_left + s.pad_right));
  const int64_t out_h = Conv2dOutH(s);
  const int64_t out_w = Conv2dOutW(s);
  LS_RETURN_IF_ERROR(CheckProduct(kOp, "input elements n*c_in*h*w",
                                  {s.n, s.c_in, s.h, s.w},
                                  kMaxSpatialElements));
  LS_RETURN_IF_ERROR(CheckProduct(
      kOp, "weight elements c_out*(c_in/groups)*k_h*k_w",
      {s.c_out, s.c_in / s.groups, s.k_h, s.k_w}, kMaxSpatialElements));
  LS_RETURN_IF_ERROR(CheckProduct(kOp, "output elements n*c_out*out_h*out_w",
                                  {s.n, s.c_out, out_h, out_w},
                                  kMaxSpatialElements));
  return absl::OkStatus();
}

absl::Status ValidatePool2dShape(const Pool2dShape& s) {
  constexpr absl::string_view kOp = "pool2d";
  const int64_t kMax = kMaxSpatialDim;
  for (const auto& [field, value] : {std::pair<const char*, int64_t>{"n", s.n},
                                     {"c", s.c},
                                     {"h", s.h},
                                     {"w", s.w},
                                     {"k_h", s.k_h},
                                     {"k_w", s.k_w},
                                     {"stride_h", s.stride_h},
                                     {"stride_w", s.stride_w}}) {
    LS_RETURN_IF_ERROR(CheckRange(kOp, field, value, 1, kMax));
  }
  // A pad >= the kernel extent would make a window of padding only.
  for (const auto& [field, pad, kernel, kernel_field] :
       {std::tuple<const char*, int64_t, int64_t, const char*>{
            "pad_top", s.pad_top, s.k_h, "k_h"},
        {"pad_bottom", s.pad_bottom, s.k_h, "k_h"},
        {"pad_left", s.pad_left, s.k_w, "k_w"},
        {"pad_right", s.pad_right, s.k_w, "k_w"}}) {
    if (pad < 0) {
      return Invalid(kOp,
                     absl::StrFormat("%s must be >= 0, got %d", field, pad));
    }
    if (pad >= kernel) {
      return Invalid(
          kOp, absl::StrFormat("%s (%d) must be < %s (%d): a window would "
                               "hold only padding",
                               field, pad, kernel_field, kernel));
    }
  }
  LS_RETURN_IF_ERROR(
      CheckFits(kOp, "h", s.k_h, s.h + s.pad_top + s.pad_bottom));
  LS_RETURN_IF_ERROR(
      CheckFits(kOp, "w", s.k_w, s.w + s.pad_left + s.pad_right));
  LS_RETURN_IF_ERROR(CheckProduct(kOp, "window size k_h*k_w", {s.k_h, s.k_w},
                                  kMaxPoolDivisor));
  LS_RETURN_IF_ERROR(CheckProduct(kOp, "input elements n*c*h*w",
                                  {s.n, s.c, s.h, s.w}, kMaxSpatialElements));
  LS_RETURN_IF_ERROR(CheckProduct(kOp, "output elements n*c*out_h*out_w",
                                  {s.n, s.c, Pool2dOutH(s), Pool2dOutW(s)},
                                  kMaxSpatialElements));
  return absl::OkStatus();
}

absl::Status ValidateGlobalPool2dShape(const GlobalPool2dShape& s) {
  constexpr absl::string_view kOp = "global_avg_pool2d";
  for (const auto& [field, value] : {std::pair<const char*, int64_t>{"n", s.n},
                                     {"c", s.c},
                                     {"h", s.h},
                                     {"w", s.w}}) {
    LS_RETURN_IF_ERROR(CheckRange(kOp, field, value, 1, kMaxSpatialDim));
  }
  LS_RETURN_IF_ERROR(
      CheckProduct(kOp, "plane size h*w", {s.h, s.w}, kMaxPoolDivisor));
  LS_RETURN_IF_ERROR(CheckProduct(kOp, "input elements n*c*h*w",
                                  {s.n, s.c, s.h, s.w}, kMaxSpatialElements));
  return absl::OkStatus();
}

absl::Status ValidateResizeBilinearShape(const ResizeBilinearShape& s) {
  constexpr absl::string_view kOp = "resize_bilinear";
  LS_RETURN_IF_ERROR(CheckRange(kOp, "n", s.n, 1, kMaxSpatialDim));
  LS_RETURN_IF_ERROR(CheckRange(kOp, "c", s.c, 1, kMaxSpatialDim));
  for (const auto& [field, value] :
       {std::pair<const char*, int64_t>{"in_h", s.in_h},
        {"in_w", s.in_w},
        {"out_h", s.out_h},
        {"out_w", s.out_w}}) {
    LS_RETURN_IF_ERROR(CheckRange(kOp, field, value, 1, kMaxResizeDim));
  }
  LS_RETURN_IF_ERROR(CheckProduct(kOp, "input elements n*c*in_h*in_w",
                                  {s.n, s.c, s.in_h, s.in_w},
                                  kMaxSpatialElements));
  LS_RETURN_IF_ERROR(CheckProduct(kOp, "output elements n*c*out_h*out_w",
                                  {s.n, s.c, s.out_h, s.out_w},
                                  kMaxSpatialElements));
  return absl::OkStatus();
}

}  // namespace lockstep::spatial
