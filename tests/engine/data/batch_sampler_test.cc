#include "engine/data/batch_sampler.h"

#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "engine/data/random_sampler.h"
#include "engine/data/sequential_sampler.h"

namespace dpe {
namespace {

using Batches = std::vector<std::vector<int64_t>>;

TEST(BatchSamplerTest, KeepsTheShortLastBatch) {
  BatchSampler b(std::make_shared<SequentialSampler>(10), 3, false);
  EXPECT_EQ(b.size(), 4);
  EXPECT_EQ(b.batches(), (Batches{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}}));
}

TEST(BatchSamplerTest, DropLastDropsTheShortLastBatch) {
  BatchSampler b(std::make_shared<SequentialSampler>(10), 3, true);
  EXPECT_EQ(b.size(), 3);
  EXPECT_EQ(b.batches(), (Batches{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}}));
}

TEST(BatchSamplerTest, ExactMultipleAndSmallDatasets) {
  EXPECT_EQ(BatchSampler(std::make_shared<SequentialSampler>(6), 3, false).size(), 2);
  EXPECT_EQ(BatchSampler(std::make_shared<SequentialSampler>(6), 3, true).size(), 2);
  BatchSampler small(std::make_shared<SequentialSampler>(2), 5, true);
  EXPECT_EQ(small.size(), 0);
  EXPECT_TRUE(small.batches().empty());
  BatchSampler kept(std::make_shared<SequentialSampler>(2), 5, false);
  EXPECT_EQ(kept.batches(), (Batches{{0, 1}}));
}

TEST(BatchSamplerTest, SizeMatchesBatches) {
  for (int64_t n : {0, 1, 7, 30, 31}) {
    for (int64_t bs : {1, 4, 30, 40}) {
      for (bool drop : {false, true}) {
        BatchSampler b(std::make_shared<SequentialSampler>(n), bs, drop);
        EXPECT_EQ(static_cast<int64_t>(b.batches().size()), b.size())
            << "n=" << n << " bs=" << bs << " drop_last=" << drop;
      }
    }
  }
}

TEST(BatchSamplerTest, SetEpochReachesTheWrappedSampler) {
  auto sampler = std::make_shared<RandomSampler>(20, 3);
  BatchSampler b(sampler, 4, false);
  const Batches epoch0 = b.batches();
  b.set_epoch(1);
  EXPECT_EQ(sampler->epoch(), 1);
  EXPECT_NE(b.batches(), epoch0);
}

TEST(BatchSamplerTest, RejectsBadArguments) {
  EXPECT_THROW(BatchSampler(nullptr, 2, false), Error);
  try {
    BatchSampler(std::make_shared<SequentialSampler>(3), 0, false);
    FAIL() << "batch_size 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch_size=0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpe
