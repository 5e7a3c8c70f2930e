#include "engine/nn/pooling.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dpe {
namespace {

TEST(MaxPool2dTest, StrideDefaultsToTheKernelAsInPyTorch) {
  nn::MaxPool2d pool(2);
  EXPECT_EQ(pool.repr(), "MaxPool2d(kernel_size=2, stride=2, padding=0)");
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = static_cast<float>(i);
  Tensor y = pool(Tensor::from_vector(v, {1, 1, 4, 4}));
  EXPECT_EQ(y.shape(), Shape({1, 1, 2, 2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{5, 7, 13, 15}));
}

}  // namespace
}  // namespace dpe
