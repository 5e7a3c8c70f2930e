#include "engine/backend/host/host_devices.h"

#include "engine/core/error.h"
#include "engine/device/runtime.h"

namespace dpe {

void set_host_devices(const HostDeviceOptions& options) {
  DPE_CHECK(
      options.count >= 1 && options.count <= kMaxHostDevices,
      "host device count must be between 1 and " << kMaxHostDevices << ", got " << options.count);
  DPE_CHECK(options.compute_threads >= 0, "compute threads must be >= 0");
  // Thread counts depend on the device count, so every existing context is re-created lazily.
  if (store_host_device_options(options)) Runtime::get().retire_contexts(DeviceType::kHost);
}

void set_host_device_count(int count) {
  HostDeviceOptions o = host_device_options();
  o.count = count;
  set_host_devices(o);
}

}  // namespace dpe
