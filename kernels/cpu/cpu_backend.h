// The CPU backend.
//
// Each kernel validates its call (kernels/ops/validate.h,
// kernels/spatial/validate.h) and then computes. CANONICAL kernels are
// registered under (op, Mode::kCanonical, "canonical", "cpu"): dense.* and
// conv2d.* run the register-blocked, multi-threaded GEMM of gemm.h (conv2d
// as an implicit GEMM, conv_gemm.h) on the ISA isa.h picks, bit-identical to
// the scalar spec code (on the scalar ISA they run that code directly);
// bias_add.grad, max_pool2d.*, avg_pool2d.* and global_avg_pool.* run the
// multi-threaded kernels of lane_kernels.h, vectorised across outputs and
// bit-identical to the spec code as well; every other op runs the canonical
// op body from kernels/ops/ or kernels/spatial/ with its host loop driver,
// single threaded. The scalar spec-code kernels of dense.*, conv2d.*,
// bias_add.grad, max_pool2d.*, avg_pool2d.* and global_avg_pool.* stay
// registered under (op, kCanonical, "scalar", "cpu") for comparison.
//
// RegisterCpuDeterministicAndDefaultKernels adds the other modes' kernels
// (see its comment); the canonical registration does not include them.
//
// Kernels are thread-safe as long as concurrent calls do not share output
// tensors. Outputs must not share storage with inputs, except where the op's
// body allows it (relu, add, bias_add.forward, the optimizers' in-place
// state, flatten onto itself).
#ifndef LOCKSTEP_KERNELS_CPU_CPU_BACKEND_H_
#define LOCKSTEP_KERNELS_CPU_CPU_BACKEND_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"
#include "kernels/registry.h"

namespace lockstep::kernels {

// Algorithm names used by the CPU backend besides "canonical".
inline constexpr char kScalarAlgorithm[] = "scalar";
inline constexpr char kDeterministicAlgorithm[] = "deterministic";
inline constexpr char kDefaultAlgorithm[] = "default";
inline constexpr char kAtomicAlgorithm[] = "atomic";
inline constexpr char kSplitKAtomicAlgorithm[] = "split_k_atomic";
// conv2d.grad_weight in DEFAULT mode: "atomic" for depthwise calls
// (groups == input channels), "deterministic" for every other call, as a
// framework that sends depthwise convolutions to their own kernels does.
inline constexpr char kAtomicDepthwiseAlgorithm[] = "atomic_depthwise";

// Registers every CANONICAL CPU kernel: AllOpNames() (kernels/backend.h)
// and GraphDataOpNames() (kernels/graph_ops.h, graph_data_kernels.cc)
// under "canonical" (NnOpNames() multi-threaded over outputs, nn_kernels.cc),
// plus the scalar
// dense.*, conv2d.*, conv_transpose2d.*, bias_add.grad, max_pool2d.*,
// avg_pool2d.* and global_avg_pool.* kernels under "scalar".
// ALREADY_EXISTS if one is there.
absl::Status RegisterCpuCanonicalKernels(Registry* registry);

// Registers the CPU kernels of the other modes:
//   DETERMINISTIC "deterministic", for every op of AllOpNames() (so a
//       DETERMINISTIC job never falls back):
//     dense.forward, dense.grad_input, dense.grad_weight, conv2d.forward,
//       conv2d.grad_input, conv2d.grad_weight and conv_transpose2d.* (the
//       conv2d kernels on the conv2d whose input gradient it is): the GEMM
//       (conv2d through the lowering of conv_gemm.h) with one fma chain
//       per output over the
//       whole reduction (no chunks, no tree). Fixed order for any thread
//       count, so repeatable on one machine; the bits may differ between
//       ISAs (vector blocking) and from CANONICAL.
//     every other op: its CANONICAL kernel (already the fastest repeatable
//       path this backend has for it; bias_add.grad, max_pool2d.*,
//       avg_pool2d.* and global_avg_pool.* are the vectorised,
//       multi-threaded lane kernels).
//     matmul.forward, matmul.grad: the GEMM per batch entry with one fma
//       chain per output (as dense.*).
//   DEFAULT "default" and "split_k_atomic": dense.forward and
//       matmul.forward split over K, partials added into y in arrival
//       order, a block of rows at a time under that block's lock
//       (AtomicRowBlocks; NONDETERMINISTIC with more than one thread).
//   DEFAULT "default": dense.grad_input, dense.grad_weight, matmul.grad,
//       conv2d.forward, conv2d.grad_input, conv_transpose2d.forward,
//       conv_transpose2d.grad_input: as DETERMINISTIC.
//   DEFAULT "default" and "atomic": bias_add.grad, conv2d.grad_weight and
//       conv_transpose2d.grad_weight,
//       split over the batch with atomic accumulation (the convolutions'
//       per-thread weight gradients by blocks of output channels under
//       AtomicRowBlocks' locks), and
//       embedding.grad_weight, split over the positions with every dy row
//       added atomically (NONDETERMINISTIC).
//   DEFAULT "default" and "atomic": binary.grad and where.grad, their
//       broadcast-gradient reductions cut into 256-term slices added
//       atomically (NONDETERMINISTIC).
//   DEFAULT "default", every other op: its DETERMINISTIC kernel (so a
//       DEFAULT job never falls back either).
//   DEFAULT "deterministic", every op: its DETERMINISTIC kernel, for a
//       DEFAULT job that pins some ops to repeatable kernels
//       (config.op_algorithms) to isolate the others' nondeterminism.
// Results of the DEFAULT and DETERMINISTIC kernels are
// within float rounding of CANONICAL's. ALREADY_EXISTS if one is there.
absl::Status RegisterCpuDeterministicAndDefaultKernels(Registry* registry);

class CpuBackend final : public Backend {
 public:
  absl::string_view name() const override { return kCpuBackendName; }
  absl::Status RegisterKernels(Registry* registry) const override {
    return RegisterCpuCanonicalKernels(registry);
  }
};

namespace cpu_internal {
// Registration of the spatial kernels (spatial_kernels.cc).
absl::Status RegisterSpatialKernels(Registry* registry);
// The CANONICAL kernels of NnOpNames() (nn_kernels.cc).
absl::Status RegisterNnKernels(Registry* registry);
// The DEFAULT "default"/"atomic" embedding.grad_weight (nn_kernels.cc).
absl::Status RegisterNnDefaultKernels(Registry* registry);
// The DETERMINISTIC and DEFAULT conv2d kernels (spatial_kernels.cc).
absl::Status RegisterSpatialDeterministicAndDefaultKernels(Registry* registry);
// matmul.*, transpose and reshape (matmul_kernels.cc): the CANONICAL
// kernels, and matmul's DETERMINISTIC and DEFAULT ones.
absl::Status RegisterMatMulCanonicalKernels(Registry* registry);
absl::Status RegisterMatMulDeterministicAndDefaultKernels(Registry* registry);
// binary.*, unary.*, compare, where.*, reduce.* (graph_elementwise_kernels.cc):
// the CANONICAL kernels (which DETERMINISTIC reuses), and the DEFAULT
// "default" / "atomic" binary.grad and where.grad, whose broadcast-gradient
// reductions add slices atomically.
absl::Status RegisterGraphElementwiseKernels(Registry* registry);
absl::Status RegisterGraphElementwiseDefaultKernels(Registry* registry);
// The GEMM-based CANONICAL dense kernels (fast_kernels.cc).
absl::Status RegisterFastCanonicalKernels(Registry* registry);
// kernels/cpu/graph_data_kernels.cc (kernels/graph_ops.h).
absl::Status RegisterGraphDataKernels(Registry* registry);
absl::Status RegisterGraphDataDefaultKernels(Registry* registry);
}  // namespace cpu_internal

}  // namespace lockstep::kernels

#endif  // LOCKSTEP_KERNELS_CPU_CPU_BACKEND_H_
