// Seeded kernel calls for the graph data ops (kernels/graph_ops.h), shaped
// like kernels/op_cases.h's OpCases: every op of GraphDataOpNames() at
// least once, with a gather gradient whose segments cross the 256-term
// chunk boundary, repeated and unused indices. Used by the selftest
// (worker/selftest.h).
#ifndef LOCKSTEP_KERNELS_GRAPH_OP_CASES_H_
#define LOCKSTEP_KERNELS_GRAPH_OP_CASES_H_

#include <cstdint>
#include <vector>

#include "kernels/op_cases.h"

namespace lockstep::kernels {

std::vector<OpCase> GraphDataOpCases(InputFamily family, uint32_t seed);

// Edge cases of every op set v3 graph primitive (GraphDataOpNames() and
// GraphElementwiseOpNames()) and of MATMUL's unbatched-operand form, for
// backends compared bit for bit with the CPU (the CUDA host emulation):
// every kind; operands of rank 0 to 4 broadcast on either side; NaN, +-Inf,
// +-0 and subnormals in the inputs; reductions over several axis sets with
// and without keepdims, none, all, and chains longer than 256 terms;
// repeated, unused and stepped gather / slice positions; concat of three
// parts; a rank-2 matmul with 600 rows (the [N, ..., M, K] x [K, P] view).
// Inputs hold NaN, so they are not for comparisons across device classes
// (NaN payloads may differ, docs/canonical-arithmetic.md section 7).
std::vector<OpCase> GraphEdgeOpCases(uint32_t seed);

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_GRAPH_OP_CASES_H_
