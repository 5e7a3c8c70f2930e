// Storage: one contiguous block of a device's memory, shared by a tensor and its views, and
// returned to that device's allocator when the last of them is gone. It carries the version
// counter of its data, shared by every view, as PyTorch's views share theirs: a write through any
// view is a write to what the others see.
//
// Threading contract: a Storage may be shared across threads; the version counter and the memory
// category are atomic, the data is the caller's to synchronise (writing one element from two threads is a race).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "engine/device/device_context.h"

namespace dpe {

class Storage {
 public:
  // Counted under the allocating thread's current MemoryCategory.
  Storage(DeviceContext& context, size_t nbytes)
      : context_(&context),
        category_(current_memory_category()),
        nbytes_(nbytes),
        data_(context.allocator().allocate(nbytes, category_)) {}
  ~Storage() {
    if (!released()) context_->allocator().deallocate(data_, nbytes_, category_.load());
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // Sharded data parallel frees a unit's gathered parameters between uses while the autograd
  // graph and the module keep their views (PyTorch's _free_storage/_alloc_storage): release()
  // returns the block to the allocator, rematerialize() takes a new one of the same size, whose
  // contents the caller then writes. The version counter is untouched: the refill restores the
  // values the graph saved. data() is null while released.
  void release() {
    if (data_ == nullptr || nbytes_ == 0) return;
    context_->allocator().deallocate(data_, nbytes_, category_.load());
    data_ = nullptr;
  }
  void rematerialize() {
    if (data_ != nullptr || nbytes_ == 0) return;
    data_ = context_->allocator().allocate(nbytes_, category_.load());
  }
  bool released() const { return data_ == nullptr && nbytes_ != 0; }

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  DeviceContext& context() const { return *context_; }

  MemoryCategory category() const { return category_.load(); }
  // Gives the block a new role in the device's memory breakdown (a gradient that becomes a .grad).
  void set_category(MemoryCategory category) {
    const MemoryCategory from = category_.exchange(category);
    if (!released()) context_->allocator().retag(nbytes_, from, category);
  }

  // Bumped by every in-place write to the data (Tensor::bump_version); autograd compares it with
  // the value it saved when an op recorded a tensor its backward reads (engine/autograd/node.h).
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  DeviceContext* context_;
  std::atomic<MemoryCategory> category_;
  std::atomic<uint64_t> version_{0};
  size_t nbytes_;
  void* data_;
};

}  // namespace dpe
