#include "model/plan_graph_elementwise.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "kernels/tensor.h"

namespace lockstep::model {
namespace {

namespace v1 = ::lockstep::v1;

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

std::string DescribeInputs(absl::Span<const GraphInput> inputs) {
  std::vector<std::string> parts;
  for (const GraphInput& in : inputs) {
    parts.push_back(absl::StrFormat("%s is %s%s", in.name,
                                    ShapeToString(in.shape),
                                    in.batched ? "" : " (unbatched)"));
  }
  return absl::StrJoin(parts, ", ");
}

// The broadcast output shape of `inputs` (see the header's rules).
absl::Status Broadcast(absl::string_view op,
                       absl::Span<const GraphInput> inputs, LayerPlan* lp) {
  size_t rank = 0;
  bool batched = false;
  for (const GraphInput& in : inputs) {
    rank = std::max(rank, in.shape.size());
    batched = batched || in.batched;
  }
  if (batched) {
    for (const GraphInput& in : inputs) {
      if (in.batched && in.shape.size() != rank) {
        return Invalid(absl::StrFormat(
            "inputs: a batched %s input must have the output's rank %d (its "
            "axis 0 is the batch axis), but %s has rank %d: %s",
            op, rank, in.name, in.shape.size(), DescribeInputs(inputs)));
      }
      if (!in.batched && in.shape.size() == rank && in.shape[0] != 1) {
        return Invalid(absl::StrFormat(
            "inputs: the unbatched %s has %d on the batch axis 0 of the %s "
            "output; it must be 1 (or leave the axis out): %s",
            in.name, in.shape[0], op, DescribeInputs(inputs)));
      }
    }
  }
  std::vector<int64_t> out(rank, 1);
  for (const GraphInput& in : inputs) {
    const size_t off = rank - in.shape.size();
    for (size_t d = 0; d < in.shape.size(); ++d) {
      const int64_t v = in.shape[d];
      if (v == out[off + d] || v == 1) continue;
      if (out[off + d] != 1) {
        return Invalid(absl::StrFormat(
            "inputs: %s inputs do not broadcast (shapes aligned on the right, "
            "each dimension equal or 1; output dimension %d is %d, another "
            "input has %d): %s",
            op, off + d, out[off + d], v, DescribeInputs(inputs)));
      }
      out[off + d] = v;
    }
  }
  if (rank > static_cast<size_t>(kernels::kMaxRank)) {
    return Invalid(
        absl::StrFormat("inputs: %s output rank %d exceeds the "
                        "limit of %d",
                        op, rank, kernels::kMaxRank));
  }
  lp->output_shape = std::move(out);
  lp->batched = batched;
  return absl::OkStatus();
}

template <typename IsValid, typename Name>
absl::Status CheckKind(absl::string_view field, int kind, int max,
                       IsValid is_valid, Name name) {
  if (kind >= 1 && kind <= max && is_valid(kind)) return absl::OkStatus();
  std::vector<std::string> names;
  for (int k = 1; k <= max; ++k) names.push_back(name(k));
  return Invalid(absl::StrFormat("%s: %d is not one of %s (1 .. %d)", field,
                                 kind, absl::StrJoin(names, ", "), max));
}

absl::Status PlanReduce(const v1::ReduceParams& p, const GraphInput& in,
                        LayerPlan* lp) {
  if (!v1::ReduceKind_IsValid(p.kind())) {
    return Invalid(absl::StrFormat(
        "reduce.kind: %d is not REDUCE_SUM (1) or REDUCE_MEAN (2)", p.kind()));
  }
  const int rank = static_cast<int>(in.shape.size());
  const int first = in.batched ? 1 : 0;
  uint32_t axes = 0;
  for (int k = 0; k < p.axes_size(); ++k) {
    const int32_t a = p.axes(k);
    if (a < -rank || a >= rank) {
      return Invalid(absl::StrFormat(
          "reduce.axes[%d]: %d is outside %d .. %d (the input %s from %s has "
          "rank %d)",
          k, a, -rank, rank - 1, ShapeToString(in.shape), in.name, rank));
    }
    const int axis = a < 0 ? a + rank : a;
    if (axis < first) {
      return Invalid(absl::StrFormat(
          "reduce.axes[%d]: %d is the batch axis 0 of the input %s from %s; "
          "the batch axis cannot be reduced",
          k, a, ShapeToString(in.shape), in.name));
    }
    if ((axes >> axis) & 1u) {
      return Invalid(absl::StrFormat(
          "reduce.axes[%d]: %d names axis %d a second time; axes must be "
          "distinct",
          k, a, axis));
    }
    axes |= 1u << axis;
  }
  if (p.axes_size() == 0) {
    for (int d = first; d < rank; ++d) axes |= 1u << d;
  }
  std::vector<int64_t> out;
  for (int d = 0; d < rank; ++d) {
    const bool r = (axes >> d) & 1u;
    if (!r) {
      out.push_back(in.shape[d]);
    } else if (p.keepdims()) {
      out.push_back(1);
    }
  }
  lp->output_shape = std::move(out);
  lp->batched = in.batched;
  lp->attrs.graph_kind = p.kind() == v1::REDUCE_MEAN ? 2 : 1;
  lp->attrs.reduce_axes = axes;
  lp->attrs.reduce_keepdims = p.keepdims();
  return absl::OkStatus();
}

}  // namespace

absl::Status PlanGraphElementwise(const v1::Layer& layer,
                                  absl::Span<const GraphInput> inputs,
                                  LayerPlan* lp) {
  switch (layer.op()) {
    case v1::BINARY: {
      const int kind = layer.binary().kind();
      LS_RETURN_IF_ERROR(
          CheckKind("binary.kind", kind, 7, v1::BinaryKind_IsValid,
                    [](int k) { return v1::BinaryKind_Name(k); }));
      lp->attrs.graph_kind = kind;
      return Broadcast("BINARY", inputs, lp);
    }
    case v1::COMPARE: {
      const int kind = layer.compare().kind();
      LS_RETURN_IF_ERROR(
          CheckKind("compare.kind", kind, 5, v1::CompareKind_IsValid,
                    [](int k) { return v1::CompareKind_Name(k); }));
      lp->attrs.graph_kind = kind;
      return Broadcast("COMPARE", inputs, lp);
    }
    case v1::WHERE:
      return Broadcast("WHERE", inputs, lp);
    case v1::UNARY: {
      const int kind = layer.unary().kind();
      LS_RETURN_IF_ERROR(
          CheckKind("unary.kind", kind, 8, v1::UnaryKind_IsValid,
                    [](int k) { return v1::UnaryKind_Name(k); }));
      lp->attrs.graph_kind = kind;
      lp->output_shape = inputs[0].shape;
      lp->batched = inputs[0].batched;
      return absl::OkStatus();
    }
    case v1::REDUCE:
      return PlanReduce(layer.reduce(), inputs[0], lp);
    default:
      return Invalid(absl::StrFormat("op: %s is not a broadcasting graph op",
                                     v1::LayerOp_Name(layer.op())));
  }
}

bool GraphInputTakesGradient(v1::LayerOp op, int input) {
  if (op == v1::COMPARE) return false;
  if (op == v1::WHERE) return input != 0;
  return true;
}

}  // namespace lockstep::model
