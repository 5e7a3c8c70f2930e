#include "kernels/op_params.h"

#include <gtest/gtest.h>

#include "engine/core/error.h"

namespace dpe {
namespace {

TEST(Conv2dShapeTest, OutputSizeFollowsTorchsFormula) {
  const Conv2dShape s = conv2d_shape(2, 3, 9, 7, 4, 3, 3, /*stride=*/2, /*padding=*/1);
  EXPECT_EQ(s.ho, 5);  // floor((9 + 2 - 3) / 2) + 1
  EXPECT_EQ(s.wo, 4);  // floor((7 + 2 - 3) / 2) + 1
  EXPECT_EQ(s.n, 2);
  EXPECT_EQ(s.o, 4);
}

TEST(Conv2dShapeTest, RejectsBadStridePaddingAndKernel) {
  EXPECT_THROW(conv2d_shape(1, 1, 5, 5, 1, 3, 3, 0, 0), Error);   // stride < 1
  EXPECT_THROW(conv2d_shape(1, 1, 5, 5, 1, 3, 3, 1, -1), Error);  // negative padding
  EXPECT_THROW(conv2d_shape(1, 1, 2, 2, 1, 5, 5, 1, 1), Error);   // kernel larger than input
}

TEST(MaxPool2dShapeTest, OutputSizeAndTorchsPaddingRule) {
  const Pool2dShape s = max_pool2d_shape(1, 2, 8, 6, /*kernel=*/3, /*stride=*/2, /*padding=*/1);
  EXPECT_EQ(s.ho, 4);  // floor((8 + 2 - 3) / 2) + 1
  EXPECT_EQ(s.wo, 3);
  EXPECT_THROW(max_pool2d_shape(1, 1, 8, 8, 2, 2, 2), Error);  // padding > kernel / 2
}

}  // namespace
}  // namespace dpe
