#include "engine/device/device.h"

#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "engine/device/memory_stats.h"

namespace dpe {
namespace {

TEST(DeviceTest, ParsesAndPrints) {
  EXPECT_EQ(Device::parse("host:3").str(), "host:3");
  EXPECT_EQ(Device::parse("cuda:1"), Device(DeviceType::kCuda, 1));
  EXPECT_EQ(Device::parse("cuda"), Device(DeviceType::kCuda, 0));
  EXPECT_EQ(Device::parse("cpu:0"), Device(DeviceType::kHost, 0));
  EXPECT_TRUE(Device::parse("host:0").is_host());
}

TEST(DeviceTest, MalformedDevicesAreRefusedWithTheirText) {
  for (const char* bad : {"gpu:0", "host:", "host:x", "host:-1", "", "host:1:2", "cuda:99999999"}) {
    try {
      Device::parse(bad);
      FAIL() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(DeviceTest, Ordering) {
  EXPECT_LT(Device::parse("host:0"), Device::parse("host:1"));
  EXPECT_LT(Device::parse("host:5"), Device::parse("cuda:0"));
}

TEST(MemorySizeTest, ParsesUnits) {
  EXPECT_EQ(parse_memory_size("512MiB", "x"), 512LL << 20);
  EXPECT_EQ(parse_memory_size("2GiB", "x"), 2LL << 30);
  EXPECT_EQ(parse_memory_size("100MB", "x"), 100000000);
  EXPECT_EQ(parse_memory_size("4096", "x"), 4096);
  EXPECT_THROW(parse_memory_size("12 parsecs", "DPE_HOST_DEVICE_MEMORY"), Error);
  // 999999999999999 GiB overflowed into a negative size that meant "unlimited".
  try {
    parse_memory_size("999999999999999GiB", "DPE_HOST_DEVICE_MEMORY");
    FAIL() << "an overflowing size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is too large"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_memory_size("MiB", "DPE_HOST_DEVICE_MEMORY"), Error);
  try {
    parse_memory_size("5XB", "DPE_HOST_DEVICE_MEMORY");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DPE_HOST_DEVICE_MEMORY"), std::string::npos);
  }
}

TEST(MemorySizeTest, Formats) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3 << 20), "3.00 MiB");
}

}  // namespace
}  // namespace dpe
