// The CUDA side of the device registry: discovery, contexts and copies. Built as stubs that report
// no device when dpe is compiled without CUDA (--config=nocuda or no toolkit).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "engine/device/device_context.h"

namespace dpe::cuda {

// Visible CUDA devices; 0 on a machine without a GPU (never throws).
int visible_device_count();
// Why the count is what it is ("CUDA driver version is insufficient...", "built without CUDA").
std::string device_count_status();
std::unique_ptr<DeviceContext> make_device_context(int index);
// Copies between host memory and CUDA devices or between CUDA devices.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

}  // namespace dpe::cuda
