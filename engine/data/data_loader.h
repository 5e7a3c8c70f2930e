// DataLoader: batches of a Dataset in the order of a Sampler (PyTorch's
// torch.utils.data.DataLoader), prepared one step ahead on a background thread.
//
// Design note "one pass at a time": a pass (an epoch) starts with begin() or with the first
// next() after the previous pass ended. Its batch index lists are computed on the caller's thread
// when it starts, so set_epoch() affects the next pass, never the one in progress. With prefetch
// on, one background thread per pass calls Dataset::get_batch for the upcoming batches and keeps
// up to prefetch_batches of them ready; an exception there is rethrown by the next() that would
// have returned that batch (the batches before it are delivered first) and ends the pass.
// Abandoning a pass (begin() again or destroying the loader) stops and joins the thread.
//
// Epochs: with shuffle=true the loader's own RandomSampler reshuffles every pass, as PyTorch's
// does: pass k uses epoch e + k, where e is the last set_epoch() value (0 by default). Its order is
// PyTorch's DataLoader(shuffle=True, generator=g) with g seeded once with `seed`, not that of a
// DataLoader without a generator (random_sampler.h says why). A sampler
// given in the options is left alone: call its set_epoch() (or the loader's, which forwards to
// it) before each epoch, as the seeds do with DistributedSampler.
//
// Usage:
//   DataLoaderOptions options;
//   options.batch_size = 30;
//   options.sampler = std::make_shared<DistributedSampler>(dataset->size(), world, rank);
//   DataLoader loader(dataset, options);
//   for (int epoch = 0; epoch < epochs; ++epoch) {
//     loader.set_epoch(epoch);
//     for (Batch& batch : loader) { ... }                  // or: while (auto b = loader.next())
//   }
//
// Batches are created on host:0; callers move them where they are needed.
//
// Threading contract: a DataLoader is driven by one thread at a time (begin, next, set_epoch,
// the destructor). Its background thread only calls the dataset's const get_batch(),
// which must therefore be thread-safe (see dataset.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/data/batch_sampler.h"
#include "engine/data/dataset.h"
#include "engine/data/sampler.h"

namespace dpe {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;  // a RandomSampler seeded with `seed`; excludes `sampler`
  uint64_t seed = 0;
  bool drop_last = false;  // drop the last batch when smaller than batch_size
  // Where the indices come from, e.g. a DistributedSampler; null: sequential or shuffled.
  std::shared_ptr<Sampler> sampler;
  // Ready-made batches of indices; excludes batch_size != 1, shuffle, sampler and drop_last.
  std::shared_ptr<BatchSampler> batch_sampler;
  bool prefetch = true;          // prepare upcoming batches on a background thread
  int64_t prefetch_batches = 2;  // how many ready batches the thread keeps ahead (>= 1)
};

class DataLoader {
 public:
  // Throws dpe::Error on a null dataset, batch_size < 1, prefetch_batches < 1, or option
  // combinations PyTorch rejects (sampler with shuffle; batch_sampler with any batching option).
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  // Stops and joins the background thread, mid-pass included.
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // len(loader): batches per pass.
  int64_t size() const { return batch_sampler_->size(); }
  // Selects the epoch of the next pass; forwards to the sampler.
  void set_epoch(int64_t epoch);
  // The next batch of the current pass, starting a pass when none is in progress; std::nullopt
  // once at the end of each pass. Rethrows an exception raised while preparing the batch.
  std::optional<Batch> next();

  // Input iterator over one pass; begin() abandons any pass in progress and starts a new one.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;

    Batch& operator*() { return *batch_; }
    Batch* operator->() { return &*batch_; }
    Iterator& operator++() {
      batch_ = loader_->next();
      return *this;
    }
    // Iterators compare equal when both are past the end of the pass.
    bool operator==(const Iterator& o) const { return batch_.has_value() == o.batch_.has_value(); }
    bool operator!=(const Iterator& o) const { return !(*this == o); }

   private:
    friend class DataLoader;
    Iterator(DataLoader* loader, std::optional<Batch> batch)
        : loader_(loader), batch_(std::move(batch)) {}
    DataLoader* loader_;
    std::optional<Batch> batch_;
  };
  Iterator begin();
  Iterator end() { return Iterator(this, std::nullopt); }

 private:
  struct Item {
    Batch batch;
    std::exception_ptr error;
  };

  void start_pass();
  void stop_pass();  // joins the producer and forgets the pass
  void produce();    // the background thread's body

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<BatchSampler> batch_sampler_;
  bool owns_sampler_ = false;  // built from shuffle/seed: advances its epoch every pass
  int64_t epoch_ = 0;          // the epoch of the next pass when owns_sampler_

  // The pass in progress. batches_ is written only while no producer runs.
  bool pass_active_ = false;
  std::vector<std::vector<int64_t>> batches_;
  size_t consumed_ = 0;

  // Shared with the producer thread, guarded by mu_.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::thread producer_;
};

}  // namespace dpe
