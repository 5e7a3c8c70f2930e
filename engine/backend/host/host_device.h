// The host device type's DeviceContext: a host device `host:N` owns a HostAllocator, its compute
// thread count (the OpenMP team its kernels use) and the kernels' HostContext (oneDNN engine,
// stream and primitive cache), used under the context's lock. Copies between host devices are real
// memcpys into the other device's memory, so DataParallel's traffic shows in the copy matrix.
//
// Threading contract: every method may be called from any thread; lock_kernels() serialises the
// host backend's calls on one device (calls on different devices run in parallel).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "engine/device/device_context.h"

namespace dpe {

namespace host {
class HostContext;  // kernels/host/host_context.h
}  // namespace host

class HostDeviceContext final : public DeviceContext {
 public:
  HostDeviceContext(int index, int compute_threads, int64_t capacity_bytes);
  ~HostDeviceContext() override;

  void activate_on_this_thread() override;
  void synchronize() override {}
  void empty_cache() override;
  void fill(void* dst, const void* value, size_t elem_size, int64_t n) override;
  void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n) override;
  // Host to host only: another device type copies to and from host memory itself.
  bool copy(DeviceContext& dst_ctx, void* dst, DeviceContext& src_ctx,
            const StridedView& src) override;

  // The kernels' context, held under the returned lock for one backend call.
  std::unique_lock<std::mutex> lock_kernels() { return std::unique_lock<std::mutex>(kernels_mu_); }
  host::HostContext& kernels() { return *kernels_; }

 private:
  std::mutex kernels_mu_;
  std::unique_ptr<host::HostContext> kernels_;
};

// The host context of `ctx`; throws dpe::Error when it belongs to another device type.
HostDeviceContext& as_host(DeviceContext& ctx);

// The compute threads of each of `count` host devices when `requested` is 0: cores / count, at
// least 1.
int default_host_threads(int count, int requested);

}  // namespace dpe
