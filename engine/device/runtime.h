// Runtime: the process's devices (a context per device, created on first use) and the traffic
// between them.
//
// Design note "one registry": the Runtime creates each DeviceContext once, on first use, from its
// device type's registered implementation (device_registry.h), and never destroys it before exit,
// so a DeviceContext& stays valid for the life of the process; code that runs on a device receives
// its context explicitly. It names no device type: how many host devices there are, with how many
// threads, is the host type's business (engine/backend/host/host_devices.h), and CUDA's devices are
// what the driver reports. (The other process-wide objects are stateless tables or caches that live
// as long: one op table per device type, engine/backend/op_table.h; the grad mode is per thread.)
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

// Bytes copied from one device to another, per ordered pair.
using CopyMatrix = std::map<std::pair<Device, Device>, int64_t>;

class Runtime {
 public:
  static Runtime& get();

  // Visible devices of `type` (0 when its library is not linked or none exists), and why.
  int device_count(DeviceType type) const;
  std::string device_status(DeviceType type) const;
  // Every visible device of `type`, in index order.
  std::vector<Device> devices(DeviceType type) const;

  // The context of `device`. Throws dpe::Error naming the device and the valid range.
  DeviceContext& context(Device device);
  // Takes the created contexts of `type` out of use: each is re-created on next use (a device
  // type whose devices change shape calls it; tensors on the old ones stay valid).
  void retire_contexts(DeviceType type);
  // Every created device's allocator gives its cached free blocks back (torch.cuda.empty_cache()
  // for all devices), and malloc returns what it keeps: before starting memory-hungry children.
  void empty_cache();

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

  // The most devices of one type a process may have.
  static constexpr int kMaxDevicesPerType = 1024;

 private:
  Runtime() = default;

  struct TypeContexts {
    std::vector<std::unique_ptr<DeviceContext>> owned;
    // owned's pointers, published for context() to read without mu_: every op allocating a
    // tensor looks its device up, from every device's thread at once, and a lookup through mu_
    // made those threads queue on one lock. Null until created; cleared (under mu_) on retire.
    std::array<std::atomic<DeviceContext*>, kMaxDevicesPerType> published{};
  };

  mutable std::mutex mu_;
  std::array<TypeContexts, kDeviceTypeCount> contexts_;
  // Retired contexts are parked here, not destroyed: tensors may still point at them.
  std::vector<std::unique_ptr<DeviceContext>> retired_;
  CopyMatrix copies_;
};

}  // namespace dpe
