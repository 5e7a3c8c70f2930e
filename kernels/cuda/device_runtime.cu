#include "kernels/cuda/device_runtime.h"

#include "kernels/cuda/cuda_check.h"

namespace dpe::cuda {

int device_count(std::string* status) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    if (status != nullptr) *status = cudaGetErrorString(err);
    return 0;
  }
  if (status != nullptr) *status = count == 0 ? "no CUDA device found" : "ok";
  return count;
}

void set_device(int index) { DPE_CUDA_CHECK(cudaSetDevice(index)); }

void* malloc_on(int device, size_t bytes) {
  set_device(device);
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  DPE_CUDA_CHECK(err);
  return p;
}

void free_on(int device, void* ptr) {
  set_device(device);
  DPE_CUDA_CHECK(cudaFree(ptr));
}

void memcpy_between(void* dst, int dst_device, const void* src, int src_device, size_t bytes) {
  if (dst_device >= 0 && src_device >= 0 && dst_device != src_device) {
    DPE_CUDA_CHECK(cudaMemcpyPeer(dst, dst_device, src, src_device, bytes));
    return;
  }
  set_device(dst_device >= 0 ? dst_device : src_device);
  DPE_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

void synchronize(int device) {
  set_device(device);
  DPE_CUDA_CHECK(cudaDeviceSynchronize());
}

size_t total_memory(int device) {
  set_device(device);
  size_t free_bytes = 0, total_bytes = 0;
  DPE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return total_bytes;
}

}  // namespace dpe::cuda
