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

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_GRAPH_OP_CASES_H_
