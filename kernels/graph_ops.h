// Op names and calling conventions of the graph primitives that hold or
// move data (op set v3; docs/canonical-arithmetic.md, "Graph primitives:
// values and data movement"). Same kernel calling convention as
// kernels/backend.h; the layouts below are views the executor forms, so
// no kernel needs an axis attribute:
//
//   constant            in {v}          out {y}     y = v (a copy)
//   parameter.forward   in {value}      out {y}     y = value
//   parameter.grad      in {dy}         out {dvalue}  dvalue = dy
//       (same element count, any shapes)
//   gather.forward      in {x [A, V, B], idx int32 [P]} out {y [A, P, B]}
//                       y[a, p, b] = x[a, idx[p], b]
//   gather.grad         in {idx [P], dy [A, P, B]} out {dx [A, V, B]}
//                       dx[a, v, b] = canonical sum over the p with
//                       idx[p] == v in increasing p (EMBEDDING's sorted
//                       segment sum; +0.0f where none)
//   slice.forward       as gather.forward, idx the positions taken
//                       (distinct, increasing)
//   slice.grad          in {idx [P], dy [A, P, B]} out {dx [A, V, B]}
//                       dx[a, idx[p], b] = dy[a, p, b], +0.0f elsewhere
//   concat.forward      in {x_k [A, C_k, B], k = 0..K-1} out {y [A, C, B]}
//                       C = sum C_k, inputs placed in order along C
//   concat.grad         in {dy [A, C, B]} out {dx_k [A, C_k, B] ...}
//
// Index inputs are validated (each in [0, V)) before anything is written.
#ifndef LOCKSTEP_KERNELS_GRAPH_OPS_H_
#define LOCKSTEP_KERNELS_GRAPH_OPS_H_

#include <string>
#include <vector>

namespace lockstep::kernels {
namespace op {
inline constexpr char kConstant[] = "constant";
inline constexpr char kParameterForward[] = "parameter.forward";
inline constexpr char kParameterGrad[] = "parameter.grad";
inline constexpr char kGatherForward[] = "gather.forward";
inline constexpr char kGatherGrad[] = "gather.grad";
inline constexpr char kSliceForward[] = "slice.forward";
inline constexpr char kSliceGrad[] = "slice.grad";
inline constexpr char kConcatForward[] = "concat.forward";
inline constexpr char kConcatGrad[] = "concat.grad";
}  // namespace op

// The ops above, in that order. Not part of AllOpNames(); registered by the
// CPU backend (RegisterCpuGraphDataKernels) and the CUDA backend
// (kernels/cuda/cuda_backend.h, CudaCanonicalOpNames()).
inline std::vector<std::string> GraphDataOpNames() {
  return {op::kConstant,      op::kParameterForward, op::kParameterGrad,
          op::kGatherForward, op::kGatherGrad,       op::kSliceForward,
          op::kSliceGrad,     op::kConcatForward,    op::kConcatGrad};
}

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_GRAPH_OPS_H_
