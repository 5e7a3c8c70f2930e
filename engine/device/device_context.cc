#include "engine/device/device_context.h"

#include <omp.h>

namespace dpe {

DeviceContext::DeviceContext(Device device, std::unique_ptr<Allocator> allocator,
                             int compute_threads)
    : device_(device),
      allocator_(std::move(allocator)),
      compute_threads_(compute_threads) {}

Worker& DeviceContext::worker() {
  std::call_once(worker_once_, [this] { worker_ = std::make_unique<Worker>(this, compute_threads_); });
  return *worker_;
}

DeviceContext::~DeviceContext() { worker_.reset(); }

void DeviceContext::activate_on_this_thread() { omp_set_num_threads(compute_threads_); }

}  // namespace dpe
