// CANONICAL sigmoid, tanh, SiLU and GELU (erf and tanh forms).
//
// Elementwise: each output is a fixed sequence of IEEE operations and
// portable math calls (kernels/math/portable_math.h) on one input element,
// evaluated left to right exactly as written, without contraction into
// fused multiply-adds. The gradients recompute the forward quantities from x
// (the kernel receives x, not y), so forward and backward need no saved
// state. A NaN result is the canonical NaN (0x7FC00000) on every device.
//
//   sigmoid.forward   s = 1 / (1 + exp(-x))
//   sigmoid.grad      dx = dy * (s * (1 - s))
//   tanh.forward      y = tanh(x)
//   tanh.grad         t = tanh(x);  dx = dy * (1 - t * t)
//   silu.forward      y = x * s                          (s = sigmoid(x))
//   silu.grad         dx = dy * (s * (1 + x * (1 - s)))
//   gelu.forward      y = (0.5 * x) * (1 + erf(x * R2))  R2 = 0x1.6a09e6p-1
//   gelu.grad         cdf = 0.5 * (1 + erf(x * R2))
//                     pdf = R2PI * exp(-0.5 * (x * x))   R2PI = 0x1.988454p-2
//                     dx = dy * (cdf + x * pdf)
//   gelu_tanh.forward u = K0 * (x + K1 * ((x * x) * x))
//                     y = (0.5 * x) * (1 + tanh(u))
//                     K0 = sqrt(2/pi) = 0x1.988454p-1, K1 = 0.044715f
//   gelu_tanh.grad    t = tanh(u)
//                     du = K0 * (1 + K3 * (x * x))      K3 = 0.134145f
//                     dx = dy * (0.5 * (1 + t) + ((0.5 * x) * (1 - t * t)) *
//                     du)
//
// (R2 = 1/sqrt(2), R2PI = 1/sqrt(2 pi), K3 = 3 * K1, all rounded to float.)
//
// Header-only, LS_HD: the CPU backend, the CUDA thread bodies and their host
// emulation share this source.
#ifndef LOCKSTEP_KERNELS_OPS_ACTIVATIONS_H_
#define LOCKSTEP_KERNELS_OPS_ACTIVATIONS_H_

#include <cstdint>

#include "kernels/canonical/float_bits.h"
#include "kernels/canonical/hd.h"
#include "kernels/math/portable_math.h"

namespace lockstep::canonical {

// The unary activations, in the order of the op names of kernels/backend.h.
enum class Activation : int32_t {
  kSigmoid = 0,
  kTanh = 1,
  kSilu = 2,
  kGelu = 3,      // erf form (PyTorch approximate="none")
  kGeluTanh = 4,  // tanh form (PyTorch approximate="tanh")
};

namespace activation_internal {

inline constexpr float kInvSqrt2 = 0x1.6a09e6p-1f;
inline constexpr float kInvSqrt2Pi = 0x1.988454p-2f;
inline constexpr float kSqrt2OverPi = 0x1.988454p-1f;
inline constexpr float kGeluCubic = 0.044715f;
inline constexpr float kGeluCubic3 = 0.134145f;

LS_HD_INLINE float CanonicalNan(float v) {
  return v != v ? LsBitsToFloat(kCanonicalNanBits) : v;
}

LS_HD_INLINE float Sigmoid(float x) { return 1.0f / (1.0f + CanonicalExp(-x)); }

LS_HD_INLINE float GeluTanhArg(float x) {
  return kSqrt2OverPi * (x + kGeluCubic * ((x * x) * x));
}

}  // namespace activation_internal

// GELU (erf form) around its erf and exp, for callers that evaluate those
// elsewhere (the CPU backend's vector erf and exp give the same bits):
//   forward  y = GeluFromErf(x, CanonicalErf(GeluErfArg(x)))
//   grad     dx = GeluGradFrom(x, dy, CanonicalErf(GeluErfArg(x)),
//                              CanonicalExp(GeluPdfExpArg(x)))
LS_HD_INLINE float GeluErfArg(float x) {
  return x * activation_internal::kInvSqrt2;
}
LS_HD_INLINE float GeluPdfExpArg(float x) { return -0.5f * (x * x); }
LS_HD_INLINE float GeluFromErf(float x, float erf) {
  return activation_internal::CanonicalNan((0.5f * x) * (1.0f + erf));
}
LS_HD_INLINE float GeluGradFrom(float x, float dy, float erf, float e) {
  namespace ai = activation_internal;
  const float cdf = 0.5f * (1.0f + erf);
  const float pdf = ai::kInvSqrt2Pi * e;
  const float d = cdf + x * pdf;
  return ai::CanonicalNan(dy * d);
}

LS_HD_INLINE float ActivationForwardElement(Activation a, float x) {
  namespace ai = activation_internal;
  float y;
  switch (a) {
    case Activation::kSigmoid:
      y = ai::Sigmoid(x);
      break;
    case Activation::kTanh:
      y = CanonicalTanh(x);
      break;
    case Activation::kSilu:
      y = x * ai::Sigmoid(x);
      break;
    case Activation::kGelu:
      return GeluFromErf(x, CanonicalErf(GeluErfArg(x)));
    case Activation::kGeluTanh:
    default:
      y = (0.5f * x) * (1.0f + CanonicalTanh(ai::GeluTanhArg(x)));
      break;
  }
  return ai::CanonicalNan(y);
}

LS_HD_INLINE float ActivationGradElement(Activation a, float x, float dy) {
  namespace ai = activation_internal;
  float d;
  switch (a) {
    case Activation::kSigmoid: {
      const float s = ai::Sigmoid(x);
      d = s * (1.0f - s);
      break;
    }
    case Activation::kTanh: {
      const float t = CanonicalTanh(x);
      d = 1.0f - t * t;
      break;
    }
    case Activation::kSilu: {
      const float s = ai::Sigmoid(x);
      d = s * (1.0f + x * (1.0f - s));
      break;
    }
    case Activation::kGelu:
      return GeluGradFrom(x, dy, CanonicalErf(GeluErfArg(x)),
                          CanonicalExp(GeluPdfExpArg(x)));
    case Activation::kGeluTanh:
    default: {
      const float t = CanonicalTanh(ai::GeluTanhArg(x));
      const float du = ai::kSqrt2OverPi * (1.0f + ai::kGeluCubic3 * (x * x));
      d = 0.5f * (1.0f + t) + ((0.5f * x) * (1.0f - t * t)) * du;
      break;
    }
  }
  return ai::CanonicalNan(dy * d);
}

// Host loop drivers (the spec bodies; the CPU backend parallelises them).
LS_HD_INLINE void ActivationForward(Activation a, const float* x, float* y,
                                    int64_t count) {
  for (int64_t i = 0; i < count; ++i) y[i] = ActivationForwardElement(a, x[i]);
}

LS_HD_INLINE void ActivationGrad(Activation a, const float* x, const float* dy,
                                 float* dx, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    dx[i] = ActivationGradElement(a, x[i], dy[i]);
  }
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_OPS_ACTIVATIONS_H_
