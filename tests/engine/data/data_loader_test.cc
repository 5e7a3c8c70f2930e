#include "engine/data/data_loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <set>

#include "engine/core/error.h"
#include "engine/data/distributed_sampler.h"
#include "engine/data/random_dataset.h"
#include "engine/data/sequential_sampler.h"

namespace dpe {
namespace {

// Sample i: input [1] holding i, target the int64 label i. Optionally throws at one index, and
// records which samples were fetched, so tests can watch the prefetch thread.
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(int64_t n, int64_t throw_at = -1) : n_(n), throw_at_(throw_at) {}
  int64_t size() const override { return n_; }
  Example get(int64_t index) const override {
    check_index("IndexDataset", index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      fetched_.insert(index);
    }
    cv_.notify_all();
    DPE_CHECK(index != throw_at_, "IndexDataset: sample " << index << " is broken");
    return Example{Tensor::full(Shape{1}, static_cast<float>(index)),
                   Tensor::from_vector(std::vector<int64_t>{index}, Shape{})};
  }
  // Waits (for an event, not a duration: the timeout only stops a broken test) until sample
  // `index` has been fetched.
  bool wait_fetched(int64_t index) const {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return fetched_.count(index) > 0; });
  }
  bool fetched(int64_t index) const {
    std::lock_guard<std::mutex> lock(mu_);
    return fetched_.count(index) > 0;
  }

 private:
  int64_t n_;
  int64_t throw_at_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::set<int64_t> fetched_;
};

std::vector<int64_t> labels_of(const Batch& b) { return b.target.to_vector<int64_t>(); }

std::vector<std::vector<int64_t>> one_pass(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (Batch& b : loader) out.push_back(labels_of(b));
  return out;
}

using Batches = std::vector<std::vector<int64_t>>;

DataLoaderOptions with(int64_t batch_size, bool shuffle = false, bool drop_last = false,
                       bool prefetch = true) {
  DataLoaderOptions o;
  o.batch_size = batch_size;
  o.shuffle = shuffle;
  o.drop_last = drop_last;
  o.prefetch = prefetch;
  return o;
}

TEST(DataLoaderTest, SeedsRandomDatasetInOneBatch) {
  // The seeds: DataLoader(RandomDataset(5, 100), batch_size=30) -> 30, 30, 30, 10.
  auto data = std::make_shared<RandomDataset>(5, 100);
  DataLoader loader(data, with(30));
  EXPECT_EQ(loader.size(), 4);
  std::vector<Shape> shapes;
  for (Batch& b : loader) {
    shapes.push_back(b.input.shape());
    EXPECT_EQ(b.input.device(), Device());
    EXPECT_FALSE(b.target.defined());
  }
  EXPECT_EQ(shapes, (std::vector<Shape>{{30, 5}, {30, 5}, {30, 5}, {10, 5}}));
}

TEST(DataLoaderTest, SequentialBatchesInOrder) {
  auto data = std::make_shared<IndexDataset>(10);
  for (bool prefetch : {true, false}) {
    DataLoader loader(data, with(4, false, false, prefetch));
    EXPECT_EQ(loader.size(), 3);
    EXPECT_EQ(one_pass(loader), (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
    DataLoader dropping(data, with(4, false, /*drop_last=*/true, prefetch));
    EXPECT_EQ(dropping.size(), 2);
    EXPECT_EQ(one_pass(dropping), (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  }
}

TEST(DataLoaderTest, InputsMatchTargets) {
  auto data = std::make_shared<IndexDataset>(7);
  DataLoader loader(data, with(3, /*shuffle=*/true));
  for (Batch& b : loader) {
    const auto x = b.input.to_vector<float>();
    const auto y = labels_of(b);
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(static_cast<int64_t>(x[i]), y[i]);
  }
}

TEST(DataLoaderTest, ShuffleCoversEverythingAndReshufflesEveryPass) {
  auto data = std::make_shared<IndexDataset>(50);
  DataLoader loader(data, with(8, /*shuffle=*/true));
  std::vector<std::vector<int64_t>> passes;
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> seen;
    for (const auto& b : one_pass(loader)) seen.insert(seen.end(), b.begin(), b.end());
    std::vector<int64_t> sorted = seen;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(50);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted, all);
    passes.push_back(seen);
  }
  EXPECT_NE(passes[0], passes[1]);
  EXPECT_NE(passes[1], passes[2]);
  // Same seed, same sequence of passes; set_epoch(1) replays the second pass.
  DataLoader again(data, with(8, true));
  std::vector<int64_t> first;
  for (const auto& b : one_pass(again)) first.insert(first.end(), b.begin(), b.end());
  EXPECT_EQ(first, passes[0]);
  again.set_epoch(1);
  std::vector<int64_t> second;
  for (const auto& b : one_pass(again)) second.insert(second.end(), b.begin(), b.end());
  EXPECT_EQ(second, passes[1]);
}

TEST(DataLoaderTest, DistributedSamplerSplitsTheDatasetAcrossRanks) {
  auto data = std::make_shared<IndexDataset>(10);
  std::vector<int64_t> seen;
  for (int rank = 0; rank < 3; ++rank) {
    DataLoaderOptions o = with(2);
    auto sampler = std::make_shared<DistributedSampler>(data->size(), 3, rank);
    o.sampler = sampler;
    DataLoader loader(data, o);
    EXPECT_EQ(loader.size(), 2);  // 4 samples per rank
    loader.set_epoch(3);
    EXPECT_EQ(sampler->epoch(), 3);
    std::vector<int64_t> mine;
    for (const auto& b : one_pass(loader)) mine.insert(mine.end(), b.begin(), b.end());
    EXPECT_EQ(mine, sampler->indices());
    // The loader leaves a given sampler's epoch alone between passes.
    one_pass(loader);
    EXPECT_EQ(sampler->epoch(), 3);
    seen.insert(seen.end(), mine.begin(), mine.end());
  }
  std::set<int64_t> distinct(seen.begin(), seen.end());
  EXPECT_EQ(distinct.size(), 10u);  // every index; the 2 extra are padding
  EXPECT_EQ(seen.size(), 12u);
}

TEST(DataLoaderTest, BatchSamplerOption) {
  auto data = std::make_shared<IndexDataset>(5);
  DataLoaderOptions o;
  o.batch_sampler = std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(5), 2, true);
  DataLoader loader(data, o);
  EXPECT_EQ(loader.size(), 2);
  EXPECT_EQ(one_pass(loader), (Batches{{0, 1}, {2, 3}}));
}

TEST(DataLoaderTest, RejectsConflictingOptions) {
  auto data = std::make_shared<IndexDataset>(5);
  DataLoaderOptions o = with(2, /*shuffle=*/true);
  o.sampler = std::make_shared<SequentialSampler>(5);
  EXPECT_THROW(DataLoader(data, o), Error);
  DataLoaderOptions b = with(2);
  b.batch_sampler =
      std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(5), 2, false);
  EXPECT_THROW(DataLoader(data, b), Error);
  EXPECT_THROW(DataLoader(data, with(0)), Error);
  EXPECT_THROW(DataLoader(nullptr, with(1)), Error);
  DataLoaderOptions p = with(1);
  p.prefetch_batches = 0;
  EXPECT_THROW(DataLoader(data, p), Error);
}

TEST(DataLoaderTest, NextApiEndsEachPassOnceThenStartsAnother) {
  auto data = std::make_shared<IndexDataset>(5);
  DataLoader loader(data, with(2));
  for (int epoch = 0; epoch < 2; ++epoch) {
    Batches got;
    while (std::optional<Batch> b = loader.next()) got.push_back(labels_of(*b));
    EXPECT_EQ(got, (Batches{{0, 1}, {2, 3}, {4}})) << "epoch " << epoch;
  }
}

TEST(DataLoaderTest, BeginRestartsAnAbandonedPass) {
  auto data = std::make_shared<IndexDataset>(9);
  DataLoader loader(data, with(2));
  for (Batch& b : loader) {
    EXPECT_EQ(labels_of(b), (std::vector<int64_t>{0, 1}));
    break;
  }
  EXPECT_EQ(one_pass(loader).front(), (std::vector<int64_t>{0, 1}));
}

TEST(DataLoaderTest, PrefetchesTheNextBatchWhileTheCallerWorks) {
  auto data = std::make_shared<IndexDataset>(8);
  DataLoaderOptions o = with(2);
  o.prefetch_batches = 1;
  DataLoader loader(data, o);
  std::optional<Batch> first = loader.next();
  ASSERT_TRUE(first.has_value());
  // Without another call, the background thread fetches batch 1 ({2, 3})...
  EXPECT_TRUE(data->wait_fetched(3));
  // ...and, holding one ready batch, does not run further ahead until it is taken.
  EXPECT_FALSE(data->fetched(5));
  EXPECT_EQ(labels_of(*loader.next()), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(data->wait_fetched(5));
}

TEST(DataLoaderTest, BackgroundExceptionIsRethrownInOrder) {
  for (bool prefetch : {true, false}) {
    SCOPED_TRACE(prefetch ? "prefetch" : "no prefetch");
    auto data = std::make_shared<IndexDataset>(10, /*throw_at=*/5);
    DataLoader loader(data, with(2, false, false, prefetch));
    EXPECT_EQ(labels_of(*loader.next()), (std::vector<int64_t>{0, 1}));
    EXPECT_EQ(labels_of(*loader.next()), (std::vector<int64_t>{2, 3}));
    try {
      loader.next();
      FAIL() << "the broken batch was not reported";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "IndexDataset: sample 5 is broken");
    }
    // The failed pass is over; the next call starts a new one.
    EXPECT_EQ(labels_of(*loader.next()), (std::vector<int64_t>{0, 1}));
  }
}

TEST(DataLoaderTest, DestroyingMidPassJoinsTheThread) {
  auto data = std::make_shared<IndexDataset>(1000);
  for (int round = 0; round < 20; ++round) {
    DataLoaderOptions o = with(3, /*shuffle=*/true);
    o.prefetch_batches = 1 + round % 3;
    DataLoader loader(data, o);
    for (int i = 0; i < round % 4; ++i) ASSERT_TRUE(loader.next().has_value());
  }  // each loader is destroyed with its producer blocked on a full queue or mid-fetch
  std::weak_ptr<IndexDataset> weak = data;
  {
    DataLoader loader(data, with(1));
    data.reset();
    ASSERT_TRUE(loader.next().has_value());  // the loader keeps its dataset alive
  }
  EXPECT_TRUE(weak.expired()) << "the loader leaked its dataset";
}

TEST(DataLoaderTest, EmptyDataset) {
  auto data = std::make_shared<IndexDataset>(0);
  DataLoader loader(data, with(4, true));
  EXPECT_EQ(loader.size(), 0);
  EXPECT_TRUE(one_pass(loader).empty());
  EXPECT_FALSE(loader.next().has_value());
}

}  // namespace
}  // namespace dpe
