#include "engine/nn/activation.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dpe {
namespace {

TEST(ReLUTest, ClampsNegativesToZero) {
  nn::ReLU r;
  EXPECT_EQ(r.repr(), "ReLU()");
  EXPECT_EQ(r(Tensor::from_vector(std::vector<float>{-1, 0, 2.5f}, {3})).to_vector<float>(),
            (std::vector<float>{0.0f, 0.0f, 2.5f}));
}

TEST(GELUTest, TanhFormMatchesTorchValues) {
  nn::GELU g;
  EXPECT_EQ(g.repr(), "GELU(approximate='tanh')");
  // torch.nn.functional.gelu(torch.tensor([-3., -1., 0., 0.5, 2.]), approximate='tanh')
  const std::vector<float> want = {-0.0036373f, -0.1588080f, 0.0f, 0.3457140f, 1.9545977f};
  Tensor y = g(Tensor::from_vector(std::vector<float>{-3, -1, 0, 0.5f, 2}, {5}));
  const std::vector<float> got = y.to_vector<float>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
}

}  // namespace
}  // namespace dpe
