#include "engine/backend/host/host_device.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "engine/backend/host/host_allocator.h"
#include "engine/core/error.h"
#include "kernels/host/convert.h"
#include "kernels/host/copy.h"
#include "kernels/host/host_context.h"

namespace dpe {

HostDeviceContext::HostDeviceContext(int index, int compute_threads, int64_t capacity_bytes)
    : DeviceContext(
          Device(DeviceType::kHost, index),
          std::make_unique<HostAllocator>(Device(DeviceType::kHost, index), capacity_bytes),
          compute_threads),
      kernels_(std::make_unique<host::HostContext>()) {}

HostDeviceContext::~HostDeviceContext() { stop_worker(); }

void HostDeviceContext::empty_cache() {
  static_cast<HostAllocator&>(allocator()).release_cache();
}

void HostDeviceContext::activate_on_this_thread() { omp_set_num_threads(compute_threads()); }

void HostDeviceContext::fill(void* dst, const void* value, size_t elem_size, int64_t n) {
  host::fill(dst, value, elem_size, n);
}

void HostDeviceContext::convert(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                                int64_t n) {
  host::convert(dst, dst_dtype, src, src_dtype, n);
}

bool HostDeviceContext::copy(DeviceContext& dst_ctx, void* dst, DeviceContext& src_ctx,
                             const StridedView& src) {
  if (!dst_ctx.device().is_host() || !src_ctx.device().is_host()) return false;
  if (src.is_contiguous()) {
    std::memcpy(dst, src.data, static_cast<size_t>(src.numel()) * src.elem_size);
  } else {
    host::strided_copy(dst, src.data, src.elem_size, static_cast<int>(src.sizes.size()),
                       src.sizes.data(), src.strides.data());
  }
  return true;
}

HostDeviceContext& as_host(DeviceContext& ctx) {
  // Every host device's context is a HostDeviceContext (the Runtime creates them).
  DPE_CHECK(ctx.device().is_host(), "expected the context of a host device, got " << ctx.device());
  return static_cast<HostDeviceContext&>(ctx);
}

int default_host_threads(int count, int requested) {
  if (requested > 0) return requested;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, count));
}

}  // namespace dpe
