#include "model/spec_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "lockstep/v1/job.pb.h"
#include "lockstep/v1/model.pb.h"

namespace lockstep::model {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

constexpr char kModelJson[] = R"json({
  "name": "tiny",
  "input_shape": [3, 8, 8],
  "num_classes": 4,
  "initializer": "HE_UNIFORM",
  "layers": [
    {"name": "conv", "op": "CONV2D",
     "conv2d": {"filters": 2, "kernel_h": 3, "kernel_w": 3, "pad_h": 1, "pad_w": 1, "use_bias": true}},
    {"name": "relu", "op": "RELU"},
    {"name": "pool", "op": "MAX_POOL2D", "pool": {"kernel_h": 2, "kernel_w": 2}},
    {"name": "up", "op": "RESIZE_BILINEAR", "resize": {"out_h": 8, "out_w": 8}},
    {"name": "add", "op": "ADD", "inputs": ["relu", "up"]},
    {"name": "fc", "op": "DENSE", "dense": {"units": 4}},
    {"name": "loss", "op": "SOFTMAX_XENT"}
  ]
})json";

constexpr char kModelText[] = R"pb(
  # The same model as kModelJson.
  name: "tiny"
  input_shape: [ 3, 8, 8 ]
  num_classes: 4
  initializer: HE_UNIFORM
  layers {
    name: "conv"
    op: CONV2D
    conv2d {
      filters: 2
      kernel_h: 3
      kernel_w: 3
      pad_h: 1
      pad_w: 1
      use_bias: true
    }
  }
  layers { name: "relu" op: RELU }
  layers {
    name: "pool"
    op: MAX_POOL2D
    pool { kernel_h: 2 kernel_w: 2 }
  }
  layers {
    name: "up"
    op: RESIZE_BILINEAR
    resize { out_h: 8 out_w: 8 }
  }
  layers { name: "add" op: ADD inputs: "relu" inputs: "up" }
  layers {
    name: "fc"
    op: DENSE
    dense { units: 4 }
  }
  layers { name: "loss" op: SOFTMAX_XENT }
)pb";

TEST(SpecIoTest, DetectsTheFormat) {
  EXPECT_EQ(DetectSpecFormat("{}"), SpecFormat::kJson);
  EXPECT_EQ(DetectSpecFormat(" \n\t{"), SpecFormat::kJson);
  EXPECT_EQ(DetectSpecFormat("\xEF\xBB\xBF{"), SpecFormat::kJson);
  EXPECT_EQ(DetectSpecFormat("name: \"x\""), SpecFormat::kTextFormat);
  EXPECT_EQ(DetectSpecFormat("# {\n"), SpecFormat::kTextFormat);
}

TEST(SpecIoTest, JsonAndTextFormatGiveEqualMessages) {
  absl::StatusOr<v1::Model> from_json = ParseModel(kModelJson, "m.json");
  absl::StatusOr<v1::Model> from_text = ParseModel(kModelText, "m.txtpb");
  ASSERT_THAT(from_json, IsOk());
  ASSERT_THAT(from_text, IsOk());
  EXPECT_TRUE(MessageDifferencer::Equals(*from_json, *from_text))
      << from_json->DebugString() << "\nvs\n"
      << from_text->DebugString();
  EXPECT_EQ(from_json->layers_size(), 7);
  EXPECT_EQ(from_json->layers(0).conv2d().pad_w(), 1);
  EXPECT_EQ(from_json->layers(4).inputs(1), "up");
  EXPECT_EQ(from_json->initializer(), v1::HE_UNIFORM);

  // And back: printed as text format and as JSON, parsed again.
  std::string text;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(*from_json, &text));
  absl::StatusOr<v1::Model> again = ParseModel(text, "printed");
  ASSERT_THAT(again, IsOk());
  EXPECT_TRUE(MessageDifferencer::Equals(*from_json, *again));
  std::string json;
  ASSERT_TRUE(
      google::protobuf::util::MessageToJsonString(*from_text, &json).ok());
  again = ParseModel(json, "printed.json");
  ASSERT_THAT(again, IsOk());
  EXPECT_TRUE(MessageDifferencer::Equals(*from_json, *again));
}

TEST(SpecIoTest, JsonAcceptsCamelCaseNamesAndABom) {
  absl::StatusOr<v1::Model> m = ParseModel(
      "\xEF\xBB\xBF{\"inputShape\": [4], \"numClasses\": 3, \"layers\": "
      "[{\"name\": \"fc\", \"op\": \"DENSE\", \"dense\": {\"units\": 3, "
      "\"useBias\": true}}]}",
      "m.json");
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(m->num_classes(), 3);
  EXPECT_TRUE(m->layers(0).dense().use_bias());
}

TEST(SpecIoTest, ParsesAJobConfig) {
  absl::StatusOr<v1::JobConfig> c = ParseJobConfig(R"json({
    "seed": "18446744073709551615",
    "batch_size": 8,
    "steps": 3,
    "optimizer": {"kind": "ADAM", "learning_rate": 0.001, "beta1": 0.8},
    "determinism": "DEFAULT",
    "op_algorithms": {"bias_add.grad": "atomic"},
    "capture": {"kind": "EVERY_KTH_STEP", "every_k": 2},
    "dataset": {"file": {"format": "IDX", "inputs_path": "/x", "labels_path": "/y"}}
  })json",
                                                   "c.json");
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->seed(), 18446744073709551615ull);
  EXPECT_EQ(c->optimizer().kind(), v1::ADAM);
  EXPECT_FLOAT_EQ(c->optimizer().beta1(), 0.8f);
  EXPECT_EQ(c->op_algorithms().at("bias_add.grad"), "atomic");
  EXPECT_EQ(c->dataset().file().format(), v1::FileDataset::IDX);
  absl::StatusOr<v1::JobConfig> t = ParseJobConfig(
      "batch_size: 8 op_algorithms { key: \"bias_add.grad\" value: \"atomic\" "
      "}",
      "c.txtpb");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->op_algorithms().at("bias_add.grad"), "atomic");
}

TEST(SpecIoTest, ParseSpecClearsTheMessage) {
  v1::Model m;
  m.set_num_classes(9);
  m.add_input_shape(5);
  ASSERT_THAT(ParseSpec("name: \"x\"", "f", &m), IsOk());
  EXPECT_EQ(m.num_classes(), 0);
  EXPECT_EQ(m.input_shape_size(), 0);
}

// JSON errors: file, line:column, field path, what is wrong.
TEST(SpecIoTest, JsonErrorsHavePositionsAndPaths) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {"{\n  \"layers\": [\n    {\"name\": \"a\",\n     \"bogus\": 1}\n  ]\n}",
       "f.json:4:6: layers[0].bogus: unknown field"},
      {"{\"nme\": \"x\"}", "f.json:1:2: nme: unknown field"},
      {"{\"layers\": [{}, {\"op\": \"DENSEX\"}]}",
       "f.json:1:18: layers[1].op: invalid value \"DENSEX\" for enum LayerOp; "
       "known values: LAYER_OP_UNSPECIFIED, DENSE, CONV2D, RELU"},
      {"{\"input_shape\": [1, \"x\"]}",
       "f.json:1:21: input_shape[1]: invalid value \"x\" for an int64 field"},
      {"{\"num_classes\": true}",
       "f.json:1:2: num_classes: invalid value true for an int32 field"},
      {"{\"layers\": [{\"dense\": {}, \"pool\": {}}]}",
       "f.json:1:13: layers[0]: only one member of oneof 'params' may be set, "
       "but 'pool' is set too"},
      {"{\"name\": \"a\",\n \"name\": \"b\"}",
       "f.json:2:2: duplicate key \"name\""},
      {"{\"input_shape\": [1, 2,]}", "f.json:1:23: trailing comma before ']'"},
      {"{\"name\": \"a\",}", "f.json:1:14: trailing comma before '}'"},
      {"{\"name\": 'a'}", "f.json:1:10: expected a value"},
      {"{// comment\n}", "f.json:1:2: expected a \"key\" in double quotes"},
      {"{name: 1}", "f.json:1:2: expected a \"key\" in double quotes"},
      {"{\"num_classes\": 012}",
       "f.json:1:18: invalid number: leading zeros are not allowed"},
      {"{\"num_classes\": 1.}",
       "f.json:1:19: invalid number: expected a digit"},
      {"{\"num_classes\": -}", "f.json:1:18: invalid number: expected a digit"},
      {"{\"name\": \"a\tb\"}", "f.json:1:12: control character in a string"},
      {"{\"name\": \"a\\qb\"}",
       "f.json:1:13: invalid escape '\\q' in a string"},
      {"{\"name\": \"\\ud800\"}", "unpaired UTF-16 surrogate"},
      {"{\"name\": \"\\u12\"}", "\\u must be followed by four hex digits"},
      {"{\"name\": \"\xC0\xAF\"}", "f.json:1:11: invalid UTF-8 in a string"},
      {"{\"name\": \"\xED\xA0\x80\"}", "invalid UTF-8 in a string"},
      {"{\"name\": \"abc", "f.json:1:14: unterminated string"},
      {"{\"name\" \"a\"}", "f.json:1:9: expected ':' after the key"},
      {"{\"name\": \"a\"} x", "f.json:1:15: unexpected text after the end"},
      {"{\"name\": tru}", "f.json:1:10: invalid literal, expected true"},
      {"{\n\n  \"input_shape\": [1, 2", "f.json:3:23: unexpected end of input"},
      {"  [1, 2]",
       "f.json:1:3: a spec is a JSON object or protobuf text "
       "format, not a JSON array"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseModel(c.json, "f.json").status(),
                StatusIs(kInvalid, HasSubstr(c.message)))
        << c.json;
  }
}

TEST(SpecIoTest, JsonUnicodeEscapesAreDecoded) {
  absl::StatusOr<v1::Model> m =
      ParseModel("{\"name\": \"\\u00e9\\ud83d\\ude00\\n\\/\"}", "f.json");
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(m->name(), "\xC3\xA9\xF0\x9F\x98\x80\n/");
}

TEST(SpecIoTest, DeepNestingIsRefusedWithoutRecursingFurther) {
  for (const std::string& open : {std::string("["), std::string("{\"a\":")}) {
    std::string deep = "{\"input_shape\": ";
    for (int i = 0; i < 100000; ++i) deep += open;
    EXPECT_THAT(ParseModel(deep, "deep.json").status(),
                StatusIs(kInvalid, HasSubstr("nesting deeper than 32 levels")));
  }
  std::string text;
  for (int i = 0; i < 100000; ++i) text += "layers { dense { ";
  EXPECT_THAT(ParseModel(text, "deep.txtpb").status(), StatusIs(kInvalid));
}

TEST(SpecIoTest, TextFormatErrorsHavePositions) {
  EXPECT_THAT(ParseModel("name: \"m\"\nlayers {\n  nme: \"x\"\n}\n", "m.txtpb"),
              StatusIs(kInvalid, StartsWith("m.txtpb:3:6: Message type "
                                            "\"lockstep.v1.Layer\" has no "
                                            "field named \"nme\"")));
  EXPECT_THAT(ParseModel("num_classes: \"ten\"", "m.txtpb"),
              StatusIs(kInvalid, HasSubstr("m.txtpb:1:14: Expected integer")));
  EXPECT_THAT(ParseModel("num_classes: 1 num_classes: 2", "m.txtpb"),
              StatusIs(kInvalid, HasSubstr("specified multiple times")));
  EXPECT_THAT(ParseModel("layers { op: DENSEX }", "m.txtpb"),
              StatusIs(kInvalid, HasSubstr("Unknown enumeration value of "
                                           "\"DENSEX\" for field \"op\"")));
  EXPECT_THAT(
      ParseJobConfig("batch_size: 5000000000", "c.txtpb"),
      StatusIs(kInvalid, HasSubstr("c.txtpb:1:13: Integer out of range")));
}

// Text format takes any bytes in a string; a proto3 string must be UTF-8
// (the JSON form refuses such bytes too), so the spec is refused with the
// field's path.
TEST(SpecIoTest, TextFormatStringsMustBeUtf8) {
  EXPECT_THAT(
      ParseModel("name: \"m\"\nlayers { name: \"fc\" }\n"
                 "layers { name: \"loss\\377\\377\" op: SOFTMAX_XENT }\n",
                 "m.txtpb"),
      StatusIs(kInvalid, StartsWith("m.txtpb: layers[1].name: invalid UTF-8 "
                                    "in a string")));
  EXPECT_THAT(
      ParseJobConfig("op_algorithms { key: \"dense.fwd\" value: \"\xC0\xAF\" }",
                     "c.txtpb"),
      StatusIs(kInvalid, StartsWith("c.txtpb: op_algorithms[0].value: invalid "
                                    "UTF-8 in a string")));
  EXPECT_THAT(ParseModel("name: \"r\xC3\xA9sum\xC3\xA9\"", "m.txtpb"), IsOk());
}

// However zero is spelled, it parses to +0.0, so one config never gets two
// digests.
TEST(SpecIoTest, NegativeZeroIsZero) {
  const auto plain = ParseJobConfig(
      R"({"optimizer": {"kind": "ADAM", "epsilon": 0}})", "c.json");
  ASSERT_THAT(plain, IsOk());
  for (const char* text :
       {R"({"optimizer": {"kind": "ADAM", "epsilon": -0}})",
        R"({"optimizer": {"kind": "ADAM", "epsilon": -0.0}})",
        R"({"optimizer": {"kind": "ADAM", "epsilon": -0e-8}})",
        "optimizer { kind: ADAM epsilon: -0.0 }"}) {
    const auto config = ParseJobConfig(text, "c");
    ASSERT_THAT(config, IsOk()) << text;
    EXPECT_FALSE(std::signbit(config->optimizer().epsilon())) << text;
    EXPECT_EQ(config->SerializeAsString(), plain->SerializeAsString()) << text;
  }
}

TEST(SpecIoTest, EmptyInputIsAnError) {
  for (const char* text : {"", "  \n\t ", "\xEF\xBB\xBF"}) {
    EXPECT_THAT(ParseModel(text, "e.json"),
                StatusIs(kInvalid, StartsWith("e.json: is empty")));
  }
  EXPECT_THAT(ParseJobConfig("", "c.json"),
              StatusIs(kInvalid, HasSubstr("lockstep.v1.JobConfig")));
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir == nullptr ? "/tmp" : dir, "/", name);
}

TEST(SpecIoTest, ReadsFiles) {
  const std::string path = TempPath("model.txtpb");
  {
    std::ofstream out(path);
    out << kModelText;
  }
  absl::StatusOr<v1::Model> m = ReadModelFile(path);
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(m->name(), "tiny");
  const std::string bad = TempPath("bad.json");
  {
    std::ofstream out(bad);
    out << "{\n  \"steps\": 1,\n  \"step\": 2\n}\n";
  }
  EXPECT_THAT(
      ReadJobConfigFile(bad),
      StatusIs(kInvalid, absl::StrCat(bad, ":3:3: step: unknown field")));
}

TEST(SpecIoTest, ReadErrorsNameThePath) {
  EXPECT_THAT(
      ReadModelFile("/nonexistent/dir/model.json"),
      StatusIs(absl::StatusCode::kNotFound,
               "cannot read model file \"/nonexistent/dir/model.json\": "
               "No such file or directory"));
  EXPECT_THAT(ReadJobConfigFile(TempPath("missing.json")),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("cannot read job config file")));
  EXPECT_THAT(ReadModelFile(TempPath("")),
              StatusIs(kInvalid, HasSubstr("is a directory")));
  EXPECT_THAT(ReadModelFile(""),
              StatusIs(kInvalid, "model file: no path given"));
}

TEST(SpecIoTest, FilesOverTheLimitAreRefused) {
  const std::string path = TempPath("big.json");
  // Sparse files: no 16 MiB written.
  int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kMaxSpecFileBytes + 1), 0);
  close(fd);
  EXPECT_THAT(ReadModelFile(path),
              StatusIs(kInvalid, absl::StrCat("model file \"", path,
                                              "\" exceeds the limit of "
                                              "16777216 bytes (16 MiB)")));
  fd = open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kMaxSpecFileBytes), 0);
  close(fd);
  absl::StatusOr<std::string> data = ReadSpecFile(path, "model file");
  ASSERT_THAT(data, IsOk());
  EXPECT_EQ(static_cast<int64_t>(data->size()), kMaxSpecFileBytes);
  // A device that never ends is cut at the limit.
  EXPECT_THAT(ReadSpecFile("/dev/zero", "model file"),
              StatusIs(kInvalid, HasSubstr("exceeds the limit")));
}

}  // namespace
}  // namespace lockstep::model
