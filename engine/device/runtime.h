// Runtime: the registry of devices in this process and the traffic between them.
//
// Design note "one registry": the Runtime is the process-wide registry of devices. It creates each
// DeviceContext once, on first use, from its device type's folder (engine/backend/host,
// engine/backend/cuda), and never destroys it before exit, so a DeviceContext& stays valid for the
// life of the process; code that runs on a device receives its context explicitly. (The other
// process-wide objects are stateless tables or caches that live as long: one Backend per device
// type, engine/backend/backend.h; the grad mode is per thread.)
//
// Host devices are the default backend. Their count comes from set_host_device_count() or the
// environment (DPE_HOST_DEVICES, default 2); DPE_HOST_THREADS sets compute threads per device
// (default: cores / devices, at least 1); DPE_HOST_DEVICE_MEMORY (e.g. 512MiB, at least 1 byte;
// unset: no cap) caps each device. Their workers spin 2 ms before sleeping when the devices'
// threads fit the cores, else not at all; DPE_HOST_SPIN_US overrides (Worker, "hand-offs").
// CUDA devices are discovered at run time (CUDA_VISIBLE_DEVICES honoured); 0 without a GPU.
//
// Threading contract: every method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/device/device.h"
#include "engine/device/device_context.h"

namespace dpe {

struct HostDeviceOptions {
  int count = 2;
  int compute_threads = 0;     // 0: cores / count, at least 1
  int64_t capacity_bytes = 0;  // 0: unlimited
};

// Bytes copied from one device to another, per ordered pair.
using CopyMatrix = std::map<std::pair<Device, Device>, int64_t>;

class Runtime {
 public:
  static Runtime& get();

  // Reads DPE_HOST_DEVICES, DPE_HOST_THREADS and DPE_HOST_DEVICE_MEMORY. Throws on bad values.
  static HostDeviceOptions host_options_from_env();

  int host_device_count() const;
  int cuda_device_count() const;
  // Why cuda_device_count() is what it is ("CUDA driver version is insufficient...", "ok").
  std::string cuda_status() const;
  // Makes host:0..count-1 the visible host devices. Devices created before keep their state;
  // a device whose options change is re-created once nothing uses it (tests only).
  void set_host_devices(const HostDeviceOptions& options);
  void set_host_device_count(int count);
  HostDeviceOptions host_options() const;

  // The context of `device`. Throws dpe::Error naming the device and the valid range.
  DeviceContext& context(Device device);
  // Every visible device of the default backend: host devices (CUDA ones only on request).
  std::vector<Device> host_devices() const;
  // Every created device's allocator gives its cached free blocks back (torch.cuda.empty_cache()
  // for all devices), and malloc returns what it keeps: before starting memory-hungry children.
  void empty_cache();
  std::vector<Device> cuda_devices() const;

  // Copies the view `src` (in the memory of src_ctx's device) into contiguous memory at dst (in
  // dst_ctx's device) through the device interface of either side, and counts the bytes in the
  // copy matrix when the devices differ. Throws when neither device type can do the pair.
  void copy(DeviceContext& dst_ctx, void* dst, DeviceContext& src_ctx, const StridedView& src);
  // The same for `bytes` contiguous bytes.
  void copy(DeviceContext& dst_ctx, void* dst, DeviceContext& src_ctx, const void* src,
            size_t bytes);
  void record_copy(Device src, Device dst, int64_t bytes);
  CopyMatrix copy_matrix() const;
  int64_t copied_bytes(Device src, Device dst) const;
  void reset_copy_stats();

  // The most host devices a process may have (set_host_devices, DPE_HOST_DEVICES).
  static constexpr int kMaxHostDevices = 1024;

 private:
  Runtime();

  mutable std::mutex mu_;
  HostDeviceOptions host_options_;
  std::vector<std::unique_ptr<DeviceContext>> host_contexts_;
  // host_contexts_' pointers, published for context() to read without mu_: every op allocating a
  // tensor looks its device up, from every device's thread at once, and a lookup through mu_ made
  // those threads queue on one lock. Null until created; cleared (under mu_) when the contexts are
  // retired.
  std::array<std::atomic<DeviceContext*>, kMaxHostDevices> host_published_{};
  // Replaced contexts are parked here, not destroyed: tensors may still point at them.
  std::vector<std::unique_ptr<DeviceContext>> retired_;
  std::vector<std::unique_ptr<DeviceContext>> cuda_contexts_;
  mutable int cuda_count_ = -1;
  CopyMatrix copies_;
};

}  // namespace dpe
