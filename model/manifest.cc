#include "model/manifest.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/digest.h"
#include "common/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "kernels/backend.h"
#include "kernels/graph_ops.h"
#include "model/plan_graph_elementwise.h"

namespace lockstep::model {
namespace {

namespace v1 = ::lockstep::v1;
namespace op = ::lockstep::kernels::op;

std::string LayerLabel(const LayerPlan& layer, int position) {
  return absl::StrFormat("layers[%d] \"%s\"", position, layer.name);
}

const ParamPlan* FindParam(const LayerPlan& layer, v1::TensorRole role) {
  for (const ParamPlan& p : layer.params) {
    if (p.role == role) return &p;
  }
  return nullptr;
}

// Checks what the executor relies on beyond PlanModel's own validation, so a
// hand-built or corrupted plan fails with a message instead of a crash.
absl::Status CheckPlanStructure(const ModelPlan& plan) {
  if (plan.layers.empty()) {
    return absl::InvalidArgumentError("model.layers: the plan has no layers");
  }
  if (plan.input_shape.empty() || plan.input_shape[0] < 1) {
    return absl::InvalidArgumentError(
        "plan.input_shape must start with the batch dimension (>= 1)");
  }
  const int n = static_cast<int>(plan.layers.size());
  for (int i = 0; i < n; ++i) {
    const LayerPlan& layer = plan.layers[i];
    const std::string label = LayerLabel(layer, i);
    if (layer.index != i) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: index is %d, expected its position %d", label, layer.index, i));
    }
    LS_ASSIGN_OR_RETURN(LayerOps ops, OpsOfLayer(layer.op));
    (void)ops;
    const bool is_loss = layer.op == v1::SOFTMAX_XENT;
    if (is_loss != (i == n - 1)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: SOFTMAX_XENT must be the last layer and only the last", label));
    }
    size_t want_inputs =
        layer.op == v1::ADD || layer.op == v1::MATMUL || layer.op == v1::GATHER
            ? 2
            : 1;
    if (layer.op == v1::CONSTANT || layer.op == v1::PARAMETER) want_inputs = 0;
    if (layer.op == v1::CONCAT && layer.inputs.size() >= 2) {
      want_inputs = layer.inputs.size();
    }
    if (layer.op == v1::BINARY || layer.op == v1::COMPARE) want_inputs = 2;
    if (layer.op == v1::WHERE) want_inputs = 3;
    if (layer.inputs.size() != want_inputs) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: takes %d input(s), the plan gives %d", label,
                          want_inputs, layer.inputs.size()));
    }
    if (layer.input_shapes.size() != layer.inputs.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %d input shapes for %d inputs", label,
                          layer.input_shapes.size(), layer.inputs.size()));
    }
    for (size_t k = 0; k < layer.inputs.size(); ++k) {
      const int src = layer.inputs[k];
      if (src < kModelInput || src >= i) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: inputs[%d] = %d must be a previous layer or the model input "
            "(-1)",
            label, k, src));
      }
      const std::vector<int64_t>& expect =
          src == kModelInput ? plan.input_shape : plan.layers[src].output_shape;
      if (layer.input_shapes[k] != expect) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: input_shapes[%d] %s differs from its producer's output %s",
            label, k, kernels::ShapeString(layer.input_shapes[k]),
            kernels::ShapeString(expect)));
      }
    }
    if (layer.output_shape.empty() && layer.batched) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: output_shape is empty", label));
    }
    // Parameters: weight then optional bias for DENSE/CONV2D/
    // CONV_TRANSPOSE2D, weight and bias for LAYER_NORM, exactly one bias for
    // BIAS_ADD, none for the rest.
    const bool has_weight =
        layer.op == v1::DENSE || layer.op == v1::CONV2D ||
        layer.op == v1::CONV_TRANSPOSE2D || layer.op == v1::LAYER_NORM ||
        layer.op == v1::BATCH_NORM || layer.op == v1::EMBEDDING ||
        layer.op == v1::PARAMETER;
    size_t expected = 0;
    if (has_weight) {
      if (layer.params.empty() || layer.params[0].role != v1::WEIGHT) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: params[0] must be the weight", label));
      }
      expected = 1;
      if (layer.params.size() > 1) {
        if (layer.params[1].role != v1::BIAS) {
          return absl::InvalidArgumentError(
              absl::StrFormat("%s: params[1] must be the bias", label));
        }
        expected = 2;
      }
    } else if (layer.op == v1::BIAS_ADD) {
      if (layer.params.empty() || layer.params[0].role != v1::BIAS) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: BIAS_ADD needs params[0] = the bias", label));
      }
      expected = 1;
    }
    if ((layer.op == v1::LAYER_NORM || layer.op == v1::BATCH_NORM) &&
        expected != 2) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %s needs a weight and a bias", label,
                          v1::LayerOp_Name(layer.op)));
    }
    if (layer.params.size() != expected) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: has %d parameter tensors, expected %d", label,
                          layer.params.size(), expected));
    }
    for (const ParamPlan& p : layer.params) {
      if (p.shape.empty() && layer.op != v1::PARAMETER) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: parameter \"%s\" has no shape", label, p.name));
      }
    }
  }
  return absl::OkStatus();
}

v1::ManifestEntry MakeEntry(v1::Phase phase, const std::string& layer,
                            const std::string& op_name, v1::TensorRole role,
                            const std::vector<int64_t>& shape,
                            const std::string& slot = "",
                            v1::DType dtype = v1::FLOAT32) {
  v1::ManifestEntry e;
  e.set_phase(phase);
  e.set_layer(layer);
  e.set_op(op_name);
  e.set_role(role);
  e.set_dtype(dtype);
  for (int64_t d : shape) e.add_shape(d);
  e.set_slot(slot);
  return e;
}

}  // namespace

std::string InputSlot(int i) { return absl::StrCat("input", i); }

std::vector<bool> CarriesGradient(const ModelPlan& plan) {
  std::vector<bool> carries(plan.layers.size(), false);
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    const LayerPlan& layer = plan.layers[l];
    bool c = layer.op < v1::CONSTANT || !layer.params.empty();
    for (size_t k = 0; !c && k < layer.inputs.size(); ++k) {
      c = InputTakesGradient(plan, carries, layer, static_cast<int>(k));
    }
    carries[l] = c;
  }
  return carries;
}

bool InputTakesGradient(const ModelPlan& plan, const std::vector<bool>& carries,
                        const LayerPlan& layer, int k) {
  (void)plan;
  if (k < 0 || k >= static_cast<int>(layer.inputs.size())) return false;
  const int src = layer.inputs[k];
  if (src < 0 || src >= static_cast<int>(carries.size()) || !carries[src]) {
    return false;
  }
  if (layer.op == v1::GATHER && k == 1) return false;  // the indices
  // COMPARE's inputs and WHERE's condition.
  return GraphInputTakesGradient(layer.op, k);
}

std::vector<std::vector<Consumer>> GradientConsumers(const ModelPlan& plan) {
  const std::vector<bool> carries = CarriesGradient(plan);
  std::vector<std::vector<Consumer>> consumers = ComputeConsumers(plan);
  for (std::vector<Consumer>& list : consumers) {
    std::vector<Consumer> kept;
    for (const Consumer& c : list) {
      if (InputTakesGradient(plan, carries, plan.layers[c.layer], c.input)) {
        kept.push_back(c);
      }
    }
    list = std::move(kept);
  }
  return consumers;
}

std::vector<std::vector<Consumer>> ComputeConsumers(const ModelPlan& plan) {
  std::vector<std::vector<Consumer>> consumers(plan.layers.size());
  // Visiting consumers in increasing (layer, input) order yields each list
  // already sorted.
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    const LayerPlan& layer = plan.layers[l];
    for (size_t k = 0; k < layer.inputs.size(); ++k) {
      const int src = layer.inputs[k];
      if (src >= 0 && src < static_cast<int>(consumers.size()) &&
          GraphInputTakesGradient(layer.op, static_cast<int>(k))) {
        consumers[src].push_back(
            Consumer{static_cast<int>(l), static_cast<int>(k)});
      }
    }
  }
  return consumers;
}

absl::StatusOr<LayerOps> OpsOfLayer(v1::LayerOp layer_op) {
  switch (layer_op) {
    case v1::DENSE:
      return LayerOps{op::kDenseForward, op::kDenseGradInput,
                      op::kDenseGradWeight};
    case v1::CONV2D:
      return LayerOps{op::kConv2dForward, op::kConv2dGradInput,
                      op::kConv2dGradWeight};
    case v1::CONV_TRANSPOSE2D:
      return LayerOps{op::kConvTranspose2dForward,
                      op::kConvTranspose2dGradInput,
                      op::kConvTranspose2dGradWeight};
    case v1::RELU:
      return LayerOps{op::kReluForward, op::kReluGrad, ""};
    case v1::MAX_POOL2D:
      return LayerOps{op::kMaxPool2dForward, op::kMaxPool2dGrad, ""};
    case v1::AVG_POOL2D:
      return LayerOps{op::kAvgPool2dForward, op::kAvgPool2dGrad, ""};
    case v1::GLOBAL_AVG_POOL:
      return LayerOps{op::kGlobalAvgPoolForward, op::kGlobalAvgPoolGrad, ""};
    case v1::FLATTEN:
      return LayerOps{op::kFlatten, op::kFlatten, ""};
    case v1::ADD:
      return LayerOps{op::kAddForward, op::kAddGrad, ""};
    case v1::RESIZE_BILINEAR:
      return LayerOps{op::kResizeBilinearForward, op::kResizeBilinearGrad, ""};
    case v1::SOFTMAX_XENT:
      return LayerOps{op::kSoftmaxXentForward, op::kSoftmaxXentGrad, ""};
    case v1::BIAS_ADD:
      // The input gradient of a bias layer is its output gradient itself.
      return LayerOps{op::kBiasAddForward, op::kBiasAddGrad, ""};
    case v1::SIGMOID:
      return LayerOps{op::kSigmoidForward, op::kSigmoidGrad, ""};
    case v1::TANH:
      return LayerOps{op::kTanhForward, op::kTanhGrad, ""};
    case v1::SILU:
      return LayerOps{op::kSiluForward, op::kSiluGrad, ""};
    case v1::GELU:
      return LayerOps{op::kGeluForward, op::kGeluGrad, ""};
    case v1::GELU_TANH:
      return LayerOps{op::kGeluTanhForward, op::kGeluTanhGrad, ""};
    case v1::SOFTMAX:
      return LayerOps{op::kSoftmaxForward, op::kSoftmaxGrad, ""};
    case v1::LAYER_NORM:
      // grad_weight computes both parameter gradients (scale and shift).
      return LayerOps{op::kLayerNormForward, op::kLayerNormGradInput,
                      op::kLayerNormGradParams};
    case v1::BATCH_NORM:
      return LayerOps{op::kBatchNormForward, op::kBatchNormGradInput,
                      op::kBatchNormGradParams};
    case v1::DROPOUT:
      return LayerOps{op::kDropoutForward, op::kDropoutGrad, ""};
    case v1::MATMUL:
      // One gradient call writes both inputs' gradients.
      return LayerOps{op::kMatMulForward, op::kMatMulGrad, ""};
    case v1::TRANSPOSE:
      // The gradient is the transpose by the inverse permutation.
      return LayerOps{op::kTranspose, op::kTranspose, ""};
    case v1::RESHAPE:
      return LayerOps{op::kReshape, op::kReshape, ""};
    case v1::BINARY:
      // One gradient call writes both inputs' gradients, each reduced over
      // its broadcast axes.
      return LayerOps{op::kBinaryForward, op::kBinaryGrad, ""};
    case v1::UNARY:
      return LayerOps{op::kUnaryForward, op::kUnaryGrad, ""};
    case v1::COMPARE:
      // No gradient flows through a comparison.
      return LayerOps{op::kCompare, "", ""};
    case v1::WHERE:
      // Gradients to a and b (inputs 1 and 2), none to the condition.
      return LayerOps{op::kWhereForward, op::kWhereGrad, ""};
    case v1::REDUCE:
      return LayerOps{op::kReduceForward, op::kReduceGrad, ""};
    case v1::EMBEDDING:
      // Its input is token ids: no input gradient.
      return LayerOps{op::kEmbeddingForward, "", op::kEmbeddingGradWeight};
    case v1::CONSTANT:
      return LayerOps{op::kConstant, "", ""};
    case v1::PARAMETER:
      return LayerOps{op::kParameterForward, "", op::kParameterGrad};
    case v1::GATHER:
      return LayerOps{op::kGatherForward, op::kGatherGrad, ""};
    case v1::CONCAT:
      return LayerOps{op::kConcatForward, op::kConcatGrad, ""};
    case v1::SLICE:
      return LayerOps{op::kSliceForward, op::kSliceGrad, ""};
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "layer op %s (%d) cannot be executed",
          v1::LayerOp_Name(layer_op).empty() ? "?" : v1::LayerOp_Name(layer_op),
          static_cast<int>(layer_op)));
  }
}

absl::StatusOr<OptimizerOps> OpsOfOptimizer(v1::OptimizerKind kind) {
  switch (kind) {
    case v1::OPTIMIZER_KIND_UNSPECIFIED:
    case v1::SGD:
      return OptimizerOps{op::kSgdUpdate, {}};
    case v1::MOMENTUM:
      return OptimizerOps{op::kMomentumUpdate, {kSlotVelocity}};
    case v1::ADAM:
      return OptimizerOps{op::kAdamUpdate, {kSlotAdamM, kSlotAdamV}};
    case v1::ADAMW:
      return OptimizerOps{op::kAdamWUpdate, {kSlotAdamM, kSlotAdamV}};
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("config.optimizer.kind: unknown optimizer %d",
                          static_cast<int>(kind)));
  }
}

absl::StatusOr<std::vector<v1::ManifestEntry>> StepTensors(
    const ModelPlan& plan, const v1::JobConfig& config) {
  LS_RETURN_IF_ERROR(CheckPlanStructure(plan));
  LS_ASSIGN_OR_RETURN(OptimizerOps opt,
                      OpsOfOptimizer(config.optimizer().kind()));
  const std::vector<std::vector<Consumer>> consumers = GradientConsumers(plan);
  const std::vector<bool> carries = CarriesGradient(plan);
  const int64_t n = plan.input_shape[0];
  std::vector<v1::ManifestEntry> out;

  // 1. The batch.
  out.push_back(MakeEntry(
      v1::PHASE_INPUT, "", kInputOp, v1::INPUT, plan.input_shape, "",
      plan.input_dtype == kernels::DType::kInt32 ? v1::INT32 : v1::FLOAT32));
  out.push_back(MakeEntry(
      v1::PHASE_INPUT, "", kLabelsOp, v1::LABEL,
      plan.label_shape.empty() ? std::vector<int64_t>{n} : plan.label_shape, "",
      v1::INT32));

  // 2. Forward: each layer's output (the loss for the last one).
  for (const LayerPlan& layer : plan.layers) {
    LS_ASSIGN_OR_RETURN(LayerOps ops, OpsOfLayer(layer.op));
    const v1::TensorRole role =
        layer.op == v1::SOFTMAX_XENT ? v1::LOSS : v1::ACTIVATION;
    out.push_back(MakeEntry(v1::PHASE_FORWARD, layer.name, ops.forward, role,
                            layer.output_shape));
    if (layer.op == v1::BATCH_NORM) {
      out.push_back(MakeEntry(v1::PHASE_FORWARD, layer.name, ops.forward,
                              v1::RUNNING_STAT, {2, layer.output_shape[1]},
                              kSlotRunning));
    }
    if (layer.op == v1::DROPOUT) {
      out.push_back(MakeEntry(v1::PHASE_FORWARD, layer.name, ops.forward,
                              v1::DROPOUT_MASK, layer.output_shape, kSlotMask));
    }
  }

  // 3. Backward, layers in reverse order.
  for (int l = static_cast<int>(plan.layers.size()) - 1; l >= 0; --l) {
    const LayerPlan& layer = plan.layers[l];
    LS_ASSIGN_OR_RETURN(LayerOps ops, OpsOfLayer(layer.op));
    if (consumers[l].size() > 1) {
      out.push_back(MakeEntry(v1::PHASE_BACKWARD, layer.name, kGradAccumulateOp,
                              v1::GRAD_ACTIVATION, layer.output_shape,
                              kSlotSum));
    }
    if (const ParamPlan* b = FindParam(layer, v1::BIAS)) {
      // The normalisations' shift gradient comes from their grad_params.
      const char* bias_grad =
          layer.op == v1::LAYER_NORM || layer.op == v1::BATCH_NORM
              ? ops.grad_weight
              : op::kBiasAddGrad;
      out.push_back(MakeEntry(v1::PHASE_BACKWARD, layer.name, bias_grad,
                              v1::GRAD_BIAS, b->shape));
    }
    if (const ParamPlan* w = FindParam(layer, v1::WEIGHT)) {
      out.push_back(MakeEntry(v1::PHASE_BACKWARD, layer.name, ops.grad_weight,
                              v1::GRAD_WEIGHT, w->shape));
    }
    for (size_t k = 0; k < layer.inputs.size(); ++k) {
      if (!InputTakesGradient(plan, carries, layer, static_cast<int>(k))) {
        continue;
      }
      out.push_back(MakeEntry(v1::PHASE_BACKWARD, layer.name, ops.grad_input,
                              v1::GRAD_ACTIVATION, layer.input_shapes[k],
                              InputSlot(static_cast<int>(k))));
    }
  }

  // 3b. Gradient clipping: the global norm of every parameter gradient.
  if (config.optimizer().clip_grad_norm() > 0.0f) {
    out.push_back(
        MakeEntry(v1::PHASE_BACKWARD, "", kClipGradNormOp, v1::GRAD_NORM, {1}));
  }

  // 4. Optimizer: layers in forward order, params in order, each followed
  // by its state.
  for (const LayerPlan& layer : plan.layers) {
    for (const ParamPlan& p : layer.params) {
      out.push_back(
          MakeEntry(v1::PHASE_OPTIMIZER, layer.name, opt.op, p.role, p.shape));
      for (const std::string& slot : opt.state_slots) {
        out.push_back(MakeEntry(v1::PHASE_OPTIMIZER, layer.name, opt.op,
                                v1::OPTIMIZER_STATE, p.shape, slot));
      }
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].set_index(static_cast<int32_t>(i));
  }
  return out;
}

bool PolicyCapturesEntry(const v1::CapturePolicy& policy,
                         const v1::ManifestEntry& entry) {
  if (policy.kind() == v1::CapturePolicy::FORWARD_ONLY) {
    return entry.phase() == v1::PHASE_INPUT ||
           entry.phase() == v1::PHASE_FORWARD;
  }
  return true;
}

absl::StatusOr<std::vector<int>> CapturedSteps(const v1::CapturePolicy& policy,
                                               int steps) {
  if (steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("config.steps: %d must be >= 1", steps));
  }
  std::vector<int> out;
  switch (policy.kind()) {
    case v1::CapturePolicy::KIND_UNSPECIFIED:
    case v1::CapturePolicy::EVERY_STEP:
    case v1::CapturePolicy::FORWARD_ONLY:
      out.reserve(steps);
      for (int s = 0; s < steps; ++s) out.push_back(s);
      return out;
    case v1::CapturePolicy::EVERY_KTH_STEP: {
      const int k = policy.every_k();
      if (k < 1) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "config.capture.every_k: %d must be >= 1 for EVERY_KTH_STEP", k));
      }
      for (int s = 0; s < steps; s += k) {
        out.push_back(s);
        if (s > steps - 1 - k) break;  // next s would overflow or pass the end
      }
      if (out.back() != steps - 1) out.push_back(steps - 1);
      return out;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("config.capture.kind: unknown kind %d",
                          static_cast<int>(policy.kind())));
  }
}

absl::StatusOr<v1::TensorManifest> BuildManifest(const ModelPlan& plan,
                                                 const v1::JobConfig& config) {
  LS_ASSIGN_OR_RETURN(std::vector<v1::ManifestEntry> all,
                      StepTensors(plan, config));
  LS_ASSIGN_OR_RETURN(std::vector<int> steps,
                      CapturedSteps(config.capture(), config.steps()));
  v1::TensorManifest manifest;
  for (v1::ManifestEntry& e : all) {
    if (!PolicyCapturesEntry(config.capture(), e)) continue;
    e.set_index(manifest.entries_size());
    *manifest.add_entries() = std::move(e);
  }
  manifest.set_steps(config.steps());
  if (config.capture().kind() == v1::CapturePolicy::EVERY_KTH_STEP) {
    for (int s : steps) manifest.add_captured_steps(s);
  }
  manifest.set_manifest_digest(ComputeManifestDigest(manifest));
  return manifest;
}

std::string ComputeManifestDigest(const v1::TensorManifest& manifest) {
  v1::TensorManifest copy = manifest;
  copy.clear_manifest_digest();
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream sos(&bytes);
    google::protobuf::io::CodedOutputStream cos(&sos);
    cos.SetSerializationDeterministic(true);
    copy.SerializeToCodedStream(&cos);
  }
  return Digest128Hex(bytes);
}

std::vector<int> ExpandCapturedSteps(const v1::TensorManifest& manifest) {
  if (manifest.captured_steps_size() > 0) {
    return std::vector<int>(manifest.captured_steps().begin(),
                            manifest.captured_steps().end());
  }
  std::vector<int> out;
  out.reserve(std::max(0, manifest.steps()));
  for (int s = 0; s < manifest.steps(); ++s) out.push_back(s);
  return out;
}

std::string DescribeEntry(const v1::ManifestEntry& entry) {
  std::vector<int64_t> shape(entry.shape().begin(), entry.shape().end());
  const std::string dtype = entry.dtype() == v1::INT32   ? "int32"
                            : entry.dtype() == v1::UINT8 ? "uint8"
                                                         : "float32";
  std::string s =
      absl::StrFormat("#%d layer \"%s\" %s %s %s%s", entry.index(),
                      entry.layer(), v1::TensorRole_Name(entry.role()),
                      entry.op(), dtype, kernels::ShapeString(shape));
  if (!entry.slot().empty()) absl::StrAppend(&s, " slot ", entry.slot());
  return s;
}

}  // namespace lockstep::model
