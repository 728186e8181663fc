// Host-side validation of op calls: Tensor arguments and OpAttrs in, the
// canonical bodies' shape structs out. Every backend calls these before it
// computes anything, so a bad call fails the same way on every device.
// Errors are INVALID_ARGUMENT and name the op, the argument and the limit.
//
// Thread-safe (pure functions).
#ifndef LOCKSTEP_KERNELS_OPS_VALIDATE_H_
#define LOCKSTEP_KERNELS_OPS_VALIDATE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "kernels/ops/dense.h"
#include "kernels/ops/dropout.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/matmul.h"
#include "kernels/ops/movement.h"
#include "kernels/ops/norm.h"
#include "kernels/ops/optimizers.h"
#include "kernels/ops/softmax_xent.h"
#include "kernels/tensor.h"

namespace lockstep::kernels {

// "<op>: expected N inputs (names), got M" unless the counts match.
absl::Status CheckArity(absl::string_view op, absl::Span<const Tensor> inputs,
                        size_t num_inputs, absl::Span<Tensor> outputs,
                        size_t num_outputs);

// dense.forward: x, w, y float32 rank 2; op(x) [M, K], op(w) [K, N], y [M, N].
absl::StatusOr<canonical::DenseShape> ValidateDenseForward(
    const Tensor& x, const Tensor& w, const Tensor& y, const OpAttrs& attrs);
// dense.grad_input: dy [M, N], w as in forward; dx has x's stored shape.
absl::StatusOr<canonical::DenseShape> ValidateDenseGradInput(
    const Tensor& dy, const Tensor& w, const Tensor& dx, const OpAttrs& attrs);
// dense.grad_weight: x as in forward, dy [M, N]; dw has w's stored shape.
absl::StatusOr<canonical::DenseShape> ValidateDenseGradWeight(
    const Tensor& x, const Tensor& dy, const Tensor& dw, const OpAttrs& attrs);

// bias_add.forward: x [N, C, ...] (rank >= 2), b [C], y like x.
absl::StatusOr<canonical::BiasShape> ValidateBiasAdd(const Tensor& x,
                                                     const Tensor& b,
                                                     const Tensor& y);
// bias_add.grad: dy [N, C, ...], db [C].
absl::StatusOr<canonical::BiasShape> ValidateBiasAddGrad(const Tensor& dy,
                                                         const Tensor& db);

// All float32 and of identical shape (relu, add). names[i] names tensors[i].
absl::Status ValidateSameShapeFloat(absl::string_view op,
                                    absl::Span<const Tensor* const> tensors,
                                    absl::Span<const absl::string_view> names);

// flatten: same dtype, same element count, same leading dimension.
absl::Status ValidateFlatten(const Tensor& x, const Tensor& y);

// softmax_xent.*: logits float32 [N, C] with 1 <= N <= 2^24 and C >= 1,
// labels int32 [N] with every label in [0, C) (checked here, before any
// compute).
absl::StatusOr<canonical::SoftmaxShape> ValidateSoftmaxXent(
    absl::string_view op, const Tensor& logits, const Tensor& labels);

// sgd/momentum/adam: state tensors float32 and shaped like g;
// learning_rate finite and >= 0; momentum finite and >= 0; Adam: beta1 and
// beta2 in [0, 1), epsilon finite and > 0, step >= 1.
absl::Status ValidateOptimizer(absl::string_view op, const Tensor& g,
                               absl::Span<const Tensor> state,
                               absl::Span<const absl::string_view> state_names,
                               const OpAttrs& attrs);

// softmax.* and layer_norm.*: x float32 of rank >= 1 with last dimension
// D in 1 .. 2^24; every tensor of `like_x` float32 and shaped like x; every
// tensor of `vectors` float32 [D]. With uses_epsilon (layer_norm),
// attrs.norm_epsilon must be finite and > 0. names: x's name, then like_x's,
// then vectors'. No output may alias an input (checked by the caller).
absl::StatusOr<canonical::RowShape> ValidateRows(
    absl::string_view op, const Tensor& x,
    absl::Span<const Tensor* const> like_x,
    absl::Span<const Tensor* const> vectors,
    absl::Span<const absl::string_view> names, const OpAttrs& attrs,
    bool uses_epsilon);

// batch_norm.*: x float32 [N, C, ...] (rank >= 2); like_x shaped like x;
// channel_vectors float32 [C]; running float32 [2, C]; norm_epsilon finite
// and > 0; batch_norm_momentum in [0, 1]; in training N * (spatial size)
// >= 2 (the unbiased variance). names: x, like_x..., channel_vectors...,
// running.
absl::StatusOr<canonical::ChannelShape> ValidateBatchNorm(
    absl::string_view op, const Tensor& x,
    absl::Span<const Tensor* const> like_x,
    absl::Span<const Tensor* const> channel_vectors, const Tensor& running,
    absl::Span<const absl::string_view> names, const OpAttrs& attrs);

// The optional saved statistics of batch_norm.* and layer_norm.*
// (kernels/ops/norm.h): float32 [2, count], count = the channels (C) or
// the rows (R).
absl::Status ValidateSavedStats(absl::string_view op, const Tensor& saved,
                                int64_t count);

// embedding.forward (table = w, rows = y) and embedding.grad_weight
// (table = dw, rows = dy): ids int32 of rank >= 1, every id in [0, V);
// table float32 [V, D] with 1 <= V <= kMaxEmbeddingVocab and D >= 1; rows
// float32 of shape ids.shape + [D].
absl::StatusOr<canonical::EmbeddingShape> ValidateEmbedding(
    absl::string_view op, const Tensor& ids, const Tensor& table,
    absl::string_view table_name, const Tensor& rows,
    absl::string_view rows_name);

// dropout.forward (x, y, mask) and dropout.grad (mask, dy, dx): every
// tensor float32 of one shape; for the forward attrs.dropout_rate finite
// in [0, 1). Returns the mask parameters (forward) or default ones (grad).
absl::StatusOr<canonical::DropoutParams> ValidateDropout(
    absl::string_view op, absl::Span<const Tensor* const> tensors,
    absl::Span<const absl::string_view> names, const OpAttrs& attrs,
    bool forward);

// matmul.forward (y = y, da = db = null) and matmul.grad (y = dy, da, db):
// a, b float32 of one rank >= 2 with equal leading (batch) dimensions;
// op(a) [.., M, K] and op(b) [.., K, N] (transpose_x / transpose_w);
// y [.., M, N]; da shaped like a, db like b; scale finite.
absl::StatusOr<canonical::MatMulDims> ValidateMatMul(
    absl::string_view op, const Tensor& a, const Tensor& b, const Tensor& y,
    absl::string_view y_name, const Tensor* da, const Tensor* db,
    const OpAttrs& attrs);

// A whole matmul.forward (in {a, b}, out {y}) or matmul.grad (in {a, b, dy},
// out {da, db}) call, as every backend checks it: the arity, the shapes
// (ValidateMatMul), no output sharing an input or (grad) another output.
absl::StatusOr<canonical::MatMulDims> ValidateMatMulCall(
    absl::string_view op, absl::Span<const Tensor> in, absl::Span<Tensor> out,
    const OpAttrs& attrs);

// transpose: x, y float32; attrs.perm a permutation of x's axes;
// y.shape[d] = x.shape[perm[d]].
absl::StatusOr<canonical::TransposeShape> ValidateTranspose(
    const Tensor& x, const Tensor& y, const OpAttrs& attrs);

// reshape: x, y float32 with the same element count.
absl::Status ValidateReshape(const Tensor& x, const Tensor& y);

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_OPS_VALIDATE_H_
