// The bad-spec table: every file in testdata/bad/ goes through the same path
// as a job (ReadModelFile / ReadJobConfigFile, then PlanModel) and must fail
// with its specific code and message, never crash. A *.model.* file is
// paired with testdata/good/config.json, a *.config.* file with
// testdata/good/model.json.
#include <dirent.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/plan.h"
#include "model/spec_io.h"

namespace lockstep::model {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

struct BadSpec {
  const char* file;
  absl::StatusCode code;
  const char* message;  // a substring of the error message
};

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

// clang-format off
const BadSpec kBadSpecs[] = {
    // Syntax: the file name and line:column come first.
    {"syntax_missing_comma.model.json", kInvalid,
     "syntax_missing_comma.model.json:3:3: expected ',' or '}' after an object member"},
    {"syntax_trailing_comma.model.json", kInvalid, ":8:3: trailing comma before ']'"},
    {"syntax_truncated.model.json", kInvalid, "unexpected end of input"},
    {"syntax.model.txtpb", kInvalid, "syntax.model.txtpb:4:15: Expected \":\", found \"\"fc\"\""},
    {"deep_nesting.model.json", kInvalid, "nesting deeper than 32 levels"},
    {"empty.model.json", kInvalid, "empty.model.json: is empty"},
    {"not_an_object.model.json", kInvalid, "not_an_object.model.json:1:1: a spec is a JSON object or protobuf text format, not a "
     "JSON array"},
    {"invalid_utf8.model.json", kInvalid, ":2:15: invalid UTF-8 in a string"},
    {"duplicate_key.model.json", kInvalid, ":5:3: duplicate key \"num_classes\""},
    // Unknown fields, wrong types, unknown enum names.
    {"unknown_field.model.json", kInvalid,
     "unknown_field.model.json:6:58: layers[0].dense.unit: unknown field"},
    {"unknown_field.model.txtpb", kInvalid,
     ":2:4: Message type \"lockstep.v1.Model\" has no field named \"nme\""},
    {"wrong_type_classes.model.json", kInvalid,
     ":4:3: num_classes: invalid value \"ten\" for an int32 field"},
    {"wrong_type_units.model.json", kInvalid,
     ":6:45: layers[0].dense.units: invalid value 3.5 for an int32 field"},
    {"unknown_enum.model.json", kInvalid,
     "layers[1].op: invalid value \"CONV3D\" for enum LayerOp; known values: "
     "LAYER_OP_UNSPECIFIED, DENSE, CONV2D"},
    {"unknown_enum.model.txtpb", kInvalid,
     ":6:1: Unknown enumeration value of \"LINEAR\" for field \"op\""},
    {"op_number.model.json", kInvalid, "layers[1] \"x\": op: 99 is not a known LayerOp"},
    {"op_missing.model.json", kInvalid,
     "layers[0] \"fc\": op: must be set (LAYER_OP_UNSPECIFIED)"},
    // Params that do not match the op.
    {"missing_params.model.json", kInvalid, "layers[0] \"c1\": CONV2D needs conv2d params"},
    {"wrong_params.model.txtpb", kInvalid,
     "layers[0] \"fc\": DENSE needs dense params, got pool"},
    {"params_on_relu.model.json", kInvalid, "layers[1] \"r\": RELU takes no params, got dense"},
    {"two_params.model.json", kInvalid,
     "layers[0]: only one member of oneof 'params' may be set, but 'conv2d' is set too"},
    {"two_params.model.txtpb", kInvalid,
     ":3:58: Field \"conv2d\" is specified along with field \"dense\", another member of "
     "oneof \"params\""},
    // Geometry.
    {"kernel_too_big.model.json", kInvalid,
     "layers[3] \"conv2\": conv2d.kernel_h: 7 exceeds the padded input height 6"},
    {"dilated_kernel_too_big.model.txtpb", kInvalid,
     "layers[0] \"c\": conv2d.kernel_h: 3 with dilation_h 3 spans 7, which exceeds the "
     "padded input height 6"},
    {"pool_too_big.model.txtpb", kInvalid,
     "layers[0] \"pool\": pool.kernel_h: 5 exceeds the padded input height 4"},
    {"pool_pad_too_big.model.json", kInvalid,
     "layers[0] \"pool\": pool.pad_h: 2 must be smaller than pool.kernel_h 2"},
    {"negative_padding.model.json", kInvalid,
     "layers[0] \"conv\": conv2d.pad_h: -1 is outside 0..1048576"},
    {"zero_stride_negative.model.json", kInvalid,
     "layers[0] \"conv\": conv2d.stride_w: -2 is outside 0..1048576"},
    {"resize_zero.model.json", kInvalid,
     "layers[0] \"up\": resize.out_h: 0 is outside 1..1048576"},
    {"convt_output_padding_stride.model.json", kInvalid,
     "layers[0] \"up\": conv2d.output_padding_h: 2 must be smaller than conv2d.stride_h 2"},
    {"convt_output_padding_dilation.model.json", kInvalid,
     "layers[0] \"up\": conv2d.output_padding_w: 1 must be smaller than conv2d.stride_w 1 "
     "(smaller than the dilation is not enough, unlike in PyTorch)"},
    {"convt_negative_output_padding.model.json", kInvalid,
     "layers[0] \"up\": conv2d.output_padding_h: -1 is outside 0..1048576"},
    {"convt_groups.model.json", kInvalid,
     "layers[0] \"up\": conv2d.groups: 2 must divide both the input channels (2) and "
     "conv2d.filters (3)"},
    {"convt_pad_too_big.model.json", kInvalid,
     "layers[0] \"up\": conv2d.pad_h: 2 leaves an output height of 0 (input 4, stride 1, "
     "kernel 1, dilation 1, output padding 0): it must be at least 1"},
    {"convt_on_flat.model.json", kInvalid,
     "layers[0] \"up\": CONV_TRANSPOSE2D needs a 4-D [N, C, H, W] input, got [32, 8] from "
     "the model input"},
    {"conv_output_padding.model.json", kInvalid,
     "layers[0] \"c\": conv2d.output_padding_h: 1 must be 0 for CONV2D (only "
     "CONV_TRANSPOSE2D has an output padding)"},
    {"conv_on_flat.model.json", kInvalid,
     "layers[1] \"conv\": CONV2D needs a 4-D [N, C, H, W] input, got [32, 10] from layer \"fc\""},
    // Sizes.
    {"zero_units.model.json", kInvalid, "layers[4] \"fc\": dense.units: 0 is outside 1..1048576"},
    {"absurd_units.model.json", kInvalid,
     ":7:45: layers[1].dense.units: invalid value 1000000000000 for an int32 field"},
    {"too_many_parameters.model.json", kInvalid,
     "layers[0] \"fc1\": weight [4096, 1000000] brings the parameter count over the limit "
     "of 268435456"},
    {"negative_dim.model.json", kInvalid, "model.input_shape[1]: -16 is outside 1..1048576"},
    {"zero_dim.model.txtpb", kInvalid, "model.input_shape[0]: 0 is outside 1..1048576"},
    {"empty_input_shape.model.json", kInvalid,
     "model.input_shape: must have 1 to 3 dimensions ([features] or [C, H, W], without the "
     "batch), got 0"},
    {"rank4_input.model.json", kInvalid, "model.input_shape: must have 1 to 3 dimensions"},
    {"huge_input.model.json", kInvalid,
     "model.input_shape: the batch [32, 3, 100000, 100000] exceeds the limit of 268435456 "
     "elements"},
    {"huge_activation.model.json", kInvalid,
     "layers[0] \"up\": output [32, 3, 100000, 100000] exceeds the limit of 268435456 "
     "elements"},
    {"one_class.model.json", kInvalid, "model.num_classes: 1 is outside 2..100000"},
    // 2100 RELUs between the input and the head: more than max_layers.
    {"too_many_layers.model.txtpb", kInvalid, "model.layers: 2102 layers exceeds the limit of 2048"},
    {"no_layers.model.json", kInvalid, "model.layers: the model has no layers"},
    {"no_parameters.model.json", kInvalid, "model.layers: the model has no trainable parameters"},
    // The graph.
    {"unknown_input.model.json", kInvalid, "layers[5] \"fc\": inputs: unknown layer \"fc0\""},
    {"forward_reference.model.json", kInvalid,
     "layers[1] \"r1\": inputs: layer \"fc2\" is layers[2], which comes later; inputs must "
     "name earlier layers"},
    {"cycle.model.txtpb", kInvalid, "layers[0] \"a\": inputs: layer \"b\" is layers[1], which comes later"},
    {"self_input.model.json", kInvalid,
     "layers[1] \"r1\": inputs: a layer cannot take its own output"},
    {"duplicate_names.model.json", kInvalid, "layers[2] \"fc\": name: duplicate of layers[0]"},
    {"bad_name.model.json", kInvalid, "layers[0] \"conv 1\": name: must match [A-Za-z0-9_.-]{1,64}"},
    {"empty_name.model.txtpb", kInvalid, "layers[0] \"\": name: must not be empty"},
    {"add_one_input.model.json", kInvalid, "layers[2] \"add1\": ADD needs exactly 2 inputs, got 1"},
    // Transformer primitives: the field and the limit.
    {"matmul_one_input.model.json", kInvalid, "layers[2] \"mm\": MATMUL needs exactly 2 inputs, got 1"},
    {"matmul_inner_mismatch.model.json", kInvalid,
     "layers[2] \"mm\": inputs: MATMUL's inner dimensions differ: op(a) has K = 8, op(b) has K = 4 "
     "(matmul.transpose_a = 0, matmul.transpose_b = 0)"},
    {"matmul_rank_mismatch.model.json", kInvalid,
     "layers[3] \"mm\": inputs: MATMUL needs two inputs of one rank >= 3"},
    {"matmul_batch_mismatch.model.json", kInvalid,
     "layers[3] \"mm\": inputs: MATMUL's leading (batch) dimensions must be equal; dimension 1 differs: "
     "layer \"r1\" is [32, 4, 1, 8], layer \"r2\" is [32, 2, 8, 2]"},
    {"transpose_moves_batch.model.json", kInvalid,
     "layers[2] \"t\": transpose.perm[0]: must be 0 (the batch axis stays first), got 1"},
    {"transpose_not_permutation.model.json", kInvalid,
     "layers[2] \"t\": transpose.perm[2]: 2; perm must be a permutation of 0 .. 2"},
    {"reshape_two_inferred.model.json", kInvalid,
     "layers[2] \"r\": reshape.shape[2]: a second -1 (shape[0] is already inferred); at most one -1"},
    {"reshape_wrong_count.model.json", kInvalid,
     "layers[2] \"r\": reshape.shape: [5, 5] holds 25 elements per example, but the input [32, 4, 6]"},
    // Graph primitives (op set v3).
    {"graph_gather_index.model.json", kInvalid,
     "layers[2] \"first\": GATHER index -5 (value 0 of layer \"pos\") is not a whole number in "
     "-4..3 (data [32, 4, 8] along gather.axis 1)"},
    {"graph_concat_batch_axis.model.json", kInvalid,
     "layers[2] \"ab\": concat.axis: 0 is the batch axis of a batched input, which this op cannot "
     "use"},
    {"graph_unbatched_input.model.json", kInvalid,
     "layers[1] \"r\": RELU needs batched inputs, but layer \"p\" is unbatched"},
    {"graph_parameter_init.model.json", kInvalid,
     "layers[0] \"p\": parameter.init: 7 is not a known ParameterInit"},
    {"causal_not_square.model.json", kInvalid,
     "layers[2] \"p\": softmax.causal: needs [N, ..., T, T] scores (the last two dimensions equal), "
     "got [32, 4, 6]"},
    // Broadcasting graph primitives: the field and the limit.
    {"binary_no_broadcast.model.json", kInvalid,
     "layers[2] \"mul\": inputs: BINARY inputs do not broadcast (shapes aligned on the right, each "
     "dimension equal or 1; output dimension 2 is 8, another input has 6): layer \"a\" is [32, 4, 8], "
     "layer \"b\" is [32, 4, 6]"},
    {"binary_kind_unset.model.json", kInvalid,
     "layers[1] \"sq\": binary.kind: 0 is not one of BINARY_ADD, BINARY_SUB, BINARY_MUL, BINARY_DIV, "
     "BINARY_POW, BINARY_MAX, BINARY_MIN (1 .. 7)"},
    {"binary_batched_rank.model.json", kInvalid,
     "layers[2] \"sub\": inputs: a batched BINARY input must have the output's rank 3 (its axis 0 is "
     "the batch axis), but layer \"m\" has rank 2"},
    {"unary_needs_params.model.json", kInvalid, "layers[1] \"e\": UNARY needs unary params"},
    {"where_two_inputs.model.json", kInvalid, "layers[1] \"w\": WHERE needs exactly 3 inputs, got 2"},
    {"reduce_batch_axis.model.json", kInvalid,
     "layers[1] \"s\": reduce.axes[0]: 0 is the batch axis 0 of the input [32, 4, 8] from layer "
     "\"a\"; the batch axis cannot be reduced"},
    {"reduce_axis_range.model.json", kInvalid,
     "layers[1] \"s\": reduce.axes[0]: -4 is outside -3 .. 2 (the input [32, 4, 8] from layer "
     "\"a\" has rank 3)"},
    {"reduce_axis_twice.model.json", kInvalid,
     "layers[1] \"s\": reduce.axes[1]: -1 names axis 2 a second time; axes must be distinct"},
    {"add_three_inputs.model.json", kInvalid, "layers[2] \"add1\": ADD needs exactly 2 inputs, got 3"},
    {"add_mismatch.model.json", kInvalid,
     "layers[2] \"add\": ADD inputs differ in shape: layer \"c1\" is [32, 8, 8, 8], layer "
     "\"c2\" is [32, 16, 8, 8]"},
    {"loss_not_last.model.json", kInvalid,
     "layers[1] \"loss\": SOFTMAX_XENT must be the last layer, but it is layer 2 of 3"},
    {"two_losses.model.json", kInvalid, "layers[1] \"loss1\": SOFTMAX_XENT must be the last layer"},
    {"no_loss.model.txtpb", kInvalid,
     "layers[1] \"fc\": the last layer must be SOFTMAX_XENT, got DENSE"},
    {"gap_wrong_classes.model.json", kInvalid,
     "layers[3] \"loss\": SOFTMAX_XENT input [32, 16] from layer \"gap\" has 16 classes, but "
     "model.num_classes is 10"},
    {"dense_wrong_classes.model.json", kInvalid, "has 12 classes, but model.num_classes is 10"},
    {"loss_on_4d.model.json", kInvalid,
     "layers[1] \"loss\": SOFTMAX_XENT needs a 2-D [N, num_classes] = [32, 10] input, got "
     "[32, 10, 8, 8] from layer \"conv\""},
    {"dead_layer.model.json", kInvalid, "layers[2] \"side\": output is never used"},
    // Configs.
    {"too_big_batch.config.json", kInvalid, "config.batch_size: 100000 exceeds the limit of 4096"},
    {"zero_batch.config.txtpb", kInvalid, "config.batch_size: 0 is outside 1..4096"},
    {"too_many_steps.config.json", kInvalid, "config.steps: 10000000 exceeds the limit of 100000"},
    {"negative_steps.config.json", kInvalid, "config.steps: -5 is outside 1..100000"},
    {"zero_learning_rate.config.json", kInvalid,
     "config.optimizer.learning_rate: must be > 0 and finite, got 0"},
    {"nan_learning_rate.config.json", kInvalid,
     "config.optimizer.learning_rate: must be > 0 and finite, got nan"},
    {"infinite_learning_rate.config.txtpb", kInvalid,
     "config.optimizer.learning_rate: must be > 0 and finite, got inf"},
    {"momentum_one.config.json", kInvalid, "config.optimizer.momentum: must be in [0, 1), got 1"},
    {"momentum_without_kind.config.json", kInvalid,
     "config.optimizer.momentum: applies only to kind MOMENTUM, but kind is SGD"},
    {"adam_beta2.config.txtpb", kInvalid, "config.optimizer.beta2: must be in [0, 1)"},
    {"adam_negative_epsilon.config.json", kInvalid,
     "config.optimizer.epsilon: must be > 0 and finite (0 means the default 1e-7)"},
    {"every_k_zero.config.json", kInvalid,
     "config.capture.every_k: must be >= 1 for EVERY_KTH_STEP, got 0"},
    {"every_k_wrong_kind.config.json", kInvalid,
     "config.capture.every_k: applies only to kind EVERY_KTH_STEP, but kind is FORWARD_ONLY"},
    {"dtype_int32.config.json", kInvalid, "config.dtype: only FLOAT32 is supported, got INT32"},
    {"unknown_optimizer.config.json", kInvalid,
     "optimizer.kind: invalid value \"RMSPROP\" for enum OptimizerKind"},
    {"unknown_field.config.txtpb", kInvalid,
     ":3:14: Message type \"lockstep.v1.JobConfig\" has no field named \"learning_rate\""},
    {"unknown_field.config.json", kInvalid, "optimizer.nesterov: unknown field"},
    {"op_algorithms_unknown_op.config.json", kInvalid,
     "config.op_algorithms[\"bias.grad\"]: unknown op"},
    {"op_algorithms_bad_value.config.json", kInvalid,
     "config.op_algorithms[\"conv2d.grad_weight\"]: algorithm \"Atomic!\" must match "
     "[a-z0-9_]{1,64}"},
    {"threads_negative.config.json", kInvalid, "config.threads: -1 is outside 0..1024"},
    {"file_dataset_no_path.config.json", kInvalid,
     "config.dataset.file.inputs_path: must not be empty"},
    {"synthetic_examples_small.config.json", kInvalid,
     "config.dataset.synthetic.examples: 8 is smaller than config.batch_size 32"},
    {"wrong_type_seed.config.json", kInvalid, "seed"},
    {"determinism_number.config.txtpb", kInvalid,
     "config.determinism: 7 is not a known DeterminismMode"},
    {"batch_as_string.config.json", kInvalid,
     "batch_size: invalid value \"thirty-two\" for an int32 field"},
};
// clang-format on

std::string TestData(const std::string& relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir == nullptr ? "." : srcdir, "/",
                      workspace == nullptr ? "" : workspace, "/model/testdata/",
                      relative);
}

// ReadModelFile/ReadJobConfigFile of both files, then PlanModel.
absl::Status Load(const std::string& model_path,
                  const std::string& config_path) {
  absl::StatusOr<v1::Model> model = ReadModelFile(model_path);
  if (!model.ok()) return model.status();
  absl::StatusOr<v1::JobConfig> config = ReadJobConfigFile(config_path);
  if (!config.ok()) return config.status();
  return PlanModel(*model, *config, Limits()).status();
}

absl::Status LoadBad(const std::string& file) {
  const std::string path = TestData("bad/" + file);
  if (absl::StrContains(file, ".model.")) {
    return Load(path, TestData("good/config.json"));
  }
  return Load(TestData("good/model.json"), path);
}

TEST(BadSpecTest, GoodPairsPlan) {
  for (const char* model : {"good/model.json", "good/model.txtpb"}) {
    for (const char* config : {"good/config.json", "good/config.txtpb"}) {
      EXPECT_THAT(Load(TestData(model), TestData(config)), IsOk())
          << model << " + " << config;
    }
  }
}

class BadSpecFileTest : public ::testing::TestWithParam<BadSpec> {};

TEST_P(BadSpecFileTest, FailsWithItsError) {
  const BadSpec& spec = GetParam();
  EXPECT_THAT(LoadBad(spec.file), StatusIs(spec.code, HasSubstr(spec.message)))
      << spec.file;
}

INSTANTIATE_TEST_SUITE_P(AllFiles, BadSpecFileTest,
                         ::testing::ValuesIn(kBadSpecs),
                         [](const ::testing::TestParamInfo<BadSpec>& info) {
                           std::string name = info.param.file;
                           for (char& c : name) {
                             if (!absl::ascii_isalnum(
                                     static_cast<unsigned char>(c)))
                               c = '_';
                           }
                           return name;
                         });

// Every file in testdata/bad/ has a row, and every row a file.
TEST(BadSpecTest, TableCoversTheDirectory) {
  std::set<std::string> on_disk;
  DIR* dir = opendir(TestData("bad").c_str());
  ASSERT_NE(dir, nullptr) << TestData("bad");
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") on_disk.insert(name);
  }
  closedir(dir);
  std::set<std::string> in_table;
  for (const BadSpec& spec : kBadSpecs) {
    EXPECT_TRUE(in_table.insert(spec.file).second)
        << "listed twice: " << spec.file;
  }
  for (const std::string& name : on_disk) {
    EXPECT_TRUE(in_table.count(name)) << "no expectation for bad/" << name;
  }
  for (const std::string& name : in_table) {
    EXPECT_TRUE(on_disk.count(name)) << "missing file bad/" << name;
  }
  EXPECT_GE(on_disk.size(), 25u);
}

}  // namespace
}  // namespace lockstep::model
