#include "engine/nn/batch_norm.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dpe {
namespace {

TEST(BatchNormTest, BatchNormRunningStatsUseMomentumAndUnbiasedVariance) {
  nn::BatchNorm2d bn(1);
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 6}, {4, 1});
  bn(x);
  // batch mean 3, unbiased variance ((4 + 1 + 0 + 9) / 3) = 14/3
  EXPECT_NEAR(bn.find("running_mean").to_vector<float>()[0], 0.3f, 1e-6);
  EXPECT_NEAR(bn.find("running_var").to_vector<float>()[0], 0.9f + 0.1f * 14.0f / 3.0f, 1e-5);
}

TEST(BatchNormTest, EvalNormalisesWithTheRunningStatistics) {
  nn::BatchNorm2d bn(1);
  bn.find("running_mean").fill_(2.0f);
  bn.find("running_var").fill_(4.0f);
  bn.eval();
  const auto y = bn(Tensor::from_vector(std::vector<float>{2, 6}, {2, 1})).to_vector<float>();
  EXPECT_NEAR(y[0], 0.0f, 1e-6);
  EXPECT_NEAR(y[1], 4.0f / std::sqrt(4.0f + 1e-5f), 1e-5);
  EXPECT_EQ(bn.find("num_batches_tracked").to_vector<int64_t>()[0], 0);  // eval tracks nothing
}

}  // namespace
}  // namespace dpe
