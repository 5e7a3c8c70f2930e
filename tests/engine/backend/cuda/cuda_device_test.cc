// The CUDA device interface (copies, fills) against the host's, on every kind of view. Skips
// without a GPU; the no-GPU behaviour is checked in cuda_backend_test.
#include "engine/backend/cuda/cuda_device.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "engine/tensor/tensor.h"

namespace dpe {
namespace {

const Device kCuda0 = Device::parse("cuda:0");

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Runtime::get().device_count(DeviceType::kCuda) == 0) {
      GTEST_SKIP() << "no CUDA device: " << Runtime::get().device_status(DeviceType::kCuda);
    }
  }
  // 0, 1, 2, ... shaped `shape` on host:0.
  static Tensor iota(const Shape& shape) {
    std::vector<float> v(static_cast<size_t>(shape.numel()));
    std::iota(v.begin(), v.end(), 0.0f);
    return Tensor::from_vector(v, shape);
  }
};

TEST_F(CudaDeviceTest, ContiguousOfAStridedViewStaysOnTheDevice) {
  const Tensor host = iota({4, 5, 6});
  const Tensor gpu = host.to(kCuda0);
  Runtime& rt = Runtime::get();
  const int64_t down = rt.copied_bytes(kCuda0, Device::parse("host:0"));
  const std::vector<std::vector<int64_t>> orders{{2, 0, 1}, {1, 0, 2}, {0, 2, 1}};
  for (const auto& order : orders) {
    const Tensor got = gpu.permute(order).contiguous();
    EXPECT_TRUE(got.device().is_cuda());
    EXPECT_EQ(rt.copied_bytes(kCuda0, Device::parse("host:0")), down)
        << "contiguous() of a CUDA view went through the host";
    EXPECT_EQ(got.to_vector<float>(), host.permute(order).contiguous().to_vector<float>());
  }
  // Narrowed along an inner dimension (cat and narrow along dim != 0 make these).
  const Tensor slice = gpu.narrow(1, 1, 3).contiguous();
  EXPECT_EQ(slice.to_vector<float>(), host.narrow(1, 1, 3).contiguous().to_vector<float>());
}

TEST_F(CudaDeviceTest, StridedCopiesBetweenHostAndDeviceInBothDirections) {
  const Tensor host = iota({3, 7});
  // A host view to the device, and a device view to the host.
  const Tensor up = host.permute({1, 0}).to(kCuda0);
  EXPECT_EQ(up.to_vector<float>(), host.permute({1, 0}).contiguous().to_vector<float>());
  const Tensor gpu = host.to(kCuda0);
  const Tensor down = gpu.narrow(1, 2, 4).to(Device::parse("host:0"));
  EXPECT_EQ(down.to_vector<float>(), host.narrow(1, 2, 4).contiguous().to_vector<float>());
  // int64 views too.
  const Tensor idx = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5}, {2, 3});
  EXPECT_EQ(idx.to(kCuda0).permute({1, 0}).contiguous().to_vector<int64_t>(),
            (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
}

TEST_F(CudaDeviceTest, FillsFloatAndInt64OnTheDevice) {
  Tensor f = Tensor::full({1000}, 2.5f, kCuda0);
  EXPECT_EQ(f.to_vector<float>(), std::vector<float>(1000, 2.5f));
  Tensor i = Tensor::zeros({513}, DType::kInt64, kCuda0);
  i.fill_(-3.0f);
  EXPECT_EQ(i.to_vector<int64_t>(), std::vector<int64_t>(513, -3));
}

TEST_F(CudaDeviceTest, CachingAllocatorCountsTheStagingBlockOnlyWhileItIsUsed) {
  DeviceContext& ctx = Runtime::get().context(kCuda0);
  const Tensor gpu = iota({64, 64}).to(kCuda0);
  const int64_t held = ctx.allocator().stats().current_bytes;
  const Tensor down = gpu.permute({1, 0}).to(Device::parse("host:0"));
  EXPECT_EQ(ctx.allocator().stats().current_bytes, held);
  EXPECT_EQ(down.to_vector<float>()[1], 64.0f);
}

}  // namespace
}  // namespace dpe
