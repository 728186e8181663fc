// CANONICAL CPU kernels of op set v2: the activations (sigmoid, tanh, silu,
// gelu, gelu_tanh), softmax over the last axis, layer and batch
// normalisation (kernels/ops/activations.h, kernels/ops/norm.h).
//
// Each kernel runs the spec body on the process thread pool, split over
// OUTPUTS only: blocks of elements (activations), blocks of rows (softmax,
// layer_norm forward and grad_input), blocks of columns
// (layer_norm.grad_params, after the per-row statistics), blocks of
// channels (batch_norm.* in eval mode; in training mode the per-channel
// reductions run on the lane kernels, lanes = channels, and so do the
// elementwise passes that write y and dx, split over (image, channel) runs,
// kernels/cpu/lane_kernels.h), or blocks of embedding rows
// (embedding.grad_weight, after the sort of the positions by id). No
// reduction is split, so the bits do not depend on the thread count or the
// ISA.
//
// Also the DEFAULT "atomic" embedding.grad_weight: the positions are split
// over tasks that add their dy rows into dw with atomic float adds, as GPU
// frameworks' embedding backward does (NONDETERMINISTIC with more than one
// thread).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "kernels/canonical/reduce.h"
#include "kernels/cpu/atomic_float.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/lane_kernels.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ops/activations.h"
#include "kernels/ops/dropout.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/norm.h"
#include "kernels/ops/optimizers.h"
#include "kernels/ops/validate.h"

namespace lockstep::kernels {
namespace {

namespace c = ::lockstep::canonical;

// Rows per task so that one task touches about 64 K elements.
int64_t RowBlock(int64_t d) { return std::max<int64_t>(1, 65536 / d); }

constexpr int64_t kElementBlock = 16384;

template <c::Activation kAct>
struct ActivationOps;
template <>
struct ActivationOps<c::Activation::kSigmoid> {
  static constexpr const char* kForward = op::kSigmoidForward;
  static constexpr const char* kGrad = op::kSigmoidGrad;
  static constexpr LaneActivation kLanes = LaneActivation::kSigmoid;
};
template <>
struct ActivationOps<c::Activation::kTanh> {
  static constexpr const char* kForward = op::kTanhForward;
  static constexpr const char* kGrad = op::kTanhGrad;
  static constexpr LaneActivation kLanes = LaneActivation::kTanh;
};
template <>
struct ActivationOps<c::Activation::kSilu> {
  static constexpr const char* kForward = op::kSiluForward;
  static constexpr const char* kGrad = op::kSiluGrad;
  static constexpr LaneActivation kLanes = LaneActivation::kSilu;
};
template <>
struct ActivationOps<c::Activation::kGelu> {
  static constexpr const char* kForward = op::kGeluForward;
  static constexpr const char* kGrad = op::kGeluGrad;
};
template <>
struct ActivationOps<c::Activation::kGeluTanh> {
  static constexpr const char* kForward = op::kGeluTanhForward;
  static constexpr const char* kGrad = op::kGeluTanhGrad;
  static constexpr LaneActivation kLanes = LaneActivation::kGeluTanh;
};

// y may alias x (each element is read once, then written).
template <c::Activation kAct>
absl::Status ActivationForwardKernel(absl::Span<const Tensor> in,
                                     absl::Span<Tensor> out, const OpAttrs&) {
  const char* name = ActivationOps<kAct>::kForward;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 1, out, 1));
  const Tensor* t[] = {&in[0], &out[0]};
  const absl::string_view names[] = {"x", "y"};
  LS_RETURN_IF_ERROR(ValidateSameShapeFloat(name, t, names));
  const float* x = in[0].data<float>();
  float* y = out[0].data<float>();
  if constexpr (kAct == c::Activation::kGelu) {
    // The whole element on the lane kernels' vectors (vector erf included).
    const CpuIsa isa = ActiveCpuIsa();
    ParallelForBlocks(
        CpuThreadPool(), in[0].numel(), kElementBlock,
        [&](int64_t b, int64_t e) { GeluLanes(x + b, y + b, e - b, isa); });
  } else {
    // The whole element on the lane kernels' vectors (vector exp and tanh
    // included).
    const CpuIsa isa = ActiveCpuIsa();
    ParallelForBlocks(CpuThreadPool(), in[0].numel(), kElementBlock,
                      [&](int64_t b, int64_t e) {
                        ActivationLanes(ActivationOps<kAct>::kLanes, x + b,
                                        y + b, e - b, isa);
                      });
  }
  return absl::OkStatus();
}

// dx may alias dy.
template <c::Activation kAct>
absl::Status ActivationGradKernel(absl::Span<const Tensor> in,
                                  absl::Span<Tensor> out, const OpAttrs&) {
  const char* name = ActivationOps<kAct>::kGrad;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 2, out, 1));
  const Tensor* t[] = {&in[0], &in[1], &out[0]};
  const absl::string_view names[] = {"x", "dy", "dx"};
  LS_RETURN_IF_ERROR(ValidateSameShapeFloat(name, t, names));
  if (out[0].SharesStorageWith(in[0])) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: dx must not share storage with x", name));
  }
  const float* x = in[0].data<float>();
  const float* dy = in[1].data<float>();
  float* dx = out[0].data<float>();
  if constexpr (kAct == c::Activation::kGelu) {
    // The whole element on the lane kernels' vectors (vector erf and exp
    // included). dx may alias dy: each dy is read before its dx is written.
    const CpuIsa isa = ActiveCpuIsa();
    ParallelForBlocks(CpuThreadPool(), in[0].numel(), kElementBlock,
                      [&](int64_t b, int64_t e) {
                        GeluGradLanes(x + b, dy + b, dx + b, e - b, isa);
                      });
  } else {
    // Likewise on the vector exp and tanh; dx may alias dy as above.
    const CpuIsa isa = ActiveCpuIsa();
    ParallelForBlocks(CpuThreadPool(), in[0].numel(), kElementBlock,
                      [&](int64_t b, int64_t e) {
                        ActivationGradLanes(ActivationOps<kAct>::kLanes, x + b,
                                            dy + b, dx + b, e - b, isa);
                      });
  }
  return absl::OkStatus();
}

// The rows' exps on the lane kernels' vector exp (CanonicalExp's bits).
struct LaneExpRow {
  CpuIsa isa;
  void operator()(float* v, int64_t n) const {
    CanonicalExpLanes(v, v, n, isa);
  }
};

absl::Status SoftmaxForwardKernel(absl::Span<const Tensor> in,
                                  absl::Span<Tensor> out, const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op::kSoftmaxForward, in, 1, out, 1));
  const Tensor* like[] = {&out[0]};
  const absl::string_view names[] = {"x", "y"};
  LS_ASSIGN_OR_RETURN(c::RowShape s, ValidateRows(op::kSoftmaxForward, in[0],
                                                  like, {}, names, a, false));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kSoftmaxForward, in, out));
  const float* x = in[0].data<float>();
  float* y = out[0].data<float>();
  const CpuIsa isa = ActiveCpuIsa();
  if (SoftmaxLanes(x, /*dy=*/nullptr, y, s.rows, s.d, s.causal, isa,
                   CpuThreadPool())) {
    return absl::OkStatus();
  }
  ParallelForBlocks(
      CpuThreadPool(), s.rows, RowBlock(s.d), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r)
          c::SoftmaxLastForwardRowOnce(s, x, y, r, LaneExpRow{isa});
      });
  return absl::OkStatus();
}

// With a third input y (softmax.forward's output for the same x), dx comes
// from it instead of from a recomputed y (kernels/ops/norm.h).
absl::Status SoftmaxGradKernel(absl::Span<const Tensor> in,
                               absl::Span<Tensor> out, const OpAttrs& a) {
  if (in.size() != 3) {
    LS_RETURN_IF_ERROR(CheckArity(op::kSoftmaxGrad, in, 2, out, 1));
  } else if (out.size() != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: expected 1 output, got %d", op::kSoftmaxGrad, out.size()));
  }
  const bool has_y = in.size() == 3;
  const Tensor* like[] = {&in[1], &out[0], has_y ? &in[2] : &in[1]};
  const absl::string_view names[] = {"x", "dy", "dx", "y"};
  LS_ASSIGN_OR_RETURN(
      c::RowShape s,
      ValidateRows(op::kSoftmaxGrad, in[0],
                   absl::MakeConstSpan(like, has_y ? 3 : 2), {},
                   absl::MakeConstSpan(names, has_y ? 4 : 3), a, false));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kSoftmaxGrad, in, out));
  const float* x = in[0].data<float>();
  const float* dy = in[1].data<float>();
  float* dx = out[0].data<float>();
  const CpuIsa isa = ActiveCpuIsa();
  if (has_y) {
    const float* y = in[2].data<float>();
    if (SoftmaxGradFromYLanes(y, dy, dx, s.rows, s.d, s.causal, isa,
                              CpuThreadPool())) {
      return absl::OkStatus();
    }
    ParallelForBlocks(CpuThreadPool(), s.rows, RowBlock(s.d),
                      [&](int64_t b, int64_t e) {
                        for (int64_t r = b; r < e; ++r) {
                          c::SoftmaxLastGradFromYRow(s, y, dy, dx, r);
                        }
                      });
    return absl::OkStatus();
  }
  if (SoftmaxLanes(x, dy, dx, s.rows, s.d, s.causal, isa, CpuThreadPool())) {
    return absl::OkStatus();
  }
  ParallelForBlocks(
      CpuThreadPool(), s.rows, RowBlock(s.d), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r)
          c::SoftmaxLastGradRowOnce(s, x, dy, dx, r, LaneExpRow{isa});
      });
  return absl::OkStatus();
}

// Every row's mean and rstd, as arrays for the lane kernels: the rows are
// the channels of one [1, rows, d] image, so the row sums are
// BiasAddGradLanes' and the variances' dots BatchNormVarSumLanes'
// (kernels/ops/norm.h's LayerNormStatsOf, 16 rows at a time).
// With `saved` (layer_norm.forward's [2, rows]: the means, then rstd) they
// are taken from it instead (kernels/ops/norm.h, "Saved statistics").
struct LayerNormRowArrays {
  std::vector<float> mean, rstd;
};
LayerNormRowArrays LayerNormArrays(const c::RowShape& s, const float* x,
                                   const float* saved = nullptr) {
  const c::BiasShape shape{1, s.rows, s.d};
  LayerNormRowArrays st{std::vector<float>(s.rows), std::vector<float>(s.rows)};
  if (saved != nullptr) {
    std::copy(saved, saved + s.rows, st.mean.begin());
    std::copy(saved + s.rows, saved + 2 * s.rows, st.rstd.begin());
    return st;
  }
  std::vector<float>& mean = st.mean;
  BiasAddGradLanes(shape, x, mean.data(), ActiveCpuIsa(), CpuThreadPool());
  for (int64_t r = 0; r < s.rows; ++r) {
    mean[r] = c::LayerNormMeanOf(s, mean[r]);
  }
  std::vector<float> var_sum(s.rows);
  BatchNormVarSumLanes(shape, x, mean.data(), var_sum.data(), ActiveCpuIsa(),
                       CpuThreadPool());
  for (int64_t r = 0; r < s.rows; ++r) {
    st.rstd[r] = c::LayerNormStatsFrom(s, mean[r], var_sum[r]).rstd;
  }
  return st;
}

// batch_norm.*'s and layer_norm.*'s arity: `n_in` inputs and `n_out`
// outputs, or one more of the side that carries the optional saved
// statistics (kernels/ops/norm.h). Returns whether the call has them.
absl::StatusOr<bool> SavedStatsArity(absl::string_view op,
                                     absl::Span<const Tensor> in, size_t n_in,
                                     absl::Span<Tensor> out, size_t n_out,
                                     bool saved_is_output) {
  const size_t in_saved = saved_is_output ? n_in : n_in + 1;
  const size_t out_saved = saved_is_output ? n_out + 1 : n_out;
  if (in.size() == n_in && out.size() == n_out) return false;
  if (in.size() == in_saved && out.size() == out_saved) return true;
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: expected %d inputs and %d outputs (%d and %d with the saved "
      "statistics), got %d and %d",
      op, n_in, n_out, in_saved, out_saved, in.size(), out.size()));
}

// A LayerNormRowsLanes pass over x's rows into out, with their statistics.
LayerNormRowsArgs RowPass(LayerNormRowsPass kind, const c::RowShape& s,
                          const float* x, const LayerNormRowArrays& st,
                          float* out) {
  LayerNormRowsArgs pass{};
  pass.pass = kind;
  pass.rows = s.rows;
  pass.d = s.d;
  pass.x = x;
  pass.mean = st.mean.data();
  pass.rstd = st.rstd.data();
  pass.out = out;
  return pass;
}

absl::Status LayerNormForwardKernel(absl::Span<const Tensor> in,
                                    absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(
      const bool has_saved,
      SavedStatsArity(op::kLayerNormForward, in, 3, out, 1, true));
  const Tensor* like[] = {&out[0]};
  const Tensor* vectors[] = {&in[1], &in[2]};
  const absl::string_view names[] = {"x", "y", "gamma", "beta"};
  LS_ASSIGN_OR_RETURN(c::RowShape s,
                      ValidateRows(op::kLayerNormForward, in[0], like, vectors,
                                   names, a, true));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kLayerNormForward, in, out));
  if (has_saved) {
    LS_RETURN_IF_ERROR(
        ValidateSavedStats(op::kLayerNormForward, out[1], s.rows));
    if (out[1].SharesStorageWith(out[0])) {
      return absl::InvalidArgumentError(
          "layer_norm.forward: saved shares storage with y");
    }
  }
  const float* x = in[0].data<float>();
  const float* gamma = in[1].data<float>();
  const float* beta = in[2].data<float>();
  float* y = out[0].data<float>();
  const LayerNormRowArrays st = LayerNormArrays(s, x);
  if (has_saved) {
    float* saved = out[1].data<float>();
    std::copy(st.mean.begin(), st.mean.end(), saved);
    std::copy(st.rstd.begin(), st.rstd.end(), saved + s.rows);
  }
  // LayerNormApplyRow's elements on the lane kernels.
  LayerNormRowsArgs pass = RowPass(LayerNormRowsPass::kApply, s, x, st, y);
  pass.gamma = gamma;
  pass.beta = beta;
  LayerNormRowsLanes(pass, ActiveCpuIsa(), CpuThreadPool());
  return absl::OkStatus();
}

absl::Status LayerNormGradInputKernel(absl::Span<const Tensor> in,
                                      absl::Span<Tensor> out,
                                      const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(
      const bool has_saved,
      SavedStatsArity(op::kLayerNormGradInput, in, 3, out, 1, false));
  const Tensor* like[] = {&in[2], &out[0]};
  const Tensor* vectors[] = {&in[1]};
  const absl::string_view names[] = {"x", "dy", "dx", "gamma"};
  LS_ASSIGN_OR_RETURN(
      c::RowShape s, ValidateRows(op::kLayerNormGradInput, in[0], like, vectors,
                                  names, a, true));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kLayerNormGradInput, in, out));
  if (has_saved) {
    LS_RETURN_IF_ERROR(
        ValidateSavedStats(op::kLayerNormGradInput, in[3], s.rows));
  }
  const float* x = in[0].data<float>();
  const float* gamma = in[1].data<float>();
  const float* dy = in[2].data<float>();
  float* dx = out[0].data<float>();
  const LayerNormRowArrays st =
      LayerNormArrays(s, x, has_saved ? in[3].data<float>() : nullptr);
  const CpuIsa isa = ActiveCpuIsa();
  // g = dy * gamma, one product per element as the spec forms it, then the
  // sum of g and the dot of (g, xhat) per row, then dx
  // (LayerNormGradInputApplyRow), all on the lane kernels.
  ScratchFloats g(s.rows * s.d);
  LayerNormRowsArgs pass =
      RowPass(LayerNormRowsPass::kScaleDy, s, x, st, g.get());
  pass.dy = dy;
  pass.gamma = gamma;
  LayerNormRowsLanes(pass, isa, CpuThreadPool());
  std::vector<float> dot_gx(s.rows), sum_g(s.rows);
  BatchNormGradChainsLanes(c::BiasShape{1, s.rows, s.d}, x, g.data(),
                           st.mean.data(), st.rstd.data(), /*scale=*/nullptr,
                           dot_gx.data(), sum_g.data(), isa, CpuThreadPool());
  // LayerNormGradInputApplyRow's a = sum_g / d and b = dot_gx / d.
  std::vector<float> ra(s.rows), rb(s.rows);
  for (int64_t r = 0; r < s.rows; ++r) {
    ra[r] = c::LayerNormMeanOf(s, sum_g[r]);
    rb[r] = c::LayerNormMeanOf(s, dot_gx[r]);
  }
  pass.pass = LayerNormRowsPass::kGradApply;
  pass.a = ra.data();
  pass.b = rb.data();
  pass.out = dx;
  LayerNormRowsLanes(pass, isa, CpuThreadPool());
  return absl::OkStatus();
}

absl::Status LayerNormGradParamsKernel(absl::Span<const Tensor> in,
                                       absl::Span<Tensor> out,
                                       const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(
      const bool has_saved,
      SavedStatsArity(op::kLayerNormGradParams, in, 2, out, 2, false));
  const Tensor* like[] = {&in[1]};
  const Tensor* vectors[] = {&out[0], &out[1]};
  const absl::string_view names[] = {"x", "dy", "dgamma", "dbeta"};
  LS_ASSIGN_OR_RETURN(c::RowShape s,
                      ValidateRows(op::kLayerNormGradParams, in[0], like,
                                   vectors, names, a, true));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kLayerNormGradParams, in, out));
  if (out[0].SharesStorageWith(out[1])) {
    return absl::InvalidArgumentError(
        "layer_norm.grad_params: dgamma and dbeta share storage");
  }
  if (has_saved) {
    LS_RETURN_IF_ERROR(
        ValidateSavedStats(op::kLayerNormGradParams, in[2], s.rows));
  }
  const float* x = in[0].data<float>();
  const float* dy = in[1].data<float>();
  const LayerNormRowArrays st =
      LayerNormArrays(s, x, has_saved ? in[2].data<float>() : nullptr);
  float* dgamma = out[0].data<float>();
  float* dbeta = out[1].data<float>();
  // Column j's chains (kernels/ops/norm.h's LayerNormGradParamsColumn) run
  // over the rows: xhat is formed once per element, as the spec forms it,
  // then the columns are the channels of a [rows, d, 1] batch: dgamma =
  // the canonical dot of (dy, xhat) and dbeta = the canonical sum of dy,
  // lanes = neighbouring columns, on BatchNormGradChainsLanes with mean 0
  // and rstd 1, whose (xhat - 0) * 1 is xhat itself (-0 and NaN included).
  ScratchFloats xhat(s.rows * s.d);
  LayerNormRowsLanes(RowPass(LayerNormRowsPass::kXhat, s, x, st, xhat.get()),
                     ActiveCpuIsa(), CpuThreadPool());
  const std::vector<float> zeros(s.d, 0.0f);
  const std::vector<float> ones(s.d, 1.0f);
  BatchNormGradChainsLanes(c::BiasShape{s.rows, s.d, 1}, xhat.data(), dy,
                           zeros.data(), ones.data(), /*scale=*/nullptr, dgamma,
                           dbeta, ActiveCpuIsa(), CpuThreadPool());
  for (int64_t j = 0; j < s.d; ++j) {
    dgamma[j] = c::norm_internal::CanonicalNanOf(dgamma[j]);
    dbeta[j] = c::norm_internal::CanonicalNanOf(dbeta[j]);
  }
  return absl::OkStatus();
}

// Channels per task: one task touches about 64 K elements.
int64_t ChannelBlock(const c::ChannelShape& s) {
  return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, s.n * s.spatial));
}

// batch_norm in training mode on the lane kernels (BatchNormTrainingLanes),
// with kernels/ops/norm.h's per-channel arithmetic between the passes:
// BatchNormMeanOf, BatchNormStatsFrom's rstd and (grad_input)
// BatchNormGradInputApplyChannel's a = sum_g / m and b = dot_gx / m.
class BatchNormTraining {
 public:
  BatchNormTraining(const c::ChannelShape& s, BatchNormLanePass pass)
      : s_(s),
        pass_(pass),
        mean_(s.c),
        var_sum_(s.c),
        rstd_(s.c),
        dot_(s.c),
        sum_(s.c),
        param_dot_(pass == BatchNormLanePass::kGradBoth ? s.c : 0),
        param_sum_(param_dot_.size()) {}

  // The grad passes: `saved` (batch_norm.forward's, [2, C]: the means, then
  // rstd) holds x's batch statistics, which Run then does not compute.
  void UseStats(const float* saved) {
    std::copy(saved, saved + s_.c, mean_.begin());
    std::copy(saved + s_.c, saved + 2 * s_.c, rstd_.begin());
    stats_given_ = true;
  }
  // After a kForward Run: the statistics into saved [2, C].
  void SaveStats(float* saved) const {
    std::copy(mean_.begin(), mean_.end(), saved);
    std::copy(rstd_.begin(), rstd_.end(), saved + s_.c);
  }

  // out: y or dx (unused by kGradParams).
  void Run(const float* x, const float* dy, const float* gamma,
           const float* beta, float* out) {
    BatchNormLaneArgs args{
        pass_,        x,           dy,           gamma,
        beta,         out,         mean_.data(), var_sum_.data(),
        rstd_.data(), dot_.data(), sum_.data(),  &Math,
        this};
    args.stats_given = stats_given_;
    args.param_dot = param_dot_.data();
    args.param_sum = param_sum_.data();
    args.stream_out =
        out != nullptr && StreamOutput(s_.n * s_.c * s_.spatial, out, x, dy);
    BatchNormTrainingLanes(c::BiasShape{s_.n, s_.c, s_.spatial}, args,
                           ActiveCpuIsa(), CpuThreadPool());
  }

  const std::vector<float>& mean() const { return mean_; }
  const std::vector<float>& var_sum() const { return var_sum_; }
  const std::vector<float>& dot() const { return dot_; }
  const std::vector<float>& sum() const { return sum_; }
  // kGradBoth: kGradParams' dot and sum.
  const std::vector<float>& param_dot() const { return param_dot_; }
  const std::vector<float>& param_sum() const { return param_sum_; }

 private:
  static void Math(void* ctx, BatchNormLaneStep step, int64_t c0,
                   int64_t count) {
    auto* self = static_cast<BatchNormTraining*>(ctx);
    const c::ChannelShape& s = self->s_;
    const float m = static_cast<float>(s.n * s.spatial);
    for (int64_t ch = c0; ch < c0 + count; ++ch) {
      switch (step) {
        case BatchNormLaneStep::kMean:
          self->mean_[ch] = c::BatchNormMeanOf(s, self->mean_[ch]);
          break;
        case BatchNormLaneStep::kStats:
          self->rstd_[ch] =
              c::BatchNormStatsFrom(s, self->mean_[ch], self->var_sum_[ch])
                  .rstd;
          break;
        case BatchNormLaneStep::kChains:
          if (self->pass_ == BatchNormLanePass::kGradInput ||
              self->pass_ == BatchNormLanePass::kGradBoth) {
            self->sum_[ch] = self->sum_[ch] / m;
            self->dot_[ch] = self->dot_[ch] / m;
          }
          break;
      }
    }
  }

  const c::ChannelShape s_;
  const BatchNormLanePass pass_;
  std::vector<float> mean_, var_sum_, rstd_, dot_, sum_, param_dot_, param_sum_;
  bool stats_given_ = false;
};

// running is in/out: updated in training, read in eval.
absl::Status BatchNormForwardKernel(absl::Span<const Tensor> in,
                                    absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(
      const bool has_saved,
      SavedStatsArity(op::kBatchNormForward, in, 3, out, 2, true));
  const Tensor* like[] = {&out[0]};
  const Tensor* vectors[] = {&in[1], &in[2]};
  const absl::string_view names[] = {"x", "y", "gamma", "beta", "running"};
  LS_ASSIGN_OR_RETURN(c::ChannelShape s,
                      ValidateBatchNorm(op::kBatchNormForward, in[0], like,
                                        vectors, out[1], names, a));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kBatchNormForward, in, out));
  if (has_saved) {
    LS_RETURN_IF_ERROR(ValidateSavedStats(op::kBatchNormForward, out[2], s.c));
    if (out[2].SharesStorageWith(out[0]) || out[2].SharesStorageWith(out[1])) {
      return absl::InvalidArgumentError(
          "batch_norm.forward: saved shares storage with y or running");
    }
  }
  const float* x = in[0].data<float>();
  const float* gamma = in[1].data<float>();
  const float* beta = in[2].data<float>();
  float* y = out[0].data<float>();
  float* running = out[1].data<float>();
  if (s.eval) {
    ParallelForBlocks(
        CpuThreadPool(), s.c, ChannelBlock(s), [&](int64_t b, int64_t e) {
          for (int64_t ch = b; ch < e; ++ch) {
            c::BatchNormForwardChannel(s, x, gamma, beta, y, running, ch);
          }
        });
    return absl::OkStatus();
  }
  // y on the lane kernels, then the running statistics as
  // BatchNormApplyChannel updates them.
  BatchNormTraining bn(s, BatchNormLanePass::kForward);
  bn.Run(x, nullptr, gamma, beta, y);
  if (has_saved) bn.SaveStats(out[2].data<float>());
  const float m = static_cast<float>(s.n * s.spatial);
  const float keep = 1.0f - s.momentum;
  for (int64_t ch = 0; ch < s.c; ++ch) {
    const float unbiased = bn.var_sum()[ch] / (m - 1.0f);
    running[ch] = keep * running[ch] + s.momentum * bn.mean()[ch];
    running[s.c + ch] = keep * running[s.c + ch] + s.momentum * unbiased;
  }
  return absl::OkStatus();
}

absl::Status BatchNormGradInputKernel(absl::Span<const Tensor> in,
                                      absl::Span<Tensor> out,
                                      const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(
      const bool has_saved,
      SavedStatsArity(op::kBatchNormGradInput, in, 4, out, 1, false));
  const Tensor* like[] = {&in[2], &out[0]};
  const Tensor* vectors[] = {&in[1]};
  const absl::string_view names[] = {"x", "dy", "dx", "gamma", "running"};
  LS_ASSIGN_OR_RETURN(c::ChannelShape s,
                      ValidateBatchNorm(op::kBatchNormGradInput, in[0], like,
                                        vectors, in[3], names, a));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kBatchNormGradInput, in, out));
  if (has_saved) {
    LS_RETURN_IF_ERROR(ValidateSavedStats(op::kBatchNormGradInput, in[4], s.c));
  }
  const float* x = in[0].data<float>();
  const float* gamma = in[1].data<float>();
  const float* dy = in[2].data<float>();
  const float* running = in[3].data<float>();
  float* dx = out[0].data<float>();
  if (s.eval) {
    ParallelForBlocks(
        CpuThreadPool(), s.c, ChannelBlock(s), [&](int64_t b, int64_t e) {
          for (int64_t ch = b; ch < e; ++ch) {
            c::BatchNormGradInputChannel(s, x, gamma, dy, running, dx, ch);
          }
        });
    return absl::OkStatus();
  }
  BatchNormTraining bn(s, BatchNormLanePass::kGradInput);
  if (has_saved) bn.UseStats(in[4].data<float>());
  bn.Run(x, dy, gamma, nullptr, dx);
  return absl::OkStatus();
}

// With the saved statistics, batch_norm.grad_params may also take gamma
// (one more input, last) and write batch_norm.grad_input's dx (one more
// output, last): in {x, dy, running, saved, gamma} out {dgamma, dbeta, dx}
// (kernels/ops/norm.h, "Both gradients in one call").
absl::Status BatchNormGradParamsKernel(absl::Span<const Tensor> in,
                                       absl::Span<Tensor> out,
                                       const OpAttrs& a) {
  const bool both = in.size() == 5 && out.size() == 3;
  bool has_saved = both;
  if (!both) {
    absl::StatusOr<bool> saved =
        SavedStatsArity(op::kBatchNormGradParams, in, 3, out, 2, false);
    if (!saved.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(saved.status().message(),
                       "; or 5 and 3 with gamma and dx (both gradients)"));
    }
    has_saved = *saved;
  }
  const Tensor* like[] = {&in[1], both ? &out[2] : &in[1]};
  const Tensor* vectors[] = {&out[0], &out[1], both ? &in[4] : &out[0]};
  const absl::string_view names[] = {"x",     "dy",    "dx",     "dgamma",
                                     "dbeta", "gamma", "running"};
  const absl::string_view plain_names[] = {"x", "dy", "dgamma", "dbeta",
                                           "running"};
  LS_ASSIGN_OR_RETURN(c::ChannelShape s,
                      both ? ValidateBatchNorm(op::kBatchNormGradParams, in[0],
                                               like, vectors, in[2], names, a)
                           : ValidateBatchNorm(op::kBatchNormGradParams, in[0],
                                               absl::MakeConstSpan(like, 1),
                                               absl::MakeConstSpan(vectors, 2),
                                               in[2], plain_names, a));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kBatchNormGradParams, in, out));
  for (size_t i = 0; i < out.size(); ++i) {
    for (size_t j = i + 1; j < out.size(); ++j) {
      if (out[i].SharesStorageWith(out[j])) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "batch_norm.grad_params: %s and %s share storage",
            i == 0 ? "dgamma" : "dbeta", j == 1 ? "dbeta" : "dx"));
      }
    }
  }
  if (has_saved) {
    LS_RETURN_IF_ERROR(
        ValidateSavedStats(op::kBatchNormGradParams, in[3], s.c));
  }
  const float* x = in[0].data<float>();
  const float* dy = in[1].data<float>();
  const float* running = in[2].data<float>();
  const float* gamma = both ? in[4].data<float>() : nullptr;
  float* dgamma = out[0].data<float>();
  float* dbeta = out[1].data<float>();
  float* dx = both ? out[2].data<float>() : nullptr;
  if (s.eval) {
    ParallelForBlocks(
        CpuThreadPool(), s.c, ChannelBlock(s), [&](int64_t b, int64_t e) {
          for (int64_t ch = b; ch < e; ++ch) {
            c::BatchNormGradParamsChannel(s, x, dy, running, dgamma, dbeta, ch);
            if (both) {
              c::BatchNormGradInputChannel(s, x, gamma, dy, running, dx, ch);
            }
          }
        });
    return absl::OkStatus();
  }
  // dgamma: the dot of (dy, xhat); dbeta: the sum of dy. Both: dx as
  // BatchNormGradInputKernel writes it, its sums from the same walk.
  BatchNormTraining bn(
      s, both ? BatchNormLanePass::kGradBoth : BatchNormLanePass::kGradParams);
  if (has_saved) bn.UseStats(in[3].data<float>());
  bn.Run(x, dy, gamma, nullptr, dx);
  const std::vector<float>& dot = both ? bn.param_dot() : bn.dot();
  const std::vector<float>& sum = both ? bn.param_sum() : bn.sum();
  for (int64_t ch = 0; ch < s.c; ++ch) {
    dgamma[ch] = c::norm_internal::CanonicalNanOf(dot[ch]);
    dbeta[ch] = c::norm_internal::CanonicalNanOf(sum[ch]);
  }
  return absl::OkStatus();
}

absl::Status AdamWKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                         const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op::kAdamWUpdate, in, 1, out, 3));
  const absl::string_view names[] = {"w", "m", "v"};
  LS_RETURN_IF_ERROR(ValidateOptimizer(op::kAdamWUpdate, in[0], out, names, a));
  const c::AdamScalars s = c::AdamWScalarsOf(a.learning_rate, a.beta1, a.beta2,
                                             a.epsilon, a.step, a.weight_decay);
  float* w = out[0].data<float>();
  float* m = out[1].data<float>();
  float* v = out[2].data<float>();
  const float* g = in[0].data<float>();
  const CpuIsa isa = ActiveCpuIsa();
  ParallelForBlocks(CpuThreadPool(), in[0].numel(), kElementBlock,
                    [&](int64_t b, int64_t e) {
                      AdamLanes(s, w + b, m + b, v + b, g + b, e - b, isa);
                    });
  return absl::OkStatus();
}

// One canonical reduction over the whole tensor: its chunks' chains side
// by side (SumSquaresLanes), the tree in chunk order.
absl::Status SumSquaresKernel(absl::Span<const Tensor> in,
                              absl::Span<Tensor> out, const OpAttrs&) {
  LS_RETURN_IF_ERROR(CheckArity(op::kGradNormSumSquares, in, 1, out, 1));
  const Tensor* t[] = {&in[0]};
  const absl::string_view names[] = {"g"};
  LS_RETURN_IF_ERROR(ValidateSameShapeFloat(op::kGradNormSumSquares, t, names));
  const Tensor* o[] = {&out[0]};
  const absl::string_view onames[] = {"s"};
  LS_RETURN_IF_ERROR(
      ValidateSameShapeFloat(op::kGradNormSumSquares, o, onames));
  if (out[0].numel() != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "grad_norm.sum_squares: s must have one element, got %s",
        out[0].DebugString()));
  }
  const float* g = in[0].data<float>();
  out[0].data<float>()[0] =
      SumSquaresLanes(g, in[0].numel(), ActiveCpuIsa(), CpuThreadPool());
  return absl::OkStatus();
}

// y may alias g.
absl::Status ScaleKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                         const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op::kGradNormScale, in, 1, out, 1));
  const Tensor* t[] = {&in[0], &out[0]};
  const absl::string_view names[] = {"g", "y"};
  LS_RETURN_IF_ERROR(ValidateSameShapeFloat(op::kGradNormScale, t, names));
  if (!std::isfinite(a.scale)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "grad_norm.scale: scale is %g, must be finite", a.scale));
  }
  const float* g = in[0].data<float>();
  float* y = out[0].data<float>();
  ParallelForBlocks(CpuThreadPool(), in[0].numel(), kElementBlock,
                    [&](int64_t b, int64_t e) {
                      for (int64_t i = b; i < e; ++i) y[i] = g[i] * a.scale;
                    });
  return absl::OkStatus();
}

// The id of every position is validated before anything is written.
absl::Status EmbeddingForwardKernel(absl::Span<const Tensor> in,
                                    absl::Span<Tensor> out, const OpAttrs&) {
  LS_RETURN_IF_ERROR(CheckArity(op::kEmbeddingForward, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(
      c::EmbeddingShape s,
      ValidateEmbedding(op::kEmbeddingForward, in[0], in[1], "w", out[0], "y"));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kEmbeddingForward, in, out));
  const int32_t* ids = in[0].data<int32_t>();
  const float* w = in[1].data<float>();
  float* y = out[0].data<float>();
  ParallelForBlocks(CpuThreadPool(), s.positions, RowBlock(s.dim),
                    [&](int64_t b, int64_t e) {
                      for (int64_t p = b; p < e; ++p) {
                        std::copy_n(w + static_cast<int64_t>(ids[p]) * s.dim,
                                    s.dim, y + p * s.dim);
                      }
                    });
  return absl::OkStatus();
}

// One embedding row's gradient, all D columns at once: the canonical
// chains of embedding.h run elementwise over the columns (vectorisable),
// and rows of more than kChunk terms combine their chain partials with the
// same binary-counter tree as canonical::TreeAccumulator, one stack of
// D-wide rows. Equal, bit for bit, to EmbeddingGradElement for every d.
void EmbeddingGradRow(const c::EmbeddingShape& s, const int64_t* order,
                      int64_t begin, int64_t end, const float* dy, float* dw,
                      std::vector<float>* stack) {
  const int64_t d = s.dim;
  std::fill_n(dw, d, 0.0f);
  if (end - begin <= c::kChunk) {
    for (int64_t k = begin; k < end; ++k) {
      const float* row = dy + order[k] * d;
      for (int64_t j = 0; j < d; ++j) dw[j] = dw[j] + row[j];
    }
    return;
  }
  // Stack of chain partials (each D wide) with their subtree sizes.
  int64_t sizes[64];
  int depth = 0;
  stack->resize(static_cast<size_t>(65 * d));
  float* part = stack->data() + 64 * d;
  for (int64_t k0 = begin; k0 < end; k0 += c::kChunk) {
    const int64_t k1 = std::min(end, k0 + c::kChunk);
    std::fill_n(part, d, 0.0f);
    for (int64_t k = k0; k < k1; ++k) {
      const float* row = dy + order[k] * d;
      for (int64_t j = 0; j < d; ++j) part[j] = part[j] + row[j];
    }
    int64_t size = 1;
    while (depth > 0 && sizes[depth - 1] == size) {
      const float* left = stack->data() + (depth - 1) * d;
      for (int64_t j = 0; j < d; ++j) part[j] = left[j] + part[j];
      size *= 2;
      --depth;
    }
    std::copy_n(part, d, stack->data() + depth * d);
    sizes[depth] = size;
    ++depth;
  }
  // Result(): fold from the right.
  std::copy_n(stack->data() + (depth - 1) * d, d, dw);
  for (int level = depth - 2; level >= 0; --level) {
    const float* left = stack->data() + level * d;
    for (int64_t j = 0; j < d; ++j) dw[j] = left[j] + dw[j];
  }
}

absl::Status EmbeddingGradWeightKernel(absl::Span<const Tensor> in,
                                       absl::Span<Tensor> out, const OpAttrs&) {
  LS_RETURN_IF_ERROR(CheckArity(op::kEmbeddingGradWeight, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(c::EmbeddingShape s,
                      ValidateEmbedding(op::kEmbeddingGradWeight, in[0], out[0],
                                        "dw", in[1], "dy"));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kEmbeddingGradWeight, in, out));
  std::vector<int64_t> offsets(static_cast<size_t>(s.vocab + 1));
  std::vector<int64_t> order(static_cast<size_t>(s.positions));
  c::SortPositionsById(s, in[0].data<int32_t>(), offsets.data(), order.data());
  const float* dy = in[1].data<float>();
  float* dw = out[0].data<float>();
  ParallelForBlocks(
      CpuThreadPool(), s.vocab, RowBlock(s.dim), [&](int64_t b, int64_t e) {
        std::vector<float> stack;
        for (int64_t v = b; v < e; ++v) {
          EmbeddingGradRow(s, order.data(), offsets[v], offsets[v + 1], dy,
                           dw + v * s.dim, &stack);
        }
      });
  return absl::OkStatus();
}

// y and mask may not alias x (x is read after the mask is written only
// for the same element, but the mask must survive for the backward).
absl::Status DropoutForwardKernel(absl::Span<const Tensor> in,
                                  absl::Span<Tensor> out, const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op::kDropoutForward, in, 1, out, 2));
  const Tensor* t[] = {&in[0], &out[0], &out[1]};
  const absl::string_view names[] = {"x", "y", "mask"};
  LS_ASSIGN_OR_RETURN(
      c::DropoutParams p,
      ValidateDropout(op::kDropoutForward, t, names, a, /*forward=*/true));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kDropoutForward, in, out));
  if (out[0].SharesStorageWith(out[1])) {
    return absl::InvalidArgumentError(
        "dropout.forward: y and mask share storage");
  }
  const float* x = in[0].data<float>();
  float* y = out[0].data<float>();
  float* mask = out[1].data<float>();
  const CpuIsa isa = ActiveCpuIsa();
  ParallelForBlocks(
      CpuThreadPool(), in[0].numel(), kElementBlock, [&](int64_t b, int64_t e) {
        // DropoutMaskElement: the Philox bits of a run of elements, then
        // mask and y, both on the vector (PhiloxBitsLanes,
        // DropoutApplyLanes).
        constexpr int64_t kRun = 1024;
        uint32_t bits[kRun];
        for (int64_t i0 = b; i0 < e; i0 += kRun) {
          const int64_t n = std::min(kRun, e - i0);
          PhiloxBitsLanes(p.seed, p.stream, static_cast<uint64_t>(i0), n, bits,
                          isa);
          DropoutApplyLanes(p, bits, x + i0, y + i0, mask + i0, n, isa);
        }
      });
  return absl::OkStatus();
}

// dx may alias dy.
absl::Status DropoutGradKernel(absl::Span<const Tensor> in,
                               absl::Span<Tensor> out, const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op::kDropoutGrad, in, 2, out, 1));
  const Tensor* t[] = {&in[0], &in[1], &out[0]};
  const absl::string_view names[] = {"mask", "dy", "dx"};
  LS_RETURN_IF_ERROR(
      ValidateDropout(op::kDropoutGrad, t, names, a, /*forward=*/false)
          .status());
  const float* mask = in[0].data<float>();
  const float* dy = in[1].data<float>();
  float* dx = out[0].data<float>();
  ParallelForBlocks(CpuThreadPool(), in[0].numel(), kElementBlock,
                    [&](int64_t b, int64_t e) {
                      for (int64_t i = b; i < e; ++i) dx[i] = dy[i] * mask[i];
                    });
  return absl::OkStatus();
}

// DEFAULT "atomic": positions split over tasks, each dy row added into its
// dw row with atomic float adds in arrival order.
absl::Status EmbeddingGradWeightAtomicKernel(absl::Span<const Tensor> in,
                                             absl::Span<Tensor> out,
                                             const OpAttrs&) {
  LS_RETURN_IF_ERROR(CheckArity(op::kEmbeddingGradWeight, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(c::EmbeddingShape s,
                      ValidateEmbedding(op::kEmbeddingGradWeight, in[0], out[0],
                                        "dw", in[1], "dy"));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kEmbeddingGradWeight, in, out));
  const int32_t* ids = in[0].data<int32_t>();
  const float* dy = in[1].data<float>();
  float* dw = out[0].data<float>();
  std::fill_n(dw, s.vocab * s.dim, 0.0f);
  if (s.positions == 0) return absl::OkStatus();
  ThreadPool* pool = CpuThreadPool();
  const int64_t tasks =
      std::min<int64_t>(s.positions, std::max(2, 4 * pool->num_threads()));
  const int64_t per_task = (s.positions + tasks - 1) / tasks;
  AtomicParallelFor(pool, tasks, [&](int64_t t) {
    const int64_t p1 = std::min(s.positions, (t + 1) * per_task);
    for (int64_t p = t * per_task; p < p1; ++p) {
      float* row = dw + static_cast<int64_t>(ids[p]) * s.dim;
      for (int64_t j = 0; j < s.dim; ++j) {
        AtomicAddFloat(row + j, dy[p * s.dim + j]);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace

namespace cpu_internal {

absl::Status RegisterNnKernels(Registry* registry) {
  struct Entry {
    const char* op;
    KernelFn fn;
  };
  using A = c::Activation;
  const Entry entries[] = {
      {op::kSigmoidForward, &ActivationForwardKernel<A::kSigmoid>},
      {op::kSigmoidGrad, &ActivationGradKernel<A::kSigmoid>},
      {op::kTanhForward, &ActivationForwardKernel<A::kTanh>},
      {op::kTanhGrad, &ActivationGradKernel<A::kTanh>},
      {op::kSiluForward, &ActivationForwardKernel<A::kSilu>},
      {op::kSiluGrad, &ActivationGradKernel<A::kSilu>},
      {op::kGeluForward, &ActivationForwardKernel<A::kGelu>},
      {op::kGeluGrad, &ActivationGradKernel<A::kGelu>},
      {op::kGeluTanhForward, &ActivationForwardKernel<A::kGeluTanh>},
      {op::kGeluTanhGrad, &ActivationGradKernel<A::kGeluTanh>},
      {op::kSoftmaxForward, &SoftmaxForwardKernel},
      {op::kSoftmaxGrad, &SoftmaxGradKernel},
      {op::kLayerNormForward, &LayerNormForwardKernel},
      {op::kLayerNormGradInput, &LayerNormGradInputKernel},
      {op::kLayerNormGradParams, &LayerNormGradParamsKernel},
      {op::kBatchNormForward, &BatchNormForwardKernel},
      {op::kBatchNormGradInput, &BatchNormGradInputKernel},
      {op::kBatchNormGradParams, &BatchNormGradParamsKernel},
      {op::kAdamWUpdate, &AdamWKernel},
      {op::kGradNormSumSquares, &SumSquaresKernel},
      {op::kGradNormScale, &ScaleKernel},
      {op::kEmbeddingForward, &EmbeddingForwardKernel},
      {op::kEmbeddingGradWeight, &EmbeddingGradWeightKernel},
      {op::kDropoutForward, &DropoutForwardKernel},
      {op::kDropoutGrad, &DropoutGradKernel},
  };
  for (const Entry& e : entries) {
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{e.op, Mode::kCanonical, kCanonicalAlgorithm, kCpuBackendName},
        e.fn));
  }
  return absl::OkStatus();
}

absl::Status RegisterNnDefaultKernels(Registry* registry) {
  for (const char* algorithm : {kDefaultAlgorithm, kAtomicAlgorithm}) {
    LS_RETURN_IF_ERROR(
        registry->Register(KernelKey{op::kEmbeddingGradWeight, Mode::kDefault,
                                     algorithm, kCpuBackendName},
                           &EmbeddingGradWeightAtomicKernel));
  }
  return absl::OkStatus();
}

}  // namespace cpu_internal
}  // namespace lockstep::kernels
