#include "engine/nn/dropout.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dpe {
namespace {

TEST(DropoutTest, ZeroesAboutPAndScalesTheRestInTrainingIdentityInEval) {
  nn::Dropout d(0.5f, 1);
  EXPECT_EQ(d.repr(), "Dropout(p=0.5)");
  Tensor x = Tensor::ones({100});
  const auto train_out = d(x).to_vector<float>();
  int zeros = 0;
  for (float v : train_out) {
    EXPECT_TRUE(v == 0.0f || std::abs(v - 2.0f) < 1e-6);
    zeros += v == 0.0f;
  }
  EXPECT_GT(zeros, 20);
  EXPECT_LT(zeros, 80);
  d.eval();
  EXPECT_EQ(d(x).to_vector<float>(), x.to_vector<float>());
}

TEST(DropoutTest, WorksOnAnyRank) {
  nn::Dropout d(0.25f, 3);
  for (const Shape& s : {Shape{5}, Shape{4, 6}, Shape{2, 3, 8}, Shape{2, 4, 16, 16}}) {
    Tensor y = d(Tensor::ones(s));
    EXPECT_EQ(y.shape(), s);
    int zeros = 0;
    for (float v : y.to_vector<float>()) {
      EXPECT_TRUE(v == 0.0f || std::abs(v - 1.0f / 0.75f) < 1e-6) << v;
      zeros += v == 0.0f;
    }
    if (s.numel() >= 1000) {  // 2048 draws: well within 0.25 +- 0.05
      EXPECT_NEAR(zeros / static_cast<double>(s.numel()), 0.25, 0.05);
    }
  }
}

TEST(DropoutTest, TheSeedRepeatsTheMaskAndCopiesShareTheGenerator) {
  Tensor x = Tensor::ones({64});
  nn::Dropout d(0.3f, 7);
  const auto first = d(x).to_vector<float>();
  nn::Dropout again(0.3f, 7);
  auto copy = again.clone_structure();  // a replica draws the next seed from the same generator
  EXPECT_EQ(copy->forward(x).to_vector<float>(), first);
  EXPECT_NE(again(x).to_vector<float>(), first);
}

}  // namespace
}  // namespace dpe
