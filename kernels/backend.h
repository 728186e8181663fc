// The kernel calling convention and the backend interface.
//
// A kernel is a plain function
//
//   absl::Status Kernel(absl::Span<const Tensor> inputs,
//                       absl::Span<Tensor> outputs, const OpAttrs& attrs);
//
// Outputs are preallocated by the caller with their final shapes (Tensor is
// a shared handle, so the kernel writes through it); optimizer state and
// weights updated in place are passed as outputs. A kernel validates arity,
// dtypes, shapes and attributes and returns INVALID_ARGUMENT naming the
// argument before it computes anything; on error the outputs are untouched.
//
// Per-op conventions (shapes row-major; image tensors NCHW, weights OIHW):
//
//   dense.forward       in {x, w}      out {y}      y = op(x) op(w)
//   dense.grad_input    in {dy, w}     out {dx}     dx = dy op(w)^T
//   dense.grad_weight   in {x, dy}     out {dw}     dw = op(x)^T dy
//       op(x) is [M, K]: x is [M, K], or [K, M] with transpose_x;
//       op(w) is [K, N]: w is [K, N], or [N, K] with transpose_w;
//       dx and dw have the stored shapes of x and w.
//   bias_add.forward    in {x, b}      out {y}      x [N, C, ...], b [C]
//   bias_add.grad       in {dy}        out {db}     db[c] = sum over (n, ...)
//   relu.forward        in {x}         out {y}
//   relu.grad           in {x, dy}     out {dx}     dx = x > 0 ? dy : 0
//   flatten             in {x}         out {y}      row-major copy, same N
//   add.forward         in {a, b}      out {y}      y = a + b
//   add.grad            in {dy}        out {da, db} da = db = dy
//   softmax_xent.forward in {logits [N, C], labels int32 [N]} out {loss}
//                                                   loss has one element
//   softmax_xent.grad   in {logits, labels}        out {dlogits}
//   sgd.update          in {g}         out {w}
//   momentum.update     in {g}         out {w, v}
//   adam.update         in {g}         out {w, m, v}
//   adamw.update        in {g}         out {w, m, v}   (weight_decay)
//   grad_norm.sum_squares in {g}       out {s [1]}
//   grad_norm.scale     in {g}         out {y}         y = g * scale (y may
//                                                      alias g)
//   conv2d.forward      in {x, w}      out {y}       (spatial ops: see
//   conv2d.grad_input   in {dy, w}     out {dx}       kernels/spatial/SPEC.md
//   conv2d.grad_weight  in {x, dy}     out {dw}       for the arithmetic)
//   conv_transpose2d.forward     in {x, w}  out {y}   the input gradient,
//   conv_transpose2d.grad_input  in {dy, w} out {dx}  forward and weight
//   conv_transpose2d.grad_weight in {x, dy} out {dw}  gradient of the conv2d
//       over y (w [C_in, C_out / groups, kh, kw]; attrs those of that conv2d)
//   max_pool2d.forward  in {x}         out {y}
//   max_pool2d.grad     in {x, dy}     out {dx}
//   avg_pool2d.forward  in {x}         out {y}
//   avg_pool2d.grad     in {dy}        out {dx}
//   global_avg_pool.forward in {x}     out {y}       y [N, C] or [N, C, 1, 1]
//   global_avg_pool.grad    in {dy}    out {dx}
//   resize_bilinear.forward in {x}     out {y}       output size = y's shape
//   resize_bilinear.grad    in {dy}    out {dx}
//   sigmoid|tanh|silu|gelu|gelu_tanh.forward  in {x}      out {y}
//   sigmoid|tanh|silu|gelu|gelu_tanh.grad     in {x, dy}  out {dx}
//   softmax.forward     in {x}         out {y}       over the last axis
//   softmax.grad        in {x, dy}     out {dx}
//   layer_norm.forward  in {x, gamma, beta} out {y}  over the last axis,
//   layer_norm.grad_input  in {x, gamma, dy} out {dx}      gamma, beta [D]
//   layer_norm.grad_params in {x, dy}   out {dgamma, dbeta}
//   batch_norm.forward  in {x, gamma, beta} out {y, running}  x [N, C, ...],
//   batch_norm.grad_input  in {x, gamma, dy, running} out {dx}  running [2, C]
//   batch_norm.grad_params in {x, dy, running} out {dgamma, dbeta}
//       (kernels/ops/activations.h and kernels/ops/norm.h: the arithmetic;
//       norm.h also: the CPU kernels' optional saved statistics, and
//       grad_params writing grad_input's dx in the same call)
//   embedding.forward   in {ids int32 [P...], w [V, D]} out {y [P..., D]}
//   embedding.grad_weight in {ids, dy [P..., D]}   out {dw [V, D]}
//       (kernels/ops/embedding.h: a gather and a sorted segment sum)
//   dropout.forward     in {x}         out {y, mask}  (dropout_rate, _seed,
//   dropout.grad        in {mask, dy}  out {dx}        _stream; dropout.h)
//   matmul.forward      in {a, b}      out {y}       batched: a [B..., M, K],
//   matmul.grad         in {a, b, dy}  out {da, db}  b [B..., K, N]
//   (transpose_x
//       / transpose_w transpose a / b; scale; kernels/ops/matmul.h)
//   transpose           in {x}         out {y}       axes permuted by perm
//   reshape             in {x}         out {y}       same elements, y's shape
//       (kernels/ops/movement.h)
//   binary.forward      in {a, b}      out {y}       broadcast; graph_kind
//   binary.grad         in {a, b, dy}  out {da, db}  reduced to a's, b's shape
//   unary.forward       in {x}         out {y}       graph_kind
//   unary.grad          in {x, dy}     out {dx}
//   compare             in {a, b}      out {y}       1.0f / 0.0f; graph_kind
//   where.forward       in {cond, a, b} out {y}      cond != 0 ? a : b
//   where.grad          in {cond, dy}  out {da, db}  reduced to a's, b's shape
//   reduce.forward      in {x}         out {y}       reduce_axes, graph_kind
//   reduce.grad         in {dy}        out {dx}      (kernels/ops/
//                                                    graph_elementwise.h)
#ifndef LOCKSTEP_KERNELS_BACKEND_H_
#define LOCKSTEP_KERNELS_BACKEND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/tensor.h"

namespace lockstep::kernels {

// JobConfig.determinism: which family of kernels runs.
enum class Mode : uint8_t {
  kCanonical = 0,      // portable, spec-defined bits on every device
  kDeterministic = 1,  // deterministic on one hardware class
  kDefault = 2,        // fastest, may be nondeterministic
};
// "CANONICAL", "DETERMINISTIC", "DEFAULT".
absl::string_view ModeName(Mode mode);

// Algorithm name of the spec-defined kernels.
inline constexpr char kCanonicalAlgorithm[] = "canonical";

// Registry backend names (KernelKey::backend).
inline constexpr char kCpuBackendName[] = "cpu";
inline constexpr char kCudaBackendName[] = "cuda";

// Op names (the registry's first key component).
namespace op {
inline constexpr char kDenseForward[] = "dense.forward";
inline constexpr char kDenseGradInput[] = "dense.grad_input";
inline constexpr char kDenseGradWeight[] = "dense.grad_weight";
inline constexpr char kBiasAddForward[] = "bias_add.forward";
inline constexpr char kBiasAddGrad[] = "bias_add.grad";
inline constexpr char kReluForward[] = "relu.forward";
inline constexpr char kReluGrad[] = "relu.grad";
inline constexpr char kFlatten[] = "flatten";
inline constexpr char kAddForward[] = "add.forward";
inline constexpr char kAddGrad[] = "add.grad";
inline constexpr char kSoftmaxXentForward[] = "softmax_xent.forward";
inline constexpr char kSoftmaxXentGrad[] = "softmax_xent.grad";
inline constexpr char kSgdUpdate[] = "sgd.update";
inline constexpr char kMomentumUpdate[] = "momentum.update";
inline constexpr char kAdamUpdate[] = "adam.update";
inline constexpr char kConv2dForward[] = "conv2d.forward";
inline constexpr char kConv2dGradInput[] = "conv2d.grad_input";
inline constexpr char kConv2dGradWeight[] = "conv2d.grad_weight";
inline constexpr char kConvTranspose2dForward[] = "conv_transpose2d.forward";
inline constexpr char kConvTranspose2dGradInput[] =
    "conv_transpose2d.grad_input";
inline constexpr char kConvTranspose2dGradWeight[] =
    "conv_transpose2d.grad_weight";
inline constexpr char kMaxPool2dForward[] = "max_pool2d.forward";
inline constexpr char kMaxPool2dGrad[] = "max_pool2d.grad";
inline constexpr char kAvgPool2dForward[] = "avg_pool2d.forward";
inline constexpr char kAvgPool2dGrad[] = "avg_pool2d.grad";
inline constexpr char kGlobalAvgPoolForward[] = "global_avg_pool.forward";
inline constexpr char kGlobalAvgPoolGrad[] = "global_avg_pool.grad";
inline constexpr char kResizeBilinearForward[] = "resize_bilinear.forward";
inline constexpr char kResizeBilinearGrad[] = "resize_bilinear.grad";
inline constexpr char kSigmoidForward[] = "sigmoid.forward";
inline constexpr char kSigmoidGrad[] = "sigmoid.grad";
inline constexpr char kTanhForward[] = "tanh.forward";
inline constexpr char kTanhGrad[] = "tanh.grad";
inline constexpr char kSiluForward[] = "silu.forward";
inline constexpr char kSiluGrad[] = "silu.grad";
inline constexpr char kGeluForward[] = "gelu.forward";
inline constexpr char kGeluGrad[] = "gelu.grad";
inline constexpr char kGeluTanhForward[] = "gelu_tanh.forward";
inline constexpr char kGeluTanhGrad[] = "gelu_tanh.grad";
inline constexpr char kSoftmaxForward[] = "softmax.forward";
inline constexpr char kSoftmaxGrad[] = "softmax.grad";
inline constexpr char kLayerNormForward[] = "layer_norm.forward";
inline constexpr char kLayerNormGradInput[] = "layer_norm.grad_input";
inline constexpr char kLayerNormGradParams[] = "layer_norm.grad_params";
inline constexpr char kBatchNormForward[] = "batch_norm.forward";
inline constexpr char kBatchNormGradInput[] = "batch_norm.grad_input";
inline constexpr char kBatchNormGradParams[] = "batch_norm.grad_params";
inline constexpr char kAdamWUpdate[] = "adamw.update";
inline constexpr char kGradNormSumSquares[] = "grad_norm.sum_squares";
inline constexpr char kGradNormScale[] = "grad_norm.scale";
inline constexpr char kEmbeddingForward[] = "embedding.forward";
inline constexpr char kEmbeddingGradWeight[] = "embedding.grad_weight";
inline constexpr char kDropoutForward[] = "dropout.forward";
inline constexpr char kDropoutGrad[] = "dropout.grad";
inline constexpr char kMatMulForward[] = "matmul.forward";
inline constexpr char kMatMulGrad[] = "matmul.grad";
inline constexpr char kTranspose[] = "transpose";
inline constexpr char kReshape[] = "reshape";
inline constexpr char kBinaryForward[] = "binary.forward";
inline constexpr char kBinaryGrad[] = "binary.grad";
inline constexpr char kUnaryForward[] = "unary.forward";
inline constexpr char kUnaryGrad[] = "unary.grad";
inline constexpr char kCompare[] = "compare";
inline constexpr char kWhereForward[] = "where.forward";
inline constexpr char kWhereGrad[] = "where.grad";
inline constexpr char kReduceForward[] = "reduce.forward";
inline constexpr char kReduceGrad[] = "reduce.grad";
}  // namespace op

// The dense-family, loss and optimizer ops (kernels/ops/).
std::vector<std::string> DenseFamilyOpNames();
// The spatial ops (kernels/spatial/).
std::vector<std::string> SpatialOpNames();
// Op set v2: activations, softmax, normalisation, AdamW, gradient clipping
// embeddings and dropout (kernels/ops/activations.h, norm.h, optimizers.h,
// embedding.h, dropout.h).
std::vector<std::string> NnOpNames();
// Transformer primitives: batched matmul, transpose and reshape
// (kernels/ops/matmul.h, movement.h).
std::vector<std::string> TransformerOpNames();
// Graph primitives with broadcasting: binary, unary, compare, where and
// reduce (kernels/ops/graph_elementwise.h).
std::vector<std::string> GraphElementwiseOpNames();
// DenseFamilyOpNames() + SpatialOpNames() + NnOpNames() +
// TransformerOpNames() + GraphElementwiseOpNames(), in that order.
std::vector<std::string> AllOpNames();

// Attributes of one op call. Each op reads only its own fields (listed per
// field); the others are ignored. Defaults are the usual neutral values.
struct OpAttrs {
  // dense.*: the stored x is [K, M] / the stored w is [N, K]. matmul.*:
  // the stored a is [B..., K, M] / the stored b is [B..., N, K].
  bool transpose_x = false;
  bool transpose_w = false;

  // conv2d.*, max_pool2d.*, avg_pool2d.*: window and geometry (H, W).
  int64_t kernel_h = 1;  // pooling window (conv takes it from w's shape)
  int64_t kernel_w = 1;
  int64_t stride_h = 1;
  int64_t stride_w = 1;
  int64_t pad_top = 0;  // zero padding, may be asymmetric ("SAME")
  int64_t pad_bottom = 0;
  int64_t pad_left = 0;
  int64_t pad_right = 0;
  int64_t dilation_h = 1;  // conv2d only
  int64_t dilation_w = 1;
  int64_t groups = 1;             // conv2d: divides C_in and C_out
  bool count_include_pad = true;  // avg_pool2d: divisor KH*KW (true) or
                                  // the number of real taps (false)

  // sgd.update, momentum.update, adam.update.
  float learning_rate = 0.0f;
  float momentum = 0.0f;  // momentum.update: v = momentum * v + g
  float beta1 = 0.9f;     // adam.update
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  int64_t step = 1;           // adam.update: 1-based step number t
  float weight_decay = 0.0f;  // adamw.update (decoupled)
  float scale = 1.0f;         // grad_norm.scale; matmul.* (after the dot)

  // layer_norm.*, batch_norm.*: added to the variance before the square
  // root.
  float norm_epsilon = 1e-5f;
  // batch_norm.*: running statistics instead of batch statistics (and no
  // update of them); the running statistics' update factor in training.
  bool batch_norm_eval = false;
  float batch_norm_momentum = 0.1f;

  // dropout.forward: the drop probability in [0, 1) and the Philox seed and
  // stream of the mask (kernels/ops/dropout.h).
  float dropout_rate = 0.0f;
  uint64_t dropout_seed = 0;
  uint64_t dropout_stream = 0;

  // softmax.*: causal rows of [.., T, T] scores (kernels/ops/norm.h).
  bool causal = false;

  // transpose: y axis d is x axis perm[d], d < perm_rank (= x's rank).
  int perm_rank = 0;
  int perm[kMaxRank] = {};

  // binary.*, unary.*, compare, reduce.*: the kind, numbered like the
  // proto's BinaryKind / UnaryKind / CompareKind / ReduceKind.
  int graph_kind = 0;
  // reduce.*: bit d set when x's axis d is reduced; keepdims keeps the
  // reduced axes in y as size 1.
  uint32_t reduce_axes = 0;
  bool reduce_keepdims = false;
};

// INVALID_ARGUMENT "<op>: output O shares storage with input I" when an
// output aliases an input, for the kernels whose bodies do not allow it.
absl::Status CheckNoAlias(absl::string_view op, absl::Span<const Tensor> in,
                          absl::Span<Tensor> out);

using KernelFn = absl::Status (*)(absl::Span<const Tensor> inputs,
                                  absl::Span<Tensor> outputs,
                                  const OpAttrs& attrs);

class Registry;

// A device backend ("cpu", "cuda"): names itself and fills the registry with
// its kernels. Implementations are immutable after construction and
// thread-compatible.
class Backend {
 public:
  virtual ~Backend() = default;
  // The registry's backend key component, e.g. "cpu".
  virtual absl::string_view name() const = 0;
  // Registers every kernel of this backend. ALREADY_EXISTS when one of its
  // keys is already taken.
  virtual absl::Status RegisterKernels(Registry* registry) const = 0;
};

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_BACKEND_H_
