// ONNX import of models exported from PyTorch at test time
// (export_models.py, Debian's python3-torch), and of small graphs built
// here for the error paths.
#include "client/onnx_import.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/commands.h"
#include "client/onnx_cli.h"
#include "common/sha256.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "model/job_config.h"
#include "model/plan.h"
#include "model/spec_io.h"
#include "onnx/onnx.pb.h"

namespace lockstep::client {
namespace {

namespace v1 = ::lockstep::v1;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The exported models, made once for the whole suite.
class OnnxImportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TmpDir() + "/onnx_models");
    const std::string cmd = absl::StrCat(
        "/usr/bin/python3 tests/onnx/export_models.py ", *dir_, " 2>&1");
    ASSERT_EQ(std::system(cmd.c_str()), 0)
        << "export_models.py failed (needs python3-torch)";
  }
  static std::string Path(const std::string& name) {
    return *dir_ + "/" + name + ".onnx";
  }
  static onnx::ModelProto Onnx(const std::string& name) {
    onnx::ModelProto m;
    EXPECT_TRUE(m.ParseFromString(ReadFile(Path(name))));
    return m;
  }
  static std::string* dir_;
};
std::string* OnnxImportTest::dir_ = nullptr;

std::map<std::string, int> OpCounts(const v1::Model& m) {
  std::map<std::string, int> c;
  for (const auto& l : m.layers()) ++c[v1::LayerOp_Name(l.op())];
  return c;
}

const v1::Layer* FindLayer(const v1::Model& m, const std::string& name) {
  for (const auto& l : m.layers()) {
    if (l.name() == name) return &l;
  }
  return nullptr;
}

const v1::ParameterTensor* FindTensor(const v1::ParameterSet& p,
                                      const std::string& layer,
                                      const std::string& param) {
  for (const auto& t : p.tensors()) {
    if (t.layer() == layer && t.param() == param) return &t;
  }
  return nullptr;
}

// Float32 bit patterns of a tensor's data or of an ONNX initializer.
std::vector<uint32_t> Bits(const std::string& bytes) {
  std::vector<uint32_t> b(bytes.size() / 4);
  std::memcpy(b.data(), bytes.data(), 4 * b.size());
  return b;
}
std::vector<uint32_t> Bits(const onnx::TensorProto& t) {
  if (t.has_raw_data()) return Bits(t.raw_data());
  std::vector<uint32_t> b(t.float_data_size());
  std::memcpy(b.data(), t.float_data().data(), 4 * b.size());
  return b;
}
const onnx::TensorProto& Init(const onnx::ModelProto& m,
                              const std::string& name) {
  for (const auto& t : m.graph().initializer()) {
    if (t.name() == name) return t;
  }
  ADD_FAILURE() << "no initializer " << name;
  static onnx::TensorProto none;
  return none;
}
std::vector<uint32_t> Transposed(const std::vector<uint32_t>& b, int64_t rows,
                                 int64_t cols) {
  std::vector<uint32_t> t(b.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = b[i * cols + j];
  }
  return t;
}

// Every float initializer of `m` except `buffers` is in the ParameterSet:
// bit for bit, transposed (a Gemm weight with transB), or as a half of a
// BATCH_NORM running_stats tensor; and the ParameterSet holds nothing else.
void ExpectEveryInitializerLanded(const onnx::ModelProto& m,
                                  const v1::ParameterSet& p,
                                  const std::set<std::string>& buffers) {
  int64_t expected_elements = 0;
  for (const auto& init : m.graph().initializer()) {
    if (init.data_type() != onnx::TensorProto::FLOAT ||
        buffers.count(init.name())) {
      continue;
    }
    const std::vector<uint32_t> want = Bits(init);
    expected_elements += want.size();
    bool found = false;
    for (const auto& t : p.tensors()) {
      const std::vector<uint32_t> got = Bits(t.data());
      if (got == want) found = true;
      if (init.dims_size() == 2 &&
          got == Transposed(want, init.dims(0), init.dims(1))) {
        found = true;
      }
      if (t.param() == "running_stats" && got.size() == 2 * want.size() &&
          (std::equal(want.begin(), want.end(), got.begin()) ||
           std::equal(want.begin(), want.end(), got.begin() + want.size()))) {
        found = true;
      }
    }
    EXPECT_TRUE(found) << "initializer " << init.name()
                       << " is not in the ParameterSet";
  }
  int64_t elements = 0;
  for (const auto& t : p.tensors()) {
    int64_t n = 1;
    for (int64_t d : t.shape()) n *= d;
    EXPECT_EQ(static_cast<int64_t>(t.data().size()), 4 * n) << t.layer();
    elements += n;
  }
  EXPECT_EQ(elements, expected_elements);
}

v1::JobConfig Config(bool tokens) {
  v1::JobConfig c;
  c.set_seed(1);
  c.set_batch_size(4);
  c.set_steps(2);
  c.mutable_optimizer()->set_kind(v1::SGD);
  c.mutable_optimizer()->set_learning_rate(0.1f);
  if (tokens) {
    c.mutable_dataset()->mutable_tokens();
  } else {
    c.mutable_dataset()->mutable_synthetic();
  }
  return c;
}

// PlanModel must accept an imported model.
void ExpectPlans(const v1::Model& model, bool tokens) {
  EXPECT_THAT(model::PlanModel(model, Config(tokens), model::Limits()), IsOk());
}

TEST_F(OnnxImportTest, MlpMapsGemmToDense) {
  absl::StatusOr<ImportedModel> m = ImportOnnxFile(Path("mlp"));
  ASSERT_THAT(m, IsOk());
  const v1::Model& model = m->model;
  EXPECT_EQ(model.name(), "mlp");
  EXPECT_THAT(model.input_shape(), ::testing::ElementsAre(12));
  EXPECT_EQ(model.num_classes(), 5);
  std::vector<std::string> names, ops;
  for (const auto& l : model.layers()) {
    names.push_back(l.name());
    ops.push_back(v1::LayerOp_Name(l.op()));
  }
  EXPECT_THAT(names, ::testing::ElementsAre("fc1.Gemm", "Relu", "fc2.Gemm",
                                            "Tanh", "out.Gemm", "loss"));
  EXPECT_THAT(ops, ::testing::ElementsAre("DENSE", "RELU", "DENSE", "TANH",
                                          "DENSE", "SOFTMAX_XENT"));
  EXPECT_EQ(model.layers(0).inputs_size(), 0);  // reads the model input
  EXPECT_EQ(model.layers(0).origin(), "/fc1/Gemm (Gemm)");
  EXPECT_EQ(model.layers(0).dense().units(), 16);
  EXPECT_TRUE(model.layers(0).dense().use_bias());
  EXPECT_THAT(model.layers(5).inputs(), ::testing::ElementsAre("out.Gemm"));

  // nn.Linear exports W [out, in] with transB = 1; DENSE's weight is
  // [in, out].
  const onnx::ModelProto onnx_model = Onnx("mlp");
  const v1::ParameterTensor* w =
      FindTensor(m->parameters, "fc1.Gemm", "weight");
  ASSERT_NE(w, nullptr);
  EXPECT_THAT(w->shape(), ::testing::ElementsAre(12, 16));
  EXPECT_EQ(Bits(w->data()),
            Transposed(Bits(Init(onnx_model, "fc1.weight")), 16, 12));
  const v1::ParameterTensor* b = FindTensor(m->parameters, "out.Gemm", "bias");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(Bits(b->data()), Bits(Init(onnx_model, "out.bias")));
  ExpectEveryInitializerLanded(onnx_model, m->parameters, {});

  // The digest names exactly the serialized ParameterSet.
  EXPECT_EQ(model.parameters_digest(),
            "sha256:" + Sha256Hex(m->parameters_bytes));
  v1::ParameterSet reparsed;
  ASSERT_TRUE(reparsed.ParseFromString(m->parameters_bytes));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
      reparsed, m->parameters));

  // Only existing ops: PlanModel accepts it today.
  EXPECT_THAT(model::PlanModel(model, Config(false), model::Limits()), IsOk());
}

TEST_F(OnnxImportTest, CnnKeepsBatchNormDropoutAndDepthwiseConv) {
  absl::StatusOr<ImportedModel> m = ImportOnnxFile(Path("cnn"));
  ASSERT_THAT(m, IsOk());
  const v1::Model& model = m->model;
  EXPECT_THAT(model.input_shape(), ::testing::ElementsAre(3, 8, 8));
  EXPECT_EQ(model.num_classes(), 4);
  EXPECT_EQ(OpCounts(model), (std::map<std::string, int>{{"BATCH_NORM", 2},
                                                         {"BINARY", 1},
                                                         {"CONV2D", 3},
                                                         {"DENSE", 1},
                                                         {"DROPOUT", 1},
                                                         {"FLATTEN", 1},
                                                         {"GLOBAL_AVG_POOL", 1},
                                                         {"MAX_POOL2D", 1},
                                                         {"RELU", 2},
                                                         {"RESHAPE", 1},
                                                         {"SOFTMAX_XENT", 1}}));
  EXPECT_EQ(model.layers(0).name(), "stem.Conv");
  const v1::Layer* dw = FindLayer(model, "dw.Conv");
  ASSERT_NE(dw, nullptr);
  EXPECT_EQ(dw->conv2d().groups(), 8);
  EXPECT_EQ(dw->conv2d().pad_h(), 1);
  EXPECT_TRUE(dw->conv2d().use_bias());
  EXPECT_FALSE(model.layers(0).conv2d().use_bias());
  // PyTorch momentum 0.2 and the default 0.1 come back from ONNX's 0.8 and
  // 0.9.
  const v1::Layer* bn1 = FindLayer(model, "bn1.BatchNormalization");
  const v1::Layer* bn2 = FindLayer(model, "bn2.BatchNormalization");
  ASSERT_NE(bn1, nullptr);
  ASSERT_NE(bn2, nullptr);
  EXPECT_EQ(bn1->batch_norm().momentum(), 0.2f);
  EXPECT_EQ(bn2->batch_norm().momentum(), 0.1f);
  EXPECT_FALSE(bn1->batch_norm().eval());
  const v1::Layer* drop = FindLayer(model, "drop.Dropout");
  ASSERT_NE(drop, nullptr);
  EXPECT_EQ(drop->dropout().rate(), 0.25f);
  // The residual add reads the first ReLU and the pointwise conv.
  const v1::Layer* add = FindLayer(model, "Add");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->binary().kind(), v1::BINARY_ADD);
  EXPECT_THAT(add->inputs(), ::testing::ElementsAre("Relu", "pw.Conv"));

  const onnx::ModelProto onnx_model = Onnx("cnn");
  const v1::ParameterTensor* stats =
      FindTensor(m->parameters, "bn1.BatchNormalization", "running_stats");
  ASSERT_NE(stats, nullptr);
  EXPECT_THAT(stats->shape(), ::testing::ElementsAre(2, 8));
  std::vector<uint32_t> want = Bits(Init(onnx_model, "bn1.running_mean"));
  const std::vector<uint32_t> var = Bits(Init(onnx_model, "bn1.running_var"));
  want.insert(want.end(), var.begin(), var.end());
  EXPECT_EQ(Bits(stats->data()), want);
  const v1::ParameterTensor* w = FindTensor(m->parameters, "dw.Conv", "weight");
  ASSERT_NE(w, nullptr);
  EXPECT_THAT(w->shape(), ::testing::ElementsAre(8, 1, 3, 3));
  EXPECT_EQ(Bits(w->data()), Bits(Init(onnx_model, "dw.weight")));
  ExpectEveryInitializerLanded(onnx_model, m->parameters, {});
  ExpectPlans(model, false);
}

TEST_F(OnnxImportTest, AutoencoderMapsConvTranspose) {
  absl::StatusOr<ImportedModel> m = ImportOnnxFile(Path("autoencoder"));
  ASSERT_THAT(m, IsOk());
  const v1::Model& model = m->model;
  const std::map<std::string, int> counts = OpCounts(model);
  EXPECT_EQ(counts.at("CONV2D"), 1);
  EXPECT_EQ(counts.at("CONV_TRANSPOSE2D"), 2);
  EXPECT_EQ(counts.at("BATCH_NORM"), 2);
  // nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1,
  // bias=False): 4x4 -> 8x8.
  const v1::Layer* dec = FindLayer(model, "dec.ConvTranspose");
  ASSERT_NE(dec, nullptr);
  EXPECT_EQ(dec->op(), v1::CONV_TRANSPOSE2D);
  const v1::Conv2dParams& d = dec->conv2d();
  EXPECT_EQ(d.filters(), 4);
  EXPECT_EQ(d.kernel_h(), 3);
  EXPECT_EQ(d.kernel_w(), 3);
  EXPECT_EQ(d.stride_h(), 2);
  EXPECT_EQ(d.stride_w(), 2);
  EXPECT_EQ(d.pad_h(), 1);
  EXPECT_EQ(d.pad_w(), 1);
  EXPECT_EQ(d.output_padding_h(), 1);
  EXPECT_EQ(d.output_padding_w(), 1);
  EXPECT_EQ(d.groups(), 1);
  EXPECT_FALSE(d.use_bias());
  // nn.ConvTranspose2d(4, 2, 2, groups=2) with its bias: 8x8 -> 9x9.
  const v1::Layer* up = FindLayer(model, "up.ConvTranspose");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->conv2d().filters(), 2);
  EXPECT_EQ(up->conv2d().groups(), 2);
  EXPECT_EQ(up->conv2d().output_padding_h(), 0);
  EXPECT_TRUE(up->conv2d().use_bias());

  // The weights keep PyTorch's [C_in, C_out / groups, kh, kw] layout.
  const onnx::ModelProto onnx_model = Onnx("autoencoder");
  const v1::ParameterTensor* w =
      FindTensor(m->parameters, "dec.ConvTranspose", "weight");
  ASSERT_NE(w, nullptr);
  EXPECT_THAT(w->shape(), ::testing::ElementsAre(6, 4, 3, 3));
  EXPECT_EQ(Bits(w->data()), Bits(Init(onnx_model, "dec.weight")));
  const v1::ParameterTensor* uw =
      FindTensor(m->parameters, "up.ConvTranspose", "weight");
  ASSERT_NE(uw, nullptr);
  EXPECT_THAT(uw->shape(), ::testing::ElementsAre(4, 1, 2, 2));
  const v1::ParameterTensor* ub =
      FindTensor(m->parameters, "up.ConvTranspose", "bias");
  ASSERT_NE(ub, nullptr);
  EXPECT_EQ(Bits(ub->data()), Bits(Init(onnx_model, "up.bias")));
  ExpectEveryInitializerLanded(onnx_model, m->parameters, {});

  // It plans, with the shapes PyTorch computed.
  absl::StatusOr<model::ModelPlan> plan =
      model::PlanModel(model, Config(false), model::Limits());
  ASSERT_THAT(plan, IsOk());
  for (const model::LayerPlan& l : plan->layers) {
    if (l.name == "dec.ConvTranspose") {
      EXPECT_THAT(l.output_shape, ::testing::ElementsAre(4, 4, 8, 8));
      EXPECT_THAT(l.params[0].shape, ::testing::ElementsAre(6, 4, 3, 3));
    }
    if (l.name == "up.ConvTranspose") {
      EXPECT_THAT(l.output_shape, ::testing::ElementsAre(4, 2, 9, 9));
    }
  }
}

TEST_F(OnnxImportTest, GptBlockFromPrimitives) {
  absl::StatusOr<ImportedModel> m = ImportOnnxFile(Path("gpt"));
  ASSERT_THAT(m, IsOk());
  const v1::Model& model = m->model;
  EXPECT_THAT(model.input_shape(), ::testing::ElementsAre(8));
  EXPECT_EQ(model.num_classes(), 32);
  // The token ids are read by the embedding, the first layer.
  EXPECT_EQ(model.layers(0).op(), v1::EMBEDDING);
  EXPECT_EQ(model.layers(0).inputs_size(), 0);
  EXPECT_EQ(model.layers(0).embedding().vocab_size(), 32);
  EXPECT_EQ(model.layers(0).embedding().dim(), 16);
  const std::map<std::string, int> ops = OpCounts(model);
  // nn.LayerNorm decomposed by opset 14: 2 ReduceMean each, 3 of them.
  EXPECT_EQ(ops.at("REDUCE"), 6);
  EXPECT_EQ(ops.at("MATMUL"), 2);  // q k^T and att v
  EXPECT_EQ(ops.at("DENSE"), 5);   // qkv, proj, fc, fc_out, lm_head
  EXPECT_EQ(ops.at("SLICE"), 3);   // Split into q, k, v
  EXPECT_EQ(ops.at("WHERE"), 1);   // masked_fill
  EXPECT_EQ(ops.at("SOFTMAX"), 1);
  EXPECT_EQ(ops.at("DROPOUT"), 1);
  EXPECT_EQ(ops.at("TRANSPOSE"), 4);
  EXPECT_EQ(ops.at("RESHAPE"), 4);
  EXPECT_EQ(ops.count("COMPARE"), 0u);  // the mask is folded at import
  EXPECT_EQ(ops.count("GATHER"), 0u);
  EXPECT_EQ(ops.count("LAYER_NORM"), 0u);
  // GELU (erf form) is Div, Erf, Add, Mul, Mul.
  const v1::Layer* erf = FindLayer(model, "Erf");
  ASSERT_NE(erf, nullptr);
  EXPECT_EQ(erf->unary().kind(), v1::UNARY_ERF);

  // The causal mask: the buffer sliced to [:, :, :T, :T], compared with 0,
  // cast: folded into one constant that is 1 above the diagonal.
  const v1::Layer* where = FindLayer(model, "attn.Where");
  ASSERT_NE(where, nullptr);
  ASSERT_EQ(where->inputs_size(), 3);
  const v1::Layer* cond = FindLayer(model, where->inputs(0));
  ASSERT_NE(cond, nullptr);
  ASSERT_EQ(cond->op(), v1::CONSTANT);
  EXPECT_THAT(cond->constant().shape(), ::testing::ElementsAre(1, 1, 8, 8));
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(cond->constant().values(i * 8 + j), j > i ? 1.0f : 0.0f);
    }
  }
  const v1::Layer* fill = FindLayer(model, where->inputs(1));
  ASSERT_NE(fill, nullptr);
  EXPECT_EQ(fill->constant().values(0), -1e4f);

  // The reshapes that split heads keep the batch first: [N, T, H, D].
  const v1::Layer* reshape = FindLayer(model, "attn.Reshape");
  ASSERT_NE(reshape, nullptr);
  EXPECT_THAT(reshape->reshape().shape(), ::testing::ElementsAre(8, 2, 8));
  const v1::Layer* qkv = FindLayer(model, "attn.qkv.MatMul");
  ASSERT_NE(qkv, nullptr);
  EXPECT_TRUE(qkv->dense().last_axis());
  EXPECT_EQ(qkv->dense().units(), 48);
  // Biases and LayerNorm scales are PARAMETER layers feeding BINARY.
  const v1::Layer* bias = FindLayer(model, "attn.qkv.bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(bias->op(), v1::PARAMETER);
  EXPECT_THAT(bias->parameter().shape(), ::testing::ElementsAre(48));
  const v1::Layer* wpe = FindLayer(model, "wpe");
  ASSERT_NE(wpe, nullptr);
  EXPECT_THAT(wpe->parameter().shape(), ::testing::ElementsAre(1, 8, 16));
  EXPECT_EQ(FindLayer(model, "attn.mask"), nullptr);

  const onnx::ModelProto onnx_model = Onnx("gpt");
  const v1::ParameterTensor* table =
      FindTensor(m->parameters, model.layers(0).name(), "weight");
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(Bits(table->data()), Bits(Init(onnx_model, "wte.weight")));
  const v1::ParameterTensor* v = FindTensor(m->parameters, "wpe", "value");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(Bits(v->data()), Bits(Init(onnx_model, "wpe")));
  // attn.mask is a buffer (no gradient reaches it): not a parameter.
  ExpectEveryInitializerLanded(onnx_model, m->parameters, {"attn.mask"});
  ExpectPlans(model, true);
}

TEST_F(OnnxImportTest, GptWarnsAboutTheUntiedCopyOfTheEmbedding) {
  absl::StatusOr<ImportedModel> m = ImportOnnxFile(Path("gpt"));
  ASSERT_THAT(m, IsOk());
  ASSERT_EQ(m->warnings.size(), 1u);
  EXPECT_THAT(m->warnings[0], HasSubstr("\"wte.weight\" are transposes of "
                                        "each other"));
}

// Without constant folding the graph keeps lm_head tied to the embedding:
// one PARAMETER read by the GATHER and, transposed, by the MATMUL.
TEST_F(OnnxImportTest, TiedEmbeddingStaysOneParameter) {
  absl::StatusOr<ImportedModel> m = ImportOnnxFile(Path("gpt_nofold"));
  ASSERT_THAT(m, IsOk());
  EXPECT_TRUE(m->warnings.empty());
  const v1::Model& model = m->model;
  const v1::Layer* table = FindLayer(model, "wte.weight");
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->op(), v1::PARAMETER);
  std::vector<std::string> readers;
  for (const auto& l : model.layers()) {
    for (const std::string& in : l.inputs()) {
      if (in == "wte.weight") readers.push_back(v1::LayerOp_Name(l.op()));
    }
  }
  EXPECT_THAT(readers, ::testing::ElementsAre("GATHER", "TRANSPOSE"));
  // The token ids go straight to the GATHER, which names the model input.
  int gathers = 0;
  for (const auto& l : model.layers()) {
    if (l.op() != v1::GATHER) continue;
    ++gathers;
    EXPECT_EQ(l.inputs(1), "<input>") << l.name();
  }
  EXPECT_EQ(gathers, 1);
  const v1::ParameterTensor* v =
      FindTensor(m->parameters, "wte.weight", "value");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(Bits(v->data()), Bits(Init(Onnx("gpt_nofold"), "wte.weight")));
  ExpectEveryInitializerLanded(Onnx("gpt_nofold"), m->parameters,
                               {"attn.mask"});
  // The table read transposed (an unbatched TRANSPOSE) plans.
  ExpectPlans(model, true);
}

TEST_F(OnnxImportTest, UnsupportedNodesAreAllListedInOneError) {
  absl::StatusOr<ImportedModel> m = ImportOnnxFile(Path("unsupported"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(m.status().message());
  EXPECT_THAT(msg, HasSubstr("4 unsupported nodes"));
  EXPECT_THAT(msg, HasSubstr("\"/GridSample\" (GridSample, opset 16)"));
  EXPECT_THAT(msg, HasSubstr("\"/lstm/LSTM\" (LSTM, opset 16)"));
  EXPECT_THAT(msg, HasSubstr("\"/lstm/Expand\" (Expand, opset 16)"));
  EXPECT_THAT(msg, HasSubstr("\"/lstm/Expand_1\" (Expand, opset 16)"));
}

TEST_F(OnnxImportTest, JsonRoundTripsThroughSpecIo) {
  absl::StatusOr<ImportedModel> m = ImportOnnxFile(Path("gpt"));
  ASSERT_THAT(m, IsOk());
  absl::StatusOr<v1::Model> back =
      model::ParseModel(ModelToJson(m->model), "gpt.json");
  ASSERT_THAT(back, IsOk());
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(*back, m->model));
}

TEST_F(OnnxImportTest, ImportCommandWritesModelAndParameters) {
  const std::string json = TmpDir() + "/cli_cnn.json";
  FILE* out = std::tmpfile();
  FILE* err = std::tmpfile();
  EXPECT_EQ(RunImport({Path("cnn")}, json, "", out, err), kExitOk);
  std::fclose(out);
  std::fclose(err);
  absl::StatusOr<v1::Model> model = model::ReadModelFile(json);
  ASSERT_THAT(model, IsOk());
  const std::string params = TmpDir() + "/cli_cnn.params";
  EXPECT_EQ(ParamsPathFor(json), params);
  EXPECT_THAT(ReadParameterBlob(params, model->parameters_digest()), IsOk());
  // A blob that does not match the digest is refused, naming both.
  EXPECT_THAT(ReadParameterBlob(params, "sha256:00"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("parameters_digest is sha256:00")));

  // submit of a model with initial parameters uploads them before it
  // submits the job: with no coordinator at 127.0.0.1:9 it stops there.
  ClientOptions options;
  options.coordinator = "127.0.0.1:9";
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = NewChannel(options);
  ASSERT_THAT(channel, IsOk());
  Client client(options, *channel);
  std::ofstream(TmpDir() + "/cli_config.json")
      << R"({"seed": 1, "batch_size": 4, "steps": 2,
             "optimizer": {"kind": "SGD", "learning_rate": 0.1},
             "dataset": {"synthetic": {}}})";
  for (const std::string& path : {json, Path("cnn")}) {
    FILE* cerr = std::tmpfile();
    Commands commands(&client, CommandOptions(), stdout, cerr);
    EXPECT_EQ(commands.Submit({path, TmpDir() + "/cli_config.json"}),
              kExitCouldNotRun);
    std::rewind(cerr);
    char buf[1024] = {0};
    const size_t n = std::fread(buf, 1, sizeof(buf) - 1, cerr);
    std::fclose(cerr);
    EXPECT_THAT(std::string(buf, n), HasSubstr("UNAVAILABLE")) << path;
  }
}

// --- small graphs built here -------------------------------------------

onnx::ModelProto Graph(int opset = 14) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(opset);
  auto* in = m.mutable_graph()->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("batch");
  for (int d : {3, 8, 8}) tt->mutable_shape()->add_dim()->set_dim_value(d);
  return m;
}
void AddFloatInit(onnx::ModelProto* m, const std::string& name,
                  std::vector<int64_t> dims, float value) {
  auto* t = m->mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) {
    t->add_dims(d);
    n *= d;
  }
  for (int64_t i = 0; i < n; ++i) t->add_float_data(value);
}
onnx::NodeProto* AddNode(onnx::ModelProto* m, const std::string& op,
                         const std::string& name,
                         std::vector<std::string> inputs,
                         const std::string& output) {
  auto* n = m->mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& i : inputs) n->add_input(i);
  n->add_output(output);
  return n;
}
void SetOutput(onnx::ModelProto* m, const std::string& name) {
  m->mutable_graph()->add_output()->set_name(name);
}
absl::StatusOr<ImportedModel> Import(const onnx::ModelProto& m,
                                     OnnxImportOptions o = {}) {
  return ImportOnnx(m.SerializeAsString(), o);
}

TEST(OnnxImportErrorsTest, NotAnOnnxFile) {
  EXPECT_THAT(ImportOnnx("\xff\xff\xff garbage", {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not an ONNX model")));
}

TEST(OnnxImportErrorsTest, LimitsAreNamed) {
  onnx::ModelProto m = Graph();
  AddFloatInit(&m, "w", {4, 3, 3, 3}, 0.5f);
  AddNode(&m, "Conv", "conv", {"x", "w"}, "y");
  SetOutput(&m, "y");
  OnnxImportOptions o;
  o.max_file_bytes = 16;
  EXPECT_THAT(Import(m, o), StatusIs(absl::StatusCode::kResourceExhausted,
                                     HasSubstr("over the limit of 16 bytes")));
  o = {};
  o.max_nodes = 0;
  EXPECT_THAT(Import(m, o), StatusIs(absl::StatusCode::kResourceExhausted,
                                     HasSubstr("graph.node: 1 nodes exceed "
                                               "the limit of 0")));
  o = {};
  o.max_initializer_bytes = 100;
  EXPECT_THAT(Import(m, o),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("graph.initializer: more than the limit of "
                                 "100 bytes")));
  EXPECT_THAT(Import(m), IsOk());
}

TEST(OnnxImportErrorsTest, OpsetOutsideTheSupportedRange) {
  onnx::ModelProto m = Graph(19);
  AddNode(&m, "Relu", "relu", {"x"}, "y");
  SetOutput(&m, "y");
  EXPECT_THAT(Import(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("ai.onnx opset 19 is outside the "
                                            "supported 7..18")));
}

TEST(OnnxImportErrorsTest, FrozenBatchNormIsImportedWithAWarning) {
  onnx::ModelProto m = Graph();
  for (const char* name : {"s", "b", "mean", "var"}) {
    AddFloatInit(&m, name, {3}, 1.0f);
  }
  auto* n = AddNode(&m, "BatchNormalization", "/bn",
                    {"x", "s", "b", "mean", "var"}, "y");
  auto* mom = n->add_attribute();
  mom->set_name("momentum");
  mom->set_type(onnx::AttributeProto::FLOAT);
  mom->set_f(0.99f);
  SetOutput(&m, "y");
  absl::StatusOr<ImportedModel> r = Import(m);
  ASSERT_THAT(r, IsOk());
  const v1::Layer& bn = r->model.layers(0);
  EXPECT_TRUE(bn.batch_norm().eval());
  EXPECT_EQ(bn.batch_norm().momentum(), 0.01f);
  ASSERT_EQ(r->warnings.size(), 1u);
  EXPECT_THAT(r->warnings[0], HasSubstr("training_mode is 0"));
}

TEST(OnnxImportErrorsTest, Opset17LayerNormalizationIsOneLayerNorm) {
  onnx::ModelProto m = Graph(17);
  AddFloatInit(&m, "gamma", {8}, 1.5f);
  AddFloatInit(&m, "beta", {8}, -0.25f);
  AddNode(&m, "LayerNormalization", "/ln", {"x", "gamma", "beta"}, "n");
  AddNode(&m, "Flatten", "/flat", {"n"}, "y");
  SetOutput(&m, "y");
  absl::StatusOr<ImportedModel> r = Import(m);
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->model.layers_size(), 3);
  EXPECT_EQ(r->model.layers(0).op(), v1::LAYER_NORM);
  EXPECT_EQ(r->model.layers(1).op(), v1::FLATTEN);
  const v1::ParameterTensor* b = FindTensor(r->parameters, "ln", "bias");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(Bits(b->data()), std::vector<uint32_t>(8, 0xbe800000u));  // -0.25
  EXPECT_THAT(model::PlanModel(r->model, Config(false), model::Limits()),
              IsOk());
  // Another epsilon is not Lockstep's LAYER_NORM.
  auto* eps = m.mutable_graph()->mutable_node(0)->add_attribute();
  eps->set_name("epsilon");
  eps->set_type(onnx::AttributeProto::FLOAT);
  eps->set_f(1e-6f);
  EXPECT_THAT(Import(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("epsilon 1e-06: Lockstep's "
                                            "LAYER_NORM uses 1e-5")));
}

TEST(OnnxImportErrorsTest, SplitMakesSlicesOnlyForOutputsThatAreRead) {
  onnx::ModelProto m = Graph();
  auto* sizes = m.mutable_graph()->add_initializer();
  sizes->set_name("sizes");
  sizes->set_data_type(onnx::TensorProto::INT64);
  sizes->add_dims(2);
  sizes->add_int64_data(1);
  sizes->add_int64_data(2);
  auto* split = AddNode(&m, "Split", "/split", {"x", "sizes"}, "a");
  split->add_output("b");
  auto* axis = split->add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(1);
  AddNode(&m, "Flatten", "/flat", {"b"}, "y");
  SetOutput(&m, "y");
  absl::StatusOr<ImportedModel> r = Import(m);
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->model.layers_size(), 3);
  const v1::Layer& slice = r->model.layers(0);
  EXPECT_EQ(slice.name(), "split.1");
  EXPECT_EQ(slice.slice().axis(), 1);
  EXPECT_EQ(slice.slice().start(), 1);
  EXPECT_EQ(slice.slice().end(), 3);
  EXPECT_EQ(r->model.num_classes(), 2 * 8 * 8);
}

TEST(OnnxImportErrorsTest, NamesFromTheFileBecomeValidNamesAndUtf8) {
  onnx::ModelProto m = Graph();
  m.mutable_graph()->set_name("bad\xff name");
  AddNode(&m, "Relu", "/blocks.0/act\xfe", {"x"}, "r");
  AddNode(&m, "Flatten", "/flat", {"r"}, "y");
  SetOutput(&m, "y");
  absl::StatusOr<ImportedModel> r = Import(m);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->model.name(), "bad? name");
  EXPECT_EQ(r->model.layers(0).name(), "blocks.0.act_");
  EXPECT_EQ(r->model.layers(0).origin(), "/blocks.0/act? (Relu)");
}

TEST(OnnxImportErrorsTest, AsymmetricConvPadsNameTheNode) {
  onnx::ModelProto m = Graph();
  AddFloatInit(&m, "w", {4, 3, 3, 3}, 0.5f);
  auto* n = AddNode(&m, "Conv", "/block/conv", {"x", "w"}, "y");
  auto* pads = n->add_attribute();
  pads->set_name("pads");
  pads->set_type(onnx::AttributeProto::INTS);
  for (int p : {0, 0, 1, 1}) pads->add_ints(p);
  SetOutput(&m, "y");
  EXPECT_THAT(Import(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("node \"/block/conv\" (Conv): "
                                            "pads [0, 0, 1, 1]: only "
                                            "symmetric padding")));
}

void AddInts(onnx::NodeProto* n, const std::string& name,
             std::vector<int64_t> values) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values) a->add_ints(v);
}

TEST(OnnxImportErrorsTest, ConvTransposeOutputPaddingMustStayBelowTheStride) {
  onnx::ModelProto m = Graph();
  AddFloatInit(&m, "w", {3, 2, 3, 3}, 0.5f);
  auto* n = AddNode(&m, "ConvTranspose", "/up", {"x", "w"}, "y");
  AddInts(n, "strides", {2, 2});
  AddInts(n, "output_padding", {2, 0});
  SetOutput(&m, "y");
  EXPECT_THAT(
      Import(m),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("node \"/up\" (ConvTranspose): pads [0, 0, 0, 0] "
                         "with output_padding [2, 0] and strides [2, 2] give "
                         "an output padding of 2 along axis 2; it must lie "
                         "in 0..1")));
  // W's first dimension is the input channel count.
  onnx::ModelProto m2 = Graph();
  AddFloatInit(&m2, "w", {4, 2, 3, 3}, 0.5f);
  AddNode(&m2, "ConvTranspose", "/up", {"x", "w"}, "y");
  SetOutput(&m2, "y");
  EXPECT_THAT(Import(m2), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("W [4, 2, 3, 3] and group 1 do "
                                             "not fit input channels 3")));
  // An output_shape larger than the full output is refused.
  onnx::ModelProto m3 = Graph();
  AddFloatInit(&m3, "w", {3, 2, 3, 3}, 0.5f);
  n = AddNode(&m3, "ConvTranspose", "/up", {"x", "w"}, "y");
  AddInts(n, "strides", {2, 2});
  AddInts(n, "output_shape", {18, 17});
  SetOutput(&m3, "y");
  EXPECT_THAT(Import(m3),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("output_shape [18, 17] is larger than the "
                                 "full transposed convolution (1 more along "
                                 "axis 2)")));
}

TEST(OnnxImportErrorsTest, ConvTransposeAttributesBeyondTheLimitsAreNamed) {
  // Each once overflowed the output-size arithmetic (INT64_MAX + 1).
  struct Case {
    const char* attr;
    std::vector<int64_t> values;
    const char* error;
  };
  const int64_t big = std::numeric_limits<int64_t>::max();
  for (const Case& c : std::vector<Case>{
           {"output_padding",
            {big, 0},
            "output_padding [9223372036854775807, 0] must be 2 values, each "
            "in 0..16777216"},
           {"output_shape",
            {-big - 1, 16},
            "output_shape [-9223372036854775808, 16] must be the 2 spatial "
            "sizes, each in 1..16777216"},
           {"pads", {1, 0, big, 0}, "pads in 0..16777216"}}) {
    onnx::ModelProto m = Graph();
    AddFloatInit(&m, "w", {3, 2, 3, 3}, 0.5f);
    auto* n = AddNode(&m, "ConvTranspose", "/up", {"x", "w"}, "y");
    AddInts(n, "strides", {2, 2});
    AddInts(n, c.attr, c.values);
    if (std::string(c.attr) == "output_padding")
      AddInts(n, "pads", {1, 0, 1, 0});
    SetOutput(&m, "y");
    EXPECT_THAT(Import(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr(c.error)))
        << c.attr;
  }
}

// Asymmetric pads (begin, end) and output_shape become a symmetric pad and
// an output padding with the same output elements.
TEST(OnnxImportErrorsTest, ConvTransposePadsAndOutputShapeMapToOutputPadding) {
  for (const bool by_shape : {false, true}) {
    onnx::ModelProto m = Graph();
    AddFloatInit(&m, "w", {3, 2, 3, 3}, 0.5f);
    auto* n = AddNode(&m, "ConvTranspose", "/up", {"x", "w"}, "y");
    AddInts(n, "strides", {2, 2});
    // 8 -> 2 * 7 + 3 = 17 before padding; 16 = 17 - (1 + 0).
    if (by_shape) {
      AddInts(n, "output_shape", {16, 16});
    } else {
      AddInts(n, "pads", {1, 1, 0, 0});
    }
    AddFloatInit(&m, "fw", {2 * 16 * 16, 3}, 0.25f);
    AddNode(&m, "Flatten", "/flat", {"y"}, "f");
    AddNode(&m, "Gemm", "/fc", {"f", "fw"}, "z");
    SetOutput(&m, "z");
    absl::StatusOr<ImportedModel> im = Import(m);
    ASSERT_THAT(im, IsOk()) << by_shape;
    const v1::Layer* up = FindLayer(im->model, "up");
    ASSERT_NE(up, nullptr);
    EXPECT_EQ(up->conv2d().pad_h(), 1);
    EXPECT_EQ(up->conv2d().pad_w(), 1);
    EXPECT_EQ(up->conv2d().output_padding_h(), 1);
    EXPECT_EQ(up->conv2d().output_padding_w(), 1);
    EXPECT_THAT(model::PlanModel(im->model, Config(false), model::Limits()),
                IsOk());
  }
}

TEST(OnnxImportErrorsTest, ShapeOperandMustBeConstant) {
  onnx::ModelProto m = Graph();
  AddNode(&m, "Relu", "relu", {"x"}, "r");
  AddNode(&m, "Reshape", "/reshape", {"x", "r"}, "y");
  SetOutput(&m, "y");
  EXPECT_THAT(Import(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("node \"/reshape\" (Reshape): "
                                            "shape (input 1, \"r\") must be "
                                            "a constant")));
}

// A Constant node "/<out>" whose value is `values` (value_ints) or `value`
// (value_float).
void AddIntsConstant(onnx::ModelProto* m, const std::string& out,
                     std::vector<int64_t> values) {
  AddInts(AddNode(m, "Constant", "/" + out, {}, out), "value_ints",
          std::move(values));
}
void AddFloatConstant(onnx::ModelProto* m, const std::string& out,
                      float value) {
  auto* v = AddNode(m, "Constant", "/" + out, {}, out)->add_attribute();
  v->set_name("value_float");
  v->set_type(onnx::AttributeProto::FLOAT);
  v->set_f(value);
}

TEST(OnnxImportErrorsTest, ReshapeEntriesBeyondTheLimitsAreNamed) {
  // One entry past the largest dimension (2^60 * 8 once overflowed).
  onnx::ModelProto m = Graph();
  AddIntsConstant(&m, "s", {-1, int64_t{1} << 60, 8});
  AddNode(&m, "Reshape", "/reshape", {"x", "s"}, "y");
  SetOutput(&m, "y");
  EXPECT_THAT(Import(m),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("node \"/reshape\" (Reshape): shape: entry "
                                 "1.15292e+18 at 1 exceeds the largest "
                                 "dimension, 16777216")));
  // Every entry within the limit, their product past an example's limit.
  onnx::ModelProto m2 = Graph();
  AddIntsConstant(&m2, "s", {-1, 1 << 24, 1 << 24, 1 << 24});
  AddNode(&m2, "Reshape", "/reshape", {"x", "s"}, "y");
  SetOutput(&m2, "y");
  EXPECT_THAT(Import(m2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("an example would exceed 1099511627776 "
                                 "elements")));
}

TEST(OnnxImportErrorsTest, SliceToInt64MaxReachesTheEnd) {
  // Exporters end a slice "to the end" with INT64_MAX, 2^63 as a double.
  onnx::ModelProto m = Graph();
  AddIntsConstant(&m, "starts", {1});
  AddIntsConstant(&m, "ends", {std::numeric_limits<int64_t>::max()});
  AddIntsConstant(&m, "axes", {1});
  AddNode(&m, "Slice", "/slice", {"x", "starts", "ends", "axes"}, "y");
  SetOutput(&m, "y");
  absl::StatusOr<ImportedModel> r = Import(m);
  ASSERT_THAT(r, IsOk());
  ASSERT_GE(r->model.layers_size(), 1);
  const v1::Layer& l = r->model.layers(0);
  ASSERT_EQ(l.op(), v1::SLICE);
  EXPECT_EQ(l.slice().axis(), 1);
  EXPECT_EQ(l.slice().start(), 1);
  EXPECT_EQ(l.slice().end(), 3);
}

TEST(OnnxImportErrorsTest, FoldedShapesStaySmallEvenWithoutElements) {
  // A constant with no elements reshaped to huge dimensions beside a 0.
  onnx::ModelProto m = Graph();
  auto* c = AddNode(&m, "Constant", "/empty", {}, "e");
  auto* v = c->add_attribute();
  v->set_name("value");
  v->set_type(onnx::AttributeProto::TENSOR);
  v->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  v->mutable_t()->add_dims(0);
  AddIntsConstant(&m, "s", {int64_t{1} << 40, 0, int64_t{1} << 40});
  AddNode(&m, "Reshape", "/fold", {"e", "s"}, "r");
  AddNode(&m, "Add", "/add", {"x", "r"}, "y");
  SetOutput(&m, "y");
  EXPECT_THAT(Import(m),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("node \"/fold\" (Reshape): result "
                                 "dimensions [1099511627776, 0, "
                                 "1099511627776] span more than 2^31 "
                                 "elements")));
  // The same as an initializer's dimensions.
  onnx::ModelProto m2 = Graph();
  auto* t = m2.mutable_graph()->add_initializer();
  t->set_name("w");
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {int64_t{0}, int64_t{1} << 40, int64_t{1} << 40}) {
    t->add_dims(d);
  }
  AddNode(&m2, "Add", "/add", {"x", "w"}, "y");
  SetOutput(&m2, "y");
  EXPECT_THAT(Import(m2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dimensions [0, 1099511627776, "
                                 "1099511627776] span more than 2^31")));
}

TEST(OnnxImportErrorsTest, SplitMustAddUpToTheAxis) {
  onnx::ModelProto m = Graph();
  AddIntsConstant(&m, "sizes", {int64_t{1} << 62, int64_t{1} << 62});
  auto* split = AddNode(&m, "Split", "/split", {"x", "sizes"}, "a");
  split->add_output("b");
  split->add_attribute()->set_name("axis");
  split->mutable_attribute(0)->set_type(onnx::AttributeProto::INT);
  split->mutable_attribute(0)->set_i(1);
  AddNode(&m, "Add", "/add", {"a", "b"}, "y");
  SetOutput(&m, "y");
  EXPECT_THAT(Import(m, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("split [4611686018427387904, "
                                 "4611686018427387904] does not add up to "
                                 "the length 3 of axis 1")));
  split->mutable_attribute(0)->set_i(0);
  EXPECT_THAT(Import(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("cannot split the batch axis")));
}

TEST(OnnxImportErrorsTest, GatherIndexFarOutsideIsNamed) {
  onnx::ModelProto m = Graph();
  AddIntsConstant(&m, "data", {5, 6, 7});
  AddFloatConstant(&m, "i", 1e30f);
  AddNode(&m, "Gather", "/gather", {"data", "i"}, "g");
  AddNode(&m, "Add", "/add", {"x", "g"}, "y");
  SetOutput(&m, "y");
  EXPECT_THAT(Import(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("index 1e+30 is outside [-3, 3)")));
}

TEST(OnnxImportErrorsTest, BatchAxisMustStayFirst) {
  onnx::ModelProto m = Graph();
  auto* n = AddNode(&m, "Transpose", "/t", {"x"}, "y");
  auto* perm = n->add_attribute();
  perm->set_name("perm");
  perm->set_type(onnx::AttributeProto::INTS);
  for (int p : {1, 0, 2, 3}) perm->add_ints(p);
  SetOutput(&m, "y");
  EXPECT_THAT(Import(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("perm[0] is 1: the batch axis "
                                            "must stay first")));
}

TEST(OnnxImportErrorsTest, InfiniteConstantIsRefused) {
  onnx::ModelProto m = Graph();
  AddFloatConstant(&m, "inf", -INFINITY);
  AddNode(&m, "Add", "/add", {"x", "inf"}, "y");
  SetOutput(&m, "y");
  EXPECT_THAT(Import(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("Lockstep constants are finite")));
}

TEST(OnnxImportErrorsTest, ModelInputReadTwiceIsNamedByItsReader) {
  // x + x: the model input has two readers' worth of wiring; the BINARY
  // names it "<input>" twice (no identity layer in between).
  onnx::ModelProto m = Graph();
  AddNode(&m, "Add", "/add", {"x", "x"}, "y");
  SetOutput(&m, "y");
  absl::StatusOr<ImportedModel> r = Import(m);
  ASSERT_THAT(r, IsOk());
  ASSERT_EQ(r->model.layers_size(), 2);
  EXPECT_EQ(r->model.layers(0).op(), v1::BINARY);
  EXPECT_THAT(r->model.layers(0).inputs(),
              ::testing::ElementsAre("<input>", "<input>"));
  EXPECT_EQ(r->model.num_classes(), 8);
}

}  // namespace
}  // namespace lockstep::client
