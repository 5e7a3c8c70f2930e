// The CUDA backend compiles everywhere; these tests run its code where a GPU exists and show that
// a machine without one reports zero devices without failing.
#include "kernels/cuda/device_runtime.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/copy.cuh"

namespace dpe::cuda {
namespace {

TEST(CudaDeviceRuntimeTest, CountsDevicesWithoutFailing) {
  std::string status;
  const int n = device_count(&status);
  EXPECT_GE(n, 0);
  EXPECT_FALSE(status.empty());
  if (n == 0) std::printf("no CUDA device here: %s\n", status.c_str());
}

TEST(CudaDeviceRuntimeTest, FillAndStridedCopyOnDevice) {
  if (device_count(nullptr) == 0) GTEST_SKIP() << "no CUDA device: nothing to run on";
  // a = [[0, 1, 2], [3, 4, 5]] filled then written from the host; b = a^T gathered on the device.
  constexpr int64_t n = 6;
  float* a = static_cast<float*>(malloc_on(0, n * 4));
  float* b = static_cast<float*>(malloc_on(0, n * 4));
  const float minus_one = -1.0f;
  fill(nullptr, b, &minus_one, sizeof(float), n);
  const std::vector<float> values{0, 1, 2, 3, 4, 5};
  memcpy_between(a, 0, values.data(), -1, n * 4);
  const int64_t sizes[] = {3, 2}, strides[] = {1, 3};
  strided_copy(nullptr, b, a, sizeof(float), 2, sizes, strides);
  std::vector<float> host(n);
  memcpy_between(host.data(), -1, b, 0, n * 4);
  EXPECT_EQ(host, (std::vector<float>{0, 3, 1, 4, 2, 5}));
  int64_t* big = static_cast<int64_t*>(malloc_on(0, 5 * 8));
  const int64_t v = (int64_t{1} << 40) + 1;
  fill(nullptr, big, &v, sizeof(int64_t), 5);
  std::vector<int64_t> back(5);
  memcpy_between(back.data(), -1, big, 0, 5 * 8);
  EXPECT_EQ(back, std::vector<int64_t>(5, v));
  free_on(0, a);
  free_on(0, b);
  free_on(0, big);
}

}  // namespace
}  // namespace dpe::cuda
