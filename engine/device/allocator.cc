#include "engine/device/allocator.h"

#include "engine/core/error.h"

namespace dpe {

Allocator::Allocator(Device device, int64_t capacity_bytes)
    : device_(device), capacity_(capacity_bytes) {
  stats_.capacity_bytes = capacity_bytes;
}

void Allocator::note_category_peak(MemoryCategory category) {
  const size_t c = static_cast<size_t>(category);
  if (stats_.current_by_category[c] > stats_.peak_by_category[c])
    stats_.peak_by_category[c] = stats_.current_by_category[c];
  const int64_t states = model_states(stats_.current_by_category);
  if (states > stats_.peak_model_state_bytes) stats_.peak_model_state_bytes = states;
}

void Allocator::reserve(int64_t bytes, MemoryCategory category) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = stats_.current_bytes + bytes;
  if (capacity_ > 0 && now > capacity_) {
    detail::MessageBuilder mb;
    mb << "out of memory on " << device_ << ": tried to allocate " << bytes << " bytes ("
       << format_bytes(bytes) << ") with " << (capacity_ - stats_.current_bytes)
       << " bytes free of a capacity of " << capacity_ << " bytes (" << format_bytes(capacity_)
       << ")";
    throw OutOfMemoryError(mb.str());
  }
  stats_.current_bytes = now;
  stats_.current_by_category[static_cast<size_t>(category)] += bytes;
  note_category_peak(category);
  if (now > stats_.peak_bytes) {
    stats_.peak_bytes = now;
    stats_.at_peak_by_category = stats_.current_by_category;
  }
}

void Allocator::release(int64_t bytes, MemoryCategory category) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.current_bytes -= bytes;
  stats_.current_by_category[static_cast<size_t>(category)] -= bytes;
}

void* Allocator::allocate(size_t bytes, MemoryCategory category) {
  reserve(static_cast<int64_t>(bytes), category);
  void* p = nullptr;
  try {
    p = raw_allocate(bytes);
  } catch (...) {
    release(static_cast<int64_t>(bytes), category);
    throw;
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.allocations;
  return p;
}

void Allocator::deallocate(void* ptr, size_t bytes, MemoryCategory category) {
  if (ptr == nullptr) return;
  raw_deallocate(ptr, bytes);
  release(static_cast<int64_t>(bytes), category);
}

void Allocator::retag(size_t bytes, MemoryCategory from, MemoryCategory to) {
  if (from == to || bytes == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.current_by_category[static_cast<size_t>(from)] -= static_cast<int64_t>(bytes);
  stats_.current_by_category[static_cast<size_t>(to)] += static_cast<int64_t>(bytes);
  note_category_peak(to);
}

MemoryStats Allocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Allocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes = stats_.current_bytes;
  stats_.at_peak_by_category = stats_.current_by_category;
  stats_.peak_by_category = stats_.current_by_category;
  stats_.peak_model_state_bytes = model_states(stats_.current_by_category);
}

}  // namespace dpe
