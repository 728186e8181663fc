#include "kernels/cpu/gemm.h"

namespace lockstep::kernels {
namespace {

// isa, lowered to one this machine supports.
CpuIsa SupportedIsa(CpuIsa isa) {
  while (isa != CpuIsa::kScalar && !CpuIsaSupported(isa)) {
    isa = static_cast<CpuIsa>(static_cast<int>(isa) - 1);
  }
  return isa;
}

}  // namespace

void Gemm(const canonical::MatMulShape& s, const float* a, const float* b,
          float* c, int64_t chunk, CpuIsa isa, ThreadPool* pool) {
  GemmPacked(s, a, b, c, chunk, GemmPacking(), isa, pool);
}

void GemmPacked(const canonical::MatMulShape& s, const float* a, const float* b,
                float* c, int64_t chunk, const GemmPacking& packing, CpuIsa isa,
                ThreadPool* pool) {
  // Waking the pool costs more than a small product; the bits do not depend
  // on it either way.
  if (s.rows * s.cols * s.depth < kMinParallelFmas) pool = nullptr;
  switch (SupportedIsa(isa)) {
    case CpuIsa::kAvx512:
      cpu_internal::GemmAvx512(s, a, b, c, chunk, packing, pool);
      return;
    case CpuIsa::kAvx2:
      cpu_internal::GemmAvx2(s, a, b, c, chunk, packing, pool);
      return;
    case CpuIsa::kScalar:
      break;
  }
  cpu_internal::GemmScalar(s, a, b, c, chunk, packing, pool);
}

void PackGemmB(const canonical::MatMulShape& s, const float* b,
               const GemmPacking& packing, CpuIsa isa, ThreadPool* pool,
               PackedGemmB* out) {
  *out = PackedGemmB();
  GemmPacking pack = packing;
  pack.b_packed = nullptr;
  pack.pack_b_into = out;
  GemmPacked(s, nullptr, b, nullptr, kSingleChain, pack, isa, pool);
}

void DepthwiseConv2dForward(const spatial::Conv2dShape& s, const float* x,
                            const float* w, float* y, CpuIsa isa,
                            ThreadPool* pool) {
  switch (SupportedIsa(isa)) {
    case CpuIsa::kAvx512:
      cpu_internal::DepthwiseForwardAvx512(s, x, w, y, pool);
      return;
    case CpuIsa::kAvx2:
      cpu_internal::DepthwiseForwardAvx2(s, x, w, y, pool);
      return;
    case CpuIsa::kScalar:
      break;
  }
  cpu_internal::DepthwiseForwardScalar(s, x, w, y, pool);
}

void DepthwiseConv2dGradInput(const spatial::Conv2dShape& s, const float* dy,
                              const float* w, float* dx, CpuIsa isa,
                              ThreadPool* pool) {
  switch (SupportedIsa(isa)) {
    case CpuIsa::kAvx512:
      cpu_internal::DepthwiseGradInputAvx512(s, dy, w, dx, pool);
      return;
    case CpuIsa::kAvx2:
      cpu_internal::DepthwiseGradInputAvx2(s, dy, w, dx, pool);
      return;
    case CpuIsa::kScalar:
      break;
  }
  cpu_internal::DepthwiseGradInputScalar(s, dy, w, dx, pool);
}

void DepthwiseConv2dGradWeight(const spatial::Conv2dShape& s, const float* x,
                               const float* dy, float* dw, int64_t chunk,
                               CpuIsa isa, ThreadPool* pool) {
  switch (SupportedIsa(isa)) {
    case CpuIsa::kAvx512:
      cpu_internal::DepthwiseGradWeightAvx512(s, x, dy, dw, chunk, pool);
      return;
    case CpuIsa::kAvx2:
      cpu_internal::DepthwiseGradWeightAvx2(s, x, dy, dw, chunk, pool);
      return;
    case CpuIsa::kScalar:
      break;
  }
  cpu_internal::DepthwiseGradWeightScalar(s, x, dy, dw, chunk, pool);
}

}  // namespace lockstep::kernels
