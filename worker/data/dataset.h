// Training data for a run: where the batch of every step comes from.
//
// A Dataset turns a lockstep.v1.Dataset spec into batches: step s of a run
// trains on Batch(s, batch_size), a pure function of the spec, the job seed,
// the step and the batch size, and digest() names that data and its order
// exactly, so two runs with equal digests saw the same bits.
//
// Sources (README.md in this directory has the full rules):
//   synthetic  The canonical synthetic classification data of
//              kernels/random/synthetic.h (Philox-drawn labels; each input
//              is its class's fixed random prototype plus Philox noise):
//              an endless stream (examples == 0) or a pool of `examples`
//              examples visited in a fixed order.
//   file IDX   MNIST files: uint8 images [n, rows, cols] + uint8 labels [n].
//   file NPY   .npy arrays: float32 (or uint8) inputs [n, ...input_shape] +
//              int32 / uint8 / int64 labels [n].
//   file CIFAR10  the CIFAR-10 binary format: records of a label byte and
//              3072 pixel bytes (3 x 32 x 32, channel-major) in one file.
//   tokens     int32 token sequences [batch, T] with next-token labels
//              [batch, T]: synthetic (a Philox-seeded Markov chain over the
//              model's num_classes tokens, an endless stream) or the bytes
//              of a text file (vocabulary 256, examples in file order).
// File examples are used in file order, wrapping around: example
// (step * batch + i) mod n is row i of step `step`. uint8 pixels become
// floats by one IEEE division, x = float(v) / 255.0f.
//
// Thread-safety: a Dataset is immutable after OpenDataset; Batch() may be
// called from several threads at once.
#ifndef LOCKSTEP_WORKER_DATA_DATASET_H_
#define LOCKSTEP_WORKER_DATA_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/tensor.h"
#include "lockstep/v1/job.pb.h"
#include "worker/data/file_io.h"

namespace lockstep::worker {

// Version of the bits a synthetic dataset produces, part of its digest. Bump
// it (and the pinned values in dataset_test.cc) whenever a generated bit
// changes. 1: worker/data's own generator (streams 0x4C534441544100xx,
// unnormalised teacher); 2: kernels/random/synthetic.h (streams
// 0x53594E54480000xx, unit-norm teacher rows); 3: class prototypes plus
// noise, Philox labels (kernels/random/synthetic.h, learnable by the zoo).
inline constexpr int kSyntheticGeneratorVersion = 3;

class Dataset {
 public:
  virtual ~Dataset() = default;

  // Example shape without the batch dim, e.g. {1, 28, 28} or {64}: always
  // the model's input_shape.
  virtual const std::vector<int64_t>& example_shape() const = 0;
  // The model's number of classes; every label is in [0, num_classes()).
  virtual int32_t num_classes() const = 0;
  // The batch for training step `step`: *x becomes a new float32 tensor
  // [batch, ...example_shape] and *labels a new int32 tensor [batch]
  // (token datasets: int32 ids [batch, T] and labels [batch, T]) (fresh
  // storage every call; the previous handles are released, not overwritten).
  // INVALID_ARGUMENT for step < 0, batch < 1 or a batch over the tensor
  // limits; x and labels are left untouched on error.
  virtual absl::Status Batch(int64_t step, int64_t batch, kernels::Tensor* x,
                             kernels::Tensor* labels) = 0;
  // 32 lowercase hex digits identifying the data and its order exactly.
  virtual std::string digest() const = 0;
};

struct DatasetOptions {
  // The directory file datasets are read from (canonical, as
  // CanonicalDataRoot in file_io.h returns it): dataset.file paths are
  // absolute or relative to it, and must resolve, symbolic links included,
  // to regular files inside it (ReadFileUnderRoot). Empty: file datasets are
  // refused (FAILED_PRECONDITION); synthetic datasets need no root.
  std::string data_root;
  // Largest inputs file and largest labels file read, in bytes (each).
  // Default 4 GiB.
  int64_t max_file_bytes = kDefaultMaxFileBytes;
  // Largest synthetic teacher, in weights (model.num_classes * features,
  // 4 bytes each). Default 2^26 (256 MiB).
  int64_t max_teacher_elements = int64_t{1} << 26;
};

// Opens the dataset `spec` (JobConfig.dataset; no source set means synthetic
// with defaults) for a model with `model_input_shape` and `num_classes`.
// `job_seed` is JobConfig.seed. Files are read, validated and hashed here,
// once; the dataset then holds one copy of the inputs file's bytes and the
// labels as int32.
//
// Errors name the field or file and the limit or rule, and never quote the
// files' bytes (sizes, offsets and expected magic numbers only), e.g.
//   INVALID_ARGUMENT dataset.file.inputs_path "/d/x.idx": example shape
//     [1, 28, 28] does not match model.input_shape [1, 16, 16]
//   NOT_FOUND dataset.file.labels_path "/d/y.idx": no such file
//   INVALID_ARGUMENT dataset.file.inputs_path "/etc/shadow": is outside the
//     worker's --data_root "/d" (...)
// INVALID_ARGUMENT always means the job's inputs are at fault: any worker
// would fail the same way.
absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(
    const lockstep::v1::Dataset& spec, uint64_t job_seed,
    const std::vector<int64_t>& model_input_shape, int32_t num_classes,
    const DatasetOptions& options);
absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(
    const lockstep::v1::Dataset& spec, uint64_t job_seed,
    const std::vector<int64_t>& model_input_shape, int32_t num_classes);

}  // namespace lockstep::worker

#endif  // LOCKSTEP_WORKER_DATA_DATASET_H_
