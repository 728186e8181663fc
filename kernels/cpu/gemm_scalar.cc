// The portable GEMM path (no ISA flags): std::fma per lane.
#include <cmath>

#include "kernels/cpu/gemm.h"

#define LS_GEMM_ISA_NS scalar_isa
#include "kernels/cpu/gemm_impl.h"

namespace lockstep::kernels::cpu_internal {
namespace scalar_isa {
namespace {

struct ScalarVec {
  using T = float;
  static constexpr int kWidth = 1;
  static T Zero() { return 0.0f; }
  static T Load(const float* p) { return *p; }
  static void Store(float* p, T v) { *p = v; }
  static void Stream(float* p, T v) { *p = v; }
  static void Fence() {}
  static T Set1(float x) { return x; }
  static T Fma(T a, T b, T c) { return std::fma(a, b, c); }
  static T Add(T a, T b) { return a + b; }
  static void Transpose(T*) {}
  static void LoadTransposed(const float* p, int64_t, T* r) { r[0] = *p; }
};

}  // namespace
}  // namespace scalar_isa

void GemmScalar(const canonical::MatMulShape& s, const float* a, const float* b,
                float* c, int64_t chunk, const GemmPacking& packing,
                ThreadPool* pool) {
  scalar_isa::GemmDriver<scalar_isa::ScalarVec, 4, 4>::Run(s, a, b, c, chunk,
                                                           packing, pool);
}

void DepthwiseForwardScalar(const spatial::Conv2dShape& s, const float* x,
                            const float* w, float* y, ThreadPool* pool) {
  scalar_isa::DepthwiseForward<scalar_isa::ScalarVec>(s, x, w, y, pool);
}

void DepthwiseGradInputScalar(const spatial::Conv2dShape& s, const float* dy,
                              const float* w, float* dx, ThreadPool* pool) {
  scalar_isa::DepthwiseGradInput<scalar_isa::ScalarVec>(s, dy, w, dx, pool);
}

void DepthwiseGradWeightScalar(const spatial::Conv2dShape& s, const float* x,
                               const float* dy, float* dw, int64_t chunk,
                               ThreadPool* pool) {
  scalar_isa::DepthwiseGradWeight<scalar_isa::ScalarVec>(s, x, dy, dw, chunk,
                                                         pool);
}

}  // namespace lockstep::kernels::cpu_internal
