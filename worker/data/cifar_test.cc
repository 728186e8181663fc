// The CIFAR-10 binary format (dataset.file.format CIFAR10).
#include <cstdint>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/tensor.h"
#include "lockstep/v1/job.pb.h"
#include "worker/data/dataset.h"
#include "worker/data/file_io.h"
#include "worker/data/test_util.h"

namespace lockstep::worker {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::lockstep::worker::testing::TestDir;
using ::lockstep::worker::testing::WriteRaw;
using ::testing::HasSubstr;

constexpr int64_t kPixels = 3072;

// Record e: label labels[e], pixel j = (e * 7 + j) mod 256.
std::string Records(const std::vector<int>& labels) {
  std::string out;
  for (size_t e = 0; e < labels.size(); ++e) {
    out.push_back(static_cast<char>(labels[e]));
    for (int64_t j = 0; j < kPixels; ++j) {
      out.push_back(static_cast<char>((e * 7 + j) % 256));
    }
  }
  return out;
}

class CifarDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = TestDir();
    path_ = dir + "/data_batch_1.bin";
    WriteRaw(path_, Records({3, 9, 0}));
    absl::StatusOr<std::string> root = CanonicalDataRoot(dir, "test");
    ASSERT_THAT(root, IsOk());
    options_.data_root = *root;
    spec_.mutable_file()->set_format(v1::FileDataset::CIFAR10);
    spec_.mutable_file()->set_inputs_path("data_batch_1.bin");
  }
  std::string path_;
  DatasetOptions options_;
  v1::Dataset spec_;
};

TEST_F(CifarDatasetTest, RecordsBecomeImagesAndLabelsInFileOrder) {
  auto ds = OpenDataset(spec_, 1, {3, 32, 32}, 10, options_);
  ASSERT_THAT(ds, IsOk());
  kernels::Tensor x, y;
  ASSERT_THAT((*ds)->Batch(1, 2, &x, &y), IsOk());  // records 2, 0
  ASSERT_EQ(x.shape(), (std::vector<int64_t>{2, 3, 32, 32}));
  EXPECT_EQ(std::vector<int32_t>(y.data<int32_t>(), y.data<int32_t>() + 2),
            (std::vector<int32_t>{0, 3}));
  const float* p = x.data<float>();
  for (int64_t j : {int64_t{0}, int64_t{1}, int64_t{1024}, kPixels - 1}) {
    EXPECT_EQ(p[j], static_cast<float>((2 * 7 + j) % 256) / 255.0f) << j;
    EXPECT_EQ(p[kPixels + j], static_cast<float>(j % 256) / 255.0f) << j;
  }
  // [3072] is the same data flattened.
  auto flat = OpenDataset(spec_, 1, {kPixels}, 10, options_);
  ASSERT_THAT(flat, IsOk());
  EXPECT_EQ((*flat)->digest(), (*ds)->digest());
}

TEST_F(CifarDatasetTest, BadFilesAndSpecsNameTheRule) {
  EXPECT_THAT(OpenDataset(spec_, 1, {1, 28, 28}, 10, options_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("CIFAR-10 examples are [3, 32, 32]")));
  EXPECT_THAT(OpenDataset(spec_, 1, {3, 32, 32}, 5, options_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("label of record 1 is 9, outside [0, 5)")));
  WriteRaw(path_, Records({1}) + "xyz");
  EXPECT_THAT(OpenDataset(spec_, 1, {3, 32, 32}, 10, options_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("3076 bytes is not a positive multiple of "
                                 "the 3073-byte CIFAR-10 record")));
  spec_.mutable_file()->set_labels_path("labels.bin");
  EXPECT_THAT(OpenDataset(spec_, 1, {3, 32, 32}, 10, options_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("labels_path must be empty for CIFAR10")));
}

}  // namespace
}  // namespace lockstep::worker
