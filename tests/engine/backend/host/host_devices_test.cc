#include "engine/backend/host/host_devices.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/core/error.h"
#include "engine/device/runtime.h"

namespace dpe {
namespace {

TEST(HostDevicesTest, DefaultsToTwoHostDevicesFromTheEnvironment) {
  unsetenv("DPE_HOST_DEVICES");
  EXPECT_EQ(host_options_from_env().count, 2);
  setenv("DPE_HOST_DEVICES", "3", 1);
  EXPECT_EQ(host_options_from_env().count, 3);
  setenv("DPE_HOST_DEVICES", "three", 1);
  EXPECT_THROW(host_options_from_env(), Error);
  unsetenv("DPE_HOST_DEVICES");
  setenv("DPE_HOST_DEVICE_MEMORY", "512MiB", 1);
  EXPECT_EQ(host_options_from_env().capacity_bytes, 512LL << 20);
  unsetenv("DPE_HOST_DEVICE_MEMORY");
}

TEST(HostDevicesTest, ChangingTheOptionsRetiresTheContextsAndKeepingThemDoesNot) {
  set_host_devices({2, 1, 0});
  DeviceContext* before = &Runtime::get().context(Device::parse("host:1"));
  set_host_devices({2, 1, 0});  // the same options: the same contexts
  EXPECT_EQ(&Runtime::get().context(Device::parse("host:1")), before);
  set_host_devices({3, 1, 0});
  EXPECT_NE(&Runtime::get().context(Device::parse("host:1")), before);
  EXPECT_EQ(host_device_options().count, 3);
  EXPECT_THROW(set_host_devices({0, 1, 0}), Error);
  EXPECT_THROW(set_host_devices({kMaxHostDevices + 1, 1, 0}), Error);
  set_host_device_count(2);
}

}  // namespace
}  // namespace dpe
