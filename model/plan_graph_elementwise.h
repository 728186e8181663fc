// Planning of the broadcasting graph primitives (op set v3): BINARY, UNARY,
// COMPARE, WHERE and REDUCE. Called by PlanModel (plan.cc), which prefixes
// the messages with the layer ("layers[i] "name": ...").
//
// Shapes are full shapes: a batched tensor's axis 0 is the batch axis; an
// unbatched one (CONSTANT, PARAMETER and ops of unbatched inputs only) has
// no batch axis. Inputs broadcast NumPy-style (aligned on the right); a
// batched input must have the output's rank (its batch axis is the output's
// axis 0), and an unbatched input of that rank has 1 on the batch axis.
// The output is batched when any input is (model/README.md, "Graph
// primitives").
#ifndef LOCKSTEP_MODEL_PLAN_GRAPH_ELEMENTWISE_H_
#define LOCKSTEP_MODEL_PLAN_GRAPH_ELEMENTWISE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "lockstep/v1/model.pb.h"
#include "model/plan.h"
#include "model/plan_graph.h"

namespace lockstep::model {

// One input of a graph layer as the planner sees it.
using GraphInput = internal::GraphInput;

// Fills lp->output_shape, lp->batched and lp->attrs for a BINARY, UNARY,
// COMPARE, WHERE or REDUCE layer; INVALID_ARGUMENT naming the field (e.g.
// "binary.kind", "reduce.axes[1]", "inputs") and the limit otherwise.
absl::Status PlanGraphElementwise(const lockstep::v1::Layer& layer,
                                  absl::Span<const GraphInput> inputs,
                                  LayerPlan* lp);

// False for the inputs no gradient flows into: both inputs of COMPARE and
// WHERE's condition (input 0).
bool GraphInputTakesGradient(lockstep::v1::LayerOp op, int input);

}  // namespace lockstep::model

#endif  // LOCKSTEP_MODEL_PLAN_GRAPH_ELEMENTWISE_H_
