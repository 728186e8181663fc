// CANONICAL graph primitives of op set v3 (docs/canonical-arithmetic.md,
// section 11): BINARY, UNARY, COMPARE, WHERE and REDUCE, with NumPy
// broadcasting.
//
//   binary.forward  in {a, b}        out {y}       y = a (kind) b
//   binary.grad     in {a, b, dy}    out {da, db}  shapes of a and b
//   unary.forward   in {x}           out {y}       y = f(x)
//   unary.grad      in {x, dy}       out {dx}      dx = dy * f'(x)
//   compare         in {a, b}        out {y}       1.0f where it holds
//   where.forward   in {cond, a, b}  out {y}       cond != 0 ? a : b
//   where.grad      in {cond, dy}    out {da, db}  through the mask
//   reduce.forward  in {x}           out {y}       SUM / MEAN over axes
//   reduce.grad     in {dy}          out {dx}      the broadcast back
//
// Broadcasting: shapes aligned on the right, a missing or size-1 dimension
// repeats. Every elementwise result is one IEEE operation (or the portable
// function of kernels/math) per output element; a NaN result is the
// canonical NaN. The gradient of an operand that was broadcast is the
// elementwise term reduced over its broadcast indices with the canonical
// reduction rule (kernels/canonical/reduce.h): SumToShape below, whose term
// order is the row-major order of the reduced axes' indices (the kept axes
// fixed). REDUCE SUM is the same function.
//
// Header-only, LS_HD, raw pointers and shape structs: the CPU kernels
// (kernels/cpu/graph_elementwise_kernels.cc) and the CUDA per-thread bodies
// (kernels/cuda/thread_bodies.h) run these element functions, and the CPU
// tests check against the scalar loops here. Call validation is in
// graph_validate.h.
#ifndef LOCKSTEP_KERNELS_OPS_GRAPH_ELEMENTWISE_H_
#define LOCKSTEP_KERNELS_OPS_GRAPH_ELEMENTWISE_H_

#include <cstdint>

#include "kernels/canonical/float_bits.h"
#include "kernels/canonical/hd.h"
#include "kernels/canonical/reduce.h"
#include "kernels/math/portable_math.h"

namespace lockstep::canonical {

inline constexpr int kMaxGraphRank = 8;

// The numbers are the proto's BinaryKind / UnaryKind / CompareKind /
// ReduceKind values (OpAttrs.graph_kind carries them).
enum class BinaryKind : int {
  kAdd = 1,
  kSub = 2,
  kMul = 3,
  kDiv = 4,
  kPow = 5,
  kMax = 6,
  kMin = 7
};
enum class UnaryKind : int {
  kNeg = 1,
  kAbs = 2,
  kSqrt = 3,
  kReciprocal = 4,
  kExp = 5,
  kLog = 6,
  kErf = 7,
  kIdentity = 8
};
enum class CompareKind : int {
  kEqual = 1,
  kLess = 2,
  kLessEqual = 3,
  kGreater = 4,
  kGreaterEqual = 5
};
enum class ReduceKind : int { kSum = 1, kMean = 2 };

// Output y of rank `rank` (the broadcast shape) and, per operand, its
// element stride along each y axis (0 where the operand is broadcast).
struct BroadcastShape {
  int rank = 0;
  int num_operands = 0;
  int64_t numel = 0;
  int64_t dims[kMaxGraphRank] = {};
  int64_t strides[3][kMaxGraphRank] = {};
};

// Offset of y element o in operand k.
LS_HD_INLINE int64_t BroadcastOffset(const BroadcastShape& s, int k,
                                     int64_t o) {
  int64_t off = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    const int64_t dim = s.dims[d];
    off += (o % dim) * s.strides[k][d];
    o /= dim;
  }
  return off;
}

namespace graph_internal {

inline constexpr float kTwoOverSqrtPi = 0x1.20dd76p+0f;  // 2 / sqrt(pi)

LS_HD_INLINE float Canon(float v) {
  return v != v ? LsBitsToFloat(kCanonicalNanBits) : v;
}

// |b| < 2^23 and b whole, or |b| >= 2^23 (every such float is whole).
LS_HD_INLINE bool IsWhole(float b) {
  const float m = b < 0.0f ? -b : b;
  if (m >= 8388608.0f) return m == m;
  return static_cast<float>(static_cast<int64_t>(b)) == b;
}
LS_HD_INLINE bool IsOddWhole(float b) {
  const float m = b < 0.0f ? -b : b;
  if (m >= 16777216.0f || !IsWhole(b)) return false;
  return (static_cast<int64_t>(b) & 1) != 0;
}

}  // namespace graph_internal

// a ** b (section 11.2): b == 2: a * a; b == 1: a; b == 0: 1 (NaN a
// included); b == 0.5: CanonicalSqrt(a); else exp(b * log|a|) with the
// portable exp and log, negated for a < 0 and an odd whole b; a < 0 with a
// b that is not whole: NaN; a == +-0: +0 for b > 0, +inf for b < 0.
LS_HD_INLINE float CanonicalPow(float a, float b) {
  namespace gi = graph_internal;
  if (b == 2.0f) return gi::Canon(a * a);
  if (b == 1.0f) return gi::Canon(a);
  if (b == 0.0f) return 1.0f;
  if (b == 0.5f) return CanonicalSqrt(a);
  if (a != a || b != b) return LsBitsToFloat(kCanonicalNanBits);
  if (a == 0.0f) return b > 0.0f ? 0.0f : LsBitsToFloat(0x7F800000u);
  if (a > 0.0f) return gi::Canon(CanonicalExp(b * CanonicalLog(a)));
  if (!gi::IsWhole(b)) return LsBitsToFloat(kCanonicalNanBits);
  const float r = gi::Canon(CanonicalExp(b * CanonicalLog(-a)));
  return gi::IsOddWhole(b) ? -r : r;
}

LS_HD_INLINE float BinaryElement(BinaryKind k, float a, float b) {
  namespace gi = graph_internal;
  switch (k) {
    case BinaryKind::kAdd:
      return gi::Canon(a + b);
    case BinaryKind::kSub:
      return gi::Canon(a - b);
    case BinaryKind::kMul:
      return gi::Canon(a * b);
    case BinaryKind::kDiv:
      return gi::Canon(a / b);
    case BinaryKind::kPow:
      return CanonicalPow(a, b);
    case BinaryKind::kMax:
      if (a != a || b != b) return LsBitsToFloat(kCanonicalNanBits);
      return b > a ? b : a;  // ties (and +-0) give a
    case BinaryKind::kMin:
    default:
      if (a != a || b != b) return LsBitsToFloat(kCanonicalNanBits);
      return b < a ? b : a;
  }
}

// The unreduced gradient terms of one output element: *ga for a, *gb for b
// (section 11.2).
LS_HD_INLINE void BinaryGradTerms(BinaryKind k, float a, float b, float dy,
                                  float* ga, float* gb) {
  namespace gi = graph_internal;
  switch (k) {
    case BinaryKind::kAdd:
      *ga = dy;
      *gb = dy;
      return;
    case BinaryKind::kSub:
      *ga = dy;
      *gb = -dy;
      return;
    case BinaryKind::kMul:
      *ga = gi::Canon(dy * b);
      *gb = gi::Canon(dy * a);
      return;
    case BinaryKind::kDiv: {
      const float t = dy / b;
      *ga = gi::Canon(t);
      *gb = gi::Canon(-(t * (a / b)));
      return;
    }
    case BinaryKind::kPow: {
      *ga = gi::Canon(dy * (b * CanonicalPow(a, b - 1.0f)));
      *gb = a > 0.0f ? gi::Canon(dy * (CanonicalPow(a, b) * CanonicalLog(a)))
                     : 0.0f;
      return;
    }
    case BinaryKind::kMax: {
      const bool to_b = b > a;
      *ga = to_b ? 0.0f : dy;
      *gb = to_b ? dy : 0.0f;
      return;
    }
    case BinaryKind::kMin:
    default: {
      const bool to_b = b < a;
      *ga = to_b ? 0.0f : dy;
      *gb = to_b ? dy : 0.0f;
      return;
    }
  }
}

LS_HD_INLINE float UnaryElement(UnaryKind k, float x) {
  namespace gi = graph_internal;
  switch (k) {
    case UnaryKind::kNeg:
      return gi::Canon(-x);
    case UnaryKind::kAbs:
      return gi::Canon(LsBitsToFloat(LsFloatToBits(x) & 0x7FFFFFFFu));
    case UnaryKind::kSqrt:
      return CanonicalSqrt(x);
    case UnaryKind::kReciprocal:
      return gi::Canon(1.0f / x);
    case UnaryKind::kExp:
      return CanonicalExp(x);
    case UnaryKind::kLog:
      return CanonicalLog(x);
    case UnaryKind::kErf:
      return CanonicalErf(x);
    case UnaryKind::kIdentity:
    default:
      return x;  // a word copy: every bit kept
  }
}

// dx = dy * f'(x), written per kind (section 11.3).
LS_HD_INLINE float UnaryGradElement(UnaryKind k, float x, float dy) {
  namespace gi = graph_internal;
  switch (k) {
    case UnaryKind::kNeg:
      return gi::Canon(-dy);
    case UnaryKind::kAbs:
      return x > 0.0f ? dy : (x < 0.0f ? gi::Canon(-dy) : 0.0f);
    case UnaryKind::kSqrt:
      return gi::Canon(dy / (2.0f * CanonicalSqrt(x)));
    case UnaryKind::kReciprocal: {
      const float y = 1.0f / x;
      return gi::Canon(-((dy * y) * y));
    }
    case UnaryKind::kExp:
      return gi::Canon(dy * CanonicalExp(x));
    case UnaryKind::kLog:
      return gi::Canon(dy / x);
    case UnaryKind::kErf:
      return gi::Canon(dy * (gi::kTwoOverSqrtPi * CanonicalExp(-(x * x))));
    case UnaryKind::kIdentity:
    default:
      return dy;
  }
}

LS_HD_INLINE float CompareElement(CompareKind k, float a, float b) {
  bool r;
  switch (k) {
    case CompareKind::kEqual:
      r = a == b;
      break;
    case CompareKind::kLess:
      r = a < b;
      break;
    case CompareKind::kLessEqual:
      r = a <= b;
      break;
    case CompareKind::kGreater:
      r = a > b;
      break;
    case CompareKind::kGreaterEqual:
    default:
      r = a >= b;
      break;
  }
  return r ? 1.0f : 0.0f;
}

// where.forward: a word select, every bit of the chosen operand kept.
LS_HD_INLINE uint32_t WhereElement(float cond, uint32_t a, uint32_t b) {
  return cond != 0.0f ? a : b;
}

// where.grad: the unreduced gradient term of operand k (0: a, 1: b).
LS_HD_INLINE float WhereGradTerm(float cond, float dy, int k) {
  const bool take_a = cond != 0.0f;
  return take_a == (k == 0) ? dy : 0.0f;
}

// REDUCE MEAN: the canonical sum of n elements divided by n.
LS_HD_INLINE float ReduceMeanElement(float sum, float n) {
  return graph_internal::Canon(sum / n);
}

// reduce.grad: dy broadcast back (MEAN: dy / n, one division).
LS_HD_INLINE float ReduceGradElement(bool mean, float dy, float n) {
  return mean ? graph_internal::Canon(dy / n) : dy;
}

// The reduction of a tensor t of shape y (the broadcast shape) to an
// operand shape x: x element j is the canonical sum of t over the y
// elements that broadcast from j. `out_base[j]` is the offset in t of the
// first of them and `term_offset[k]`, k < n, the offset of term k relative
// to it, k running row-major over the reduced axes (section 11.4).
struct SumToShape {
  int64_t outputs = 0;  // x's element count
  int64_t n = 0;        // terms per output
};

// The scalar spec: one canonical sum per output.
LS_HD_INLINE float SumToElement(const float* t, int64_t base,
                                const int64_t* term_offset, int64_t n) {
  if (n <= kChunk) {
    float acc = 0.0f;
    for (int64_t k = 0; k < n; ++k) acc = acc + t[base + term_offset[k]];
    return acc;
  }
  TreeAccumulator tree;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t end = n - begin < kChunk ? n : begin + kChunk;
    float acc = 0.0f;
    for (int64_t k = begin; k < end; ++k) acc = acc + t[base + term_offset[k]];
    tree.Push(acc);
  }
  return tree.Result();
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_OPS_GRAPH_ELEMENTWISE_H_
