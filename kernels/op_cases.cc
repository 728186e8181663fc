#include "kernels/op_cases.h"

#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/ops/dropout.h"

namespace lockstep::kernels {
namespace {

class Gen {
 public:
  Gen(InputFamily family, uint32_t seed) : family_(family), rng_(seed) {}

  Tensor Floats(std::vector<int64_t> shape, bool nonnegative = false) {
    Tensor t = Tensor::Zeros(DType::kFloat32, std::move(shape)).value();
    float* p = t.data<float>();
    std::uniform_real_distribution<float> real(-1.0f, 1.0f);
    std::uniform_int_distribution<int> ints(-8, 8);
    for (int64_t i = 0; i < t.numel(); ++i) {
      float v = family_ == InputFamily::kRandom
                    ? real(rng_)
                    : static_cast<float>(ints(rng_));
      if (family_ == InputFamily::kRandom) {
        if (i % 97 == 3) v = (i % 2 ? -1.0f : 1.0f) * 1.5e-39f;  // subnormal
        if (i % 101 == 5) v = (i % 2 ? -0.0f : 0.0f);
      }
      p[i] = nonnegative ? std::fabs(v) : v;
    }
    return t;
  }

  // Token ids in [0, vocab): `hot` gets about 60 % of the positions, id
  // vocab - 1 none (when vocab > 2), the rest uniform among the others.
  Tensor Ids(std::vector<int64_t> shape, int64_t vocab, int32_t hot) {
    Tensor t = Tensor::Zeros(DType::kInt32, std::move(shape)).value();
    std::uniform_int_distribution<int32_t> any(
        0, static_cast<int32_t>(vocab > 2 ? vocab - 2 : vocab - 1));
    std::uniform_int_distribution<int> percent(0, 99);
    for (int64_t i = 0; i < t.numel(); ++i) {
      t.data<int32_t>()[i] = percent(rng_) < 60 ? hot : any(rng_);
    }
    return t;
  }

  Tensor Labels(int64_t n, int64_t classes) {
    Tensor t = Tensor::Zeros(DType::kInt32, {n}).value();
    std::uniform_int_distribution<int32_t> dist(0, classes - 1);
    for (int64_t i = 0; i < n; ++i) t.data<int32_t>()[i] = dist(rng_);
    return t;
  }

 private:
  InputFamily family_;
  std::mt19937 rng_;
};

Tensor Zeros(std::vector<int64_t> shape) {
  return Tensor::Zeros(DType::kFloat32, std::move(shape)).value();
}

void AddDense(Gen& g, std::vector<OpCase>* cases) {
  struct D {
    int64_t m, k, n;
    bool tx, tw;
  };
  // Reductions over k (forward), n (grad_input), m (grad_weight) of 600,
  // 300, 257, 300 terms cross the chunk boundary.
  const D dims[] = {{3, 600, 300, false, false}, {300, 20, 7, true, true},
                    {5, 257, 3, false, true},    {2, 3, 4, true, false},
                    {2, 0, 3, false, false},  // empty reduction: +0.0f
                    {0, 3, 2, false, true}};
  for (const D& d : dims) {
    OpAttrs a;
    a.transpose_x = d.tx;
    a.transpose_w = d.tw;
    const std::vector<int64_t> xs =
        d.tx ? std::vector<int64_t>{d.k, d.m} : std::vector<int64_t>{d.m, d.k};
    const std::vector<int64_t> ws =
        d.tw ? std::vector<int64_t>{d.n, d.k} : std::vector<int64_t>{d.k, d.n};
    const std::string dims_label = absl::StrFormat("m=%d k=%d n=%d tx=%d tw=%d",
                                                   d.m, d.k, d.n, d.tx, d.tw);
    cases->push_back({"dense.forward " + dims_label,
                      op::kDenseForward,
                      {g.Floats(xs), g.Floats(ws)},
                      {Zeros({d.m, d.n})},
                      a});
    cases->push_back({"dense.grad_input " + dims_label,
                      op::kDenseGradInput,
                      {g.Floats({d.m, d.n}), g.Floats(ws)},
                      {Zeros(xs)},
                      a});
    cases->push_back({"dense.grad_weight " + dims_label,
                      op::kDenseGradWeight,
                      {g.Floats(xs), g.Floats({d.m, d.n})},
                      {Zeros(ws)},
                      a});
  }
}

void AddElementwise(Gen& g, std::vector<OpCase>* cases) {
  const std::vector<std::vector<int64_t>> bias_shapes = {
      {300, 4}, {3, 4, 10, 10}, {0, 4}};  // {0, 4}: empty sums
  for (const auto& s : bias_shapes) {
    cases->push_back({"bias_add.forward",
                      op::kBiasAddForward,
                      {g.Floats(s), g.Floats({s[1]})},
                      {Zeros(s)},
                      {}});
    cases->push_back({"bias_add.grad",
                      op::kBiasAddGrad,
                      {g.Floats(s)},
                      {Zeros({s[1]})},
                      {}});
  }
  cases->push_back({"relu.forward",
                    op::kReluForward,
                    {g.Floats({1000})},
                    {Zeros({1000})},
                    {}});
  cases->push_back({"relu.grad",
                    op::kReluGrad,
                    {g.Floats({7, 150}), g.Floats({7, 150})},
                    {Zeros({7, 150})},
                    {}});
  cases->push_back({"add.forward",
                    op::kAddForward,
                    {g.Floats({33, 31}), g.Floats({33, 31})},
                    {Zeros({33, 31})},
                    {}});
  cases->push_back({"add.grad",
                    op::kAddGrad,
                    {g.Floats({33, 31})},
                    {Zeros({33, 31}), Zeros({33, 31})},
                    {}});
  cases->push_back({"flatten",
                    op::kFlatten,
                    {g.Floats({3, 4, 5, 6})},
                    {Zeros({3, 120})},
                    {}});
}

void AddSoftmax(Gen& g, std::vector<OpCase>* cases) {
  // N = 300 crosses the chunk boundary of the loss sum, C = 600 that of the
  // row sums.
  const int64_t shapes[][2] = {{300, 10}, {4, 600}, {1, 1}};
  for (const auto& s : shapes) {
    const std::string label = absl::StrFormat("n=%d c=%d", s[0], s[1]);
    Tensor logits = g.Floats({s[0], s[1]});
    Tensor labels = g.Labels(s[0], s[1]);
    cases->push_back({"softmax_xent.forward " + label,
                      op::kSoftmaxXentForward,
                      {logits, labels},
                      {Zeros({1})},
                      {}});
    cases->push_back({"softmax_xent.grad " + label,
                      op::kSoftmaxXentGrad,
                      {logits, labels},
                      {Zeros({s[0], s[1]})},
                      {}});
  }
}

void AddOptimizers(Gen& g, std::vector<OpCase>* cases) {
  const std::vector<int64_t> s = {1000};
  OpAttrs a;
  a.learning_rate = 0.01f;
  a.momentum = 0.9f;
  a.beta1 = 0.9f;
  a.beta2 = 0.999f;
  a.epsilon = 1e-8f;
  a.step = 3;
  cases->push_back(
      {"sgd.update", op::kSgdUpdate, {g.Floats(s)}, {g.Floats(s)}, a});
  cases->push_back({"momentum.update",
                    op::kMomentumUpdate,
                    {g.Floats(s)},
                    {g.Floats(s), g.Floats(s)},
                    a});
  cases->push_back({"adam.update",
                    op::kAdamUpdate,
                    {g.Floats(s)},
                    {g.Floats(s), g.Floats(s), g.Floats(s, true)},
                    a});
}

// The convolution geometries of the conv2d and conv_transpose2d cases:
// input x, weight w, output ys.
struct ConvCase {
  std::vector<int64_t> x, w, ys;
  OpAttrs a;
  std::string label;
};

std::vector<ConvCase> ConvCases() {
  std::vector<ConvCase> convs;
  {  // forward reduction 30 * 3 * 3 = 270 terms
    ConvCase c{{2, 30, 6, 6}, {4, 30, 3, 3}, {}, {}, ""};
    c.a.pad_top = c.a.pad_bottom = c.a.pad_left = c.a.pad_right = 1;
    convs.push_back(c);
  }
  {  // grad_input 30 * 9 = 270 terms, grad_weight 2 * 13 * 13 = 338 terms
    ConvCase c{{2, 3, 13, 13}, {30, 3, 3, 3}, {}, {}, ""};
    c.a.pad_top = c.a.pad_bottom = c.a.pad_left = c.a.pad_right = 1;
    convs.push_back(c);
  }
  {  // groups, stride, dilation, asymmetric padding
    ConvCase c{{1, 4, 9, 8}, {6, 2, 3, 2}, {}, {}, ""};
    c.a.groups = 2;
    c.a.stride_h = 2;
    c.a.dilation_h = 2;
    c.a.pad_top = 1;
    c.a.pad_right = 1;
    convs.push_back(c);
  }
  for (ConvCase& c : convs) {
    const int64_t kh_eff = c.a.dilation_h * (c.w[2] - 1) + 1;
    const int64_t kw_eff = c.a.dilation_w * (c.w[3] - 1) + 1;
    const int64_t oh =
        (c.x[2] + c.a.pad_top + c.a.pad_bottom - kh_eff) / c.a.stride_h + 1;
    const int64_t ow =
        (c.x[3] + c.a.pad_left + c.a.pad_right - kw_eff) / c.a.stride_w + 1;
    c.ys = {c.x[0], c.w[0], oh, ow};
    c.label = absl::StrFormat("x=%s w=%s groups=%d", ShapeString(c.x),
                              ShapeString(c.w), c.a.groups);
  }
  return convs;
}

void AddConv(Gen& g, std::vector<OpCase>* cases) {
  for (const ConvCase& c : ConvCases()) {
    cases->push_back({"conv2d.forward " + c.label,
                      op::kConv2dForward,
                      {g.Floats(c.x), g.Floats(c.w)},
                      {Zeros(c.ys)},
                      c.a});
    cases->push_back({"conv2d.grad_input " + c.label,
                      op::kConv2dGradInput,
                      {g.Floats(c.ys), g.Floats(c.w)},
                      {Zeros(c.x)},
                      c.a});
    cases->push_back({"conv2d.grad_weight " + c.label,
                      op::kConv2dGradWeight,
                      {g.Floats(c.x), g.Floats(c.ys)},
                      {Zeros(c.w)},
                      c.a});
  }
}

// The transposed convolutions of the same geometries map ys to x (in the
// third, the stride leaves an output-padding row: 3 rows give 9). Drawn
// last, so that the other cases' inputs stay as they were.
void AddConvTranspose(Gen& g, std::vector<OpCase>* cases) {
  for (const ConvCase& c : ConvCases()) {
    const std::string label = absl::StrFormat(
        "x=%s w=%s groups=%d", ShapeString(c.ys), ShapeString(c.w), c.a.groups);
    cases->push_back({"conv_transpose2d.forward " + label,
                      op::kConvTranspose2dForward,
                      {g.Floats(c.ys), g.Floats(c.w)},
                      {Zeros(c.x)},
                      c.a});
    cases->push_back({"conv_transpose2d.grad_input " + label,
                      op::kConvTranspose2dGradInput,
                      {g.Floats(c.x), g.Floats(c.w)},
                      {Zeros(c.ys)},
                      c.a});
    cases->push_back({"conv_transpose2d.grad_weight " + label,
                      op::kConvTranspose2dGradWeight,
                      {g.Floats(c.ys), g.Floats(c.x)},
                      {Zeros(c.w)},
                      c.a});
  }
}

void AddPools(Gen& g, std::vector<OpCase>* cases) {
  struct P {
    int64_t k, s, pad;
    bool include_pad;
  };
  const P pools[] = {{3, 2, 1, true}, {3, 2, 1, false}, {2, 1, 0, true}};
  const std::vector<int64_t> xs = {2, 3, 9, 9};
  for (const P& p : pools) {
    OpAttrs a;
    a.kernel_h = a.kernel_w = p.k;
    a.stride_h = a.stride_w = p.s;
    a.pad_top = a.pad_bottom = a.pad_left = a.pad_right = p.pad;
    a.count_include_pad = p.include_pad;
    const int64_t o = (9 + 2 * p.pad - p.k) / p.s + 1;
    const std::vector<int64_t> ys = {2, 3, o, o};
    const std::string label = absl::StrFormat("k=%d s=%d pad=%d incl=%d", p.k,
                                              p.s, p.pad, p.include_pad);
    Tensor x = g.Floats(xs);
    cases->push_back({"max_pool2d.forward " + label,
                      op::kMaxPool2dForward,
                      {x},
                      {Zeros(ys)},
                      a});
    cases->push_back({"max_pool2d.grad " + label,
                      op::kMaxPool2dGrad,
                      {x, g.Floats(ys)},
                      {Zeros(xs)},
                      a});
    cases->push_back({"avg_pool2d.forward " + label,
                      op::kAvgPool2dForward,
                      {x},
                      {Zeros(ys)},
                      a});
    cases->push_back({"avg_pool2d.grad " + label,
                      op::kAvgPool2dGrad,
                      {g.Floats(ys)},
                      {Zeros(xs)},
                      a});
  }
  // 17 * 17 = 289 terms per channel.
  cases->push_back({"global_avg_pool.forward",
                    op::kGlobalAvgPoolForward,
                    {g.Floats({2, 3, 17, 17})},
                    {Zeros({2, 3})},
                    {}});
  cases->push_back({"global_avg_pool.grad",
                    op::kGlobalAvgPoolGrad,
                    {g.Floats({2, 3, 1, 1})},
                    {Zeros({2, 3, 17, 17})},
                    {}});
}

void AddResize(Gen& g, std::vector<OpCase>* cases) {
  const std::vector<int64_t> pairs[][2] = {{{2, 3, 3, 3}, {2, 3, 40, 40}},
                                           {{1, 2, 9, 7}, {1, 2, 4, 5}}};
  for (const auto& p : pairs) {
    const std::string label = ShapeString(p[0]) + "->" + ShapeString(p[1]);
    cases->push_back({"resize_bilinear.forward " + label,
                      op::kResizeBilinearForward,
                      {g.Floats(p[0])},
                      {Zeros(p[1])},
                      {}});
    cases->push_back({"resize_bilinear.grad " + label,
                      op::kResizeBilinearGrad,
                      {g.Floats(p[1])},
                      {Zeros(p[0])},
                      {}});
  }
}

// Op set v2. 40,000 elements span several of the CPU kernels' 16 K-element
// blocks; a softmax/layer-norm row of 300 and a layer-norm column of 700 rows
// cross the 256-term chunk boundary.
void AddNn(Gen& g, std::vector<OpCase>* cases) {
  const struct {
    const char* forward;
    const char* grad;
  } activations[] = {{op::kSigmoidForward, op::kSigmoidGrad},
                     {op::kTanhForward, op::kTanhGrad},
                     {op::kSiluForward, op::kSiluGrad},
                     {op::kGeluForward, op::kGeluGrad},
                     {op::kGeluTanhForward, op::kGeluTanhGrad}};
  for (const auto& a : activations) {
    for (const std::vector<int64_t>& s :
         {std::vector<int64_t>{40000}, std::vector<int64_t>{3, 5, 7}}) {
      cases->push_back({a.forward, a.forward, {g.Floats(s)}, {Zeros(s)}, {}});
      cases->push_back(
          {a.grad, a.grad, {g.Floats(s), g.Floats(s)}, {Zeros(s)}, {}});
    }
  }
  const std::vector<std::vector<int64_t>> row_shapes = {
      {37, 300}, {3, 4, 5}, {1, 1}, {700, 8}};
  for (const auto& s : row_shapes) {
    const int64_t d = s.back();
    std::string label = "shape=[";
    for (size_t i = 0; i < s.size(); ++i) {
      label += absl::StrCat(i ? "," : "", s[i]);
    }
    label += "]";
    cases->push_back({std::string("softmax.forward ") + label,
                      op::kSoftmaxForward,
                      {g.Floats(s)},
                      {Zeros(s)},
                      {}});
    cases->push_back({std::string("softmax.grad ") + label,
                      op::kSoftmaxGrad,
                      {g.Floats(s), g.Floats(s)},
                      {Zeros(s)},
                      {}});
    Tensor x = g.Floats(s);
    cases->push_back({std::string("layer_norm.forward ") + label,
                      op::kLayerNormForward,
                      {x, g.Floats({d}), g.Floats({d})},
                      {Zeros(s)},
                      {}});
    cases->push_back({std::string("layer_norm.grad_input ") + label,
                      op::kLayerNormGradInput,
                      {x, g.Floats({d}), g.Floats(s)},
                      {Zeros(s)},
                      {}});
    cases->push_back({std::string("layer_norm.grad_params ") + label,
                      op::kLayerNormGradParams,
                      {x, g.Floats(s)},
                      {Zeros({d}), Zeros({d})},
                      {}});
  }
  // Batch norm, training and eval; per-channel reductions of 100, 300
  // (crosses a chunk) and 512 terms.
  const std::vector<std::vector<int64_t>> channel_shapes = {
      {4, 3, 5, 5}, {300, 4}, {2, 2, 16, 16}};
  for (const auto& s : channel_shapes) {
    for (const bool eval : {false, true}) {
      const int64_t ch = s[1];
      OpAttrs a;
      a.batch_norm_eval = eval;
      std::string label = eval ? "eval shape=[" : "training shape=[";
      for (size_t i = 0; i < s.size(); ++i) {
        label += absl::StrCat(i ? "," : "", s[i]);
      }
      label += "]";
      Tensor x = g.Floats(s);
      // Running statistics: means in [-1, 1), variances in [0, 1] + 0.5.
      Tensor running = g.Floats({2, ch});
      for (int64_t i = 0; i < ch; ++i) {
        float& v = running.data<float>()[ch + i];
        v = std::fabs(v) + 0.5f;
      }
      cases->push_back({"batch_norm.forward " + label,
                        op::kBatchNormForward,
                        {x, g.Floats({ch}), g.Floats({ch})},
                        {Zeros(s), running},
                        a});
      cases->push_back({"batch_norm.grad_input " + label,
                        op::kBatchNormGradInput,
                        {x, g.Floats({ch}), g.Floats(s), running},
                        {Zeros(s)},
                        a});
      cases->push_back({"batch_norm.grad_params " + label,
                        op::kBatchNormGradParams,
                        {x, g.Floats(s), running},
                        {Zeros({ch}), Zeros({ch})},
                        a});
    }
  }
  // AdamW and the global-norm clipping pieces.
  {
    const std::vector<int64_t> s = {40000};
    OpAttrs a;
    a.learning_rate = 0.01f;
    a.epsilon = 1e-8f;
    a.step = 3;
    a.weight_decay = 0.1f;
    cases->push_back({"adamw.update",
                      op::kAdamWUpdate,
                      {g.Floats(s)},
                      {g.Floats(s), g.Floats(s), g.Floats(s, true)},
                      a});
    for (const int64_t n : {int64_t{1000}, int64_t{70000}, int64_t{0}}) {
      cases->push_back({absl::StrFormat("grad_norm.sum_squares n=%d", n),
                        op::kGradNormSumSquares,
                        {g.Floats({n})},
                        {Zeros({1})},
                        {}});
    }
    OpAttrs sc;
    sc.scale = 0.37f;
    cases->push_back(
        {"grad_norm.scale", op::kGradNormScale, {g.Floats(s)}, {Zeros(s)}, sc});
  }
}

// Embedding lookups and their scatter-add backward: a row with ~720 terms
// (three chains), rows with none, rows wider than a vector, no positions.
void AddEmbedding(Gen& g, std::vector<OpCase>* cases) {
  struct E {
    std::vector<int64_t> ids;
    int64_t vocab, dim;
  };
  const E dims[] = {
      {{4, 300}, 7, 5}, {{3}, 4, 33}, {{2, 8, 4}, 300, 16}, {{0}, 3, 2}};
  for (const E& e : dims) {
    std::string label = "ids=[";
    for (size_t i = 0; i < e.ids.size(); ++i) {
      label += absl::StrCat(i ? "," : "", e.ids[i]);
    }
    label += absl::StrCat("] vocab=", e.vocab, " dim=", e.dim);
    Tensor ids = g.Ids(e.ids, e.vocab, static_cast<int32_t>(e.vocab / 3));
    std::vector<int64_t> rows = e.ids;
    rows.push_back(e.dim);
    cases->push_back({"embedding.forward " + label,
                      op::kEmbeddingForward,
                      {ids, g.Floats({e.vocab, e.dim})},
                      {Zeros(rows)},
                      {}});
    cases->push_back({"embedding.grad_weight " + label,
                      op::kEmbeddingGradWeight,
                      {ids, g.Floats(rows)},
                      {Zeros({e.vocab, e.dim})},
                      {}});
  }
}

// Dropout at rates 0 (keeps all), 0.25 and 0.9, with two streams.
void AddDropout(Gen& g, std::vector<OpCase>* cases) {
  const std::vector<int64_t> s = {7, 300};
  const struct {
    float rate;
    uint64_t stream;
  } configs[] = {{0.25f, 0x44524F5000000001ull},
                 {0.0f, 0x44524F5000000002ull},
                 {0.9f, 0x44524F5001000003ull}};
  for (const auto& cfg : configs) {
    OpAttrs a;
    a.dropout_rate = cfg.rate;
    a.dropout_seed = 42;
    a.dropout_stream = cfg.stream;
    const std::string label = absl::StrFormat("rate=%g", cfg.rate);
    cases->push_back({"dropout.forward " + label,
                      op::kDropoutForward,
                      {g.Floats(s)},
                      {Zeros(s), Zeros(s)},
                      a});
    // A mask as the forward writes it: 0 or the scale.
    Tensor mask = Zeros(s);
    const canonical::DropoutParams p =
        canonical::DropoutParamsOf(cfg.rate, 42, cfg.stream);
    for (int64_t i = 0; i < mask.numel(); ++i) {
      mask.data<float>()[i] = canonical::DropoutMaskElement(p, i);
    }
    cases->push_back({"dropout.grad " + label,
                      op::kDropoutGrad,
                      {mask, g.Floats(s)},
                      {Zeros(s)},
                      a});
  }
}

// Batched matmuls (batch dimensions, transposes, a chunk-crossing K, an
// empty reduction, a scale), causal softmax rows, transposes and reshapes.
void AddTransformer(Gen& g, std::vector<OpCase>* cases) {
  struct M {
    std::vector<int64_t> batch;
    int64_t m, k, n;
    bool ta, tb;
    float scale;
  };
  const M dims[] = {{{2, 3}, 5, 300, 4, false, false, 1.0f},
                    {{4}, 3, 7, 257, true, true, 0.125f},
                    {{}, 260, 6, 5, true, false, 1.0f},
                    {{3}, 4, 9, 6, false, true, 0.17677669f},
                    {{2}, 3, 0, 2, false, false, 1.0f}};
  for (const M& d : dims) {
    OpAttrs a;
    a.transpose_x = d.ta;
    a.transpose_w = d.tb;
    a.scale = d.scale;
    auto with = [&](int64_t r, int64_t c) {
      std::vector<int64_t> s = d.batch;
      s.push_back(r);
      s.push_back(c);
      return s;
    };
    const std::vector<int64_t> as = d.ta ? with(d.k, d.m) : with(d.m, d.k);
    const std::vector<int64_t> bs = d.tb ? with(d.n, d.k) : with(d.k, d.n);
    const std::string label = absl::StrCat("batch=", d.batch.size(), " m=", d.m,
                                           " k=", d.k, " n=", d.n, " ta=", d.ta,
                                           " tb=", d.tb, " scale=", d.scale);
    cases->push_back({"matmul.forward " + label,
                      op::kMatMulForward,
                      {g.Floats(as), g.Floats(bs)},
                      {Zeros(with(d.m, d.n))},
                      a});
    cases->push_back({"matmul.grad " + label,
                      op::kMatMulGrad,
                      {g.Floats(as), g.Floats(bs), g.Floats(with(d.m, d.n))},
                      {Zeros(as), Zeros(bs)},
                      a});
  }
  OpAttrs causal;
  causal.causal = true;
  for (const std::vector<int64_t>& s :
       {std::vector<int64_t>{2, 3, 5, 5}, std::vector<int64_t>{1, 300, 300}}) {
    const std::string label = absl::StrCat("causal shape=", ShapeString(s));
    cases->push_back({"softmax.forward " + label,
                      op::kSoftmaxForward,
                      {g.Floats(s)},
                      {Zeros(s)},
                      causal});
    cases->push_back({"softmax.grad " + label,
                      op::kSoftmaxGrad,
                      {g.Floats(s), g.Floats(s)},
                      {Zeros(s)},
                      causal});
  }
  struct T {
    std::vector<int64_t> shape;
    std::vector<int> perm;
  };
  const T transposes[] = {{{2, 3, 4, 5}, {0, 2, 1, 3}},
                          {{3, 70}, {1, 0}},
                          {{2, 3, 4}, {2, 0, 1}},
                          {{0, 3}, {1, 0}}};
  for (const T& t : transposes) {
    OpAttrs a;
    a.perm_rank = static_cast<int>(t.perm.size());
    std::vector<int64_t> ys;
    for (size_t i = 0; i < t.perm.size(); ++i) {
      a.perm[i] = t.perm[i];
      ys.push_back(t.shape[t.perm[i]]);
    }
    cases->push_back({"transpose x=" + ShapeString(t.shape),
                      op::kTranspose,
                      {g.Floats(t.shape)},
                      {Zeros(ys)},
                      a});
  }
  cases->push_back(
      {"reshape", op::kReshape, {g.Floats({2, 3, 4})}, {Zeros({6, 2, 2})}, {}});
}

// The broadcasting graph primitives (kernels/ops/graph_elementwise.h):
// every kind, operands broadcast on leading, middle and trailing axes, a
// gradient reduction of 600 terms (three chunks), keepdims and not.
void AddGraphElementwise(Gen& g, std::vector<OpCase>* cases) {
  auto kind = [](int k) {
    OpAttrs a;
    a.graph_kind = k;
    return a;
  };
  // A [1, 4] exponent row holding 2, 0.5 (the exact special cases), a
  // whole and a fractional power.
  const Tensor exponents =
      Tensor::FromValues<float>({1, 4},
                                std::vector<float>{2.0f, 0.5f, 3.0f, -1.5f})
          .value();
  for (int k = 1; k <= 7; ++k) {
    const bool pow = k == 5;
    const std::string name = absl::StrCat("kind=", k);
    cases->push_back(
        {"binary.forward a=[2,3,4] b=[3,1] " + name,
         op::kBinaryForward,
         {g.Floats({2, 3, 4}, pow), pow ? exponents : g.Floats({3, 1})},
         {Zeros({2, 3, 4})},
         kind(k)});
    cases->push_back(
        {"binary.grad a=[2,1,5] b=[3,1] " + name,
         op::kBinaryGrad,
         {g.Floats({2, 1, 5}, pow), g.Floats({3, 1}), g.Floats({2, 3, 5})},
         {Zeros({2, 1, 5}), Zeros({3, 1})},
         kind(k)});
    cases->push_back(
        {"binary.grad a=[600,4] b=[4] " + name,
         op::kBinaryGrad,
         {g.Floats({600, 4}, pow), g.Floats({4}), g.Floats({600, 4})},
         {Zeros({600, 4}), Zeros({4})},
         kind(k)});
  }
  for (int k = 1; k <= 8; ++k) {
    const std::string name = absl::StrCat("kind=", k);
    cases->push_back({"unary.forward x=[3,70] " + name,
                      op::kUnaryForward,
                      {g.Floats({3, 70})},
                      {Zeros({3, 70})},
                      kind(k)});
    cases->push_back({"unary.grad x=[3,70] " + name,
                      op::kUnaryGrad,
                      {g.Floats({3, 70}), g.Floats({3, 70})},
                      {Zeros({3, 70})},
                      kind(k)});
  }
  for (int k = 1; k <= 5; ++k) {
    cases->push_back({absl::StrCat("compare a=[4,5] b=[5] kind=", k),
                      op::kCompare,
                      {g.Floats({4, 5}), g.Floats({5})},
                      {Zeros({4, 5})},
                      kind(k)});
  }
  Tensor cond = g.Floats({3, 1, 5});
  for (int64_t i = 0; i < cond.numel(); ++i) {
    cond.data<float>()[i] = cond.data<float>()[i] > 0.0f ? 1.0f : 0.0f;
  }
  cases->push_back({"where.forward cond=[3,1,5] a=[4,5] b=[3,1,1]",
                    op::kWhereForward,
                    {cond, g.Floats({4, 5}), g.Floats({3, 1, 1})},
                    {Zeros({3, 4, 5})},
                    {}});
  cases->push_back({"where.grad cond=[3,1,5] da=[4,5] db=[3,1,1]",
                    op::kWhereGrad,
                    {cond, g.Floats({3, 4, 5})},
                    {Zeros({4, 5}), Zeros({3, 1, 1})},
                    {}});
  struct R {
    std::vector<int64_t> x;
    uint32_t axes;
    bool keepdims;
    int kind;
    std::vector<int64_t> y;
  };
  const R reduces[] = {{{2, 300, 3}, 0b010, true, 1, {2, 1, 3}},
                       {{2, 300, 3}, 0b110, false, 2, {2}},
                       {{2, 3, 4}, 0b100, false, 2, {2, 3}},
                       {{2, 0, 4}, 0b010, true, 2, {2, 1, 4}}};
  for (const R& r : reduces) {
    OpAttrs a = kind(r.kind);
    a.reduce_axes = r.axes;
    a.reduce_keepdims = r.keepdims;
    const std::string label =
        absl::StrFormat("x=%s axes=0x%x keepdims=%d kind=%d", ShapeString(r.x),
                        r.axes, r.keepdims, r.kind);
    cases->push_back({"reduce.forward " + label,
                      op::kReduceForward,
                      {g.Floats(r.x)},
                      {Zeros(r.y)},
                      a});
    cases->push_back({"reduce.grad " + label,
                      op::kReduceGrad,
                      {g.Floats(r.y)},
                      {Zeros(r.x)},
                      a});
  }
}

}  // namespace

const char* InputFamilyName(InputFamily family) {
  return family == InputFamily::kRandom ? "random" : "small_ints";
}

std::vector<OpCase> OpCases(InputFamily family, uint32_t seed) {
  Gen g(family, seed);
  std::vector<OpCase> cases;
  AddDense(g, &cases);
  AddElementwise(g, &cases);
  AddSoftmax(g, &cases);
  AddOptimizers(g, &cases);
  AddConv(g, &cases);
  AddPools(g, &cases);
  AddResize(g, &cases);
  AddNn(g, &cases);
  AddEmbedding(g, &cases);
  AddDropout(g, &cases);
  AddTransformer(g, &cases);
  AddGraphElementwise(g, &cases);
  AddConvTranspose(g, &cases);
  return cases;
}

std::vector<Tensor> CloneAll(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors) out.push_back(t.Clone().value());
  return out;
}

absl::StatusOr<std::vector<Tensor>> RunOpCase(const Registry& registry,
                                              const KernelKey& key,
                                              const OpCase& c) {
  absl::StatusOr<KernelFn> fn = registry.Lookup(key);
  if (!fn.ok()) return fn.status();
  std::vector<Tensor> out = CloneAll(c.outputs);
  absl::Status s = (*fn)(c.inputs, absl::MakeSpan(out), c.attrs);
  if (!s.ok()) return s;
  return out;
}

int64_t FirstDifferingElement(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) return 0;
  const int64_t size = DTypeSize(got.dtype());
  const char* a = static_cast<const char*>(got.raw_data());
  const char* b = static_cast<const char*>(want.raw_data());
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (std::memcmp(a + i * size, b + i * size, size) != 0) return i;
  }
  return -1;
}

namespace {

bool BothNan(const char* a, const char* b) {
  float x, y;
  std::memcpy(&x, a, sizeof(float));
  std::memcpy(&y, b, sizeof(float));
  return std::isnan(x) && std::isnan(y);
}

}  // namespace

int64_t FirstCrossClassDifference(const Tensor& got, const Tensor& want) {
  if (got.dtype() != DType::kFloat32 || want.dtype() != DType::kFloat32) {
    return FirstDifferingElement(got, want);
  }
  if (got.shape() != want.shape()) return 0;
  const char* a = static_cast<const char*>(got.raw_data());
  const char* b = static_cast<const char*>(want.raw_data());
  for (int64_t i = 0; i < got.numel(); ++i) {
    const char* x = a + i * sizeof(float);
    const char* y = b + i * sizeof(float);
    if (std::memcmp(x, y, sizeof(float)) != 0 && !BothNan(x, y)) return i;
  }
  return -1;
}

int64_t CountNanBitDifferences(const Tensor& got, const Tensor& want) {
  if (got.dtype() != DType::kFloat32 || want.dtype() != DType::kFloat32 ||
      got.shape() != want.shape()) {
    return 0;
  }
  const char* a = static_cast<const char*>(got.raw_data());
  const char* b = static_cast<const char*>(want.raw_data());
  int64_t count = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const char* x = a + i * sizeof(float);
    const char* y = b + i * sizeof(float);
    if (std::memcmp(x, y, sizeof(float)) != 0 && BothNan(x, y)) ++count;
  }
  return count;
}

}  // namespace lockstep::kernels
