// Planning of the graph primitives of op set v3 that move data or hold
// values: CONSTANT, PARAMETER, GATHER, CONCAT, SLICE, and MATMUL with an
// unbatched operand (model/README.md, "Graph primitives").
//
// Internal to PlanModel (plan.cc): each function checks one layer's params
// and inputs and fills its LayerPlan. Errors are INVALID_ARGUMENT naming the
// field and the limit; the caller prefixes the layer. Thread-safe (pure).
#ifndef LOCKSTEP_MODEL_PLAN_GRAPH_H_
#define LOCKSTEP_MODEL_PLAN_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "lockstep/v1/model.pb.h"
#include "model/job_config.h"
#include "model/plan.h"

namespace lockstep::model::internal {

// Most elements a CONSTANT may hold (its values are inline in the model).
inline constexpr int64_t kMaxConstantElements = int64_t{1} << 20;

// One input of a layer as the planner resolved it.
struct GraphInput {
  std::vector<int64_t> shape;  // with the batch dimension when batched
  bool batched = true;
  std::string name;  // "the model input" or "layer \"x\"", for messages
  bool model_input = false;
  // The producing layer when it is a CONSTANT (its values), else null.
  const lockstep::v1::Layer* constant = nullptr;
};

// `axis` of a tensor of `rank` dimensions made non-negative (negative counts
// from the end); `field` names it in errors. A batched tensor's axis 0 is
// the batch axis, which `allow_batch` false refuses.
absl::StatusOr<int> NormalizeAxis(absl::string_view field, int64_t axis,
                                  int rank, bool batched, bool allow_batch);

// CONSTANT: constant.shape (each dimension 1..max_dim, rank <= 8, at most
// kMaxConstantElements elements) and exactly that many finite values.
absl::Status PlanConstant(const lockstep::v1::Layer& layer,
                          const Limits& limits, LayerPlan* lp);

// PARAMETER: parameter.shape (as CONSTANT's, up to max_tensor_elements) and
// a known parameter.init. Fills lp's output and returns its one param
// "value" (role WEIGHT) in *param for the caller to add. Fan-in / fan-out
// for the seeded initialisers: rank 0 -> (1, 1); rank 1 [D] -> (D, D);
// rank >= 2 [..., A, B] -> (A, B).
absl::Status PlanParameter(const lockstep::v1::Layer& layer,
                           const Limits& limits, LayerPlan* lp,
                           ParamPlan* param);

// GATHER of inputs {data, indices}: out = data.shape[:axis] +
// indices.shape + data.shape[axis+1:]. The indices are the model input's
// int32 token ids (data unbatched, axis 0) or a CONSTANT of whole numbers
// in [-data.shape[axis], data.shape[axis]) (wrapped once into lp->indices).
absl::Status PlanGather(const lockstep::v1::Layer& layer,
                        absl::Span<const GraphInput> in, const Limits& limits,
                        LayerPlan* lp);

// CONCAT of two or more inputs of one rank, all batched or all unbatched,
// equal except along concat.axis (not the batch axis).
absl::Status PlanConcat(const lockstep::v1::Layer& layer,
                        absl::Span<const GraphInput> in, LayerPlan* lp);

// SLICE of one input along slice.axis (not the batch axis), ONNX clamping,
// positive step; at least one element must remain. Fills lp->indices with
// the positions taken.
absl::Status PlanSlice(const lockstep::v1::Layer& layer,
                       absl::Span<const GraphInput> in, LayerPlan* lp);

// MATMUL where an operand is unbatched: both unbatched (rank >= 2, equal
// leading dimensions; unbatched output), or a batched [N, ..., M, K] times
// an unbatched 2-D [K, N'] (no matmul.transpose_a; batch broadcasting as
// torch.matmul; sets lp->last_axis). An unbatched a with a batched b is
// refused.
absl::Status PlanMatMulUnbatched(const lockstep::v1::MatmulParams& p,
                                 absl::Span<const GraphInput> in,
                                 const Limits& limits, LayerPlan* lp);

}  // namespace lockstep::model::internal

#endif  // LOCKSTEP_MODEL_PLAN_GRAPH_H_
