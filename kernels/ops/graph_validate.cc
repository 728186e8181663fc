#include "kernels/ops/graph_validate.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "kernels/graph_ops.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/validate.h"

namespace lockstep::kernels {
namespace {

namespace c = ::lockstep::canonical;

absl::Status NeedFloat(absl::string_view op, absl::string_view name,
                       const Tensor& t) {
  if (t.dtype() != DType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s must be float32, got %s", op, name, t.DebugString()));
  }
  return absl::OkStatus();
}

// ---- data ops ---------------------------------------------------------------

// x [A, V, B] float32, idx int32 [P] with every index in [0, V), y
// [A, P, B] float32 (x/dx and y/dy by role).
absl::StatusOr<c::GatherShape> ValidateGather(absl::string_view op,
                                              const Tensor& x,
                                              const Tensor& idx,
                                              const Tensor& y) {
  LS_RETURN_IF_ERROR(NeedFloat(op, "x", x));
  LS_RETURN_IF_ERROR(NeedFloat(op, "y", y));
  if (x.rank() != 3 || y.rank() != 3 || idx.rank() != 1 ||
      idx.dtype() != DType::kInt32 || x.dim(0) != y.dim(0) ||
      x.dim(2) != y.dim(2) || idx.dim(0) != y.dim(1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: needs x [A, V, B], int32 indices [P] and y [A, P, B], got x %s, "
        "indices %s, y %s",
        op, x.DebugString(), idx.DebugString(), y.DebugString()));
  }
  c::GatherShape s{x.dim(0), x.dim(1), idx.dim(0), x.dim(2)};
  if (s.v > c::kMaxEmbeddingVocab) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: V = %d exceeds the limit of %d", op, s.v, c::kMaxEmbeddingVocab));
  }
  const int32_t* ids = idx.data<int32_t>();
  for (int64_t p = 0; p < s.p; ++p) {
    if (ids[p] < 0 || ids[p] >= s.v) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: index %d at position %d is outside [0, %d)", op,
                          ids[p], p, s.v));
    }
  }
  return s;
}

// The parts [A, C_k, B] of a whole [A, C, B]: checks shapes, returns the
// offsets of each part along C.
absl::StatusOr<std::vector<int64_t>> ValidateConcat(
    absl::string_view op, absl::Span<const Tensor> parts, const Tensor& whole) {
  LS_RETURN_IF_ERROR(NeedFloat(op, "y", whole));
  if (parts.size() < 2 || whole.rank() != 3) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: needs two or more parts [A, C_k, B] and a whole [A, C, B], got "
        "%d parts and %s",
        op, parts.size(), whole.DebugString()));
  }
  std::vector<int64_t> offsets;
  int64_t c = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    const Tensor& t = parts[k];
    LS_RETURN_IF_ERROR(NeedFloat(op, absl::StrFormat("part %d", k), t));
    if (t.rank() != 3 || t.dim(0) != whole.dim(0) || t.dim(2) != whole.dim(2)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: part %d %s does not fit the whole %s", op, k,
                          t.DebugString(), whole.DebugString()));
    }
    offsets.push_back(c);
    c += t.dim(1);
  }
  if (c != whole.dim(1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: the parts add up to %d along C, the whole %s has "
                        "%d",
                        op, c, whole.DebugString(), whole.dim(1)));
  }
  return offsets;
}

// ---- broadcasting ops -------------------------------------------------------

// The NumPy broadcast of `operands` (right-aligned; a dimension of 1
// repeats); y must have exactly that shape.
absl::StatusOr<c::BroadcastShape> Broadcast(
    absl::string_view op, absl::Span<const Tensor* const> operands,
    absl::Span<const absl::string_view> names, const Tensor& y,
    absl::string_view y_name) {
  c::BroadcastShape s;
  s.num_operands = static_cast<int>(operands.size());
  int rank = 0;
  for (size_t k = 0; k < operands.size(); ++k) {
    LS_RETURN_IF_ERROR(NeedFloat(op, names[k], *operands[k]));
    rank = std::max(rank, operands[k]->rank());
  }
  std::vector<int64_t> dims(rank, 1);
  for (size_t k = 0; k < operands.size(); ++k) {
    const Tensor& t = *operands[k];
    const int off = rank - t.rank();
    for (int d = 0; d < t.rank(); ++d) {
      const int64_t v = t.dim(d);
      if (v == dims[off + d] || v == 1) continue;
      if (dims[off + d] == 1) {
        dims[off + d] = v;
        continue;
      }
      std::vector<std::string> shapes;
      for (size_t j = 0; j < operands.size(); ++j) {
        shapes.push_back(
            absl::StrCat(names[j], " ", ShapeString(operands[j]->shape())));
      }
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: shapes do not broadcast (aligned on the right, each dimension "
          "equal or 1): %s",
          op, absl::StrJoin(shapes, ", ")));
    }
  }
  LS_RETURN_IF_ERROR(NeedFloat(op, y_name, y));
  if (y.shape() != dims) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s must have the broadcast shape %s, got %s", op,
                        y_name, ShapeString(dims), ShapeString(y.shape())));
  }
  s.rank = rank;
  s.numel = y.numel();
  for (int d = 0; d < rank; ++d) s.dims[d] = dims[d];
  for (size_t k = 0; k < operands.size(); ++k) {
    const Tensor& t = *operands[k];
    const int off = rank - t.rank();
    int64_t stride = 1;
    for (int d = t.rank() - 1; d >= 0; --d) {
      s.strides[k][off + d] = t.dim(d) == 1 ? 0 : stride;
      stride *= t.dim(d);
    }
  }
  return s;
}

absl::Status CheckKind(absl::string_view op, int kind, int max) {
  if (kind < 1 || kind > max) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: attrs.graph_kind %d is outside 1 .. %d", op, kind, max));
  }
  return absl::OkStatus();
}

// binary.forward and compare.
absl::StatusOr<c::BroadcastShape> TwoOperandCall(const char* op, int max_kind,
                                                 absl::Span<const Tensor> in,
                                                 absl::Span<Tensor> out,
                                                 const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op, in, 2, out, 1));
  LS_RETURN_IF_ERROR(CheckKind(op, a.graph_kind, max_kind));
  const Tensor* ops[] = {&in[0], &in[1]};
  const absl::string_view names[] = {"a", "b"};
  LS_ASSIGN_OR_RETURN(c::BroadcastShape s,
                      Broadcast(op, ops, names, out[0], "y"));
  LS_RETURN_IF_ERROR(CheckNoAlias(op, in, out));
  return s;
}

// The gradient outputs of a broadcasting op: outputs[k] must have the
// shape of the operand it belongs to.
absl::Status CheckGradShapes(absl::string_view op, absl::Span<Tensor> out,
                             absl::Span<const Tensor* const> operands,
                             absl::Span<const absl::string_view> names) {
  for (size_t k = 0; k < out.size(); ++k) {
    LS_RETURN_IF_ERROR(NeedFloat(op, names[k], out[k]));
    if (out[k].shape() != operands[k]->shape()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s must have its operand's shape %s, got %s", op, names[k],
          ShapeString(operands[k]->shape()), ShapeString(out[k].shape())));
    }
  }
  if (out.size() == 2 && out[0].SharesStorageWith(out[1]) &&
      out[0].numel() > 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s and %s share storage", op, names[0], names[1]));
  }
  return absl::OkStatus();
}

// x's shape with the reduced axes kept as 1, and y's expected shape.
absl::StatusOr<std::vector<int64_t>> ReduceKeptShape(absl::string_view op,
                                                     const Tensor& x,
                                                     const Tensor& y,
                                                     const OpAttrs& a) {
  LS_RETURN_IF_ERROR(NeedFloat(op, "x", x));
  LS_RETURN_IF_ERROR(NeedFloat(op, "y", y));
  LS_RETURN_IF_ERROR(CheckKind(op, a.graph_kind, 2));
  if (x.rank() < 32 && (a.reduce_axes >> x.rank()) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: attrs.reduce_axes 0x%x names an axis beyond x's rank %d", op,
        a.reduce_axes, x.rank()));
  }
  std::vector<int64_t> kept, want;
  for (int d = 0; d < x.rank(); ++d) {
    const bool r = (a.reduce_axes >> d) & 1u;
    kept.push_back(r ? 1 : x.dim(d));
    if (!r || a.reduce_keepdims) want.push_back(r ? 1 : x.dim(d));
  }
  if (y.shape() != want) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: y must have shape %s (x %s reduced over attrs.reduce_axes 0x%x, "
        "keepdims %d), got %s",
        op, ShapeString(want), ShapeString(x.shape()), a.reduce_axes,
        a.reduce_keepdims, ShapeString(y.shape())));
  }
  return kept;
}

// x (or dx) and the call's attrs: what both reduce ops need.
ReduceCall ReduceCallOf(const Tensor& x, const OpAttrs& a,
                        std::vector<int64_t> kept) {
  ReduceCall r;
  r.kept = std::move(kept);
  r.mean = static_cast<c::ReduceKind>(a.graph_kind) == c::ReduceKind::kMean;
  int64_t n = 1;
  for (int d = 0; d < x.rank(); ++d) {
    if ((a.reduce_axes >> d) & 1u) n *= x.dim(d);
  }
  r.count = static_cast<float>(n);
  return r;
}

// The offset in y of every index over `axes` (row-major over them, the
// other axes at 0).
std::vector<int64_t> OffsetsOver(const std::vector<int>& axes,
                                 absl::Span<const int64_t> y,
                                 const std::vector<int64_t>& ystride) {
  int64_t count = 1;
  for (int d : axes) count *= y[d];
  std::vector<int64_t> out(count);
  for (int64_t k = 0; k < count; ++k) {
    int64_t r = k, o = 0;
    for (int i = static_cast<int>(axes.size()) - 1; i >= 0; --i) {
      o += (r % y[axes[i]]) * ystride[axes[i]];
      r /= y[axes[i]];
    }
    out[k] = o;
  }
  return out;
}

}  // namespace

absl::Status ValidateCopyCall(absl::Span<const Tensor> in,
                              absl::Span<Tensor> out) {
  LS_RETURN_IF_ERROR(CheckArity("copy", in, 1, out, 1));
  LS_RETURN_IF_ERROR(NeedFloat("copy", "x", in[0]));
  LS_RETURN_IF_ERROR(NeedFloat("copy", "y", out[0]));
  if (in[0].numel() != out[0].numel()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("copy: x %s and y %s differ in element count",
                        in[0].DebugString(), out[0].DebugString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<c::GatherShape> ValidateGatherForwardCall(
    absl::string_view op, absl::Span<const Tensor> in, absl::Span<Tensor> out) {
  LS_RETURN_IF_ERROR(CheckArity(op, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(c::GatherShape s,
                      ValidateGather(op, in[0], in[1], out[0]));
  LS_RETURN_IF_ERROR(CheckNoAlias(op, in, out));
  return s;
}

absl::StatusOr<c::GatherShape> ValidateGatherGradCall(
    absl::string_view op, absl::Span<const Tensor> in, absl::Span<Tensor> out) {
  LS_RETURN_IF_ERROR(CheckArity(op, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(c::GatherShape s,
                      ValidateGather(op, out[0], in[0], in[1]));
  LS_RETURN_IF_ERROR(CheckNoAlias(op, in, out));
  if (op == op::kSliceGrad) {
    const int32_t* ids = in[0].data<int32_t>();
    for (int64_t p = 1; p < s.p; ++p) {
      if (ids[p] <= ids[p - 1]) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "slice.grad: positions must increase, got %d after %d at %d",
            ids[p], ids[p - 1], p));
      }
    }
  }
  return s;
}

absl::StatusOr<std::vector<int64_t>> ValidateConcatCall(
    absl::string_view op, absl::Span<const Tensor> in, absl::Span<Tensor> out) {
  if (op == op::kConcatForward) {
    if (out.size() != 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "concat.forward: expected 1 output, got %d", out.size()));
    }
    LS_ASSIGN_OR_RETURN(std::vector<int64_t> offsets,
                        ValidateConcat(op, in, out[0]));
    LS_RETURN_IF_ERROR(CheckNoAlias(op, in, out));
    return offsets;
  }
  if (in.size() != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "concat.grad: expected 1 input (dy), got %d", in.size()));
  }
  LS_ASSIGN_OR_RETURN(
      std::vector<int64_t> offsets,
      ValidateConcat(op, absl::Span<const Tensor>(out.data(), out.size()),
                     in[0]));
  LS_RETURN_IF_ERROR(CheckNoAlias(op, in, out));
  return offsets;
}

absl::StatusOr<c::BroadcastShape> ValidateBinaryForwardCall(
    absl::Span<const Tensor> in, absl::Span<Tensor> out, const OpAttrs& a) {
  return TwoOperandCall(op::kBinaryForward, 7, in, out, a);
}

absl::StatusOr<c::BroadcastShape> ValidateCompareCall(
    absl::Span<const Tensor> in, absl::Span<Tensor> out, const OpAttrs& a) {
  return TwoOperandCall(op::kCompare, 5, in, out, a);
}

absl::StatusOr<c::BroadcastShape> ValidateWhereForwardCall(
    absl::Span<const Tensor> in, absl::Span<Tensor> out) {
  LS_RETURN_IF_ERROR(CheckArity(op::kWhereForward, in, 3, out, 1));
  const Tensor* ops[] = {&in[0], &in[1], &in[2]};
  const absl::string_view names[] = {"cond", "a", "b"};
  LS_ASSIGN_OR_RETURN(c::BroadcastShape s,
                      Broadcast(op::kWhereForward, ops, names, out[0], "y"));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kWhereForward, in, out));
  return s;
}

absl::StatusOr<c::BroadcastShape> ValidateBinaryGradCall(
    absl::Span<const Tensor> in, absl::Span<Tensor> out, const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op::kBinaryGrad, in, 3, out, 2));
  LS_RETURN_IF_ERROR(CheckKind(op::kBinaryGrad, a.graph_kind, 7));
  const Tensor* ops[] = {&in[0], &in[1]};
  const absl::string_view names[] = {"a", "b"};
  LS_ASSIGN_OR_RETURN(c::BroadcastShape s,
                      Broadcast(op::kBinaryGrad, ops, names, in[2], "dy"));
  const absl::string_view gnames[] = {"da", "db"};
  LS_RETURN_IF_ERROR(CheckGradShapes(op::kBinaryGrad, out, ops, gnames));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kBinaryGrad, in, out));
  return s;
}

absl::StatusOr<c::BroadcastShape> ValidateWhereGradCall(
    absl::Span<const Tensor> in, absl::Span<Tensor> out) {
  LS_RETURN_IF_ERROR(CheckArity(op::kWhereGrad, in, 2, out, 2));
  const Tensor* ops[] = {&in[0], &out[0], &out[1]};
  const absl::string_view names[] = {"cond", "da", "db"};
  LS_ASSIGN_OR_RETURN(c::BroadcastShape s,
                      Broadcast(op::kWhereGrad, ops, names, in[1], "dy"));
  if (out[0].SharesStorageWith(out[1]) && out[0].numel() > 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: da and db share storage", op::kWhereGrad));
  }
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kWhereGrad, in, out));
  return s;
}

absl::Status ValidateUnaryCall(bool grad, absl::Span<const Tensor> in,
                               absl::Span<Tensor> out, const OpAttrs& a) {
  const char* op = grad ? op::kUnaryGrad : op::kUnaryForward;
  LS_RETURN_IF_ERROR(CheckArity(op, in, grad ? 2 : 1, out, 1));
  LS_RETURN_IF_ERROR(CheckKind(op, a.graph_kind, 8));
  if (grad) {
    const Tensor* t[] = {&in[0], &in[1], &out[0]};
    const absl::string_view names[] = {"x", "dy", "dx"};
    LS_RETURN_IF_ERROR(ValidateSameShapeFloat(op, t, names));
  } else {
    const Tensor* t[] = {&in[0], &out[0]};
    const absl::string_view names[] = {"x", "y"};
    LS_RETURN_IF_ERROR(ValidateSameShapeFloat(op, t, names));
  }
  return CheckNoAlias(op, in, out);
}

absl::StatusOr<ReduceCall> ValidateReduceForwardCall(
    absl::Span<const Tensor> in, absl::Span<Tensor> out, const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op::kReduceForward, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(std::vector<int64_t> kept,
                      ReduceKeptShape(op::kReduceForward, in[0], out[0], a));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kReduceForward, in, out));
  return ReduceCallOf(in[0], a, std::move(kept));
}

absl::StatusOr<ReduceCall> ValidateReduceGradCall(absl::Span<const Tensor> in,
                                                  absl::Span<Tensor> out,
                                                  const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op::kReduceGrad, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(std::vector<int64_t> kept,
                      ReduceKeptShape(op::kReduceGrad, out[0], in[0], a));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kReduceGrad, in, out));
  LS_ASSIGN_OR_RETURN(Tensor dy_kept, in[0].Reshape(kept));
  const Tensor* ops[] = {&dy_kept, &out[0]};
  const absl::string_view names[] = {"dy", "dx"};
  LS_ASSIGN_OR_RETURN(c::BroadcastShape s,
                      Broadcast(op::kReduceGrad, ops, names, out[0], "dx"));
  ReduceCall r = ReduceCallOf(out[0], a, std::move(kept));
  r.grad = s;
  return r;
}

SumToPlan PlanSumTo(absl::Span<const int64_t> y, absl::Span<const int64_t> x) {
  const int rank = static_cast<int>(y.size());
  const int off = rank - static_cast<int>(x.size());
  std::vector<int64_t> ystride(rank, 1);
  for (int d = rank - 2; d >= 0; --d) ystride[d] = ystride[d + 1] * y[d + 1];
  std::vector<int> kept, reduced;
  for (int d = 0; d < rank; ++d) {
    const int64_t xd = d < off ? 1 : x[d - off];
    if (xd == 1 && y[d] != 1) {
      reduced.push_back(d);
    } else {
      kept.push_back(d);
    }
  }
  SumToPlan p;
  p.identity = reduced.empty();
  if (p.identity) return p;
  p.term_offset = OffsetsOver(reduced, y, ystride);
  p.n = static_cast<int64_t>(p.term_offset.size());
  p.out_base = OffsetsOver(kept, y, ystride);
  return p;
}

}  // namespace lockstep::kernels
