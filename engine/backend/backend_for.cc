// backend_for(): the Backend of each device type (declared in backend.h).
#include "engine/backend/backend.h"
#include "engine/backend/cuda_backend.h"
#include "engine/backend/host_backend.h"

namespace dpe {

Backend& backend_for(Device device) {
  if (device.is_cuda()) return cuda_backend();
  // One HostBackend serves every host device: it holds a HostContext per device index and
  // lives until exit, like the Runtime's DeviceContexts (it is created on first use,
  // thread-safely).
  static HostBackend host;
  return host;
}

}  // namespace dpe
