#include "model/plan_graph.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "kernels/ops/embedding.h"
#include "kernels/tensor.h"
#include "model/check.h"

namespace lockstep::model::internal {
namespace {

namespace v1 = ::lockstep::v1;

// Shape checks of CONSTANT and PARAMETER: rank <= kMaxRank, every dimension
// 1..max_dim, at most `max_elements` elements. Returns the element count.
absl::StatusOr<int64_t> CheckValueShape(
    absl::string_view field,
    const google::protobuf::RepeatedField<int64_t>& shape, const Limits& limits,
    int64_t max_elements) {
  if (shape.size() > kernels::kMaxRank) {
    return Invalid(absl::StrFormat("%s: rank %d exceeds the limit of %d", field,
                                   shape.size(), kernels::kMaxRank));
  }
  int64_t elements = 1;
  for (int d = 0; d < shape.size(); ++d) {
    LS_RETURN_IF_ERROR(CheckRange(absl::StrFormat("%s[%d]", field, d),
                                  shape.Get(d), 1, limits.max_dim));
    if (elements > max_elements / shape.Get(d)) {
      return Invalid(absl::StrFormat(
          "%s: %s exceeds the limit of %d elements", field,
          ShapeToString(std::vector<int64_t>(shape.begin(), shape.end())),
          max_elements));
    }
    elements *= shape.Get(d);
  }
  return elements;
}

absl::Status CheckElements(const std::vector<int64_t>& shape,
                           const Limits& limits) {
  int64_t p = 1;
  for (const int64_t d : shape) {
    if (d != 0 && p > limits.max_tensor_elements / d) {
      return Invalid(
          absl::StrFormat("output %s exceeds the limit of %d "
                          "elements",
                          ShapeToString(shape), limits.max_tensor_elements));
    }
    p *= d;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> NormalizeAxis(absl::string_view field, int64_t axis,
                                  int rank, bool batched, bool allow_batch) {
  if (axis < -rank || axis >= rank) {
    return Invalid(
        absl::StrFormat("%s: %d is outside %d..%d (the input has "
                        "rank %d)",
                        field, axis, -rank, rank - 1, rank));
  }
  const int a = static_cast<int>(axis < 0 ? axis + rank : axis);
  if (a == 0 && batched && !allow_batch) {
    return Invalid(absl::StrFormat(
        "%s: %d is the batch axis of a batched input, which this op cannot "
        "use",
        field, axis));
  }
  return a;
}

absl::Status PlanConstant(const v1::Layer& layer, const Limits& limits,
                          LayerPlan* lp) {
  const v1::ConstantParams& p = layer.constant();
  LS_ASSIGN_OR_RETURN(const int64_t elements,
                      CheckValueShape("constant.shape", p.shape(), limits,
                                      std::min(kMaxConstantElements,
                                               limits.max_tensor_elements)));
  if (p.values_size() != elements) {
    return Invalid(absl::StrFormat(
        "constant.values: %d values for constant.shape %s, which holds %d",
        p.values_size(),
        ShapeToString(std::vector<int64_t>(p.shape().begin(), p.shape().end())),
        elements));
  }
  for (int k = 0; k < p.values_size(); ++k) {
    if (!std::isfinite(p.values(k))) {
      return Invalid(absl::StrFormat("constant.values[%d]: %g is not finite", k,
                                     p.values(k)));
    }
  }
  lp->batched = false;
  lp->output_shape.assign(p.shape().begin(), p.shape().end());
  lp->constant_values.assign(p.values().begin(), p.values().end());
  return absl::OkStatus();
}

absl::Status PlanParameter(const v1::Layer& layer, const Limits& limits,
                           LayerPlan* lp, ParamPlan* param) {
  const v1::ParameterParams& p = layer.parameter();
  LS_RETURN_IF_ERROR(CheckValueShape("parameter.shape", p.shape(), limits,
                                     limits.max_tensor_elements)
                         .status());
  if (!v1::ParameterInit_IsValid(p.init())) {
    return Invalid(absl::StrFormat(
        "parameter.init: %d is not a known ParameterInit", p.init()));
  }
  lp->batched = false;
  lp->output_shape.assign(p.shape().begin(), p.shape().end());
  param->name = "value";
  param->role = v1::WEIGHT;
  param->shape = lp->output_shape;
  const size_t r = param->shape.size();
  if (r == 0) {
    param->fan_in = param->fan_out = 1;
  } else if (r == 1) {
    param->fan_in = param->fan_out = param->shape[0];
  } else {
    param->fan_in = param->shape[r - 2];
    param->fan_out = param->shape[r - 1];
  }
  param->init_zeros = p.init() == v1::ZEROS;
  param->init_ones = p.init() == v1::ONES;
  return absl::OkStatus();
}

absl::Status PlanGather(const v1::Layer& layer, absl::Span<const GraphInput> in,
                        const Limits& limits, LayerPlan* lp) {
  const GraphInput& data = in[0];
  const GraphInput& idx = in[1];
  const int rank = static_cast<int>(data.shape.size());
  if (rank < 1) {
    return Invalid(absl::StrFormat(
        "GATHER needs data of rank >= 1, got a scalar from %s", data.name));
  }
  LS_ASSIGN_OR_RETURN(const int axis,
                      NormalizeAxis("gather.axis", layer.gather().axis(), rank,
                                    data.batched, /*allow_batch=*/false));
  const int64_t v = data.shape[axis];
  if (idx.model_input) {
    if (data.batched || axis != 0) {
      return Invalid(absl::StrFormat(
          "GATHER of the model input's token ids needs unbatched data (a "
          "PARAMETER table [V, D]) and gather.axis 0, got %s data %s with "
          "gather.axis %d",
          data.batched ? "batched" : "unbatched", ShapeToString(data.shape),
          layer.gather().axis()));
    }
    if (v > canonical::kMaxEmbeddingVocab) {
      return Invalid(absl::StrFormat(
          "GATHER data %s from %s: %d rows exceeds the limit of %d",
          ShapeToString(data.shape), data.name, v,
          canonical::kMaxEmbeddingVocab));
    }
  } else if (idx.constant == nullptr) {
    return Invalid(absl::StrFormat(
        "GATHER's indices (input 1) must be the model input's token ids or a "
        "CONSTANT, got %s",
        idx.name));
  } else {
    const v1::ConstantParams& c = idx.constant->constant();
    for (int k = 0; k < c.values_size(); ++k) {
      const float f = c.values(k);
      if (f != std::floor(f) || f < -static_cast<double>(v) ||
          f >= static_cast<double>(v)) {
        return Invalid(absl::StrFormat(
            "GATHER index %g (value %d of %s) is not a whole number in "
            "%d..%d (data %s along gather.axis %d)",
            f, k, idx.name, -v, v - 1, ShapeToString(data.shape), axis));
      }
      const int64_t w = static_cast<int64_t>(f);
      lp->indices.push_back(static_cast<int32_t>(w < 0 ? w + v : w));
    }
  }
  std::vector<int64_t> out(data.shape.begin(), data.shape.begin() + axis);
  out.insert(out.end(), idx.shape.begin(), idx.shape.end());
  out.insert(out.end(), data.shape.begin() + axis + 1, data.shape.end());
  if (out.size() > static_cast<size_t>(kernels::kMaxRank)) {
    return Invalid(
        absl::StrFormat("GATHER output %s: rank %d exceeds the "
                        "limit of %d",
                        ShapeToString(out), out.size(), kernels::kMaxRank));
  }
  LS_RETURN_IF_ERROR(CheckElements(out, limits));
  lp->axis = axis;
  lp->batched = data.batched || idx.batched;
  lp->output_shape = std::move(out);
  return absl::OkStatus();
}

absl::Status PlanConcat(const v1::Layer& layer, absl::Span<const GraphInput> in,
                        LayerPlan* lp) {
  const GraphInput& first = in[0];
  const int rank = static_cast<int>(first.shape.size());
  if (rank < 1) {
    return Invalid(absl::StrFormat("CONCAT cannot join scalars (%s is %s)",
                                   first.name, ShapeToString(first.shape)));
  }
  LS_ASSIGN_OR_RETURN(const int axis,
                      NormalizeAxis("concat.axis", layer.concat().axis(), rank,
                                    first.batched, /*allow_batch=*/false));
  std::vector<int64_t> out = first.shape;
  for (size_t k = 1; k < in.size(); ++k) {
    const GraphInput& g = in[k];
    if (g.batched != first.batched) {
      return Invalid(absl::StrFormat(
          "CONCAT inputs must be all batched or all unbatched: %s is %s, %s "
          "is %s",
          first.name, first.batched ? "batched" : "unbatched", g.name,
          g.batched ? "batched" : "unbatched"));
    }
    bool same = g.shape.size() == first.shape.size();
    for (int d = 0; same && d < rank; ++d) {
      same = d == axis || g.shape[d] == first.shape[d];
    }
    if (!same) {
      return Invalid(absl::StrFormat(
          "CONCAT inputs must have one rank and equal dimensions except "
          "along concat.axis %d: %s is %s, %s is %s",
          axis, first.name, ShapeToString(first.shape), g.name,
          ShapeToString(g.shape)));
    }
    out[axis] += g.shape[axis];  // each <= max_dim, at most 256 inputs
  }
  lp->axis = axis;
  lp->batched = first.batched;
  lp->output_shape = std::move(out);
  return absl::OkStatus();
}

absl::Status PlanSlice(const v1::Layer& layer, absl::Span<const GraphInput> in,
                       LayerPlan* lp) {
  const v1::SliceParams& p = layer.slice();
  const GraphInput& x = in[0];
  const int rank = static_cast<int>(x.shape.size());
  if (rank < 1) {
    return Invalid(absl::StrFormat("SLICE cannot slice a scalar (%s is %s)",
                                   x.name, ShapeToString(x.shape)));
  }
  LS_ASSIGN_OR_RETURN(const int axis,
                      NormalizeAxis("slice.axis", p.axis(), rank, x.batched,
                                    /*allow_batch=*/false));
  if (p.step() < 0) {
    return Invalid(absl::StrFormat(
        "slice.step: %d must be positive (0 means 1)", p.step()));
  }
  const int64_t step = p.step() == 0 ? 1 : p.step();
  const int64_t dim = x.shape[axis];
  auto clamp = [dim](int64_t v) {
    if (v < 0) v = v < -dim ? 0 : v + dim;
    return v > dim ? dim : v;
  };
  const int64_t start = clamp(p.start());
  const int64_t end = clamp(p.end());
  for (int64_t pos = start; pos < end; pos += step) {
    lp->indices.push_back(static_cast<int32_t>(pos));
    if (step > end - pos) break;
  }
  if (lp->indices.empty()) {
    return Invalid(absl::StrFormat(
        "slice.start %d, slice.end %d select nothing of %s's dimension %d "
        "(size %d, clamped to %d..%d)",
        p.start(), p.end(), x.name, axis, dim, start, end));
  }
  lp->axis = axis;
  lp->batched = x.batched;
  lp->output_shape = x.shape;
  lp->output_shape[axis] = static_cast<int64_t>(lp->indices.size());
  return absl::OkStatus();
}

absl::Status PlanMatMulUnbatched(const v1::MatmulParams& p,
                                 absl::Span<const GraphInput> in,
                                 const Limits& limits, LayerPlan* lp) {
  const GraphInput& a = in[0];
  const GraphInput& b = in[1];
  const std::string inputs = absl::StrFormat(
      "%s is %s %s, %s is %s %s", a.name, a.batched ? "batched" : "unbatched",
      ShapeToString(a.shape), b.name, b.batched ? "batched" : "unbatched",
      ShapeToString(b.shape));
  if (a.batched && !b.batched) {
    if (a.shape.size() < 3 || b.shape.size() != 2) {
      return Invalid(absl::StrFormat(
          "inputs: MATMUL of a batched and an unbatched input needs a of rank "
          ">= 3 ([N, ..., M, K]) and an unbatched b of rank 2 ([K, N']): %s",
          inputs));
    }
    if (p.transpose_a()) {
      return Invalid(absl::StrFormat(
          "matmul.transpose_a: must be false when b is unbatched: %s", inputs));
    }
    lp->last_axis = true;
  } else if (!a.batched && !b.batched) {
    if (a.shape.size() < 2 || a.shape.size() != b.shape.size()) {
      return Invalid(absl::StrFormat(
          "inputs: MATMUL of two unbatched inputs needs one rank >= 2: %s",
          inputs));
    }
    for (size_t d = 0; d + 2 < a.shape.size(); ++d) {
      if (a.shape[d] != b.shape[d]) {
        return Invalid(absl::StrFormat(
            "inputs: MATMUL's leading dimensions must be equal; dimension %d "
            "differs: %s",
            d, inputs));
      }
    }
    lp->batched = false;
  } else {
    return Invalid(absl::StrFormat(
        "inputs: MATMUL of an unbatched a and a batched b is not supported "
        "(swap the operands with transposes): %s",
        inputs));
  }
  const size_t ra = a.shape.size();
  const size_t rb = b.shape.size();
  const int64_t m = p.transpose_a() ? a.shape[ra - 1] : a.shape[ra - 2];
  const int64_t ka = p.transpose_a() ? a.shape[ra - 2] : a.shape[ra - 1];
  const int64_t kb = p.transpose_b() ? b.shape[rb - 1] : b.shape[rb - 2];
  const int64_t n = p.transpose_b() ? b.shape[rb - 2] : b.shape[rb - 1];
  if (ka != kb) {
    return Invalid(absl::StrFormat(
        "inputs: MATMUL's inner dimensions differ: op(a) has K = %d, op(b) "
        "has K = %d (matmul.transpose_a = %d, matmul.transpose_b = %d): %s",
        ka, kb, p.transpose_a(), p.transpose_b(), inputs));
  }
  lp->output_shape.assign(a.shape.begin(), a.shape.end() - 2);
  lp->output_shape.push_back(m);
  lp->output_shape.push_back(n);
  return CheckElements(lp->output_shape, limits);
}

}  // namespace lockstep::model::internal
