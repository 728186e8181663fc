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
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "kernels/cpu/atomic_float.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ops/graph_elementwise.h"
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

absl::Status NeedFloat(absl::string_view op, absl::string_view name,
                       const Tensor& t) {
  if (t.dtype() != DType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s must be float32, got %s", op, name, t.DebugString()));
  }
  return absl::OkStatus();
}

// The NumPy broadcast of `operands` (right-aligned; a dimension of 1
// repeats); y must have exactly that shape.
absl::StatusOr<c::BroadcastShape> Broadcast(
    absl::string_view op, absl::Span<const Tensor* const> operands,
    absl::Span<const absl::string_view> names, const Tensor& y,
    absl::string_view y_name) {
  c::BroadcastShape s;
  s.num_operands = static_cast<int>(operands.size());
  int rank = 0;
  for (size_t k = 0; k < operands.size(); ++k) {
    LS_RETURN_IF_ERROR(NeedFloat(op, names[k], *operands[k]));
    rank = std::max(rank, operands[k]->rank());
  }
  std::vector<int64_t> dims(rank, 1);
  for (size_t k = 0; k < operands.size(); ++k) {
    const Tensor& t = *operands[k];
    const int off = rank - t.rank();
    for (int d = 0; d < t.rank(); ++d) {
      const int64_t v = t.dim(d);
      if (v == dims[off + d] || v == 1) continue;
      if (dims[off + d] == 1) {
        dims[off + d] = v;
        continue;
      }
      std::vector<std::string> shapes;
      for (size_t j = 0; j < operands.size(); ++j) {
        shapes.push_back(
            absl::StrCat(names[j], " ", ShapeString(operands[j]->shape())));
      }
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: shapes do not broadcast (aligned on the right, each dimension "
          "equal or 1): %s",
          op, absl::StrJoin(shapes, ", ")));
    }
  }
  LS_RETURN_IF_ERROR(NeedFloat(op, y_name, y));
  if (y.shape() != dims) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s must have the broadcast shape %s, got %s", op,
                        y_name, ShapeString(dims), ShapeString(y.shape())));
  }
  s.rank = rank;
  s.numel = y.numel();
  for (int d = 0; d < rank; ++d) s.dims[d] = dims[d];
  for (size_t k = 0; k < operands.size(); ++k) {
    const Tensor& t = *operands[k];
    const int off = rank - t.rank();
    int64_t stride = 1;
    for (int d = t.rank() - 1; d >= 0; --d) {
      s.strides[k][off + d] = t.dim(d) == 1 ? 0 : stride;
      stride *= t.dim(d);
    }
  }
  return s;
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

// The reduction of a y-shaped (contiguous) tensor to the shape of x, where
// x broadcasts to y: per x element its base offset in y, and the offsets
// of its terms in row-major order of the reduced axes.
struct SumToPlan {
  int64_t n = 0;  // terms per output
  std::vector<int64_t> out_base;
  std::vector<int64_t> term_offset;
  bool identity = false;  // x has y's element layout: no reduction at all
};

// The offset in y of every index over `axes` (row-major over them, the
// other axes at 0).
std::vector<int64_t> OffsetsOver(const std::vector<int>& axes,
                                 absl::Span<const int64_t> y,
                                 const std::vector<int64_t>& ystride) {
  int64_t count = 1;
  for (int d : axes) count *= y[d];
  std::vector<int64_t> out(count);
  for (int64_t k = 0; k < count; ++k) {
    int64_t r = k, o = 0;
    for (int i = static_cast<int>(axes.size()) - 1; i >= 0; --i) {
      o += (r % y[axes[i]]) * ystride[axes[i]];
      r /= y[axes[i]];
    }
    out[k] = o;
  }
  return out;
}

SumToPlan PlanSumTo(absl::Span<const int64_t> y, absl::Span<const int64_t> x) {
  const int rank = static_cast<int>(y.size());
  const int off = rank - static_cast<int>(x.size());
  std::vector<int64_t> ystride(rank, 1);
  for (int d = rank - 2; d >= 0; --d) ystride[d] = ystride[d + 1] * y[d + 1];
  std::vector<int> kept, reduced;
  for (int d = 0; d < rank; ++d) {
    const int64_t xd = d < off ? 1 : x[d - off];
    if (xd == 1 && y[d] != 1) {
      reduced.push_back(d);
    } else {
      kept.push_back(d);
    }
  }
  SumToPlan p;
  p.identity = reduced.empty();
  if (p.identity) return p;
  p.term_offset = OffsetsOver(reduced, y, ystride);
  p.n = static_cast<int64_t>(p.term_offset.size());
  p.out_base = OffsetsOver(kept, y, ystride);
  return p;
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

absl::Status CheckKind(absl::string_view op, int kind, int max) {
  if (kind < 1 || kind > max) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: attrs.graph_kind %d is outside 1 .. %d", op, kind, max));
  }
  return absl::OkStatus();
}

// binary.forward and compare: y[o] = elem(kind, a, b) over the broadcast.
template <typename Kind, float (*kElem)(Kind, float, float)>
absl::Status TwoOperandKernel(const char* op, int max_kind,
                              absl::Span<const Tensor> in,
                              absl::Span<Tensor> out, const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op, in, 2, out, 1));
  LS_RETURN_IF_ERROR(CheckKind(op, a.graph_kind, max_kind));
  const Tensor* ops[] = {&in[0], &in[1]};
  const absl::string_view names[] = {"a", "b"};
  LS_ASSIGN_OR_RETURN(c::BroadcastShape s,
                      Broadcast(op, ops, names, out[0], "y"));
  LS_RETURN_IF_ERROR(CheckNoAlias(op, in, out));
  const auto kind = static_cast<Kind>(a.graph_kind);
  const float* x0 = in[0].data<float>();
  const float* x1 = in[1].data<float>();
  float* y = out[0].data<float>();
  ForElementBlocks(s.numel, [&](int64_t b, int64_t e) {
    ForBroadcast(s, b, e, [&](int64_t o, const int64_t* off) {
      y[o] = kElem(kind, x0[off[0]], x1[off[1]]);
    });
  });
  return absl::OkStatus();
}

absl::Status BinaryForwardKernel(absl::Span<const Tensor> in,
                                 absl::Span<Tensor> out, const OpAttrs& a) {
  return TwoOperandKernel<c::BinaryKind, &c::BinaryElement>(op::kBinaryForward,
                                                            7, in, out, a);
}

absl::Status CompareKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                           const OpAttrs& a) {
  return TwoOperandKernel<c::CompareKind, &c::CompareElement>(op::kCompare, 5,
                                                              in, out, a);
}

absl::Status WhereForwardKernel(absl::Span<const Tensor> in,
                                absl::Span<Tensor> out, const OpAttrs&) {
  LS_RETURN_IF_ERROR(CheckArity(op::kWhereForward, in, 3, out, 1));
  const Tensor* ops[] = {&in[0], &in[1], &in[2]};
  const absl::string_view names[] = {"cond", "a", "b"};
  LS_ASSIGN_OR_RETURN(c::BroadcastShape s,
                      Broadcast(op::kWhereForward, ops, names, out[0], "y"));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kWhereForward, in, out));
  const float* cond = in[0].data<float>();
  const uint32_t* x0 = static_cast<const uint32_t*>(in[1].raw_data());
  const uint32_t* x1 = static_cast<const uint32_t*>(in[2].raw_data());
  uint32_t* y = static_cast<uint32_t*>(out[0].raw_data());
  ForElementBlocks(s.numel, [&](int64_t b, int64_t e) {
    ForBroadcast(s, b, e, [&](int64_t o, const int64_t* off) {
      y[o] = cond[off[0]] != 0.0f ? x0[off[1]] : x1[off[2]];
    });
  });
  return absl::OkStatus();
}

// The gradient outputs of a broadcasting op: outputs[k] must have the
// shape of the operand it belongs to.
absl::Status CheckGradShapes(absl::string_view op, absl::Span<Tensor> out,
                             absl::Span<const Tensor* const> operands,
                             absl::Span<const absl::string_view> names) {
  for (size_t k = 0; k < out.size(); ++k) {
    LS_RETURN_IF_ERROR(NeedFloat(op, names[k], out[k]));
    if (out[k].shape() != operands[k]->shape()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s must have its operand's shape %s, got %s", op, names[k],
          ShapeString(operands[k]->shape()), ShapeString(out[k].shape())));
    }
  }
  if (out.size() == 2 && out[0].SharesStorageWith(out[1]) &&
      out[0].numel() > 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s and %s share storage", op, names[0], names[1]));
  }
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
  LS_RETURN_IF_ERROR(CheckArity(op::kBinaryGrad, in, 3, out, 2));
  LS_RETURN_IF_ERROR(CheckKind(op::kBinaryGrad, a.graph_kind, 7));
  const Tensor* ops[] = {&in[0], &in[1]};
  const absl::string_view names[] = {"a", "b"};
  LS_ASSIGN_OR_RETURN(c::BroadcastShape s,
                      Broadcast(op::kBinaryGrad, ops, names, in[2], "dy"));
  const absl::string_view gnames[] = {"da", "db"};
  LS_RETURN_IF_ERROR(CheckGradShapes(op::kBinaryGrad, out, ops, gnames));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kBinaryGrad, in, out));
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
  LS_RETURN_IF_ERROR(CheckArity(op::kWhereGrad, in, 2, out, 2));
  const Tensor* ops[] = {&in[0], &out[0], &out[1]};
  const absl::string_view names[] = {"cond", "da", "db"};
  LS_ASSIGN_OR_RETURN(c::BroadcastShape s,
                      Broadcast(op::kWhereGrad, ops, names, in[1], "dy"));
  if (out[0].SharesStorageWith(out[1]) && out[0].numel() > 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: da and db share storage", op::kWhereGrad));
  }
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kWhereGrad, in, out));
  const float* cond = in[0].data<float>();
  const float* dy = in[1].data<float>();
  ReduceTerms(s, out, kSumTo, [&](int k, int64_t b, int64_t e, float* t) {
    ForBroadcast(s, b, e, [&](int64_t o, const int64_t* off) {
      const bool take_a = cond[off[0]] != 0.0f;
      t[o] = take_a == (k == 0) ? dy[o] : 0.0f;
    });
  });
  return absl::OkStatus();
}

template <bool kGrad>
absl::Status UnaryKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                         const OpAttrs& a) {
  const char* op = kGrad ? op::kUnaryGrad : op::kUnaryForward;
  LS_RETURN_IF_ERROR(CheckArity(op, in, kGrad ? 2 : 1, out, 1));
  LS_RETURN_IF_ERROR(CheckKind(op, a.graph_kind, 8));
  if (kGrad) {
    const Tensor* t[] = {&in[0], &in[1], &out[0]};
    const absl::string_view names[] = {"x", "dy", "dx"};
    LS_RETURN_IF_ERROR(ValidateSameShapeFloat(op, t, names));
  } else {
    const Tensor* t[] = {&in[0], &out[0]};
    const absl::string_view names[] = {"x", "y"};
    LS_RETURN_IF_ERROR(ValidateSameShapeFloat(op, t, names));
  }
  LS_RETURN_IF_ERROR(CheckNoAlias(op, in, out));
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

// x's shape with the reduced axes kept as 1, and y's expected shape.
absl::StatusOr<std::vector<int64_t>> ReduceKeptShape(absl::string_view op,
                                                     const Tensor& x,
                                                     const Tensor& y,
                                                     const OpAttrs& a) {
  LS_RETURN_IF_ERROR(NeedFloat(op, "x", x));
  LS_RETURN_IF_ERROR(NeedFloat(op, "y", y));
  LS_RETURN_IF_ERROR(CheckKind(op, a.graph_kind, 2));
  if (x.rank() < 32 && (a.reduce_axes >> x.rank()) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: attrs.reduce_axes 0x%x names an axis beyond x's rank %d", op,
        a.reduce_axes, x.rank()));
  }
  std::vector<int64_t> kept, want;
  for (int d = 0; d < x.rank(); ++d) {
    const bool r = (a.reduce_axes >> d) & 1u;
    kept.push_back(r ? 1 : x.dim(d));
    if (!r || a.reduce_keepdims) want.push_back(r ? 1 : x.dim(d));
  }
  if (y.shape() != want) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: y must have shape %s (x %s reduced over attrs.reduce_axes 0x%x, "
        "keepdims %d), got %s",
        op, ShapeString(want), ShapeString(x.shape()), a.reduce_axes,
        a.reduce_keepdims, ShapeString(y.shape())));
  }
  return kept;
}

int64_t ReducedCount(const Tensor& x, uint32_t axes) {
  int64_t n = 1;
  for (int d = 0; d < x.rank(); ++d) {
    if ((axes >> d) & 1u) n *= x.dim(d);
  }
  return n;
}

absl::Status ReduceForwardKernel(absl::Span<const Tensor> in,
                                 absl::Span<Tensor> out, const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op::kReduceForward, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(std::vector<int64_t> kept,
                      ReduceKeptShape(op::kReduceForward, in[0], out[0], a));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kReduceForward, in, out));
  float* y = out[0].data<float>();
  const SumToPlan p = PlanSumTo(in[0].shape(), kept);
  SumToCanonical(p, in[0].data<float>(), y, out[0].numel());
  if (static_cast<c::ReduceKind>(a.graph_kind) == c::ReduceKind::kMean) {
    const float n = static_cast<float>(ReducedCount(in[0], a.reduce_axes));
    for (int64_t j = 0; j < out[0].numel(); ++j) {
      y[j] = c::graph_internal::Canon(y[j] / n);
    }
  }
  return absl::OkStatus();
}

// in {dy} out {dx}: dx's shape is x's; dy broadcasts back over the reduced
// axes (MEAN: dy / n, one division per element).
absl::Status ReduceGradKernel(absl::Span<const Tensor> in,
                              absl::Span<Tensor> out, const OpAttrs& a) {
  LS_RETURN_IF_ERROR(CheckArity(op::kReduceGrad, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(std::vector<int64_t> kept,
                      ReduceKeptShape(op::kReduceGrad, out[0], in[0], a));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kReduceGrad, in, out));
  LS_ASSIGN_OR_RETURN(Tensor dy_kept, in[0].Reshape(kept));
  const Tensor* ops[] = {&dy_kept, &out[0]};
  const absl::string_view names[] = {"dy", "dx"};
  LS_ASSIGN_OR_RETURN(c::BroadcastShape s,
                      Broadcast(op::kReduceGrad, ops, names, out[0], "dx"));
  const bool mean =
      static_cast<c::ReduceKind>(a.graph_kind) == c::ReduceKind::kMean;
  const float n = static_cast<float>(ReducedCount(out[0], a.reduce_axes));
  const float* dy = in[0].data<float>();
  float* dx = out[0].data<float>();
  ForElementBlocks(s.numel, [&](int64_t b, int64_t e) {
    ForBroadcast(s, b, e, [&](int64_t o, const int64_t* off) {
      dx[o] = mean ? c::graph_internal::Canon(dy[off[0]] / n) : dy[off[0]];
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
