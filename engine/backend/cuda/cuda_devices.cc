// The CUDA device type's registration with the Runtime (engine/device/device_registry.h): the
// devices the driver reports (CUDA_VISIBLE_DEVICES honoured; none without a GPU or without CUDA in
// the build, cuda_device_stub.cc), each with a CudaDeviceContext.
//
// Design note "logical devices": DPE_CUDA_LOGICAL_DEVICES=N presents each physical GPU as N dpe
// devices (cuda:0..N-1 on the first GPU, cuda:N..2N-1 on the second, ...), each with its own
// context: its streams, cuBLAS and cuDNN handles, caching allocator and memory cap
// (DPE_CUDA_DEVICE_MEMORY, default the GPU's memory / N). DataParallel's whole multi-device path
// (replicate, scatter, per-device workers, gather, reduce-add) and the imbalance report then run on
// one GPU: copies between them are device-to-device copies, and each device's peak is its own.
// They share the GPU's compute, so a step's time is not that of N GPUs; NCCL refuses two ranks on
// one GPU, so DDP over NCCL needs physical GPUs.
#include <cstdlib>
#include <mutex>
#include <string>

#include "engine/backend/cuda/cuda_device.h"
#include "engine/core/error.h"
#include "engine/device/device_registry.h"
#include "engine/device/memory_stats.h"

namespace dpe::cuda {

namespace {

constexpr long kMaxLogicalDevices = 64;

// DPE_CUDA_LOGICAL_DEVICES: dpe devices per physical GPU (1 when unset).
int logical_per_gpu() {
  const char* text = std::getenv("DPE_CUDA_LOGICAL_DEVICES");
  if (text == nullptr || *text == '\0') return 1;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  DPE_CHECK(end != nullptr && *end == '\0' && v >= 1 && v <= kMaxLogicalDevices,
            "DPE_CUDA_LOGICAL_DEVICES='" << text << "' is not a whole number between 1 and "
                                         << kMaxLogicalDevices);
  return static_cast<int>(v);
}

class CudaDeviceType final : public DeviceTypeImpl {
 public:
  int device_count() override {
    std::call_once(counted_, [this] {
      physical_ = visible_device_count();
      per_gpu_ = physical_ > 0 ? logical_per_gpu() : 1;
    });
    return physical_ * per_gpu_;
  }
  std::string status() override { return device_count_status(); }
  std::string unavailable(int index) override {
    return "device cuda:" + std::to_string(index) +
           " is not available: " + std::to_string(device_count()) + " CUDA device(s) visible (" +
           status() + "); host devices remain the default backend";
  }
  std::unique_ptr<DeviceContext> make_context(int index) override {
    device_count();
    const int physical = index / per_gpu_;
    int64_t capacity = 0;
    if (const char* mem = std::getenv("DPE_CUDA_DEVICE_MEMORY"); mem != nullptr && *mem != '\0') {
      capacity = parse_memory_size(mem, "DPE_CUDA_DEVICE_MEMORY");
      DPE_CHECK(capacity > 0, "DPE_CUDA_DEVICE_MEMORY='" << mem << "' is not a capacity");
    } else if (per_gpu_ > 1) {
      capacity = physical_memory(physical) / per_gpu_;
    }
    return make_device_context(index, physical, capacity);
  }

 private:
  std::once_flag counted_;
  int physical_ = 0;
  int per_gpu_ = 1;
};

const bool registered = [] {
  static CudaDeviceType* type = new CudaDeviceType();  // leaked, as the Runtime
  register_device_type(DeviceType::kCuda, *type);
  return true;
}();

}  // namespace

}  // namespace dpe::cuda
