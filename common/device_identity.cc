#include "common/device_identity.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/digest.h"

namespace lockstep {

std::string DeviceIdOf(absl::string_view machine_id, absl::string_view device) {
  return Digest128Hex(absl::StrCat(machine_id, "|", device));
}

std::string CpuDeviceName(std::vector<int> packages) {
  if (packages.empty()) return "cpu:packages=unknown";
  std::sort(packages.begin(), packages.end());
  packages.erase(std::unique(packages.begin(), packages.end()), packages.end());
  return absl::StrCat("cpu:packages=", absl::StrJoin(packages, ","));
}

}  // namespace lockstep
