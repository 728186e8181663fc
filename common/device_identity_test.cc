#include "common/device_identity.h"

#include "common/digest.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(DeviceIdentity, IdIsTheDigestOfMachineAndDevice) {
  const std::string id = DeviceIdOf("0123abcd", "cpu:packages=0");
  EXPECT_EQ(id, Digest128Hex("0123abcd|cpu:packages=0"));
  EXPECT_TRUE(IsDigest128Hex(id));
  EXPECT_NE(id, DeviceIdOf("0123abcd", "cpu:packages=1"));
  EXPECT_NE(id, DeviceIdOf("0123abce", "cpu:packages=0"));
  EXPECT_NE(id, DeviceIdOf("cpu:packages=0", "0123abcd"));
}

TEST(DeviceIdentity, CpuDeviceNameSortsAndDeduplicates) {
  EXPECT_EQ(CpuDeviceName({1, 0, 1, 10, 2}), "cpu:packages=0,1,2,10");
  EXPECT_EQ(CpuDeviceName({0}), "cpu:packages=0");
  EXPECT_EQ(CpuDeviceName({}), "cpu:packages=unknown");
}

}  // namespace
}  // namespace lockstep
