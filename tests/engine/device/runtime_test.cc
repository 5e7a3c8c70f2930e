#include "engine/device/runtime.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/core/error.h"
#include "engine/tensor/tensor.h"

namespace dpe {
namespace {

TEST(RuntimeTest, DefaultsToTwoHostDevicesFromTheEnvironment) {
  unsetenv("DPE_HOST_DEVICES");
  EXPECT_EQ(Runtime::host_options_from_env().count, 2);
  setenv("DPE_HOST_DEVICES", "3", 1);
  EXPECT_EQ(Runtime::host_options_from_env().count, 3);
  setenv("DPE_HOST_DEVICES", "three", 1);
  EXPECT_THROW(Runtime::host_options_from_env(), Error);
  unsetenv("DPE_HOST_DEVICES");
  setenv("DPE_HOST_DEVICE_MEMORY", "512MiB", 1);
  EXPECT_EQ(Runtime::host_options_from_env().capacity_bytes, 512LL << 20);
  unsetenv("DPE_HOST_DEVICE_MEMORY");
}

TEST(RuntimeTest, OutOfRangeDeviceNamesTheRange) {
  Runtime::get().set_host_device_count(2);
  try {
    Runtime::get().context(Device::parse("host:2"));
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("host:2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("host:0..host:1"), std::string::npos) << msg;
  }
  Runtime::get().set_host_device_count(4);
  EXPECT_EQ(Runtime::get().context(Device::parse("host:3")).device().str(), "host:3");
  EXPECT_EQ(Runtime::get().host_devices().size(), 4u);
  Runtime::get().set_host_device_count(2);
}

TEST(RuntimeTest, ComputeThreadsDefaultToCoresOverDevicesAtLeastOne) {
  Runtime::get().set_host_devices({64, 0, 0});
  EXPECT_EQ(Runtime::get().context(Device::parse("host:63")).compute_threads(), 1);
  Runtime::get().set_host_devices({2, 3, 0});
  EXPECT_EQ(Runtime::get().context(Device::parse("host:1")).compute_threads(), 3);
  Runtime::get().set_host_devices({2, 0, 0});
}

TEST(RuntimeTest, WithoutAGpuThereAreZeroCudaDevicesAndNothingFails) {
  // On the machines dpe is developed and tested on, there is no GPU.
  const int n = Runtime::get().cuda_device_count();
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_TRUE(Runtime::get().cuda_devices().empty());
    try {
      Runtime::get().context(Device::parse("cuda:0"));
      FAIL();
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("cuda:0 is not available"), std::string::npos) << msg;
      EXPECT_NE(msg.find("host devices remain the default"), std::string::npos) << msg;
    }
  }
}

TEST(RuntimeTest, CapacityFromOptionsAppliesToEachHostDevice) {
  Runtime::get().set_host_devices({2, 1, 4096});
  Tensor ok = Tensor::empty(Shape{1024}, DType::kFloat32, Device::parse("host:1"));
  try {
    Tensor::empty(Shape{1}, DType::kFloat32, Device::parse("host:1"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory on host:1"), std::string::npos)
        << e.what();
  }
  ok = Tensor();
  Runtime::get().set_host_devices({2, 0, 0});
}

}  // namespace
}  // namespace dpe
