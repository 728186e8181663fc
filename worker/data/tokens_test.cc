// Token-sequence datasets (dataset.tokens): the synthetic Markov chain of
// docs/canonical-arithmetic.md section 6.4 and byte-level text files.
#include <cstdint>
#include <memory>
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

std::vector<int32_t> Values(const kernels::Tensor& t) {
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
}

TEST(TokenDatasetTest, SyntheticSequencesAreSeededAndShiftedByOne) {
  v1::Dataset spec;
  spec.mutable_tokens();
  auto ds = OpenDataset(spec, /*job_seed=*/1, {16}, 64);
  ASSERT_THAT(ds, IsOk());
  kernels::Tensor x, y, x2, y2;
  ASSERT_THAT((*ds)->Batch(3, 4, &x, &y), IsOk());
  ASSERT_EQ(x.dtype(), kernels::DType::kInt32);
  ASSERT_EQ(x.shape(), (std::vector<int64_t>{4, 16}));
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{4, 16}));
  const std::vector<int32_t> xs = Values(x), ys = Values(y);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t k = 0; k + 1 < 16; ++k) {
      EXPECT_EQ(ys[i * 16 + k], xs[i * 16 + k + 1]);  // next-token labels
    }
  }
  for (int32_t v : xs) EXPECT_TRUE(v >= 0 && v < 64) << v;
  // The same (seed, step, batch) gives the same bits; another step others.
  ASSERT_THAT((*ds)->Batch(3, 4, &x2, &y2), IsOk());
  EXPECT_EQ(Values(x2), xs);
  EXPECT_EQ(Values(y2), ys);
  ASSERT_THAT((*ds)->Batch(4, 4, &x2, &y2), IsOk());
  EXPECT_NE(Values(x2), xs);
  // The teacher is followed 7/8 of the time: most successors repeat.
  // Pinned values: a change of the generator must bump
  // kTokenGeneratorVersion and these.
  ASSERT_THAT((*ds)->Batch(0, 1, &x2, &y2), IsOk());
  EXPECT_EQ(Values(x2), (std::vector<int32_t>{5, 27, 21, 1, 28, 57, 59, 20, 55,
                                              0, 0, 18, 34, 61, 48, 19}));
  auto other = OpenDataset(spec, /*job_seed=*/2, {16}, 64);
  ASSERT_THAT(other, IsOk());
  EXPECT_NE((*other)->digest(), (*ds)->digest());
  spec.mutable_tokens()->set_teacher_seed(9);
  auto teacher = OpenDataset(spec, /*job_seed=*/1, {16}, 64);
  ASSERT_THAT(teacher, IsOk());
  EXPECT_NE((*teacher)->digest(), (*ds)->digest());
}

TEST(TokenDatasetTest, SyntheticNeedsASequenceShape) {
  v1::Dataset spec;
  spec.mutable_tokens();
  EXPECT_THAT(OpenDataset(spec, 1, {4, 4}, 64),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("model.input_shape must be [T]")));
}

class TextDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir();
    WriteRaw(dir_ + "/text.txt", "abcdefghij");
    absl::StatusOr<std::string> root = CanonicalDataRoot(dir_, "test");
    ASSERT_THAT(root, IsOk());
    options_.data_root = *root;
    spec_.mutable_tokens()->set_text_path("text.txt");
  }
  std::string dir_;
  DatasetOptions options_;
  v1::Dataset spec_;
};

TEST_F(TextDatasetTest, BytesAreTokensInFileOrderWrappingAround) {
  auto ds = OpenDataset(spec_, 1, {3}, 256, options_);
  ASSERT_THAT(ds, IsOk());
  kernels::Tensor x, y;
  // (10 - 1) / 3 = 3 examples: "abc", "def", "ghi".
  ASSERT_THAT((*ds)->Batch(0, 2, &x, &y), IsOk());
  EXPECT_EQ(Values(x), (std::vector<int32_t>{'a', 'b', 'c', 'd', 'e', 'f'}));
  EXPECT_EQ(Values(y), (std::vector<int32_t>{'b', 'c', 'd', 'e', 'f', 'g'}));
  ASSERT_THAT((*ds)->Batch(1, 2, &x, &y), IsOk());
  EXPECT_EQ(Values(x), (std::vector<int32_t>{'g', 'h', 'i', 'a', 'b', 'c'}));
  EXPECT_EQ(Values(y), (std::vector<int32_t>{'h', 'i', 'j', 'b', 'c', 'd'}));
  // The digest names the bytes.
  WriteRaw(dir_ + "/text.txt", "abcdefghiX");
  auto changed = OpenDataset(spec_, 1, {3}, 256, options_);
  ASSERT_THAT(changed, IsOk());
  EXPECT_NE((*changed)->digest(), (*ds)->digest());
}

TEST_F(TextDatasetTest, BadSpecsNameTheRuleWithoutQuotingTheFile) {
  EXPECT_THAT(OpenDataset(spec_, 1, {3}, 128, options_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must be 256, got 128")));
  const absl::Status short_file =
      OpenDataset(spec_, 1, {20}, 256, options_).status();
  EXPECT_THAT(short_file, StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("holds 10 bytes, fewer than one "
                                             "example of T + 1 = 21")));
  EXPECT_THAT(std::string(short_file.message()),
              ::testing::Not(HasSubstr("abc")));
  DatasetOptions no_root;
  EXPECT_THAT(OpenDataset(spec_, 1, {3}, 256, no_root),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace lockstep::worker
