// The CUDA device type where dpe is built without CUDA (--config=nocuda or no toolkit): no device
// is visible, and asking for one says why.
#include "engine/backend/cuda/cuda_device.h"
#include "engine/core/error.h"

namespace dpe::cuda {

int visible_device_count() { return 0; }

std::string device_count_status() { return "dpe was built without CUDA (--config=nocuda)"; }

int64_t physical_memory(int physical) { DPE_THROW(device_count_status()); }

std::unique_ptr<DeviceContext> make_device_context(int index, int, int64_t) {
  DPE_THROW("cuda:" << index << " is not available: " << device_count_status());
}

// Unreachable (no CudaDeviceContext exists without CUDA); defined so code that names them links.
int64_t CudaDeviceContext::cached_bytes() const { DPE_THROW(device_count_status()); }
void CudaDeviceContext::empty_cache() { DPE_THROW(device_count_status()); }

CudaDeviceContext& as_cuda(DeviceContext& ctx) {
  DPE_THROW("no CUDA context for " << ctx.device() << ": " << device_count_status());
}

}  // namespace dpe::cuda
