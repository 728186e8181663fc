#include "kernels/cudnn/vendor_backend.h"

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cuda/plan.h"
#include "kernels/cudnn/vendor_plan.h"
#include "kernels/cudnn/vendor_runtime.h"
#include "kernels/ops/validate.h"
#include "kernels/spatial/tensor_shapes.h"
#include "kernels/spatial/validate.h"

namespace lockstep::kernels {
namespace {

namespace c = ::lockstep::canonical;
namespace sp = ::lockstep::spatial;
using vendor::ConvDirection;

// ---- validation: the CPU backend's checks, in the CPU backend's order ----

enum class DenseOp { kForward, kGradInput, kGradWeight };

absl::StatusOr<c::MatMulShape> ValidateDense(DenseOp kind,
                                             absl::Span<const Tensor> in,
                                             absl::Span<Tensor> out,
                                             const OpAttrs& a) {
  const absl::string_view name = kind == DenseOp::kForward ? op::kDenseForward
                                 : kind == DenseOp::kGradInput
                                     ? op::kDenseGradInput
                                     : op::kDenseGradWeight;
  LS_RETURN_IF_ERROR(CheckArity(name, in, 2, out, 1));
  c::DenseShape d;
  c::MatMulShape s;
  switch (kind) {
    case DenseOp::kForward: {
      LS_ASSIGN_OR_RETURN(d, ValidateDenseForward(in[0], in[1], out[0], a));
      s = c::DenseForwardShape(d);
      break;
    }
    case DenseOp::kGradInput: {
      LS_ASSIGN_OR_RETURN(d, ValidateDenseGradInput(in[0], in[1], out[0], a));
      s = c::DenseGradInputShape(d);
      break;
    }
    case DenseOp::kGradWeight: {
      LS_ASSIGN_OR_RETURN(d, ValidateDenseGradWeight(in[0], in[1], out[0], a));
      s = c::DenseGradWeightShape(d);
      break;
    }
  }
  LS_RETURN_IF_ERROR(CheckNoAlias(name, in, out));
  return s;
}

const char* ConvOpName(ConvDirection dir) {
  switch (dir) {
    case ConvDirection::kForward:
      return op::kConv2dForward;
    case ConvDirection::kGradInput:
      return op::kConv2dGradInput;
    case ConvDirection::kGradWeight:
      return op::kConv2dGradWeight;
  }
  return op::kConv2dForward;
}

// The CPU backend's checks, then what legacy cuDNN can express.
absl::StatusOr<sp::Conv2dShape> ValidateConv(ConvDirection dir,
                                             absl::Span<const Tensor> in,
                                             absl::Span<Tensor> out,
                                             const OpAttrs& a) {
  const absl::string_view name = ConvOpName(dir);
  LS_ASSIGN_OR_RETURN(const sp::Conv2dShape s,
                      sp::ValidateConv2dCall(name, in, out, a));
  LS_RETURN_IF_ERROR(vendor::CheckCudnnConv2d(name, s));
  return s;
}

// ---- kernels --------------------------------------------------------------

template <DenseOp kOp, Mode kMode>
absl::Status CublasDenseKernel(absl::Span<const Tensor> in,
                               absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(c::MatMulShape s, ValidateDense(kOp, in, out, a));
  return vendor::CublasMatMul(kMode, s, in[0].span<float>(),
                              in[1].span<float>(), out[0].span<float>());
}

absl::Status SplitKAtomicDenseForwardKernel(absl::Span<const Tensor> in,
                                            absl::Span<Tensor> out,
                                            const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(c::MatMulShape s,
                      ValidateDense(DenseOp::kForward, in, out, a));
  return vendor::SplitKAtomicMatMul(s, in[0].span<float>(), in[1].span<float>(),
                                    out[0].span<float>());
}

// matmul.*: each batch entry's product through `product` (cuBLAS or the
// split-K kernel, host spans of that entry's blocks), then the scale, one
// multiply per output on the host, as the spec writes it (3.15).
template <typename Product>
absl::Status PerEntry(const c::BatchedMatMulShape& s, absl::Span<const float> a,
                      absl::Span<const float> b, absl::Span<float> out,
                      const Product& product) {
  for (int64_t t = 0; t < s.batch; ++t) {
    absl::Span<float> entry = out.subspan(t * s.c_batch, s.c_batch);
    LS_RETURN_IF_ERROR(product(s.m, a.subspan(t * s.a_batch, s.a_batch),
                               b.subspan(t * s.b_batch, s.b_batch), entry));
    for (float& v : entry) v = c::ScaleProduct(v, s.scale);
  }
  return absl::OkStatus();
}

template <Mode kMode>
absl::Status CublasBatched(const c::BatchedMatMulShape& s,
                           absl::Span<const float> a, absl::Span<const float> b,
                           absl::Span<float> out) {
  return PerEntry(s, a, b, out,
                  [](const c::MatMulShape& m, absl::Span<const float> ea,
                     absl::Span<const float> eb, absl::Span<float> ec) {
                    return vendor::CublasMatMul(kMode, m, ea, eb, ec);
                  });
}

template <Mode kMode>
absl::Status CublasMatMulForwardKernel(absl::Span<const Tensor> in,
                                       absl::Span<Tensor> out,
                                       const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(c::MatMulDims d,
                      ValidateMatMulCall(op::kMatMulForward, in, out, a));
  return CublasBatched<kMode>(c::MatMulForwardShape(d), in[0].span<float>(),
                              in[1].span<float>(), out[0].span<float>());
}

template <Mode kMode>
absl::Status CublasMatMulGradKernel(absl::Span<const Tensor> in,
                                    absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(c::MatMulDims d,
                      ValidateMatMulCall(op::kMatMulGrad, in, out, a));
  LS_RETURN_IF_ERROR(
      CublasBatched<kMode>(c::MatMulGradAShape(d), in[2].span<float>(),
                           in[1].span<float>(), out[0].span<float>()));
  return CublasBatched<kMode>(c::MatMulGradBShape(d), in[0].span<float>(),
                              in[2].span<float>(), out[1].span<float>());
}

absl::Status SplitKAtomicMatMulForwardKernel(absl::Span<const Tensor> in,
                                             absl::Span<Tensor> out,
                                             const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(c::MatMulDims d,
                      ValidateMatMulCall(op::kMatMulForward, in, out, a));
  return PerEntry(c::MatMulForwardShape(d), in[0].span<float>(),
                  in[1].span<float>(), out[0].span<float>(),
                  [](const c::MatMulShape& m, absl::Span<const float> ea,
                     absl::Span<const float> eb, absl::Span<float> ec) {
                    return vendor::SplitKAtomicMatMul(m, ea, eb, ec);
                  });
}

template <ConvDirection kDir, Mode kMode>
absl::Status CudnnConvKernel(absl::Span<const Tensor> in,
                             absl::Span<Tensor> out, const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(sp::Conv2dShape s, ValidateConv(kDir, in, out, a));
  return vendor::CudnnConv2d(kMode, kDir, s, in[0].span<float>(),
                             in[1].span<float>(), out[0].span<float>());
}

// The transposed convolution on cuDNN: the conv2d direction kDir of the
// conv2d s whose input gradient it is (forward: kGradInput; grad_input:
// kForward; grad_weight: kGradWeight with dy as s's input and x as s's
// output gradient).
template <ConvDirection kDir, Mode kMode>
absl::Status CudnnConvTransposeKernel(absl::Span<const Tensor> in,
                                      absl::Span<Tensor> out,
                                      const OpAttrs& a) {
  const char* name =
      kDir == ConvDirection::kGradInput ? op::kConvTranspose2dForward
      : kDir == ConvDirection::kForward ? op::kConvTranspose2dGradInput
                                        : op::kConvTranspose2dGradWeight;
  LS_ASSIGN_OR_RETURN(const sp::Conv2dShape s,
                      sp::ValidateConv2dCall(name, in, out, a));
  LS_RETURN_IF_ERROR(vendor::CheckCudnnConv2d(name, s));
  const bool swap = kDir == ConvDirection::kGradWeight;
  return vendor::CudnnConv2d(kMode, kDir, s, in[swap ? 1 : 0].span<float>(),
                             in[swap ? 0 : 1].span<float>(),
                             out[0].span<float>());
}

absl::Status AtomicBiasAddGradKernel(absl::Span<const Tensor> in,
                                     absl::Span<Tensor> out, const OpAttrs&) {
  LS_RETURN_IF_ERROR(CheckArity(op::kBiasAddGrad, in, 1, out, 1));
  LS_ASSIGN_OR_RETURN(c::BiasShape s, ValidateBiasAddGrad(in[0], out[0]));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kBiasAddGrad, in, out));
  return vendor::AtomicBiasAddGrad(s, in[0].span<float>(),
                                   out[0].span<float>());
}

// in {ids, dy}, out {dw}.
absl::Status AtomicEmbeddingGradKernel(absl::Span<const Tensor> in,
                                       absl::Span<Tensor> out, const OpAttrs&) {
  LS_RETURN_IF_ERROR(CheckArity(op::kEmbeddingGradWeight, in, 2, out, 1));
  LS_ASSIGN_OR_RETURN(c::EmbeddingShape s,
                      ValidateEmbedding(op::kEmbeddingGradWeight, in[0], out[0],
                                        "dw", in[1], "dy"));
  LS_RETURN_IF_ERROR(CheckNoAlias(op::kEmbeddingGradWeight, in, out));
  return vendor::AtomicEmbeddingGrad(s, in[0].span<int32_t>(),
                                     in[1].span<float>(), out[0].span<float>());
}

// in {x, dy}, out {dx}.
absl::Status AtomicMaxPool2dGradKernel(absl::Span<const Tensor> in,
                                       absl::Span<Tensor> out,
                                       const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(const sp::Pool2dShape s,
                      sp::ValidatePool2dCall(op::kMaxPool2dGrad, in, out, a));
  return vendor::AtomicMaxPool2dGrad(s, in[0].span<float>(),
                                     in[1].span<float>(), out[0].span<float>());
}

// The CANONICAL CUDA kernel (plan.h validates as the CPU backend does):
// every output element is one thread's gather, no atomics.
template <const char* kOp>
absl::Status GatherKernel(absl::Span<const Tensor> in, absl::Span<Tensor> out,
                          const OpAttrs& a) {
  LS_ASSIGN_OR_RETURN(cuda::DeviceCall call,
                      cuda::PlanCanonicalOp(kOp, in, out, a));
  return cuda::RunOnDevice(call, cuda::LaunchConfig{});
}

struct Entry {
  const char* op;
  Mode mode;
  const char* algorithm;
  KernelFn fn;
};

constexpr Mode kDet = Mode::kDeterministic;
constexpr Mode kDef = Mode::kDefault;

}  // namespace

absl::Status RegisterCudaVendorKernels(Registry* registry) {
  if (!vendor::VendorBuiltWithCuda()) {
    return absl::FailedPreconditionError("cudnn backend: built without CUDA");
  }
  const KernelFn split_k = &SplitKAtomicDenseForwardKernel;
  const KernelFn def_grad_input = &CublasDenseKernel<DenseOp::kGradInput, kDef>;
  const KernelFn def_grad_weight =
      &CublasDenseKernel<DenseOp::kGradWeight, kDef>;
  const KernelFn def_conv_fwd = &CudnnConvKernel<ConvDirection::kForward, kDef>;
  const KernelFn def_conv_gin =
      &CudnnConvKernel<ConvDirection::kGradInput, kDef>;
  const KernelFn def_conv_gw =
      &CudnnConvKernel<ConvDirection::kGradWeight, kDef>;
  const KernelFn def_convt_fwd =
      &CudnnConvTransposeKernel<ConvDirection::kGradInput, kDef>;
  const KernelFn def_convt_gin =
      &CudnnConvTransposeKernel<ConvDirection::kForward, kDef>;
  const KernelFn def_convt_gw =
      &CudnnConvTransposeKernel<ConvDirection::kGradWeight, kDef>;
  const Entry entries[] = {
      // DETERMINISTIC.
      {op::kDenseForward, kDet, kCublasAlgorithm,
       &CublasDenseKernel<DenseOp::kForward, kDet>},
      {op::kDenseGradInput, kDet, kCublasAlgorithm,
       &CublasDenseKernel<DenseOp::kGradInput, kDet>},
      {op::kDenseGradWeight, kDet, kCublasAlgorithm,
       &CublasDenseKernel<DenseOp::kGradWeight, kDet>},
      {op::kConv2dForward, kDet, kCudnnAlgorithm,
       &CudnnConvKernel<ConvDirection::kForward, kDet>},
      {op::kConv2dGradInput, kDet, kCudnnAlgorithm,
       &CudnnConvKernel<ConvDirection::kGradInput, kDet>},
      {op::kConv2dGradWeight, kDet, kCudnnAlgorithm,
       &CudnnConvKernel<ConvDirection::kGradWeight, kDet>},
      {op::kConvTranspose2dForward, kDet, kCudnnAlgorithm,
       &CudnnConvTransposeKernel<ConvDirection::kGradInput, kDet>},
      {op::kConvTranspose2dGradInput, kDet, kCudnnAlgorithm,
       &CudnnConvTransposeKernel<ConvDirection::kForward, kDet>},
      {op::kConvTranspose2dGradWeight, kDet, kCudnnAlgorithm,
       &CudnnConvTransposeKernel<ConvDirection::kGradWeight, kDet>},
      {op::kBiasAddGrad, kDet, kGatherAlgorithm,
       &GatherKernel<op::kBiasAddGrad>},
      {op::kMaxPool2dGrad, kDet, kGatherAlgorithm,
       &GatherKernel<op::kMaxPool2dGrad>},
      {op::kMatMulForward, kDet, kCublasAlgorithm,
       &CublasMatMulForwardKernel<kDet>},
      {op::kMatMulGrad, kDet, kCublasAlgorithm, &CublasMatMulGradKernel<kDet>},
      // DEFAULT.
      {op::kDenseForward, kDef, kCublasAlgorithm,
       &CublasDenseKernel<DenseOp::kForward, kDef>},
      {op::kDenseForward, kDef, kVendorSplitKAtomicAlgorithm, split_k},
      {op::kDenseForward, kDef, kVendorDefaultAlgorithm, split_k},
      {op::kDenseGradInput, kDef, kCublasAlgorithm, def_grad_input},
      {op::kDenseGradInput, kDef, kVendorDefaultAlgorithm, def_grad_input},
      {op::kDenseGradWeight, kDef, kCublasAlgorithm, def_grad_weight},
      {op::kDenseGradWeight, kDef, kVendorDefaultAlgorithm, def_grad_weight},
      {op::kConv2dForward, kDef, kCudnnFindAlgorithm, def_conv_fwd},
      {op::kConv2dForward, kDef, kVendorDefaultAlgorithm, def_conv_fwd},
      {op::kConv2dGradInput, kDef, kCudnnFindAlgorithm, def_conv_gin},
      {op::kConv2dGradInput, kDef, kVendorDefaultAlgorithm, def_conv_gin},
      {op::kConv2dGradWeight, kDef, kCudnnFindAlgorithm, def_conv_gw},
      {op::kConv2dGradWeight, kDef, kVendorDefaultAlgorithm, def_conv_gw},
      {op::kConvTranspose2dForward, kDef, kCudnnFindAlgorithm, def_convt_fwd},
      {op::kConvTranspose2dForward, kDef, kVendorDefaultAlgorithm,
       def_convt_fwd},
      {op::kConvTranspose2dGradInput, kDef, kCudnnFindAlgorithm, def_convt_gin},
      {op::kConvTranspose2dGradInput, kDef, kVendorDefaultAlgorithm,
       def_convt_gin},
      {op::kConvTranspose2dGradWeight, kDef, kCudnnFindAlgorithm, def_convt_gw},
      {op::kConvTranspose2dGradWeight, kDef, kVendorDefaultAlgorithm,
       def_convt_gw},
      {op::kBiasAddGrad, kDef, kVendorAtomicAlgorithm,
       &AtomicBiasAddGradKernel},
      {op::kBiasAddGrad, kDef, kVendorDefaultAlgorithm,
       &AtomicBiasAddGradKernel},
      {op::kMaxPool2dGrad, kDef, kVendorAtomicAlgorithm,
       &AtomicMaxPool2dGradKernel},
      {op::kMaxPool2dGrad, kDef, kVendorDefaultAlgorithm,
       &AtomicMaxPool2dGradKernel},
      {op::kEmbeddingGradWeight, kDef, kVendorAtomicAlgorithm,
       &AtomicEmbeddingGradKernel},
      {op::kEmbeddingGradWeight, kDef, kVendorDefaultAlgorithm,
       &AtomicEmbeddingGradKernel},
      {op::kMatMulForward, kDef, kCublasAlgorithm,
       &CublasMatMulForwardKernel<kDef>},
      {op::kMatMulForward, kDef, kVendorSplitKAtomicAlgorithm,
       &SplitKAtomicMatMulForwardKernel},
      {op::kMatMulForward, kDef, kVendorDefaultAlgorithm,
       &SplitKAtomicMatMulForwardKernel},
      {op::kMatMulGrad, kDef, kCublasAlgorithm, &CublasMatMulGradKernel<kDef>},
      {op::kMatMulGrad, kDef, kVendorDefaultAlgorithm,
       &CublasMatMulGradKernel<kDef>},
  };
  for (const Entry& e : entries) {
    LS_RETURN_IF_ERROR(registry->Register(
        KernelKey{e.op, e.mode, e.algorithm, kCudaBackendName}, e.fn));
    // Each DETERMINISTIC kernel also under DEFAULT "deterministic", so a
    // DEFAULT job can pin single ops to it (config.op_algorithms).
    if (e.mode == kDet) {
      LS_RETURN_IF_ERROR(registry->Register(
          KernelKey{e.op, kDef, kVendorDeterministicAlgorithm,
                    kCudaBackendName},
          e.fn));
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep::kernels
