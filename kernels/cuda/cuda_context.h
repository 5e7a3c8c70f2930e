// CudaContext: what one CUDA device owns below the engine — its compute and copy streams, its
// cuBLAS and cuDNN handles (bound to the compute stream) and a scratch workspace. Plain C++ (the
// CUDA types are passed as void*), so engine code and gcc-compiled files need no CUDA headers.
//
// Design note "blocking streams": both streams are created with cudaStreamDefault flags (not
// cudaStreamNonBlocking), so they synchronise implicitly with the legacy default stream. The
// engine's synchronous copies (cudaMemcpy / cudaMemcpyPeer in device_runtime.cu) and Tensor::fill_
// (stream 0) therefore start after every kernel queued on the compute stream and finish before
// later kernels start: a host read right after a backend call sees its result, and a freed block
// that the caching allocator hands out again is only reused in stream order. This holds as long as
// nothing is compiled with --default-stream per-thread (NVCC_FLAGS does not).
//
// Threading contract: the lazily created resources are created once, thread-safely, on the first
// call that needs them (which also calls cudaSetDevice). workspace() and the event helpers are not
// synchronised: callers serialise their use per device (the CUDA backend holds a per-device lock
// for the duration of a call).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

namespace dpe::cuda {

class CudaContext {
 public:
  explicit CudaContext(int device);
  ~CudaContext();  // destroys what was created; errors are ignored (it may run at exit)
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  void* stream();       // cudaStream_t: the compute stream every launcher uses
  void* copy_stream();  // cudaStream_t: for asynchronous copies, ordered with events (below)
  void* cublas();       // cublasHandle_t on stream(), FP32 math (no TF32), float32 reductions
  void* cudnn();        // cudnnHandle_t on stream()
  // At least `bytes` of device memory, valid until the next workspace() call on this context.
  // Growing waits for the compute stream, then frees the old buffer.
  void* workspace(size_t bytes);

  // Waits for the compute stream.
  void synchronize();
  // Event-based ordering between the two streams (no device-wide synchronisation).
  void copy_waits_for_compute();
  void compute_waits_for_copy();
  // Copies `bytes` from device memory to host memory on the compute stream and waits for it: the
  // read-back of a flag or a scalar a launcher must return to the host.
  void read_back(void* host_dst, const void* device_src, size_t bytes);

 private:
  struct Impl;
  Impl& impl();  // creates the resources on first use

  const int device_;
  std::once_flag once_;
  std::unique_ptr<Impl> impl_;
};

// Lets `device` read and write the memory of every other device that cudaDeviceCanAccessPeer
// allows (cudaDeviceEnablePeerAccess from `device`). Idempotent; sets the current device.
void enable_peer_access_from(int device);

}  // namespace dpe::cuda
