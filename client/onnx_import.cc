#include "client/onnx_import.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/sha256.h"
#include "common/utf8.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "onnx/onnx.pb.h"

namespace lockstep::client {
namespace {

namespace v1 = ::lockstep::v1;

// The batch dimension in a full shape (always axis 0 of a batched value).
constexpr int64_t kBatchDim = -1;
// A symbolic batch size inside folded shape arithmetic (the result of
// Shape on a batched value whose batch is not fixed).
constexpr double kSymbolicBatch = -1125899906842624.0;  // -2^50
// Largest dimension, stride, pad or kernel the importer accepts.
constexpr int64_t kMaxDim = int64_t{1} << 24;
// Largest number of elements of one example of any imported tensor.
constexpr int64_t kMaxElements = int64_t{1} << 40;
// The default-domain opsets whose op definitions the importer follows.
constexpr int64_t kMinOpset = 7;
constexpr int64_t kMaxOpset = 18;
// Largest tensor folded at import time.
constexpr int64_t kMaxFoldedElements = int64_t{1} << 22;
// Integers read from folded tensors saturate at this magnitude.
constexpr double kMaxKnownInt = 4611686018427387904.0;  // 2^62
// Placeholder for "the model input" in Layer.inputs until layers are final.
constexpr char kInputRef[] = "\x01input";
// How a layer names the model input (model::kModelInputName, model/plan.h).
constexpr char kModelInputName[] = "<input>";

// A tensor known at import time (initializers, Constant nodes, shape
// arithmetic). Integers are held exactly in doubles (|v| < 2^53).
struct Known {
  std::vector<int64_t> dims;
  std::vector<double> v;
  bool is_float = true;
};

// An ONNX value as the importer sees it.
struct Value {
  // Known at import time: no layer unless a layer consumes it.
  bool known = false;
  Known k;
  std::string origin;  // node or initializer that produced a known value
  // A layer output (or kInputRef): full ONNX shape, kBatchDim at axis 0
  // when batched.
  std::string layer;
  std::vector<int64_t> shape;
  bool batched = false;
  // A float initializer that is a parameter: a PARAMETER layer is made on
  // first use as a layer input unless an op owns it (DENSE, CONV2D, ...).
  bool parameter = false;
  std::string init_name;
};

// Text from the ONNX file (node and graph names) as it goes into the
// model: well-formed UTF-8 without control characters, at most 256 bytes
// (anything else becomes '?').
std::string Printable(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && out.size() < 256;) {
    const int len = Utf8SequenceLength(s, i);
    if (len == 0 || (len == 1 && static_cast<unsigned char>(s[i]) < 0x20)) {
      out.push_back('?');
      ++i;
    } else if (out.size() + len <= 256) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      break;
    }
  }
  return out;
}

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::vector<std::string> parts;
  for (int64_t d : s) parts.push_back(d == kBatchDim ? "N" : absl::StrCat(d));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

// The product of s[from..]: -1 when an entry is negative, 0 when one is 0,
// and kSaturated when it does not fit in int64_t, so a comparison against a
// limit never sees a wrapped product.
constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max();
int64_t Product(const std::vector<int64_t>& s, size_t from = 0) {
  bool zero = false;
  for (size_t i = from; i < s.size(); ++i) {
    if (s[i] < 0) return -1;
    zero |= s[i] == 0;
  }
  if (zero) return 0;
  int64_t p = 1;
  for (size_t i = from; i < s.size(); ++i) {
    if (__builtin_mul_overflow(p, s[i], &p)) return kSaturated;
  }
  return p;
}

// Folded tensors keep every dimension and the product of their non-zero
// dimensions at most this, so strides and offsets into them never overflow
// (a zero dimension beside huge ones holds no elements but still strides).
constexpr int64_t kMaxKnownExtent = int64_t{1} << 31;
bool KnownExtentOk(const std::vector<int64_t>& dims) {
  int64_t p = 1;
  for (int64_t d : dims) {
    if (d < 0 || d > kMaxKnownExtent) return false;
    if (d == 0) continue;
    if (__builtin_mul_overflow(p, d, &p) || p > kMaxKnownExtent) return false;
  }
  return true;
}
// Why dims fail KnownExtentOk.
std::string KnownExtentError(const std::vector<int64_t>& dims) {
  return absl::StrFormat(
      "dimensions [%s] span more than 2^31 elements (zero dimensions aside)",
      absl::StrJoin(dims, ", "));
}

bool IsWhole(double x) { return std::isfinite(x) && std::floor(x) == x; }

class Importer {
 public:
  Importer(const onnx::ModelProto& m, const OnnxImportOptions& o)
      : m_(m), g_(m.graph()), options_(o) {}

  absl::StatusOr<ImportedModel> Run();

 private:
  // --- errors --------------------------------------------------------------
  std::string NodeLabel(const onnx::NodeProto& n) const {
    return absl::StrFormat("node \"%s\" (%s)", n.name(), n.op_type());
  }
  absl::Status NodeError(const onnx::NodeProto& n, absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("onnx: ", NodeLabel(n), ": ", what));
  }

  // --- attributes ----------------------------------------------------------
  const onnx::AttributeProto* Attr(const onnx::NodeProto& n,
                                   absl::string_view name) const {
    for (const auto& a : n.attribute()) {
      if (a.name() == name) return &a;
    }
    return nullptr;
  }
  int64_t AttrInt(const onnx::NodeProto& n, absl::string_view name,
                  int64_t def) const {
    const auto* a = Attr(n, name);
    return a == nullptr ? def : a->i();
  }
  float AttrFloat(const onnx::NodeProto& n, absl::string_view name,
                  float def) const {
    const auto* a = Attr(n, name);
    return a == nullptr ? def : a->f();
  }
  std::vector<int64_t> AttrInts(const onnx::NodeProto& n,
                                absl::string_view name) const {
    const auto* a = Attr(n, name);
    if (a == nullptr) return {};
    return {a->ints().begin(), a->ints().end()};
  }

  // --- tensors -------------------------------------------------------------
  absl::StatusOr<Known> ToKnown(const onnx::TensorProto& t,
                                absl::string_view what);

  // --- values --------------------------------------------------------------
  absl::StatusOr<Value*> In(const onnx::NodeProto& n, int i) {
    if (i >= n.input_size() || n.input(i).empty()) {
      return NodeError(n, absl::StrFormat("input %d is missing", i));
    }
    auto it = values_.find(n.input(i));
    if (it == values_.end()) {
      return NodeError(n, absl::StrFormat("input %d (\"%s\") is not produced "
                                          "by an earlier node",
                                          i, n.input(i)));
    }
    return &it->second;
  }
  bool HasIn(const onnx::NodeProto& n, int i) const {
    return i < n.input_size() && !n.input(i).empty();
  }
  absl::StatusOr<Known> KnownIn(const onnx::NodeProto& n, int i,
                                absl::string_view what) {
    absl::StatusOr<Value*> v = In(n, i);
    if (!v.ok()) return v.status();
    if (!(*v)->known) {
      return NodeError(
          n, absl::StrFormat("%s (input %d, \"%s\") must be a constant (an "
                             "initializer, a Constant node or arithmetic on "
                             "them and on shapes)",
                             what, i, n.input(i)));
    }
    return (*v)->k;
  }
  absl::StatusOr<std::vector<int64_t>> KnownInts(const onnx::NodeProto& n,
                                                 int i, absl::string_view what);

  // The layer name of a value used as a layer input (makes the PARAMETER or
  // CONSTANT layer on first use) and its full shape / batched flag.
  absl::StatusOr<std::string> AsLayer(const onnx::NodeProto& n, Value* v);

  // --- layers --------------------------------------------------------------
  std::string UniqueName(absl::string_view raw);
  v1::Layer* NewLayer(const onnx::NodeProto& n, absl::string_view suffix,
                      v1::LayerOp op) {
    v1::Layer* l = model_.add_layers();
    l->set_name(UniqueName(
        suffix.empty() ? NodeBase(n) : absl::StrCat(NodeBase(n), ".", suffix)));
    l->set_op(op);
    l->set_origin(Printable(absl::StrFormat("%s (%s)", n.name(), n.op_type())));
    return l;
  }
  std::string NodeBase(const onnx::NodeProto& n) const {
    return n.name().empty() ? absl::StrCat(n.op_type(), "_", node_index_)
                            : n.name();
  }
  void SetOut(const onnx::NodeProto& n, int i, const v1::Layer& l,
              std::vector<int64_t> shape, bool batched) {
    // Shapes stay small enough that no product overflows; PlanModel applies
    // the real limits.
    int64_t elems = 1;
    for (size_t j = batched ? 1 : 0; j < shape.size(); ++j) {
      if (shape[j] < 1 || shape[j] > kMaxDim ||
          shape[j] > kMaxElements / elems) {
        if (shape_error_.ok()) {
          shape_error_ = NodeError(
              n, absl::StrFormat("output shape %s: every dimension must be in "
                                 "1..%d and an example at most %d elements",
                                 ShapeStr(shape), kMaxDim, kMaxElements));
        }
        break;
      }
      elems *= shape[j];
    }
    Value v;
    v.layer = l.name();
    v.shape = std::move(shape);
    v.batched = batched;
    if (i < n.output_size()) values_[n.output(i)] = std::move(v);
  }
  void SetKnown(const onnx::NodeProto& n, int i, Known k) {
    Value v;
    v.known = true;
    v.k = std::move(k);
    v.origin = NodeBase(n);
    if (i < n.output_size()) values_[n.output(i)] = std::move(v);
  }
  void AddTensor(const std::string& layer, const std::string& param,
                 const std::vector<int64_t>& shape,
                 const std::vector<float>& data);
  absl::StatusOr<std::vector<float>> OwnedFloats(const onnx::NodeProto& n,
                                                 int i, absl::string_view role);

  // --- per-op mapping --------------------------------------------------------
  absl::Status MapNode(const onnx::NodeProto& n);
  void WarnTransposedCopies();
  absl::Status Fold(const onnx::NodeProto& n, bool* folded);
  // Conv and ConvTranspose: the shared inputs and attributes, checked.
  struct ConvGeometry {
    Value* x = nullptr;
    std::vector<int64_t> w;  // W's dims
    std::vector<int64_t> pads, strides, dil;
    int64_t groups = 1;
  };
  absl::Status ConvInputs(const onnx::NodeProto& n, ConvGeometry* g);
  // Sets every conv2d field but filters and output_padding from g, W and B
  // (the bias has conv2d.filters values).
  absl::Status AddConvParams(const onnx::NodeProto& n, const ConvGeometry& g,
                             v1::Layer* l);
  absl::Status MapConv(const onnx::NodeProto& n);
  absl::Status MapConvTranspose(const onnx::NodeProto& n);
  absl::Status MapGemm(const onnx::NodeProto& n);
  absl::Status MapMatMul(const onnx::NodeProto& n);
  absl::Status MapElementwise(const onnx::NodeProto& n, v1::LayerOp op,
                              int arity);
  absl::Status MapSimple(const onnx::NodeProto& n, v1::LayerOp op);
  absl::Status MapSoftmax(const onnx::NodeProto& n);
  absl::Status MapReduce(const onnx::NodeProto& n);
  absl::Status MapGather(const onnx::NodeProto& n);
  absl::Status MapConcat(const onnx::NodeProto& n);
  absl::Status MapSplit(const onnx::NodeProto& n);
  absl::Status MapSlice(const onnx::NodeProto& n);
  absl::Status MapReshapeLike(const onnx::NodeProto& n);
  absl::Status MapTranspose(const onnx::NodeProto& n);
  absl::Status MapBatchNorm(const onnx::NodeProto& n);
  absl::Status MapLayerNorm(const onnx::NodeProto& n);
  absl::Status MapDropout(const onnx::NodeProto& n);
  absl::Status MapPool(const onnx::NodeProto& n);
  absl::Status MapGlobalAvgPool(const onnx::NodeProto& n);
  absl::Status MapCast(const onnx::NodeProto& n);
  absl::Status EmitSlice(const onnx::NodeProto& n, Value* in, int out_index,
                         const std::vector<int64_t>& starts,
                         const std::vector<int64_t>& ends,
                         const std::vector<int64_t>& axes,
                         const std::vector<int64_t>& steps);
  absl::Status EmitReshape(const onnx::NodeProto& n, Value* in,
                           std::vector<int64_t> full_out);

  absl::StatusOr<int> Axis(const onnx::NodeProto& n, int64_t axis, int rank,
                           absl::string_view field) {
    if (axis < -rank || axis >= rank) {
      return NodeError(n, absl::StrFormat("%s %d is outside [%d, %d)", field,
                                          axis, -rank, rank));
    }
    return static_cast<int>(axis < 0 ? axis + rank : axis);
  }
  absl::StatusOr<std::vector<int64_t>> Broadcast(
      const onnx::NodeProto& n, const std::vector<const Value*>& ins);

  int64_t Opset() const { return opset_; }

  const onnx::ModelProto& m_;
  const onnx::GraphProto& g_;
  const OnnxImportOptions& options_;
  int64_t opset_ = 0;
  int node_index_ = 0;
  int64_t fixed_batch_ = 0;  // the input's batch size when fixed, else 0
  std::map<std::string, Value> values_;
  absl::flat_hash_map<std::string, int> init_uses_;  // uses by node inputs
  std::set<std::string> consumed_outputs_;           // every name a node reads
  absl::Status shape_error_;  // the first output shape out of range
  absl::flat_hash_set<std::string> names_;
  std::map<std::string, const onnx::TensorProto*> inits_;
  v1::Model model_;
  v1::ParameterSet params_;
  std::vector<std::string> warnings_;
};

absl::StatusOr<Known> Importer::ToKnown(const onnx::TensorProto& t,
                                        absl::string_view what) {
  Known k;
  for (int64_t d : t.dims()) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("onnx: %s: negative dimension %d", what, d));
    }
    k.dims.push_back(d);
  }
  if (!KnownExtentOk(k.dims)) {
    return absl::InvalidArgumentError(
        absl::StrCat("onnx: ", what, ": ", KnownExtentError(k.dims)));
  }
  const int64_t n = Product(k.dims);
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "onnx: %s: external data is not supported (export the model into "
        "one file)",
        what));
  }
  const std::string& raw = t.raw_data();
  const bool has_raw = t.has_raw_data();
  auto fail_count = [&](int64_t got) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "onnx: %s: %d values for shape %s", what, got, ShapeStr(k.dims)));
  };
  // Check the payload against the shape before allocating for it.
  int64_t width = 0, field = 0;
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      width = 4;
      field = t.float_data_size();
      break;
    case onnx::TensorProto::DOUBLE:
      width = 8;
      field = t.double_data_size();
      break;
    case onnx::TensorProto::INT64:
      width = 8;
      field = t.int64_data_size();
      break;
    case onnx::TensorProto::INT32:
      width = 4;
      field = t.int32_data_size();
      break;
    case onnx::TensorProto::BOOL:
    case onnx::TensorProto::INT8:
    case onnx::TensorProto::UINT8:
      width = 1;
      field = t.int32_data_size();
      break;
    default:
      break;
  }
  if (width == 0) {  // before allocating n values for a type refused anyway
    return absl::InvalidArgumentError(absl::StrFormat(
        "onnx: %s: element type %s is not supported (float, double, "
        "int64, int32, int8, uint8, bool are)",
        what, onnx::TensorProto::DataType_Name(t.data_type())));
  }
  const int64_t have =
      has_raw ? static_cast<int64_t>(raw.size()) / width : field;
  if (have != n || (has_raw && static_cast<int64_t>(raw.size()) != width * n)) {
    return fail_count(have);
  }
  k.v.resize(n);
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: {
      k.is_float = true;
      if (has_raw) {
        if (static_cast<int64_t>(raw.size()) != 4 * n) {
          return fail_count(raw.size() / 4);
        }
        for (int64_t i = 0; i < n; ++i) {
          float f;
          std::memcpy(&f, raw.data() + 4 * i, 4);
          k.v[i] = f;
        }
      } else {
        if (t.float_data_size() != n) return fail_count(t.float_data_size());
        for (int64_t i = 0; i < n; ++i) k.v[i] = t.float_data(i);
      }
      break;
    }
    case onnx::TensorProto::DOUBLE: {
      k.is_float = true;
      if (has_raw) {
        if (static_cast<int64_t>(raw.size()) != 8 * n) {
          return fail_count(raw.size() / 8);
        }
        for (int64_t i = 0; i < n; ++i) {
          std::memcpy(&k.v[i], raw.data() + 8 * i, 8);
        }
      } else {
        if (t.double_data_size() != n) return fail_count(t.double_data_size());
        for (int64_t i = 0; i < n; ++i) k.v[i] = t.double_data(i);
      }
      break;
    }
    case onnx::TensorProto::INT64: {
      k.is_float = false;
      if (has_raw) {
        if (static_cast<int64_t>(raw.size()) != 8 * n) {
          return fail_count(raw.size() / 8);
        }
        for (int64_t i = 0; i < n; ++i) {
          int64_t x;
          std::memcpy(&x, raw.data() + 8 * i, 8);
          k.v[i] = static_cast<double>(x);
        }
      } else {
        if (t.int64_data_size() != n) return fail_count(t.int64_data_size());
        for (int64_t i = 0; i < n; ++i) k.v[i] = t.int64_data(i);
      }
      break;
    }
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::BOOL:
    case onnx::TensorProto::INT8:
    case onnx::TensorProto::UINT8: {
      k.is_float = false;
      const int width = t.data_type() == onnx::TensorProto::INT32 ? 4 : 1;
      if (has_raw) {
        if (static_cast<int64_t>(raw.size()) != width * n) {
          return fail_count(raw.size() / width);
        }
        for (int64_t i = 0; i < n; ++i) {
          if (width == 4) {
            int32_t x;
            std::memcpy(&x, raw.data() + 4 * i, 4);
            k.v[i] = x;
          } else if (t.data_type() == onnx::TensorProto::INT8) {
            k.v[i] = static_cast<int8_t>(raw[i]);
          } else {
            k.v[i] = static_cast<uint8_t>(raw[i]);
          }
        }
      } else {
        if (t.int32_data_size() != n) return fail_count(t.int32_data_size());
        for (int64_t i = 0; i < n; ++i) k.v[i] = t.int32_data(i);
      }
      break;
    }
    default:  // refused above (width == 0)
      break;
  }
  return k;
}

absl::StatusOr<std::vector<int64_t>> Importer::KnownInts(
    const onnx::NodeProto& n, int i, absl::string_view what) {
  absl::StatusOr<Known> k = KnownIn(n, i, what);
  if (!k.ok()) return k.status();
  std::vector<int64_t> out;
  for (double x : k->v) {
    if (!IsWhole(x)) {
      return NodeError(
          n, absl::StrFormat("%s: %g is not a whole number", what, x));
    }
    // Exporters write INT64_MAX for "to the end" (2^63 as a double, which
    // no int64_t holds): saturate at +-2^62, past every real length.
    out.push_back(
        static_cast<int64_t>(std::clamp(x, -kMaxKnownInt, kMaxKnownInt)));
  }
  return out;
}

std::string Importer::UniqueName(absl::string_view raw) {
  std::string s;
  for (char c : raw) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (c == '/' || c == ':') {
      if (!s.empty() && s.back() != '.') s.push_back('.');
    } else {
      s.push_back(ok ? c : '_');
    }
  }
  while (!s.empty() && s.back() == '.') s.pop_back();
  if (s.empty()) s = "layer";
  if (s.size() > 64) s = s.substr(s.size() - 64);
  std::string name = s;
  for (int k = 2; names_.contains(name); ++k) {
    const std::string tail = absl::StrCat(".", k);
    name = s.substr(0, std::min(s.size(), 64 - tail.size())) + tail;
  }
  names_.insert(name);
  return name;
}

void Importer::AddTensor(const std::string& layer, const std::string& param,
                         const std::vector<int64_t>& shape,
                         const std::vector<float>& data) {
  v1::ParameterTensor* t = params_.add_tensors();
  t->set_layer(layer);
  t->set_param(param);
  for (int64_t d : shape) t->add_shape(d);
  std::string* bytes = t->mutable_data();
  bytes->resize(4 * data.size());
  // Little-endian float32 (the hosts Lockstep runs on are little-endian).
  if (!data.empty()) std::memcpy(bytes->data(), data.data(), bytes->size());
}

// The float values of an initializer operand that an op owns (a DENSE or
// CONV2D weight, a BATCH_NORM statistic). It must be a parameter used by
// this node only.
absl::StatusOr<std::vector<float>> Importer::OwnedFloats(
    const onnx::NodeProto& n, int i, absl::string_view role) {
  absl::StatusOr<Value*> v = In(n, i);
  if (!v.ok()) return v.status();
  if (!(*v)->known || !(*v)->k.is_float) {
    return NodeError(n, absl::StrFormat("%s (input %d) must be a float "
                                        "initializer",
                                        role, i));
  }
  std::vector<float> out;
  out.reserve((*v)->k.v.size());
  for (double x : (*v)->k.v) {
    if (!std::isfinite(x)) {
      return NodeError(n, absl::StrFormat("%s (input %d) holds a value that "
                                          "is not finite",
                                          role, i));
    }
    out.push_back(static_cast<float>(x));
  }
  return out;
}

absl::StatusOr<std::string> Importer::AsLayer(const onnx::NodeProto& n,
                                              Value* v) {
  if (!v->layer.empty()) return v->layer;
  // Make the layer once per value and cache it on the value.
  if (v->parameter) {
    v1::Layer* l = model_.add_layers();
    l->set_name(UniqueName(v->init_name));
    l->set_op(v1::PARAMETER);
    l->set_origin(Printable(absl::StrFormat("%s (initializer)", v->init_name)));
    std::vector<float> data;
    for (double x : v->k.v) {
      if (!std::isfinite(x)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "onnx: initializer \"%s\" holds a value that is not finite",
            v->init_name));
      }
      data.push_back(static_cast<float>(x));
    }
    std::vector<int64_t> shape = v->k.dims;
    for (int64_t d : shape) l->mutable_parameter()->add_shape(d);
    AddTensor(l->name(), "value", shape, data);
    v->layer = l->name();
    v->shape = shape;
    v->batched = false;
    return v->layer;
  }
  if (v->known) {
    v1::Layer* l = model_.add_layers();
    l->set_name(UniqueName(v->origin));
    l->set_op(v1::CONSTANT);
    l->set_origin(Printable(
        absl::StrFormat("%s (%s)", v->origin,
                        inits_.count(v->origin) ? "initializer" : "Constant")));
    auto* c = l->mutable_constant();
    for (int64_t d : v->k.dims) c->add_shape(d);
    for (double x : v->k.v) {
      if (x == kSymbolicBatch) {
        return NodeError(n,
                         "an operand depends on the batch size, which is "
                         "not fixed");
      }
      if (!std::isfinite(static_cast<float>(x))) {
        return NodeError(
            n, absl::StrFormat("constant operand \"%s\" holds %g; Lockstep "
                               "constants are finite (masked_fill with "
                               "float('-inf') can use a large finite value "
                               "such as -1e4 instead)",
                               v->origin, x));
      }
      c->add_values(static_cast<float>(x));
    }
    v->layer = l->name();
    v->shape = v->k.dims;
    v->batched = false;
    return v->layer;
  }
  return NodeError(n, "internal: operand without a layer");
}

absl::StatusOr<std::vector<int64_t>> Importer::Broadcast(
    const onnx::NodeProto& n, const std::vector<const Value*>& ins) {
  size_t rank = 0;
  bool batched = false;
  size_t batched_rank = 0;
  for (const Value* v : ins) {
    const size_t r =
        v->known && v->layer.empty() ? v->k.dims.size() : v->shape.size();
    rank = std::max(rank, r);
    if (v->batched) {
      batched = true;
      batched_rank = std::max(batched_rank, v->shape.size());
    }
  }
  std::vector<int64_t> out(rank, 1);
  for (const Value* v : ins) {
    const std::vector<int64_t>& s =
        v->known && v->layer.empty() ? v->k.dims : v->shape;
    for (size_t j = 0; j < s.size(); ++j) {
      const size_t o = rank - s.size() + j;
      const int64_t d = s[j];
      if (out[o] == d || d == 1) continue;
      if (out[o] == 1) {
        out[o] = d;
        continue;
      }
      std::vector<std::string> shapes;
      for (const Value* w : ins) {
        shapes.push_back(
            ShapeStr(w->known && w->layer.empty() ? w->k.dims : w->shape));
      }
      return NodeError(n, absl::StrFormat("input shapes %s do not broadcast",
                                          absl::StrJoin(shapes, " and ")));
    }
  }
  if (batched && batched_rank != rank) {
    return NodeError(n, absl::StrFormat("an operand without the batch axis has "
                                        "more axes (%d) than the batched "
                                        "operand (%d)",
                                        rank, batched_rank));
  }
  return out;
}

// ---------------------------------------------------------------------------
// Folding: a node whose inputs are all known is evaluated here, for the ops
// that compute shapes, indices and masks.

absl::Status Importer::Fold(const onnx::NodeProto& n, bool* folded) {
  *folded = false;
  const std::string& op = n.op_type();
  if (op == "Constant") {
    const auto* a = Attr(n, "value");
    Known k;
    if (a != nullptr && a->has_t()) {
      absl::StatusOr<Known> t = ToKnown(a->t(), NodeLabel(n));
      if (!t.ok()) return t.status();
      k = *t;
    } else if ((a = Attr(n, "value_float")) != nullptr) {
      k.v = {a->f()};
    } else if ((a = Attr(n, "value_int")) != nullptr) {
      k.v = {static_cast<double>(a->i())};
      k.is_float = false;
    } else if ((a = Attr(n, "value_ints")) != nullptr ||
               (a = Attr(n, "value_floats")) != nullptr) {
      k.is_float = a->name() == "value_floats";
      if (k.is_float) {
        for (float f : a->floats()) k.v.push_back(f);
      } else {
        for (int64_t i : a->ints()) k.v.push_back(i);
      }
      k.dims = {static_cast<int64_t>(k.v.size())};
    } else {
      return NodeError(n,
                       "needs a value, value_float, value_int, value_ints "
                       "or value_floats attribute");
    }
    SetKnown(n, 0, std::move(k));
    *folded = true;
    return absl::OkStatus();
  }
  if (op == "Shape") {
    absl::StatusOr<Value*> in = In(n, 0);
    if (!in.ok()) return in.status();
    const std::vector<int64_t>& s =
        (*in)->known && (*in)->layer.empty() ? (*in)->k.dims : (*in)->shape;
    Known k;
    k.is_float = false;
    for (int64_t d : s) {
      k.v.push_back(d == kBatchDim
                        ? (fixed_batch_ > 0 ? fixed_batch_ : kSymbolicBatch)
                        : d);
    }
    const int64_t r = s.size();
    int64_t start = AttrInt(n, "start", 0), end = AttrInt(n, "end", r);
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = std::clamp<int64_t>(start, 0, r);
    end = std::clamp<int64_t>(end, start, r);
    k.v = std::vector<double>(k.v.begin() + start, k.v.begin() + end);
    k.dims = {end - start};
    SetKnown(n, 0, std::move(k));
    *folded = true;
    return absl::OkStatus();
  }
  // Every other foldable op needs all of its inputs known.
  for (int i = 0; i < n.input_size(); ++i) {
    if (n.input(i).empty()) continue;
    auto it = values_.find(n.input(i));
    if (it == values_.end() || !it->second.known || it->second.parameter) {
      return absl::OkStatus();
    }
  }
  if (n.input_size() == 0) return absl::OkStatus();
  std::vector<const Known*> ks;
  for (int i = 0; i < n.input_size(); ++i) {
    ks.push_back(n.input(i).empty() ? nullptr : &values_[n.input(i)].k);
  }
  const Known& a = *ks[0];
  auto strides = [](const std::vector<int64_t>& d) {
    std::vector<int64_t> s(d.size(), 1);
    for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i) {
      s[i] = s[i + 1] * d[i + 1];
    }
    return s;
  };
  auto no_symbolic = [&](const Known& k) -> absl::Status {
    for (double x : k.v) {
      if (x == kSymbolicBatch) {
        return NodeError(n,
                         "computes with the batch size, which is not "
                         "fixed (export with a fixed batch size or keep "
                         "the batch dimension as 0 / -1 in shapes)");
      }
    }
    return absl::OkStatus();
  };
  Known out;
  out.is_float = a.is_float;
  static const std::set<std::string> kBinary = {
      "Add",  "Sub",   "Mul",  "Div",         "Pow",     "Max",
      "Min",  "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual",
      "Where"};
  static const std::set<std::string> kUnary = {
      "Neg",      "Abs",  "Sqrt", "Reciprocal", "Exp",  "Log", "Erf",
      "Identity", "Cast", "Relu", "Sigmoid",    "Tanh", "Not"};
  if (kBinary.count(op)) {
    const int arity = op == "Where" ? 3 : 2;
    if (n.input_size() != arity) return absl::OkStatus();
    for (int i = 0; i < arity; ++i) {
      if (ks[i] == nullptr) return absl::OkStatus();
    }
    size_t rank = 0;
    for (int i = 0; i < arity; ++i) rank = std::max(rank, ks[i]->dims.size());
    std::vector<int64_t> od(rank, 1);
    for (int i = 0; i < arity; ++i) {
      const auto& d = ks[i]->dims;
      for (size_t j = 0; j < d.size(); ++j) {
        int64_t& o = od[rank - d.size() + j];
        if (o == 1) {
          o = d[j];
        } else if (d[j] != 1 && d[j] != o) {
          return NodeError(n, "constant operands do not broadcast");
        }
      }
    }
    const int64_t total = Product(od);
    if (total > kMaxFoldedElements || !KnownExtentOk(od)) {
      return absl::OkStatus();
    }
    std::vector<std::vector<int64_t>> sts;
    for (int i = 0; i < arity; ++i) {
      std::vector<int64_t> d(rank - ks[i]->dims.size(), 1);
      d.insert(d.end(), ks[i]->dims.begin(), ks[i]->dims.end());
      std::vector<int64_t> st = strides(d);
      for (size_t j = 0; j < rank; ++j) {
        if (d[j] == 1) st[j] = 0;
      }
      sts.push_back(st);
    }
    const std::vector<int64_t> ost = strides(od);
    out.dims = od;
    out.v.resize(total);
    const bool cmp = op != "Add" && op != "Sub" && op != "Mul" && op != "Div" &&
                     op != "Pow" && op != "Max" && op != "Min" && op != "Where";
    if (op == "Where") {
      out.is_float = ks[1]->is_float;
    } else if (cmp) {
      out.is_float = false;
    }
    if (op != "Where" && op != "Equal") {
      for (int i = 0; i < arity; ++i) {
        absl::Status s = no_symbolic(*ks[i]);
        if (!s.ok()) return s;
      }
    }
    for (int64_t e = 0; e < total; ++e) {
      double x[3] = {0, 0, 0};
      for (int i = 0; i < arity; ++i) {
        int64_t off = 0;
        for (size_t j = 0; j < rank; ++j)
          off += (e / ost[j] % od[j]) * sts[i][j];
        x[i] = ks[i]->v[off];
      }
      double r = 0;
      if (op == "Add") r = x[0] + x[1];
      if (op == "Sub") r = x[0] - x[1];
      if (op == "Mul") r = x[0] * x[1];
      if (op == "Div") {
        if (!a.is_float) {
          if (x[1] == 0) return NodeError(n, "integer division by zero");
          r = std::trunc(x[0] / x[1]);
        } else {
          r = static_cast<float>(x[0]) / static_cast<float>(x[1]);
        }
      }
      if (op == "Pow") r = std::pow(x[0], x[1]);
      if (op == "Max") r = std::max(x[0], x[1]);
      if (op == "Min") r = std::min(x[0], x[1]);
      if (op == "Equal") r = x[0] == x[1];
      if (op == "Less") r = x[0] < x[1];
      if (op == "LessOrEqual") r = x[0] <= x[1];
      if (op == "Greater") r = x[0] > x[1];
      if (op == "GreaterOrEqual") r = x[0] >= x[1];
      if (op == "Where") r = x[0] != 0 ? x[1] : x[2];
      if (out.is_float && op != "Where") r = static_cast<float>(r);
      out.v[e] = r;
    }
  } else if (kUnary.count(op)) {
    out = a;
    if (op != "Identity" && op != "Cast") {
      absl::Status s = no_symbolic(a);
      if (!s.ok()) return s;
    }
    for (double& x : out.v) {
      if (op == "Neg") x = -x;
      if (op == "Abs") x = std::fabs(x);
      if (op == "Sqrt") x = std::sqrt(static_cast<float>(x));
      if (op == "Reciprocal") x = 1.0f / static_cast<float>(x);
      if (op == "Exp") x = std::exp(static_cast<float>(x));
      if (op == "Log") x = std::log(static_cast<float>(x));
      if (op == "Erf") x = std::erf(static_cast<float>(x));
      if (op == "Relu") x = std::max(x, 0.0);
      if (op == "Sigmoid") x = 1.0f / (1.0f + std::exp(-static_cast<float>(x)));
      if (op == "Tanh") x = std::tanh(static_cast<float>(x));
      if (op == "Not") x = x == 0;
    }
    if (op == "Cast") {
      const int64_t to = AttrInt(n, "to", onnx::TensorProto::FLOAT);
      out.is_float = to == onnx::TensorProto::FLOAT ||
                     to == onnx::TensorProto::DOUBLE ||
                     to == onnx::TensorProto::FLOAT16;
      for (double& x : out.v) {
        if (x == kSymbolicBatch) continue;
        if (to == onnx::TensorProto::BOOL) {
          x = x != 0;
        } else if (!out.is_float) {
          x = std::trunc(x);
        } else if (to == onnx::TensorProto::FLOAT) {
          x = static_cast<float>(x);
        }
      }
    }
  } else if (op == "Unsqueeze" || op == "Squeeze") {
    std::vector<int64_t> axes;
    if (Opset() >= 13) {
      if (HasIn(n, 1)) {
        absl::StatusOr<std::vector<int64_t>> ax = KnownInts(n, 1, "axes");
        if (!ax.ok()) return ax.status();
        axes = *ax;
      }
    } else {
      axes = AttrInts(n, "axes");
    }
    out = a;
    if (op == "Unsqueeze") {
      const int r = a.dims.size() + axes.size();
      std::vector<int64_t> d(r, -1);
      for (int64_t ax : axes) {
        absl::StatusOr<int> x = Axis(n, ax, r, "axes");
        if (!x.ok()) return x.status();
        if (d[*x] == 1) return NodeError(n, "axes: an axis appears twice");
        d[*x] = 1;
      }
      size_t j = 0;
      for (int64_t& x : d) {
        if (x == -1) x = a.dims[j++];
      }
      out.dims = d;
    } else {
      std::set<int> drop;
      for (int64_t ax : axes) {
        absl::StatusOr<int> x = Axis(n, ax, a.dims.size(), "axes");
        if (!x.ok()) return x.status();
        drop.insert(*x);
      }
      out.dims.clear();
      for (size_t j = 0; j < a.dims.size(); ++j) {
        if (axes.empty() ? a.dims[j] != 1 : !drop.count(j)) {
          out.dims.push_back(a.dims[j]);
        }
      }
    }
  } else if (op == "Reshape") {
    absl::StatusOr<std::vector<int64_t>> shape = KnownInts(n, 1, "shape");
    if (!shape.ok()) return shape.status();
    out = a;
    out.dims = *shape;
    int64_t infer = -1;
    for (size_t j = 0; j < out.dims.size(); ++j) {
      if (out.dims[j] == 0 && j < a.dims.size()) out.dims[j] = a.dims[j];
      if (out.dims[j] == -1) {
        if (infer >= 0) return NodeError(n, "shape: more than one -1");
        infer = j;
      } else if (out.dims[j] < 0) {
        return NodeError(n, absl::StrFormat("shape: entry %d at %d is not "
                                            "valid",
                                            out.dims[j], j));
      }
    }
    if (infer >= 0) {
      out.dims[infer] = 1;
      const int64_t known = Product(out.dims);
      out.dims[infer] =
          known > 0 ? static_cast<int64_t>(a.v.size()) / known : -1;
    }
    if (Product(out.dims) != static_cast<int64_t>(a.v.size())) {
      return NodeError(n, "shape does not match the constant's elements");
    }
  } else if (op == "Gather") {
    if (n.input_size() != 2 || ks[1] == nullptr) {
      return NodeError(n, "needs data and indices");
    }
    absl::StatusOr<int> axis =
        Axis(n, AttrInt(n, "axis", 0), a.dims.size(), "axis");
    if (!axis.ok()) return axis.status();
    const Known& idx = *ks[1];
    std::vector<int64_t> od(a.dims.begin(), a.dims.begin() + *axis);
    od.insert(od.end(), idx.dims.begin(), idx.dims.end());
    od.insert(od.end(), a.dims.begin() + *axis + 1, a.dims.end());
    if (Product(od) > kMaxFoldedElements) return absl::OkStatus();
    const int64_t outer =
        Product(std::vector<int64_t>(a.dims.begin(), a.dims.begin() + *axis));
    const int64_t inner = Product(a.dims, *axis + 1);
    const int64_t len = a.dims[*axis];
    out.dims = od;
    out.v.clear();
    for (int64_t o = 0; o < outer; ++o) {
      for (double id : idx.v) {
        if (!IsWhole(id)) {
          return NodeError(n, "indices must be whole numbers");
        }
        if (id < -static_cast<double>(len) || id >= static_cast<double>(len)) {
          return NodeError(n, absl::StrFormat("index %g is outside [-%d, %d)",
                                              id, len, len));
        }
        int64_t i = static_cast<int64_t>(id);
        if (i < 0) i += len;
        for (int64_t e = 0; e < inner; ++e) {
          out.v.push_back(a.v[(o * len + i) * inner + e]);
        }
      }
    }
  } else if (op == "Concat") {
    absl::StatusOr<int> axis =
        Axis(n, AttrInt(n, "axis", 0), a.dims.size(), "axis");
    if (!axis.ok()) return axis.status();
    out.dims = a.dims;
    out.dims[*axis] = 0;
    for (const Known* k : ks) {
      if (k == nullptr || k->dims.size() != a.dims.size()) {
        return NodeError(n, "inputs must have the same number of axes");
      }
      for (size_t j = 0; j < a.dims.size(); ++j) {
        if (static_cast<int>(j) != *axis && k->dims[j] != a.dims[j]) {
          return NodeError(n, "input shapes differ outside the axis");
        }
      }
      out.dims[*axis] += k->dims[*axis];
    }
    const int64_t outer =
        Product(std::vector<int64_t>(a.dims.begin(), a.dims.begin() + *axis));
    out.v.clear();
    for (int64_t o = 0; o < outer; ++o) {
      for (const Known* k : ks) {
        const int64_t chunk = Product(k->dims, *axis);
        out.v.insert(out.v.end(), k->v.begin() + o * chunk,
                     k->v.begin() + (o + 1) * chunk);
      }
    }
  } else if (op == "Slice") {
    absl::StatusOr<std::vector<int64_t>> starts = KnownInts(n, 1, "starts");
    absl::StatusOr<std::vector<int64_t>> ends = KnownInts(n, 2, "ends");
    if (!starts.ok()) return starts.status();
    if (!ends.ok()) return ends.status();
    std::vector<int64_t> axes, steps;
    if (HasIn(n, 3)) {
      absl::StatusOr<std::vector<int64_t>> x = KnownInts(n, 3, "axes");
      if (!x.ok()) return x.status();
      axes = *x;
    } else {
      for (size_t j = 0; j < starts->size(); ++j) axes.push_back(j);
    }
    if (HasIn(n, 4)) {
      absl::StatusOr<std::vector<int64_t>> x = KnownInts(n, 4, "steps");
      if (!x.ok()) return x.status();
      steps = *x;
    } else {
      steps.assign(starts->size(), 1);
    }
    if (ends->size() != starts->size() || axes.size() != starts->size() ||
        steps.size() != starts->size()) {
      return NodeError(n, "starts, ends, axes and steps differ in length");
    }
    out = a;
    for (size_t j = 0; j < axes.size(); ++j) {
      absl::StatusOr<int> ax = Axis(n, axes[j], out.dims.size(), "axes");
      if (!ax.ok()) return ax.status();
      const int64_t len = out.dims[*ax];
      int64_t s = (*starts)[j], e = (*ends)[j], st = steps[j];
      if (st <= 0) return absl::OkStatus();
      if (s < 0) s += len;
      if (e < 0) e += len;
      s = std::clamp<int64_t>(s, 0, len);
      e = std::clamp<int64_t>(e, 0, len);
      std::vector<int64_t> pick;
      for (int64_t i = s; i < e; i += st) pick.push_back(i);
      const int64_t outer = Product(
          std::vector<int64_t>(out.dims.begin(), out.dims.begin() + *ax));
      const int64_t inner = Product(out.dims, *ax + 1);
      std::vector<double> v;
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i : pick) {
          for (int64_t q = 0; q < inner; ++q) {
            v.push_back(out.v[(o * len + i) * inner + q]);
          }
        }
      }
      out.v = std::move(v);
      out.dims[*ax] = pick.size();
    }
  } else if (op == "Transpose") {
    std::vector<int64_t> perm = AttrInts(n, "perm");
    const int r = a.dims.size();
    if (perm.empty()) {
      for (int j = r - 1; j >= 0; --j) perm.push_back(j);
    }
    std::set<int64_t> seen;
    for (int64_t p : perm) {
      if (p < 0 || p >= r || !seen.insert(p).second) {
        return NodeError(n, "perm must name every axis once");
      }
    }
    if (static_cast<int>(perm.size()) != r) {
      return NodeError(n, "perm must name every axis once");
    }
    out.dims.clear();
    for (int64_t p : perm) out.dims.push_back(a.dims[p]);
    const std::vector<int64_t> ist = strides(a.dims), ost = strides(out.dims);
    for (int64_t e = 0; e < static_cast<int64_t>(a.v.size()); ++e) {
      int64_t off = 0;
      for (int j = 0; j < r; ++j)
        off += (e / ost[j] % out.dims[j]) * ist[perm[j]];
      out.v[e] = a.v[off];
    }
  } else if (op == "ConstantOfShape") {
    absl::StatusOr<std::vector<int64_t>> shape = KnownInts(n, 0, "shape");
    if (!shape.ok()) return shape.status();
    for (int64_t d : *shape) {
      if (d < 0 || d > kMaxFoldedElements) {
        return NodeError(n, absl::StrFormat("shape entry %d is outside [0, "
                                            "%d]",
                                            d, kMaxFoldedElements));
      }
    }
    if (Product(*shape) > kMaxFoldedElements) {
      return NodeError(
          n, absl::StrFormat("more than %d elements", kMaxFoldedElements));
    }
    double fill = 0;
    out.is_float = true;
    if (const auto* v = Attr(n, "value"); v != nullptr && v->has_t()) {
      absl::StatusOr<Known> t = ToKnown(v->t(), NodeLabel(n));
      if (!t.ok()) return t.status();
      if (!t->v.empty()) fill = t->v[0];
      out.is_float = t->is_float;
    }
    out.dims = *shape;
    out.v.assign(Product(*shape), fill);
  } else if (op == "Range") {
    for (int i = 0; i < 3; ++i) {
      absl::Status s = no_symbolic(*ks[i]);
      if (!s.ok()) return s;
    }
    if (n.input_size() != 3 || ks[1] == nullptr || ks[2] == nullptr ||
        a.v.size() != 1 || ks[1]->v.size() != 1 || ks[2]->v.size() != 1) {
      return NodeError(n, "start, limit and delta must be scalars");
    }
    const double start = a.v[0], limit = ks[1]->v[0], delta = ks[2]->v[0];
    if (delta == 0) return NodeError(n, "delta is 0");
    for (double x = start; delta > 0 ? x < limit : x > limit; x += delta) {
      out.v.push_back(x);
      if (static_cast<int64_t>(out.v.size()) > kMaxFoldedElements) {
        return NodeError(
            n, absl::StrFormat("more than %d elements", kMaxFoldedElements));
      }
    }
    out.dims = {static_cast<int64_t>(out.v.size())};
  } else {
    return absl::OkStatus();
  }
  if (!KnownExtentOk(out.dims)) {
    return NodeError(n, "result " + KnownExtentError(out.dims));
  }
  if (static_cast<int64_t>(out.v.size()) != Product(out.dims)) {
    return NodeError(n, "internal: folded shape and values disagree");
  }
  SetKnown(n, 0, std::move(out));
  *folded = true;
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Layers.

absl::Status Importer::ConvInputs(const onnx::NodeProto& n, ConvGeometry* g) {
  absl::StatusOr<Value*> x = In(n, 0);
  if (!x.ok()) return x.status();
  absl::StatusOr<Value*> w = In(n, 1);
  if (!w.ok()) return w.status();
  if (!(*x)->batched || (*x)->shape.size() != 4) {
    return NodeError(n, absl::StrFormat("input must be a batched NCHW tensor, "
                                        "got %s",
                                        ShapeStr((*x)->shape)));
  }
  if (!(*w)->known || (*w)->k.dims.size() != 4 || init_uses_[n.input(1)] != 1) {
    return NodeError(n,
                     "W (input 1) must be a 4-D float initializer used by "
                     "this node only");
  }
  const std::string auto_pad =
      Attr(n, "auto_pad") ? Attr(n, "auto_pad")->s() : "NOTSET";
  if (auto_pad != "NOTSET" && auto_pad != "VALID") {
    return NodeError(n, absl::StrFormat("auto_pad %s is not supported "
                                        "(NOTSET and VALID are)",
                                        auto_pad));
  }
  g->x = *x;
  g->w = (*w)->k.dims;
  g->pads = AttrInts(n, "pads");
  if (g->pads.empty()) g->pads = {0, 0, 0, 0};
  g->strides = AttrInts(n, "strides");
  if (g->strides.empty()) g->strides = {1, 1};
  g->dil = AttrInts(n, "dilations");
  if (g->dil.empty()) g->dil = {1, 1};
  if (g->pads.size() != 4 || g->strides.size() != 2 || g->dil.size() != 2) {
    return NodeError(n, "pads, strides and dilations must be 2-D");
  }
  for (int j = 0; j < 2; ++j) {
    if (g->strides[j] < 1 || g->dil[j] < 1 || g->pads[j] < 0 ||
        g->pads[j + 2] < 0 || g->strides[j] > kMaxDim || g->dil[j] > kMaxDim ||
        g->pads[j] > kMaxDim || g->pads[j + 2] > kMaxDim) {
      return NodeError(n, absl::StrFormat("strides and dilations must be in "
                                          "1..%d, pads in 0..%d",
                                          kMaxDim, kMaxDim));
    }
  }
  g->groups = AttrInt(n, "group", 1);
  return absl::OkStatus();
}

absl::Status Importer::AddConvParams(const onnx::NodeProto& n,
                                     const ConvGeometry& g, v1::Layer* l) {
  absl::StatusOr<std::vector<float>> wv = OwnedFloats(n, 1, "W");
  if (!wv.ok()) return wv.status();
  v1::Conv2dParams* c = l->mutable_conv2d();
  c->set_kernel_h(g.w[2]);
  c->set_kernel_w(g.w[3]);
  c->set_stride_h(g.strides[0]);
  c->set_stride_w(g.strides[1]);
  c->set_pad_h(g.pads[0]);
  c->set_pad_w(g.pads[1]);
  c->set_dilation_h(g.dil[0]);
  c->set_dilation_w(g.dil[1]);
  c->set_groups(g.groups);
  AddTensor(l->name(), "weight", g.w, *wv);
  if (HasIn(n, 2)) {
    if (init_uses_[n.input(2)] != 1) {
      return NodeError(n,
                       "B (input 2) must be an initializer used by this "
                       "node only");
    }
    absl::StatusOr<std::vector<float>> bv = OwnedFloats(n, 2, "B");
    if (!bv.ok()) return bv.status();
    if (static_cast<int64_t>(bv->size()) != c->filters()) {
      return NodeError(n, "B must have one value per output channel");
    }
    c->set_use_bias(true);
    AddTensor(l->name(), "bias", {c->filters()}, *bv);
  }
  return absl::OkStatus();
}

absl::Status Importer::MapConv(const onnx::NodeProto& n) {
  ConvGeometry g;
  if (absl::Status st = ConvInputs(n, &g); !st.ok()) return st;
  const std::vector<int64_t>& pads = g.pads;
  if (pads[0] != pads[2] || pads[1] != pads[3]) {
    return NodeError(n, absl::StrFormat("pads [%s]: only symmetric padding is "
                                        "supported (top = bottom, left = "
                                        "right)",
                                        absl::StrJoin(pads, ", ")));
  }
  const std::vector<int64_t>& wd = g.w;
  const std::vector<int64_t>& in = g.x->shape;
  if (g.groups < 1 || in[1] % g.groups != 0 || wd[1] * g.groups != in[1]) {
    return NodeError(n, absl::StrFormat("W %s and group %d do not fit input "
                                        "channels %d",
                                        ShapeStr(wd), g.groups, in[1]));
  }
  const int64_t oh =
      (in[2] + 2 * pads[0] - g.dil[0] * (wd[2] - 1) - 1) / g.strides[0] + 1;
  const int64_t ow =
      (in[3] + 2 * pads[1] - g.dil[1] * (wd[3] - 1) - 1) / g.strides[1] + 1;
  if (oh < 1 || ow < 1) {
    return NodeError(n,
                     absl::StrFormat("output would be empty (%dx%d)", oh, ow));
  }
  const std::string xl = g.x->layer;
  v1::Layer* l = NewLayer(n, "", v1::CONV2D);
  l->add_inputs(xl);
  l->mutable_conv2d()->set_filters(wd[0]);
  if (absl::Status st = AddConvParams(n, g, l); !st.ok()) return st;
  SetOut(n, 0, *l, {kBatchDim, wd[0], oh, ow}, true);
  return absl::OkStatus();
}

// ConvTranspose: W is [C_in, C_out / group, kh, kw], PyTorch's layout and
// CONV_TRANSPOSE2D's. Asymmetric pads (begin, end) become pad = begin and
// an output padding of output_padding + begin - end, which must lie below
// the stride (the same output elements); an output_shape attribute sets the
// pads as ONNX derives them.
absl::Status Importer::MapConvTranspose(const onnx::NodeProto& n) {
  ConvGeometry g;
  if (absl::Status st = ConvInputs(n, &g); !st.ok()) return st;
  const std::vector<int64_t>& wd = g.w;
  const std::vector<int64_t>& in = g.x->shape;
  if (g.groups < 1 || in[1] % g.groups != 0 || wd[0] != in[1]) {
    return NodeError(n, absl::StrFormat("W %s and group %d do not fit input "
                                        "channels %d (W is [C_in, C_out / "
                                        "group, kh, kw])",
                                        ShapeStr(wd), g.groups, in[1]));
  }
  std::vector<int64_t> out_pad = AttrInts(n, "output_padding");
  if (out_pad.empty()) out_pad = {0, 0};
  if (out_pad.size() != 2 || out_pad[0] < 0 || out_pad[1] < 0 ||
      out_pad[0] > kMaxDim || out_pad[1] > kMaxDim) {
    return NodeError(n, absl::StrFormat("output_padding [%s] must be 2 "
                                        "values, each in 0..%d",
                                        absl::StrJoin(out_pad, ", "), kMaxDim));
  }
  const std::vector<int64_t> out_shape = AttrInts(n, "output_shape");
  if (!out_shape.empty()) {
    if (out_shape.size() != 2 || out_shape[0] < 1 || out_shape[1] < 1 ||
        out_shape[0] > kMaxDim || out_shape[1] > kMaxDim) {
      return NodeError(
          n, absl::StrFormat("output_shape [%s] must be the 2 "
                             "spatial sizes, each in 1..%d",
                             absl::StrJoin(out_shape, ", "), kMaxDim));
    }
    for (int j = 0; j < 2; ++j) {
      const int64_t total = g.strides[j] * (in[2 + j] - 1) + out_pad[j] +
                            (wd[2 + j] - 1) * g.dil[j] + 1 - out_shape[j];
      if (total < 0) {
        return NodeError(
            n, absl::StrFormat("output_shape [%s] is larger than the full "
                               "transposed convolution (%d more along axis "
                               "%d): it needs a larger output_padding",
                               absl::StrJoin(out_shape, ", "), -total, 2 + j));
      }
      g.pads[j] = total - total / 2;
      g.pads[j + 2] = total / 2;
    }
  }
  int64_t out[2];
  for (int j = 0; j < 2; ++j) {
    const int64_t op = out_pad[j] + g.pads[j] - g.pads[j + 2];
    if (op < 0 || op >= g.strides[j]) {
      return NodeError(
          n, absl::StrFormat(
                 "pads [%s] with output_padding [%s] and strides [%s] give "
                 "an output padding of %d along axis %d; it must lie in "
                 "0..%d (the stride - 1; the end pad may exceed the begin "
                 "pad only by the output padding)",
                 absl::StrJoin(g.pads, ", "), absl::StrJoin(out_pad, ", "),
                 absl::StrJoin(g.strides, ", "), op, 2 + j, g.strides[j] - 1));
    }
    out_pad[j] = op;
    out[j] = (in[2 + j] - 1) * g.strides[j] - 2 * g.pads[j] +
             g.dil[j] * (wd[2 + j] - 1) + 1 + op;
    if (out[j] < 1) {
      return NodeError(n, absl::StrFormat("output would be empty along axis "
                                          "%d (%d)",
                                          2 + j, out[j]));
    }
  }
  const int64_t filters = wd[1] * g.groups;
  const std::string xl = g.x->layer;
  v1::Layer* l = NewLayer(n, "", v1::CONV_TRANSPOSE2D);
  l->add_inputs(xl);
  v1::Conv2dParams* c = l->mutable_conv2d();
  c->set_filters(filters);
  c->set_output_padding_h(out_pad[0]);
  c->set_output_padding_w(out_pad[1]);
  if (absl::Status st = AddConvParams(n, g, l); !st.ok()) return st;
  SetOut(n, 0, *l, {kBatchDim, filters, out[0], out[1]}, true);
  return absl::OkStatus();
}

absl::Status Importer::MapGemm(const onnx::NodeProto& n) {
  absl::StatusOr<Value*> a = In(n, 0);
  if (!a.ok()) return a.status();
  absl::StatusOr<Value*> b = In(n, 1);
  if (!b.ok()) return b.status();
  const float alpha = AttrFloat(n, "alpha", 1.0f);
  const float beta = AttrFloat(n, "beta", 1.0f);
  const bool trans_a = AttrInt(n, "transA", 0) != 0;
  const bool trans_b = AttrInt(n, "transB", 0) != 0;
  if (!(*a)->batched || (*a)->shape.size() != 2 || trans_a) {
    return NodeError(n,
                     "A must be the batched [N, K] activations, not "
                     "transposed (transA = 0)");
  }
  if (!(*b)->parameter || (*b)->k.dims.size() != 2 ||
      init_uses_[n.input(1)] != 1) {
    return NodeError(n,
                     "B (input 1) must be a 2-D float initializer used by "
                     "this node only");
  }
  if (alpha != 1.0f || beta != 1.0f) {
    return NodeError(n, absl::StrFormat("alpha %g and beta %g: only 1 is "
                                        "supported",
                                        alpha, beta));
  }
  const std::vector<int64_t>& bd = (*b)->k.dims;
  const int64_t k = trans_b ? bd[1] : bd[0];
  const int64_t units = trans_b ? bd[0] : bd[1];
  if (k != (*a)->shape[1]) {
    return NodeError(n, absl::StrFormat("B %s (transB %d) does not take %d "
                                        "input features",
                                        ShapeStr(bd), trans_b, (*a)->shape[1]));
  }
  absl::StatusOr<std::vector<float>> bv = OwnedFloats(n, 1, "B");
  if (!bv.ok()) return bv.status();
  // DENSE's weight is [in, units].
  std::vector<float> w(bv->size());
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < units; ++j) {
      w[i * units + j] = trans_b ? (*bv)[j * k + i] : (*bv)[i * units + j];
    }
  }
  const std::string al = (*a)->layer;
  v1::Layer* l = NewLayer(n, "", v1::DENSE);
  l->add_inputs(al);
  l->mutable_dense()->set_units(units);
  AddTensor(l->name(), "weight", {k, units}, w);
  if (HasIn(n, 2)) {
    absl::StatusOr<Value*> c = In(n, 2);
    if (!c.ok()) return c.status();
    if (!(*c)->parameter || init_uses_[n.input(2)] != 1 ||
        (*c)->k.v.size() != static_cast<size_t>(units)) {
      return NodeError(n, absl::StrFormat("C (input 2) must be an initializer "
                                          "of %d values used by this node "
                                          "only",
                                          units));
    }
    absl::StatusOr<std::vector<float>> cv = OwnedFloats(n, 2, "C");
    if (!cv.ok()) return cv.status();
    l->mutable_dense()->set_use_bias(true);
    AddTensor(l->name(), "bias", {units}, *cv);
  }
  SetOut(n, 0, *l, {kBatchDim, units}, true);
  return absl::OkStatus();
}

absl::Status Importer::MapMatMul(const onnx::NodeProto& n) {
  absl::StatusOr<Value*> a = In(n, 0);
  if (!a.ok()) return a.status();
  absl::StatusOr<Value*> b = In(n, 1);
  if (!b.ok()) return b.status();
  // x @ W with W a 2-D parameter used here only: DENSE over the last axis.
  if ((*a)->batched && (*b)->parameter && (*b)->layer.empty() &&
      (*b)->k.dims.size() == 2 && init_uses_[n.input(1)] == 1) {
    const std::vector<int64_t>& wd = (*b)->k.dims;
    if ((*a)->shape.back() != wd[0]) {
      return NodeError(n, absl::StrFormat("%s @ %s: inner dimensions differ",
                                          ShapeStr((*a)->shape), ShapeStr(wd)));
    }
    absl::StatusOr<std::vector<float>> wv = OwnedFloats(n, 1, "B");
    if (!wv.ok()) return wv.status();
    const std::string al = (*a)->layer;
    std::vector<int64_t> out = (*a)->shape;
    out.back() = wd[1];
    v1::Layer* l = NewLayer(n, "", v1::DENSE);
    l->add_inputs(al);
    l->mutable_dense()->set_units(wd[1]);
    l->mutable_dense()->set_last_axis(true);
    AddTensor(l->name(), "weight", wd, *wv);
    SetOut(n, 0, *l, out, true);
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> al = AsLayer(n, *a);
  if (!al.ok()) return al.status();
  absl::StatusOr<std::string> bl = AsLayer(n, *b);
  if (!bl.ok()) return bl.status();
  const std::vector<int64_t>& as = (*a)->shape;
  const std::vector<int64_t>& bs = (*b)->shape;
  if (as.size() < 2 || bs.size() < 2) {
    return NodeError(n,
                     "1-D operands are not supported (both need >= 2 "
                     "axes)");
  }
  if (as.back() != bs[bs.size() - 2]) {
    return NodeError(n, absl::StrFormat("%s @ %s: inner dimensions differ",
                                        ShapeStr(as), ShapeStr(bs)));
  }
  Value la, lb;
  la.shape = std::vector<int64_t>(as.begin(), as.end() - 2);
  la.batched = (*a)->batched;
  lb.shape = std::vector<int64_t>(bs.begin(), bs.end() - 2);
  lb.batched = (*b)->batched;
  absl::StatusOr<std::vector<int64_t>> lead = Broadcast(n, {&la, &lb});
  if (!lead.ok()) return lead.status();
  std::vector<int64_t> out = *lead;
  out.push_back(as[as.size() - 2]);
  out.push_back(bs.back());
  const bool batched = (*a)->batched || (*b)->batched;
  v1::Layer* l = NewLayer(n, "", v1::MATMUL);
  l->add_inputs(*al);
  l->add_inputs(*bl);
  l->mutable_matmul();
  SetOut(n, 0, *l, out, batched);
  return absl::OkStatus();
}

absl::Status Importer::MapElementwise(const onnx::NodeProto& n, v1::LayerOp op,
                                      int arity) {
  if (n.input_size() != arity) {
    return NodeError(
        n, absl::StrFormat("takes %d inputs, got %d", arity, n.input_size()));
  }
  std::vector<Value*> ins;
  std::vector<const Value*> cins;
  for (int i = 0; i < arity; ++i) {
    absl::StatusOr<Value*> v = In(n, i);
    if (!v.ok()) return v.status();
    ins.push_back(*v);
  }
  std::vector<std::string> names;
  for (Value* v : ins) {
    absl::StatusOr<std::string> l = AsLayer(n, v);
    if (!l.ok()) return l.status();
    names.push_back(*l);
    cins.push_back(v);
  }
  absl::StatusOr<std::vector<int64_t>> out = Broadcast(n, cins);
  if (!out.ok()) return out.status();
  bool batched = false;
  for (const Value* v : cins) batched = batched || v->batched;
  v1::Layer* l = NewLayer(n, "", op);
  for (const std::string& s : names) l->add_inputs(s);
  const std::string& t = n.op_type();
  if (op == v1::BINARY) {
    v1::BinaryKind k = t == "Add"   ? v1::BINARY_ADD
                       : t == "Sub" ? v1::BINARY_SUB
                       : t == "Mul" ? v1::BINARY_MUL
                       : t == "Div" ? v1::BINARY_DIV
                       : t == "Pow" ? v1::BINARY_POW
                       : t == "Max" ? v1::BINARY_MAX
                                    : v1::BINARY_MIN;
    l->mutable_binary()->set_kind(k);
  } else if (op == v1::COMPARE) {
    v1::CompareKind k = t == "Equal"         ? v1::COMPARE_EQUAL
                        : t == "Less"        ? v1::COMPARE_LESS
                        : t == "LessOrEqual" ? v1::COMPARE_LESS_EQUAL
                        : t == "Greater"     ? v1::COMPARE_GREATER
                                             : v1::COMPARE_GREATER_EQUAL;
    l->mutable_compare()->set_kind(k);
  }
  SetOut(n, 0, *l, *out, batched);
  return absl::OkStatus();
}

// One input, same shape out: UNARY kinds and the existing activations.
absl::Status Importer::MapSimple(const onnx::NodeProto& n, v1::LayerOp op) {
  absl::StatusOr<Value*> x = In(n, 0);
  if (!x.ok()) return x.status();
  absl::StatusOr<std::string> xl = AsLayer(n, *x);
  if (!xl.ok()) return xl.status();
  const std::vector<int64_t> shape = (*x)->shape;
  const bool batched = (*x)->batched;
  v1::Layer* l = NewLayer(n, "", op);
  l->add_inputs(*xl);
  if (op == v1::UNARY) {
    const std::string& t = n.op_type();
    v1::UnaryKind k = t == "Neg"          ? v1::UNARY_NEG
                      : t == "Abs"        ? v1::UNARY_ABS
                      : t == "Sqrt"       ? v1::UNARY_SQRT
                      : t == "Reciprocal" ? v1::UNARY_RECIPROCAL
                      : t == "Exp"        ? v1::UNARY_EXP
                      : t == "Log"        ? v1::UNARY_LOG
                      : t == "Erf"        ? v1::UNARY_ERF
                                          : v1::UNARY_IDENTITY;
    l->mutable_unary()->set_kind(k);
  }
  SetOut(n, 0, *l, shape, batched);
  return absl::OkStatus();
}

absl::Status Importer::MapCast(const onnx::NodeProto& n) {
  const int64_t to = AttrInt(n, "to", 0);
  if (to != onnx::TensorProto::FLOAT) {
    return NodeError(n, absl::StrFormat("cast to %s of a computed tensor is "
                                        "not supported (only to FLOAT)",
                                        onnx::TensorProto::DataType_Name(
                                            static_cast<int>(to))));
  }
  return MapSimple(n, v1::UNARY);
}

absl::Status Importer::MapSoftmax(const onnx::NodeProto& n) {
  absl::StatusOr<Value*> x = In(n, 0);
  if (!x.ok()) return x.status();
  const int rank = (*x)->known && (*x)->layer.empty() ? (*x)->k.dims.size()
                                                      : (*x)->shape.size();
  const int64_t def = Opset() >= 13 ? -1 : 1;
  absl::StatusOr<int> axis = Axis(n, AttrInt(n, "axis", def), rank, "axis");
  if (!axis.ok()) return axis.status();
  if (*axis != rank - 1) {
    return NodeError(n, absl::StrFormat("axis %d: only the last axis (%d) is "
                                        "supported",
                                        AttrInt(n, "axis", def), rank - 1));
  }
  return MapSimple(n, v1::SOFTMAX);
}

absl::Status Importer::MapReduce(const onnx::NodeProto& n) {
  absl::StatusOr<Value*> x = In(n, 0);
  if (!x.ok()) return x.status();
  std::vector<int64_t> axes;
  // ReduceSum takes axes as an input from opset 13, the others from 18.
  const bool axes_input =
      n.op_type() == "ReduceSum" ? Opset() >= 13 : Opset() >= 18;
  if (axes_input) {
    if (HasIn(n, 1)) {
      absl::StatusOr<std::vector<int64_t>> a = KnownInts(n, 1, "axes");
      if (!a.ok()) return a.status();
      axes = *a;
    }
  } else {
    axes = AttrInts(n, "axes");
  }
  const bool keepdims = AttrInt(n, "keepdims", 1) != 0;
  if (axes.empty() && AttrInt(n, "noop_with_empty_axes", 0) != 0) {
    return NodeError(n, "noop_with_empty_axes with no axes is not supported");
  }
  absl::StatusOr<std::string> xl = AsLayer(n, *x);
  if (!xl.ok()) return xl.status();
  const std::vector<int64_t> in = (*x)->shape;
  const bool batched = (*x)->batched;
  const int rank = in.size();
  std::set<int> reduce;
  for (int64_t a : axes) {
    absl::StatusOr<int> ax = Axis(n, a, rank, "axes");
    if (!ax.ok()) return ax.status();
    if (batched && *ax == 0) {
      return NodeError(n, "axes: the batch axis (0) cannot be reduced");
    }
    reduce.insert(*ax);
  }
  if (axes.empty()) {
    for (int j = batched ? 1 : 0; j < rank; ++j) reduce.insert(j);
  }
  std::vector<int64_t> out;
  for (int j = 0; j < rank; ++j) {
    if (!reduce.count(j)) {
      out.push_back(in[j]);
    } else if (keepdims) {
      out.push_back(1);
    }
  }
  v1::Layer* l = NewLayer(n, "", v1::REDUCE);
  l->add_inputs(*xl);
  auto* r = l->mutable_reduce();
  r->set_kind(n.op_type() == "ReduceMean" ? v1::REDUCE_MEAN : v1::REDUCE_SUM);
  for (int a : reduce) r->add_axes(a);
  r->set_keepdims(keepdims);
  SetOut(n, 0, *l, out, batched);
  return absl::OkStatus();
}

absl::Status Importer::MapGather(const onnx::NodeProto& n) {
  absl::StatusOr<Value*> data = In(n, 0);
  if (!data.ok()) return data.status();
  absl::StatusOr<Value*> idx = In(n, 1);
  if (!idx.ok()) return idx.status();
  // A 2-D table used here only, read with the model's token ids:
  // EMBEDDING.
  const int64_t axis_attr = AttrInt(n, "axis", 0);
  if ((*data)->parameter && (*data)->layer.empty() &&
      (*data)->k.dims.size() == 2 && init_uses_[n.input(0)] == 1 &&
      (*idx)->layer == kInputRef && axis_attr == 0) {
    absl::StatusOr<std::vector<float>> wv = OwnedFloats(n, 0, "data");
    if (!wv.ok()) return wv.status();
    const std::vector<int64_t> wd = (*data)->k.dims;
    std::vector<int64_t> out = (*idx)->shape;
    out.push_back(wd[1]);
    v1::Layer* l = NewLayer(n, "", v1::EMBEDDING);
    l->add_inputs(kInputRef);
    l->mutable_embedding()->set_vocab_size(wd[0]);
    l->mutable_embedding()->set_dim(wd[1]);
    AddTensor(l->name(), "weight", wd, *wv);
    SetOut(n, 0, *l, out, true);
    return absl::OkStatus();
  }
  if ((*idx)->known && (*idx)->layer.empty()) {
    for (double x : (*idx)->k.v) {
      if (!IsWhole(x)) {
        return NodeError(n, "indices must be whole numbers");
      }
    }
  }
  absl::StatusOr<std::string> dl = AsLayer(n, *data);
  if (!dl.ok()) return dl.status();
  absl::StatusOr<std::string> il = AsLayer(n, *idx);
  if (!il.ok()) return il.status();
  const std::vector<int64_t>& ds = (*data)->shape;
  absl::StatusOr<int> axis = Axis(n, axis_attr, ds.size(), "axis");
  if (!axis.ok()) return axis.status();
  if ((*data)->batched && *axis == 0) {
    return NodeError(n, "axis: cannot gather along the batch axis");
  }
  if ((*data)->batched && (*idx)->batched) {
    return NodeError(n, "data and indices cannot both be batched");
  }
  std::vector<int64_t> out(ds.begin(), ds.begin() + *axis);
  out.insert(out.end(), (*idx)->shape.begin(), (*idx)->shape.end());
  out.insert(out.end(), ds.begin() + *axis + 1, ds.end());
  if ((*idx)->batched && *axis != 0) {
    return NodeError(n,
                     "batched indices need axis 0 (the batch axis must "
                     "stay first)");
  }
  const bool batched = (*data)->batched || (*idx)->batched;
  v1::Layer* l = NewLayer(n, "", v1::GATHER);
  l->add_inputs(*dl);
  l->add_inputs(*il);
  l->mutable_gather()->set_axis(*axis);
  SetOut(n, 0, *l, out, batched);
  return absl::OkStatus();
}

absl::Status Importer::MapConcat(const onnx::NodeProto& n) {
  std::vector<std::string> names;
  std::vector<Value*> ins;
  for (int i = 0; i < n.input_size(); ++i) {
    absl::StatusOr<Value*> v = In(n, i);
    if (!v.ok()) return v.status();
    absl::StatusOr<std::string> l = AsLayer(n, *v);
    if (!l.ok()) return l.status();
    names.push_back(*l);
    ins.push_back(*v);
  }
  if (ins.size() < 2) return NodeError(n, "needs at least two inputs");
  const int rank = ins[0]->shape.size();
  absl::StatusOr<int> axis = Axis(n, AttrInt(n, "axis", 0), rank, "axis");
  if (!axis.ok()) return axis.status();
  std::vector<int64_t> out = ins[0]->shape;
  bool batched = false;
  for (Value* v : ins) batched = batched || v->batched;
  if (batched && *axis == 0) {
    return NodeError(n, "axis: cannot concatenate along the batch axis");
  }
  out[*axis] = 0;
  for (Value* v : ins) {
    if (v->batched != batched) {
      return NodeError(n, "inputs must all be batched or all unbatched");
    }
    if (static_cast<int>(v->shape.size()) != rank) {
      return NodeError(n, "inputs must have the same number of axes");
    }
    for (int j = 0; j < rank; ++j) {
      if (j != *axis && v->shape[j] != ins[0]->shape[j]) {
        return NodeError(n, absl::StrFormat("input shapes %s and %s differ "
                                            "outside axis %d",
                                            ShapeStr(ins[0]->shape),
                                            ShapeStr(v->shape), *axis));
      }
    }
    out[*axis] += v->shape[*axis];
  }
  v1::Layer* l = NewLayer(n, "", v1::CONCAT);
  for (const std::string& s : names) l->add_inputs(s);
  l->mutable_concat()->set_axis(*axis);
  SetOut(n, 0, *l, out, batched);
  return absl::OkStatus();
}

absl::Status Importer::EmitSlice(const onnx::NodeProto& n, Value* in,
                                 int out_index,
                                 const std::vector<int64_t>& starts,
                                 const std::vector<int64_t>& ends,
                                 const std::vector<int64_t>& axes,
                                 const std::vector<int64_t>& steps) {
  absl::StatusOr<std::string> cur = AsLayer(n, in);
  if (!cur.ok()) return cur.status();
  std::vector<int64_t> shape = in->shape;
  const bool batched = in->batched;
  std::string name = *cur;
  const v1::Layer* last = nullptr;
  std::set<int> seen;
  for (size_t j = 0; j < axes.size(); ++j) {
    absl::StatusOr<int> ax = Axis(n, axes[j], shape.size(), "axes");
    if (!ax.ok()) return ax.status();
    if (!seen.insert(*ax).second) {
      return NodeError(n, absl::StrFormat("axes: %d appears twice", *ax));
    }
    const int64_t step = steps[j];
    if (step <= 0) {
      return NodeError(n, absl::StrFormat("steps: %d is not positive (reverse "
                                          "slices are not supported)",
                                          step));
    }
    if (batched && *ax == 0) {
      if (starts[j] == 0 && ends[j] >= (int64_t{1} << 31) && step == 1) {
        continue;  // the whole batch
      }
      return NodeError(n, "cannot slice the batch axis");
    }
    const int64_t len = shape[*ax];
    int64_t s = starts[j], e = ends[j];
    if (s < 0) s += len;
    if (e < 0) e += len;
    s = std::clamp<int64_t>(s, 0, len);
    e = std::clamp<int64_t>(e, 0, len);
    const int64_t count = e > s ? (e - s + step - 1) / step : 0;
    if (count == 0) {
      return NodeError(n, absl::StrFormat("axis %d: the slice is empty", *ax));
    }
    if (s == 0 && count == len && step == 1) continue;  // whole axis
    const std::string suffix =
        axes.size() > 1 || n.op_type() == "Split"
            ? (n.op_type() == "Split" ? absl::StrCat(out_index)
                                      : absl::StrCat("axis", *ax))
            : "";
    v1::Layer* l = NewLayer(n, suffix, v1::SLICE);
    l->add_inputs(name);
    auto* p = l->mutable_slice();
    p->set_axis(*ax);
    p->set_start(s);
    p->set_end(e);
    p->set_step(step);
    shape[*ax] = count;
    name = l->name();
    last = l;
  }
  if (last == nullptr) {
    // Nothing cut: the node still becomes a layer (an identity).
    v1::Layer* l = NewLayer(
        n, n.op_type() == "Split" ? absl::StrCat(out_index) : "", v1::UNARY);
    l->add_inputs(name);
    l->mutable_unary()->set_kind(v1::UNARY_IDENTITY);
    last = l;
  }
  SetOut(n, out_index, *last, shape, batched);
  return absl::OkStatus();
}

absl::Status Importer::MapSlice(const onnx::NodeProto& n) {
  absl::StatusOr<Value*> x = In(n, 0);
  if (!x.ok()) return x.status();
  std::vector<int64_t> starts, ends, axes, steps;
  if (Opset() >= 10) {
    absl::StatusOr<std::vector<int64_t>> s = KnownInts(n, 1, "starts");
    if (!s.ok()) return s.status();
    absl::StatusOr<std::vector<int64_t>> e = KnownInts(n, 2, "ends");
    if (!e.ok()) return e.status();
    starts = *s;
    ends = *e;
    if (HasIn(n, 3)) {
      absl::StatusOr<std::vector<int64_t>> a = KnownInts(n, 3, "axes");
      if (!a.ok()) return a.status();
      axes = *a;
    }
    if (HasIn(n, 4)) {
      absl::StatusOr<std::vector<int64_t>> st = KnownInts(n, 4, "steps");
      if (!st.ok()) return st.status();
      steps = *st;
    }
  } else {
    starts = AttrInts(n, "starts");
    ends = AttrInts(n, "ends");
    axes = AttrInts(n, "axes");
  }
  if (axes.empty()) {
    for (size_t j = 0; j < starts.size(); ++j) axes.push_back(j);
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    return NodeError(n, "starts, ends, axes and steps differ in length");
  }
  return EmitSlice(n, *x, 0, starts, ends, axes, steps);
}

absl::Status Importer::MapSplit(const onnx::NodeProto& n) {
  absl::StatusOr<Value*> x = In(n, 0);
  if (!x.ok()) return x.status();
  const std::vector<int64_t>& s =
      (*x)->known && (*x)->layer.empty() ? (*x)->k.dims : (*x)->shape;
  absl::StatusOr<int> axis = Axis(n, AttrInt(n, "axis", 0), s.size(), "axis");
  if (!axis.ok()) return axis.status();
  if (s[*axis] == kBatchDim) return NodeError(n, "cannot split the batch axis");
  std::vector<int64_t> split;
  if (Opset() >= 13) {
    if (HasIn(n, 1)) {
      absl::StatusOr<std::vector<int64_t>> sp = KnownInts(n, 1, "split");
      if (!sp.ok()) return sp.status();
      split = *sp;
    }
  } else {
    split = AttrInts(n, "split");
  }
  const int outs = n.output_size();
  if (split.empty()) {
    if (s[*axis] % outs != 0) {
      return NodeError(n, absl::StrFormat("axis %d of length %d does not "
                                          "split into %d equal parts",
                                          *axis, s[*axis], outs));
    }
    split.assign(outs, s[*axis] / outs);
  }
  if (static_cast<int>(split.size()) != outs) {
    return NodeError(n, "split must have one entry per output");
  }
  // Checked entry by entry, so the running sum never overflows.
  int64_t sum = 0;
  bool adds_up = true;
  for (int64_t p : split) {
    if (p < 0 || p > s[*axis] - sum) {
      adds_up = false;
      break;
    }
    sum += p;
  }
  if (!adds_up || sum != s[*axis]) {
    return NodeError(
        n, absl::StrFormat("split [%s] does not add up to the "
                           "length %d of axis %d",
                           absl::StrJoin(split, ", "), s[*axis], *axis));
  }
  int64_t start = 0;
  for (int i = 0; i < outs; ++i) {
    // An output nobody reads gets no layer (it would be a dead layer).
    if (!n.output(i).empty() && (consumed_outputs_.count(n.output(i)) ||
                                 n.output(i) == g_.output(0).name())) {
      absl::Status st =
          EmitSlice(n, *x, i, {start}, {start + split[i]}, {*axis}, {1});
      if (!st.ok()) return st;
    }
    start += split[i];
  }
  return absl::OkStatus();
}

absl::Status Importer::EmitReshape(const onnx::NodeProto& n, Value* in,
                                   std::vector<int64_t> full_out) {
  absl::StatusOr<std::string> xl = AsLayer(n, in);
  if (!xl.ok()) return xl.status();
  const bool batched = in->batched;
  v1::Layer* l = NewLayer(n, "", v1::RESHAPE);
  l->add_inputs(*xl);
  auto* r = l->mutable_reshape();
  for (size_t j = batched ? 1 : 0; j < full_out.size(); ++j) {
    r->add_shape(full_out[j]);
  }
  SetOut(n, 0, *l, std::move(full_out), batched);
  return absl::OkStatus();
}

// Reshape, Flatten, Squeeze, Unsqueeze of a layer output.
absl::Status Importer::MapReshapeLike(const onnx::NodeProto& n) {
  absl::StatusOr<Value*> x = In(n, 0);
  if (!x.ok()) return x.status();
  absl::StatusOr<std::string> xl = AsLayer(n, *x);
  if (!xl.ok()) return xl.status();
  const std::vector<int64_t> in = (*x)->shape;
  const bool batched = (*x)->batched;
  const int rank = in.size();
  const std::string& t = n.op_type();
  std::vector<int64_t> out;
  if (t == "Flatten") {
    absl::StatusOr<int> axis = Axis(n, AttrInt(n, "axis", 1), rank + 1, "axis");
    if (!axis.ok()) return axis.status();
    if (batched && *axis != 1) {
      return NodeError(n, absl::StrFormat("axis %d: only 1 keeps the batch "
                                          "axis first",
                                          *axis));
    }
    if (batched) {
      v1::Layer* l = NewLayer(n, "", v1::FLATTEN);
      l->add_inputs(*xl);
      SetOut(n, 0, *l, {kBatchDim, Product(in, 1)}, true);
      return absl::OkStatus();
    }
    std::vector<int64_t> head(in.begin(), in.begin() + *axis);
    out = {Product(head), Product(in, *axis)};
  } else if (t == "Squeeze" || t == "Unsqueeze") {
    std::vector<int64_t> axes;
    if (Opset() >= 13) {
      if (HasIn(n, 1)) {
        absl::StatusOr<std::vector<int64_t>> a = KnownInts(n, 1, "axes");
        if (!a.ok()) return a.status();
        axes = *a;
      }
    } else {
      axes = AttrInts(n, "axes");
    }
    if (t == "Unsqueeze") {
      const int r = rank + axes.size();
      std::vector<int64_t> d(r, -2);
      for (int64_t a : axes) {
        absl::StatusOr<int> ax = Axis(n, a, r, "axes");
        if (!ax.ok()) return ax.status();
        if (batched && *ax == 0) {
          return NodeError(n, "axes: 0 would move the batch axis");
        }
        if (d[*ax] == 1) return NodeError(n, "axes: an axis appears twice");
        d[*ax] = 1;
      }
      size_t j = 0;
      for (int64_t& v : d) {
        if (v == -2) v = in[j++];
      }
      out = d;
    } else {
      std::set<int> drop;
      for (int64_t a : axes) {
        absl::StatusOr<int> ax = Axis(n, a, rank, "axes");
        if (!ax.ok()) return ax.status();
        if (in[*ax] != 1) {
          return NodeError(n, absl::StrFormat("axes: axis %d has length %d, "
                                              "not 1",
                                              *ax, in[*ax]));
        }
        drop.insert(*ax);
      }
      for (int j = 0; j < rank; ++j) {
        const bool is_batch = batched && j == 0;
        if (is_batch || (axes.empty() ? in[j] != 1 : !drop.count(j))) {
          out.push_back(in[j]);
        }
      }
    }
  } else {  // Reshape
    absl::StatusOr<Known> shape = KnownIn(n, 1, "shape");
    if (!shape.ok()) return shape.status();
    if (AttrInt(n, "allowzero", 0) != 0) {
      for (double v : shape->v) {
        if (v == 0) return NodeError(n, "allowzero with a 0 in shape");
      }
    }
    int infer = -1;
    int64_t known = 1;
    for (size_t j = 0; j < shape->v.size(); ++j) {
      const double v = shape->v[j];
      int64_t d;
      if (v == kSymbolicBatch ||
          (batched && j == 0 && fixed_batch_ > 0 && v == fixed_batch_)) {
        if (!batched || j != 0) {
          return NodeError(n, absl::StrFormat("shape: the batch size may only "
                                              "be dimension 0, found at %d",
                                              j));
        }
        d = kBatchDim;
      } else if (v == 0) {
        if (j >= in.size()) {
          return NodeError(n, absl::StrFormat("shape: 0 at %d copies an axis "
                                              "the input lacks",
                                              j));
        }
        d = in[j];
      } else if (v == -1) {
        if (infer >= 0) return NodeError(n, "shape: more than one -1");
        infer = j;
        d = -1;
      } else if (v >= 1 && IsWhole(v)) {
        if (v > kMaxDim) {
          return NodeError(n, absl::StrFormat("shape: entry %g at %d exceeds "
                                              "the largest dimension, %d",
                                              v, j, kMaxDim));
        }
        d = static_cast<int64_t>(v);
      } else {
        return NodeError(n, absl::StrFormat("shape: entry %g at %d is not "
                                            "valid",
                                            v, j));
      }
      out.push_back(d);
      if (d != -1 && d != kBatchDim) {
        if (d > kMaxElements / known) {
          return NodeError(
              n, absl::StrFormat("shape [%s]: an example would "
                                 "exceed %d elements",
                                 absl::StrJoin(shape->v, ", "), kMaxElements));
        }
        known *= d;
      }
    }
    const int64_t elems = Product(in, batched ? 1 : 0);
    if (batched && !out.empty() && out[0] != kBatchDim && infer == 0) {
      // [-1, rest...]: the rest must hold one example exactly.
      if (known == elems) {
        out[0] = kBatchDim;
        infer = -1;
      }
    }
    if (batched && (out.empty() || out[0] != kBatchDim)) {
      return NodeError(
          n, absl::StrFormat("shape: the batch dimension must "
                             "stay first and unchanged (input "
                             "%s, shape [%s])",
                             ShapeStr(in), absl::StrJoin(shape->v, ", ")));
    }
    if (infer >= 0) {
      if (known == 0 || elems % known != 0) {
        return NodeError(n, "shape: -1 cannot be inferred");
      }
      out[infer] = elems / known;
    }
    if (Product(out, batched ? 1 : 0) != elems) {
      return NodeError(n, absl::StrFormat("shape %s does not hold the %d "
                                          "elements of %s",
                                          ShapeStr(out), elems, ShapeStr(in)));
    }
  }
  if (batched) out[0] = kBatchDim;
  // Drop the placeholder layer name resolution: EmitReshape re-reads it.
  return EmitReshape(n, *x, out);
}

absl::Status Importer::MapTranspose(const onnx::NodeProto& n) {
  absl::StatusOr<Value*> x = In(n, 0);
  if (!x.ok()) return x.status();
  absl::StatusOr<std::string> xl = AsLayer(n, *x);
  if (!xl.ok()) return xl.status();
  const std::vector<int64_t> in = (*x)->shape;
  const bool batched = (*x)->batched;
  std::vector<int64_t> perm = AttrInts(n, "perm");
  if (perm.empty()) {
    for (int j = in.size() - 1; j >= 0; --j) perm.push_back(j);
  }
  if (perm.size() != in.size()) {
    return NodeError(n, "perm must name every axis once");
  }
  if (batched && perm[0] != 0) {
    return NodeError(n, absl::StrFormat("perm[0] is %d: the batch axis must "
                                        "stay first",
                                        perm[0]));
  }
  std::vector<int64_t> out;
  std::set<int64_t> seen;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(in.size()) ||
        !seen.insert(p).second) {
      return NodeError(n, "perm must name every axis once");
    }
    out.push_back(in[p]);
  }
  v1::Layer* l = NewLayer(n, "", v1::TRANSPOSE);
  l->add_inputs(*xl);
  for (int64_t p : perm) l->mutable_transpose()->add_perm(p);
  SetOut(n, 0, *l, out, batched);
  return absl::OkStatus();
}

absl::Status Importer::MapBatchNorm(const onnx::NodeProto& n) {
  absl::StatusOr<Value*> x = In(n, 0);
  if (!x.ok()) return x.status();
  if (!(*x)->batched || (*x)->shape.size() < 2) {
    return NodeError(n, "input must be batched [N, C, ...]");
  }
  const int64_t c = (*x)->shape[1];
  static constexpr const char* kRoles[] = {"", "scale", "B", "input_mean",
                                           "input_var"};
  std::vector<float> v[5];
  for (int i = 1; i <= 4; ++i) {
    if (init_uses_[n.input_size() > i ? n.input(i) : ""] != 1) {
      return NodeError(n, absl::StrFormat("%s (input %d) must be an "
                                          "initializer used by this node "
                                          "only",
                                          kRoles[i], i));
    }
    absl::StatusOr<std::vector<float>> f = OwnedFloats(n, i, kRoles[i]);
    if (!f.ok()) return f.status();
    if (static_cast<int64_t>(f->size()) != c) {
      return NodeError(n, absl::StrFormat("%s has %d values, not one per "
                                          "channel (%d)",
                                          kRoles[i], f->size(), c));
    }
    v[i] = *f;
  }
  for (int o = 1; o < n.output_size(); ++o) {
    if (!n.output(o).empty() && consumed_outputs_.count(n.output(o))) {
      return NodeError(n,
                       "running mean and variance outputs cannot be read "
                       "by other nodes");
    }
  }
  const bool training = AttrInt(n, "training_mode", 0) != 0;
  const std::string xl = (*x)->layer;
  const std::vector<int64_t> shape = (*x)->shape;
  v1::Layer* l = NewLayer(n, "", v1::BATCH_NORM);
  l->add_inputs(xl);
  auto* p = l->mutable_batch_norm();
  p->set_epsilon(AttrFloat(n, "epsilon", 1e-5f));
  // ONNX: running = m * running + (1 - m) * batch. Lockstep (PyTorch):
  // running = (1 - momentum) * running + momentum * batch. 1 - m is taken
  // of the shortest decimal that is m as a float (the number the exporter
  // wrote), so PyTorch's momentum 0.1, exported as 0.9f, comes back as
  // 0.1f and not as the float below it.
  const float m = AttrFloat(n, "momentum", 0.9f);
  if (!(m >= 0.0f && m <= 1.0f)) {
    return NodeError(n, absl::StrFormat("momentum %g is outside [0, 1]", m));
  }
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, static_cast<double>(m));
    if (std::strtof(buf, nullptr) == m) break;
  }
  p->set_momentum(static_cast<float>(1.0 - std::strtod(buf, nullptr)));
  if (!training) {
    p->set_eval(true);
    warnings_.push_back(absl::StrFormat(
        "%s: training_mode is 0, so this batch norm is frozen (eval); export "
        "with training=torch.onnx.TrainingMode.PRESERVE to train it",
        NodeLabel(n)));
  }
  AddTensor(l->name(), "weight", {c}, v[1]);
  AddTensor(l->name(), "bias", {c}, v[2]);
  std::vector<float> stats = v[3];
  stats.insert(stats.end(), v[4].begin(), v[4].end());
  AddTensor(l->name(), "running_stats", {2, c}, stats);
  SetOut(n, 0, *l, shape, true);
  return absl::OkStatus();
}

// Opset 17's LayerNormalization over the last axis, with Lockstep's
// epsilon, is one LAYER_NORM layer (the decomposition of earlier opsets
// maps op by op).
absl::Status Importer::MapLayerNorm(const onnx::NodeProto& n) {
  absl::StatusOr<Value*> x = In(n, 0);
  if (!x.ok()) return x.status();
  if (!(*x)->batched || (*x)->shape.size() < 2) {
    return NodeError(n, "input must be batched [N, ..., D]");
  }
  const int rank = (*x)->shape.size();
  absl::StatusOr<int> axis = Axis(n, AttrInt(n, "axis", -1), rank, "axis");
  if (!axis.ok()) return axis.status();
  if (*axis != rank - 1) {
    return NodeError(n, absl::StrFormat("axis %d: only the last axis (%d) is "
                                        "supported",
                                        AttrInt(n, "axis", -1), rank - 1));
  }
  const float eps = AttrFloat(n, "epsilon", 1e-5f);
  if (eps != 1e-5f) {
    return NodeError(n, absl::StrFormat("epsilon %g: Lockstep's LAYER_NORM "
                                        "uses 1e-5",
                                        eps));
  }
  if (AttrInt(n, "stash_type", 1) != 1) {
    return NodeError(n, "stash_type other than 1 (float) is not supported");
  }
  for (int o = 1; o < n.output_size(); ++o) {
    if (!n.output(o).empty() && consumed_outputs_.count(n.output(o))) {
      return NodeError(n,
                       "the Mean and InvStdDev outputs cannot be read by "
                       "other nodes");
    }
  }
  const int64_t d = (*x)->shape.back();
  std::vector<float> w(d, 1.0f), b(d, 0.0f);
  static constexpr const char* kRoles[] = {"", "Scale", "B"};
  for (int i = 1; i <= 2; ++i) {
    if (!HasIn(n, i)) {
      if (i == 1) return NodeError(n, "Scale (input 1) is missing");
      continue;
    }
    if (init_uses_[n.input(i)] != 1) {
      return NodeError(n, absl::StrFormat("%s (input %d) must be an "
                                          "initializer used by this node "
                                          "only",
                                          kRoles[i], i));
    }
    absl::StatusOr<std::vector<float>> f = OwnedFloats(n, i, kRoles[i]);
    if (!f.ok()) return f.status();
    if (static_cast<int64_t>(f->size()) != d) {
      return NodeError(n, absl::StrFormat("%s has %d values, not %d", kRoles[i],
                                          f->size(), d));
    }
    (i == 1 ? w : b) = *f;
  }
  const std::string xl = (*x)->layer;
  const std::vector<int64_t> shape = (*x)->shape;
  v1::Layer* l = NewLayer(n, "", v1::LAYER_NORM);
  l->add_inputs(xl);
  AddTensor(l->name(), "weight", {d}, w);
  AddTensor(l->name(), "bias", {d}, b);
  SetOut(n, 0, *l, shape, true);
  return absl::OkStatus();
}

absl::Status Importer::MapDropout(const onnx::NodeProto& n) {
  absl::StatusOr<Value*> x = In(n, 0);
  if (!x.ok()) return x.status();
  double ratio = AttrFloat(n, "ratio", 0.5f);
  bool training = Opset() < 7;  // before opset 7 an is_test attribute
  if (Opset() < 7) training = AttrInt(n, "is_test", 0) == 0;
  if (Opset() >= 12) {
    ratio = 0.5;
    if (HasIn(n, 1)) {
      absl::StatusOr<Known> r = KnownIn(n, 1, "ratio");
      if (!r.ok()) return r.status();
      if (r->v.size() != 1) return NodeError(n, "ratio must be a scalar");
      ratio = r->v[0];
    }
    training = false;
    if (HasIn(n, 2)) {
      absl::StatusOr<Known> t = KnownIn(n, 2, "training_mode");
      if (!t.ok()) return t.status();
      if (t->v.size() != 1) {
        return NodeError(n, "training_mode must be a scalar");
      }
      training = t->v[0] != 0;
    }
  } else if (Opset() >= 7) {
    // Opset 7..11 Dropout is an identity in inference; exporters write it
    // only for training graphs.
    training = true;
  }
  if (n.output_size() > 1 && !n.output(1).empty() &&
      consumed_outputs_.count(n.output(1))) {
    return NodeError(n, "the mask output cannot be read by other nodes");
  }
  if (!(ratio >= 0 && ratio < 1)) {
    return NodeError(n, absl::StrFormat("ratio %g is outside [0, 1)", ratio));
  }
  if (!training || ratio == 0) {
    warnings_.push_back(absl::StrFormat(
        "%s: not in training mode, imported as an identity", NodeLabel(n)));
    return MapSimple(n, v1::UNARY);
  }
  absl::StatusOr<std::string> xl = AsLayer(n, *x);
  if (!xl.ok()) return xl.status();
  const std::vector<int64_t> shape = (*x)->shape;
  const bool batched = (*x)->batched;
  v1::Layer* l = NewLayer(n, "", v1::DROPOUT);
  l->add_inputs(*xl);
  l->mutable_dropout()->set_rate(static_cast<float>(ratio));
  SetOut(n, 0, *l, shape, batched);
  return absl::OkStatus();
}

absl::Status Importer::MapPool(const onnx::NodeProto& n) {
  absl::StatusOr<Value*> x = In(n, 0);
  if (!x.ok()) return x.status();
  if (!(*x)->batched || (*x)->shape.size() != 4) {
    return NodeError(n, "input must be a batched NCHW tensor");
  }
  const bool max = n.op_type() == "MaxPool";
  std::vector<int64_t> k = AttrInts(n, "kernel_shape");
  std::vector<int64_t> s = AttrInts(n, "strides");
  std::vector<int64_t> p = AttrInts(n, "pads");
  std::vector<int64_t> d = AttrInts(n, "dilations");
  if (s.empty()) s = {1, 1};
  if (p.empty()) p = {0, 0, 0, 0};
  if (k.size() != 2 || s.size() != 2 || p.size() != 4) {
    return NodeError(n, "kernel_shape, strides and pads must be 2-D");
  }
  for (int j = 0; j < 2; ++j) {
    if (k[j] < 1 || s[j] < 1 || p[j] < 0 || p[j + 2] < 0 || k[j] > kMaxDim ||
        s[j] > kMaxDim || p[j] > kMaxDim || p[j + 2] > kMaxDim) {
      return NodeError(n, absl::StrFormat("kernel_shape and strides must be "
                                          "in 1..%d, pads in 0..%d",
                                          kMaxDim, kMaxDim));
    }
  }
  for (int64_t v : d) {
    if (v != 1)
      return NodeError(n,
                       "dilations other than 1 are not "
                       "supported");
  }
  if (AttrInt(n, "ceil_mode", 0) != 0) {
    return NodeError(n, "ceil_mode 1 is not supported");
  }
  if (Attr(n, "auto_pad") != nullptr && Attr(n, "auto_pad")->s() != "NOTSET" &&
      Attr(n, "auto_pad")->s() != "VALID") {
    return NodeError(n, "auto_pad SAME_* is not supported");
  }
  if (max && n.output_size() > 1 && consumed_outputs_.count(n.output(1))) {
    return NodeError(n, "the Indices output is not supported");
  }
  if (p[0] != p[2] || p[1] != p[3]) {
    return NodeError(n, "pads: only symmetric padding is supported");
  }
  if (!max && (p[0] != 0 || p[1] != 0) &&
      AttrInt(n, "count_include_pad", 0) == 0) {
    return NodeError(n,
                     "padding with count_include_pad 0 is not supported "
                     "(Lockstep's average pooling divides by the whole "
                     "window)");
  }
  const std::vector<int64_t> in = (*x)->shape;
  if (in[2] + 2 * p[0] < k[0] || in[3] + 2 * p[1] < k[1]) {
    return NodeError(n, "the window is larger than the padded input");
  }
  const int64_t oh = (in[2] + 2 * p[0] - k[0]) / s[0] + 1;
  const int64_t ow = (in[3] + 2 * p[1] - k[1]) / s[1] + 1;
  const std::string xl = (*x)->layer;
  v1::Layer* l = NewLayer(n, "", max ? v1::MAX_POOL2D : v1::AVG_POOL2D);
  l->add_inputs(xl);
  auto* pp = l->mutable_pool();
  pp->set_kernel_h(k[0]);
  pp->set_kernel_w(k[1]);
  pp->set_stride_h(s[0]);
  pp->set_stride_w(s[1]);
  pp->set_pad_h(p[0]);
  pp->set_pad_w(p[1]);
  SetOut(n, 0, *l, {kBatchDim, in[1], oh, ow}, true);
  return absl::OkStatus();
}

// ONNX GlobalAveragePool keeps [N, C, 1, 1]; Lockstep's gives [N, C], so a
// RESHAPE restores the two unit axes.
absl::Status Importer::MapGlobalAvgPool(const onnx::NodeProto& n) {
  absl::StatusOr<Value*> x = In(n, 0);
  if (!x.ok()) return x.status();
  if (!(*x)->batched || (*x)->shape.size() != 4) {
    return NodeError(n, "input must be a batched NCHW tensor");
  }
  const int64_t c = (*x)->shape[1];
  const std::string xl = (*x)->layer;
  v1::Layer* g = NewLayer(n, "", v1::GLOBAL_AVG_POOL);
  g->add_inputs(xl);
  const std::string gl = g->name();
  v1::Layer* r = NewLayer(n, "keepdims", v1::RESHAPE);
  r->add_inputs(gl);
  r->mutable_reshape()->add_shape(c);
  r->mutable_reshape()->add_shape(1);
  r->mutable_reshape()->add_shape(1);
  SetOut(n, 0, *r, {kBatchDim, c, 1, 1}, true);
  return absl::OkStatus();
}

absl::Status Importer::MapNode(const onnx::NodeProto& n) {
  const std::string& t = n.op_type();
  if (t == "Conv") return MapConv(n);
  if (t == "ConvTranspose") return MapConvTranspose(n);
  if (t == "Gemm") return MapGemm(n);
  if (t == "MatMul") return MapMatMul(n);
  if (t == "Add" || t == "Sub" || t == "Mul" || t == "Div" || t == "Pow" ||
      t == "Max" || t == "Min") {
    return MapElementwise(n, v1::BINARY, 2);
  }
  if (t == "Equal" || t == "Less" || t == "LessOrEqual" || t == "Greater" ||
      t == "GreaterOrEqual") {
    return MapElementwise(n, v1::COMPARE, 2);
  }
  if (t == "Where") return MapElementwise(n, v1::WHERE, 3);
  if (t == "Identity") {
    // No layer: the output names the input's value (so a GATHER behind it
    // still reads the model's token ids, and a known value stays known).
    absl::StatusOr<Value*> x = In(n, 0);
    if (!x.ok()) return x.status();
    const Value v = **x;
    values_[n.output(0)] = v;
    return absl::OkStatus();
  }
  if (t == "Neg" || t == "Abs" || t == "Sqrt" || t == "Reciprocal" ||
      t == "Exp" || t == "Log" || t == "Erf") {
    return MapSimple(n, v1::UNARY);
  }
  if (t == "Cast") return MapCast(n);
  if (t == "Relu") return MapSimple(n, v1::RELU);
  if (t == "Sigmoid") return MapSimple(n, v1::SIGMOID);
  if (t == "Tanh") return MapSimple(n, v1::TANH);
  if (t == "Softmax") return MapSoftmax(n);
  if (t == "ReduceMean" || t == "ReduceSum") return MapReduce(n);
  if (t == "Gather") return MapGather(n);
  if (t == "Concat") return MapConcat(n);
  if (t == "Split") return MapSplit(n);
  if (t == "Slice") return MapSlice(n);
  if (t == "Reshape" || t == "Flatten" || t == "Squeeze" || t == "Unsqueeze") {
    return MapReshapeLike(n);
  }
  if (t == "Transpose") return MapTranspose(n);
  if (t == "BatchNormalization") return MapBatchNorm(n);
  if (t == "LayerNormalization") return MapLayerNorm(n);
  if (t == "Dropout") return MapDropout(n);
  if (t == "MaxPool" || t == "AveragePool") return MapPool(n);
  if (t == "GlobalAveragePool") return MapGlobalAvgPool(n);
  return NodeError(n, "internal: no mapping");
}

// Ops the importer maps (as layers or folded at import time).
const std::set<std::string>& SupportedOps() {
  static const std::set<std::string> kOps = {"Abs",
                                             "Add",
                                             "AveragePool",
                                             "BatchNormalization",
                                             "Cast",
                                             "Concat",
                                             "Constant",
                                             "ConstantOfShape",
                                             "Conv",
                                             "ConvTranspose",
                                             "Div",
                                             "Dropout",
                                             "Equal",
                                             "Erf",
                                             "Exp",
                                             "Flatten",
                                             "Gather",
                                             "Gemm",
                                             "GlobalAveragePool",
                                             "Greater",
                                             "GreaterOrEqual",
                                             "Identity",
                                             "LayerNormalization",
                                             "Less",
                                             "LessOrEqual",
                                             "Log",
                                             "MatMul",
                                             "Max",
                                             "MaxPool",
                                             "Min",
                                             "Mul",
                                             "Neg",
                                             "Not",
                                             "Pow",
                                             "Range",
                                             "Reciprocal",
                                             "ReduceMean",
                                             "ReduceSum",
                                             "Relu",
                                             "Reshape",
                                             "Shape",
                                             "Sigmoid",
                                             "Slice",
                                             "Softmax",
                                             "Split",
                                             "Sqrt",
                                             "Squeeze",
                                             "Sub",
                                             "Tanh",
                                             "Transpose",
                                             "Unsqueeze",
                                             "Where"};
  return kOps;
}

// Ops that are only ever folded (their inputs must be known).
bool FoldOnly(const std::string& t) {
  return t == "Constant" || t == "Shape" || t == "ConstantOfShape" ||
         t == "Range" || t == "Not";
}

// Inputs through which a gradient flows (for deciding which initializers
// are trainable parameters).
bool Differentiable(const std::string& t, int input) {
  if (t == "Shape" || t == "Equal" || t == "Less" || t == "LessOrEqual" ||
      t == "Greater" || t == "GreaterOrEqual" || t == "Not" ||
      t == "ConstantOfShape" || t == "Range") {
    return false;
  }
  if (t == "Where") return input == 1 || input == 2;
  if (t == "Gather" || t == "Reshape" || t == "Slice" || t == "Squeeze" ||
      t == "Unsqueeze" || t == "Split" || t == "Dropout" || t == "Cast" ||
      t == "Flatten" || t == "Transpose") {
    return input == 0;
  }
  if (t == "BatchNormalization" || t == "LayerNormalization") {
    return input <= 2;
  }
  return true;
}

// torch.onnx.export with constant folding writes a weight tied to another
// one as a transposed copy. The file no longer says they are one tensor;
// say what it looks like.
void Importer::WarnTransposedCopies() {
  std::vector<const Value*> mats;
  for (const auto& [name, t] : inits_) {
    const Value& v = values_[name];
    if (!v.parameter || v.k.dims.size() != 2) continue;
    bool distinct = false;
    for (double x : v.k.v) distinct = distinct || x != v.k.v[0];
    if (distinct) mats.push_back(&v);
  }
  for (const Value* a : mats) {
    for (const Value* b : mats) {
      if (a == b || a->k.dims[0] != b->k.dims[1] ||
          a->k.dims[1] != b->k.dims[0] || a->init_name > b->init_name) {
        continue;
      }
      const int64_t rows = a->k.dims[0], cols = a->k.dims[1];
      bool same = true;
      for (int64_t i = 0; i < rows && same; ++i) {
        for (int64_t j = 0; j < cols && same; ++j) {
          same = a->k.v[i * cols + j] == b->k.v[j * rows + i];
        }
      }
      if (same) {
        warnings_.push_back(absl::StrFormat(
            "initializers \"%s\" and \"%s\" are transposes of each other "
            "(tied in PyTorch? constant folding wrote a copy): they are "
            "imported as two parameters, trained separately",
            a->init_name, b->init_name));
      }
    }
  }
}

absl::StatusOr<ImportedModel> Importer::Run() {
  for (const auto& os : m_.opset_import()) {
    if (os.domain().empty() || os.domain() == "ai.onnx") opset_ = os.version();
  }
  if (opset_ == 0) {
    return absl::InvalidArgumentError(
        "onnx: the model imports no default-domain (ai.onnx) opset");
  }
  if (opset_ < kMinOpset || opset_ > kMaxOpset) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "onnx: opset_import: ai.onnx opset %d is outside the supported "
        "%d..%d (export with opset_version=14)",
        opset_, kMinOpset, kMaxOpset));
  }
  if (g_.node_size() > options_.max_nodes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("onnx: graph.node: %d nodes exceed the limit of %d",
                        g_.node_size(), options_.max_nodes));
  }
  // Unsupported nodes: all of them in one error.
  std::vector<std::string> unsupported;
  for (int i = 0; i < g_.node_size(); ++i) {
    const onnx::NodeProto& n = g_.node(i);
    const bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    int64_t version = opset_;
    if (!default_domain) {
      version = 0;
      for (const auto& os : m_.opset_import()) {
        if (os.domain() == n.domain()) version = os.version();
      }
    }
    if (!default_domain || !SupportedOps().count(n.op_type())) {
      unsupported.push_back(absl::StrFormat(
          "  \"%s\" (%s%s, opset %d)",
          n.name().empty() ? absl::StrCat("node ", i) : n.name(), n.op_type(),
          default_domain ? "" : absl::StrCat(", domain ", n.domain()),
          version));
    }
  }
  if (!unsupported.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "onnx: %d unsupported node%s (docs/bring-your-own-model.md lists the "
        "supported ops):\n%s",
        unsupported.size(), unsupported.size() == 1 ? "" : "s",
        absl::StrJoin(unsupported, "\n")));
  }

  // Initializers.
  int64_t init_bytes = 0;
  for (const auto& t : g_.initializer()) {
    init_bytes += t.ByteSizeLong();
    if (init_bytes > options_.max_initializer_bytes) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "onnx: graph.initializer: more than the limit of %d bytes",
          options_.max_initializer_bytes));
    }
    inits_[t.name()] = &t;
  }
  for (const auto& n : g_.node()) {
    for (const std::string& in : n.input()) {
      if (inits_.count(in)) ++init_uses_[in];
      consumed_outputs_.insert(in);
    }
  }
  // The model input: the one graph input that is not an initializer.
  const onnx::ValueInfoProto* input = nullptr;
  for (const auto& vi : g_.input()) {
    if (inits_.count(vi.name())) continue;
    if (input != nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "onnx: graph.input: the model must have one input, found \"%s\" "
          "and \"%s\"",
          input->name(), vi.name()));
    }
    input = &vi;
  }
  if (input == nullptr) {
    return absl::InvalidArgumentError("onnx: graph.input: no model input");
  }
  if (g_.output_size() != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "onnx: graph.output: the model must have one output (the logits), "
        "found %d",
        g_.output_size()));
  }
  const auto& tt = input->type().tensor_type();
  const int elem = tt.elem_type();
  const bool tokens =
      elem == onnx::TensorProto::INT64 || elem == onnx::TensorProto::INT32;
  if (!tokens && elem != onnx::TensorProto::FLOAT) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "onnx: input \"%s\": element type %s is not supported (float for "
        "features and images, int64 or int32 for token ids)",
        input->name(),
        onnx::TensorProto::DataType_Name(static_cast<int>(elem))));
  }
  if (tt.shape().dim_size() < 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "onnx: input \"%s\": needs a batch dimension and at least one more",
        input->name()));
  }
  Value in;
  in.layer = kInputRef;
  in.batched = true;
  in.shape.push_back(kBatchDim);
  for (int j = 0; j < tt.shape().dim_size(); ++j) {
    const auto& d = tt.shape().dim(j);
    if (j == 0) {
      if (d.has_dim_value()) fixed_batch_ = d.dim_value();
      continue;
    }
    if (!d.has_dim_value() || d.dim_value() < 1 || d.dim_value() > kMaxDim) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "onnx: input \"%s\": dimension %d must be fixed, in 1..%d (only "
          "the batch dimension, 0, may be symbolic)",
          input->name(), j, kMaxDim));
    }
    in.shape.push_back(d.dim_value());
    model_.add_input_shape(d.dim_value());
  }
  if (tokens && in.shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "onnx: input \"%s\": token ids must be [N, T], got %d dimensions",
        input->name(), in.shape.size()));
  }
  values_[input->name()] = in;

  // Which initializers are parameters: those a gradient reaches, i.e. with
  // a differentiable path to the output.
  std::set<std::string> live = {g_.output(0).name()};
  for (int i = g_.node_size() - 1; i >= 0; --i) {
    const onnx::NodeProto& n = g_.node(i);
    bool any = false;
    for (const std::string& o : n.output()) any = any || live.count(o);
    if (!any) continue;
    for (int j = 0; j < n.input_size(); ++j) {
      if (Differentiable(n.op_type(), j)) live.insert(n.input(j));
    }
  }
  // Nodes the output depends on at all (others are dead and skipped).
  std::set<std::string> needed = {g_.output(0).name()};
  std::vector<bool> node_needed(g_.node_size(), false);
  for (int i = g_.node_size() - 1; i >= 0; --i) {
    const onnx::NodeProto& n = g_.node(i);
    for (const std::string& o : n.output()) {
      if (needed.count(o)) node_needed[i] = true;
    }
    if (node_needed[i]) {
      for (const std::string& x : n.input()) needed.insert(x);
    }
  }
  for (const auto& [name, t] : inits_) {
    absl::StatusOr<Known> k =
        ToKnown(*t, absl::StrCat("initializer \"", name, "\""));
    if (!k.ok()) return k.status();
    Value v;
    v.known = true;
    v.k = *std::move(k);
    v.origin = name;
    v.init_name = name;
    v.parameter = v.k.is_float && live.count(name) > 0;
    values_[name] = std::move(v);
  }
  WarnTransposedCopies();

  for (int i = 0; i < g_.node_size(); ++i) {
    node_index_ = i;
    const onnx::NodeProto& n = g_.node(i);
    if (!node_needed[i]) {
      warnings_.push_back(absl::StrFormat(
          "%s: its outputs do not reach the model output; skipped",
          NodeLabel(n)));
      continue;
    }
    bool folded = false;
    absl::Status s = Fold(n, &folded);
    if (!s.ok()) return s;
    if (folded) continue;
    if (FoldOnly(n.op_type())) {
      return NodeError(n,
                       "its inputs must be constants (initializers, "
                       "Constant nodes or shapes)");
    }
    s = MapNode(n);
    if (!s.ok()) return s;
    if (!shape_error_.ok()) return shape_error_;
  }

  // The logits and the loss.
  auto out_it = values_.find(g_.output(0).name());
  if (out_it == values_.end() || out_it->second.layer.empty() ||
      !out_it->second.batched) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "onnx: graph.output \"%s\" must be a batched tensor computed from "
        "the input",
        g_.output(0).name()));
  }
  const Value& logits = out_it->second;
  if (logits.layer == kInputRef) {
    return absl::InvalidArgumentError(
        "onnx: graph.output: the output is the input itself");
  }
  model_.set_num_classes(logits.shape.back());
  v1::Layer* loss = model_.add_layers();
  loss->set_name(UniqueName("loss"));
  loss->set_op(v1::SOFTMAX_XENT);
  loss->add_inputs(logits.layer);
  loss->set_origin(
      Printable(absl::StrFormat("%s (Lockstep loss)", g_.output(0).name())));

  // The model input: a single one-input reader becomes the first layer
  // (which reads the input implicitly, as hand-written models do); every
  // other reader names it "<input>" (model::kModelInputName), so a GATHER of
  // token ids reads the ids themselves.
  std::vector<int> readers;
  for (int i = 0; i < model_.layers_size(); ++i) {
    for (const std::string& s : model_.layers(i).inputs()) {
      if (s == kInputRef) {
        readers.push_back(i);
        break;
      }
    }
  }
  if (readers.empty()) {
    return absl::InvalidArgumentError(
        "onnx: the output does not depend on the model input");
  }
  const v1::Layer& r0 = model_.layers(readers[0]);
  if (readers.size() == 1 && r0.inputs_size() == 1) {
    v1::Layer moved = r0;
    moved.clear_inputs();
    auto* layers = model_.mutable_layers();
    for (int i = readers[0]; i > 0; --i) layers->SwapElements(i, i - 1);
    *layers->Mutable(0) = moved;
  } else {
    for (auto& l : *model_.mutable_layers()) {
      for (std::string& s : *l.mutable_inputs()) {
        if (s == kInputRef) s = kModelInputName;
      }
    }
  }

  model_.set_name(Printable(!options_.model_name.empty() ? options_.model_name
                            : !g_.name().empty()         ? g_.name()
                                                         : "onnx_model"));
  ImportedModel out;
  out.parameters_bytes = SerializeParameterSet(params_);
  model_.set_parameters_digest(ParametersDigest(out.parameters_bytes));
  out.model = std::move(model_);
  out.parameters = std::move(params_);
  out.warnings = std::move(warnings_);
  return out;
}

}  // namespace

absl::StatusOr<ImportedModel> ImportOnnx(absl::string_view onnx_bytes,
                                         const OnnxImportOptions& options) {
  if (static_cast<int64_t>(onnx_bytes.size()) > options.max_file_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "onnx: the file is %d bytes, over the limit of %d bytes",
        onnx_bytes.size(), options.max_file_bytes));
  }
  onnx::ModelProto m;
  google::protobuf::io::ArrayInputStream raw(onnx_bytes.data(),
                                             onnx_bytes.size());
  google::protobuf::io::CodedInputStream coded(&raw);
  coded.SetTotalBytesLimit(
      static_cast<int>(std::min<int64_t>(onnx_bytes.size() + 1, INT32_MAX)));
  if (!m.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage()) {
    return absl::InvalidArgumentError(
        "onnx: the file is not an ONNX model (ModelProto does not parse)");
  }
  if (!m.has_graph()) {
    return absl::InvalidArgumentError("onnx: the model has no graph");
  }
  Importer importer(m, options);
  return importer.Run();
}

std::string SerializeParameterSet(const v1::ParameterSet& parameters) {
  std::string bytes;
  google::protobuf::io::StringOutputStream raw(&bytes);
  {
    google::protobuf::io::CodedOutputStream coded(&raw);
    coded.SetSerializationDeterministic(true);
    parameters.SerializeToCodedStream(&coded);
  }
  return bytes;
}

std::string ParametersDigest(absl::string_view parameters_bytes) {
  return absl::StrCat("sha256:", Sha256Hex(parameters_bytes));
}

std::string FormatImportSummary(const ImportedModel& imported) {
  std::map<std::string, int> per_op;
  for (const auto& l : imported.model.layers()) {
    ++per_op[v1::LayerOp_Name(l.op())];
  }
  int64_t elements = 0;
  for (const auto& t : imported.parameters.tensors()) {
    elements += static_cast<int64_t>(t.data().size()) / 4;
  }
  std::string s = absl::StrFormat(
      "model %s: input [N, %s], %d classes, %d layers\n", imported.model.name(),
      absl::StrJoin(imported.model.input_shape(), ", "),
      imported.model.num_classes(), imported.model.layers_size());
  for (const auto& [op, count] : per_op) {
    absl::StrAppendFormat(&s, "  %-16s %d\n", op, count);
  }
  absl::StrAppendFormat(
      &s, "parameters: %d tensors, %d elements (%d bytes), %s\n",
      imported.parameters.tensors_size(), elements,
      imported.parameters_bytes.size(), imported.model.parameters_digest());
  absl::StrAppendFormat(&s, "unsupported nodes: none\n");
  for (const std::string& w : imported.warnings) {
    absl::StrAppendFormat(&s, "warning: %s\n", w);
  }
  return s;
}

}  // namespace lockstep::client
