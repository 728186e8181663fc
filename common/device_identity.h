// The identity of the physical device a worker's runs execute on
// (lockstep.v1.DeviceIdentity): the host's machine id plus the device on it
// ("cpu:packages=0,1" for the CPU packages a worker may run on, or a GPU's
// "GPU-..." UUID). Workers compute it in their hardware probe; the
// coordinator recomputes device_id from the other two fields and refuses a
// profile where they disagree. Pure and thread-safe.
#ifndef LOCKSTEP_COMMON_DEVICE_IDENTITY_H_
#define LOCKSTEP_COMMON_DEVICE_IDENTITY_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace lockstep {

// 32 lowercase hex digits: XXH3-128 (Digest128Hex) of
// "<machine_id>|<device>". Machine ids are hex (or a boot id, or
// "host:<name>") and device names "cpu:packages=..." or "GPU-..." / "MIG-..."
// UUIDs; neither contains '|', which keeps the pair unambiguous.
std::string DeviceIdOf(absl::string_view machine_id, absl::string_view device);

// "cpu:packages=<ids>" with the package ids sorted numerically, duplicates
// removed, joined by ","; "cpu:packages=unknown" for an empty list.
std::string CpuDeviceName(std::vector<int> packages);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_DEVICE_IDENTITY_H_
