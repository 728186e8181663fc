#include "worker/exec/dataset_batches.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace lockstep::worker {

BatchSource DatasetBatches(std::shared_ptr<Dataset> dataset,
                           int64_t batch_size) {
  BatchSource src;
  src.digest = dataset->digest();
  src.fill = [dataset = std::move(dataset), batch_size](
                 int step, kernels::Tensor& x,
                 kernels::Tensor& labels) -> absl::Status {
    kernels::Tensor bx;
    kernels::Tensor by;
    LS_RETURN_IF_ERROR(dataset->Batch(step, batch_size, &bx, &by));
    if (bx.dtype() != x.dtype() || bx.shape() != x.shape() ||
        by.dtype() != labels.dtype() || by.shape() != labels.shape()) {
      return absl::InternalError(absl::StrFormat(
          "dataset batch of step %d is %s / %s, the model expects %s / %s",
          step, bx.DebugString(), by.DebugString(), x.DebugString(),
          labels.DebugString()));
    }
    if (x.bytes() > 0) std::memcpy(x.raw_data(), bx.raw_data(), x.bytes());
    if (labels.bytes() > 0) {
      std::memcpy(labels.raw_data(), by.raw_data(), labels.bytes());
    }
    return absl::OkStatus();
  };
  return src;
}

}  // namespace lockstep::worker
