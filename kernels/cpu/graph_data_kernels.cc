// CPU kernels of the graph data primitives (kernels/graph_ops.h): copies,
// gathers, slices and concatenations, and the gather's scatter-add
// backward. Pure data movement except gather.grad, whose sums are
// EMBEDDING's canonical sorted segment sums (kernels/ops/embedding.h), one
// per (a, v, b) element; the work is split over rows (a, v) only, so the
// bits do not depend on the thread count or the ISA.
//
// DEFAULT gather.grad "atomic": the positions split over tasks, each dy
// row added into its dx row with atomic float adds in arrival order (as
// embedding.grad_weight's DEFAULT kernel).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "kernels/cpu/atomic_float.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/graph_ops.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/graph_data.h"
#include "kernels/ops/graph_validate.h"
#include "kernels/ops/validate.h"
#include "kernels/registry.h"

namespace lockstep::kernels {
namespace {

namespace c = ::lockstep::canonical;

int64_t RowsPerTask(int64_t width) {
  return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, width));
}

// constant, parameter.forward, parameter.grad: a copy between tensors of
// the same element count.
absl::Status CopyKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                        const OpAttrs&) {
  LS_RETURN_IF_ERROR(ValidateCopyCall(in, out));
  if (in[0].numel() > 0 && !in[0].SharesStorageWith(out[0])) {
    std::memcpy(out[0].data<float>(), in[0].data<float>(),
                static_cast<size_t>(in[0].bytes()));
  }
  return absl::OkStatus();
}

// gather.forward and slice.forward (kOp names the op in errors).
template <const char* kOp>
absl::Status GatherForwardKernel(absl::Span<const Tensor> in,
                                 absl::Span<Tensor> out, const OpAttrs&) {
  LS_ASSIGN_OR_RETURN(const c::GatherShape s,
                      ValidateGatherForwardCall(kOp, in, out));
  const float* x = in[0].data<float>();
  const int32_t* ids = in[1].data<int32_t>();
  float* y = out[0].data<float>();
  ParallelForBlocks(CpuThreadPool(), s.a * s.p, RowsPerTask(s.b),
                    [&](int64_t r0, int64_t r1) {
                      for (int64_t r = r0; r < r1; ++r) {
                        const int64_t a = r / s.p;
                        const int64_t p = r - a * s.p;
                        std::copy_n(x + (a * s.v + ids[p]) * s.b, s.b,
                                    y + r * s.b);
                      }
                    });
  return absl::OkStatus();
}

// gather.grad: the canonical sorted segment sum of embedding.h per
// (a, v, b).
absl::Status GatherGradKernel(absl::Span<const Tensor> in,
                              absl::Span<Tensor> out, const OpAttrs&) {
  LS_ASSIGN_OR_RETURN(const c::GatherShape s,
                      ValidateGatherGradCall(op::kGatherGrad, in, out));
  const c::EmbeddingShape e{s.p, s.v, s.b};
  std::vector<int64_t> offsets(static_cast<size_t>(s.v + 1));
  std::vector<int64_t> order(static_cast<size_t>(s.p));
  c::SortPositionsById(e, in[0].data<int32_t>(), offsets.data(), order.data());
  const float* dy = in[1].data<float>();
  float* dx = out[0].data<float>();
  ParallelForBlocks(CpuThreadPool(), s.a * s.v, RowsPerTask(s.b),
                    [&](int64_t r0, int64_t r1) {
                      for (int64_t o = r0 * s.b; o < r1 * s.b; ++o) {
                        dx[o] = c::GatherGradElement(s, offsets.data(),
                                                     order.data(), dy, o);
                      }
                    });
  return absl::OkStatus();
}

// DEFAULT "atomic" gather.grad.
absl::Status GatherGradAtomicKernel(absl::Span<const Tensor> in,
                                    absl::Span<Tensor> out, const OpAttrs&) {
  LS_ASSIGN_OR_RETURN(const c::GatherShape s,
                      ValidateGatherGradCall(op::kGatherGrad, in, out));
  const int32_t* ids = in[0].data<int32_t>();
  const float* dy = in[1].data<float>();
  float* dx = out[0].data<float>();
  std::fill_n(dx, s.a * s.v * s.b, 0.0f);
  const int64_t rows = s.a * s.p;
  if (rows == 0) return absl::OkStatus();
  ThreadPool* pool = CpuThreadPool();
  const int64_t tasks =
      std::min<int64_t>(rows, std::max(2, 4 * pool->num_threads()));
  const int64_t per_task = (rows + tasks - 1) / tasks;
  AtomicParallelFor(pool, tasks, [&](int64_t t) {
    const int64_t r1 = std::min(rows, (t + 1) * per_task);
    for (int64_t r = t * per_task; r < r1; ++r) {
      const int64_t a = r / s.p;
      const int64_t p = r - a * s.p;
      float* row = dx + (a * s.v + ids[p]) * s.b;
      for (int64_t j = 0; j < s.b; ++j)
        AtomicAddFloat(row + j, dy[r * s.b + j]);
    }
  });
  return absl::OkStatus();
}

// slice.grad: the inverse movement; positions must be distinct.
absl::Status SliceGradKernel(absl::Span<const Tensor> in,
                             absl::Span<Tensor> out, const OpAttrs&) {
  LS_ASSIGN_OR_RETURN(const c::GatherShape s,
                      ValidateGatherGradCall(op::kSliceGrad, in, out));
  const int32_t* ids = in[0].data<int32_t>();
  const float* dy = in[1].data<float>();
  float* dx = out[0].data<float>();
  ParallelForBlocks(CpuThreadPool(), s.a, RowsPerTask(s.v * s.b),
                    [&](int64_t a0, int64_t a1) {
                      for (int64_t a = a0; a < a1; ++a) {
                        std::fill_n(dx + a * s.v * s.b, s.v * s.b, 0.0f);
                        for (int64_t p = 0; p < s.p; ++p) {
                          std::copy_n(dy + (a * s.p + p) * s.b, s.b,
                                      dx + (a * s.v + ids[p]) * s.b);
                        }
                      }
                    });
  return absl::OkStatus();
}

absl::Status ConcatForwardKernel(absl::Span<const Tensor> in,
                                 absl::Span<Tensor> out, const OpAttrs&) {
  LS_ASSIGN_OR_RETURN(const std::vector<int64_t> offsets,
                      ValidateConcatCall(op::kConcatForward, in, out));
  const int64_t a_dim = out[0].dim(0), c = out[0].dim(1), b = out[0].dim(2);
  float* y = out[0].data<float>();
  ParallelForBlocks(CpuThreadPool(), a_dim, RowsPerTask(c * b),
                    [&](int64_t a0, int64_t a1) {
                      for (int64_t a = a0; a < a1; ++a) {
                        for (size_t k = 0; k < in.size(); ++k) {
                          const int64_t ck = in[k].dim(1);
                          std::copy_n(in[k].data<float>() + a * ck * b, ck * b,
                                      y + (a * c + offsets[k]) * b);
                        }
                      }
                    });
  return absl::OkStatus();
}

absl::Status ConcatGradKernel(absl::Span<const Tensor> in,
                              absl::Span<Tensor> out, const OpAttrs&) {
  LS_ASSIGN_OR_RETURN(const std::vector<int64_t> offsets,
                      ValidateConcatCall(op::kConcatGrad, in, out));
  const int64_t a_dim = in[0].dim(0), c = in[0].dim(1), b = in[0].dim(2);
  const float* dy = in[0].data<float>();
  ParallelForBlocks(CpuThreadPool(), a_dim, RowsPerTask(c * b),
                    [&](int64_t a0, int64_t a1) {
                      for (int64_t a = a0; a < a1; ++a) {
                        for (size_t k = 0; k < out.size(); ++k) {
                          const int64_t ck = out[k].dim(1);
                          std::copy_n(dy + (a * c + offsets[k]) * b, ck * b,
                                      out[k].data<float>() + a * ck * b);
                        }
                      }
                    });
  return absl::OkStatus();
}

}  // namespace

namespace cpu_internal {

absl::Status RegisterGraphDataKernels(Registry* registry) {
  struct Entry {
    const char* op;
    KernelFn fn;
  };
  const Entry entries[] = {
      {op::kConstant, &CopyKernel},
      {op::kParameterForward, &CopyKernel},
      {op::kParameterGrad, &CopyKernel},
      {op::kGatherForward, &GatherForwardKernel<op::kGatherForward>},
      {op::kGatherGrad, &GatherGradKernel},
      {op::kSliceForward, &GatherForwardKernel<op::kSliceForward>},
      {op::kSliceGrad, &SliceGradKernel},
      {op::kConcatForward, &ConcatForwardKernel},
      {op::kConcatGrad, &ConcatGradKernel},
  };
  for (const Entry& e : entries) {
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{e.op, Mode::kCanonical, kCanonicalAlgorithm, kCpuBackendName},
        e.fn));
  }
  return absl::OkStatus();
}

absl::Status RegisterGraphDataDefaultKernels(Registry* registry) {
  for (const char* algorithm : {kDefaultAlgorithm, kAtomicAlgorithm}) {
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{op::kGatherGrad, Mode::kDefault, algorithm, kCpuBackendName},
        &GatherGradAtomicKernel));
  }
  return absl::OkStatus();
}

}  // namespace cpu_internal
}  // namespace lockstep::kernels
