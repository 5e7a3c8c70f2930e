// DeviceContext: everything one device owns — its allocator, its worker thread and its number of
// compute threads (host), or its streams and library handles (CUDA). It is handed to kernels
// explicitly; nothing about a device lives in a process-wide variable.
#pragma once

#include <memory>
#include <mutex>

#include "engine/device/allocator.h"
#include "engine/device/device.h"
#include "engine/device/worker.h"

namespace dpe {

class DeviceContext {
 public:
  DeviceContext(Device device, std::unique_ptr<Allocator> allocator, int compute_threads);
  virtual ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  Device device() const { return device_; }
  Allocator& allocator() { return *allocator_; }
  const Allocator& allocator() const { return *allocator_; }
  // Started on first use, so a derived context is fully constructed before its thread runs.
  Worker& worker();
  int compute_threads() const { return compute_threads_; }

  // Called by DeviceGuard on the thread that enters this device: sets the OpenMP thread count
  // that oneDNN and dpe's loops use (host), or the current CUDA device (cuda).
  virtual void activate_on_this_thread();
  // Waits until all work queued on the device (CUDA streams) has finished. No-op on host.
  virtual void synchronize() {}

 private:
  const Device device_;
  std::unique_ptr<Allocator> allocator_;
  const int compute_threads_;
  // Declared last: the worker thread uses the members above and is joined first on destruction.
  std::once_flag worker_once_;
  std::unique_ptr<Worker> worker_;
};

}  // namespace dpe
