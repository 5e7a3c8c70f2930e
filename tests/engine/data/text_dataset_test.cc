#include "engine/data/text_dataset.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numeric>

#include "engine/core/error.h"
#include "engine/data/data_loader.h"
#include "tests/engine/data/text_test_util.h"

namespace dpe {
namespace {

using testing_text::error_of;

Tensor iota_tokens(int64_t n) {
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  return Tensor::from_vector(ids, Shape{n});
}

TEST(TextDataset, TargetIsTheInputShiftedByOne) {
  const TextDataset ds(iota_tokens(10), /*context=*/3);
  EXPECT_EQ(ds.size(), 3);  // windows start at 0, 3, 6; one starting at 9 has no target
  const Example e = ds.get(2);
  EXPECT_EQ(e.input.shape(), Shape({3}));
  EXPECT_EQ(e.input.dtype(), DType::kInt64);
  EXPECT_EQ(e.input.to_vector<int64_t>(), (std::vector<int64_t>{6, 7, 8}));
  EXPECT_EQ(e.target.to_vector<int64_t>(), (std::vector<int64_t>{7, 8, 9}));
}

TEST(TextDataset, StrideOverlapsWindowsAndSizeCountsOnlyFullTargets) {
  const TextDataset ds(iota_tokens(10), /*context=*/4, /*stride=*/2);
  EXPECT_EQ(ds.size(), 3);  // starts 0, 2, 4: 4 + 4 + 1 = 9 <= 10; start 6 would need 11
  EXPECT_EQ(ds.get(2).target.to_vector<int64_t>(), (std::vector<int64_t>{5, 6, 7, 8}));
  EXPECT_EQ(TextDataset(iota_tokens(5), 4).size(), 1);
  EXPECT_NE(error_of([] { TextDataset(iota_tokens(4), 4); }).find("4 tokens"),
            std::string::npos);
  EXPECT_NE(error_of([] { TextDataset(iota_tokens(10), 0); }).find("positive"), std::string::npos);
  EXPECT_NE(error_of([&] { ds.get(3); }).find("out of range"), std::string::npos);
}

TEST(TextDataset, RejectsTokensThatAreNotInt64Vectors) {
  const std::string msg = error_of([] { TextDataset(Tensor::zeros(Shape{10}), 3); });
  EXPECT_NE(msg.find("int64"), std::string::npos) << msg;
}

TEST(TextDataset, BatchesStackWindowsAsInt64BByT) {
  const TextDataset ds(iota_tokens(20), 4);
  const Batch b = ds.get_batch({3, 0});
  EXPECT_EQ(b.input.shape(), Shape({2, 4}));
  EXPECT_EQ(b.target.shape(), Shape({2, 4}));
  EXPECT_EQ(b.target.dtype(), DType::kInt64);
  EXPECT_EQ(b.input.to_vector<int64_t>(), (std::vector<int64_t>{12, 13, 14, 15, 0, 1, 2, 3}));
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{13, 14, 15, 16, 1, 2, 3, 4}));
  // The base class's stacking of get() agrees with the gather.
  const Batch stacked = ds.Dataset::get_batch({3, 0});
  EXPECT_EQ(stacked.input.to_vector<int64_t>(), b.input.to_vector<int64_t>());
  EXPECT_EQ(stacked.target.to_vector<int64_t>(), b.target.to_vector<int64_t>());
}

TEST(TextDataset, WorksWithTheDataLoader) {
  auto ds = std::make_shared<const TextDataset>(iota_tokens(41), 4);  // 10 windows
  DataLoaderOptions options;
  options.batch_size = 4;
  options.shuffle = true;
  DataLoader loader(ds, options);
  int64_t batches = 0, rows = 0;
  for (const Batch& b : loader) {
    ++batches;
    rows += b.input.size(0);
    EXPECT_EQ(b.input.size(1), 4);
    const auto in = b.input.to_vector<int64_t>();
    const auto tg = b.target.to_vector<int64_t>();
    for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(tg[i], in[i] + 1);
  }
  EXPECT_EQ(batches, 3);
  EXPECT_EQ(rows, 10);
}

TEST(UnigramPerplexity, MatchesAHandComputedValue) {
  // Vocabulary {0, 1, 2, 3}; training counts 3, 1, 0, 0 of 4 tokens; smoothing 1 gives
  // p = (4/8, 2/8, 1/8, 1/8). Validation [0, 1, 2, 0]:
  // exp(-(2 ln(1/2) + ln(1/4) + ln(1/8)) / 4) = exp((2 ln 2 + 2 ln 2 + 3 ln 2) / 4) = 2^(7/4).
  const Tensor train = Tensor::from_vector(std::vector<int64_t>{0, 0, 1, 0}, Shape{4});
  const Tensor valid = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 0}, Shape{4});
  EXPECT_NEAR(unigram_perplexity(train, valid, 4), std::pow(2.0, 7.0 / 4.0), 1e-12);
  // Without smoothing, on tokens seen in training: p = (3/4, 1/4); exp(-(2 ln .75 + ln .25)/3).
  const Tensor seen = Tensor::from_vector(std::vector<int64_t>{0, 1, 0}, Shape{3});
  EXPECT_NEAR(unigram_perplexity(train, seen, 4, 0.0),
              std::exp(-(2 * std::log(0.75) + std::log(0.25)) / 3), 1e-12);
  // A uniform training distribution gives the vocabulary size.
  const Tensor uniform = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3}, Shape{4});
  EXPECT_NEAR(unigram_perplexity(uniform, valid, 4), 4.0, 1e-12);
}

TEST(UnigramPerplexity, ErrorsSayWhatIsWrong) {
  const Tensor train = Tensor::from_vector(std::vector<int64_t>{0, 1}, Shape{2});
  const Tensor unseen = Tensor::from_vector(std::vector<int64_t>{2}, Shape{1});
  EXPECT_NE(error_of([&] { unigram_perplexity(train, unseen, 2); }).find("outside the vocabulary"),
            std::string::npos);
  EXPECT_NE(error_of([&] { unigram_perplexity(train, unseen, 3, 0.0); }).find("never occurs"),
            std::string::npos);
  const Tensor empty = Tensor::empty(Shape{0}, DType::kInt64);
  EXPECT_NE(error_of([&] { unigram_perplexity(train, empty, 2); }).find("empty"),
            std::string::npos);
}

}  // namespace
}  // namespace dpe
