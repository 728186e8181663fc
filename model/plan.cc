#include "model/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "kernels/ops/embedding.h"
#include "kernels/spatial/validate.h"
#include "model/check.h"
#include "model/plan_graph.h"
#include "model/plan_graph_elementwise.h"

namespace lockstep::model {
namespace {

namespace v1 = ::lockstep::v1;
using ::lockstep::model::internal::CheckRange;
using ::lockstep::model::internal::Invalid;
using ::lockstep::model::internal::kMaxLossBatch;
using ::lockstep::model::internal::Quote;

constexpr size_t kMaxLayerNameLength = 64;
constexpr size_t kMaxModelNameLength = 256;
constexpr int kMaxInputRank = 3;  // without the batch dimension

// The product of `dims` (each >= 0), or -1 when it exceeds `limit` (checked
// factor by factor, so nothing overflows).
int64_t ProductWithin(absl::Span<const int64_t> dims, int64_t limit) {
  int64_t product = 1;
  for (const int64_t d : dims) {
    if (d < 0) return -1;
    if (d != 0 && product > limit / d) return -1;
    product *= d;
  }
  return product;
}

int64_t SatMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    return std::numeric_limits<int64_t>::max();
  }
  return r;
}

int64_t SatAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) {
    return std::numeric_limits<int64_t>::max();
  }
  return r;
}

int64_t SatProduct(absl::Span<const int64_t> dims) {
  int64_t p = 1;
  for (const int64_t d : dims) p = SatMul(p, d);
  return p;
}

bool IsValidLayerName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxLayerNameLength) return false;
  for (const char c : name) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// The fields of lockstep.v1.Layer's params oneof, as written in specs.
absl::string_view ParamsCaseName(v1::Layer::ParamsCase c) {
  switch (c) {
    case v1::Layer::kDense:
      return "dense";
    case v1::Layer::kConv2D:
      return "conv2d";
    case v1::Layer::kPool:
      return "pool";
    case v1::Layer::kResize:
      return "resize";
    case v1::Layer::kBatchNorm:
      return "batch_norm";
    case v1::Layer::kEmbedding:
      return "embedding";
    case v1::Layer::kDropout:
      return "dropout";
    case v1::Layer::kMatmul:
      return "matmul";
    case v1::Layer::kTranspose:
      return "transpose";
    case v1::Layer::kReshape:
      return "reshape";
    case v1::Layer::kSoftmax:
      return "softmax";
    case v1::Layer::kConstant:
      return "constant";
    case v1::Layer::kParameter:
      return "parameter";
    case v1::Layer::kGather:
      return "gather";
    case v1::Layer::kConcat:
      return "concat";
    case v1::Layer::kSlice:
      return "slice";
    case v1::Layer::kBinary:
      return "binary";
    case v1::Layer::kUnary:
      return "unary";
    case v1::Layer::kCompare:
      return "compare";
    case v1::Layer::kReduce:
      return "reduce";
    case v1::Layer::PARAMS_NOT_SET:
      break;
    default:
      break;
  }
  return "none";
}

// The params a known op needs (PARAMS_NOT_SET: none).
v1::Layer::ParamsCase ParamsFor(v1::LayerOp op) {
  switch (op) {
    case v1::DENSE:
      return v1::Layer::kDense;
    case v1::CONV2D:
    case v1::CONV_TRANSPOSE2D:
      return v1::Layer::kConv2D;
    case v1::MAX_POOL2D:
    case v1::AVG_POOL2D:
      return v1::Layer::kPool;
    case v1::RESIZE_BILINEAR:
      return v1::Layer::kResize;
    case v1::EMBEDDING:
      return v1::Layer::kEmbedding;
    case v1::DROPOUT:
      return v1::Layer::kDropout;
    case v1::TRANSPOSE:
      return v1::Layer::kTranspose;
    case v1::RESHAPE:
      return v1::Layer::kReshape;
    case v1::CONSTANT:
      return v1::Layer::kConstant;
    case v1::PARAMETER:
      return v1::Layer::kParameter;
    case v1::GATHER:
      return v1::Layer::kGather;
    case v1::CONCAT:
      return v1::Layer::kConcat;
    case v1::SLICE:
      return v1::Layer::kSlice;
    case v1::BINARY:
      return v1::Layer::kBinary;
    case v1::UNARY:
      return v1::Layer::kUnary;
    case v1::COMPARE:
      return v1::Layer::kCompare;
    case v1::REDUCE:
      return v1::Layer::kReduce;
    default:
      return v1::Layer::PARAMS_NOT_SET;
  }
}

// ---------------------------------------------------------------------------
// The model.

// Builds one ModelPlan; errors name the layer by index and name.
class Planner {
 public:
  Planner(const v1::Model& model, const v1::JobConfig& config,
          const Limits& limits)
      : model_(model), config_(config), limits_(limits) {}

  absl::StatusOr<ModelPlan> Run();

 private:
  // "layers[i] "name": <message>".
  absl::Status LayerError(int i, absl::string_view message) const {
    return Invalid(absl::StrFormat("layers[%d] %s: %s", i,
                                   Quote(model_.layers(i).name()), message));
  }
  // Prefixes a status from a helper with the layer.
  absl::Status Wrap(int i, const absl::Status& s) const {
    if (s.ok()) return s;
    return LayerError(i, s.message());
  }
  // "the model input" or "layer "x"" for messages.
  std::string ProducerName(int producer) const {
    if (producer == kModelInput) return "the model input";
    return absl::StrCat("layer ", Quote(model_.layers(producer).name()));
  }

  absl::Status CheckModelHeader();
  absl::Status CheckNames();
  absl::Status ResolveInputs(int i, LayerPlan* lp);
  absl::Status CheckOutputSize(int i, const std::vector<int64_t>& shape) const;
  absl::Status AddParam(int i, ParamPlan param, LayerPlan* lp);
  absl::Status AddScaleAndShift(int i, int64_t n, LayerPlan* lp);
  absl::Status PlanLayerNorm(int i, LayerPlan* lp);
  absl::Status PlanBatchNorm(int i, LayerPlan* lp);
  // Requires a 4-D input; returns its shape.
  absl::Status Need4d(int i, const LayerPlan& lp) const;

  absl::Status PlanDense(int i, LayerPlan* lp);
  // Range checks of the conv2d params shared by CONV2D and
  // CONV_TRANSPOSE2D.
  absl::Status CheckConvRanges(int i) const;
  // The weight (and bias) of the convolution s and its attrs; for
  // CONV_TRANSPOSE2D, s is the CONV2D whose input gradient it is.
  absl::Status AddConvParams(int i, const spatial::Conv2dShape& s,
                             LayerPlan* lp);
  absl::Status PlanConv2d(int i, LayerPlan* lp);
  absl::Status PlanConvTranspose2d(int i, LayerPlan* lp);
  absl::Status PlanPool2d(int i, LayerPlan* lp);
  absl::Status PlanGlobalAvgPool(int i, LayerPlan* lp);
  absl::Status PlanResize(int i, LayerPlan* lp);
  absl::Status PlanAdd(int i, LayerPlan* lp);
  absl::Status PlanBiasAdd(int i, LayerPlan* lp);
  absl::Status PlanLoss(int i, LayerPlan* lp);
  absl::Status PlanEmbedding(int i, LayerPlan* lp);
  absl::Status PlanMatMul(int i, LayerPlan* lp);
  absl::Status PlanTranspose(int i, LayerPlan* lp);
  absl::Status PlanReshape(int i, LayerPlan* lp);
  absl::Status PlanSoftmax(int i, LayerPlan* lp);
  absl::Status CheckTokenInput(int i, const LayerPlan& lp) const;
  std::vector<internal::GraphInput> GraphInputs(const LayerPlan& lp) const;
  absl::Status CheckDatasetKind() const;

  const v1::Model& model_;
  const v1::JobConfig& config_;
  const Limits& limits_;
  ModelPlan plan_;
  absl::flat_hash_map<absl::string_view, int> index_of_;
  std::vector<bool> consumed_;
};

absl::Status Planner::CheckModelHeader() {
  if (model_.name().size() > kMaxModelNameLength) {
    return Invalid(
        absl::StrFormat("model.name: %d bytes exceeds the limit of %d",
                        model_.name().size(), kMaxModelNameLength));
  }
  const int rank = model_.input_shape_size();
  if (rank < 1 || rank > kMaxInputRank) {
    return Invalid(absl::StrFormat(
        "model.input_shape: must have 1 to %d dimensions ([features] or "
        "[C, H, W], without the batch), got %d",
        kMaxInputRank, rank));
  }
  plan_.input_shape.push_back(config_.batch_size());
  for (int d = 0; d < rank; ++d) {
    LS_RETURN_IF_ERROR(CheckRange(absl::StrFormat("model.input_shape[%d]", d),
                                  model_.input_shape(d), 1, limits_.max_dim));
    plan_.input_shape.push_back(model_.input_shape(d));
  }
  if (ProductWithin(plan_.input_shape, limits_.max_tensor_elements) < 0) {
    return Invalid(absl::StrFormat(
        "model.input_shape: the batch %s exceeds the limit of %d elements",
        ShapeToString(plan_.input_shape), limits_.max_tensor_elements));
  }
  LS_RETURN_IF_ERROR(CheckRange("model.num_classes", model_.num_classes(), 2,
                                limits_.max_classes));
  if (!v1::Initializer_IsValid(model_.initializer())) {
    return Invalid(
        absl::StrFormat("model.initializer: %d is not a known Initializer",
                        model_.initializer()));
  }
  if (model_.layers_size() == 0) {
    return Invalid(
        "model.layers: the model has no layers; the last layer must be "
        "SOFTMAX_XENT");
  }
  if (model_.layers_size() > limits_.max_layers) {
    return Invalid(
        absl::StrFormat("model.layers: %d layers exceeds the limit of %d",
                        model_.layers_size(), limits_.max_layers));
  }
  return absl::OkStatus();
}

absl::Status Planner::CheckNames() {
  for (int i = 0; i < model_.layers_size(); ++i) {
    const std::string& name = model_.layers(i).name();
    if (name.empty()) return LayerError(i, "name: must not be empty");
    if (!IsValidLayerName(name)) {
      return LayerError(i,
                        absl::StrFormat("name: must match [A-Za-z0-9_.-]{1,%d}",
                                        kMaxLayerNameLength));
    }
    const auto [it, inserted] = index_of_.emplace(name, i);
    if (!inserted) {
      return LayerError(
          i, absl::StrFormat("name: duplicate of layers[%d]", it->second));
    }
  }
  return absl::OkStatus();
}

absl::Status Planner::ResolveInputs(int i, LayerPlan* lp) {
  const v1::Layer& layer = model_.layers(i);
  int wanted = layer.op() == v1::ADD || layer.op() == v1::MATMUL ||
                       layer.op() == v1::GATHER
                   ? 2
                   : 1;
  if (layer.op() == v1::CONSTANT || layer.op() == v1::PARAMETER) {
    if (layer.inputs_size() != 0) {
      return LayerError(i, absl::StrFormat("inputs: %s takes no inputs, got %d",
                                           v1::LayerOp_Name(layer.op()),
                                           layer.inputs_size()));
    }
    return absl::OkStatus();
  }
  if (layer.op() == v1::CONCAT) {
    if (layer.inputs_size() < 2 || layer.inputs_size() > limits_.max_layers) {
      return LayerError(
          i, absl::StrFormat("inputs: CONCAT needs 2 to %d inputs, got %d",
                             limits_.max_layers, layer.inputs_size()));
    }
    wanted = layer.inputs_size();
  }
  if (layer.op() == v1::BINARY || layer.op() == v1::COMPARE) wanted = 2;
  if (layer.op() == v1::WHERE) wanted = 3;
  // Checked before the names, so a huge list costs nothing.
  const int given = layer.inputs_size() == 0 ? 1 : layer.inputs_size();
  if (given != wanted) {
    return LayerError(
        i, absl::StrFormat("%s needs exactly %d input%s, got %d%s",
                           v1::LayerOp_Name(layer.op()), wanted,
                           wanted == 1 ? "" : "s", given,
                           layer.inputs_size() == 0
                               ? " (an empty inputs list means the previous "
                                 "layer)"
                               : ""));
  }
  if (layer.inputs_size() == 0) {
    lp->inputs.push_back(i == 0 ? kModelInput : i - 1);
  } else {
    for (const std::string& name : layer.inputs()) {
      if (name == kModelInputName) {
        lp->inputs.push_back(kModelInput);
        continue;
      }
      const auto it = index_of_.find(name);
      if (it == index_of_.end()) {
        return LayerError(i,
                          absl::StrCat("inputs: unknown layer ", Quote(name)));
      }
      if (it->second == i) {
        return LayerError(i, "inputs: a layer cannot take its own output");
      }
      if (it->second > i) {
        return LayerError(
            i, absl::StrFormat("inputs: layer %s is layers[%d], which comes "
                               "later; inputs must name earlier layers",
                               Quote(name), it->second));
      }
      lp->inputs.push_back(it->second);
    }
  }
  for (const int producer : lp->inputs) {
    if (producer == kModelInput) {
      lp->input_shapes.push_back(plan_.input_shape);
    } else {
      consumed_[producer] = true;
      lp->input_shapes.push_back(plan_.layers[producer].output_shape);
    }
  }
  // Only MATMUL, TRANSPOSE and the graph ops take unbatched inputs.
  if (layer.op() < v1::CONSTANT && layer.op() != v1::MATMUL &&
      layer.op() != v1::TRANSPOSE) {
    for (const int producer : lp->inputs) {
      if (producer != kModelInput && !plan_.layers[producer].batched) {
        return LayerError(
            i, absl::StrFormat("%s needs batched inputs, but %s is unbatched "
                               "(a CONSTANT, PARAMETER or graph op of those)",
                               v1::LayerOp_Name(layer.op()),
                               ProducerName(producer)));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Planner::CheckOutputSize(int i,
                                      const std::vector<int64_t>& shape) const {
  if (ProductWithin(shape, limits_.max_tensor_elements) < 0) {
    return LayerError(
        i, absl::StrFormat("output %s exceeds the limit of %d elements",
                           ShapeToString(shape), limits_.max_tensor_elements));
  }
  return absl::OkStatus();
}

absl::Status Planner::AddParam(int i, ParamPlan param, LayerPlan* lp) {
  const int64_t elements = ProductWithin(param.shape, limits_.max_parameters);
  if (elements < 0 ||
      plan_.parameter_count > limits_.max_parameters - elements) {
    return LayerError(
        i, absl::StrFormat("%s %s brings the parameter count over the limit "
                           "of %d",
                           param.name, ShapeToString(param.shape),
                           limits_.max_parameters));
  }
  plan_.parameter_count += elements;
  lp->params.push_back(std::move(param));
  return absl::OkStatus();
}

absl::Status Planner::Need4d(int i, const LayerPlan& lp) const {
  const std::vector<int64_t>& in = lp.input_shapes[0];
  if (in.size() != 4) {
    return LayerError(
        i, absl::StrFormat("%s needs a 4-D [N, C, H, W] input, got %s from %s",
                           v1::LayerOp_Name(lp.op), ShapeToString(in),
                           ProducerName(lp.inputs[0])));
  }
  return absl::OkStatus();
}

absl::Status Planner::PlanDense(int i, LayerPlan* lp) {
  const v1::DenseParams& p = model_.layers(i).dense();
  LS_RETURN_IF_ERROR(
      Wrap(i, CheckRange("dense.units", p.units(), 1, limits_.max_dim)));
  const std::vector<int64_t>& in = lp->input_shapes[0];
  const int64_t n = in[0];
  // Bounded by the input's element count, which was checked.
  int64_t features = SatProduct(absl::MakeConstSpan(in).subspan(1));
  lp->output_shape = {n, p.units()};
  if (p.last_axis()) {
    if (in.size() < 2) {
      return LayerError(
          i, absl::StrFormat("dense.last_axis needs an input of rank >= 2, "
                             "got %s from %s",
                             ShapeToString(in), ProducerName(lp->inputs[0])));
    }
    features = in.back();
    lp->output_shape = in;
    lp->output_shape.back() = p.units();
    lp->last_axis = true;
  }
  LS_RETURN_IF_ERROR(CheckOutputSize(i, lp->output_shape));
  ParamPlan w;
  w.name = "weight";
  w.role = v1::WEIGHT;
  w.shape = {features, p.units()};
  w.fan_in = features;
  w.fan_out = p.units();
  LS_RETURN_IF_ERROR(AddParam(i, std::move(w), lp));
  if (p.use_bias()) {
    ParamPlan b;
    b.name = "bias";
    b.role = v1::BIAS;
    b.shape = {p.units()};
    b.fan_in = features;
    b.fan_out = p.units();
    LS_RETURN_IF_ERROR(AddParam(i, std::move(b), lp));
  }
  lp->attrs.transpose_x = false;
  lp->attrs.transpose_w = false;
  return absl::OkStatus();
}

absl::Status Planner::CheckConvRanges(int i) const {
  const v1::Conv2dParams& p = model_.layers(i).conv2d();
  const int64_t kMax = limits_.max_dim;
  LS_RETURN_IF_ERROR(
      Wrap(i, CheckRange("conv2d.filters", p.filters(), 1, kMax)));
  LS_RETURN_IF_ERROR(
      Wrap(i, CheckRange("conv2d.kernel_h", p.kernel_h(), 1, kMax)));
  LS_RETURN_IF_ERROR(
      Wrap(i, CheckRange("conv2d.kernel_w", p.kernel_w(), 1, kMax)));
  LS_RETURN_IF_ERROR(
      Wrap(i, CheckRange("conv2d.stride_h", p.stride_h(), 0, kMax)));
  LS_RETURN_IF_ERROR(
      Wrap(i, CheckRange("conv2d.stride_w", p.stride_w(), 0, kMax)));
  LS_RETURN_IF_ERROR(Wrap(i, CheckRange("conv2d.pad_h", p.pad_h(), 0, kMax)));
  LS_RETURN_IF_ERROR(Wrap(i, CheckRange("conv2d.pad_w", p.pad_w(), 0, kMax)));
  LS_RETURN_IF_ERROR(
      Wrap(i, CheckRange("conv2d.dilation_h", p.dilation_h(), 0, kMax)));
  LS_RETURN_IF_ERROR(
      Wrap(i, CheckRange("conv2d.dilation_w", p.dilation_w(), 0, kMax)));
  LS_RETURN_IF_ERROR(Wrap(i, CheckRange("conv2d.groups", p.groups(), 0, kMax)));
  if (model_.layers(i).op() == v1::CONV2D) {
    for (const auto& [field, value] :
         {std::pair<const char*, int32_t>{"conv2d.output_padding_h",
                                          p.output_padding_h()},
          {"conv2d.output_padding_w", p.output_padding_w()}}) {
      if (value != 0) {
        return LayerError(
            i, absl::StrFormat("%s: %d must be 0 for CONV2D (only "
                               "CONV_TRANSPOSE2D has an output padding)",
                               field, value));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Planner::AddConvParams(int i, const spatial::Conv2dShape& s,
                                    LayerPlan* lp) {
  const bool transposed = model_.layers(i).op() == v1::CONV_TRANSPOSE2D;
  // CONV2D: [filters, in / groups, kh, kw] over its input s.c_in. The
  // transposed convolution's weight is that of the CONV2D whose input
  // gradient it is, s: [in, filters / groups, kh, kw]; its fans are those of
  // the weight tensor, as PyTorch counts them.
  ParamPlan w;
  w.name = "weight";
  w.role = v1::WEIGHT;
  w.shape = {s.c_out, s.c_in / s.groups, s.k_h, s.k_w};
  w.fan_in = SatProduct({s.c_in / s.groups, s.k_h, s.k_w});
  w.fan_out = SatProduct({s.c_out, s.k_h, s.k_w});
  const int64_t fan_in = w.fan_in;
  const int64_t fan_out = w.fan_out;
  LS_RETURN_IF_ERROR(AddParam(i, std::move(w), lp));
  if (model_.layers(i).conv2d().use_bias()) {
    ParamPlan b;
    b.name = "bias";
    b.role = v1::BIAS;
    b.shape = {transposed ? s.c_in : s.c_out};
    b.fan_in = fan_in;
    b.fan_out = fan_out;
    LS_RETURN_IF_ERROR(AddParam(i, std::move(b), lp));
  }
  kernels::OpAttrs& a = lp->attrs;
  a.kernel_h = s.k_h;
  a.kernel_w = s.k_w;
  a.stride_h = s.stride_h;
  a.stride_w = s.stride_w;
  a.pad_top = s.pad_top;
  a.pad_bottom = s.pad_bottom;
  a.pad_left = s.pad_left;
  a.pad_right = s.pad_right;
  a.dilation_h = s.dilation_h;
  a.dilation_w = s.dilation_w;
  a.groups = s.groups;
  return absl::OkStatus();
}

absl::Status Planner::PlanConv2d(int i, LayerPlan* lp) {
  const v1::Conv2dParams& p = model_.layers(i).conv2d();
  LS_RETURN_IF_ERROR(CheckConvRanges(i));
  LS_RETURN_IF_ERROR(Need4d(i, *lp));
  const std::vector<int64_t>& in = lp->input_shapes[0];

  spatial::Conv2dShape s;
  s.n = in[0];
  s.c_in = in[1];
  s.h = in[2];
  s.w = in[3];
  s.c_out = p.filters();
  s.k_h = p.kernel_h();
  s.k_w = p.kernel_w();
  s.stride_h = p.stride_h() == 0 ? 1 : p.stride_h();
  s.stride_w = p.stride_w() == 0 ? 1 : p.stride_w();
  s.pad_top = s.pad_bottom = p.pad_h();
  s.pad_left = s.pad_right = p.pad_w();
  s.dilation_h = p.dilation_h() == 0 ? 1 : p.dilation_h();
  s.dilation_w = p.dilation_w() == 0 ? 1 : p.dilation_w();
  s.groups = p.groups() == 0 ? 1 : p.groups();
  if (s.groups < 0 || s.groups > s.c_in || s.c_in % s.groups != 0 ||
      s.c_out % s.groups != 0) {
    return LayerError(
        i, absl::StrFormat("conv2d.groups: %d must divide both the input "
                           "channels (%d) and conv2d.filters (%d)",
                           p.groups(), s.c_in, s.c_out));
  }

  // All fields are <= 2^20 here, so nothing below overflows.
  for (const auto& [axis, k, dilation, size, pad, dil_field] :
       {std::tuple<const char*, int64_t, int64_t, int64_t, int64_t,
                   const char*>{"h", s.k_h, s.dilation_h, s.h, s.pad_top,
                                "dilation_h"},
        {"w", s.k_w, s.dilation_w, s.w, s.pad_left, "dilation_w"}}) {
    const int64_t extent = dilation * (k - 1) + 1;
    const int64_t padded = size + 2 * pad;
    const char* dim = axis[0] == 'h' ? "height" : "width";
    if (extent > padded) {
      if (dilation == 1) {
        return LayerError(
            i, absl::StrFormat("conv2d.kernel_%s: %d exceeds the padded input "
                               "%s %d",
                               axis, k, dim, padded));
      }
      return LayerError(
          i,
          absl::StrFormat("conv2d.kernel_%s: %d with %s %d spans %d, which "
                          "exceeds the padded input %s %d",
                          axis, k, dil_field, dilation, extent, dim, padded));
    }
  }
  LS_RETURN_IF_ERROR(Wrap(i, spatial::ValidateConv2dShape(s)));

  lp->output_shape = {s.n, s.c_out, spatial::Conv2dOutH(s),
                      spatial::Conv2dOutW(s)};
  LS_RETURN_IF_ERROR(CheckOutputSize(i, lp->output_shape));
  return AddConvParams(i, s, lp);
}

absl::Status Planner::PlanConvTranspose2d(int i, LayerPlan* lp) {
  const v1::Conv2dParams& p = model_.layers(i).conv2d();
  LS_RETURN_IF_ERROR(CheckConvRanges(i));
  LS_RETURN_IF_ERROR(
      Wrap(i, CheckRange("conv2d.output_padding_h", p.output_padding_h(), 0,
                         limits_.max_dim)));
  LS_RETURN_IF_ERROR(
      Wrap(i, CheckRange("conv2d.output_padding_w", p.output_padding_w(), 0,
                         limits_.max_dim)));
  LS_RETURN_IF_ERROR(Need4d(i, *lp));
  const std::vector<int64_t>& in = lp->input_shapes[0];

  // s is the CONV2D whose input gradient this layer computes: its input is
  // this layer's output, its output this layer's input.
  spatial::Conv2dShape s;
  s.n = in[0];
  s.c_out = in[1];
  s.c_in = p.filters();
  s.k_h = p.kernel_h();
  s.k_w = p.kernel_w();
  s.stride_h = p.stride_h() == 0 ? 1 : p.stride_h();
  s.stride_w = p.stride_w() == 0 ? 1 : p.stride_w();
  s.pad_top = s.pad_bottom = p.pad_h();
  s.pad_left = s.pad_right = p.pad_w();
  s.dilation_h = p.dilation_h() == 0 ? 1 : p.dilation_h();
  s.dilation_w = p.dilation_w() == 0 ? 1 : p.dilation_w();
  s.groups = p.groups() == 0 ? 1 : p.groups();
  if (s.groups > s.c_out || s.c_out % s.groups != 0 || s.c_in % s.groups != 0) {
    return LayerError(
        i, absl::StrFormat("conv2d.groups: %d must divide both the input "
                           "channels (%d) and conv2d.filters (%d)",
                           p.groups(), s.c_out, s.c_in));
  }
  // All fields are <= 2^20 here, so nothing below overflows.
  for (const auto& [axis, k, dilation, stride, size, pad, out_pad] :
       {std::tuple<const char*, int64_t, int64_t, int64_t, int64_t, int64_t,
                   int64_t>{"h", s.k_h, s.dilation_h, s.stride_h, in[2],
                            s.pad_top, p.output_padding_h()},
        {"w", s.k_w, s.dilation_w, s.stride_w, in[3], s.pad_left,
         p.output_padding_w()}}) {
    // PyTorch also takes output_padding < dilation; then the output is no
    // longer the input gradient of a CONV2D over it, so it is refused.
    if (out_pad >= stride) {
      return LayerError(
          i, absl::StrFormat(
                 "conv2d.output_padding_%s: %d must be smaller than "
                 "conv2d.stride_%s %d%s",
                 axis, out_pad, axis, stride,
                 out_pad < dilation ? " (smaller than the dilation is not "
                                      "enough, unlike in PyTorch)"
                                    : ""));
    }
    const int64_t out =
        (size - 1) * stride - 2 * pad + dilation * (k - 1) + 1 + out_pad;
    if (out < 1) {
      return LayerError(
          i, absl::StrFormat("conv2d.pad_%s: %d leaves an output %s of %d "
                             "(input %d, stride %d, kernel %d, dilation %d, "
                             "output padding %d): it must be at least 1",
                             axis, pad, axis[0] == 'h' ? "height" : "width",
                             out, size, stride, k, dilation, out_pad));
    }
    (axis[0] == 'h' ? s.h : s.w) = out;
  }
  LS_RETURN_IF_ERROR(Wrap(i, spatial::ValidateConv2dShape(s)));
  if (spatial::Conv2dOutH(s) != in[2] || spatial::Conv2dOutW(s) != in[3]) {
    return absl::InternalError(absl::StrFormat(
        "layers[%d]: transposed convolution geometry does not invert", i));
  }
  lp->output_shape = {s.n, s.c_in, s.h, s.w};
  LS_RETURN_IF_ERROR(CheckOutputSize(i, lp->output_shape));
  return AddConvParams(i, s, lp);
}

absl::Status Planner::PlanPool2d(int i, LayerPlan* lp) {
  const v1::Pool2dParams& p = model_.layers(i).pool();
  const int64_t kMax = limits_.max_dim;
  LS_RETURN_IF_ERROR(
      Wrap(i, CheckRange("pool.kernel_h", p.kernel_h(), 1, kMax)));
  LS_RETURN_IF_ERROR(
      Wrap(i, CheckRange("pool.kernel_w", p.kernel_w(), 1, kMax)));
  LS_RETURN_IF_ERROR(
      Wrap(i, CheckRange("pool.stride_h", p.stride_h(), 0, kMax)));
  LS_RETURN_IF_ERROR(
      Wrap(i, CheckRange("pool.stride_w", p.stride_w(), 0, kMax)));
  LS_RETURN_IF_ERROR(Wrap(i, CheckRange("pool.pad_h", p.pad_h(), 0, kMax)));
  LS_RETURN_IF_ERROR(Wrap(i, CheckRange("pool.pad_w", p.pad_w(), 0, kMax)));
  if (p.pad_h() >= p.kernel_h()) {
    return LayerError(
        i, absl::StrFormat("pool.pad_h: %d must be smaller than pool.kernel_h "
                           "%d (a window would hold only padding)",
                           p.pad_h(), p.kernel_h()));
  }
  if (p.pad_w() >= p.kernel_w()) {
    return LayerError(
        i, absl::StrFormat("pool.pad_w: %d must be smaller than pool.kernel_w "
                           "%d (a window would hold only padding)",
                           p.pad_w(), p.kernel_w()));
  }
  LS_RETURN_IF_ERROR(Need4d(i, *lp));
  const std::vector<int64_t>& in = lp->input_shapes[0];
  spatial::Pool2dShape s;
  s.n = in[0];
  s.c = in[1];
  s.h = in[2];
  s.w = in[3];
  s.k_h = p.kernel_h();
  s.k_w = p.kernel_w();
  s.stride_h = p.stride_h() == 0 ? p.kernel_h() : p.stride_h();
  s.stride_w = p.stride_w() == 0 ? p.kernel_w() : p.stride_w();
  s.pad_top = s.pad_bottom = p.pad_h();
  s.pad_left = s.pad_right = p.pad_w();
  s.count_include_pad = true;
  if (s.k_h > s.h + 2 * s.pad_top) {
    return LayerError(
        i,
        absl::StrFormat("pool.kernel_h: %d exceeds the padded input height %d",
                        s.k_h, s.h + 2 * s.pad_top));
  }
  if (s.k_w > s.w + 2 * s.pad_left) {
    return LayerError(
        i,
        absl::StrFormat("pool.kernel_w: %d exceeds the padded input width %d",
                        s.k_w, s.w + 2 * s.pad_left));
  }
  LS_RETURN_IF_ERROR(Wrap(i, spatial::ValidatePool2dShape(s)));
  lp->output_shape = {s.n, s.c, spatial::Pool2dOutH(s), spatial::Pool2dOutW(s)};
  LS_RETURN_IF_ERROR(CheckOutputSize(i, lp->output_shape));
  kernels::OpAttrs& a = lp->attrs;
  a.kernel_h = s.k_h;
  a.kernel_w = s.k_w;
  a.stride_h = s.stride_h;
  a.stride_w = s.stride_w;
  a.pad_top = s.pad_top;
  a.pad_bottom = s.pad_bottom;
  a.pad_left = s.pad_left;
  a.pad_right = s.pad_right;
  a.count_include_pad = true;
  return absl::OkStatus();
}

absl::Status Planner::PlanGlobalAvgPool(int i, LayerPlan* lp) {
  LS_RETURN_IF_ERROR(Need4d(i, *lp));
  const std::vector<int64_t>& in = lp->input_shapes[0];
  spatial::GlobalPool2dShape s;
  s.n = in[0];
  s.c = in[1];
  s.h = in[2];
  s.w = in[3];
  LS_RETURN_IF_ERROR(Wrap(i, spatial::ValidateGlobalPool2dShape(s)));
  lp->output_shape = {s.n, s.c};
  return absl::OkStatus();
}

absl::Status Planner::PlanResize(int i, LayerPlan* lp) {
  const v1::ResizeParams& p = model_.layers(i).resize();
  const int64_t kMax = std::min(limits_.max_dim, spatial::kMaxResizeDim);
  LS_RETURN_IF_ERROR(Wrap(i, CheckRange("resize.out_h", p.out_h(), 1, kMax)));
  LS_RETURN_IF_ERROR(Wrap(i, CheckRange("resize.out_w", p.out_w(), 1, kMax)));
  LS_RETURN_IF_ERROR(Need4d(i, *lp));
  const std::vector<int64_t>& in = lp->input_shapes[0];
  spatial::ResizeBilinearShape s;
  s.n = in[0];
  s.c = in[1];
  s.in_h = in[2];
  s.in_w = in[3];
  s.out_h = p.out_h();
  s.out_w = p.out_w();
  lp->output_shape = {s.n, s.c, s.out_h, s.out_w};
  // The element limit first: it names the limit the operator can change.
  LS_RETURN_IF_ERROR(CheckOutputSize(i, lp->output_shape));
  LS_RETURN_IF_ERROR(Wrap(i, spatial::ValidateResizeBilinearShape(s)));
  return absl::OkStatus();
}

absl::Status Planner::PlanAdd(int i, LayerPlan* lp) {
  const auto& a = lp->input_shapes[0];
  const auto& b = lp->input_shapes[1];
  if (a != b) {
    return LayerError(
        i, absl::StrFormat("ADD inputs differ in shape: %s is %s, %s is %s",
                           ProducerName(lp->inputs[0]), ShapeToString(a),
                           ProducerName(lp->inputs[1]), ShapeToString(b)));
  }
  lp->output_shape = a;
  return absl::OkStatus();
}

absl::Status Planner::PlanBiasAdd(int i, LayerPlan* lp) {
  const std::vector<int64_t>& in = lp->input_shapes[0];
  lp->output_shape = in;
  const int64_t channels = in[1];
  ParamPlan b;
  b.name = "bias";
  b.role = v1::BIAS;
  b.shape = {channels};
  b.fan_in = channels;
  b.fan_out = channels;
  return AddParam(i, std::move(b), lp);
}

// The normalisations' learned scale ("weight" [n], initialised to 1) and
// shift ("bias" [n], initialised to 0).
absl::Status Planner::AddScaleAndShift(int i, int64_t n, LayerPlan* lp) {
  ParamPlan w;
  w.name = "weight";
  w.role = v1::WEIGHT;
  w.shape = {n};
  w.fan_in = n;
  w.fan_out = n;
  w.init_ones = true;
  LS_RETURN_IF_ERROR(AddParam(i, std::move(w), lp));
  ParamPlan b;
  b.name = "bias";
  b.role = v1::BIAS;
  b.shape = {n};
  b.fan_in = n;
  b.fan_out = n;
  return AddParam(i, std::move(b), lp);
}

absl::Status Planner::PlanLayerNorm(int i, LayerPlan* lp) {
  const std::vector<int64_t>& in = lp->input_shapes[0];
  if (in.size() < 2) {
    return LayerError(
        i, absl::StrFormat("LAYER_NORM needs an input of rank >= 2 ([N, ..., "
                           "D]), got %s from %s",
                           ShapeToString(in), ProducerName(lp->inputs[0])));
  }
  lp->output_shape = in;
  return AddScaleAndShift(i, in.back(), lp);
}

absl::Status Planner::PlanBatchNorm(int i, LayerPlan* lp) {
  const v1::BatchNormParams& p = model_.layers(i).batch_norm();
  const std::vector<int64_t>& in = lp->input_shapes[0];
  if (in.size() < 2) {
    return LayerError(
        i, absl::StrFormat("BATCH_NORM needs an input of rank >= 2 ([N, C, "
                           "...]), got %s from %s",
                           ShapeToString(in), ProducerName(lp->inputs[0])));
  }
  if (!(p.momentum() >= 0.0f && p.momentum() <= 1.0f)) {
    return LayerError(i, absl::StrFormat("batch_norm.momentum: %g is outside "
                                         "[0, 1]",
                                         p.momentum()));
  }
  if (!(p.epsilon() >= 0.0f && p.epsilon() <= 1.0f)) {
    return LayerError(i, absl::StrFormat("batch_norm.epsilon: %g is outside "
                                         "[0, 1]",
                                         p.epsilon()));
  }
  const int64_t per_channel = SatProduct(in) / std::max<int64_t>(1, in[1]);
  if (!p.eval() && per_channel < 2) {
    return LayerError(
        i, absl::StrFormat("BATCH_NORM in training needs at least 2 values per "
                           "channel (batch x spatial size), got %d; use a "
                           "larger batch or batch_norm.eval",
                           per_channel));
  }
  lp->output_shape = in;
  kernels::OpAttrs& a = lp->attrs;
  a.batch_norm_eval = p.eval();
  a.batch_norm_momentum = p.momentum() == 0.0f ? 0.1f : p.momentum();
  a.norm_epsilon = p.epsilon() == 0.0f ? 1e-5f : p.epsilon();
  return AddScaleAndShift(i, in[1], lp);
}

absl::Status Planner::PlanLoss(int i, LayerPlan* lp) {
  const std::vector<int64_t>& in = lp->input_shapes[0];
  const int64_t n = plan_.input_shape[0];
  if (plan_.input_dtype == kernels::DType::kInt32) {
    // Token model: one prediction per position.
    const std::vector<int64_t> want = {n, plan_.input_shape[1],
                                       model_.num_classes()};
    if (in != want) {
      return LayerError(
          i, absl::StrFormat("SOFTMAX_XENT of a token model needs a [N, T, "
                             "num_classes] = %s input (a prediction per "
                             "position), got %s from %s",
                             ShapeToString(want), ShapeToString(in),
                             ProducerName(lp->inputs[0])));
    }
    if (n * plan_.input_shape[1] > kMaxLossBatch) {
      return LayerError(
          i, absl::StrFormat("SOFTMAX_XENT takes at most %d "
                             "positions, got %d x %d",
                             kMaxLossBatch, n, plan_.input_shape[1]));
    }
    plan_.label_shape = {n, plan_.input_shape[1]};
    lp->output_shape = {1};
    return absl::OkStatus();
  }
  const std::vector<int64_t> want = {n, model_.num_classes()};
  if (in.size() != 2) {
    return LayerError(
        i, absl::StrFormat("SOFTMAX_XENT needs a 2-D [N, num_classes] = %s "
                           "input, got %s from %s (add a FLATTEN, "
                           "GLOBAL_AVG_POOL or DENSE before it)",
                           ShapeToString(want), ShapeToString(in),
                           ProducerName(lp->inputs[0])));
  }
  if (in[1] != model_.num_classes()) {
    return LayerError(
        i, absl::StrFormat("SOFTMAX_XENT input %s from %s has %d classes, but "
                           "model.num_classes is %d",
                           ShapeToString(in), ProducerName(lp->inputs[0]),
                           in[1], model_.num_classes()));
  }
  if (n > kMaxLossBatch) {
    return LayerError(i, absl::StrFormat("SOFTMAX_XENT takes at most %d "
                                         "examples, got a batch of %d",
                                         kMaxLossBatch, n));
  }
  lp->output_shape = {1};
  return absl::OkStatus();
}

absl::Status Planner::PlanEmbedding(int i, LayerPlan* lp) {
  const v1::EmbeddingParams& p = model_.layers(i).embedding();
  LS_RETURN_IF_ERROR(Wrap(i, CheckRange("embedding.vocab_size", p.vocab_size(),
                                        1, canonical::kMaxEmbeddingVocab)));
  LS_RETURN_IF_ERROR(
      Wrap(i, CheckRange("embedding.dim", p.dim(), 1, limits_.max_dim)));
  if (lp->inputs[0] != kModelInput) {
    return LayerError(
        i, absl::StrFormat("EMBEDDING reads token ids, so its input must be "
                           "the model input, got %s",
                           ProducerName(lp->inputs[0])));
  }
  if (plan_.input_shape.size() != 2) {
    return LayerError(
        i, absl::StrFormat("EMBEDDING needs model.input_shape [T] (a "
                           "sequence of T token ids), got %s",
                           ShapeToString(plan_.input_shape)));
  }
  lp->output_shape = {plan_.input_shape[0], plan_.input_shape[1], p.dim()};
  LS_RETURN_IF_ERROR(CheckOutputSize(i, lp->output_shape));
  ParamPlan w;
  w.name = "weight";
  w.role = v1::WEIGHT;
  w.shape = {p.vocab_size(), p.dim()};
  w.fan_in = p.vocab_size();
  w.fan_out = p.dim();
  return AddParam(i, std::move(w), lp);
}

absl::Status Planner::PlanMatMul(int i, LayerPlan* lp) {
  const v1::MatmulParams& p = model_.layers(i).matmul();
  if (!std::isfinite(p.scale())) {
    return LayerError(
        i, absl::StrFormat("matmul.scale: %g is not finite", p.scale()));
  }
  for (const int producer : lp->inputs) {
    if (producer != kModelInput && !plan_.layers[producer].batched) {
      // An unbatched operand (model/plan_graph.h).
      LS_RETURN_IF_ERROR(Wrap(
          i, internal::PlanMatMulUnbatched(p, GraphInputs(*lp), limits_, lp)));
      lp->attrs.transpose_x = p.transpose_a();
      lp->attrs.transpose_w = p.transpose_b();
      lp->attrs.scale = p.scale() == 0.0f ? 1.0f : p.scale();
      return absl::OkStatus();
    }
  }
  const std::vector<int64_t>& a = lp->input_shapes[0];
  const std::vector<int64_t>& b = lp->input_shapes[1];
  const std::string inputs = absl::StrFormat(
      "%s is %s, %s is %s", ProducerName(lp->inputs[0]), ShapeToString(a),
      ProducerName(lp->inputs[1]), ShapeToString(b));
  if (a.size() < 3 || a.size() != b.size()) {
    return LayerError(
        i, absl::StrFormat("inputs: MATMUL needs two inputs of one rank >= 3 "
                           "([N, ..., M, K] and [N, ..., K, N']): %s",
                           inputs));
  }
  const size_t r = a.size();
  for (size_t d = 0; d + 2 < r; ++d) {
    if (a[d] != b[d]) {
      return LayerError(
          i, absl::StrFormat("inputs: MATMUL's leading (batch) dimensions "
                             "must be equal; dimension %d differs: %s",
                             d, inputs));
    }
  }
  const int64_t m = p.transpose_a() ? a[r - 1] : a[r - 2];
  const int64_t ka = p.transpose_a() ? a[r - 2] : a[r - 1];
  const int64_t kb = p.transpose_b() ? b[r - 1] : b[r - 2];
  const int64_t n = p.transpose_b() ? b[r - 2] : b[r - 1];
  if (ka != kb) {
    return LayerError(
        i, absl::StrFormat("inputs: MATMUL's inner dimensions differ: op(a) "
                           "has K = %d, op(b) has K = %d "
                           "(matmul.transpose_a = %d, matmul.transpose_b = "
                           "%d): %s",
                           ka, kb, p.transpose_a(), p.transpose_b(), inputs));
  }
  lp->output_shape.assign(a.begin(), a.end() - 2);
  lp->output_shape.push_back(m);
  lp->output_shape.push_back(n);
  LS_RETURN_IF_ERROR(CheckOutputSize(i, lp->output_shape));
  lp->attrs.transpose_x = p.transpose_a();
  lp->attrs.transpose_w = p.transpose_b();
  lp->attrs.scale = p.scale() == 0.0f ? 1.0f : p.scale();
  return absl::OkStatus();
}

absl::Status Planner::PlanTranspose(int i, LayerPlan* lp) {
  const v1::TransposeParams& p = model_.layers(i).transpose();
  const std::vector<int64_t>& in = lp->input_shapes[0];
  const int rank = static_cast<int>(in.size());
  if (p.perm_size() != rank) {
    return LayerError(
        i, absl::StrFormat("transpose.perm: has %d entries, but the input %s "
                           "from %s has rank %d (perm lists every axis, the "
                           "batch axis 0 first)",
                           p.perm_size(), ShapeToString(in),
                           ProducerName(lp->inputs[0]), rank));
  }
  std::vector<bool> seen(rank, false);
  for (int d = 0; d < rank; ++d) {
    const int32_t v = p.perm(d);
    if (v < 0 || v >= rank || seen[v]) {
      return LayerError(
          i, absl::StrFormat("transpose.perm[%d]: %d; perm must be a "
                             "permutation of 0 .. %d",
                             d, v, rank - 1));
    }
    seen[v] = true;
  }
  // An unbatched input (a PARAMETER, a CONSTANT or a graph op of those,
  // e.g. a tied embedding table read transposed) has no batch axis: any
  // permutation, and the output is unbatched too.
  const int producer = lp->inputs[0];
  const bool batched =
      producer == kModelInput || plan_.layers[producer].batched;
  if (batched && p.perm(0) != 0) {
    return LayerError(i, absl::StrFormat("transpose.perm[0]: must be 0 (the "
                                         "batch axis stays first), got %d",
                                         p.perm(0)));
  }
  lp->batched = batched;
  lp->attrs.perm_rank = rank;
  for (int d = 0; d < rank; ++d) {
    lp->attrs.perm[d] = p.perm(d);
    lp->output_shape.push_back(in[p.perm(d)]);
  }
  return absl::OkStatus();
}

absl::Status Planner::PlanReshape(int i, LayerPlan* lp) {
  const v1::ReshapeParams& p = model_.layers(i).reshape();
  const std::vector<int64_t>& in = lp->input_shapes[0];
  if (p.shape_size() < 1 || p.shape_size() > kernels::kMaxRank - 1) {
    return LayerError(
        i, absl::StrFormat("reshape.shape: needs 1 to %d dimensions (the "
                           "example shape, without the batch), got %d",
                           kernels::kMaxRank - 1, p.shape_size()));
  }
  const int64_t elements = SatProduct(absl::MakeConstSpan(in).subspan(1));
  int inferred = -1;
  int64_t known = 1;
  for (int d = 0; d < p.shape_size(); ++d) {
    const int64_t v = p.shape(d);
    if (v == -1) {
      if (inferred >= 0) {
        return LayerError(
            i, absl::StrFormat("reshape.shape[%d]: a second -1 (shape[%d] is "
                               "already inferred); at most one -1",
                               d, inferred));
      }
      inferred = d;
      continue;
    }
    if (v < 1 || v > limits_.max_dim) {
      return LayerError(
          i, absl::StrFormat("reshape.shape[%d]: %d is outside 1 .. %d (or -1 "
                             "to infer it)",
                             d, v, limits_.max_dim));
    }
    known = SatMul(known, v);
  }
  std::vector<int64_t> out = {in[0]};
  for (int d = 0; d < p.shape_size(); ++d) out.push_back(p.shape(d));
  if (inferred >= 0) {
    if (known == 0 || elements % known != 0) {
      return LayerError(
          i, absl::StrFormat("reshape.shape: no -1 fits: %d elements per "
                             "example (input %s from %s) are not a multiple "
                             "of %d",
                             elements, ShapeToString(in),
                             ProducerName(lp->inputs[0]), known));
    }
    out[inferred + 1] = elements / known;
    known = elements;
  }
  if (known != elements) {
    return LayerError(
        i, absl::StrFormat("reshape.shape: %s holds %d elements per example, "
                           "but the input %s from %s holds %d",
                           ShapeToString(std::vector<int64_t>(p.shape().begin(),
                                                              p.shape().end())),
                           known, ShapeToString(in),
                           ProducerName(lp->inputs[0]), elements));
  }
  lp->output_shape = std::move(out);
  return absl::OkStatus();
}

absl::Status Planner::PlanSoftmax(int i, LayerPlan* lp) {
  const std::vector<int64_t>& in = lp->input_shapes[0];
  lp->output_shape = in;
  if (!model_.layers(i).has_softmax() || !model_.layers(i).softmax().causal()) {
    return absl::OkStatus();
  }
  if (in.size() < 3 || in[in.size() - 1] != in[in.size() - 2]) {
    return LayerError(
        i, absl::StrFormat("softmax.causal: needs [N, ..., T, T] scores (the "
                           "last two dimensions equal), got %s from %s",
                           ShapeToString(in), ProducerName(lp->inputs[0])));
  }
  lp->attrs.causal = true;
  return absl::OkStatus();
}

std::vector<internal::GraphInput> Planner::GraphInputs(
    const LayerPlan& lp) const {
  std::vector<internal::GraphInput> out;
  for (size_t k = 0; k < lp.inputs.size(); ++k) {
    const int producer = lp.inputs[k];
    internal::GraphInput g;
    g.shape = lp.input_shapes[k];
    g.name = ProducerName(producer);
    g.model_input = producer == kModelInput;
    if (producer != kModelInput) {
      g.batched = plan_.layers[producer].batched;
      if (model_.layers(producer).op() == v1::CONSTANT) {
        g.constant = &model_.layers(producer);
      }
    }
    out.push_back(std::move(g));
  }
  return out;
}

// In a token model only EMBEDDING layers and GATHER's indices may read the
// model input.
absl::Status Planner::CheckTokenInput(int i, const LayerPlan& lp) const {
  if (plan_.input_dtype != kernels::DType::kInt32 || lp.op == v1::EMBEDDING) {
    return absl::OkStatus();
  }
  for (size_t k = 0; k < lp.inputs.size(); ++k) {
    if (lp.op == v1::GATHER && k == 1) continue;
    if (lp.inputs[k] == kModelInput) {
      return LayerError(
          i, absl::StrFormat("reads the model input, which is int32 token "
                             "ids in this model (it has an EMBEDDING layer "
                             "or a GATHER of it); only EMBEDDING layers and "
                             "GATHER's indices can read it"));
    }
  }
  return absl::OkStatus();
}

// Token models train on token sequences, the others on examples.
absl::Status Planner::CheckDatasetKind() const {
  const bool tokens = config_.dataset().source_case() == v1::Dataset::kTokens;
  if (plan_.input_dtype == kernels::DType::kInt32 && !tokens) {
    return Invalid(
        "config.dataset: the model reads token ids (it has an EMBEDDING "
        "layer or a GATHER of \"<input>\"), so the dataset must be "
        "dataset.tokens");
  }
  if (plan_.input_dtype != kernels::DType::kInt32 && tokens) {
    return Invalid(
        "config.dataset.tokens: token sequences need a model whose input is "
        "read by an EMBEDDING layer or as GATHER's indices");
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelPlan> Planner::Run() {
  LS_RETURN_IF_ERROR(ValidateJobConfig(config_, limits_));
  LS_RETURN_IF_ERROR(CheckModelHeader());
  LS_RETURN_IF_ERROR(CheckNames());
  plan_.model_name = model_.name();
  plan_.num_classes = model_.num_classes();
  const int num_layers = model_.layers_size();
  consumed_.assign(num_layers, false);
  plan_.layers.reserve(num_layers);
  plan_.label_shape = {plan_.input_shape[0]};
  for (const v1::Layer& layer : model_.layers()) {
    if (layer.op() == v1::EMBEDDING ||
        (layer.op() == v1::GATHER && layer.inputs_size() == 2 &&
         layer.inputs(1) == kModelInputName)) {
      plan_.input_dtype = kernels::DType::kInt32;
    }
  }
  LS_RETURN_IF_ERROR(CheckDatasetKind());

  for (int i = 0; i < num_layers; ++i) {
    const v1::Layer& layer = model_.layers(i);
    const int op_value = layer.op();
    if (!v1::LayerOp_IsValid(op_value)) {
      return LayerError(
          i, absl::StrFormat("op: %d is not a known LayerOp", op_value));
    }
    const v1::LayerOp op = layer.op();
    if (op == v1::LAYER_OP_UNSPECIFIED) {
      return LayerError(i, "op: must be set (LAYER_OP_UNSPECIFIED)");
    }
    const v1::Layer::ParamsCase needed = ParamsFor(op);
    // BATCH_NORM's, MATMUL's and SOFTMAX's params are optional.
    const bool optional_ok =
        (op == v1::BATCH_NORM &&
         layer.params_case() == v1::Layer::kBatchNorm) ||
        (op == v1::MATMUL && layer.params_case() == v1::Layer::kMatmul) ||
        (op == v1::SOFTMAX && layer.params_case() == v1::Layer::kSoftmax);
    if (layer.params_case() != needed && !optional_ok) {
      if (needed == v1::Layer::PARAMS_NOT_SET) {
        return LayerError(
            i,
            absl::StrFormat("%s takes no params, got %s", v1::LayerOp_Name(op),
                            ParamsCaseName(layer.params_case())));
      }
      if (layer.params_case() == v1::Layer::PARAMS_NOT_SET) {
        return LayerError(
            i, absl::StrFormat("%s needs %s params", v1::LayerOp_Name(op),
                               ParamsCaseName(needed)));
      }
      return LayerError(
          i, absl::StrFormat("%s needs %s params, got %s", v1::LayerOp_Name(op),
                             ParamsCaseName(needed),
                             ParamsCaseName(layer.params_case())));
    }
    if (op == v1::SOFTMAX_XENT && i != num_layers - 1) {
      return LayerError(
          i, absl::StrFormat("SOFTMAX_XENT must be the last layer, but it is "
                             "layer %d of %d",
                             i + 1, num_layers));
    }
    if (i == num_layers - 1 && op != v1::SOFTMAX_XENT) {
      return LayerError(
          i, absl::StrFormat("the last layer must be SOFTMAX_XENT, got %s",
                             v1::LayerOp_Name(op)));
    }

    LayerPlan lp;
    lp.index = i;
    lp.name = layer.name();
    lp.op = op;
    lp.origin = layer.origin();
    LS_RETURN_IF_ERROR(ResolveInputs(i, &lp));
    LS_RETURN_IF_ERROR(CheckTokenInput(i, lp));
    switch (op) {
      case v1::DENSE:
        LS_RETURN_IF_ERROR(PlanDense(i, &lp));
        break;
      case v1::CONV2D:
        LS_RETURN_IF_ERROR(PlanConv2d(i, &lp));
        break;
      case v1::CONV_TRANSPOSE2D:
        LS_RETURN_IF_ERROR(PlanConvTranspose2d(i, &lp));
        break;
      case v1::MAX_POOL2D:
      case v1::AVG_POOL2D:
        LS_RETURN_IF_ERROR(PlanPool2d(i, &lp));
        break;
      case v1::GLOBAL_AVG_POOL:
        LS_RETURN_IF_ERROR(PlanGlobalAvgPool(i, &lp));
        break;
      case v1::FLATTEN: {
        const std::vector<int64_t>& in = lp.input_shapes[0];
        lp.output_shape = {in[0],
                           SatProduct(absl::MakeConstSpan(in).subspan(1))};
        break;
      }
      case v1::ADD:
        LS_RETURN_IF_ERROR(PlanAdd(i, &lp));
        break;
      case v1::RESIZE_BILINEAR:
        LS_RETURN_IF_ERROR(PlanResize(i, &lp));
        break;
      case v1::BIAS_ADD:
        LS_RETURN_IF_ERROR(PlanBiasAdd(i, &lp));
        break;
      case v1::RELU:
      case v1::SIGMOID:
      case v1::TANH:
      case v1::SILU:
      case v1::GELU:
      case v1::GELU_TANH:
        lp.output_shape = lp.input_shapes[0];
        break;
      case v1::SOFTMAX:
        LS_RETURN_IF_ERROR(PlanSoftmax(i, &lp));
        break;
      case v1::MATMUL:
        LS_RETURN_IF_ERROR(PlanMatMul(i, &lp));
        break;
      case v1::TRANSPOSE:
        LS_RETURN_IF_ERROR(PlanTranspose(i, &lp));
        break;
      case v1::RESHAPE:
        LS_RETURN_IF_ERROR(PlanReshape(i, &lp));
        break;
      case v1::BINARY:
      case v1::UNARY:
      case v1::COMPARE:
      case v1::WHERE:
      case v1::REDUCE:
        LS_RETURN_IF_ERROR(
            Wrap(i, PlanGraphElementwise(layer, GraphInputs(lp), &lp)));
        LS_RETURN_IF_ERROR(CheckOutputSize(i, lp.output_shape));
        break;
      case v1::LAYER_NORM:
        LS_RETURN_IF_ERROR(PlanLayerNorm(i, &lp));
        break;
      case v1::BATCH_NORM:
        LS_RETURN_IF_ERROR(PlanBatchNorm(i, &lp));
        break;
      case v1::SOFTMAX_XENT:
        LS_RETURN_IF_ERROR(PlanLoss(i, &lp));
        break;
      case v1::EMBEDDING:
        LS_RETURN_IF_ERROR(PlanEmbedding(i, &lp));
        break;
      case v1::CONSTANT:
        LS_RETURN_IF_ERROR(
            Wrap(i, internal::PlanConstant(layer, limits_, &lp)));
        break;
      case v1::PARAMETER: {
        ParamPlan value;
        LS_RETURN_IF_ERROR(
            Wrap(i, internal::PlanParameter(layer, limits_, &lp, &value)));
        LS_RETURN_IF_ERROR(AddParam(i, std::move(value), &lp));
        break;
      }
      case v1::GATHER:
        LS_RETURN_IF_ERROR(Wrap(
            i, internal::PlanGather(layer, GraphInputs(lp), limits_, &lp)));
        break;
      case v1::CONCAT:
        LS_RETURN_IF_ERROR(
            Wrap(i, internal::PlanConcat(layer, GraphInputs(lp), &lp)));
        break;
      case v1::SLICE:
        LS_RETURN_IF_ERROR(
            Wrap(i, internal::PlanSlice(layer, GraphInputs(lp), &lp)));
        break;
      case v1::DROPOUT: {
        const float rate = model_.layers(i).dropout().rate();
        if (!(rate >= 0.0f && rate < 1.0f)) {
          return LayerError(
              i, absl::StrFormat("dropout.rate: %g is outside [0, 1)", rate));
        }
        if (i >= (1 << 16) || config_.steps() >= (1 << 24)) {
          return LayerError(i,
                            "DROPOUT needs layer index < 2^16 and "
                            "config.steps < 2^24 (its mask stream)");
        }
        lp.attrs.dropout_rate = rate;
        lp.output_shape = lp.input_shapes[0];
        break;
      }
      default:
        return LayerError(
            i, absl::StrFormat("op: %d is not a known LayerOp", op_value));
    }
    plan_.layers.push_back(std::move(lp));
  }

  // Every layer but the loss must feed a later one. Since inputs name only
  // earlier layers, this makes every layer an ancestor of the loss.
  for (int i = 0; i + 1 < num_layers; ++i) {
    if (!consumed_[i]) {
      return LayerError(
          i,
          "output is never used: every layer except the final SOFTMAX_XENT "
          "must feed a later layer (name it in a later layer's inputs, or "
          "remove it)");
    }
  }
  if (plan_.parameter_count == 0) {
    return Invalid(
        "model.layers: the model has no trainable parameters (add a DENSE, "
        "CONV2D, CONV_TRANSPOSE2D, BIAS_ADD, LAYER_NORM, EMBEDDING or "
        "PARAMETER layer)");
  }
  const int64_t bytes = EstimateLiveTensorBytes(plan_, config_);
  if (bytes > limits_.max_total_tensor_bytes) {
    return Invalid(absl::StrFormat(
        "model: the run's live tensors (activations, gradients, parameters "
        "and optimizer state) need %d bytes, exceeding "
        "limits.max_total_tensor_bytes of %d",
        bytes, limits_.max_total_tensor_bytes));
  }
  return std::move(plan_);
}

}  // namespace

std::string ShapeToString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<ModelPlan> PlanModel(const v1::Model& model,
                                    const v1::JobConfig& config,
                                    const Limits& limits) {
  Planner planner(model, config, limits);
  return planner.Run();
}

int64_t EstimateLiveTensorBytes(const ModelPlan& plan,
                                const v1::JobConfig& config) {
  constexpr int64_t kElementBytes = 4;  // float32 and int32 alike
  int64_t state_slots = 0;
  switch (config.optimizer().kind()) {
    case v1::MOMENTUM:
      state_slots = 1;
      break;
    case v1::ADAM:
    case v1::ADAMW:
      state_slots = 2;
      break;
    default:
      break;
  }
  const int n_layers = static_cast<int>(plan.layers.size());
  std::vector<int64_t> consumers(n_layers, 0);
  for (const LayerPlan& layer : plan.layers) {
    for (const int producer : layer.inputs) {
      if (producer >= 0 && producer < n_layers) ++consumers[producer];
    }
  }
  int64_t elements = SatProduct(plan.input_shape);
  if (!plan.label_shape.empty()) {
    elements = SatAdd(elements, SatProduct(plan.label_shape));
  } else if (!plan.input_shape.empty()) {
    elements = SatAdd(elements, plan.input_shape[0]);  // labels
  }
  for (int i = 0; i < n_layers; ++i) {
    const LayerPlan& layer = plan.layers[i];
    const int64_t out = SatProduct(layer.output_shape);
    elements = SatAdd(elements, out);
    if (layer.op != v1::BIAS_ADD) {
      for (size_t k = 0; k < layer.inputs.size(); ++k) {
        if (layer.inputs[k] == kModelInput || k >= layer.input_shapes.size()) {
          continue;
        }
        elements = SatAdd(elements, SatProduct(layer.input_shapes[k]));
      }
    }
    if (layer.op != v1::SOFTMAX_XENT && consumers[i] != 1) {
      elements = SatAdd(elements, out);
    }
    if (layer.op == v1::ADD || layer.op == v1::DROPOUT) {
      elements = SatAdd(elements, out);  // ADD's scratch, DROPOUT's mask
    }
    for (const ParamPlan& p : layer.params) {
      elements = SatAdd(elements, SatMul(SatProduct(p.shape), 2 + state_slots));
    }
  }
  return SatMul(elements, kElementBytes);
}

int64_t LayerForwardFlops(const LayerPlan& layer) {
  const int64_t out = SatProduct(layer.output_shape);
  switch (layer.op) {
    case v1::DENSE: {
      if (layer.params.empty()) return 0;
      // 2*N*K*U: output elements times 2K.
      int64_t f = SatMul(out, SatMul(2, layer.params[0].shape[0]));
      if (layer.params.size() > 1) f = SatAdd(f, out);
      return f;
    }
    case v1::CONV2D: {
      if (layer.params.empty()) return 0;
      const std::vector<int64_t>& w = layer.params[0].shape;  // [F, C, KH, KW]
      int64_t f = SatMul(out, SatMul(2, SatProduct({w[1], w[2], w[3]})));
      if (layer.params.size() > 1) f = SatAdd(f, out);
      return f;
    }
    case v1::CONV_TRANSPOSE2D: {
      // 2 * input elements * (F/groups) * KH * KW: every input element
      // meets every tap of its group's filters.
      if (layer.params.empty() || layer.input_shapes.empty()) return 0;
      const std::vector<int64_t>& w = layer.params[0].shape;  // [C, F/g, ..]
      int64_t f = SatMul(SatProduct(layer.input_shapes[0]),
                         SatMul(2, SatProduct({w[1], w[2], w[3]})));
      if (layer.params.size() > 1) f = SatAdd(f, out);
      return f;
    }
    case v1::MAX_POOL2D:
    case v1::AVG_POOL2D:
      return SatMul(out, SatMul(layer.attrs.kernel_h, layer.attrs.kernel_w));
    case v1::GLOBAL_AVG_POOL:
      return layer.input_shapes.empty() ? 0 : SatProduct(layer.input_shapes[0]);
    case v1::RESIZE_BILINEAR:
      return SatMul(out, 8);
    case v1::RELU:
    case v1::ADD:
    case v1::BIAS_ADD:
    case v1::BINARY:
    case v1::COMPARE:
    case v1::WHERE:
      return out;
    case v1::UNARY:
      return SatMul(out, 8);
    case v1::REDUCE:
      return layer.input_shapes.empty() ? 0 : SatProduct(layer.input_shapes[0]);
    case v1::EMBEDDING:
      return 0;  // a copy
    case v1::DROPOUT:
      return out;
    case v1::SIGMOID:
    case v1::TANH:
    case v1::SILU:
    case v1::GELU:
    case v1::GELU_TANH:
    case v1::LAYER_NORM:
    case v1::BATCH_NORM:
      return SatMul(out, 8);
    case v1::SOFTMAX:
      return SatMul(out, 4);
    case v1::MATMUL: {
      // 2 * output elements * K.
      if (layer.input_shapes.size() < 2) return 0;
      const std::vector<int64_t>& a = layer.input_shapes[0];
      const int64_t k = layer.attrs.transpose_x ? a[a.size() - 2] : a.back();
      return SatMul(out, SatMul(2, k));
    }
    case v1::TRANSPOSE:
    case v1::RESHAPE:
      return 0;  // copies
    case v1::SOFTMAX_XENT:
      return layer.input_shapes.empty()
                 ? 0
                 : SatMul(4, SatProduct(layer.input_shapes[0]));
    default:
      return 0;
  }
}

std::string DescribePlan(const ModelPlan& plan) {
  std::string out = absl::StrFormat(
      "model %s: input %s, %d classes\n%-4s %-16s %-16s %-22s %-18s %-30s "
      "%s\n",
      Quote(plan.model_name), ShapeToString(plan.input_shape), plan.num_classes,
      "#", "name", "op", "inputs", "output", "params", "fwd FLOPs");
  for (const LayerPlan& l : plan.layers) {
    std::vector<std::string> inputs;
    for (const int producer : l.inputs) {
      inputs.push_back(producer == kModelInput ? std::string("<input>")
                                               : plan.layers[producer].name);
    }
    std::vector<std::string> params;
    for (const ParamPlan& p : l.params) {
      params.push_back(absl::StrCat(p.name, ShapeToString(p.shape)));
    }
    absl::StrAppendFormat(&out, "%-4d %-16s %-16s %-22s %-18s %-30s %d\n",
                          l.index, l.name, v1::LayerOp_Name(l.op),
                          absl::StrJoin(inputs, ","),
                          ShapeToString(l.output_shape),
                          absl::StrJoin(params, " "), LayerForwardFlops(l));
    if (!l.origin.empty()) {
      absl::StrAppendFormat(&out, "     from %s\n", l.origin);
    }
  }
  absl::StrAppendFormat(&out, "parameters: %d, forward FLOPs per step: %d\n",
                        plan.parameter_count, ForwardFlops(plan));
  return out;
}

int64_t ForwardFlops(const ModelPlan& plan) {
  int64_t total = 0;
  for (const LayerPlan& layer : plan.layers) {
    total = SatAdd(total, LayerForwardFlops(layer));
  }
  return total;
}

}  // namespace lockstep::model
