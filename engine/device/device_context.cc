#include "engine/device/device_context.h"

namespace dpe {

DeviceContext::DeviceContext(Device device, std::unique_ptr<Allocator> allocator,
                             int compute_threads)
    : device_(device),
      allocator_(std::move(allocator)),
      compute_threads_(compute_threads),
      worker_(std::make_unique<Worker>(this, compute_threads)) {}

DeviceContext::~DeviceContext() { worker_.reset(); }

}  // namespace dpe
