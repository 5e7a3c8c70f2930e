#include "engine/data/data_loader.h"

#include "engine/core/error.h"
#include "engine/data/random_sampler.h"
#include "engine/data/sequential_sampler.h"

namespace dpe {

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  DPE_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  DPE_CHECK(options_.prefetch_batches >= 1,
            "DataLoader: prefetch_batches must be at least 1, got " << options_.prefetch_batches);
  if (options_.batch_sampler) {
    DPE_CHECK(
        options_.batch_size == 1 && !options_.shuffle && !options_.sampler && !options_.drop_last,
        "DataLoader: batch_sampler option is mutually exclusive with batch_size, "
        "shuffle, sampler, and drop_last");
    batch_sampler_ = options_.batch_sampler;
    return;
  }
  DPE_CHECK(options_.batch_size >= 1,
            "DataLoader: batch_size should be a positive integer value, but got batch_size="
                << options_.batch_size);
  std::shared_ptr<Sampler> sampler = options_.sampler;
  if (sampler) {
    DPE_CHECK(!options_.shuffle, "DataLoader: sampler option is mutually exclusive with shuffle");
  } else if (options_.shuffle) {
    // torch.utils.data.DataLoader(shuffle=True, generator=g) with g seeded by options_.seed: its
    // passes draw one extra number each (the base seed), which kDataLoader reproduces.
    sampler = std::make_shared<RandomSampler>(dataset_->size(), options_.seed,
                                              RandomSampler::Order::kDataLoader);
    owns_sampler_ = true;
  } else {
    sampler = std::make_shared<SequentialSampler>(dataset_->size());
    owns_sampler_ = true;
  }
  batch_sampler_ =
      std::make_shared<BatchSampler>(std::move(sampler), options_.batch_size, options_.drop_last);
}

DataLoader::~DataLoader() { stop_pass(); }

void DataLoader::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  batch_sampler_->set_epoch(epoch);
}

DataLoader::Iterator DataLoader::begin() {
  stop_pass();
  return Iterator(this, next());
}

void DataLoader::start_pass() {
  stop_pass();
  if (owns_sampler_) batch_sampler_->set_epoch(epoch_++);
  batches_ = batch_sampler_->batches();
  consumed_ = 0;
  if (options_.prefetch && !batches_.empty()) {
    try {
      producer_ = std::thread([this] { produce(); });
    } catch (...) {
      batches_.clear();  // no pass without its producer: next() would wait for it forever
      throw;
    }
  }
  pass_active_ = true;
}

void DataLoader::stop_pass() {
  if (producer_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    producer_.join();
  }
  // The producer has exited: nothing else touches the queue now.
  queue_.clear();
  stop_ = false;
  batches_.clear();
  consumed_ = 0;
  pass_active_ = false;
}

void DataLoader::produce() {
  const size_t depth = static_cast<size_t>(options_.prefetch_batches);
  for (const std::vector<int64_t>& indices : batches_) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || queue_.size() < depth; });
      if (stop_) return;
    }
    Item item;
    try {
      item.batch = dataset_->get_batch(indices);
    } catch (...) {
      item.error = std::current_exception();
    }
    const bool failed = item.error != nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      queue_.push_back(std::move(item));
    }
    cv_.notify_all();
    if (failed) return;
  }
}

std::optional<Batch> DataLoader::next() {
  if (!pass_active_) start_pass();
  if (consumed_ == batches_.size()) {
    stop_pass();
    return std::nullopt;
  }
  if (!options_.prefetch) {
    try {
      Batch batch = dataset_->get_batch(batches_[consumed_]);
      ++consumed_;
      return batch;
    } catch (...) {
      stop_pass();
      throw;
    }
  }
  Item item;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // The producer pushes every batch of the pass, or an error, before it exits.
    cv_.wait(lock, [&] { return !queue_.empty(); });
    item = std::move(queue_.front());
    queue_.pop_front();
  }
  cv_.notify_all();
  if (item.error) {
    stop_pass();
    std::rethrow_exception(item.error);
  }
  ++consumed_;
  return std::move(item.batch);
}

}  // namespace dpe
