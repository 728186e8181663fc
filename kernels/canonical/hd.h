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
LS_HD_INLINE float LsFma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fmaf(a, b, c);
#endif
}

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_CANONICAL_HD_H_
