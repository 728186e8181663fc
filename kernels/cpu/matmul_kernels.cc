// The CPU kernels of the transformer primitives (kernels/ops/matmul.h,
// kernels/ops/movement.h):
//   matmul.forward / matmul.grad: CANONICAL and DETERMINISTIC run the
//     register-blocked GEMM of gemm.h once per batch entry (chunk
//     canonical::kChunk, resp. kSingleChain), entries spread over the pool
//     when there are enough of them, so the CANONICAL bits are those of
//     dense.* for each entry on every ISA and thread count. DEFAULT
//     "split_k_atomic" matmul.forward cuts every entry's K into slices added
//     into y atomically in arrival order (NONDETERMINISTIC), like
//     dense.forward's.
//   transpose and reshape: word moves over element blocks (exact); their
//     CANONICAL kernel serves every mode.
#include <algorithm>
#include <cstring>
#include <memory>

#include "common/status_macros.h"
#include "kernels/cpu/atomic_float.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ops/matmul.h"
#include "kernels/ops/movement.h"
#include "kernels/ops/validate.h"

namespace lockstep::kernels {
namespace {

namespace c = ::lockstep::canonical;

void FillZero(Tensor& t) {
  if (t.bytes() > 0) std::memset(t.raw_data(), 0, t.bytes());
}

// y[0 .. n) *= scale (one IEEE multiply each), unless scale is 1.
void ScaleBlock(float* y, int64_t n, float scale) {
  if (scale == 1.0f) return;
  for (int64_t i = 0; i < n; ++i) y[i] = c::ScaleProduct(y[i], scale);
}

// Every entry of one batched product with the given chunk length; writes
// all of c (an empty reduction gives +0.0f).
void RunBatched(const c::BatchedMatMulShape& s, const float* a, const float* b,
                float* out, Tensor& out_tensor, int64_t chunk) {
  if (s.m.depth == 0) {  // +0.0f times the scale, as the element function
    FillZero(out_tensor);
    ScaleBlock(out, out_tensor.numel(), s.scale);
    return;
  }
  if (s.batch == 0 || s.m.rows == 0 || s.m.cols == 0) return;
  const CpuIsa isa = ActiveCpuIsa();
  ThreadPool* pool = CpuThreadPool();
  auto entry = [&](int64_t t, ThreadPool* inner) {
    float* c_t = out + t * s.c_batch;
    Gemm(s.m, a + t * s.a_batch, b + t * s.b_batch, c_t, chunk, isa, inner);
    ScaleBlock(c_t, s.c_batch, s.scale);
  };
  if (s.batch == 1 || pool->num_threads() == 1) {
    for (int64_t t = 0; t < s.batch; ++t) entry(t, pool);
    return;
  }
  // Whole entries per task; each entry's bits do not depend on where it
  // runs.
  ParallelFor(pool, s.batch, [&](int64_t t) { entry(t, nullptr); });
}

template <int64_t kChunkLength>
absl::Status MatMulForwardKernel(absl::Span<const Tensor> in,
                                 absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(c::MatMulDims d,
                      ValidateMatMulCall(op::kMatMulForward, in, out, a));
  RunBatched(c::MatMulForwardShape(d), in[0].data<float>(), in[1].data<float>(),
             out[0].data<float>(), out[0], kChunkLength);
  return absl::OkStatus();
}

template <int64_t kChunkLength>
absl::Status MatMulGradKernel(absl::Span<const Tensor> in,
                              absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(c::MatMulDims d,
                      ValidateMatMulCall(op::kMatMulGrad, in, out, a));
  const float* av = in[0].data<float>();
  const float* bv = in[1].data<float>();
  const float* dy = in[2].data<float>();
  RunBatched(c::MatMulGradAShape(d), dy, bv, out[0].data<float>(), out[0],
             kChunkLength);
  RunBatched(c::MatMulGradBShape(d), av, dy, out[1].data<float>(), out[1],
             kChunkLength);
  return absl::OkStatus();
}

// DEFAULT matmul.forward, "split_k_atomic": every entry's K is cut into
// slices; each task multiplies one slice of one entry (one fma chain per
// output) into a private buffer and adds it into y in arrival order, a
// block of rows at a time under that block's lock (AtomicRowBlocks); then
// y is scaled.
absl::Status MatMulForwardSplitKAtomicKernel(absl::Span<const Tensor> in,
                                             absl::Span<Tensor> out,
                                             const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(c::MatMulDims d,
                      ValidateMatMulCall(op::kMatMulForward, in, out, a));
  const c::BatchedMatMulShape s = c::MatMulForwardShape(d);
  FillZero(out[0]);
  if (s.m.depth == 0 || s.batch == 0 || s.m.rows == 0 || s.m.cols == 0) {
    ScaleBlock(out[0].data<float>(), out[0].numel(), s.scale);
    return absl::OkStatus();
  }
  ThreadPool* pool = CpuThreadPool();
  const int64_t slices =
      std::min<int64_t>(s.m.depth, std::max(2, 2 * pool->num_threads()));
  const int64_t slice_len = (s.m.depth + slices - 1) / slices;
  const float* x = in[0].data<float>();
  const float* w = in[1].data<float>();
  float* y = out[0].data<float>();
  const CpuIsa isa = ActiveCpuIsa();
  // One set of row locks per entry of the batch.
  std::vector<AtomicRowBlocks> blocks;
  blocks.reserve(static_cast<size_t>(s.batch));
  for (int64_t t = 0; t < s.batch; ++t) blocks.emplace_back(s.m.rows);
  AtomicParallelFor(pool, s.batch * slices, [&](int64_t task) {
    const int64_t t = task / slices;
    const int64_t k0 = (task % slices) * slice_len;
    if (k0 >= s.m.depth) return;
    c::MatMulShape part = s.m;
    part.depth = std::min(slice_len, s.m.depth - k0);
    part.c_row = s.m.cols;
    part.c_col = 1;
    std::unique_ptr<float[]> buf(new float[s.m.rows * s.m.cols]);
    Gemm(part, x + t * s.a_batch + k0 * s.m.a_depth,
         w + t * s.b_batch + k0 * s.m.b_depth, buf.get(), kSingleChain, isa,
         /*pool=*/nullptr);
    blocks[t].Add(y + t * s.c_batch, s.m.c_row, s.m.c_col, buf.get(), s.m.rows,
                  s.m.cols, task % slices);
  });
  ScaleBlock(y, out[0].numel(), s.scale);
  return absl::OkStatus();
}

constexpr int64_t kMoveBlock = int64_t{1} << 16;

template <typename Fn>
void ForMoveBlocks(int64_t n, const Fn& fn) {
  if (n <= 0) return;
  const int64_t tasks = (n + kMoveBlock - 1) / kMoveBlock;
  if (tasks == 1) {
    fn(int64_t{0}, n);
    return;
  }
  ParallelFor(CpuThreadPool(), tasks, [&](int64_t t) {
    const int64_t begin = t * kMoveBlock;
    fn(begin, std::min(n, begin + kMoveBlock));
  });
}

absl::Status TransposeKernel(absl::Span<const Tensor> in,
                             absl::Span<Tensor> out, const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op::kTranspose, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(c::TransposeShape s, ValidateTranspose(in[0], out[0], a));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kTranspose, in, out));
  const uint32_t* x = static_cast<const uint32_t*>(in[0].raw_data());
  uint32_t* y = static_cast<uint32_t*>(out[0].raw_data());
  if (s.rank == 0) {
    c::Transpose(s, x, y);
    return absl::OkStatus();
  }
  // Each block walks its outputs in order with an odometer over y's axes
  // (c::TransposeSource's index for the first, then runs along the last
  // axis and carries), instead of a division per axis per element.
  const int last = s.rank - 1;
  const int64_t inner = s.out_dims[last];
  const int64_t inner_stride = s.src_strides[last];
  ForMoveBlocks(s.numel, [&](int64_t b, int64_t e) {
    int64_t idx[c::kMaxMovementRank];
    int64_t rest = b;
    for (int d = last; d >= 0; --d) {
      idx[d] = rest % s.out_dims[d];
      rest /= s.out_dims[d];
    }
    int64_t src = c::TransposeSource(s, b);
    for (int64_t o = b; o < e;) {
      const int64_t run = std::min(inner - idx[last], e - o);
      const uint32_t* from = x + src;
      if (inner_stride == 1) {
        std::memcpy(y + o, from, static_cast<size_t>(run) * sizeof(uint32_t));
      } else {
        for (int64_t r = 0; r < run; ++r) y[o + r] = from[r * inner_stride];
      }
      o += run;
      src += run * inner_stride;
      idx[last] += run;
      // Carry into the outer axes.
      for (int d = last; d > 0 && idx[d] == s.out_dims[d]; --d) {
        src -= s.out_dims[d] * s.src_strides[d];
        idx[d] = 0;
        ++idx[d - 1];
        src += s.src_strides[d - 1];
      }
    }
  });
  return absl::OkStatus();
}

// y may share storage with x (a copy onto itself changes nothing).
absl::Status ReshapeKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                           const OpAttrs&) {
  LS_RETURN_IF_ERROR(CheckArity(op::kReshape, in, 1, out, 1));
  LS_RETURN_IF_ERROR(ValidateReshape(in[0], out[0]));
  if (out[0].raw_data() != in[0].raw_data() && in[0].bytes() > 0) {
    std::memcpy(out[0].raw_data(), in[0].raw_data(), in[0].bytes());
  }
  return absl::OkStatus();
}

}  // namespace

namespace cpu_internal {

absl::Status RegisterMatMulCanonicalKernels(Registry* registry) {
  struct Entry {
    const char* op;
    KernelFn fn;
  };
  const Entry entries[] = {
      {op::kMatMulForward, &MatMulForwardKernel<c::kChunk>},
      {op::kMatMulGrad, &MatMulGradKernel<c::kChunk>},
      {op::kTranspose, &TransposeKernel},
      {op::kReshape, &ReshapeKernel},
  };
  for (const Entry& e : entries) {
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{e.op, Mode::kCanonical, kCanonicalAlgorithm, kCpuBackendName},
        e.fn));
  }
  return absl::OkStatus();
}

absl::Status RegisterMatMulDeterministicAndDefaultKernels(Registry* registry) {
  struct Entry {
    const char* op;
    Mode mode;
    const char* algorithm;
    KernelFn fn;
  };
  const KernelFn fwd = &MatMulForwardKernel<kSingleChain>;
  const KernelFn grad = &MatMulGradKernel<kSingleChain>;
  const Entry entries[] = {
      {op::kMatMulForward, Mode::kDeterministic, kDeterministicAlgorithm, fwd},
      {op::kMatMulGrad, Mode::kDeterministic, kDeterministicAlgorithm, grad},
      {op::kMatMulForward, Mode::kDefault, kDefaultAlgorithm,
       &MatMulForwardSplitKAtomicKernel},
      {op::kMatMulForward, Mode::kDefault, kSplitKAtomicAlgorithm,
       &MatMulForwardSplitKAtomicKernel},
  };
  for (const Entry& e : entries) {
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{e.op, e.mode, e.algorithm, kCpuBackendName}, e.fn));
  }
  return absl::OkStatus();
}

}  // namespace cpu_internal
}  // namespace lockstep::kernels
