// Host/device portability for the canonical arithmetic sources.
//
// Every file under kernels/canonical/ is compiled twice: by the host C++
// compiler (with -ffp-contract=off) for the CPU backend and tests, and by
// nvcc (with -fmad=false) for the CUDA backend. LS_HD marks functions that
// must exist on both sides; LsFma is the only fused multiply-add the spec
// allows, written explicitly wherever the spec says `fma`.
#ifndef LOCKSTEP_KERNELS_CANONICAL_HD_H_
#define LOCKSTEP_KERNELS_CANONICAL_HD_H_

#if defined(__CUDACC__)
#define LS_HD __host__ __device__
#define LS_HD_INLINE __host__ __device__ __forceinline__
#else
#include <cmath>
#define LS_HD
#define LS_HD_INLINE inline
#endif

namespace lockstep::canonical {

// fma(a, b, c) = a * b + c with a single rounding (IEEE-754 fusedMultiplyAdd).
//
// Host code built for every x86-64 CPU (no -mfma) would call libm's fmaf for
// each term: on a CPU with FMA3 that is the one instruction behind a call
// that also clobbers every xmm register, and it cost about a fifth of a
// transformer block's step. Such builds test the CPU once per call (a load
// and a branch that always goes the same way) and issue vfmadd231ss inline
// where FMA3 exists; elsewhere they keep libm's correctly rounded fmaf. Both
// compute the same correctly rounded result, so the bits do not depend on
// the path (kernels/canonical/hd_test.cc compares them). Translation units
// built with -mfma, other architectures, and nvcc's host pass use fmaf,
// which the compiler turns into the instruction where it can.
LS_HD_INLINE float LsFma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#elif defined(__x86_64__) && !defined(__FMA__) && !defined(__CUDACC__) && \
    defined(__GNUC__)
  if (__builtin_cpu_supports("fma")) {
    __asm__("vfmadd231ss %2, %1, %0" : "+x"(c) : "x"(a), "x"(b));
    return c;
  }
  return std::fmaf(a, b, c);
#else
  return std::fmaf(a, b, c);
#endif
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_CANONICAL_HD_H_
