#include "tools/common/devices.h"

#include "engine/device/runtime.h"
#include "tools/common/exit_codes.h"

namespace dpe::tools {

DeviceType parse_device_type(const std::string& text) {
  if (text == "host" || text == "cpu") return DeviceType::kHost;
  if (text == "cuda") return DeviceType::kCuda;
  DPE_TOOLS_CHECK(UsageError, false, "--device " << text << " is not a device type (host or cuda)");
  return DeviceType::kHost;
}

std::vector<Device> tool_devices(DeviceType type, int count) {
  if (type == DeviceType::kCuda) {
    Runtime& rt = Runtime::get();
    const int visible = rt.device_count(DeviceType::kCuda);
    DPE_TOOLS_CHECK(UsageError, visible >= count,
                    "--device cuda needs "
                        << count << " CUDA device(s), and " << visible << " are available ("
                        << rt.device_status(DeviceType::kCuda)
                        << "); DPE_CUDA_LOGICAL_DEVICES=N presents one GPU as N devices");
  }
  std::vector<Device> out;
  for (int i = 0; i < count; ++i) out.emplace_back(type, i);
  return out;
}

Device tool_cuda_device(int index) { return tool_devices(DeviceType::kCuda, index + 1).back(); }

}  // namespace dpe::tools
