#include "engine/data/torch_generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "engine/core/error.h"
#include "tests/engine/data/sampler_golden.h"

namespace dpe {
namespace {

using testing_golden::matches_golden;
using testing_golden::sampler_golden;

TEST(TorchGeneratorTest, FirstOutputsMatchTorch) {
  int cases = 0;
  for (const auto& c : sampler_golden().at("generator")) {
    const uint64_t seed = c.at("seed").get<uint64_t>();
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    TorchGenerator gen(seed);
    std::vector<uint64_t> draws(320);
    for (uint64_t& d : draws) d = gen.random64();
    const auto first = c.at("random64_0").get<std::vector<uint64_t>>();
    const auto later = c.at("random64_304").get<std::vector<uint64_t>>();  // across a refill
    EXPECT_EQ(std::vector<uint64_t>(draws.begin(), draws.begin() + 16), first);
    EXPECT_EQ(std::vector<uint64_t>(draws.begin() + 304, draws.end()), later);
    ++cases;
  }
  EXPECT_GE(cases, 9);
}

TEST(TorchGeneratorTest, Random64IsTwoDrawsHighWordFirst) {
  TorchGenerator a(5), b(5);
  const uint64_t hi = b.random();
  const uint64_t lo = b.random();
  EXPECT_EQ(a.random64(), (hi << 32) | lo);
}

TEST(TorchGeneratorTest, OnlyTheLow32BitsOfTheSeedMatter) {
  TorchGenerator a(7), b((uint64_t{1} << 32) + 7), c(8);
  const uint32_t x = a.random();
  EXPECT_EQ(x, b.random());
  EXPECT_NE(x, c.random());
  a.manual_seed(7);  // reseeding restarts the stream
  EXPECT_EQ(a.random(), x);
}

TEST(TorchRandpermTest, MatchesTorch) {
  int cases = 0;
  for (const auto& c : sampler_golden().at("randperm")) {
    if (c.value("large", false)) continue;  // torch_generator_large_test
    const int64_t n = c.at("n").get<int64_t>();
    const uint64_t seed = c.at("seed").get<uint64_t>();
    TorchGenerator gen(seed);
    EXPECT_TRUE(matches_golden(c.at("perm"), torch_randperm(n, gen)))
        << "n " << n << " seed " << seed;
    ++cases;
  }
  EXPECT_GE(cases, 80);
}

TEST(TorchRandpermTest, DrawsNMinusOneOutputs) {
  for (int64_t n : {0, 1, 2, 50}) {
    TorchGenerator a(3), b(3);
    torch_randperm(n, a);
    for (int64_t i = 0; i + 1 < n; ++i) b.random();
    EXPECT_EQ(a.random(), b.random()) << "n " << n;
  }
}

TEST(TorchRandpermTest, IsAPermutation) {
  TorchGenerator gen(11);
  auto p = torch_randperm(1000, gen);
  std::sort(p.begin(), p.end());
  std::vector<int64_t> want(1000);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(p, want);
  EXPECT_THROW(torch_randperm(-1, gen), Error);
}

}  // namespace
}  // namespace dpe
