// The device-type registry: how the Runtime knows device types without naming any. Each type's
// library (engine/backend/host, engine/backend/cuda) registers a DeviceTypeImpl when it loads,
// as PyTorch's C10_REGISTER_GUARD_IMPL does; the Runtime asks it how many devices there are and
// for each device's context.
//
// Threading contract: register_device_type at static initialisation; find_device_type from any
// thread; a DeviceTypeImpl's methods may be called from any thread.
#pragma once

#include <memory>
#include <string>

#include "engine/device/device.h"
#include "engine/device/device_context.h"

namespace dpe {

class DeviceTypeImpl {
 public:
  virtual ~DeviceTypeImpl() = default;
  // Devices of this type visible now (0 where none exists). Throws only for a bad setting (the
  // host type's DPE_HOST_DEVICES).
  virtual int device_count() = 0;
  // Why the count is what it is ("ok", "CUDA driver version is insufficient ...").
  virtual std::string status() = 0;
  // The error for device `index` when it is at or past device_count(): names the visible range
  // and what gives more.
  virtual std::string unavailable(int index) = 0;
  // A new context for device `index` (< device_count()); the Runtime calls it once per device.
  virtual std::unique_ptr<DeviceContext> make_context(int index) = 0;
};

// Registers the implementation of `type`; once per type, before main.
void register_device_type(DeviceType type, DeviceTypeImpl& impl);
// The implementation of `type`, or null when its library is not linked.
DeviceTypeImpl* find_device_type(DeviceType type);

}  // namespace dpe
