#include "engine/data/random_dataset.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/core/error.h"

namespace dpe {
namespace {

TEST(RandomDatasetTest, SeedsShape) {
  // The seeds: RandomDataset(input_size=5, data_size=100).
  RandomDataset data(5, 100);
  EXPECT_EQ(data.size(), 100);
  const Example e = data.get(7);
  EXPECT_EQ(e.input.shape(), (Shape{5}));
  EXPECT_EQ(e.input.dtype(), DType::kFloat32);
  EXPECT_FALSE(e.target.defined());
  EXPECT_EQ(data.data().shape(), (Shape{100, 5}));
}

TEST(RandomDatasetTest, SeededAndStandardNormal) {
  RandomDataset a(5, 2000, 1), b(5, 2000, 1), c(5, 2000, 2);
  const auto x = a.data().to_vector<float>();
  EXPECT_EQ(x, b.data().to_vector<float>());
  EXPECT_NE(x, c.data().to_vector<float>());
  double mean = 0, sq = 0;
  for (float v : x) mean += v;
  mean /= x.size();
  for (float v : x) sq += (v - mean) * (v - mean);
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_NEAR(std::sqrt(sq / x.size()), 1.0, 0.05);
}

TEST(RandomDatasetTest, GetBatchGathersTheSameRowsAsGet) {
  RandomDataset data(3, 10, 4);
  const std::vector<int64_t> idx{9, 0, 4, 4};
  const Batch b = data.get_batch(idx);
  EXPECT_EQ(b.input.shape(), (Shape{4, 3}));
  EXPECT_FALSE(b.target.defined());
  const auto got = b.input.to_vector<float>();
  for (size_t i = 0; i < idx.size(); ++i) {
    const auto row = data.get(idx[i]).input.to_vector<float>();
    EXPECT_EQ(std::vector<float>(got.begin() + 3 * i, got.begin() + 3 * i + 3), row);
  }
  // The fast path matches the interface's default stacking.
  EXPECT_EQ(got, data.Dataset::get_batch(idx).input.to_vector<float>());
}

TEST(RandomDatasetTest, IndexErrors) {
  RandomDataset data(3, 10);
  EXPECT_THROW(data.get(10), Error);
  EXPECT_THROW(data.get(-1), Error);
  EXPECT_THROW(data.get_batch({1, 10}), Error);
  EXPECT_THROW(data.get_batch({}), Error);
  EXPECT_THROW(RandomDataset(-1, 3), Error);
}

}  // namespace
}  // namespace dpe
