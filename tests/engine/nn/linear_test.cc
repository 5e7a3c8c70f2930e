#include "engine/nn/linear.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/core/error.h"

namespace dpe {
namespace {

TEST(LinearTest, LinearInitMatchesPyTorchBoundsAndRepr) {
  Generator g(1);
  nn::Linear fc(5, 2, g);
  EXPECT_EQ(fc.repr(), "Linear(in_features=5, out_features=2, bias=True)");
  for (float w : fc.weight().to_vector<float>()) EXPECT_LE(std::abs(w), 1.0f / std::sqrt(5.0f));
  EXPECT_TRUE(fc.weight().requires_grad());
}

TEST(LinearTest, WrongInputShapeNamesTheLayerAndBothShapes) {
  Generator g(1);
  nn::Linear fc(5, 2, g);
  try {
    fc(Tensor::zeros({3, 4}));
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("Linear(in_features=5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("torch.Size([3, 4])"), std::string::npos) << msg;
    EXPECT_NE(msg.find("torch.Size([2, 5])"), std::string::npos) << msg;
  }
}

TEST(LinearTest, ParametersCountAsParametersInTheMemoryBreakdown) {
  Generator g(2);
  nn::Linear fc(3, 2, g);
  EXPECT_EQ(fc.weight().memory_category(), MemoryCategory::kParameters);
  EXPECT_EQ(fc.find("bias").memory_category(), MemoryCategory::kParameters);
}

}  // namespace
}  // namespace dpe
