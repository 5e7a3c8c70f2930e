// The CUDA device type's registration with the Runtime (engine/device/device_registry.h): the
// devices the driver reports (CUDA_VISIBLE_DEVICES honoured; none without a GPU or without CUDA in
// the build, cuda_device_stub.cc), each with a CudaDeviceContext.
#include <mutex>
#include <string>

#include "engine/backend/cuda/cuda_device.h"
#include "engine/device/device_registry.h"

namespace dpe::cuda {

namespace {

class CudaDeviceType final : public DeviceTypeImpl {
 public:
  int device_count() override {
    std::call_once(counted_, [this] { count_ = visible_device_count(); });
    return count_;
  }
  std::string status() override { return device_count_status(); }
  std::string unavailable(int index) override {
    return "device cuda:" + std::to_string(index) +
           " is not available: " + std::to_string(device_count()) + " CUDA device(s) visible (" +
           status() + "); host devices remain the default backend";
  }
  std::unique_ptr<DeviceContext> make_context(int index) override {
    return make_device_context(index);
  }

 private:
  std::once_flag counted_;
  int count_ = 0;
};

const bool registered = [] {
  static CudaDeviceType* type = new CudaDeviceType();  // leaked, as the Runtime
  register_device_type(DeviceType::kCuda, *type);
  return true;
}();

}  // namespace

}  // namespace dpe::cuda
