// The canonical-arithmetic version. Every CANONICAL result is defined by the
// spec in docs/canonical-arithmetic.md; any change that can change a single
// output bit (chunk length, tree shape, an op's index order, the portable
// math, Philox use) must bump this number, update the golden fingerprints in
// the same change, and say so in the spec's changelog. The version is part of
// every hardware class and therefore of every certificate.
#ifndef LOCKSTEP_KERNELS_CANONICAL_VERSION_H_
#define LOCKSTEP_KERNELS_CANONICAL_VERSION_H_

namespace lockstep::canonical {

inline constexpr int kCanonicalArithmeticVersion = 1;

// Lockstep's kernel library version, reported in hardware profiles.
inline constexpr char kKernelLibraryVersion[] = "lockstep-kernels/0.1.0";

}  // namespace lockstep::canonical

#endif  // LOCKSTEP_KERNELS_CANONICAL_VERSION_H_
