// The CPU kernels of the broadcasting graph primitives
// (kernels/ops/graph_elementwise.h): binary.*, unary.*, compare, where.*
// and reduce.*.
//
// Elementwise work is split over the pool in blocks of outputs. The
// broadcast-gradient reduction (and REDUCE SUM / MEAN) runs blocks of
// kLanes outputs per task: every output of a block runs its own canonical
// chain (chunks of 256 terms from +0.0f, then the pairwise tree), the
// block's chains advanced together term by term (vectorised by the
// compiler when the block's outputs are contiguous), so the bits equal the
// scalar spec loop (canonical::SumToElement) for every ISA and thread
// count. The CANONICAL kernels serve DETERMINISTIC too; DEFAULT "default"
// and "atomic" binary.grad and where.grad split each reduction into slices
// added into the gradient atomically in arrival order (NONDETERMINISTIC).
#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "common/status_macros.h"
#include "kernels/cpu/atomic_float.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ops/graph_elementwise.h"
#include "kernels/ops/graph_validate.h"
#include "kernels/ops/validate.h"

namespace lockstep::kernels {
namespace {

namespace c = ::lockstep::canonical;

constexpr int64_t kElementBlock = 16384;  // elements per elementwise task
constexpr int64_t kLanes = 64;            // outputs per reduction task

void ForElementBlocks(int64_t n,
                      const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t tasks = (n + kElementBlock - 1) / kElementBlock;
  ParallelFor(CpuThreadPool(), tasks, [&](int64_t t) {
    const int64_t begin = t * kElementBlock;
    fn(begin, std::min(n, begin + kElementBlock));
  });
}

// Calls fn(o, offsets) for y elements [begin, end), offsets[k] the
// element's offset in operand k (carried along the last axis, so only a
// row change divides).
template <typename Fn>
void ForBroadcast(const c::BroadcastShape& s, int64_t begin, int64_t end,
                  Fn fn) {
  if (begin >= end) return;
  if (s.rank == 0) {
    const int64_t zero[3] = {0, 0, 0};
    fn(int64_t{0}, zero);
    return;
  }
  const int last = s.rank - 1;
  const int64_t cols = s.dims[last];
  int64_t o = begin;
  while (o < end) {
    int64_t off[3];
    for (int k = 0; k < s.num_operands; ++k)
      off[k] = c::BroadcastOffset(s, k, o);
    const int64_t row_end = std::min(end, o - o % cols + cols);
    for (; o < row_end; ++o) {
      fn(o, off);
      for (int k = 0; k < s.num_operands; ++k) off[k] += s.strides[k][last];
    }
  }
}

// One chunk of kLanes chains over kLanes consecutive outputs of t (their
// terms contiguous for every k): acc[l] += row[l], term by term. The fixed
// trip count and restrict pointers let the compiler vectorise across the
// lanes; each lane's additions stay in order, so the bits do not change.
void ContiguousChains(const float* __restrict t,
                      const int64_t* __restrict term_offset, int64_t begin,
                      int64_t end, int64_t base0, float* __restrict acc) {
  for (int64_t k = begin; k < end; ++k) {
    const float* __restrict row = t + term_offset[k] + base0;
    for (int64_t l = 0; l < kLanes; ++l) acc[l] = acc[l] + row[l];
  }
}

// x[j] = canonical sum of t's terms (section 11.4), kLanes outputs per
// task, their chains advanced together.
void SumToCanonical(const SumToPlan& p, const float* t, float* x,
                    int64_t x_numel) {
  if (p.identity) {
    if (x_numel > 0 && x != t) std::memcpy(x, t, x_numel * sizeof(float));
    return;
  }
  const int64_t outputs = static_cast<int64_t>(p.out_base.size());
  const int64_t tasks = (outputs + kLanes - 1) / kLanes;
  ParallelFor(CpuThreadPool(), tasks, [&](int64_t task) {
    const int64_t j0 = task * kLanes;
    const int64_t lanes = std::min(kLanes, outputs - j0);
    const int64_t* base = p.out_base.data() + j0;
    bool contiguous = lanes == kLanes;
    for (int64_t l = 1; contiguous && l < lanes; ++l) {
      contiguous = base[l] == base[0] + l;
    }
    float acc[kLanes];
    std::vector<c::TreeAccumulator> tree(p.n > c::kChunk ? lanes : 0);
    for (int64_t begin = 0; begin < p.n || begin == 0; begin += c::kChunk) {
      const int64_t end = std::min(p.n, begin + c::kChunk);
      for (int64_t l = 0; l < lanes; ++l) acc[l] = 0.0f;
      if (contiguous) {
        ContiguousChains(t, p.term_offset.data(), begin, end, base[0], acc);
      } else {
        for (int64_t k = begin; k < end; ++k) {
          const float* row = t + p.term_offset[k];
          for (int64_t l = 0; l < lanes; ++l) acc[l] = acc[l] + row[base[l]];
        }
      }
      if (p.n <= c::kChunk) break;
      for (int64_t l = 0; l < lanes; ++l) tree[l].Push(acc[l]);
    }
    for (int64_t l = 0; l < lanes; ++l) {
      x[j0 + l] = p.n > c::kChunk ? tree[l].Result() : acc[l];
    }
  });
}

// DEFAULT: each output's terms cut into slices of 256, every slice's chain
// added into x atomically, slices arriving in any order.
void SumToAtomic(const SumToPlan& p, const float* t, float* x,
                 int64_t x_numel) {
  if (p.identity) {
    SumToCanonical(p, t, x, x_numel);
    return;
  }
  if (x_numel > 0) std::memset(x, 0, x_numel * sizeof(float));
  const int64_t outputs = static_cast<int64_t>(p.out_base.size());
  const int64_t blocks = (outputs + kLanes - 1) / kLanes;
  const int64_t slices = std::max<int64_t>(1, c::NumChunks(p.n));
  AtomicParallelFor(CpuThreadPool(), blocks * slices, [&](int64_t task) {
    const int64_t j0 = (task / slices) * kLanes;
    const int64_t begin = (task % slices) * c::kChunk;
    const int64_t end = std::min(p.n, begin + c::kChunk);
    const int64_t lanes = std::min(kLanes, outputs - j0);
    for (int64_t l = 0; l < lanes; ++l) {
      float acc = 0.0f;
      for (int64_t k = begin; k < end; ++k) {
        acc = acc + t[p.out_base[j0 + l] + p.term_offset[k]];
      }
      AtomicAddFloat(&x[j0 + l], acc);
    }
  });
}

using SumToFn = void (*)(const SumToPlan&, const float*, float*, int64_t);

// binary.forward and compare: y[o] = elem(kind, a, b) over the broadcast.
template <typename Kind, float (*kElem)(Kind, float, float)>
void TwoOperand(const c::BroadcastShape& s, absl::Span<const Tensor> in,
                absl::Span<Tensor> out, const OpAttrs& a) {
  const auto kind = static_cast<Kind>(a.graph_kind);
  const float* x0 = in[0].data<float>();
  const float* x1 = in[1].data<float>();
  float* y = out[0].data<float>();
  ForElementBlocks(s.numel, [&](int64_t b, int64_t e) {
    ForBroadcast(s, b, e, [&](int64_t o, const int64_t* off) {
      y[o] = kElem(kind, x0[off[0]], x1[off[1]]);
    });
  });
}

absl::Status BinaryForwardKernel(absl::Span<const Tensor> in,
                                 absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(c::BroadcastShape s,
                      ValidateBinaryForwardCall(in, out, a));
  TwoOperand<c::BinaryKind, &c::BinaryElement>(s, in, out, a);
  return absl::OkStatus();
}

absl::Status CompareKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                           const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(c::BroadcastShape s, ValidateCompareCall(in, out, a));
  TwoOperand<c::CompareKind, &c::CompareElement>(s, in, out, a);
  return absl::OkStatus();
}

absl::Status WhereForwardKernel(absl::Span<const Tensor> in,
                                absl::Span<Tensor> out, const OpAttrs&) {
  LS_ASSIGN_OR_RETURN(c::BroadcastShape s, ValidateWhereForwardCall(in, out));
  const float* cond = in[0].data<float>();
  const uint32_t* x0 = static_cast<const uint32_t*>(in[1].raw_data());
  const uint32_t* x1 = static_cast<const uint32_t*>(in[2].raw_data());
  uint32_t* y = static_cast<uint32_t*>(out[0].raw_data());
  ForElementBlocks(s.numel, [&](int64_t b, int64_t e) {
    ForBroadcast(s, b, e, [&](int64_t o, const int64_t* off) {
      y[o] = c::WhereElement(cond[off[0]], x0[off[1]], x1[off[2]]);
    });
  });
  return absl::OkStatus();
}

// Writes the y-shaped terms of operand k (term(o, k)) reduced to grads[k].
template <typename TermFn>
void ReduceTerms(const c::BroadcastShape& s, absl::Span<Tensor> grads,
                 SumToFn sum_to, TermFn term) {
  std::vector<int64_t> ydims(s.dims, s.dims + s.rank);
  std::vector<float> t(s.numel);
  for (size_t k = 0; k < grads.size(); ++k) {
    ForElementBlocks(s.numel, [&](int64_t b, int64_t e) {
      term(static_cast<int>(k), b, e, t.data());
    });
    const SumToPlan p = PlanSumTo(ydims, grads[k].shape());
    sum_to(p, t.data(), grads[k].data<float>(), grads[k].numel());
  }
}

template <SumToFn kSumTo>
absl::Status BinaryGradKernel(absl::Span<const Tensor> in,
                              absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(c::BroadcastShape s, ValidateBinaryGradCall(in, out, a));
  const auto kind = static_cast<c::BinaryKind>(a.graph_kind);
  const float* x0 = in[0].data<float>();
  const float* x1 = in[1].data<float>();
  const float* dy = in[2].data<float>();
  ReduceTerms(s, out, kSumTo, [&](int k, int64_t b, int64_t e, float* t) {
    ForBroadcast(s, b, e, [&](int64_t o, const int64_t* off) {
      float ga, gb;
      c::BinaryGradTerms(kind, x0[off[0]], x1[off[1]], dy[o], &ga, &gb);
      t[o] = k == 0 ? ga : gb;
    });
  });
  return absl::OkStatus();
}

template <SumToFn kSumTo>
absl::Status WhereGradKernel(absl::Span<const Tensor> in,
                             absl::Span<Tensor> out, const OpAttrs&) {
  LS_ASSIGN_OR_RETURN(c::BroadcastShape s, ValidateWhereGradCall(in, out));
  const float* cond = in[0].data<float>();
  const float* dy = in[1].data<float>();
  ReduceTerms(s, out, kSumTo, [&](int k, int64_t b, int64_t e, float* t) {
    ForBroadcast(s, b, e, [&](int64_t o, const int64_t* off) {
      t[o] = c::WhereGradTerm(cond[off[0]], dy[o], k);
    });
  });
  return absl::OkStatus();
}

template <bool kGrad>
absl::Status UnaryKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                         const OpAttrs& a) {
  LS_RETURN_IF_ERROR(ValidateUnaryCall(kGrad, in, out, a));
  const auto kind = static_cast<c::UnaryKind>(a.graph_kind);
  const float* x = in[0].data<float>();
  const float* dy = kGrad ? in[1].data<float>() : nullptr;
  float* y = out[0].data<float>();
  ForElementBlocks(in[0].numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      y[i] = kGrad ? c::UnaryGradElement(kind, x[i], dy[i])
                   : c::UnaryElement(kind, x[i]);
    }
  });
  return absl::OkStatus();
}

absl::Status ReduceForwardKernel(absl::Span<const Tensor> in,
                                 absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(const ReduceCall r,
                      ValidateReduceForwardCall(in, out, a));
  float* y = out[0].data<float>();
  const SumToPlan p = PlanSumTo(in[0].shape(), r.kept);
  SumToCanonical(p, in[0].data<float>(), y, out[0].numel());
  if (r.mean) {
    for (int64_t j = 0; j < out[0].numel(); ++j) {
      y[j] = c::ReduceMeanElement(y[j], r.count);
    }
  }
  return absl::OkStatus();
}

// in {dy} out {dx}: dx's shape is x's; dy broadcasts back over the reduced
// axes (MEAN: dy / n, one division per element).
absl::Status ReduceGradKernel(absl::Span<const Tensor> in,
                              absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(const ReduceCall r, ValidateReduceGradCall(in, out, a));
  const float* dy = in[0].data<float>();
  float* dx = out[0].data<float>();
  ForElementBlocks(r.grad.numel, [&](int64_t b, int64_t e) {
    ForBroadcast(r.grad, b, e, [&](int64_t o, const int64_t* off) {
      dx[o] = c::ReduceGradElement(r.mean, dy[off[0]], r.count);
    });
  });
  return absl::OkStatus();
}

}  // namespace

namespace cpu_internal {

absl::Status RegisterGraphElementwiseKernels(Registry* registry) {
  struct Entry {
    const char* op;
    KernelFn fn;
  };
  const Entry entries[] = {
      {op::kBinaryForward, &BinaryForwardKernel},
      {op::kBinaryGrad, &BinaryGradKernel<&SumToCanonical>},
      {op::kUnaryForward, &UnaryKernel<false>},
      {op::kUnaryGrad, &UnaryKernel<true>},
      {op::kCompare, &CompareKernel},
      {op::kWhereForward, &WhereForwardKernel},
      {op::kWhereGrad, &WhereGradKernel<&SumToCanonical>},
      {op::kReduceForward, &ReduceForwardKernel},
      {op::kReduceGrad, &ReduceGradKernel},
  };
  for (const Entry& e : entries) {
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{e.op, Mode::kCanonical, kCanonicalAlgorithm, kCpuBackendName},
        e.fn));
  }
  return absl::OkStatus();
}

absl::Status RegisterGraphElementwiseDefaultKernels(Registry* registry) {
  const KernelFn binary = &BinaryGradKernel<&SumToAtomic>;
  const KernelFn where = &WhereGradKernel<&SumToAtomic>;
  for (const char* algorithm : {kDefaultAlgorithm, kAtomicAlgorithm}) {
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{op::kBinaryGrad, Mode::kDefault, algorithm, kCpuBackendName},
        binary));
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{op::kWhereGrad, Mode::kDefault, algorithm, kCpuBackendName},
        where));
  }
  return absl::OkStatus();
}

}  // namespace cpu_internal
}  // namespace lockstep::kernels
