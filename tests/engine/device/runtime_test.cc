#include "engine/device/runtime.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "engine/backend/host/host_devices.h"
#include "engine/core/error.h"
#include "engine/device/device_registry.h"
#include "engine/tensor/tensor.h"

namespace dpe {
namespace {

// The Runtime knows device types only through the registry: both are linked into every program.
TEST(RuntimeTest, DeviceTypesAreThoseThatRegistered) {
  ASSERT_NE(find_device_type(DeviceType::kHost), nullptr);
  ASSERT_NE(find_device_type(DeviceType::kCuda), nullptr);
  EXPECT_EQ(Runtime::get().device_count(DeviceType::kHost),
            find_device_type(DeviceType::kHost)->device_count());
  EXPECT_EQ(Runtime::get().device_status(DeviceType::kHost), "ok");
}

TEST(RuntimeTest, OutOfRangeDeviceNamesTheRange) {
  set_host_device_count(2);
  try {
    Runtime::get().context(Device::parse("host:2"));
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("host:2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("host:0..host:1"), std::string::npos) << msg;
  }
  set_host_device_count(4);
  EXPECT_EQ(Runtime::get().context(Device::parse("host:3")).device().str(), "host:3");
  EXPECT_EQ(Runtime::get().devices(DeviceType::kHost).size(), 4u);
  set_host_device_count(2);
}

TEST(RuntimeTest, ComputeThreadsDefaultToCoresOverDevicesAtLeastOne) {
  set_host_devices({64, 0, 0});
  EXPECT_EQ(Runtime::get().context(Device::parse("host:63")).compute_threads(), 1);
  set_host_devices({2, 3, 0});
  EXPECT_EQ(Runtime::get().context(Device::parse("host:1")).compute_threads(), 3);
  set_host_devices({2, 0, 0});
}

// context() reads created host contexts without the runtime's lock; a change of the devices'
// shape must still take the old ones out of that path.
TEST(RuntimeTest, ReshapingTheHostDevicesReplacesTheContextsLookupsReturn) {
  Runtime& rt = Runtime::get();
  set_host_devices({4, 1, 0});
  DeviceContext* before = &rt.context(Device::parse("host:3"));
  EXPECT_EQ(&rt.context(Device::parse("host:3")), before);  // created once, then looked up
  EXPECT_EQ(before->compute_threads(), 1);
  set_host_devices({2, 1, 0});
  EXPECT_THROW(rt.context(Device::parse("host:3")), Error);  // no longer a device
  set_host_devices({4, 2, 0});
  DeviceContext* after = &rt.context(Device::parse("host:3"));
  EXPECT_NE(after, before);
  EXPECT_EQ(after->compute_threads(), 2);
  set_host_devices({2, 0, 0});
}

TEST(RuntimeTest, ThreadsLookingUpAtOnceGetOneContextPerDevice) {
  Runtime& rt = Runtime::get();
  set_host_devices({4, 1, 0});  // a new shape: no context exists yet
  constexpr int kThreads = 8;
  // Each thread's first answer per device, whether every later one matched it, and what it read
  // through the pointer (a context published before it was built would show here, or to TSan).
  std::vector<std::vector<DeviceContext*>> first(kThreads, std::vector<DeviceContext*>(4));
  std::vector<int> mismatches(kThreads, 0);
  std::vector<int> wrong_index(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 100; ++round) {
        for (int d = 0; d < 4; ++d) {
          DeviceContext* c = &rt.context(Device(DeviceType::kHost, d));
          if (round == 0) first[t][d] = c;
          if (c != first[t][d]) ++mismatches[t];
          if (c->device().index() != d || c->compute_threads() != 1) ++wrong_index[t];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(mismatches[t], 0) << "thread " << t << " saw a device's context change";
    EXPECT_EQ(wrong_index[t], 0) << "thread " << t;
    for (int d = 0; d < 4; ++d) EXPECT_EQ(first[t][d], first[0][d]) << "host:" << d;
  }
  set_host_devices({2, 0, 0});
}

TEST(RuntimeTest, WithoutAGpuThereAreZeroCudaDevicesAndNothingFails) {
  // On the machines dpe is developed and tested on, there is no GPU.
  const int n = Runtime::get().device_count(DeviceType::kCuda);
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_TRUE(Runtime::get().devices(DeviceType::kCuda).empty());
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
  set_host_devices({2, 1, 4096});
  Tensor ok = Tensor::empty(Shape{1024}, DType::kFloat32, Device::parse("host:1"));
  try {
    Tensor::empty(Shape{1}, DType::kFloat32, Device::parse("host:1"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory on host:1"), std::string::npos) << e.what();
  }
  ok = Tensor();
  set_host_devices({2, 0, 0});
}

}  // namespace
}  // namespace dpe
