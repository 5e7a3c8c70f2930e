#include "engine/data/sequential_sampler.h"

#include <gtest/gtest.h>

#include "engine/core/error.h"

namespace dpe {
namespace {

TEST(SequentialSamplerTest, VisitsEveryIndexInOrderEachEpoch) {
  SequentialSampler s(5);
  EXPECT_EQ(s.size(), 5);
  EXPECT_EQ(s.indices(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  s.set_epoch(3);
  EXPECT_EQ(s.indices(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(SequentialSamplerTest, EmptyAndNegative) {
  EXPECT_TRUE(SequentialSampler(0).indices().empty());
  EXPECT_THROW(SequentialSampler(-1), Error);
}

}  // namespace
}  // namespace dpe
