// Validation of the op set v3 graph primitives' kernel calls, shared by the
// CPU backend (kernels/cpu/graph_data_kernels.cc,
// graph_elementwise_kernels.cc) and the CUDA plan (kernels/cuda/plan.cc),
// so both refuse the same calls with the same messages; and the host plan
// of the broadcast-gradient reduction (SumToPlan) both run.
//
// Each ValidateXxxCall checks one kernel call completely (arity, dtypes,
// shapes, attrs, indices, aliasing) in the CPU kernel's order and returns
// what the kernel needs; INVALID_ARGUMENT otherwise, before anything is
// written.
#ifndef LOCKSTEP_KERNELS_OPS_GRAPH_VALIDATE_H_
#define LOCKSTEP_KERNELS_OPS_GRAPH_VALIDATE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "kernels/ops/graph_data.h"
#include "kernels/ops/graph_elementwise.h"
#include "kernels/tensor.h"

namespace lockstep::kernels {

// ---- data ops (kernels/graph_ops.h) ---------------------------------------

// constant, parameter.forward, parameter.grad: in {x}, out {y}, float32,
// the same element count.
absl::Status ValidateCopyCall(absl::Span<const Tensor> in,
                              absl::Span<Tensor> out);

// gather.forward, slice.forward: in {x [A, V, B], idx int32 [P]}, out
// {y [A, P, B]}, every index in [0, V).
absl::StatusOr<canonical::GatherShape> ValidateGatherForwardCall(
    absl::string_view op, absl::Span<const Tensor> in, absl::Span<Tensor> out);

// gather.grad, slice.grad: in {idx [P], dy [A, P, B]}, out {dx [A, V, B]};
// slice.grad's positions must increase.
absl::StatusOr<canonical::GatherShape> ValidateGatherGradCall(
    absl::string_view op, absl::Span<const Tensor> in, absl::Span<Tensor> out);

// concat.forward (in: the parts, out {whole}) and concat.grad (in {whole},
// out: the parts): the offset of each part along C.
absl::StatusOr<std::vector<int64_t>> ValidateConcatCall(
    absl::string_view op, absl::Span<const Tensor> in, absl::Span<Tensor> out);

// ---- broadcasting ops (kernels/ops/graph_elementwise.h) -------------------

// binary.forward and compare: in {a, b}, out {y}; the broadcast of a and b.
absl::StatusOr<canonical::BroadcastShape> ValidateBinaryForwardCall(
    absl::Span<const Tensor> in, absl::Span<Tensor> out, const OpAttrs& a);
absl::StatusOr<canonical::BroadcastShape> ValidateCompareCall(
    absl::Span<const Tensor> in, absl::Span<Tensor> out, const OpAttrs& a);
// where.forward: in {cond, a, b}, out {y}.
absl::StatusOr<canonical::BroadcastShape> ValidateWhereForwardCall(
    absl::Span<const Tensor> in, absl::Span<Tensor> out);
// binary.grad: in {a, b, dy}, out {da, db}; the broadcast of a and b.
absl::StatusOr<canonical::BroadcastShape> ValidateBinaryGradCall(
    absl::Span<const Tensor> in, absl::Span<Tensor> out, const OpAttrs& a);
// where.grad: in {cond, dy}, out {da, db}; the broadcast of cond, da, db.
absl::StatusOr<canonical::BroadcastShape> ValidateWhereGradCall(
    absl::Span<const Tensor> in, absl::Span<Tensor> out);
// unary.forward (in {x}, out {y}) and unary.grad (in {x, dy}, out {dx}).
absl::Status ValidateUnaryCall(bool grad, absl::Span<const Tensor> in,
                               absl::Span<Tensor> out, const OpAttrs& a);

// reduce.forward (in {x}, out {y}) and reduce.grad (in {dy}, out {dx}).
struct ReduceCall {
  std::vector<int64_t> kept;  // x's shape with the reduced axes as 1
  bool mean = false;
  float count = 1.0f;  // the number of reduced elements (MEAN's divisor)
  // reduce.grad only: dy (viewed with shape `kept`) broadcast to dx.
  canonical::BroadcastShape grad;
};
absl::StatusOr<ReduceCall> ValidateReduceForwardCall(
    absl::Span<const Tensor> in, absl::Span<Tensor> out, const OpAttrs& a);
absl::StatusOr<ReduceCall> ValidateReduceGradCall(absl::Span<const Tensor> in,
                                                  absl::Span<Tensor> out,
                                                  const OpAttrs& a);

// The reduction of a y-shaped (contiguous) tensor to the shape of x, where
// x broadcasts to y (canonical::SumToElement's arguments): per x element its
// base offset in y, and the offsets of its terms in row-major order of the
// reduced axes.
struct SumToPlan {
  int64_t n = 0;  // terms per output
  std::vector<int64_t> out_base;
  std::vector<int64_t> term_offset;
  bool identity = false;  // x has y's element layout: no reduction at all
};
SumToPlan PlanSumTo(absl::Span<const int64_t> y, absl::Span<const int64_t> x);

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_OPS_GRAPH_VALIDATE_H_
