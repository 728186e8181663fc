// A validated, shape-inferred model: what the executor runs.
//
// PlanModel() turns a lockstep.v1.Model + JobConfig into a ModelPlan, or
// fails with INVALID_ARGUMENT whose message names the layer, the field and
// the limit, e.g.
//   layers[3] "conv2": conv2d.kernel_h: 7 exceeds the padded input height 6
//   config.batch_size: 100000 exceeds the limit of 4096
// Parsing of model/config files lives in spec_io.h; the job config and
// placement checks in job_config.h.
#ifndef LOCKSTEP_MODEL_PLAN_H_
#define LOCKSTEP_MODEL_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "lockstep/v1/fingerprint.pb.h"
#include "lockstep/v1/job.pb.h"
#include "lockstep/v1/model.pb.h"
#include "model/job_config.h"

namespace lockstep::model {

// The batch input is layer index -1.
inline constexpr int kModelInput = -1;
// The name by which Layer.inputs names the model input (no layer can be
// called this: '<' is not allowed in layer names).
inline constexpr char kModelInputName[] = "<input>";

// One trainable tensor of a layer.
struct ParamPlan {
  std::string name;               // "weight" or "bias"
  lockstep::v1::TensorRole role;  // WEIGHT or BIAS
  std::vector<int64_t> shape;     // dense weight [in, units]; bias [units];
                                  // conv weight [out, in/groups, kh, kw]
  int64_t fan_in = 0;             // for the initialisers
  int64_t fan_out = 0;
  bool init_ones = false;   // LAYER_NORM's scale: initialised to 1
  bool init_zeros = false;  // PARAMETER with init ZEROS (a WEIGHT of zeros)
};

// One layer, with everything resolved.
struct LayerPlan {
  int index = 0;  // position in model.layers (= execution order)
  std::string name;
  lockstep::v1::LayerOp op = lockstep::v1::LAYER_OP_UNSPECIFIED;
  // Producer of each input: a layer index, or kModelInput for the batch.
  std::vector<int> inputs;
  // Shapes with the batch dimension first.
  std::vector<std::vector<int64_t>> input_shapes;
  std::vector<int64_t> output_shape;  // SOFTMAX_XENT: [1] (the mean loss)
  // False for an unbatched output (CONSTANT, PARAMETER, and graph ops whose
  // inputs are all unbatched): output_shape then has no batch dimension.
  bool batched = true;
  std::vector<ParamPlan> params;  // empty for parameter-free ops
  // Kernel attributes (stride, padding, dilation, window, ...). Dense
  // layers use transpose_x = transpose_w = false with weight [in, units].
  kernels::OpAttrs attrs;
  // DENSE with dense.last_axis: the kernels see the input as
  // [prod(leading), K] and the output as [prod(leading), units].
  // MATMUL of a batched a and an unbatched 2-D b: the kernels see a as
  // [prod(leading), K] and the output as [prod(leading), N'].
  bool last_axis = false;
  // Graph ops (model/plan_graph.h). GATHER, CONCAT, SLICE: the axis over
  // the whole shape, made non-negative (never the batch axis of a batched
  // tensor).
  int axis = 0;
  // CONSTANT: its values, row-major over output_shape.
  std::vector<float> constant_values;
  // GATHER with CONSTANT indices: the indices, negative ones wrapped once
  // (each in [0, data.shape[axis])); SLICE: the positions it takes along
  // the axis, in output order. Empty otherwise (GATHER of the model input's
  // token ids reads them from the batch).
  std::vector<int32_t> indices;
  // Layer.origin (e.g. the ONNX node), for plans and divergence reports.
  std::string origin;
};

struct ModelPlan {
  std::string model_name;
  std::vector<int64_t> input_shape;  // [N, ...] with N = config.batch_size
  // float32 examples, or int32 token ids [N, T] when an EMBEDDING layer
  // reads the model input.
  kernels::DType input_dtype = kernels::DType::kFloat32;
  // The batch's labels (int32): [N], or [N, T] (one per position) for
  // token models, whose SOFTMAX_XENT input is [N, T, num_classes].
  std::vector<int64_t> label_shape;
  int32_t num_classes = 0;
  // In execution order; the last layer is SOFTMAX_XENT over [N, classes].
  std::vector<LayerPlan> layers;
  int64_t parameter_count = 0;  // elements over all ParamPlans
};

// Validates `model` and `config` against `limits` and infers every shape.
// Calls ValidateJobConfig first. Errors are INVALID_ARGUMENT; the first
// problem found (config first, then the model in layer order) is reported.
// model/README.md documents every rule. Thread-safe (pure).
absl::StatusOr<ModelPlan> PlanModel(const lockstep::v1::Model& model,
                                    const lockstep::v1::JobConfig& config,
                                    const Limits& limits);

// Bytes of the tensors the executor (worker/exec/executor.cc) allocates for
// (BATCH_NORM's running statistics, 2*C floats, are not counted; they are
// smaller than its parameters' optimizer state)
// a run of `plan` with `config` and keeps alive throughout, all 4-byte
// elements:
//   the batch input and its labels (label_shape, int32);
//   per layer: its output; a gradient buffer for each input that is another
//     layer's output (BIAS_ADD reuses its output gradient, no buffer); a
//     separate output-gradient sum buffer when the output has zero or more
//     than one consumer (not for the loss); for ADD one more output-sized
//     scratch buffer;
//   per parameter: the parameter, its gradient and the optimizer state
//     (SGD none, MOMENTUM 1, ADAM 2 tensors of the parameter's shape).
// Kernel-internal scratch (im2col, thread partials) and fingerprinting are
// not counted. Saturates at INT64_MAX. PlanModel refuses a model whose
// figure exceeds Limits::max_total_tensor_bytes.
int64_t EstimateLiveTensorBytes(const ModelPlan& plan,
                                const lockstep::v1::JobConfig& config);

// Approximate floating-point operations of one forward pass of `layer`
// (batch included), a multiply-add counting as 2:
//   DENSE            2*N*K*U (+ N*U with bias)
//   CONV2D           2*N*F*OH*OW*C*KH*KW (+ N*F*OH*OW with bias)
//   CONV_TRANSPOSE2D 2*N*C*H*W*(F/groups)*KH*KW over its input (+ bias)
//   MAX/AVG_POOL2D   output elements * KH*KW
//   GLOBAL_AVG_POOL  input elements
//   RESIZE_BILINEAR  8 per output element (4 taps)
//   RELU, ADD, BIAS_ADD  output elements
//   SIGMOID, TANH, SILU, GELU, GELU_TANH  8 per element
//   SOFTMAX          4 per element
//   LAYER_NORM, BATCH_NORM  8 per element
//   SOFTMAX_XENT     4 per logit
//   MATMUL           2*(output elements)*K
//   FLATTEN, TRANSPOSE, RESHAPE  0
//   CONSTANT, PARAMETER, GATHER, CONCAT, SLICE  0 (copies)
//   BINARY, COMPARE, WHERE  output elements; UNARY 8 per element;
//   REDUCE           input elements
// A training step costs roughly 3x the forward pass. Saturates at INT64_MAX.
int64_t LayerForwardFlops(const LayerPlan& layer);
// Sum of LayerForwardFlops over the plan (saturating).
int64_t ForwardFlops(const ModelPlan& plan);

// "[16, 8, 8, 8]": the shape format every message uses.
std::string ShapeToString(const std::vector<int64_t>& shape);

// A human-readable table of the plan, one line per layer: index, name, op,
// inputs, output shape, parameter shapes and forward FLOPs, then totals.
std::string DescribePlan(const ModelPlan& plan);

}  // namespace lockstep::model

#endif  // LOCKSTEP_MODEL_PLAN_H_
