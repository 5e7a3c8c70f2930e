// DeviceGuard: sets the calling thread's current device for a scope and restores the previous one.
// Set at the start of every task, since thread pools (oneTBB, OpenMP) reuse threads.
#pragma once

namespace dpe {

class DeviceContext;

// The current thread's device context, or nullptr when none is set.
DeviceContext* current_device_context();

class DeviceGuard {
 public:
  explicit DeviceGuard(DeviceContext* context);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  DeviceContext* previous_;
};

}  // namespace dpe
