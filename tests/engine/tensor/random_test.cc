#include "engine/tensor/random.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/core/error.h"

namespace dpe {
namespace {

TEST(RandomTest, SeededGeneratorsRepeat) {
  Generator a(42), b(42), c(43);
  const auto x = randn({100}, a).to_vector<float>();
  EXPECT_EQ(x, randn({100}, b).to_vector<float>());
  EXPECT_NE(x, randn({100}, c).to_vector<float>());
}

TEST(RandomTest, NormalHasUnitMoments) {
  Generator g(1);
  const auto x = randn({20000}, g).to_vector<float>();
  double mean = 0, sq = 0;
  for (float v : x) mean += v;
  mean /= x.size();
  for (float v : x) sq += (v - mean) * (v - mean);
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(std::sqrt(sq / x.size()), 1.0, 0.03);
}

TEST(RandomTest, KaimingUniformStaysWithinPyTorchsBound) {
  Generator g(3);
  const auto w = kaiming_uniform({10, 784}, 784, g).to_vector<float>();
  const float bound = 1.0f / std::sqrt(784.0f);
  const auto [lo, hi] = std::minmax_element(w.begin(), w.end());
  EXPECT_GE(*lo, -bound);
  EXPECT_LE(*hi, bound);
  EXPECT_LT(*lo, -0.9f * bound);  // and actually spans it
  EXPECT_GT(*hi, 0.9f * bound);
}

TEST(RandomTest, RandpermIsAPermutation) {
  Generator g(5);
  auto p = randperm(1000, g);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) EXPECT_EQ(sorted[i], i);
  EXPECT_NE(p, sorted);
}

// Design note "seed replay": a recording logs what draw_seed returns; a replay serves the log in
// order without touching the generator, and throws once it runs out; scopes nest.
TEST(SeedReplayTest, ReplaysTheRecordedSeedsAndLeavesTheGeneratorAlone) {
  Generator gen(5), reference(5);
  auto draw = [&gen] { return gen.next_u64(); };
  std::vector<uint64_t> log;
  {
    SeedRecording recording(log);
    draw_seed(draw);
    draw_seed(draw);
  }
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0], reference.next_u64());
  EXPECT_EQ(log[1], reference.next_u64());
  {
    SeedReplay replay(log);
    std::vector<uint64_t> inner;
    SeedRecording nested(inner);  // a checkpoint inside a recompute records the replayed seeds
    EXPECT_EQ(draw_seed(draw), log[0]);
    EXPECT_EQ(replay.remaining(), 1u);
    EXPECT_EQ(draw_seed(draw), log[1]);
    EXPECT_EQ(inner, log);
    EXPECT_THROW(draw_seed(draw), Error);
  }
  EXPECT_EQ(draw_seed(draw), reference.next_u64());  // the generator moved only while recording
}

}  // namespace
}  // namespace dpe
