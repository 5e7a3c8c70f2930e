#include "engine/data/random_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "engine/core/error.h"
#include "tests/engine/data/sampler_golden.h"

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
  RandomSampler s(4);
  EXPECT_THROW(s.set_epoch(-1), Error);
}

TEST(RandomSamplerTest, PassesMatchTorchBitForBit) {
  // Passes 0-3 of torch 1.13's RandomSampler(range(n), generator=g) and of
  // DataLoader(range(n), shuffle=True, generator=g), g seeded once (golden/make_sampler_golden.py).
  int cases = 0, equal = 0;
  for (const auto& c : testing_golden::sampler_golden().at("random_sampler")) {
    const int64_t n = c.at("n").get<int64_t>();
    const uint64_t seed = c.at("seed").get<uint64_t>();
    const std::string order = c.at("order").get<std::string>();
    RandomSampler s(n, seed,
                    order == "data_loader" ? RandomSampler::Order::kDataLoader
                                           : RandomSampler::Order::kSampler);
    const auto& passes = c.at("passes");
    for (size_t epoch = 0; epoch < passes.size(); ++epoch) {
      s.set_epoch(static_cast<int64_t>(epoch));
      const auto result = testing_golden::matches_golden(passes[epoch], s.indices());
      EXPECT_TRUE(result) << order << " n=" << n << " seed=" << seed << " epoch=" << epoch;
      ++cases;
      equal += static_cast<bool>(result);
    }
  }
  EXPECT_GE(cases, 100);
  EXPECT_EQ(equal, cases);
  std::printf("RandomSampler: %d of %d golden passes equal to torch 1.13\n", equal, cases);
}

TEST(RandomSamplerTest, EpochsInAnyOrderGiveTheSameLists) {
  // A resumed run asks for epoch 3 first; a sampler that went through 0..3 must agree.
  RandomSampler walked(37, 9), jumped(37, 9);
  std::vector<std::vector<int64_t>> by_epoch;
  for (int64_t e = 0; e < 5; ++e) {
    walked.set_epoch(e);
    by_epoch.push_back(walked.indices());
  }
  for (int64_t e : {3, 1, 4, 0, 2}) {
    jumped.set_epoch(e);
    EXPECT_EQ(jumped.indices(), by_epoch[e]) << "epoch " << e;
  }
}

}  // namespace
}  // namespace dpe
