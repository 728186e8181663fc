#include "common/status_macros.h"

#include <memory>
#include <string>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::lockstep::testing::IsOk;
using ::lockstep::testing::IsOkAndHolds;
using ::lockstep::testing::StatusIs;
using ::testing::Eq;
using ::testing::HasSubstr;

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("x must be even");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  LS_ASSIGN_OR_RETURN(int h, Half(x));
  LS_ASSIGN_OR_RETURN(h, Half(h));
  return h;
}

absl::Status CheckEven(int x) {
  LS_RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<int>> MakeBox(int x) {
  return std::make_unique<int>(x);
}

absl::StatusOr<int> Unbox(int x) {
  LS_ASSIGN_OR_RETURN(auto box, MakeBox(x));  // move-only value
  return *box;
}

TEST(StatusMacros, AssignOrReturnPropagatesValuesAndErrors) {
  EXPECT_THAT(Quarter(8), IsOkAndHolds(Eq(2)));
  EXPECT_THAT(Quarter(6), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("must be even")));
  EXPECT_THAT(Unbox(5), IsOkAndHolds(Eq(5)));
}

TEST(StatusMacros, ReturnIfErrorStopsAtFirstError) {
  EXPECT_THAT(CheckEven(4), IsOk());
  EXPECT_THAT(CheckEven(3),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("even")));
}

}  // namespace
}  // namespace lockstep
