// The AVX2 + FMA GEMM path: built with -mavx2 -mfma (kernels/cpu/BUILD).
#include "kernels/cpu/gemm.h"

#if defined(__AVX2__) && defined(__FMA__)
// gemm_impl.h brings the intrinsics and the 8-lane vector type (Avx2Vec).
#define LS_GEMM_ISA_NS avx2_isa
#include "kernels/cpu/gemm_impl.h"

namespace lockstep::kernels::cpu_internal {

void GemmAvx2(const canonical::MatMulShape& s, const float* a, const float* b,
              float* c, int64_t chunk, const GemmPacking& packing,
              ThreadPool* pool) {
  using avx2_isa::Avx2Vec;
  // A product at most one vector wide on 12 x 8 tiles (6 x 16 ones would
  // leave half their lanes or more empty).
  if (s.cols <= Avx2Vec::kWidth) {
    avx2_isa::GemmDriver<Avx2Vec, 12, 1>::Run(s, a, b, c, chunk, packing, pool);
    return;
  }
  avx2_isa::GemmDriver<Avx2Vec, 6, 2>::Run(s, a, b, c, chunk, packing, pool);
}

void DepthwiseForwardAvx2(const spatial::Conv2dShape& s, const float* x,
                          const float* w, float* y, ThreadPool* pool) {
  avx2_isa::DepthwiseForward<avx2_isa::Avx2Vec>(s, x, w, y, pool);
}

void DepthwiseGradInputAvx2(const spatial::Conv2dShape& s, const float* dy,
                            const float* w, float* dx, ThreadPool* pool) {
  avx2_isa::DepthwiseGradInput<avx2_isa::Avx2Vec>(s, dy, w, dx, pool);
}

void DepthwiseGradWeightAvx2(const spatial::Conv2dShape& s, const float* x,
                             const float* dy, float* dw, int64_t chunk,
                             ThreadPool* pool) {
  avx2_isa::DepthwiseGradWeight<avx2_isa::Avx2Vec>(s, x, dy, dw, chunk, pool);
}

}  // namespace lockstep::kernels::cpu_internal

#else  // not built for AVX2: never selected (isa.cc), kept linkable.

namespace lockstep::kernels::cpu_internal {
void GemmAvx2(const canonical::MatMulShape& s, const float* a, const float* b,
              float* c, int64_t chunk, const GemmPacking& packing,
              ThreadPool* pool) {
  GemmScalar(s, a, b, c, chunk, packing, pool);
}
void DepthwiseForwardAvx2(const spatial::Conv2dShape& s, const float* x,
                          const float* w, float* y, ThreadPool* pool) {
  DepthwiseForwardScalar(s, x, w, y, pool);
}
void DepthwiseGradInputAvx2(const spatial::Conv2dShape& s, const float* dy,
                            const float* w, float* dx, ThreadPool* pool) {
  DepthwiseGradInputScalar(s, dy, w, dx, pool);
}
void DepthwiseGradWeightAvx2(const spatial::Conv2dShape& s, const float* x,
                             const float* dy, float* dw, int64_t chunk,
                             ThreadPool* pool) {
  DepthwiseGradWeightScalar(s, x, dy, dw, chunk, pool);
}
}  // namespace lockstep::kernels::cpu_internal

#endif
