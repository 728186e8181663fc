// A build without CUDA has no vendor libraries to load.
#include "kernels/cudnn/vendor_libs.h"

namespace lockstep::kernels::vendor {

absl::Status VendorLibrariesStatus() {
  return absl::FailedPreconditionError("vendor libraries: built without CUDA");
}

}  // namespace lockstep::kernels::vendor
