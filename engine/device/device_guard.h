// DeviceGuard: makes a device current on the calling thread for a scope, then restores the previous
// one: the host device's compute-thread count (OpenMP) or the CUDA device (cudaSetDevice).
// Set at the start of every task and op, since thread pools (oneTBB, OpenMP) reuse threads.
//
// Threading contract: a guard belongs to the thread that made it and is destroyed there.
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
  int previous_threads_;
};

}  // namespace dpe
