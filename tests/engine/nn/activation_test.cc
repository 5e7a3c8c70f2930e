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

}  // namespace
}  // namespace dpe
