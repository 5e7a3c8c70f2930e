// The one golden randperm at n = 214748364 (uint32 max / 20), where later PyTorch releases switch
// to another algorithm and 1.13 does not: 1.7 GB and some seconds, hence a test of its own.
#include <gtest/gtest.h>

#include "engine/data/torch_generator.h"
#include "tests/engine/data/sampler_golden.h"

namespace dpe {
namespace {

TEST(TorchRandpermLargeTest, MatchesTorchAtTheLaterThreshold) {
  int cases = 0;
  for (const auto& c : testing_golden::sampler_golden().at("randperm")) {
    if (!c.value("large", false)) continue;
    const int64_t n = c.at("n").get<int64_t>();
    TorchGenerator gen(c.at("seed").get<uint64_t>());
    EXPECT_TRUE(testing_golden::matches_golden(c.at("perm"), torch_randperm(n, gen))) << "n " << n;
    ++cases;
  }
  EXPECT_EQ(cases, 1);
}

}  // namespace
}  // namespace dpe
