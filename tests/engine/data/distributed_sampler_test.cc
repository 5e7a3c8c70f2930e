#include "engine/data/distributed_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "engine/core/error.h"
#include "engine/data/random_dataset.h"
#include "tests/engine/data/sampler_golden.h"

namespace dpe {
namespace {

using Index = std::vector<int64_t>;

std::vector<Index> all_ranks(int64_t n, int replicas, bool shuffle, bool drop_last,
                             int64_t epoch = 0, uint64_t seed = 0) {
  std::vector<Index> out;
  for (int rank = 0; rank < replicas; ++rank) {
    DistributedSampler s(n, replicas, rank, shuffle, seed, drop_last);
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

// The global order the ranks took their shares from: position i belongs to rank i % replicas.
Index interleave(const std::vector<Index>& per_rank) {
  Index out;
  const size_t replicas = per_rank.size();
  for (size_t i = 0; i < per_rank[0].size() * replicas; ++i) {
    out.push_back(per_rank[i % replicas][i / replicas]);
  }
  return out;
}

TEST(DistributedSamplerTest, ExactIndicesWithPaddingUnshuffled) {
  // torch: n=10, replicas=3 -> num_samples 4, total 12, order 0..9 then 0, 1.
  const auto r = all_ranks(10, 3, /*shuffle=*/false, /*drop_last=*/false);
  EXPECT_EQ(r[0], (Index{0, 3, 6, 9}));
  EXPECT_EQ(r[1], (Index{1, 4, 7, 0}));
  EXPECT_EQ(r[2], (Index{2, 5, 8, 1}));
}

TEST(DistributedSamplerTest, ExactIndicesWithDropLastUnshuffled) {
  // torch: num_samples = ceil((10 - 3) / 3) = 3, total 9: index 9 is dropped.
  const auto r = all_ranks(10, 3, false, true);
  EXPECT_EQ(r[0], (Index{0, 3, 6}));
  EXPECT_EQ(r[1], (Index{1, 4, 7}));
  EXPECT_EQ(r[2], (Index{2, 5, 8}));
}

TEST(DistributedSamplerTest, PaddingLongerThanTheDatasetRepeatsItWhole) {
  // n=2 over 5 replicas: total 5, padding 3 > 2, so torch uses (indices * 2)[:3] -> 0 1 0 1 0.
  const auto r = all_ranks(2, 5, false, false);
  EXPECT_EQ(interleave(r), (Index{0, 1, 0, 1, 0}));
  // With drop_last: ceil((2 - 5) / 5) = 0 samples per rank.
  for (const Index& share : all_ranks(2, 5, false, true)) EXPECT_TRUE(share.empty());
}

TEST(DistributedSamplerTest, EvenSplitNeedsNoPadding) {
  for (bool drop_last : {false, true}) {
    const auto r = all_ranks(8, 4, false, drop_last);
    EXPECT_EQ(r[0], (Index{0, 4}));
    EXPECT_EQ(r[3], (Index{3, 7}));
  }
}

TEST(DistributedSamplerTest, NumSamplesFollowsTorch) {
  struct Case {
    int64_t n;
    int replicas;
    bool drop_last;
    int64_t num_samples;
  };
  for (const Case& c :
       {Case{10, 3, false, 4}, Case{10, 3, true, 3}, Case{9, 3, true, 3}, Case{9, 3, false, 3},
        Case{0, 2, false, 0}, Case{1, 4, false, 1}, Case{1, 4, true, 0},
        Case{60000, 7, false, 8572}, Case{60000, 7, true, 8571}}) {
    DistributedSampler s(c.n, c.replicas, 0, true, 0, c.drop_last);
    EXPECT_EQ(s.size(), c.num_samples)
        << "n=" << c.n << " replicas=" << c.replicas << " drop_last=" << c.drop_last;
    EXPECT_EQ(static_cast<int64_t>(s.indices().size()), c.num_samples);
    EXPECT_EQ(s.total_size(), c.num_samples * c.replicas);
  }
}

TEST(DistributedSamplerTest, EveryIndexOncePerEpochApartFromPadding) {
  for (int64_t n : {1, 2, 5, 10, 17, 64}) {
    for (int replicas : {1, 2, 3, 4, 8}) {
      for (bool drop_last : {false, true}) {
        for (bool shuffle : {false, true}) {
          for (int64_t epoch : {0, 1, 5}) {
            SCOPED_TRACE(testing::Message()
                         << "n=" << n << " replicas=" << replicas << " drop_last=" << drop_last
                         << " shuffle=" << shuffle << " epoch=" << epoch);
            const Index order = interleave(all_ranks(n, replicas, shuffle, drop_last, epoch, 3));
            const int64_t total = static_cast<int64_t>(order.size());
            if (drop_last) {
              EXPECT_EQ(total, n - n % replicas);
              Index sorted = order;
              std::sort(sorted.begin(), sorted.end());
              EXPECT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end())
                  << "an index repeats";
              for (int64_t i : order) EXPECT_TRUE(i >= 0 && i < n);
            } else {
              EXPECT_EQ(total, (n + replicas - 1) / replicas * replicas);
              // The first n entries are a permutation of the dataset...
              Index head(order.begin(), order.begin() + n);
              std::sort(head.begin(), head.end());
              Index all(static_cast<size_t>(n));
              std::iota(all.begin(), all.end(), 0);
              EXPECT_EQ(head, all);
              // ...and the padding repeats it from the start.
              for (int64_t i = n; i < total; ++i) EXPECT_EQ(order[i], order[i % n]);
            }
          }
        }
      }
    }
  }
}

TEST(DistributedSamplerTest, EpochsDifferAndRepeat) {
  DistributedSampler s(100, 4, 1, /*shuffle=*/true, /*seed=*/0);
  const Index epoch0 = s.indices();
  s.set_epoch(1);
  EXPECT_EQ(s.epoch(), 1);
  const Index epoch1 = s.indices();
  EXPECT_NE(epoch0, epoch1);
  s.set_epoch(0);
  EXPECT_EQ(s.indices(), epoch0);
  // Another process building the same sampler gets the same share.
  DistributedSampler again(100, 4, 1, true, 0);
  EXPECT_EQ(again.indices(), epoch0);
  // A different seed gives a different order; no shuffle ignores the epoch.
  EXPECT_NE(DistributedSampler(100, 4, 1, true, 1).indices(), epoch0);
  DistributedSampler fixed(100, 4, 1, false);
  const Index f0 = fixed.indices();
  fixed.set_epoch(7);
  EXPECT_EQ(fixed.indices(), f0);
}

TEST(DistributedSamplerTest, ShuffledListsMatchTorchBitForBit) {
  // torch 1.13's DistributedSampler(range(n), replicas, rank, shuffle=True, seed, drop_last)
  // after set_epoch(epoch), every rank (golden/make_sampler_golden.py).
  int cases = 0, equal = 0;
  for (const auto& c : testing_golden::sampler_golden().at("distributed_sampler")) {
    const int64_t n = c.at("n").get<int64_t>();
    const int replicas = c.at("replicas").get<int>();
    const bool drop_last = c.at("drop_last").get<bool>();
    const uint64_t seed = c.at("seed").get<uint64_t>();
    const int64_t epoch = c.at("epoch").get<int64_t>();
    bool all_ranks_equal = true;
    for (int rank = 0; rank < replicas; ++rank) {
      DistributedSampler s(n, replicas, rank, /*shuffle=*/true, seed, drop_last);
      s.set_epoch(epoch);
      const auto result = testing_golden::matches_golden(c.at("ranks").at(rank), s.indices());
      EXPECT_TRUE(result) << "n=" << n << " replicas=" << replicas << " rank=" << rank
                          << " drop_last=" << drop_last << " seed=" << seed << " epoch=" << epoch;
      all_ranks_equal = all_ranks_equal && result;
    }
    ++cases;
    equal += all_ranks_equal;
  }
  EXPECT_GE(cases, 800);
  EXPECT_EQ(equal, cases);
  std::printf("DistributedSampler: %d of %d golden cases equal to torch 1.13 (every rank)\n", equal,
              cases);
}

TEST(DistributedSamplerTest, TakesTheSizeOfADataset) {
  RandomDataset data(5, 30);
  DistributedSampler s(data, 4, 3);
  EXPECT_EQ(s.size(), 8);
  EXPECT_EQ(s.num_replicas(), 4);
  EXPECT_EQ(s.rank(), 3);
}

TEST(DistributedSamplerTest, ClearErrors) {
  auto message = [](auto make) -> std::string {
    try {
      make();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message([] { DistributedSampler(10, 2, 2); }),
            "DistributedSampler: Invalid rank 2, rank should be in the interval [0, 1]");
  EXPECT_EQ(message([] { DistributedSampler(10, 2, -1); }),
            "DistributedSampler: Invalid rank -1, rank should be in the interval [0, 1]");
  EXPECT_EQ(message([] { DistributedSampler(10, 0, 0); }),
            "DistributedSampler: num_replicas must be at least 1, got 0");
  EXPECT_EQ(message([] { DistributedSampler(-1, 2, 0); }),
            "DistributedSampler: the dataset size must be non-negative, got -1");
}

}  // namespace
}  // namespace dpe
