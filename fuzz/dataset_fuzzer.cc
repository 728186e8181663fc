// File datasets (worker/data/dataset.h OpenDataset) beyond the IDX and NPY
// headers, CIFAR-10 files and byte-level text token files: the example
// shape against model.input_shape, dtypes, label counts and label ranges,
// and the batches cut from the files.
//
// Input layout: byte 0 picks the format (bit 0: IDX or NPY), the model's
// input shape (bits 1-3) and the number of classes (bits 4-7); bytes 1-2
// (little-endian) are the inputs file's length; the inputs file follows,
// and the rest is the labels file. Both are written to a private
// directory used as the data root. Shape index 7 selects the formats with
// one file instead: CIFAR10 (bit 0 clear; input [3, 32, 32]) or byte-level
// text tokens (bit 0 set; input [4], 256 classes when bit 4 is set).
//
// Invariants for an opened dataset: example_shape() is the model's input
// shape, num_classes() the model's, the digest 32 hex digits, and every
// batch has shape [batch, ...input_shape], labels in [0, num_classes) and
// uint8 pixels in [0, 1]. Every refusal is INVALID_ARGUMENT,
// FAILED_PRECONDITION or RESOURCE_EXHAUSTED naming a dataset field.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_check.h"
#include "kernels/tensor.h"
#include "lockstep/v1/job.pb.h"
#include "worker/data/dataset.h"
#include "worker/data/file_io.h"

namespace {

using ::lockstep::kernels::Tensor;
using ::lockstep::worker::CanonicalDataRoot;
using ::lockstep::worker::Dataset;
using ::lockstep::worker::DatasetOptions;
using ::lockstep::worker::OpenDataset;

const std::string& DataRoot() {
  static const std::string* root = [] {
    const char* base = std::getenv("TEST_TMPDIR");
    if (base == nullptr) base = std::getenv("TMPDIR");
    std::string tmpl = absl::StrCat(base != nullptr ? base : "/tmp",
                                    "/lockstep-dataset-fuzz.XXXXXX");
    FUZZ_CHECK(mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed");
    absl::StatusOr<std::string> canonical = CanonicalDataRoot(tmpl, "root");
    FUZZ_CHECK(canonical.ok(), canonical.status().ToString());
    return new std::string(*canonical);
  }();
  return *root;
}

void WriteFile(const std::string& path, absl::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  FUZZ_CHECK(f != nullptr, path);
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
  FUZZ_CHECK(std::fclose(f) == 0, path);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const bool one_file = ((data[0] >> 1) & 7) == 7;
  const bool cifar = one_file && (data[0] & 1) == 0;
  const bool text = one_file && (data[0] & 1) == 1;
  const bool idx = !one_file && (data[0] & 1) == 0;
  static const std::vector<std::vector<int64_t>> kShapes = {
      {1, 2, 2}, {2, 2}, {4}, {1, 1, 1}, {1}, {3, 1}, {1, 28, 28}, {3, 32, 32}};
  const std::vector<int64_t> shape =
      text ? std::vector<int64_t>{4} : kShapes[(data[0] >> 1) & 7];
  const int32_t num_classes =
      text && (data[0] & 0x10) != 0 ? 256 : 2 + (data[0] >> 4);
  const size_t inputs_len =
      std::min<size_t>(data[1] | (data[2] << 8), size - 3);
  const absl::string_view rest(reinterpret_cast<const char*>(data + 3),
                               size - 3);

  const std::string& root = DataRoot();
  WriteFile(root + "/inputs", rest.substr(0, inputs_len));
  WriteFile(root + "/labels", rest.substr(inputs_len));
  lockstep::v1::Dataset spec;
  if (text) {
    spec.mutable_tokens()->set_text_path("inputs");
  } else {
    spec.mutable_file()->set_format(
        cifar ? lockstep::v1::FileDataset::CIFAR10
              : (idx ? lockstep::v1::FileDataset::IDX
                     : lockstep::v1::FileDataset::NPY));
    spec.mutable_file()->set_inputs_path("inputs");
    if (!cifar) spec.mutable_file()->set_labels_path("labels");
  }
  DatasetOptions options;
  options.data_root = root;
  options.max_file_bytes = 1 << 20;

  absl::StatusOr<std::unique_ptr<Dataset>> ds =
      OpenDataset(spec, /*job_seed=*/7, shape, num_classes, options);
  if (!ds.ok()) {
    const absl::StatusCode code = ds.status().code();
    FUZZ_CHECK(code == absl::StatusCode::kInvalidArgument ||
                   code == absl::StatusCode::kResourceExhausted,
               ds.status().ToString());
    FUZZ_CHECK(absl::StartsWith(ds.status().message(), "dataset."),
               ds.status().ToString());
    return 0;
  }
  FUZZ_CHECK((*ds)->example_shape() == shape, "example_shape changed");
  FUZZ_CHECK((*ds)->num_classes() == num_classes, "num_classes changed");
  FUZZ_CHECK((*ds)->digest().size() == 32, "digest is not 32 hex digits");
  for (const auto& [step, batch] :
       std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 3}, {5, 2}}) {
    Tensor x, labels;
    const absl::Status s = (*ds)->Batch(step, batch, &x, &labels);
    FUZZ_CHECK(s.ok(), s.ToString());
    std::vector<int64_t> want = {batch};
    want.insert(want.end(), shape.begin(), shape.end());
    FUZZ_CHECK(x.shape() == want, "batch x has the wrong shape");
    if (text) {
      // Token ids and next-token labels [batch, T], bytes all.
      FUZZ_CHECK(labels.shape() == want, "token labels have the wrong shape");
      for (int64_t i = 0; i < x.numel(); ++i) {
        const int32_t v = x.data<int32_t>()[i];
        const int32_t l = labels.data<int32_t>()[i];
        FUZZ_CHECK(v >= 0 && v < 256 && l >= 0 && l < 256,
                   "token outside the byte range");
      }
      continue;
    }
    FUZZ_CHECK(labels.shape() == std::vector<int64_t>{batch},
               "batch labels have the wrong shape");
    for (int64_t i = 0; i < batch; ++i) {
      const int32_t label = labels.data<int32_t>()[i];
      FUZZ_CHECK(
          label >= 0 && label < num_classes,
          absl::StrCat("label ", label, " outside [0, ", num_classes, ")"));
    }
    if (idx || cifar) {
      for (int64_t i = 0; i < x.numel(); ++i) {
        const float v = x.data<float>()[i];
        FUZZ_CHECK(v >= 0.0f && v <= 1.0f, "uint8 pixel outside [0, 1]");
      }
    }
  }
  return 0;
}
