#include "kernels/ops/validate.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace lockstep::kernels {
namespace {

absl::Status Invalid(absl::string_view op, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what));
}

absl::Status CheckFloatRank(absl::string_view op, const Tensor& t,
                            absl::string_view name, int rank) {
  if (t.dtype() != DType::kFloat32) {
    return Invalid(op, absl::StrFormat("%s must be float32, got %s", name,
                                       t.DebugString()));
  }
  if (rank >= 0 && t.rank() != rank) {
    return Invalid(op, absl::StrFormat("%s must have rank %d, got %s", name,
                                       rank, t.DebugString()));
  }
  return absl::OkStatus();
}

absl::Status ExpectShape(absl::string_view op, const Tensor& t,
                         const std::vector<int64_t>& shape,
                         absl::string_view name) {
  if (t.shape() == shape) return absl::OkStatus();
  return Invalid(op,
                 absl::StrFormat("%s has shape %s, expected %s", name,
                                 ShapeString(t.shape()), ShapeString(shape)));
}

// Logical [rows, cols] of a stored rank-2 tensor, transposed or not.
struct Logical {
  int64_t rows, cols;
};
Logical LogicalOf(const Tensor& t, bool transpose) {
  return transpose ? Logical{t.dim(1), t.dim(0)} : Logical{t.dim(0), t.dim(1)};
}
std::vector<int64_t> Stored(int64_t rows, int64_t cols, bool transpose) {
  return transpose ? std::vector<int64_t>{cols, rows}
                   : std::vector<int64_t>{rows, cols};
}

}  // namespace

absl::Status CheckArity(absl::string_view op, absl::Span<const Tensor> inputs,
                        size_t num_inputs, absl::Span<Tensor> outputs,
                        size_t num_outputs) {
  if (inputs.size() == num_inputs && outputs.size() == num_outputs) {
    return absl::OkStatus();
  }
  return Invalid(
      op,
      absl::StrFormat("expected %d inputs and %d outputs, got %d and %d",
                      num_inputs, num_outputs, inputs.size(), outputs.size()));
}

absl::StatusOr<canonical::DenseShape> ValidateDenseForward(
    const Tensor& x, const Tensor& w, const Tensor& y, const OpAttrs& attrs) {
  constexpr absl::string_view op = "dense.forward";
  for (auto [t, name] :
       {std::pair<const Tensor*, const char*>{&x, "x"}, {&w, "w"}, {&y, "y"}}) {
    if (auto s = CheckFloatRank(op, *t, name, 2); !s.ok()) return s;
  }
  const Logical lx = LogicalOf(x, attrs.transpose_x);
  const Logical lw = LogicalOf(w, attrs.transpose_w);
  if (lx.cols != lw.rows) {
    return Invalid(op,
                   absl::StrFormat("inner dimensions differ: op(x) is [%d, %d] "
                                   "(x %s, transpose_x=%d), op(w) is [%d, %d] "
                                   "(w %s, transpose_w=%d)",
                                   lx.rows, lx.cols, ShapeString(x.shape()),
                                   attrs.transpose_x, lw.rows, lw.cols,
                                   ShapeString(w.shape()), attrs.transpose_w));
  }
  if (auto s = ExpectShape(op, y, {lx.rows, lw.cols}, "y"); !s.ok()) return s;
  return canonical::DenseShape{lx.rows, lx.cols, lw.cols, attrs.transpose_x,
                               attrs.transpose_w};
}

absl::StatusOr<canonical::DenseShape> ValidateDenseGradInput(
    const Tensor& dy, const Tensor& w, const Tensor& dx, const OpAttrs& attrs) {
  constexpr absl::string_view op = "dense.grad_input";
  for (auto [t, name] : {std::pair<const Tensor*, const char*>{&dy, "dy"},
                         {&w, "w"},
                         {&dx, "dx"}}) {
    if (auto s = CheckFloatRank(op, *t, name, 2); !s.ok()) return s;
  }
  const Logical lw = LogicalOf(w, attrs.transpose_w);  // [K, N]
  const int64_t m = dy.dim(0);
  if (dy.dim(1) != lw.cols) {
    return Invalid(op, absl::StrFormat(
                           "dy has shape %s but op(w) is [%d, %d] (w %s, "
                           "transpose_w=%d): dy's columns must equal N = %d",
                           ShapeString(dy.shape()), lw.rows, lw.cols,
                           ShapeString(w.shape()), attrs.transpose_w, lw.cols));
  }
  if (auto s = ExpectShape(op, dx, Stored(m, lw.rows, attrs.transpose_x), "dx");
      !s.ok()) {
    return s;
  }
  return canonical::DenseShape{m, lw.rows, lw.cols, attrs.transpose_x,
                               attrs.transpose_w};
}

absl::StatusOr<canonical::DenseShape> ValidateDenseGradWeight(
    const Tensor& x, const Tensor& dy, const Tensor& dw, const OpAttrs& attrs) {
  constexpr absl::string_view op = "dense.grad_weight";
  for (auto [t, name] : {std::pair<const Tensor*, const char*>{&x, "x"},
                         {&dy, "dy"},
                         {&dw, "dw"}}) {
    if (auto s = CheckFloatRank(op, *t, name, 2); !s.ok()) return s;
  }
  const Logical lx = LogicalOf(x, attrs.transpose_x);  // [M, K]
  if (dy.dim(0) != lx.rows) {
    return Invalid(op, absl::StrFormat(
                           "dy has shape %s but op(x) is [%d, %d] (x %s, "
                           "transpose_x=%d): dy's rows must equal M = %d",
                           ShapeString(dy.shape()), lx.rows, lx.cols,
                           ShapeString(x.shape()), attrs.transpose_x, lx.rows));
  }
  const int64_t n = dy.dim(1);
  if (auto s = ExpectShape(op, dw, Stored(lx.cols, n, attrs.transpose_w), "dw");
      !s.ok()) {
    return s;
  }
  return canonical::DenseShape{lx.rows, lx.cols, n, attrs.transpose_x,
                               attrs.transpose_w};
}

namespace {
absl::StatusOr<canonical::BiasShape> BiasShapeOf(absl::string_view op,
                                                 const Tensor& x,
                                                 absl::string_view name) {
  if (auto s = CheckFloatRank(op, x, name, -1); !s.ok()) return s;
  if (x.rank() < 2) {
    return Invalid(op, absl::StrFormat("%s must have rank >= 2 ([N, C, ...]), "
                                       "got %s",
                                       name, x.DebugString()));
  }
  canonical::BiasShape s;
  s.n = x.dim(0);
  s.c = x.dim(1);
  s.spatial = 1;
  for (int i = 2; i < x.rank(); ++i) s.spatial *= x.dim(i);
  return s;
}
}  // namespace

absl::StatusOr<canonical::BiasShape> ValidateBiasAdd(const Tensor& x,
                                                     const Tensor& b,
                                                     const Tensor& y) {
  constexpr absl::string_view op = "bias_add.forward";
  absl::StatusOr<canonical::BiasShape> s = BiasShapeOf(op, x, "x");
  if (!s.ok()) return s.status();
  if (auto st = CheckFloatRank(op, b, "b", 1); !st.ok()) return st;
  if (auto st = ExpectShape(op, b, {s->c}, "b"); !st.ok()) return st;
  if (auto st = CheckFloatRank(op, y, "y", -1); !st.ok()) return st;
  if (auto st = ExpectShape(op, y, x.shape(), "y"); !st.ok()) return st;
  return s;
}

absl::StatusOr<canonical::BiasShape> ValidateBiasAddGrad(const Tensor& dy,
                                                         const Tensor& db) {
  constexpr absl::string_view op = "bias_add.grad";
  absl::StatusOr<canonical::BiasShape> s = BiasShapeOf(op, dy, "dy");
  if (!s.ok()) return s.status();
  if (auto st = CheckFloatRank(op, db, "db", 1); !st.ok()) return st;
  if (auto st = ExpectShape(op, db, {s->c}, "db"); !st.ok()) return st;
  return s;
}

absl::Status ValidateSameShapeFloat(absl::string_view op,
                                    absl::Span<const Tensor* const> tensors,
                                    absl::Span<const absl::string_view> names) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (auto s = CheckFloatRank(op, *tensors[i], names[i], -1); !s.ok()) {
      return s;
    }
    if (i > 0 && tensors[i]->shape() != tensors[0]->shape()) {
      return Invalid(
          op, absl::StrFormat("%s has shape %s, expected %s (the "
                              "shape of %s)",
                              names[i], ShapeString(tensors[i]->shape()),
                              ShapeString(tensors[0]->shape()), names[0]));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateFlatten(const Tensor& x, const Tensor& y) {
  constexpr absl::string_view op = "flatten";
  if (x.dtype() != y.dtype()) {
    return Invalid(op, absl::StrFormat("y is %s but x is %s (dtypes differ)",
                                       y.DebugString(), x.DebugString()));
  }
  if (x.numel() != y.numel() || x.rank() < 1 || y.rank() < 1 ||
      x.dim(0) != y.dim(0)) {
    return Invalid(
        op, absl::StrFormat("y %s must have x's element count and leading "
                            "dimension (x is %s)",
                            y.DebugString(), x.DebugString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<canonical::SoftmaxShape> ValidateSoftmaxXent(
    absl::string_view op, const Tensor& logits, const Tensor& labels) {
  if (auto s = CheckFloatRank(op, logits, "logits", 2); !s.ok()) return s;
  const int64_t n = logits.dim(0);
  const int64_t c = logits.dim(1);
  if (n < 1 || n > canonical::kMaxSoftmaxBatch) {
    return Invalid(op, absl::StrFormat("logits %s: batch size %d must be in "
                                       "[1, %d]",
                                       logits.DebugString(), n,
                                       canonical::kMaxSoftmaxBatch));
  }
  if (c < 1) {
    return Invalid(op, absl::StrFormat("logits %s: need at least 1 class",
                                       logits.DebugString()));
  }
  if (labels.dtype() != DType::kInt32) {
    return Invalid(op, absl::StrFormat("labels must be int32, got %s",
                                       labels.DebugString()));
  }
  if (auto s = ExpectShape(op, labels, {n}, "labels"); !s.ok()) return s;
  const int32_t* lab = labels.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (lab[i] < 0 || lab[i] >= c) {
      return Invalid(op, absl::StrFormat("labels[%d] = %d is outside [0, %d) "
                                         "(the number of classes)",
                                         i, lab[i], c));
    }
  }
  return canonical::SoftmaxShape{n, c};
}

absl::Status ValidateOptimizer(absl::string_view op, const Tensor& g,
                               absl::Span<const Tensor> state,
                               absl::Span<const absl::string_view> state_names,
                               const OpAttrs& attrs) {
  if (auto s = CheckFloatRank(op, g, "g", -1); !s.ok()) return s;
  for (size_t i = 0; i < state.size(); ++i) {
    if (auto s = CheckFloatRank(op, state[i], state_names[i], -1); !s.ok()) {
      return s;
    }
    if (state[i].shape() != g.shape()) {
      return Invalid(
          op, absl::StrFormat("%s has shape %s, expected %s (the "
                              "shape of g)",
                              state_names[i], ShapeString(state[i].shape()),
                              ShapeString(g.shape())));
    }
    if (state[i].SharesStorageWith(g)) {
      return Invalid(op, absl::StrFormat("%s must not share storage with g",
                                         state_names[i]));
    }
    for (size_t j = 0; j < i; ++j) {
      if (state[i].SharesStorageWith(state[j])) {
        return Invalid(op, absl::StrFormat("%s must not share storage with %s",
                                           state_names[i], state_names[j]));
      }
    }
  }
  const float lr = attrs.learning_rate;
  if (!std::isfinite(lr) || lr < 0.0f) {
    return Invalid(op, absl::StrFormat("learning_rate is %g, must be finite "
                                       "and >= 0",
                                       lr));
  }
  if (op == op::kMomentumUpdate &&
      (!std::isfinite(attrs.momentum) || attrs.momentum < 0.0f)) {
    return Invalid(op, absl::StrFormat("momentum is %g, must be finite and "
                                       ">= 0",
                                       attrs.momentum));
  }
  if (op == op::kAdamWUpdate &&
      !(std::isfinite(attrs.weight_decay) && attrs.weight_decay >= 0.0f)) {
    return Invalid(op, absl::StrFormat("weight_decay is %g, must be finite "
                                       "and >= 0",
                                       attrs.weight_decay));
  }
  if (op == op::kAdamUpdate || op == op::kAdamWUpdate) {
    for (auto [v, name] : {std::pair<float, const char*>{attrs.beta1, "beta1"},
                           {attrs.beta2, "beta2"}}) {
      if (!(v >= 0.0f && v < 1.0f)) {
        return Invalid(op,
                       absl::StrFormat("%s is %g, must be in [0, 1)", name, v));
      }
    }
    if (!std::isfinite(attrs.epsilon) || attrs.epsilon <= 0.0f) {
      return Invalid(op, absl::StrFormat("epsilon is %g, must be finite and "
                                         "> 0",
                                         attrs.epsilon));
    }
    if (attrs.step < 1) {
      return Invalid(op, absl::StrFormat("step is %d, must be >= 1 (1-based)",
                                         attrs.step));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<canonical::RowShape> ValidateRows(
    absl::string_view op, const Tensor& x,
    absl::Span<const Tensor* const> like_x,
    absl::Span<const Tensor* const> vectors,
    absl::Span<const absl::string_view> names, const OpAttrs& attrs,
    bool uses_epsilon) {
  if (names.size() != 1 + like_x.size() + vectors.size()) {
    return absl::InternalError(absl::StrCat(op, ": wrong number of names"));
  }
  if (auto s = CheckFloatRank(op, x, names[0], -1); !s.ok()) return s;
  if (x.rank() < 1) {
    return Invalid(op, absl::StrFormat("%s must have rank >= 1, got %s",
                                       names[0], x.DebugString()));
  }
  const int64_t d = x.dim(x.rank() - 1);
  constexpr int64_t kMaxRow = int64_t{1} << 24;
  if (d < 1 || d > kMaxRow) {
    return Invalid(op, absl::StrFormat("%s: last dimension %d is outside "
                                       "1 .. %d",
                                       names[0], d, kMaxRow));
  }
  size_t k = 1;
  for (const Tensor* t : like_x) {
    if (auto s = CheckFloatRank(op, *t, names[k], -1); !s.ok()) return s;
    if (auto s = ExpectShape(op, *t, x.shape(), names[k]); !s.ok()) return s;
    ++k;
  }
  for (const Tensor* t : vectors) {
    if (auto s = CheckFloatRank(op, *t, names[k], 1); !s.ok()) return s;
    if (auto s = ExpectShape(op, *t, {d}, names[k]); !s.ok()) return s;
    ++k;
  }
  if (uses_epsilon &&
      !(std::isfinite(attrs.norm_epsilon) && attrs.norm_epsilon > 0.0f)) {
    return Invalid(op, absl::StrFormat("epsilon must be finite and > 0, got %g",
                                       attrs.norm_epsilon));
  }
  canonical::RowShape shape;
  shape.d = d;
  shape.rows = x.numel() / d;
  shape.epsilon = attrs.norm_epsilon;
  if (attrs.causal) {
    if (x.rank() < 2 || x.dim(x.rank() - 2) != d) {
      return Invalid(op, absl::StrFormat("causal: %s must be [.., T, T] (its "
                                         "last two dimensions equal), got %s",
                                         names[0], x.DebugString()));
    }
    shape.causal = true;
  }
  return shape;
}

absl::StatusOr<canonical::ChannelShape> ValidateBatchNorm(
    absl::string_view op, const Tensor& x,
    absl::Span<const Tensor* const> like_x,
    absl::Span<const Tensor* const> channel_vectors, const Tensor& running,
    absl::Span<const absl::string_view> names, const OpAttrs& attrs) {
  if (names.size() != 2 + like_x.size() + channel_vectors.size()) {
    return absl::InternalError(absl::StrCat(op, ": wrong number of names"));
  }
  if (auto s = CheckFloatRank(op, x, names[0], -1); !s.ok()) return s;
  if (x.rank() < 2) {
    return Invalid(op, absl::StrFormat("%s must be [N, C, ...] (rank >= 2), "
                                       "got %s",
                                       names[0], x.DebugString()));
  }
  canonical::ChannelShape shape;
  shape.n = x.dim(0);
  shape.c = x.dim(1);
  shape.spatial = shape.n * shape.c == 0 ? 0 : x.numel() / (shape.n * shape.c);
  size_t k = 1;
  for (const Tensor* t : like_x) {
    if (auto s = CheckFloatRank(op, *t, names[k], -1); !s.ok()) return s;
    if (auto s = ExpectShape(op, *t, x.shape(), names[k]); !s.ok()) return s;
    ++k;
  }
  for (const Tensor* t : channel_vectors) {
    if (auto s = CheckFloatRank(op, *t, names[k], 1); !s.ok()) return s;
    if (auto s = ExpectShape(op, *t, {shape.c}, names[k]); !s.ok()) return s;
    ++k;
  }
  if (auto s = CheckFloatRank(op, running, names[k], 2); !s.ok()) return s;
  if (auto s = ExpectShape(op, running, {2, shape.c}, names[k]); !s.ok()) {
    return s;
  }
  if (!(std::isfinite(attrs.norm_epsilon) && attrs.norm_epsilon > 0.0f)) {
    return Invalid(op, absl::StrFormat("epsilon must be finite and > 0, got %g",
                                       attrs.norm_epsilon));
  }
  if (!(attrs.batch_norm_momentum >= 0.0f &&
        attrs.batch_norm_momentum <= 1.0f)) {
    return Invalid(op, absl::StrFormat("momentum must be in [0, 1], got %g",
                                       attrs.batch_norm_momentum));
  }
  const int64_t m = shape.n * shape.spatial;
  constexpr int64_t kMaxChannelElements = int64_t{1} << 24;
  if (!attrs.batch_norm_eval && (m < 2 || m > kMaxChannelElements)) {
    return Invalid(op, absl::StrFormat("training needs 2 .. %d values per "
                                       "channel (N * spatial size), got %d",
                                       kMaxChannelElements, m));
  }
  shape.epsilon = attrs.norm_epsilon;
  shape.momentum = attrs.batch_norm_momentum;
  shape.eval = attrs.batch_norm_eval;
  return shape;
}

absl::Status ValidateSavedStats(absl::string_view op, const Tensor& saved,
                                int64_t count) {
  if (auto s = CheckFloatRank(op, saved, "saved", 2); !s.ok()) return s;
  return ExpectShape(op, saved, {2, count}, "saved");
}

absl::StatusOr<canonical::EmbeddingShape> ValidateEmbedding(
    absl::string_view op, const Tensor& ids, const Tensor& table,
    absl::string_view table_name, const Tensor& rows,
    absl::string_view rows_name) {
  if (ids.dtype() != DType::kInt32 || ids.rank() < 1) {
    return Invalid(op, absl::StrFormat("ids must be int32 of rank >= 1, got %s",
                                       ids.DebugString()));
  }
  if (auto s = CheckFloatRank(op, table, table_name, 2); !s.ok()) return s;
  const int64_t vocab = table.dim(0);
  const int64_t dim = table.dim(1);
  if (vocab < 1 || vocab > canonical::kMaxEmbeddingVocab || dim < 1) {
    return Invalid(op, absl::StrFormat("%s %s: need 1 .. %d rows and at least "
                                       "1 column",
                                       table_name, table.DebugString(),
                                       canonical::kMaxEmbeddingVocab));
  }
  std::vector<int64_t> rows_shape = ids.shape();
  rows_shape.push_back(dim);
  if (auto s = CheckFloatRank(op, rows, rows_name, -1); !s.ok()) return s;
  if (auto s = ExpectShape(op, rows, rows_shape, rows_name); !s.ok()) return s;
  const int32_t* id = ids.data<int32_t>();
  const int64_t positions = ids.numel();
  for (int64_t p = 0; p < positions; ++p) {
    if (id[p] < 0 || id[p] >= vocab) {
      return Invalid(op, absl::StrFormat("ids[%d] = %d is outside [0, %d) "
                                         "(the vocabulary size)",
                                         p, id[p], vocab));
    }
  }
  return canonical::EmbeddingShape{positions, vocab, dim};
}

absl::StatusOr<canonical::DropoutParams> ValidateDropout(
    absl::string_view op, absl::Span<const Tensor* const> tensors,
    absl::Span<const absl::string_view> names, const OpAttrs& attrs,
    bool forward) {
  LS_RETURN_IF_ERROR(ValidateSameShapeFloat(op, tensors, names));
  if (!forward) return canonical::DropoutParams{};
  const float rate = attrs.dropout_rate;
  if (!(rate >= 0.0f && rate < 1.0f)) {
    return Invalid(op,
                   absl::StrFormat("dropout_rate %g is outside [0, 1)", rate));
  }
  return canonical::DropoutParamsOf(rate, attrs.dropout_seed,
                                    attrs.dropout_stream);
}

absl::StatusOr<canonical::MatMulDims> ValidateMatMul(
    absl::string_view op, const Tensor& a, const Tensor& b, const Tensor& y,
    absl::string_view y_name, const Tensor* da, const Tensor* db,
    const OpAttrs& attrs) {
  for (auto [t, name] :
       {std::pair<const Tensor*, const char*>{&a, "a"}, {&b, "b"}}) {
    if (auto s = CheckFloatRank(op, *t, name, -1); !s.ok()) return s;
    if (t->rank() < 2) {
      return Invalid(op, absl::StrFormat("%s must have rank >= 2, got %s", name,
                                         t->DebugString()));
    }
  }
  if (a.rank() != b.rank()) {
    return Invalid(op, absl::StrFormat("a and b must have the same rank, got "
                                       "%s and %s",
                                       a.DebugString(), b.DebugString()));
  }
  const int r = a.rank();
  std::vector<int64_t> lead(a.shape().begin(), a.shape().end() - 2);
  int64_t batch = 1;
  for (int i = 0; i < r - 2; ++i) {
    if (a.dim(i) != b.dim(i)) {
      return Invalid(op, absl::StrFormat("batch dimension %d differs: a %s, "
                                         "b %s",
                                         i, ShapeString(a.shape()),
                                         ShapeString(b.shape())));
    }
    batch *= a.dim(i);
  }
  const int64_t a0 = a.dim(r - 2), a1 = a.dim(r - 1);
  const int64_t b0 = b.dim(r - 2), b1 = b.dim(r - 1);
  const Logical la = attrs.transpose_x ? Logical{a1, a0} : Logical{a0, a1};
  const Logical lb = attrs.transpose_w ? Logical{b1, b0} : Logical{b0, b1};
  if (la.cols != lb.rows) {
    return Invalid(
        op, absl::StrFormat("inner dimensions differ: op(a) is [%d, %d] (a %s, "
                            "transpose_a=%d), op(b) is [%d, %d] (b %s, "
                            "transpose_b=%d)",
                            la.rows, la.cols, ShapeString(a.shape()),
                            attrs.transpose_x, lb.rows, lb.cols,
                            ShapeString(b.shape()), attrs.transpose_w));
  }
  if (!std::isfinite(attrs.scale)) {
    return Invalid(
        op, absl::StrFormat("scale must be finite, got %g", attrs.scale));
  }
  std::vector<int64_t> ys = lead;
  ys.push_back(la.rows);
  ys.push_back(lb.cols);
  if (auto s = CheckFloatRank(op, y, y_name, -1); !s.ok()) return s;
  if (auto s = ExpectShape(op, y, ys, y_name); !s.ok()) return s;
  if (da != nullptr) {
    if (auto s = CheckFloatRank(op, *da, "da", -1); !s.ok()) return s;
    if (auto s = ExpectShape(op, *da, a.shape(), "da"); !s.ok()) return s;
  }
  if (db != nullptr) {
    if (auto s = CheckFloatRank(op, *db, "db", -1); !s.ok()) return s;
    if (auto s = ExpectShape(op, *db, b.shape(), "db"); !s.ok()) return s;
  }
  const canonical::DenseShape d{la.rows, la.cols, lb.cols, attrs.transpose_x,
                                attrs.transpose_w};
  return canonical::MatMulDims{d, batch, attrs.scale};
}

absl::StatusOr<canonical::MatMulDims> ValidateMatMulCall(
    absl::string_view op, absl::Span<const Tensor> in, absl::Span<Tensor> out,
    const OpAttrs& attrs) {
  const bool forward = op == op::kMatMulForward;
  LS_RETURN_IF_ERROR(CheckArity(op, in, forward ? 2 : 3, out, forward ? 1 : 2));
  LS_ASSIGN_OR_RETURN(canonical::MatMulDims d,
                      forward ? ValidateMatMul(op, in[0], in[1], out[0], "y",
                                               nullptr, nullptr, attrs)
                              : ValidateMatMul(op, in[0], in[1], in[2], "dy",
                                               &out[0], &out[1], attrs));
  LS_RETURN_IF_ERROR(CheckNoAlias(op, in, out));
  if (!forward && out[0].SharesStorageWith(out[1])) {
    return Invalid(op, "da and db share storage");
  }
  return d;
}

absl::StatusOr<canonical::TransposeShape> ValidateTranspose(
    const Tensor& x, const Tensor& y, const OpAttrs& attrs) {
  constexpr absl::string_view op = "transpose";
  if (x.dtype() != DType::kFloat32 || y.dtype() != DType::kFloat32) {
    return Invalid(op, absl::StrFormat("x and y must be float32, got %s and "
                                       "%s",
                                       x.DebugString(), y.DebugString()));
  }
  if (attrs.perm_rank != x.rank()) {
    return Invalid(op, absl::StrFormat("perm has %d axes, x has rank %d",
                                       attrs.perm_rank, x.rank()));
  }
  canonical::TransposeShape s;
  s.rank = x.rank();
  s.numel = x.numel();
  const std::vector<int64_t> strides = x.strides();
  std::vector<int64_t> want(s.rank);
  bool seen[kMaxRank] = {};
  for (int d = 0; d < s.rank; ++d) {
    const int p = attrs.perm[d];
    if (p < 0 || p >= s.rank || seen[p]) {
      return Invalid(op, absl::StrFormat("perm[%d] = %d: perm must be a "
                                         "permutation of 0 .. %d",
                                         d, p, s.rank - 1));
    }
    seen[p] = true;
    want[d] = x.dim(p);
    s.out_dims[d] = x.dim(p);
    s.src_strides[d] = strides[p];
  }
  if (auto st = ExpectShape(op, y, want, "y"); !st.ok()) return st;
  return s;
}

absl::Status ValidateReshape(const Tensor& x, const Tensor& y) {
  constexpr absl::string_view op = "reshape";
  if (x.dtype() != DType::kFloat32 || y.dtype() != DType::kFloat32) {
    return Invalid(op, absl::StrFormat("x and y must be float32, got %s and "
                                       "%s",
                                       x.DebugString(), y.DebugString()));
  }
  if (x.numel() != y.numel()) {
    return Invalid(
        op, absl::StrFormat("x %s and y %s hold different element "
                            "counts",
                            ShapeString(x.shape()), ShapeString(y.shape())));
  }
  return absl::OkStatus();
}

}  // namespace lockstep::kernels
