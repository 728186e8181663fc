#include "kernels/registry.h"

#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep::kernels {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

absl::Status KernelA(absl::Span<const Tensor>, absl::Span<Tensor>,
                     const OpAttrs&) {
  return absl::OkStatus();
}
absl::Status KernelB(absl::Span<const Tensor>, absl::Span<Tensor>,
                     const OpAttrs&) {
  return absl::InternalError("B ran");
}

KernelKey Key(std::string op, Mode mode, std::string algo,
              std::string backend) {
  return KernelKey{std::move(op), mode, std::move(algo), std::move(backend)};
}

TEST(RegistryTest, LookupFindsExactKey) {
  Registry r;
  ASSERT_THAT(
      r.Register(Key("relu.forward", Mode::kCanonical, "canonical", "cpu"),
                 &KernelA),
      IsOk());
  ASSERT_THAT(
      r.Register(Key("relu.forward", Mode::kDefault, "fast", "cpu"), &KernelB),
      IsOk());
  absl::StatusOr<KernelFn> a =
      r.Lookup(Key("relu.forward", Mode::kCanonical, "canonical", "cpu"));
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(*a, &KernelA);
  absl::StatusOr<KernelFn> b =
      r.Lookup(Key("relu.forward", Mode::kDefault, "fast", "cpu"));
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(*b, &KernelB);
  EXPECT_EQ(r.size(), 2u);
  EXPECT_TRUE(r.Contains(Key("relu.forward", Mode::kDefault, "fast", "cpu")));
}

TEST(RegistryTest, MissNamesKeyAndWhatIsRegistered) {
  Registry r;
  ASSERT_THAT(
      r.Register(Key("relu.forward", Mode::kCanonical, "canonical", "cpu"),
                 &KernelA),
      IsOk());
  // Same op, other mode: lists the registered variants of the op.
  EXPECT_THAT(
      r.Lookup(Key("relu.forward", Mode::kDeterministic, "canonical", "cpu")),
      StatusIs(absl::StatusCode::kNotFound,
               AllOf(HasSubstr("no kernel for op 'relu.forward', mode "
                               "DETERMINISTIC, algorithm 'canonical', "
                               "backend 'cpu'"),
                     HasSubstr("registered for 'relu.forward': (mode "
                               "CANONICAL, algorithm 'canonical', backend "
                               "'cpu')"))));
  // Other backend / algorithm: a miss too.
  EXPECT_THAT(
      r.Lookup(Key("relu.forward", Mode::kCanonical, "canonical", "cuda")),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("backend 'cuda'")));
  EXPECT_THAT(
      r.Lookup(Key("relu.forward", Mode::kCanonical, "tiled", "cpu")),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("algorithm 'tiled'")));
  // Unknown op: lists the registered ops.
  EXPECT_THAT(
      r.Lookup(Key("gelu.forward", Mode::kCanonical, "canonical", "cpu")),
      StatusIs(absl::StatusCode::kNotFound,
               HasSubstr("op 'gelu.forward' has no kernels; registered ops: "
                         "relu.forward")));
}

TEST(RegistryTest, RegisterRejectsDuplicatesAndBadKeys) {
  Registry r;
  const KernelKey k = Key("add.forward", Mode::kCanonical, "canonical", "cpu");
  ASSERT_THAT(r.Register(k, &KernelA), IsOk());
  EXPECT_THAT(r.Register(k, &KernelB),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("add.forward/CANONICAL/canonical/cpu")));
  // The first registration stays.
  EXPECT_EQ(*r.Lookup(k), &KernelA);
  EXPECT_THAT(
      r.Register(Key("", Mode::kCanonical, "canonical", "cpu"), &KernelA),
      StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(r.Register(Key("x", Mode::kCanonical, "", "cpu"), &KernelA),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(
      r.Register(Key("x", Mode::kCanonical, "canonical", "cpu"), nullptr),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("null")));
}

TEST(RegistryTest, KeysAndOpsAreSorted) {
  Registry r;
  ASSERT_THAT(r.Register(Key("b", Mode::kDefault, "x", "cpu"), &KernelA),
              IsOk());
  ASSERT_THAT(r.Register(Key("a", Mode::kCanonical, "x", "cpu"), &KernelA),
              IsOk());
  ASSERT_THAT(r.Register(Key("b", Mode::kCanonical, "x", "cpu"), &KernelA),
              IsOk());
  std::vector<KernelKey> keys = r.Keys();
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_EQ(keys[0].DebugString(), "a/CANONICAL/x/cpu");
  EXPECT_EQ(keys[1].DebugString(), "b/CANONICAL/x/cpu");
  EXPECT_EQ(keys[2].DebugString(), "b/DEFAULT/x/cpu");
  EXPECT_EQ(r.Ops(), (std::vector<std::string>{"a", "b"}));
}

TEST(RegistryTest, ModeNames) {
  EXPECT_EQ(ModeName(Mode::kCanonical), "CANONICAL");
  EXPECT_EQ(ModeName(Mode::kDeterministic), "DETERMINISTIC");
  EXPECT_EQ(ModeName(Mode::kDefault), "DEFAULT");
  EXPECT_EQ(DenseFamilyOpNames().size(), 15u);
  EXPECT_EQ(SpatialOpNames().size(), 14u);
  EXPECT_EQ(NnOpNames().size(), 25u);
  EXPECT_EQ(TransformerOpNames().size(), 4u);
  EXPECT_EQ(GraphElementwiseOpNames().size(), 9u);
  EXPECT_EQ(AllOpNames().size(), 67u);
}

}  // namespace
}  // namespace lockstep::kernels
