#include "engine/backend/host/host_device.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/host/host_allocator.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "engine/tensor/tensor.h"

namespace dpe {
namespace {

TEST(HostDeviceTest, FillsElementsOfEveryWidth) {
  HostDeviceContext& ctx = as_host(Runtime::get().context(Device::parse("host:0")));
  std::vector<uint8_t> bytes(5);
  const uint8_t b = 7;
  ctx.fill(bytes.data(), &b, 1, 5);
  EXPECT_EQ(bytes, std::vector<uint8_t>(5, 7));
  std::vector<float> floats(3);
  const float f = 2.5f;
  ctx.fill(floats.data(), &f, 4, 3);
  EXPECT_EQ(floats, std::vector<float>(3, 2.5f));
  std::vector<int64_t> ints(4);
  const int64_t big = int64_t{1} << 40;  // does not fit in a float: the width matters
  ctx.fill(ints.data(), &big, 8, 4);
  EXPECT_EQ(ints, std::vector<int64_t>(4, big));
  EXPECT_THROW(ctx.fill(bytes.data(), &b, 3, 1), Error);
}

TEST(HostDeviceTest, EmptyCacheGivesCachedBlocksBack) {
  Runtime& rt = Runtime::get();
  HostDeviceContext& ctx = as_host(rt.context(Device::parse("host:0")));
  auto& alloc = static_cast<HostAllocator&>(ctx.allocator());
  { Tensor big = Tensor::empty({1 << 20}, DType::kFloat32, Device::parse("host:0")); }
  EXPECT_GE(alloc.cached_bytes(), size_t{4} << 20);  // the freed 4 MiB block is kept...
  rt.empty_cache();
  EXPECT_EQ(alloc.cached_bytes(), 0u);  // ...until empty_cache
  Tensor again = Tensor::ones({1 << 20}, Device::parse("host:0"));
  EXPECT_EQ(again.to_vector<float>()[12345], 1.0f);
}

TEST(HostDeviceTest, CopiesStridedViewsBetweenHostDevicesAndCountsThem) {
  Runtime& rt = Runtime::get();
  DeviceContext& h0 = rt.context(Device::parse("host:0"));
  DeviceContext& h1 = rt.context(Device::parse("host:1"));
  // The transpose of [[0, 1, 2], [3, 4, 5]] read with strides {1, 3}.
  const std::vector<float> src{0, 1, 2, 3, 4, 5};
  StridedView view{src.data(), sizeof(float), {3, 2}, {1, 3}};
  EXPECT_FALSE(view.is_contiguous());
  std::vector<float> dst(6, -1.0f);
  const int64_t before = rt.copied_bytes(h0.device(), h1.device());
  rt.copy(h1, dst.data(), h0, view);
  EXPECT_EQ(dst, (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(rt.copied_bytes(h0.device(), h1.device()) - before, 24);
  // Within one device nothing is counted.
  const int64_t same = rt.copied_bytes(h0.device(), h0.device());
  rt.copy(h0, dst.data(), h0, src.data(), 8);
  EXPECT_EQ(rt.copied_bytes(h0.device(), h0.device()), same);
}

// A device of another type that copies nothing itself: stands for a device type that cannot reach
// host memory directly.
class NoCopyAllocator final : public Allocator {
 public:
  using Allocator::Allocator;

 protected:
  void* raw_allocate(size_t bytes) override { return std::malloc(bytes == 0 ? 1 : bytes); }
  void raw_deallocate(void* ptr, size_t) override { std::free(ptr); }
};
class OtherDevice final : public DeviceContext {
 public:
  OtherDevice()
      : DeviceContext(Device(DeviceType::kCuda, 7),
                      std::make_unique<NoCopyAllocator>(Device(DeviceType::kCuda, 7), 0), 1) {}
  void activate_on_this_thread() override {}
  void synchronize() override {}
  void fill(void*, const void*, size_t, int64_t) override {}
  void convert(void*, DType, const void*, DType, int64_t) override {}
  bool copy(DeviceContext&, void*, DeviceContext&, const StridedView&) override { return false; }
};

TEST(HostDeviceTest, DeclinesPairsWithAnotherDeviceTypeAndTheRuntimeSaysSo) {
  Runtime& rt = Runtime::get();
  HostDeviceContext& h0 = as_host(rt.context(Device::parse("host:0")));
  OtherDevice other;
  float a = 1.0f, b = 0.0f;
  EXPECT_FALSE(h0.copy(other, &b, h0, StridedView::bytes(&a, sizeof(float))));
  EXPECT_FALSE(h0.copy(h0, &a, other, StridedView::bytes(&b, sizeof(float))));
  try {
    rt.copy(other, &b, h0, &a, sizeof(float));
    FAIL() << "a copy nobody can do succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot copy from host:0 to cuda:7"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(b, 0.0f);
  EXPECT_THROW(as_host(other), Error);
}

}  // namespace
}  // namespace dpe
