#include "engine/nn/conv2d.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/core/error.h"
#include "engine/tensor/random.h"

namespace dpe {
namespace {

TEST(Conv2dTest, WrongInputChannelsNamesTheLayer) {
  Generator g(1);
  nn::Conv2d conv(3, 4, 3, g);
  try {
    conv(Tensor::zeros({1, 2, 8, 8}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Conv2d(3, 4"), std::string::npos) << e.what();
  }
}

TEST(Conv2dTest, OutputShapeFollowsStrideAndPaddingAndReprMatchesPyTorch) {
  Generator g(2);
  nn::Conv2d conv(2, 5, 3, g, /*stride=*/2, /*padding=*/1);
  EXPECT_EQ(conv.repr(), "Conv2d(2, 5, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))");
  // floor((9 + 2 - 3) / 2) + 1 = 5
  EXPECT_EQ(conv(randn({4, 2, 9, 9}, g)).shape(), Shape({4, 5, 5, 5}));
  EXPECT_EQ(conv.named_parameters().size(), 2u);  // weight, bias
}

}  // namespace
}  // namespace dpe
