// Plain C++ wrappers over the CUDA runtime, so that engine code needs no CUDA headers:
// device discovery, memory, copies and synchronisation. Defined only when DPE_WITH_CUDA is set.
#pragma once

#include <cstddef>
#include <string>

namespace dpe::cuda {

// Visible CUDA devices (CUDA_VISIBLE_DEVICES honoured); 0 when there is no GPU or driver.
// Never throws; `status` receives the runtime's explanation when the count is 0.
int device_count(std::string* status);

void set_device(int index);
void* malloc_on(int device, size_t bytes);  // returns nullptr when the device is out of memory
void free_on(int device, void* ptr);
// Copies between host memory (device < 0) and device memory, or between two devices.
void memcpy_between(void* dst, int dst_device, const void* src, int src_device, size_t bytes);
void synchronize(int device);
// The device's total memory in bytes.
size_t total_memory(int device);

}  // namespace dpe::cuda
