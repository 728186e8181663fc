// The fast CPU kernels of the dense family (gemm.h), the DEFAULT-mode
// atomic kernels (atomic_float.h) and the registration of the DETERMINISTIC
// and DEFAULT kernels (cpu_backend.h).
#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "kernels/cpu/atomic_float.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/graph_ops.h"
#include "kernels/ops/dense.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/validate.h"

namespace lockstep::kernels {
namespace {

namespace c = ::lockstep::canonical;

void FillZero(Tensor& t) {
  if (t.bytes() > 0) std::memset(t.raw_data(), 0, t.bytes());
}

enum class DenseOp { kForward, kGradInput, kGradWeight };

// Validates a dense call and returns its product as one MatMulShape.
absl::StatusOr<c::MatMulShape> DenseProduct(DenseOp which,
                                            absl::Span<const Tensor> in,
                                            absl::Span<Tensor> out,
                                            const OpAttrs& a) {
  switch (which) {
    case DenseOp::kForward: {
      LS_RETURN_IF_ERROR(CheckArity(op::kDenseForward, in, 2, out, 1));
      LS_ASSIGN_OR_RETURN(c::DenseShape d,
                          ValidateDenseForward(in[0], in[1], out[0], a));
      LS_RETURN_IF_ERROR(CheckNoAlias(op::kDenseForward, in, out));
      return c::DenseForwardShape(d);
    }
    case DenseOp::kGradInput: {
      LS_RETURN_IF_ERROR(CheckArity(op::kDenseGradInput, in, 2, out, 1));
      LS_ASSIGN_OR_RETURN(c::DenseShape d,
                          ValidateDenseGradInput(in[0], in[1], out[0], a));
      LS_RETURN_IF_ERROR(CheckNoAlias(op::kDenseGradInput, in, out));
      return c::DenseGradInputShape(d);
    }
    case DenseOp::kGradWeight: {
      LS_RETURN_IF_ERROR(CheckArity(op::kDenseGradWeight, in, 2, out, 1));
      LS_ASSIGN_OR_RETURN(c::DenseShape d,
                          ValidateDenseGradWeight(in[0], in[1], out[0], a));
      LS_RETURN_IF_ERROR(CheckNoAlias(op::kDenseGradWeight, in, out));
      return c::DenseGradWeightShape(d);
    }
  }
  return absl::InternalError("unknown dense op");
}

// CANONICAL (chunk = kChunk) or DETERMINISTIC (kSingleChain) dense kernel.
template <DenseOp kWhich, int64_t kChunkLength>
absl::Status GemmDenseKernel(absl::Span<const Tensor> in,
                             absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(c::MatMulShape s, DenseProduct(kWhich, in, out, a));
  if (s.depth == 0) {  // empty reduction: +0.0f (and no pointer arithmetic)
    FillZero(out[0]);
    return absl::OkStatus();
  }
  if (s.rows == 0 || s.cols == 0) return absl::OkStatus();
  const CpuIsa isa = ActiveCpuIsa();
  if (isa == CpuIsa::kScalar && kChunkLength == c::kChunk) {
    // No vector unit: the spec's own loop is as fast and has the same bits.
    c::MatMul(s, in[0].data<float>(), in[1].data<float>(),
              out[0].data<float>());
    return absl::OkStatus();
  }
  Gemm(s, in[0].data<float>(), in[1].data<float>(), out[0].data<float>(),
       kChunkLength, isa, CpuThreadPool());
  return absl::OkStatus();
}

// DEFAULT dense.forward, "split_k_atomic": K is cut into slices; each task
// multiplies one slice (one fma chain per output) into a private buffer and
// adds it into y in arrival order, a block of rows at a time under that
// block's lock (AtomicRowBlocks).
absl::Status DenseForwardSplitKAtomicKernel(absl::Span<const Tensor> in,
                                            absl::Span<Tensor> out,
                                            const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(c::MatMulShape s,
                      DenseProduct(DenseOp::kForward, in, out, a));
  FillZero(out[0]);
  if (s.depth == 0 || s.rows == 0 || s.cols == 0) return absl::OkStatus();
  ThreadPool* pool = CpuThreadPool();
  const int64_t slices =
      std::min<int64_t>(s.depth, std::max(2, 2 * pool->num_threads()));
  const int64_t slice_len = (s.depth + slices - 1) / slices;
  const float* x = in[0].data<float>();
  const float* w = in[1].data<float>();
  float* y = out[0].data<float>();
  const CpuIsa isa = ActiveCpuIsa();
  AtomicRowBlocks blocks(s.rows);
  AtomicParallelFor(pool, slices, [&](int64_t t) {
    const int64_t k0 = t * slice_len;
    if (k0 >= s.depth) return;
    c::MatMulShape part = s;
    part.depth = std::min(slice_len, s.depth - k0);
    part.c_row = s.cols;
    part.c_col = 1;
    std::unique_ptr<float[]> buf(new float[s.rows * s.cols]);
    Gemm(part, x + k0 * s.a_depth, w + k0 * s.b_depth, buf.get(), kSingleChain,
         isa, /*pool=*/nullptr);
    blocks.Add(y, s.c_row, s.c_col, buf.get(), s.rows, s.cols, t);
  });
  return absl::OkStatus();
}

// DEFAULT bias_add.grad, "atomic": the batch is split over tasks; each sums
// its rows per channel and adds the partial into db atomically.
absl::Status BiasAddGradAtomicKernel(absl::Span<const Tensor> in,
                                     absl::Span<Tensor> out, const OpAttrs&) {
  LS_RETURN_IF_ERROR(CheckArity(op::kBiasAddGrad, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(c::BiasShape s, ValidateBiasAddGrad(in[0], out[0]));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kBiasAddGrad, in, out));
  FillZero(out[0]);
  if (in[0].numel() == 0) return absl::OkStatus();
  const float* dy = in[0].data<float>();
  float* db = out[0].data<float>();
  ThreadPool* pool = CpuThreadPool();
  const int64_t tasks =
      std::min<int64_t>(s.n, std::max(2, 4 * pool->num_threads()));
  const int64_t rows = (s.n + tasks - 1) / tasks;
  AtomicParallelFor(pool, tasks, [&](int64_t t) {
    const int64_t n0 = t * rows;
    const int64_t n1 = std::min(s.n, n0 + rows);
    for (int64_t ch = 0; ch < s.c; ++ch) {
      float acc = 0.0f;
      for (int64_t n = n0; n < n1; ++n) {
        const float* row = dy + (n * s.c + ch) * s.spatial;
        for (int64_t i = 0; i < s.spatial; ++i) acc = acc + row[i];
      }
      if (n1 > n0) AtomicAddFloat(db + ch, acc);
    }
  });
  return absl::OkStatus();
}

}  // namespace

namespace cpu_internal {

absl::Status RegisterFastCanonicalKernels(Registry* registry) {
  struct Entry {
    const char* op;
    KernelFn fn;
  };
  const Entry entries[] = {
      {op::kDenseForward, &GemmDenseKernel<DenseOp::kForward, c::kChunk>},
      {op::kDenseGradInput, &GemmDenseKernel<DenseOp::kGradInput, c::kChunk>},
      {op::kDenseGradWeight, &GemmDenseKernel<DenseOp::kGradWeight, c::kChunk>},
  };
  for (const Entry& e : entries) {
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{e.op, Mode::kCanonical, kCanonicalAlgorithm, kCpuBackendName},
        e.fn));
  }
  return absl::OkStatus();
}

}  // namespace cpu_internal

absl::Status RegisterCpuDeterministicAndDefaultKernels(Registry* registry) {
  struct Entry {
    const char* op;
    Mode mode;
    const char* algorithm;
    KernelFn fn;
  };
  const KernelFn fwd = &GemmDenseKernel<DenseOp::kForward, kSingleChain>;
  const KernelFn gin = &GemmDenseKernel<DenseOp::kGradInput, kSingleChain>;
  const KernelFn gw = &GemmDenseKernel<DenseOp::kGradWeight, kSingleChain>;
  const Entry entries[] = {
      {op::kDenseForward, Mode::kDeterministic, kDeterministicAlgorithm, fwd},
      {op::kDenseGradInput, Mode::kDeterministic, kDeterministicAlgorithm, gin},
      {op::kDenseGradWeight, Mode::kDeterministic, kDeterministicAlgorithm, gw},
      {op::kDenseForward, Mode::kDefault, kDefaultAlgorithm,
       &DenseForwardSplitKAtomicKernel},
      {op::kDenseForward, Mode::kDefault, kSplitKAtomicAlgorithm,
       &DenseForwardSplitKAtomicKernel},
      {op::kDenseGradInput, Mode::kDefault, kDefaultAlgorithm, gin},
      {op::kDenseGradWeight, Mode::kDefault, kDefaultAlgorithm, gw},
      {op::kBiasAddGrad, Mode::kDefault, kDefaultAlgorithm,
       &BiasAddGradAtomicKernel},
      {op::kBiasAddGrad, Mode::kDefault, kAtomicAlgorithm,
       &BiasAddGradAtomicKernel},
  };
  for (const Entry& e : entries) {
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{e.op, e.mode, e.algorithm, kCpuBackendName}, e.fn));
  }
  LS_RETURN_IF_ERROR(
      cpu_internal::RegisterSpatialDeterministicAndDefaultKernels(registry));
  LS_RETURN_IF_ERROR(cpu_internal::RegisterNnDefaultKernels(registry));
  LS_RETURN_IF_ERROR(
      cpu_internal::RegisterMatMulDeterministicAndDefaultKernels(registry));
  LS_RETURN_IF_ERROR(cpu_internal::RegisterGraphDataDefaultKernels(registry));
  LS_RETURN_IF_ERROR(
      cpu_internal::RegisterGraphElementwiseDefaultKernels(registry));
  // Every other op: its CANONICAL kernel is the DETERMINISTIC one.
  const absl::string_view own[] = {op::kDenseForward,
                                   op::kDenseGradInput,
                                   op::kDenseGradWeight,
                                   op::kConv2dForward,
                                   op::kConv2dGradInput,
                                   op::kConv2dGradWeight,
                                   op::kConvTranspose2dForward,
                                   op::kConvTranspose2dGradInput,
                                   op::kConvTranspose2dGradWeight,
                                   op::kMatMulForward,
                                   op::kMatMulGrad};
  Registry canonical;
  LS_RETURN_IF_ERROR(RegisterCpuCanonicalKernels(&canonical));
  std::vector<std::string> ops = AllOpNames();
  for (std::string& op : GraphDataOpNames()) ops.push_back(std::move(op));
  for (const std::string& op : ops) {
    if (std::find(std::begin(own), std::end(own), op) != std::end(own)) {
      continue;
    }
    LS_ASSIGN_OR_RETURN(
        KernelFn fn,
        canonical.Lookup(KernelKey{op, Mode::kCanonical, kCanonicalAlgorithm,
                                   kCpuBackendName}));
    LS_RETURN_IF_ERROR(
        registry->Register(KernelKey{op, Mode::kDeterministic,
                                     kDeterministicAlgorithm, kCpuBackendName},
                           fn));
  }
  // DEFAULT "deterministic", for every op: its DETERMINISTIC kernel, so a
  // DEFAULT job can pin single ops (config.op_algorithms) to a repeatable
  // kernel and isolate the nondeterminism of the others.
  for (const std::string& op : ops) {
    LS_ASSIGN_OR_RETURN(
        KernelFn fn,
        registry->Lookup(KernelKey{op, Mode::kDeterministic,
                                   kDeterministicAlgorithm, kCpuBackendName}));
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{op, Mode::kDefault, kDeterministicAlgorithm, kCpuBackendName},
        fn));
  }
  // DEFAULT for every op that has no DEFAULT kernel of its own: the
  // DETERMINISTIC one (what stock frameworks run for these ops by default
  // is already deterministic), so a DEFAULT job never falls back either.
  for (const std::string& op : ops) {
    bool has_default = false;
    for (const KernelKey& k : registry->Keys()) {
      if (k.op == op && k.mode == Mode::kDefault &&
          k.backend == kCpuBackendName &&
          k.algorithm != kDeterministicAlgorithm) {
        has_default = true;
        break;
      }
    }
    if (has_default) continue;
    LS_ASSIGN_OR_RETURN(
        KernelFn fn,
        registry->Lookup(KernelKey{op, Mode::kDeterministic,
                                   kDeterministicAlgorithm, kCpuBackendName}));
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{op, Mode::kDefault, kDefaultAlgorithm, kCpuBackendName}, fn));
  }
  return absl::OkStatus();
}

}  // namespace lockstep::kernels
