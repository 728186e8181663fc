// The vendor-library runtime of a build without CUDA (no toolkit or no
// cuDNN at build time, or --define=cuda=off): every entry point reports
// "built without CUDA".
#include "kernels/cudnn/vendor_runtime.h"
#include "kernels/cudnn/vendor_status.h"

namespace lockstep::kernels::vendor {
namespace {

absl::Status NoCuda() {
  return absl::FailedPreconditionError("cudnn backend: built without CUDA");
}

}  // namespace

bool VendorBuiltWithCuda() { return false; }

absl::Status VendorErrorToStatus(const char*, const std::string&,
                                 const std::string&, bool, const char*,
                                 const char*, int) {
  return NoCuda();
}

absl::Status CublasErrorToStatus(int, const char*, const char*, int) {
  return NoCuda();
}

absl::Status CudnnErrorToStatus(int, const char*, const char*, int) {
  return NoCuda();
}

absl::Status CublasMatMul(Mode, const canonical::MatMulShape&,
                          absl::Span<const float>, absl::Span<const float>,
                          absl::Span<float>) {
  return NoCuda();
}

absl::Status SplitKAtomicMatMul(const canonical::MatMulShape&,
                                absl::Span<const float>,
                                absl::Span<const float>, absl::Span<float>) {
  return NoCuda();
}

absl::Status CudnnConv2d(Mode, ConvDirection, const spatial::Conv2dShape&,
                         absl::Span<const float>, absl::Span<const float>,
                         absl::Span<float>) {
  return NoCuda();
}

absl::Status AtomicBiasAddGrad(const canonical::BiasShape&,
                               absl::Span<const float>, absl::Span<float>) {
  return NoCuda();
}

absl::Status AtomicMaxPool2dGrad(const spatial::Pool2dShape&,
                                 absl::Span<const float>,
                                 absl::Span<const float>, absl::Span<float>) {
  return NoCuda();
}

absl::Status AtomicEmbeddingGrad(const canonical::EmbeddingShape&,
                                 absl::Span<const int32_t>,
                                 absl::Span<const float>, absl::Span<float>) {
  return NoCuda();
}

absl::StatusOr<std::string> RunVendorBenchmarks(int) { return NoCuda(); }

}  // namespace lockstep::kernels::vendor
