#include "worker/data/dataset.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/digest.h"
#include "common/status_macros.h"
#include "kernels/canonical/version.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/lane_kernels.h"
#include "kernels/random/philox.h"
#include "kernels/random/synthetic.h"
#include "kernels/tensor.h"
#include "worker/data/byte_order.h"
#include "worker/data/file_io.h"
#include "worker/data/idx.h"
#include "worker/data/npy.h"
#include "xxhash.h"

namespace lockstep::worker {
namespace {

using ::lockstep::kernels::DType;
using ::lockstep::kernels::ShapeString;
using ::lockstep::kernels::Tensor;

// Prefix of the bytes hashed into a file dataset's digest; bump the version
// when the meaning of the same files changes (conversion, order).
constexpr char kFileDigestTag[] = "lockstep-file-dataset/v1\n";

// Index of the first example of `step`: (step * batch) mod n, exactly.
uint64_t FirstExample(int64_t step, int64_t batch, uint64_t n) {
  const unsigned __int128 s = static_cast<uint64_t>(step) % n;
  const unsigned __int128 b = static_cast<uint64_t>(batch) % n;
  return static_cast<uint64_t>((s * b) % n);
}

// An endless stream draws Philox index (step * batch + i) * per_example + j
// for row i of `step`: every one must fit in 64 bits.
absl::Status CheckEndlessStream(int64_t step, int64_t batch,
                                int64_t per_example, absl::string_view name) {
  const unsigned __int128 end = (static_cast<unsigned __int128>(step) + 1) *
                                static_cast<uint64_t>(batch) *
                                static_cast<uint64_t>(per_example);
  if (end > ~uint64_t{0}) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset batch: step ", step, " with batch size ", batch,
                     " is past the end of the ", name, " stream"));
  }
  return absl::OkStatus();
}

absl::Status CheckBatchArgs(int64_t step, int64_t batch) {
  if (step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset batch: step must be >= 0, got ", step));
  }
  if (batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset batch: batch size must be >= 1, got ", batch));
  }
  return absl::OkStatus();
}

// Allocates x [batch, ...example_shape] and labels [batch].
absl::Status AllocateBatch(int64_t batch,
                           const std::vector<int64_t>& example_shape, Tensor* x,
                           Tensor* labels) {
  std::vector<int64_t> shape = {batch};
  shape.insert(shape.end(), example_shape.begin(), example_shape.end());
  absl::StatusOr<Tensor> xt = Tensor::Zeros(DType::kFloat32, shape);
  if (!xt.ok()) {
    return absl::Status(xt.status().code(),
                        absl::StrCat("dataset batch: ", xt.status().message()));
  }
  absl::StatusOr<Tensor> lt = Tensor::Zeros(DType::kInt32, {batch});
  if (!lt.ok()) {
    return absl::Status(lt.status().code(),
                        absl::StrCat("dataset batch: ", lt.status().message()));
  }
  *x = *std::move(xt);
  *labels = *std::move(lt);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Synthetic data: the generator is kernels/random/synthetic.h (labels and
// noise from the job seed, class prototypes -- the "teacher" -- from the
// teacher seed); this class only maps rows to example indices.

class SyntheticDataset final : public Dataset {
 public:
  // teacher: the class prototypes [num_classes, features] of
  // canonical::SyntheticTeacherWeights(teacher_seed, ...).
  SyntheticDataset(std::vector<int64_t> example_shape, int32_t num_classes,
                   int64_t features, uint64_t seed, int64_t examples,
                   std::vector<float> teacher, std::string digest)
      : example_shape_(std::move(example_shape)),
        num_classes_(num_classes),
        features_(features),
        seed_(seed),
        examples_(examples),
        teacher_(std::move(teacher)),
        digest_(std::move(digest)) {}

  const std::vector<int64_t>& example_shape() const override {
    return example_shape_;
  }
  int32_t num_classes() const override { return num_classes_; }
  std::string digest() const override { return digest_; }

  absl::Status Batch(int64_t step, int64_t batch, Tensor* x,
                     Tensor* labels) override {
    LS_RETURN_IF_ERROR(CheckBatchArgs(step, batch));
    uint64_t first;
    if (examples_ == 0) {
      // Endless stream: example index step * batch + i; every Philox index
      // (example * features + j) must fit in 64 bits (SyntheticNoise).
      LS_RETURN_IF_ERROR(
          CheckEndlessStream(step, batch, features_, "synthetic"));
      first = static_cast<uint64_t>(step) * static_cast<uint64_t>(batch);
    } else {
      first = FirstExample(step, batch, static_cast<uint64_t>(examples_));
    }
    Tensor xt, lt;
    LS_RETURN_IF_ERROR(AllocateBatch(batch, example_shape_, &xt, &lt));
    float* xd = xt.data<float>();
    int32_t* ld = lt.data<int32_t>();
    constexpr int64_t kBitsRun = 1024;
    uint32_t bits[kBitsRun];
    const kernels::CpuIsa isa = kernels::ActiveCpuIsa();
    uint64_t e = first;
    for (int64_t i = 0; i < batch; ++i) {
      const int32_t label = canonical::SyntheticLabel(seed_, e, num_classes_);
      const float* prototype = teacher_.data() + label * features_;
      float* row = xd + i * features_;
      // SyntheticInput of every feature: the noise's Philox bits of a run
      // of features, then the inputs, both on the vector.
      const uint64_t base = e * static_cast<uint64_t>(features_);
      for (int64_t j0 = 0; j0 < features_; j0 += kBitsRun) {
        const int64_t n = std::min(kBitsRun, features_ - j0);
        kernels::PhiloxBitsLanes(seed_, canonical::kStreamSyntheticInputs,
                                 base + static_cast<uint64_t>(j0), n, bits,
                                 isa);
        // SyntheticInputOfBits: fma(scale, BitsToUniform(bits, -1, 1),
        // prototype).
        kernels::UniformFmaLanes(bits, -1.0f, 1.0f,
                                 canonical::kSyntheticNoiseScale,
                                 prototype + j0, row + j0, n, isa);
      }
      ld[i] = label;
      ++e;
      if (examples_ > 0 && e == static_cast<uint64_t>(examples_)) e = 0;
    }
    *x = std::move(xt);
    *labels = std::move(lt);
    return absl::OkStatus();
  }

 private:
  const std::vector<int64_t> example_shape_;
  const int32_t num_classes_;
  const int64_t features_;
  const uint64_t seed_;
  const int64_t examples_;            // 0: endless stream.
  const std::vector<float> teacher_;  // [num_classes, features], row-major.
  const std::string digest_;
};

// The canonical description hashed into a synthetic dataset's digest.
std::string SyntheticDescription(uint64_t seed, uint64_t teacher_seed,
                                 const std::vector<int64_t>& example_shape,
                                 int32_t classes, int64_t examples) {
  return absl::StrCat(
      "lockstep-synthetic-dataset\n", "generator=", kSyntheticGeneratorVersion,
      "\n", "canonical_arithmetic=", canonical::kCanonicalArithmeticVersion,
      "\n", "seed=", seed, "\n", "teacher_seed=", teacher_seed, "\n",
      "example_shape=", ShapeString(example_shape), "\n", "classes=", classes,
      "\n", "examples=", examples, "\n");
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenSyntheticDataset(
    const lockstep::v1::SyntheticDataset& spec, uint64_t job_seed,
    const std::vector<int64_t>& model_shape, int64_t features,
    int32_t num_classes, const DatasetOptions& options) {
  if (spec.examples() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset.synthetic.examples must be >= 0 (0 = endless), got ",
        spec.examples()));
  }
  if (spec.examples() > 0 && static_cast<unsigned __int128>(spec.examples()) *
                                     static_cast<uint64_t>(features) >
                                 ~uint64_t{0}) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset.synthetic.examples (", spec.examples(),
                     ") * features (", features, ") must be below 2^64"));
  }
  const uint64_t teacher_seed =
      spec.teacher_seed() != 0 ? spec.teacher_seed() : job_seed;
  if (features > options.max_teacher_elements / num_classes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset.synthetic: the teacher needs model.num_classes * features = ",
        num_classes, " * ", features, " weights, over the limit of ",
        options.max_teacher_elements));
  }
  std::vector<float> teacher(static_cast<size_t>(num_classes) *
                             static_cast<size_t>(features));
  if (absl::Status s = canonical::SyntheticTeacherWeights(
          teacher_seed, features, num_classes, teacher.data());
      !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("dataset.synthetic: ", s.message()));
  }
  std::string digest = Digest128Hex(SyntheticDescription(
      job_seed, teacher_seed, model_shape, num_classes, spec.examples()));
  return std::unique_ptr<Dataset>(new SyntheticDataset(
      model_shape, num_classes, features, job_seed, spec.examples(),
      std::move(teacher), std::move(digest)));
}

// ---------------------------------------------------------------------------
// Files.

// How the inputs file's bytes become floats.
enum class InputEncoding {
  kUInt8,      // One byte per value; x = float(v) / 255.0f.
  kFloat32LE,  // IEEE binary32, little-endian; bits copied as they are.
};

class FileDataset final : public Dataset {
 public:
  FileDataset(std::vector<int64_t> example_shape, int32_t num_classes,
              int64_t features, int64_t n, std::string inputs,
              int64_t inputs_offset, InputEncoding encoding,
              std::vector<int32_t> labels, std::string digest)
      : example_shape_(std::move(example_shape)),
        num_classes_(num_classes),
        features_(features),
        n_(n),
        inputs_(std::move(inputs)),
        inputs_offset_(inputs_offset),
        encoding_(encoding),
        labels_(std::move(labels)),
        digest_(std::move(digest)) {}

  const std::vector<int64_t>& example_shape() const override {
    return example_shape_;
  }
  int32_t num_classes() const override { return num_classes_; }
  std::string digest() const override { return digest_; }

  absl::Status Batch(int64_t step, int64_t batch, Tensor* x,
                     Tensor* labels) override {
    LS_RETURN_IF_ERROR(CheckBatchArgs(step, batch));
    Tensor xt, lt;
    LS_RETURN_IF_ERROR(AllocateBatch(batch, example_shape_, &xt, &lt));
    float* xd = xt.data<float>();
    int32_t* ld = lt.data<int32_t>();
    const uint64_t n = static_cast<uint64_t>(n_);
    uint64_t e = FirstExample(step, batch, n);
    for (int64_t i = 0; i < batch; ++i) {
      float* row = xd + i * features_;
      if (encoding_ == InputEncoding::kUInt8) {
        const auto* src = reinterpret_cast<const unsigned char*>(
            inputs_.data() + inputs_offset_ + e * features_);
        for (int64_t j = 0; j < features_; ++j) {
          row[j] = static_cast<float>(src[j]) / 255.0f;
        }
      } else {
        CopyLittleEndian(inputs_.data() + inputs_offset_ + e * features_ * 4,
                         features_, 4, row);
      }
      ld[i] = labels_[e];
      e = (e + 1 == n) ? 0 : e + 1;
    }
    *x = std::move(xt);
    *labels = std::move(lt);
    return absl::OkStatus();
  }

 private:
  const std::vector<int64_t> example_shape_;
  const int32_t num_classes_;
  const int64_t features_;       // Elements per example.
  const int64_t n_;              // Examples, >= 1.
  const std::string inputs_;     // The inputs file, whole.
  const int64_t inputs_offset_;  // Where its array data starts.
  const InputEncoding encoding_;
  const std::vector<int32_t> labels_;
  const std::string digest_;
};

// XXH3-128 over a byte stream, written like Digest128Hex.
class StreamDigest {
 public:
  StreamDigest() : state_(XXH3_createState()) {
    if (state_ != nullptr) XXH3_128bits_reset(state_);
  }
  ~StreamDigest() { XXH3_freeState(state_); }
  StreamDigest(const StreamDigest&) = delete;
  StreamDigest& operator=(const StreamDigest&) = delete;

  bool ok() const { return state_ != nullptr; }
  void Update(absl::string_view bytes) {
    XXH3_128bits_update(state_, bytes.data(), bytes.size());
  }
  std::string Hex() const {
    const XXH128_hash_t h = XXH3_128bits_digest(state_);
    return absl::StrFormat("%016x%016x", h.high64, h.low64);
  }

 private:
  XXH3_state_t* state_;
};

// Reads one file of a file dataset, feeding its bytes to `digest` and then
// its length as 8 little-endian bytes.
absl::StatusOr<std::string> ReadHashed(const std::string& path,
                                       absl::string_view what,
                                       const DatasetOptions& options,
                                       StreamDigest* digest) {
  LS_ASSIGN_OR_RETURN(
      std::string bytes,
      ReadFileUnderRoot(
          options.data_root, path, what, options.max_file_bytes,
          [digest](absl::string_view chunk) { digest->Update(chunk); }));
  std::string len;
  AppendLittleEndian64(bytes.size(), &len);
  digest->Update(len);
  return bytes;
}

// The example shapes an IDX image file [n, rows, cols] can feed. rows and
// cols are below 2^32 each, so rows * cols may not fit in int64 (an empty
// file can declare [0, 2^32 - 1, 2^32 - 1]): the flat shape is compared by
// division.
bool IdxShapeFits(const std::vector<int64_t>& model, int64_t rows,
                  int64_t cols) {
  return model == std::vector<int64_t>{1, rows, cols} ||
         model == std::vector<int64_t>{rows, cols} ||
         (model.size() == 1 && rows != 0 && model[0] % rows == 0 &&
          model[0] / rows == cols);
}

// Checks every label against [0, num_classes) and converts it to int32.
template <typename T>
absl::Status ConvertLabels(const char* data, int64_t n, int elem_size,
                           int32_t num_classes, absl::string_view what,
                           std::vector<int32_t>* out) {
  out->resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    T raw;
    CopyLittleEndian(data + i * elem_size, 1, elem_size, &raw);
    const int64_t v = raw;
    if (v < 0 || v >= num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": label at index ", i, " is ", v, ", outside [0, ",
          num_classes, ") (model.num_classes = ", num_classes, ")"));
    }
    (*out)[i] = static_cast<int32_t>(v);
  }
  return absl::OkStatus();
}

absl::Status CheckLabelCount(int64_t labels, int64_t examples,
                             absl::string_view lb_what,
                             absl::string_view in_what) {
  if (labels == examples) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(lb_what, ": holds ", labels, " labels but ", in_what,
                   " holds ", examples, " examples"));
}

// The CIFAR-10 binary format: n records of 1 label byte + 3072 pixels.
constexpr int64_t kCifarPixels = 3 * 32 * 32;
constexpr int64_t kCifarRecord = 1 + kCifarPixels;

absl::StatusOr<std::unique_ptr<Dataset>> OpenCifarDataset(
    const lockstep::v1::FileDataset& spec,
    const std::vector<int64_t>& model_shape, int64_t features,
    int32_t num_classes, const DatasetOptions& options) {
  if (spec.inputs_path().empty()) {
    return absl::InvalidArgumentError("dataset.file.inputs_path is empty");
  }
  if (!spec.labels_path().empty()) {
    return absl::InvalidArgumentError(
        "dataset.file.labels_path must be empty for CIFAR10 (the labels are "
        "inside the inputs file)");
  }
  const std::string what =
      absl::StrCat("dataset.file.inputs_path ", QuotedPath(spec.inputs_path()));
  if (model_shape != std::vector<int64_t>{3, 32, 32} &&
      model_shape != std::vector<int64_t>{kCifarPixels}) {
    return absl::InvalidArgumentError(
        absl::StrCat(what,
                     ": CIFAR-10 examples are [3, 32, 32] (or [3072]), but "
                     "model.input_shape is ",
                     ShapeString(model_shape)));
  }
  StreamDigest digest;
  if (!digest.ok()) return absl::ResourceExhaustedError("XXH3_createState");
  digest.Update(kFileDigestTag);
  digest.Update("format=CIFAR10\n");
  LS_ASSIGN_OR_RETURN(std::string file,
                      ReadHashed(spec.inputs_path(), what, options, &digest));
  const int64_t size = static_cast<int64_t>(file.size());
  if (size == 0 || size % kCifarRecord != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", size, " bytes is not a positive multiple of the ",
        kCifarRecord, "-byte CIFAR-10 record (1 label byte + 3072 pixels)"));
  }
  const int64_t n = size / kCifarRecord;
  std::string pixels(static_cast<size_t>(n * kCifarPixels), '\0');
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) {
    const char* record = file.data() + e * kCifarRecord;
    const int32_t label = static_cast<unsigned char>(record[0]);
    if (label >= num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": label of record ", e, " is ", label, ", outside [0, ",
          num_classes, ") (model.num_classes = ", num_classes, ")"));
    }
    labels[e] = label;
    std::copy_n(record + 1, kCifarPixels, &pixels[e * kCifarPixels]);
  }
  return std::unique_ptr<Dataset>(new FileDataset(
      model_shape, num_classes, features, n, std::move(pixels), 0,
      InputEncoding::kUInt8, std::move(labels), digest.Hex()));
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenFileDataset(
    const lockstep::v1::FileDataset& spec,
    const std::vector<int64_t>& model_shape, int64_t features,
    int32_t num_classes, const DatasetOptions& options) {
  if (spec.format() == lockstep::v1::FileDataset::CIFAR10) {
    return OpenCifarDataset(spec, model_shape, features, num_classes, options);
  }
  const bool idx = spec.format() == lockstep::v1::FileDataset::IDX;
  if (!idx && spec.format() != lockstep::v1::FileDataset::NPY) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset.file.format must be IDX, NPY or CIFAR10, got ",
        lockstep::v1::FileDataset::Format_Name(spec.format()).empty()
            ? absl::StrCat(static_cast<int>(spec.format()))
            : lockstep::v1::FileDataset::Format_Name(spec.format())));
  }
  if (spec.inputs_path().empty()) {
    return absl::InvalidArgumentError("dataset.file.inputs_path is empty");
  }
  if (spec.labels_path().empty()) {
    return absl::InvalidArgumentError("dataset.file.labels_path is empty");
  }
  const std::string in_what =
      absl::StrCat("dataset.file.inputs_path ", QuotedPath(spec.inputs_path()));
  const std::string lb_what =
      absl::StrCat("dataset.file.labels_path ", QuotedPath(spec.labels_path()));

  StreamDigest digest;
  if (!digest.ok()) return absl::ResourceExhaustedError("XXH3_createState");
  digest.Update(kFileDigestTag);
  digest.Update(idx ? "format=IDX\n" : "format=NPY\n");

  LS_ASSIGN_OR_RETURN(
      std::string inputs,
      ReadHashed(spec.inputs_path(), in_what, options, &digest));
  int64_t n = 0;
  int64_t inputs_offset = 0;
  InputEncoding encoding;
  std::vector<int64_t> file_example_shape;
  if (idx) {
    LS_ASSIGN_OR_RETURN(const IdxHeader h,
                        ParseIdx(inputs, in_what, kIdxImagesMagic));
    n = h.dims[0];
    inputs_offset = h.data_offset;
    encoding = InputEncoding::kUInt8;
    file_example_shape = {1, h.dims[1], h.dims[2]};
    if (!IdxShapeFits(model_shape, h.dims[1], h.dims[2])) {
      return absl::InvalidArgumentError(absl::StrCat(
          in_what, ": example shape ", ShapeString(file_example_shape),
          " does not match model.input_shape ", ShapeString(model_shape),
          " (IDX images [n, rows, cols] feed [1, rows, cols], [rows, cols] or "
          "[rows * cols])"));
    }
  } else {
    LS_ASSIGN_OR_RETURN(const NpyHeader h, ParseNpy(inputs, in_what));
    if (h.dtype != NpyDType::kFloat32 && h.dtype != NpyDType::kUInt8) {
      return absl::InvalidArgumentError(
          absl::StrCat(in_what, ": inputs must be '<f4' (or '|u1'), got '",
                       NpyDescr(h.dtype), "'"));
    }
    if (h.shape.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          in_what,
          ": inputs must have shape [n, ...model.input_shape], got a "
          "0-d array"));
    }
    n = h.shape[0];
    inputs_offset = h.data_offset;
    encoding = h.dtype == NpyDType::kUInt8 ? InputEncoding::kUInt8
                                           : InputEncoding::kFloat32LE;
    file_example_shape.assign(h.shape.begin() + 1, h.shape.end());
    if (file_example_shape != model_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          in_what, ": example shape ", ShapeString(file_example_shape),
          " does not match model.input_shape ", ShapeString(model_shape)));
    }
  }
  if (n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(in_what, ": holds no examples (at least 1 required)"));
  }

  LS_ASSIGN_OR_RETURN(
      std::string label_file,
      ReadHashed(spec.labels_path(), lb_what, options, &digest));
  std::vector<int32_t> labels;
  if (idx) {
    LS_ASSIGN_OR_RETURN(const IdxHeader h,
                        ParseIdx(label_file, lb_what, kIdxLabelsMagic));
    LS_RETURN_IF_ERROR(CheckLabelCount(h.dims[0], n, lb_what, in_what));
    LS_RETURN_IF_ERROR(ConvertLabels<uint8_t>(label_file.data() + h.data_offset,
                                              n, 1, num_classes, lb_what,
                                              &labels));
  } else {
    LS_ASSIGN_OR_RETURN(const NpyHeader h, ParseNpy(label_file, lb_what));
    if (h.dtype != NpyDType::kInt32 && h.dtype != NpyDType::kInt64 &&
        h.dtype != NpyDType::kUInt8) {
      return absl::InvalidArgumentError(
          absl::StrCat(lb_what, ": labels must be '<i4', '<i8' or '|u1', got '",
                       NpyDescr(h.dtype), "'"));
    }
    if (h.shape.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          lb_what, ": labels must have shape [n], got ", ShapeString(h.shape)));
    }
    LS_RETURN_IF_ERROR(CheckLabelCount(h.shape[0], n, lb_what, in_what));
    const char* data = label_file.data() + h.data_offset;
    if (h.dtype == NpyDType::kInt32) {
      LS_RETURN_IF_ERROR(
          ConvertLabels<int32_t>(data, n, 4, num_classes, lb_what, &labels));
    } else if (h.dtype == NpyDType::kInt64) {
      LS_RETURN_IF_ERROR(
          ConvertLabels<int64_t>(data, n, 8, num_classes, lb_what, &labels));
    } else {
      LS_RETURN_IF_ERROR(
          ConvertLabels<uint8_t>(data, n, 1, num_classes, lb_what, &labels));
    }
  }
  return std::unique_ptr<Dataset>(new FileDataset(
      model_shape, num_classes, features, n, std::move(inputs), inputs_offset,
      encoding, std::move(labels), digest.Hex()));
}

// ---- token sequences -----------------------------------------------------

// Philox streams of the synthetic token sequences
// (docs/canonical-arithmetic.md section 6.4).
constexpr uint64_t kStreamTokenTeacher = 0x544F4B454E000001ull;
constexpr uint64_t kStreamTokenSequence = 0x544F4B454E000002ull;

// A 24-bit draw scaled to [0, vocab): (u24 * vocab) >> 24.
int32_t ScaledToken(uint32_t bits, int64_t vocab) {
  return static_cast<int32_t>(
      (static_cast<uint64_t>(bits >> 8) * static_cast<uint64_t>(vocab)) >> 24);
}

// Token sequences [batch, T] with next-token labels [batch, T]: synthetic
// (a seeded Markov chain) or the bytes of a text file.
class TokenDataset final : public Dataset {
 public:
  // Synthetic.
  TokenDataset(int64_t t, int32_t vocab, uint64_t seed,
               std::vector<int32_t> next, std::string digest)
      : example_shape_{t},
        t_(t),
        vocab_(vocab),
        seed_(seed),
        next_(std::move(next)),
        digest_(std::move(digest)) {}
  // Text bytes.
  TokenDataset(int64_t t, std::string text, std::string digest)
      : example_shape_{t},
        t_(t),
        vocab_(256),
        text_(std::move(text)),
        digest_(std::move(digest)) {}

  const std::vector<int64_t>& example_shape() const override {
    return example_shape_;
  }
  int32_t num_classes() const override { return vocab_; }
  std::string digest() const override { return digest_; }

  absl::Status Batch(int64_t step, int64_t batch, Tensor* x,
                     Tensor* labels) override {
    LS_RETURN_IF_ERROR(CheckBatchArgs(step, batch));
    absl::StatusOr<Tensor> xt = Tensor::Zeros(DType::kInt32, {batch, t_});
    if (!xt.ok()) {
      return absl::Status(
          xt.status().code(),
          absl::StrCat("dataset batch: ", xt.status().message()));
    }
    Tensor lt = Tensor::Zeros(DType::kInt32, {batch, t_}).value();
    int32_t* xd = xt->data<int32_t>();
    int32_t* ld = lt.data<int32_t>();
    std::vector<int32_t> seq(static_cast<size_t>(t_ + 1));
    if (text_.empty()) {
      // Endless stream: example e = step * batch + i; every Philox index
      // e * (T + 1) + k must fit in 64 bits.
      LS_RETURN_IF_ERROR(CheckEndlessStream(step, batch, t_ + 1, "token"));
      for (int64_t i = 0; i < batch; ++i) {
        const uint64_t e =
            static_cast<uint64_t>(step) * static_cast<uint64_t>(batch) + i;
        SyntheticSequence(e, seq.data());
        std::copy_n(seq.data(), t_, xd + i * t_);
        std::copy_n(seq.data() + 1, t_, ld + i * t_);
      }
    } else {
      const uint64_t n = (text_.size() - 1) / static_cast<uint64_t>(t_);
      uint64_t e = FirstExample(step, batch, n);
      for (int64_t i = 0; i < batch; ++i) {
        const unsigned char* b =
            reinterpret_cast<const unsigned char*>(text_.data()) + e * t_;
        for (int64_t k = 0; k < t_; ++k) {
          xd[i * t_ + k] = b[k];
          ld[i * t_ + k] = b[k + 1];
        }
        if (++e == n) e = 0;
      }
    }
    *x = *std::move(xt);
    *labels = std::move(lt);
    return absl::OkStatus();
  }

 private:
  // Tokens t_0 .. t_T of example e: t_0 uniform; then with probability
  // 7/8 the teacher's successor of the previous token, else uniform.
  void SyntheticSequence(uint64_t e, int32_t* out) const {
    const uint64_t base = e * static_cast<uint64_t>(t_ + 1);
    out[0] = ScaledToken(
        canonical::PhiloxBits(seed_, kStreamTokenSequence, base), vocab_);
    for (int64_t k = 1; k <= t_; ++k) {
      const uint32_t r =
          canonical::PhiloxBits(seed_, kStreamTokenSequence, base + k);
      out[k] = (r & 0xFFu) < 224u ? next_[out[k - 1]] : ScaledToken(r, vocab_);
    }
  }

  const std::vector<int64_t> example_shape_;
  const int64_t t_;
  const int32_t vocab_;
  const uint64_t seed_ = 0;
  const std::vector<int32_t> next_;  // synthetic: successor of each token
  const std::string text_;           // text: the file's bytes
  const std::string digest_;
};

// Version of the synthetic token sequences, part of their digest.
constexpr int kTokenGeneratorVersion = 1;

absl::StatusOr<std::unique_ptr<Dataset>> OpenTokenDataset(
    const lockstep::v1::TokenDataset& spec, uint64_t job_seed,
    const std::vector<int64_t>& model_shape, int32_t num_classes,
    const DatasetOptions& options) {
  if (model_shape.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset.tokens: model.input_shape must be [T] (a sequence of T "
        "token ids), got ",
        ShapeString(model_shape)));
  }
  const int64_t t = model_shape[0];
  if (spec.text_path().empty()) {
    const uint64_t teacher_seed =
        spec.teacher_seed() != 0 ? spec.teacher_seed() : job_seed;
    std::vector<int32_t> next(static_cast<size_t>(num_classes));
    for (int32_t v = 0; v < num_classes; ++v) {
      next[v] = ScaledToken(
          canonical::PhiloxBits(teacher_seed, kStreamTokenTeacher, v),
          num_classes);
    }
    std::string digest = Digest128Hex(absl::StrCat(
        "lockstep-token-dataset\n", "generator=", kTokenGeneratorVersion, "\n",
        "seed=", job_seed, "\n", "teacher_seed=", teacher_seed, "\n",
        "length=", t, "\n", "vocab=", num_classes, "\n"));
    return std::unique_ptr<Dataset>(new TokenDataset(
        t, num_classes, job_seed, std::move(next), std::move(digest)));
  }
  const std::string what =
      absl::StrCat("dataset.tokens.text_path ", QuotedPath(spec.text_path()));
  if (num_classes != 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        what,
        ": text is read as bytes, so model.num_classes (the vocabulary) "
        "must be 256, got ",
        num_classes));
  }
  StreamDigest digest;
  if (!digest.ok()) return absl::ResourceExhaustedError("XXH3_createState");
  digest.Update(kFileDigestTag);
  digest.Update(absl::StrCat("format=TEXT_BYTES\nlength=", t, "\n"));
  LS_ASSIGN_OR_RETURN(std::string text,
                      ReadHashed(spec.text_path(), what, options, &digest));
  if (text.size() < static_cast<uint64_t>(t) + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": holds ", text.size(),
                     " bytes, fewer than one example of T + 1 = ", t + 1,
                     " (T = model.input_shape[0])"));
  }
  return std::unique_ptr<Dataset>(
      new TokenDataset(t, std::move(text), digest.Hex()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(
    const lockstep::v1::Dataset& spec, uint64_t job_seed,
    const std::vector<int64_t>& model_input_shape, int32_t num_classes,
    const DatasetOptions& options) {
  if (model_input_shape.empty()) {
    return absl::InvalidArgumentError("model.input_shape is empty");
  }
  for (size_t i = 0; i < model_input_shape.size(); ++i) {
    if (model_input_shape[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.input_shape ", ShapeString(model_input_shape),
                       ": dimension ", i, " must be >= 1"));
    }
  }
  absl::StatusOr<int64_t> features =
      kernels::CheckedNumElements(model_input_shape);
  if (!features.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.input_shape: ", features.status().message()));
  }
  if (num_classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.num_classes must be >= 1, got ", num_classes));
  }
  if (options.max_file_bytes < 0 || options.max_teacher_elements < 0) {
    return absl::InvalidArgumentError("DatasetOptions: negative limit");
  }
  if (spec.source_case() == lockstep::v1::Dataset::kFile) {
    return OpenFileDataset(spec.file(), model_input_shape, *features,
                           num_classes, options);
  }
  if (spec.source_case() == lockstep::v1::Dataset::kTokens) {
    return OpenTokenDataset(spec.tokens(), job_seed, model_input_shape,
                            num_classes, options);
  }
  return OpenSyntheticDataset(spec.synthetic(), job_seed, model_input_shape,
                              *features, num_classes, options);
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(
    const lockstep::v1::Dataset& spec, uint64_t job_seed,
    const std::vector<int64_t>& model_input_shape, int32_t num_classes) {
  return OpenDataset(spec, job_seed, model_input_shape, num_classes,
                     DatasetOptions());
}

}  // namespace lockstep::worker
