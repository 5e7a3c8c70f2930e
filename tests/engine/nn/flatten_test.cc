#include "engine/nn/flatten.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dpe {
namespace {

TEST(FlattenTest, FoldsDimsFromStartDim) {
  EXPECT_EQ(nn::Flatten()(Tensor::zeros({2, 3, 4})).shape(), Shape({2, 12}));
  EXPECT_EQ(nn::Flatten(0)(Tensor::zeros({2, 3, 4})).shape(), Shape({24}));
  EXPECT_EQ(nn::Flatten(2).repr(), "Flatten(start_dim=2)");
}

}  // namespace
}  // namespace dpe
