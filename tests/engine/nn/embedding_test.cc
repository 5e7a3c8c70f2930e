#include "engine/nn/embedding.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"

namespace dpe {
namespace {

TEST(EmbeddingTest, ReprAndStandardNormalInitialisation) {
  Generator gen(0);
  nn::Embedding e(1000, 64, gen);
  EXPECT_EQ(e.repr(), "Embedding(1000, 64)");
  const auto w = e.weight().to_vector<float>();
  double mean = 0, sq = 0;
  for (float v : w) {
    mean += v;
    sq += static_cast<double>(v) * v;
  }
  mean /= w.size();
  const double stddev = std::sqrt(sq / w.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(stddev, 1.0, 0.02);
}

TEST(EmbeddingTest, LooksUpRowsForIndicesOfAnyShapeAndScatterAddsTheGradient) {
  Generator gen(1);
  nn::Embedding e(4, 2, gen);
  e.find("weight").copy_(Tensor::from_vector(std::vector<float>{0, 1, 10, 11, 20, 21, 30, 31},
                                              {4, 2}));
  Tensor index = Tensor::from_vector(std::vector<int64_t>{3, 1, 3, 0, 3, 2}, {2, 3});
  Tensor y = e(index);
  EXPECT_EQ(y.shape(), Shape({2, 3, 2}));
  EXPECT_EQ(y.to_vector<float>(),
            (std::vector<float>{30, 31, 10, 11, 30, 31, 0, 1, 30, 31, 20, 21}));
  backward(ops::sum(y));
  // Row 3 is used three times: its gradient counts them.
  EXPECT_EQ(e.weight().grad().to_vector<float>(), (std::vector<float>{1, 1, 1, 1, 1, 1, 3, 3}));
}

TEST(EmbeddingTest, AnIndexOutOfRangeNamesItAndTheTableSize) {
  Generator gen(2);
  nn::Embedding e(5, 3, gen);
  try {
    e(Tensor::from_vector(std::vector<int64_t>{1, 7}, {2}));
    FAIL() << "expected dpe::Error";
  } catch (const Error& err) {
    EXPECT_STREQ(err.what(), "embedding: index 7 is out of range for 5 rows");
  }
}

}  // namespace
}  // namespace dpe
