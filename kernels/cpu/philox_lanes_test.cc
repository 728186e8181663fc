// PhiloxBitsLanes (lane_kernels.h): Philox4x32-10 blocks 16 (AVX-512) or 8
// (AVX2) at a time, one per lane, give canonical::PhiloxBits' bits for
// every index, on every ISA path this CPU has: ranges that start and end
// inside a block and on block edges, shorter than a vector, counters whose
// low word wraps inside a vector group (index 2^34) and at the top of the
// index space, keys and streams with both words set.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/lane_kernels.h"
#include "kernels/random/philox.h"

namespace lockstep::kernels {
namespace {

TEST(PhiloxLanesTest, EveryIsaGivesPhiloxBitsForEveryIndex) {
  struct Range {
    uint64_t begin;
    int64_t count;
  };
  const Range ranges[] = {
      {0, 0},
      {0, 1},
      {1, 3},
      {3, 70},
      {4, 64},
      {5, 1000},
      {7, 4096 + 13},
      // Block 2^32 - 5 .. 2^32 + 45: the low counter word wraps inside
      // a group of 8 or 16 blocks.
      {(uint64_t{1} << 34) - 21, 203},
      // The last indices there are, from inside a block and from the
      // last block's first index.
      {~uint64_t{0} - 300, 300},
      {~uint64_t{0} - 2, 2},
      {~uint64_t{0} - 3, 3},
  };
  const uint64_t seeds[] = {0, 20261205, 0xFEDCBA9876543210ull};
  const uint64_t streams[] = {0, 0x44524F5000000003ull, ~uint64_t{0}};
  for (CpuIsa isa : SupportedCpuIsas()) {
    for (const Range& r : ranges) {
      for (uint64_t seed : seeds) {
        for (uint64_t stream : streams) {
          std::vector<uint32_t> got(static_cast<size_t>(r.count) + 1,
                                    0xA5A5A5A5u);
          PhiloxBitsLanes(seed, stream, r.begin, r.count, got.data(), isa);
          const std::string where = absl::StrCat(
              "isa ", CpuIsaName(isa), ", begin ", r.begin, ", count ", r.count,
              ", seed ", seed, ", stream ", stream);
          int mismatches = 0;
          for (int64_t k = 0; k < r.count && mismatches < 5; ++k) {
            const uint32_t want = canonical::PhiloxBits(
                seed, stream, r.begin + static_cast<uint64_t>(k));
            if (got[k] != want) {
              ++mismatches;
              ADD_FAILURE() << where << ": index " << r.begin + k << " got "
                            << got[k] << ", want " << want;
            }
          }
          EXPECT_EQ(got[r.count], 0xA5A5A5A5u)
              << where << ": wrote past the range";
        }
      }
    }
  }
}

}  // namespace
}  // namespace lockstep::kernels
