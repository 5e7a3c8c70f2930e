#include "engine/data/random_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "engine/core/error.h"

namespace dpe {
namespace {

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(RandomSamplerTest, EachEpochIsAPermutation) {
  RandomSampler s(100, 7);
  EXPECT_EQ(s.size(), 100);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    s.set_epoch(epoch);
    auto idx = s.indices();
    EXPECT_NE(idx, iota(100)) << "epoch " << epoch << " was not shuffled";
    std::sort(idx.begin(), idx.end());
    EXPECT_EQ(idx, iota(100));
  }
}

TEST(RandomSamplerTest, SameSeedAndEpochRepeatOthersDiffer) {
  RandomSampler a(50, 1), b(50, 1), c(50, 2);
  EXPECT_EQ(a.indices(), b.indices());
  EXPECT_EQ(a.indices(), a.indices());  // asking twice does not advance anything
  EXPECT_NE(a.indices(), c.indices());
  const auto epoch0 = a.indices();
  a.set_epoch(1);
  EXPECT_EQ(a.epoch(), 1);
  EXPECT_NE(a.indices(), epoch0);
  a.set_epoch(0);
  EXPECT_EQ(a.indices(), epoch0);
}

TEST(RandomSamplerTest, EmptyAndNegative) {
  EXPECT_TRUE(RandomSampler(0).indices().empty());
  EXPECT_THROW(RandomSampler(-3), Error);
}

}  // namespace
}  // namespace dpe
