// The model zoo (examples/): every model plans with every one of its
// configs, stays cheap enough for the scalar CPU backend, has the ops it
// promises, survives a format round trip, and examples/README.md states its
// real shape, parameter count and FLOPs.
#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "model/plan.h"
#include "model/spec_io.h"

namespace lockstep::model {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::lockstep::testing::IsOk;

// A CPU training step costs about 3x the forward pass; at ~0.2 GFLOP/s on
// the scalar canonical backend this keeps a step well under 100 ms.
constexpr int64_t kMaxForwardFlops = 5'000'000;
constexpr int64_t kMaxParameters = 100'000;
// gpt_tiny (4 blocks of width 128), resnet18, mobilenet_v2 and vit_tiny are
// bounded by
// the vectorised GEMM and convolutions instead: their 40 example steps,
// every tensor fingerprinted, take a few seconds on one AVX2 core.
constexpr int64_t kMaxLargeForwardFlops = 160'000'000;
constexpr int64_t kMaxLargeParameters = 1'000'000;

const char* const kZoo[] = {"mlp",
                            "lenet5",
                            "resnet_small",
                            "gauntlet",
                            "norm_mlp",
                            "mobilenet_tiny",
                            "resnet_bn",
                            "char_lm",
                            "gpt_tiny",
                            "resnet18",
                            "mobilenet_v2",
                            "vit_tiny",
                            "conv_autoencoder"};

bool IsLarge(const std::string& name) {
  return name == "gpt_tiny" || name == "resnet18" || name == "mobilenet_v2" ||
         name == "vit_tiny";
}

std::string Examples(const std::string& relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir == nullptr ? "." : srcdir, "/",
                      workspace == nullptr ? "" : workspace, "/examples/",
                      relative);
}

std::vector<std::string> ConfigFiles(const std::string& model) {
  std::vector<std::string> configs;
  DIR* dir = opendir(Examples(model).c_str());
  if (dir == nullptr) return configs;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (absl::StartsWith(name, "config") && absl::EndsWith(name, ".json")) {
      configs.push_back(name);
    }
  }
  closedir(dir);
  std::sort(configs.begin(), configs.end());
  return configs;
}

// 1234567 -> "1,234,567".
std::string WithCommas(int64_t v) {
  std::string digits = absl::StrCat(v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

struct Loaded {
  v1::Model model;
  v1::JobConfig config;
  ModelPlan plan;
};

Loaded Load(const std::string& name, const std::string& config,
            const std::string& model_file = "model.json") {
  Loaded l;
  absl::StatusOr<v1::Model> model =
      ReadModelFile(Examples(name + "/" + model_file));
  EXPECT_THAT(model, IsOk());
  absl::StatusOr<v1::JobConfig> cfg =
      ReadJobConfigFile(Examples(name + "/" + config));
  EXPECT_THAT(cfg, IsOk());
  if (!model.ok() || !cfg.ok()) return l;
  l.model = *model;
  l.config = *cfg;
  absl::StatusOr<ModelPlan> plan = PlanModel(l.model, l.config, Limits());
  EXPECT_THAT(plan, IsOk()) << name << " + " << config;
  if (plan.ok()) l.plan = *std::move(plan);
  return l;
}

std::multiset<v1::LayerOp> Ops(const ModelPlan& plan) {
  std::multiset<v1::LayerOp> ops;
  for (const LayerPlan& l : plan.layers) ops.insert(l.op);
  return ops;
}

TEST(ZooTest, EveryModelPlansWithEveryConfig) {
  for (const char* name : kZoo) {
    const std::vector<std::string> configs = ConfigFiles(name);
    ASSERT_FALSE(configs.empty()) << "no config*.json in examples/" << name;
    for (const std::string& config : configs) {
      SCOPED_TRACE(absl::StrCat(name, "/", config));
      const Loaded l = Load(name, config);
      EXPECT_EQ(l.plan.model_name, name);
      const bool large = IsLarge(name);
      EXPECT_GT(l.plan.parameter_count, 0);
      EXPECT_LE(l.plan.parameter_count,
                large ? kMaxLargeParameters : kMaxParameters);
      EXPECT_GT(ForwardFlops(l.plan), 0);
      EXPECT_LE(ForwardFlops(l.plan),
                large ? kMaxLargeForwardFlops : kMaxForwardFlops);
    }
  }
}

TEST(ZooTest, ReadmeStatesShapesParametersAndFlops) {
  std::ifstream in(Examples("README.md"));
  ASSERT_TRUE(in.good());
  std::stringstream readme;
  readme << in.rdbuf();
  for (const char* name : kZoo) {
    const Loaded l = Load(name, "config.json");
    std::vector<int64_t> shape(l.plan.input_shape.begin() + 1,
                               l.plan.input_shape.end());
    const std::string row = absl::StrCat(
        "| [", name, "](", name, "/) | ", ShapeToString(shape), " | ",
        l.config.batch_size(), " | ", WithCommas(l.plan.parameter_count), " | ",
        WithCommas(ForwardFlops(l.plan)), " |");
    EXPECT_TRUE(absl::StrContains(readme.str(), row))
        << "examples/README.md lacks the row\n"
        << row;
  }
}

TEST(ZooTest, ModelsHaveTheirPromisedStructure) {
  {
    const ModelPlan plan = Load("mlp", "config.json").plan;
    EXPECT_EQ(Ops(plan).count(v1::DENSE), 3u);
    EXPECT_THAT(plan.input_shape, ::testing::ElementsAre(32, 64));
  }
  {
    const Loaded l = Load("lenet5", "config.json");
    const auto ops = Ops(l.plan);
    EXPECT_EQ(ops.count(v1::CONV2D), 2u);
    EXPECT_EQ(ops.count(v1::MAX_POOL2D), 2u);
    EXPECT_EQ(ops.count(v1::FLATTEN), 1u);
    EXPECT_EQ(ops.count(v1::DENSE), 2u);
    EXPECT_EQ(l.config.batch_size(), 16);
    EXPECT_EQ(l.config.optimizer().kind(), v1::MOMENTUM);
  }
  {
    const ModelPlan plan = Load("resnet_small", "config.json").plan;
    const auto ops = Ops(plan);
    EXPECT_EQ(ops.count(v1::ADD), 2u);
    EXPECT_EQ(ops.count(v1::GLOBAL_AVG_POOL), 1u);
    EXPECT_EQ(plan.layers[0].op, v1::CONV2D);
  }
  {
    // The gauntlet holds every op of the first op set (up to BIAS_ADD), and
    // a DENSE with a long K (split-K); norm_mlp, resnet_bn, char_lm,
    // gpt_tiny and conv_autoencoder every later op of op set v2. Of the graph
    // primitives (op set v3, from CONSTANT on), gpt_tiny's model_tied.json
    // holds PARAMETER and GATHER; the others are covered by
    // model/plan_graph_test and worker/exec/graph_executor_test.
    const ModelPlan plan = Load("gauntlet", "config.json").plan;
    const auto ops = Ops(plan);
    auto v2 = Ops(Load("norm_mlp", "config.json").plan);
    for (const char* name :
         {"resnet_bn", "char_lm", "gpt_tiny", "conv_autoencoder"}) {
      for (v1::LayerOp o : Ops(Load(name, "config.json").plan)) v2.insert(o);
    }
    // Op set v3 (the graph primitives, CONSTANT .. SLICE) is what imported
    // ONNX graphs are made of; the zoo's own JSON models do not use it.
    // CONV_TRANSPOSE2D (op set v2, numbered after them) is in
    // conv_autoencoder.
    for (int op = v1::LayerOp_MIN + 1; op <= v1::LayerOp_MAX; ++op) {
      if (op >= v1::CONSTANT && op != v1::CONV_TRANSPOSE2D) continue;
      const v1::LayerOp o = static_cast<v1::LayerOp>(op);
      EXPECT_GE(o <= v1::BIAS_ADD ? ops.count(o) : v2.count(o), 1u)
          << v1::LayerOp_Name(o);
    }
    int64_t longest_k = 0;
    for (const LayerPlan& l : plan.layers) {
      if (l.op == v1::DENSE) {
        longest_k = std::max(longest_k, l.params[0].shape[0]);
      }
    }
    EXPECT_GE(longest_k, 1024);
    const auto tied =
        Ops(Load("gpt_tiny", "config.json", "model_tied.json").plan);
    EXPECT_EQ(tied.count(v1::PARAMETER), 1u);
    EXPECT_EQ(tied.count(v1::GATHER), 1u);
  }
}

// gpt_tiny is the promised GPT-style decoder: 4 pre-LayerNorm blocks of
// width 128 with 4 causal heads of 32, each head's q, k, v, scores, probs
// and context a layer output of its own; AdamW with clipping, byte-level.
TEST(ZooTest, GptTinyIsAFourBlockCausalDecoder) {
  const Loaded l = Load("gpt_tiny", "config.json");
  const auto ops = Ops(l.plan);
  EXPECT_EQ(ops.count(v1::EMBEDDING), 1u);
  EXPECT_EQ(ops.count(v1::MATMUL), 8u);  // scores and context per block
  EXPECT_EQ(ops.count(v1::SOFTMAX), 4u);
  EXPECT_EQ(ops.count(v1::TRANSPOSE), 16u);
  EXPECT_EQ(ops.count(v1::RESHAPE), 16u);
  EXPECT_EQ(ops.count(v1::LAYER_NORM), 9u);
  EXPECT_EQ(ops.count(v1::GELU), 4u);
  EXPECT_EQ(ops.count(v1::ADD), 8u);
  EXPECT_EQ(l.plan.num_classes, 256);
  EXPECT_EQ(l.config.optimizer().kind(), v1::ADAMW);
  EXPECT_GT(l.config.optimizer().clip_grad_norm(), 0.0f);
  const int64_t n = l.plan.input_shape[0], t = l.plan.input_shape[1];
  for (const LayerPlan& layer : l.plan.layers) {
    if (layer.op == v1::SOFTMAX) {
      EXPECT_TRUE(layer.attrs.causal) << layer.name;
      EXPECT_THAT(layer.output_shape, ::testing::ElementsAre(n, 4, t, t));
    }
    if (layer.name == "b0.q_t" || layer.name == "b0.ctx") {
      EXPECT_THAT(layer.output_shape, ::testing::ElementsAre(n, 4, t, 32));
    }
    if (layer.name == "b0.scores") {
      EXPECT_TRUE(layer.attrs.transpose_w);
      EXPECT_EQ(layer.attrs.scale, static_cast<float>(1.0 / std::sqrt(32.0)));
    }
    if (layer.op == v1::DENSE) {
      EXPECT_TRUE(layer.last_axis) << layer.name;
    }
  }
}

// resnet18 is ResNet-18 for 32x32 inputs: a 3x3 stem, four stages of two
// BasicBlocks (the first of stages 2-4 strided, with a 1x1 projection),
// batch norm after every convolution, at an eighth of the stem width of 64
// (the benchmark model worker/exec/bench_models/resnet18_cifar is full
// width).
TEST(ZooTest, Resnet18HasEighteenWeightedLayers) {
  const Loaded l = Load("resnet18", "config.json");
  const auto ops = Ops(l.plan);
  int three_by_three = 0, strided = 0;
  for (const LayerPlan& layer : l.plan.layers) {
    if (layer.op != v1::CONV2D) continue;
    if (layer.attrs.kernel_h == 3) ++three_by_three;
    if (layer.attrs.stride_h == 2) ++strided;
  }
  // 17 3x3 convolutions and the classifier: the 18 layers; plus 3 1x1
  // projections.
  EXPECT_EQ(three_by_three, 17);
  EXPECT_EQ(ops.count(v1::CONV2D), 20u);
  EXPECT_EQ(ops.count(v1::DENSE), 1u);
  EXPECT_EQ(ops.count(v1::BATCH_NORM), 20u);
  EXPECT_EQ(ops.count(v1::ADD), 8u);
  EXPECT_EQ(strided, 6);  // 3 first convolutions and 3 projections
  EXPECT_THAT(l.plan.input_shape, ::testing::ElementsAre(8, 3, 32, 32));
}

// mobilenet_v2: inverted residual blocks (1x1 expansion, depthwise 3x3,
// linear 1x1 projection, each with batch norm), residual ADDs where stride
// and width allow.
TEST(ZooTest, MobilenetV2HasInvertedResiduals) {
  const Loaded l = Load("mobilenet_v2", "config.json");
  const auto ops = Ops(l.plan);
  int depthwise = 0;
  for (const LayerPlan& layer : l.plan.layers) {
    if (layer.op == v1::CONV2D && layer.attrs.groups > 1) {
      ++depthwise;
      EXPECT_EQ(layer.attrs.groups, layer.input_shapes[0][1]) << layer.name;
      EXPECT_EQ(layer.output_shape[1], layer.input_shapes[0][1]) << layer.name;
    }
  }
  EXPECT_EQ(depthwise, 8);
  EXPECT_EQ(ops.count(v1::ADD), 3u);
  EXPECT_EQ(ops.count(v1::BATCH_NORM), ops.count(v1::CONV2D));
  EXPECT_THAT(l.plan.input_shape, ::testing::ElementsAre(16, 3, 32, 32));
}

// vit_tiny is a Vision Transformer: 4x4 patches embedded by a strided
// convolution into 64 tokens of width 64, a learned positional embedding
// (a PARAMETER added with broadcasting over the batch), 2 pre-LayerNorm
// blocks of bidirectional 4-head attention and GELU MLPs, the mean over
// tokens (REDUCE) and a linear head.
TEST(ZooTest, VitTinyIsAPatchTransformer) {
  const Loaded l = Load("vit_tiny", "config.json");
  const auto ops = Ops(l.plan);
  EXPECT_EQ(ops.count(v1::CONV2D), 1u);
  EXPECT_EQ(ops.count(v1::PARAMETER), 1u);
  EXPECT_EQ(ops.count(v1::BINARY), 1u);
  EXPECT_EQ(ops.count(v1::REDUCE), 1u);
  EXPECT_EQ(ops.count(v1::MATMUL), 4u);
  EXPECT_EQ(ops.count(v1::SOFTMAX), 2u);
  EXPECT_EQ(ops.count(v1::LAYER_NORM), 5u);
  const int64_t n = l.plan.input_shape[0];
  for (const LayerPlan& layer : l.plan.layers) {
    if (layer.op == v1::SOFTMAX) {
      EXPECT_FALSE(layer.attrs.causal) << layer.name;
      EXPECT_THAT(layer.output_shape, ::testing::ElementsAre(n, 4, 64, 64));
    }
    if (layer.name == "pos") {
      EXPECT_FALSE(layer.batched);
      EXPECT_THAT(layer.output_shape, ::testing::ElementsAre(64, 64));
    }
    if (layer.name == "embed") {
      EXPECT_TRUE(layer.batched);
      EXPECT_THAT(layer.output_shape, ::testing::ElementsAre(n, 64, 64));
    }
    if (layer.name == "pool") {
      EXPECT_THAT(layer.output_shape, ::testing::ElementsAre(n, 64));
    }
  }
}

TEST(ZooTest, ModelsRoundTripThroughBothFormats) {
  for (const char* name : kZoo) {
    const Loaded l = Load(name, "config.json");
    std::string text;
    ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(l.model, &text));
    absl::StatusOr<v1::Model> from_text = ParseModel(text, "printed");
    ASSERT_THAT(from_text, IsOk());
    EXPECT_TRUE(MessageDifferencer::Equals(l.model, *from_text)) << name;
    std::string json;
    ASSERT_TRUE(
        google::protobuf::util::MessageToJsonString(l.model, &json).ok());
    absl::StatusOr<v1::Model> from_json = ParseModel(json, "printed.json");
    ASSERT_THAT(from_json, IsOk());
    EXPECT_TRUE(MessageDifferencer::Equals(l.model, *from_json)) << name;
  }
}

}  // namespace
}  // namespace lockstep::model
