#include "engine/device/cuda_device.h"

#include "engine/core/error.h"

#if DPE_WITH_CUDA
#include "kernels/cuda/device_runtime.h"
#endif

namespace dpe::cuda {

#if DPE_WITH_CUDA

namespace {

class CudaAllocator final : public Allocator {
 public:
  using Allocator::Allocator;

 protected:
  void* raw_allocate(size_t bytes) override {
    void* p = malloc_on(device().index(), bytes);
    DPE_CHECK(p != nullptr, "out of memory on " << device() << ": cudaMalloc refused " << bytes
                                                << " bytes");
    return p;
  }
  void raw_deallocate(void* ptr, size_t) override { free_on(device().index(), ptr); }
};

class CudaDeviceContext final : public DeviceContext {
 public:
  explicit CudaDeviceContext(int index)
      : DeviceContext(Device(DeviceType::kCuda, index),
                      std::make_unique<CudaAllocator>(Device(DeviceType::kCuda, index), 0), 1) {}
  void activate_on_this_thread() override { set_device(device().index()); }
  void synchronize() override { cuda::synchronize(device().index()); }
};

}  // namespace

int visible_device_count() { return device_count(nullptr); }

std::string device_count_status() {
  std::string status;
  device_count(&status);
  return status;
}

std::unique_ptr<DeviceContext> make_device_context(int index) {
  return std::make_unique<CudaDeviceContext>(index);
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  memcpy_between(dst, dst_device.is_cuda() ? dst_device.index() : -1, src,
                 src_device.is_cuda() ? src_device.index() : -1, bytes);
}

#else  // built without CUDA

int visible_device_count() { return 0; }

std::string device_count_status() { return "dpe was built without CUDA (--config=nocuda)"; }

std::unique_ptr<DeviceContext> make_device_context(int index) {
  DPE_THROW("cuda:" << index << " is not available: " << device_count_status());
}

void copy_bytes(void*, Device dst_device, const void*, Device src_device, size_t) {
  DPE_THROW("cannot copy from " << src_device << " to " << dst_device << ": "
                                << device_count_status());
}

#endif

}  // namespace dpe::cuda
