// Storage: one contiguous block of a device's memory, shared by a tensor and its views, and
// returned to that device's allocator when the last of them is gone.
#pragma once

#include <cstddef>

#include "engine/device/device_context.h"

namespace dpe {

class Storage {
 public:
  Storage(DeviceContext& context, size_t nbytes)
      : context_(&context), nbytes_(nbytes), data_(context.allocator().allocate(nbytes)) {}
  ~Storage() { context_->allocator().deallocate(data_, nbytes_); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  DeviceContext& context() const { return *context_; }

 private:
  DeviceContext* context_;
  size_t nbytes_;
  void* data_;
};

}  // namespace dpe
