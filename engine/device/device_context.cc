#include "engine/device/device_context.h"

#include "engine/device/worker.h"

namespace dpe {

StridedView StridedView::bytes(const void* data, size_t bytes) {
  return {data, 1, {static_cast<int64_t>(bytes)}, {1}};
}

int64_t StridedView::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

bool StridedView::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

DeviceContext::DeviceContext(Device device, std::unique_ptr<Allocator> allocator,
                             int compute_threads)
    : device_(device), allocator_(std::move(allocator)), compute_threads_(compute_threads) {}

Worker& DeviceContext::worker() {
  std::call_once(worker_once_, [this] {
    worker_ = std::make_unique<Worker>(this, worker_spin_);
  });
  return *worker_;
}

void DeviceContext::stop_worker() { worker_.reset(); }

DeviceContext::~DeviceContext() { stop_worker(); }

}  // namespace dpe
