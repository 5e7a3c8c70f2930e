#include "engine/device/device_registry.h"

#include <array>
#include <atomic>

#include "engine/core/error.h"

namespace dpe {

namespace {
std::array<std::atomic<DeviceTypeImpl*>, kDeviceTypeCount>& registry() {
  static std::array<std::atomic<DeviceTypeImpl*>, kDeviceTypeCount> r{};
  return r;
}
}  // namespace

void register_device_type(DeviceType type, DeviceTypeImpl& impl) {
  DeviceTypeImpl* expected = nullptr;
  DPE_CHECK(registry()[static_cast<size_t>(type)].compare_exchange_strong(expected, &impl),
            "register_device_type: " << device_type_name(type) << " is already registered");
}

DeviceTypeImpl* find_device_type(DeviceType type) {
  return registry()[static_cast<size_t>(type)].load(std::memory_order_acquire);
}

}  // namespace dpe
