#include "kernels/tensor.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::kernels {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(TensorTest, ZerosHasShapeStridesAndZeroBytes) {
  absl::StatusOr<Tensor> t = Tensor::Zeros(DType::kFloat32, {2, 3, 4, 5});
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->dtype(), DType::kFloat32);
  EXPECT_EQ(t->rank(), 4);
  EXPECT_EQ(t->numel(), 120);
  EXPECT_EQ(t->bytes(), 480);
  EXPECT_THAT(t->strides(), ElementsAre(60, 20, 5, 1));
  EXPECT_EQ(t->DebugString(), "float32[2, 3, 4, 5]");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw_data()) % 64, 0u);
  for (float v : t->span<float>()) EXPECT_EQ(v, 0.0f);
}

TEST(TensorTest, DTypeSizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4);
  EXPECT_EQ(DTypeSize(DType::kInt32), 4);
  EXPECT_EQ(DTypeSize(DType::kUInt8), 1);
  EXPECT_EQ(DTypeName(DType::kInt32), "int32");
  absl::StatusOr<Tensor> u = Tensor::Zeros(DType::kUInt8, {3, 7});
  ASSERT_THAT(u, IsOk());
  EXPECT_EQ(u->bytes(), 21);
}

TEST(TensorTest, ScalarAndEmpty) {
  absl::StatusOr<Tensor> s = Tensor::Zeros(DType::kFloat32, {});
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->numel(), 1);
  EXPECT_EQ(s->DebugString(), "float32[]");
  ASSERT_NE(s->data<float>(), nullptr);

  absl::StatusOr<Tensor> e = Tensor::Zeros(DType::kFloat32, {4, 0, 2});
  ASSERT_THAT(e, IsOk());
  EXPECT_EQ(e->numel(), 0);
  EXPECT_EQ(e->bytes(), 0);
  EXPECT_TRUE(e->span<float>().empty());

  Tensor d;
  EXPECT_EQ(d.numel(), 0);
  EXPECT_THAT(d.shape(), ElementsAre(0));
}

TEST(TensorTest, BadShapesAreRejectedWithTheLimit) {
  EXPECT_THAT(Tensor::Zeros(DType::kFloat32, {2, -1}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dimension 1 is -1, must be >= 0")));
  EXPECT_THAT(Tensor::Zeros(DType::kFloat32, {1 << 16, 1 << 16}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("more than 2147483647 elements")));
  // Dimensions whose int64 product would overflow are caught per factor.
  EXPECT_THAT(
      Tensor::Zeros(DType::kFloat32, {int64_t{1} << 40, int64_t{1} << 40}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("over the limit of 2147483647")));
  EXPECT_THAT(Tensor::Zeros(DType::kFloat32, {1, 1, 1, 1, 1, 1, 1, 1, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 9, the limit is 8")));
  // Exactly at the limit the shape is valid (not allocated here).
  EXPECT_THAT(CheckedNumElements({kMaxTensorElements}), IsOk());
  EXPECT_THAT(CheckedNumElements({kMaxTensorElements + 1}),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST(TensorTest, CopiesShareStorageCloneDoesNot) {
  std::vector<float> v = {1, 2, 3, 4, 5, 6};
  absl::StatusOr<Tensor> t = Tensor::FromValues<float>({2, 3}, v);
  ASSERT_THAT(t, IsOk());
  Tensor alias = *t;
  absl::StatusOr<Tensor> clone = t->Clone();
  ASSERT_THAT(clone, IsOk());
  EXPECT_TRUE(alias.SharesStorageWith(*t));
  EXPECT_FALSE(clone->SharesStorageWith(*t));
  t->data<float>()[4] = 50.0f;
  EXPECT_EQ(alias.data<float>()[4], 50.0f);
  EXPECT_EQ(clone->data<float>()[4], 5.0f);
}

TEST(TensorTest, ReshapeIsAViewAndChecksCount) {
  std::vector<int32_t> v = {1, 2, 3, 4, 5, 6};
  absl::StatusOr<Tensor> t = Tensor::FromValues<int32_t>({2, 3}, v);
  ASSERT_THAT(t, IsOk());
  absl::StatusOr<Tensor> r = t->Reshape({3, 2});
  ASSERT_THAT(r, IsOk());
  EXPECT_THAT(r->shape(), ElementsAre(3, 2));
  EXPECT_TRUE(r->SharesStorageWith(*t));
  EXPECT_THAT(t->Reshape({4, 2}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cannot reshape int32[2, 3] (6 elements)")));
}

TEST(TensorTest, TypedAccessChecksDType) {
  absl::StatusOr<Tensor> t = Tensor::Zeros(DType::kInt32, {4});
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->data<float>(), nullptr);
  EXPECT_TRUE(t->span<float>().empty());
  EXPECT_NE(t->data<int32_t>(), nullptr);
  EXPECT_EQ(t->span<int32_t>().size(), 4u);
  EXPECT_THAT(CheckDType(*t, DType::kFloat32, "logits"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("logits must be float32, got int32[4]")));
  EXPECT_THAT(CheckShape(*t, {2, 2}, "labels"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("labels has shape [4], expected [2, 2]")));
}

TEST(TensorTest, FromValuesChecksCount) {
  std::vector<float> v = {1, 2, 3};
  EXPECT_THAT(Tensor::FromValues<float>({2, 2}, v),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("has 4 elements but 3 values")));
}

// A mirror holding its own copy of the bytes; counts copies back.
class FakeMirror : public StorageMirror {
 public:
  explicit FakeMirror(std::vector<float> values, int* copies)
      : values_(std::move(values)), copies_(copies) {}
  absl::Status CopyToHost(void* host) override {
    ++*copies_;
    std::memcpy(host, values_.data(), values_.size() * sizeof(float));
    return absl::OkStatus();
  }

 private:
  std::vector<float> values_;
  int* copies_;
};

TEST(TensorMirrorTest, HostAccessBringsNewerMirrorBytesBackOnce) {
  Tensor t = Tensor::FromValues<float>({3}, {1.0f, 2.0f, 3.0f}).value();
  EXPECT_EQ(t.mirror(), nullptr);
  EXPECT_FALSE(t.has_mirror());
  EXPECT_EQ(t.mirror_state(), MirrorState::kHostNewer);
  int copies = 0;
  t.AttachMirror(std::make_unique<FakeMirror>(
      std::vector<float>{7.0f, 8.0f, 9.0f}, &copies));
  ASSERT_NE(t.mirror(), nullptr);
  EXPECT_TRUE(t.has_mirror());
  // Attached: the host copy is the newer one; nothing comes back.
  EXPECT_EQ(t.mirror_state(), MirrorState::kHostNewer);
  EXPECT_EQ(std::as_const(t).data<float>()[0], 1.0f);
  EXPECT_EQ(copies, 0);
  // A backend wrote the mirror: a const read brings it back once and
  // leaves both the same; the unsynced address does not.
  t.SetMirrorState(MirrorState::kMirrorNewer);
  EXPECT_EQ(static_cast<const float*>(t.unsynced_data())[0], 1.0f);
  EXPECT_EQ(copies, 0);
  const Tensor view = t.Reshape({1, 3}).value();  // shares the storage
  EXPECT_EQ(view.data<float>()[2], 9.0f);
  EXPECT_EQ(copies, 1);
  EXPECT_EQ(t.mirror_state(), MirrorState::kSame);
  EXPECT_EQ(std::as_const(t).data<float>()[1], 8.0f);
  EXPECT_EQ(copies, 1);
  // A non-const access marks the host copy newer.
  t.data<float>()[0] = 5.0f;
  EXPECT_EQ(t.mirror_state(), MirrorState::kHostNewer);
  EXPECT_EQ(copies, 1);
  // Clones copy the current bytes and have no mirror.
  t.SetMirrorState(MirrorState::kMirrorNewer);
  const Tensor clone = t.Clone().value();
  EXPECT_EQ(copies, 2);
  EXPECT_EQ(clone.mirror(), nullptr);
  EXPECT_FALSE(clone.has_mirror());
  EXPECT_EQ(clone.data<float>()[0], 7.0f);
  // An empty tensor has no storage to mirror.
  Tensor empty;
  empty.AttachMirror(
      std::make_unique<FakeMirror>(std::vector<float>{}, &copies));
  EXPECT_EQ(empty.mirror(), nullptr);
}

}  // namespace
}  // namespace lockstep::kernels
