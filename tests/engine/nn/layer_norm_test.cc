#include "engine/nn/layer_norm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"

namespace dpe {
namespace {

TEST(LayerNormTest, ReprAndParametersAsPyTorch) {
  nn::LayerNorm ln(768);
  EXPECT_EQ(ln.repr(), "LayerNorm((768,), eps=1e-05, elementwise_affine=True)");
  const auto params = ln.named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(params[1].first, "bias");
  EXPECT_EQ(params[0].second.to_vector<float>(), std::vector<float>(768, 1.0f));
  EXPECT_EQ(params[1].second.to_vector<float>(), std::vector<float>(768, 0.0f));
  EXPECT_TRUE(nn::LayerNorm(4, 1e-6f, false).named_parameters().empty());
}

TEST(LayerNormTest, NormalisesEachRowOfAnyRank) {
  nn::LayerNorm ln(4);
  // Rows of [2, 1, 4]: mean 2.5, biased variance 1.25; and constant (variance 0).
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 5, 5, 5}, {2, 1, 4});
  Tensor y = ln(x);
  EXPECT_EQ(y.shape(), x.shape());
  const auto v = y.to_vector<float>();
  const float rs = 1.0f / std::sqrt(1.25f + 1e-5f);
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(v[j], (j + 1 - 2.5f) * rs, 1e-5) << j;
  for (int j = 4; j < 8; ++j) EXPECT_NEAR(v[j], 0.0f, 1e-6) << j;
}

TEST(LayerNormTest, GradientsReachWeightAndBias) {
  nn::LayerNorm ln(3);
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 4, -1, 0, 3}, {2, 3});
  backward(ops::sum(ln(x)));
  // d(sum y)/d bias counts the rows.
  EXPECT_EQ(ln.find("bias").grad().to_vector<float>(), (std::vector<float>{2, 2, 2}));
  EXPECT_TRUE(ln.find("weight").grad().defined());
}

}  // namespace
}  // namespace dpe
