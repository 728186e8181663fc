// CanonicalExpLanes and CanonicalErfLanes (the AVX2 and AVX-512 exp and erf
// of the lane kernels) give canonical::CanonicalExp's and CanonicalErf's
// bits: on every 193rd float bit pattern (22
// million inputs of every sign, exponent and class: NaNs, infinities,
// zeros, subnormals), on every float in the ranges around the overflow
// and underflow thresholds and around 0, and at every length's tail.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/lane_kernels.h"
#include "kernels/math/portable_math.h"

namespace lockstep::kernels {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

enum class Fn { kExp, kErf };

// Runs the lane function on `x` (in place and out of place) and compares
// every element with the scalar spec.
void ExpectSpecBits(Fn fn, const std::vector<float>& x, CpuIsa isa,
                    const std::string& what) {
  auto lanes = fn == Fn::kExp ? &CanonicalExpLanes : &CanonicalErfLanes;
  std::vector<float> y(x.size());
  lanes(x.data(), y.data(), static_cast<int64_t>(x.size()), isa);
  std::vector<float> in_place = x;
  lanes(in_place.data(), in_place.data(), static_cast<int64_t>(in_place.size()),
        isa);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t want = Bits(fn == Fn::kExp ? canonical::CanonicalExp(x[i])
                                              : canonical::CanonicalErf(x[i]));
    if (Bits(y[i]) != want || Bits(in_place[i]) != want) {
      ADD_FAILURE() << what << ", isa " << CpuIsaName(isa) << ": "
                    << (fn == Fn::kExp ? "exp" : "erf") << "(0x" << std::hex
                    << Bits(x[i]) << ") = 0x" << Bits(y[i]) << " (in place 0x"
                    << Bits(in_place[i]) << "), spec 0x" << want;
      return;
    }
  }
}

void CheckEveryIsa(Fn fn, std::vector<float> centers) {
  for (CpuIsa isa : SupportedCpuIsas()) {
    // Strided over all bit patterns, in slices of 1 M.
    std::vector<float> x;
    x.reserve(1 << 20);
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 193) {
      x.push_back(FromBits(static_cast<uint32_t>(u)));
      if (x.size() == (1u << 20)) {
        ExpectSpecBits(fn, x, isa, "strided");
        if (::testing::Test::HasFailure()) return;
        x.clear();
      }
    }
    ExpectSpecBits(fn, x, isa, "strided");
    // Every float near the branch and special-case thresholds and near +-0.
    for (float center : centers) {
      x.clear();
      const uint32_t c = Bits(center);
      for (uint32_t d = 0; d < 200000; ++d) {
        x.push_back(FromBits(c + d));
        if (c >= d) x.push_back(FromBits(c - d));
      }
      ExpectSpecBits(fn, x, isa, "near a threshold");
    }
    // Every length's tail, 0 .. 40.
    for (int n = 0; n <= 40; ++n) {
      std::vector<float> t(n);
      for (int i = 0; i < n; ++i) t[i] = -3.0f + 0.37f * static_cast<float>(i);
      ExpectSpecBits(fn, t, isa, "length " + std::to_string(n));
    }
  }
}

TEST(LaneMathTest, ExpOnEveryIsaGivesTheSpecBits) {
  CheckEveryIsa(Fn::kExp, {89.0f, -104.0f, 88.72f, -87.3f, 0.0f, -0.0f});
}

TEST(LaneMathTest, ErfOnEveryIsaGivesTheSpecBits) {
  CheckEveryIsa(Fn::kErf, {1.0f, -1.0f, 6.0f, -6.0f, 0.0f, -0.0f, 3.9f});
}

}  // namespace
}  // namespace lockstep::kernels
